"""strait-run --eval-data: held-out loss from the forward steps of the training program.

- The loss is right: on an eval file of exactly one window (T + 1 tokens, so every batch row
  is that window) after one step at learning rate 1e-20 (the weights are still the model's), the
  eval loss of a 2-stage x 2-replica job equals onnxruntime's cross-entropy of the ONNX model
  on that window.
- Evaluation changes nothing: a job that evaluates every 2 steps (int8 on its pipeline cut)
  ends with the same parameters, bit for bit, and prints the same training losses as the job
  that does not.
- Misuse is an error naming the flag.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from jobutil import (GPT2_TINY, STRAIT_RUN, STRAITC, cpu_cluster, needs_gpt2_tiny, run,
                     saved_params, write_tokens)

pytestmark = needs_gpt2_tiny()

T = 32
CLUSTER = cpu_cluster("eval-4", [("d0", "a", "east"), ("d1", "a", "east"),
                                 ("d2", "b", "west"), ("d3", "b", "west")],
                      "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
                      "  hosts:\n    - {between: [a, b], bandwidth_mbps: 100, latency_ms: 1}\n")


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval")
    (d / "cluster.yaml").write_text(CLUSTER)
    base = [STRAITC, GPT2_TINY, "--input-shape", f"input_ids=4x{T}", "--loss", "cross-entropy",
            "--optimizer", "adamw", "--cluster", str(d / "cluster.yaml"), "--global-batch", "8",
            "--num-stages", "2"]
    run(base + ["-o", str(d / "job")])
    run(base + ["--compress", "int8", "-o", str(d / "job-int8")])
    train = write_tokens(d / "train.bin", seed=3, n=1 << 14)
    val = write_tokens(d / "val.bin", seed=4, n=1 << 12)
    one = write_tokens(d / "one-window.bin", seed=9, n=T + 1)
    return d, train, val, one


def strait_run(job, *args):
    return subprocess.run([STRAIT_RUN, str(job), "--threads", "1", "--timeout-ms", "60000",
                           *map(str, args)], capture_output=True, text=True, timeout=300)


def test_eval_loss_equals_onnxruntime(setup):
    ort = pytest.importorskip("onnxruntime")
    d, train, _, one = setup
    p = strait_run(d / "job", "--steps", "1", "--lr", "1e-20", "--data", train, "--eval-data", one,
                   "--eval-batches", "2")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    m = re.search(r"^eval after step 1/1: loss (\S+) \((\d+) tokens\)", p.stdout, re.M)
    assert m, p.stdout[-2000:]
    assert int(m.group(2)) == 2 * 8 * T  # 2 batches of the global batch of 8 windows
    ids = np.frombuffer(one.read_bytes(), dtype="<u2").astype(np.int64)
    sess = ort.InferenceSession(GPT2_TINY, providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"input_ids": ids[None, :T]})[0][0].astype(np.float64)
    logits -= logits.max(axis=1, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=1, keepdims=True))
    reference = -logp[np.arange(T), ids[1:]].mean()
    assert float(m.group(1)) == pytest.approx(reference, rel=1e-4)
    # Each last-stage rank reported it (the replicas read the same single window).
    for r in (2, 3):
        log = (d / "job" / "logs" / f"rank{r}.log").read_text()
        got = re.search(r"^rank \d eval 1/1 time \S+ ms loss (\S+)", log, re.M)
        assert got and float(got.group(1)) == pytest.approx(reference, rel=1e-4), log[-1500:]


def test_eval_changes_nothing(setup, tmp_path):
    d, train, val, _ = setup
    runs = {}
    for name, extra in (("plain", []), ("eval", ["--eval-data", val, "--eval-every", "2"])):
        p = strait_run(d / "job-int8", "--steps", "6", "--lr", "0.003", "--data", train,
                       "--save-params", tmp_path / name, *extra)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        runs[name] = (re.findall(r"^step \d+/6 loss (\S+)", p.stdout, re.M),
                      saved_params(tmp_path / name), p.stdout)
    assert len(runs["plain"][0]) == 6 and runs["plain"][0] == runs["eval"][0]
    evals = [float(x) for x in re.findall(r"^eval after step \d/6: loss (\S+)", runs["eval"][2],
                                          re.M)]
    assert len(evals) == 3 and all(np.isfinite(evals)), runs["eval"][2][-2000:]
    assert "eval after" not in runs["plain"][2]
    a, b = runs["plain"][1], runs["eval"][1]
    assert sorted(a) == sorted(b)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)


@pytest.mark.parametrize("args, expect", [
    (["--eval-data", "VAL"], r"--eval-data needs --data"),
    (["--data", "TRAIN", "--eval-data", "VAL", "--eval-labels", "VAL"],
     r"--eval-labels is for npy data"),
    (["--data", "TRAIN", "--eval-data", "MISSING"], r"no-such.bin"),
])
def test_eval_misuse_is_an_error(setup, args, expect):
    d, train, val, _ = setup
    names = {"VAL": str(val), "TRAIN": str(train), "MISSING": str(d / "no-such.bin")}
    p = strait_run(d / "job", "--steps", "1", *[names.get(a, a) for a in args])
    assert p.returncode != 0
    assert re.search(expect, p.stdout + p.stderr), p.stderr[-3000:]


def test_step_loss_is_the_mean_over_micro_batches(setup, tmp_path):
    """With 2 micro-batches the `loss` output (the progress line's) is the mean of both
    micro-batches' losses, not the last one's: onnxruntime's cross-entropy over all the
    step's rows, at learning rate 1e-20 (the model's weights)."""
    ort = pytest.importorskip("onnxruntime")
    d, train, _, _ = setup
    run([STRAITC, GPT2_TINY, "--input-shape", f"input_ids=4x{T}", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--micro-batches", "2", "-o", str(tmp_path / "job")])
    p = strait_run(tmp_path / "job", "--steps", "1", "--lr", "1e-20", "--data", train,
                   "--dump-outputs", tmp_path / "out")
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    ids = np.load(tmp_path / "out" / "input_ids.rank0.npy")
    labels = np.load(tmp_path / "out" / "labels.rank0.npy")
    loss = float(np.load(tmp_path / "out" / "loss.rank0.npy"))
    assert ids.shape == (8, T)  # both micro-batches, stacked
    sess = ort.InferenceSession(GPT2_TINY, providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"input_ids": ids.astype(np.int64)})[0].astype(np.float64)
    logits -= logits.max(axis=2, keepdims=True)
    logp = logits - np.log(np.exp(logits).sum(axis=2, keepdims=True))
    per_row = -np.take_along_axis(logp, labels[..., None].astype(np.int64), axis=2)[..., 0]
    per_row = per_row.mean(axis=1)
    assert loss == pytest.approx(per_row.mean(), rel=1e-4)
    # ... and not the last micro-batch's alone (the rows differ enough to tell).
    assert abs(per_row[4:].mean() - per_row.mean()) > 1e-3 * per_row.mean()
