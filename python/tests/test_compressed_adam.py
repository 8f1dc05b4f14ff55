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

--compressed-adam-warmup int4 (the same job): steps 1-3 each send one int4 payload per rank
(then top-k); numpy: v and the parameters follow live AdamW on the decoded mean gradient, then
AdamW with v frozen; at step 1 the decoded mean gradient plus the ranks' mean error-feedback
residual equals the exact mean gradient of a plain run (same data and weights), to 1e-5;
resuming inside the warm-up is bit-identical; bad flags and a top-k warm-up codec in a program
fail naming the flag / field.
"""
from __future__ import annotations

import math
import os
import re
import shutil
import subprocess

import numpy as np
import pytest

from jobutil import (GPT2_TINY, PROTO_DIR, STRAITC, STRAIT_RUN, checkpoint_values, cpu_cluster,
                     needs_gpt2_tiny, run, write_tokens)

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


checkpoint = checkpoint_values  # {name: array} of one rank of a step folder


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


def run_edited_program(job, bad, data, old, new):
    """Copies `job` to `bad` with rank 1's program edited (text `old` -> `new`, through protoc),
    runs it and returns rank 1's log; the run must fail."""
    shutil.copytree(job, bad, ignore=shutil.ignore_patterns("logs", "rendezvous"))
    pb = bad / "rank1.program.pb"
    with open(pb, "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    text = p.stdout.decode()
    assert old in text, text[:2000]
    p = subprocess.run(["protoc", "--encode=strait.program.Program", "-I", PROTO_DIR,
                        "strait_program.proto"], input=text.replace(old, new).encode(),
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    pb.write_bytes(p.stdout)
    r = subprocess.run([STRAIT_RUN, str(bad), "--steps", "2", "--data", str(data), "--data-format",
                        "tokens-u16", "--threads", "1", "--timeout-ms", "60000"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    log = (bad / "logs" / "rank1.log").read_text()
    assert "rank 1" in log, log[-2000:]
    return log


def test_exact_steps_without_a_step_input_is_a_load_error(env):
    d, data, job = env
    log = run_edited_program(job, d / "no-step", data, 'name: "step"', 'name: "iteration"')
    assert "all_reduce.codec.exact_steps = 3 needs the program's i64 scalar input 'step'" in log, \
        log[-2000:]


# --compressed-adam-warmup int4: the N warm-up steps all-reduce int4 codes with error feedback
# (in the stream the top-k continues) instead of exact f32.
INT4_BLOCK = 256


@pytest.fixture(scope="module")
def warm(env):
    d, data, _ = env
    job, p = compile_job(d, "cadam-int4", "--compress", f"topk:{RATIO}:int8",
                         "--compressed-adam", EXACT, "--compressed-adam-warmup", "int4")
    assert "warning" not in p.stderr, p.stderr
    launch(job, data, STEPS, "--checkpoint", d / "ck-int4", "--checkpoint-every", 1)
    return d, data, job


def parameter_names(ck):
    return [k for k in ck if not k.endswith((".adam_m", ".adam_v")) and "residual" not in k
            and not k.startswith("ef.")]


def test_warmup_codec_sends_int4_then_top_k(warm):
    d, _, job = warm
    ck = checkpoint(d / "ck-int4" / "step-1")
    n = sum(ck[k].size for k in parameter_names(ck))
    # One int4 payload per rank: the 16-byte header, an f32 scale per 256 elements, the nibbles.
    int4 = 16 + 4 * math.ceil(n / INT4_BLOCK) + math.ceil(n / 2)
    for r in range(2):
        sent = sent_per_step(job, r)
        assert all(int4 <= s <= int4 + 64 for s in sent[:EXACT]), (sent, int4)
        assert all(0 < s < 4 * n / 150 for s in sent[EXACT:]), sent


def residuals(step_dir, rank):
    """The error-feedback residuals of one rank of a checkpoint, concatenated."""
    folder = os.path.join(step_dir, f"rank{rank}", "feedback")
    files = [line.split("\t")[0] for line in open(os.path.join(folder, "index.tsv"))
             if line.split("\t")[0].endswith(".npy")]
    return np.concatenate([np.load(os.path.join(folder, f)).ravel() for f in files])


def test_warmup_codec_steps_match_numpy(warm):
    """Steps 1..N: live AdamW on the decoded mean gradient g_t = (m_t - beta1 m_{t-1}) /
    (1 - beta1), then AdamW with v frozen at step N. At step 1, g_1 plus the two ranks' mean
    residual is the exact mean gradient (the plain run's m_1 / (1 - beta1), same data and
    initial weights): error feedback keeps exactly what int4 did not send. (The all-reduce's
    one fused bucket concatenates the gradients in the checkpoint's variable order.)"""
    d, data, _ = warm
    plain, _ = compile_job(d, "plain-1", "--compress", "none")
    launch(plain, data, 1, "--checkpoint", d / "ck-plain-1")
    exact = checkpoint(d / "ck-plain-1" / "step-1")
    names = parameter_names(exact)
    first = checkpoint(d / "ck-int4" / "step-1")
    g1 = np.concatenate([first[k + ".adam_m"].ravel() for k in names]) / (1 - B1)
    g_exact = np.concatenate([exact[k + ".adam_m"].ravel() for k in names]) / (1 - B1)
    step1 = d / "ck-int4" / "step-1"
    mean_residual = (residuals(step1, 0).astype(np.float64) + residuals(step1, 1)) / 2
    assert mean_residual.shape == g1.shape
    # Lossy (int4) but close, and the residual holds the difference.
    err = np.linalg.norm(g1 - g_exact) / np.linalg.norm(g_exact)
    assert 1e-3 < err < 0.2, err
    np.testing.assert_allclose(g1 + mean_residual, g_exact, rtol=0,
                               atol=1e-5 * np.abs(g_exact).max())
    prev = None
    for t in range(1, STEPS + 1):
        cur = checkpoint(d / "ck-int4" / f"step-{t}")
        for name in names:
            m1 = cur[name + ".adam_m"].astype(np.float64)
            m0 = prev[name + ".adam_m"] if prev else np.zeros_like(m1)
            v0 = prev[name + ".adam_v"].astype(np.float64) if prev else np.zeros_like(m1)
            g = (m1 - B1 * m0) / (1 - B1)
            vt = B2 * v0 + (1 - B2) * g * g if t <= EXACT else v0
            np.testing.assert_allclose(cur[name + ".adam_v"], vt, rtol=1e-3,
                                       atol=1e-6 * vt.max() + 1e-20, err_msg=f"{t} {name}")
            if prev is None:  # the initial weights are not checkpointed
                continue
            c1, c2 = 1 - B1 ** t, 1 - B2 ** min(t, EXACT)
            want = prev[name].astype(np.float64) - LR * (m1 / c1) / (
                np.sqrt(cur[name + ".adam_v"].astype(np.float64) / c2) + EPS)
            np.testing.assert_allclose(cur[name], want, rtol=1e-5, atol=1e-7,
                                       err_msg=f"step {t} {name}")
        prev = cur


def test_warmup_codec_resume_is_bit_identical(warm):
    d, data, job = warm
    whole = checkpoint(d / "ck-int4" / f"step-{STEPS}")
    ck = d / "ck-int4-from-2"
    os.makedirs(ck)
    os.symlink(d / "ck-int4" / "step-2", ck / "step-2")
    out = d / "ck-int4-resumed"
    launch(job, data, STEPS, "--resume", ck, "--checkpoint", out)
    resumed = checkpoint(out / f"step-{STEPS}")
    assert sorted(resumed) == sorted(whole)
    for name in whole:
        assert np.array_equal(resumed[name], whole[name]), name


@pytest.mark.parametrize("flags,message", [
    (["--compress", "topk:0.01:int8", "--compressed-adam", "5", "--compressed-adam-warmup",
      "topk:0.1"], "--compressed-adam-warmup=topk:0.1: expected a dense codec"),
    (["--compress", "topk:0.01:int8", "--compressed-adam-warmup", "int4"],
     "--compressed-adam-warmup int4: it needs --compressed-adam N"),
    (["--compress", "topk:0.01:int8", "--compressed-adam", "5", "--compressed-adam-warmup",
      "int5"], "--compressed-adam-warmup=int5"),
])
def test_bad_warmup_flags(env, flags, message):
    test_bad_flags(env, flags, message)


def test_top_k_warmup_codec_is_a_load_error(warm):
    d, data, job = warm
    log = run_edited_program(job, d / "topk-warmup", data, "warmup_codec: CODEC_INT4",
                             "warmup_codec: CODEC_TOPK")
    assert ("all_reduce.codec.warmup_codec: CODEC_TOPK is not a dense codec (FP16, BF16, INT8, "
            "INT4, INT2, INT3)") in log, log[-2000:]
