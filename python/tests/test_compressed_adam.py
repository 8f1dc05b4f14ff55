"""Compressed AdamW (straitc --compressed-adam N): N exact warm-up steps, then AdamW's second
moment frozen and the gradient all-reduce compressed with error feedback.

The job: gpt2-tiny data-parallel on 2 ranks of two hosts (the flat all-reduce carries the
codec), --compress topk:0.01:int8 --compressed-adam 3, 6 steps with a checkpoint after every
step (parameters, m, v, error-feedback residuals). References:
  - steps 1-3 reduce exact f32 values: each sends the plain ring's 4 bytes per parameter, and
    the checkpoint of step 3 equals, bit for bit, that of plain AdamW without a codec (same data);
  - steps 4-6 send top-k payloads (>150x fewer bytes); v stays bit-identical to step 3's;
  - numpy: each compressed step's averaged gradient g = (m_t - beta1 m_{t-1}) / (1 - beta1) is
    nonzero on at most the two ranks' 2k kept positions (m_t = beta1 m_{t-1} exactly elsewhere),
    and the parameters follow AdamW with the frozen v and its bias correction 1 - beta2^3:
    p_t = p_{t-1} - lr (m_t / (1 - beta1^t)) / (sqrt(v_3 / (1 - beta2^3)) + eps), to 1e-5;
  - resuming from the checkpoints of step 2 (inside the warm-up) and step 4 ends bit-identical
    to the uninterrupted run;
  - bad flags fail naming the flag, a program whose all-reduce has exact_steps but no "step"
    input fails to load naming the step and rank; --compress auto with AdamW gives the
    gradients int4 on a slow link, and top-k once --compressed-adam freezes the second moment.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from jobutil import (GPT2_TINY, PROTO_DIR, STRAITC, STRAIT_RUN, cpu_cluster, needs_gpt2_tiny, run,
                     write_tokens)

pytestmark = needs_gpt2_tiny()

TWO_HOSTS = cpu_cluster(
    "two-hosts", [("r0", "h0", "s"), ("r1", "h1", "s")],
    "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"
    "  hosts:\n    - {between: [h0, h1], bandwidth_mbps: 100, latency_ms: 0.1}\n")
SLOW = TWO_HOSTS.replace("bandwidth_mbps: 100", "bandwidth_mbps: 1")
EXACT, STEPS, LR, B1, B2, EPS = 3, 6, 0.003, 0.9, 0.999, 1e-8
RATIO = 0.01


def compile_job(d, name, *flags, cluster="two-hosts.yaml"):
    out = d / name
    p = run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
             "--optimizer", "adamw", "--cluster", str(d / cluster), "--global-batch", "8",
             "--num-stages", "1", *map(str, flags), "-o", str(out)])
    return out, p


def launch(job, data, steps, *extra):
    return run([STRAIT_RUN, str(job), "--steps", str(steps), "--lr", str(LR), "--data", str(data),
                "--data-format", "tokens-u16", "--threads", "1", "--timeout-ms", "60000",
                *map(str, extra)])


def checkpoint(step_dir, rank=0):
    """{name: array} of one rank of a checkpoint step folder."""
    values = {}
    folder = os.path.join(step_dir, f"rank{rank}")
    for line in open(os.path.join(folder, "index.tsv")):
        file, _, _, name = line.rstrip("\n").split("\t")
        values[name] = np.load(os.path.join(folder, file))
    return values


def sent_per_step(job, rank):
    text = (job / "logs" / f"rank{rank}.log").read_text()
    return [int(s.split(":")[1]) for s in re.findall(r"iteration \d+/\d+ .* sent (\S+)", text)]


@pytest.fixture(scope="module")
def env(tmp_path_factory):
    d = tmp_path_factory.mktemp("compressed-adam")
    (d / "two-hosts.yaml").write_text(TWO_HOSTS)
    (d / "slow.yaml").write_text(SLOW)
    data = write_tokens(d / "tokens.bin", seed=7, n=1 << 15)
    job, p = compile_job(d, "cadam", "--compress", f"topk:{RATIO}:int8",
                         "--compressed-adam", EXACT)
    assert "warning" not in p.stderr, p.stderr
    launch(job, data, STEPS, "--checkpoint", d / "ck", "--checkpoint-every", 1)
    return d, data, job


def test_warm_up_is_exact_adamw_then_top_k(env):
    d, data, job = env
    n = sum(v.size for k, v in checkpoint(d / "ck" / "step-1").items()
            if not k.endswith((".adam_m", ".adam_v")))
    for r in range(2):
        sent = sent_per_step(job, r)
        # The plain ring's 4 bytes per parameter (+ a few of the checkpoints' barriers).
        assert all(4 * n <= s <= 4 * n + 64 for s in sent[:EXACT]), sent
        assert all(0 < s < 4 * n / 150 for s in sent[EXACT:]), sent
    plain, _ = compile_job(d, "plain", "--compress", "none")
    launch(plain, data, EXACT, "--checkpoint", d / "ck-plain")
    a, b = checkpoint(d / "ck" / f"step-{EXACT}"), checkpoint(d / "ck-plain" / f"step-{EXACT}")
    assert sorted(a) == sorted(b)
    for name in a:
        assert np.array_equal(a[name], b[name]), name


def test_frozen_variance_step_matches_numpy(env):
    d, _, _ = env
    frozen = checkpoint(d / "ck" / f"step-{EXACT}")
    names = [k for k in frozen if not k.endswith((".adam_m", ".adam_v"))]
    n = sum(frozen[k].size for k in names)
    k = math.ceil(RATIO * n)
    c2 = 1 - B2 ** EXACT
    for t in range(EXACT + 1, STEPS + 1):
        prev, cur = checkpoint(d / "ck" / f"step-{t - 1}"), checkpoint(d / "ck" / f"step-{t}")
        moved = 0
        for name in names:
            m0, m1 = prev[name + ".adam_m"], cur[name + ".adam_m"]
            v = frozen[name + ".adam_v"]
            assert np.array_equal(cur[name + ".adam_v"], v), (t, name)
            moved += int(np.count_nonzero(m1 != np.float32(B1) * m0))
            c1 = 1 - B1 ** t
            want = (prev[name].astype(np.float64) -
                    LR * (m1 / c1) / (np.sqrt(v.astype(np.float64) / c2) + EPS))
            np.testing.assert_allclose(cur[name], want, rtol=1e-5, atol=1e-7,
                                       err_msg=f"step {t} {name}")
        # The decoded mean gradient: the union of the two ranks' k kept positions.
        assert 0 < moved <= 2 * k, (t, moved, k)


def test_resume_is_bit_identical(env):
    d, data, job = env
    whole = checkpoint(d / "ck" / f"step-{STEPS}")
    for start in (2, EXACT + 1):
        ck = d / f"ck-from-{start}"
        os.makedirs(ck)
        os.symlink(d / "ck" / f"step-{start}", ck / f"step-{start}")
        out = d / f"ck-resumed-{start}"
        launch(job, data, STEPS, "--resume", ck, "--checkpoint", out)
        resumed = checkpoint(out / f"step-{STEPS}")
        assert sorted(resumed) == sorted(whole)
        for name in whole:
            assert np.array_equal(resumed[name], whole[name]), (start, name)


@pytest.mark.parametrize("flags,message", [
    (["--compressed-adam", "0"], "--compressed-adam 0: N must be at least 1"),
    (["--compressed-adam", "5", "--optimizer", "sgd"],
     "--compressed-adam 5: it needs --loss and --optimizer adamw"),
    (["--compressed-adam", "5", "--local-steps", "2"],
     "--compressed-adam 5: --local-steps average parameters"),
])
def test_bad_flags(env, flags, message):
    d, _, _ = env
    p = subprocess.run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss",
                        "cross-entropy", "--optimizer", "adamw", "--cluster",
                        str(d / "two-hosts.yaml"), *flags, "-o", str(d / "bad")],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr
    assert not (d / "bad").exists()


def test_auto_gives_adamw_gradients_top_k_only_when_compressed(env):
    d, _, _ = env
    line = re.compile(r"straitc: compressed all-reduce of stage 0: (\S+)")
    _, live = compile_job(d, "auto-live", "--compress", "auto", cluster="slow.yaml")
    _, cadam = compile_job(d, "auto-cadam", "--compress", "auto", "--compressed-adam", 50,
                           cluster="slow.yaml")
    _, sgd = compile_job(d, "auto-sgd", "--compress", "auto", "--optimizer", "sgd",
                         cluster="slow.yaml")
    assert line.search(live.stdout).group(1) == "int4+ef", live.stdout
    assert line.search(cadam.stdout).group(1).startswith("topk:"), cadam.stdout
    assert line.search(sgd.stdout).group(1).startswith("topk:"), sgd.stdout
    # An explicit top-k under AdamW with a live second moment compiles, with a warning.
    _, explicit = compile_job(d, "explicit", "--compress", "topk:0.01:int8")
    assert "straitc --compressed-adam N freezes it" in explicit.stderr, explicit.stderr


def test_exact_steps_without_a_step_input_is_a_load_error(env):
    d, data, job = env
    bad = d / "no-step"
    shutil.copytree(job, bad, ignore=shutil.ignore_patterns("logs", "rendezvous"))
    pb = bad / "rank1.program.pb"
    with open(pb, "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    text = p.stdout.decode()
    assert 'name: "step"' in text and "exact_steps: 3" in text
    text = text.replace('name: "step"', 'name: "iteration"')
    p = subprocess.run(["protoc", "--encode=strait.program.Program", "-I", PROTO_DIR,
                        "strait_program.proto"], input=text.encode(), capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    pb.write_bytes(p.stdout)
    r = subprocess.run([STRAIT_RUN, str(bad), "--steps", "2", "--data", str(data), "--data-format",
                        "tokens-u16", "--threads", "1", "--timeout-ms", "60000"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    log = (bad / "logs" / "rank1.log").read_text()
    assert "all_reduce.codec.exact_steps = 3 needs the program's i64 scalar input 'step'" in log, \
        log[-2000:]
    assert "rank 1" in log, log[-2000:]
