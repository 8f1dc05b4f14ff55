"""Adaptive top-k (straitc --adaptive-topk, docs/runtime.md "Adaptive top-k").

A 2-stage pipeline of models/gpt2-tiny (one CPU rank per stage, on two hosts
of a cluster file) with top-k on the cut, trained on real English text
(runtime/scripts/make-text-tokens.py), GPipe order with 4 micro-batches:

  (a) compiled with --adaptive-topk but run with `strait-run --topk-adapt
      off`, the losses equal the fixed-ratio job's exactly (same data and
      seed), and the programs differ only by the send codecs' adapt fields;
  (b) over an emulated link 4x slower than the cluster file says (root and
      `ip netns`: runtime/scripts/wan-cluster.py, else skipped with the
      reason), the senders' ratios fall 30 % below the compiled 0.1 (mean
      of the last 10 steps; about 0.012 on an idle machine, but the budget
      grows with the sender's compute), so each rank sends fewer bytes per step over
      the slow link than the fixed ratio's job (the bytes, not the step
      time: timing belongs in bench/runtime/adaptive_topk.py, which measures
      the speed-up), and the loss still falls by at least 1.0 nat in 30
      steps;
  (c) a receiver decodes top-k payloads whose k changes every transfer
      (every index encoding; plain, sealed, deferred) bit-exactly: the
      strait-comm-tests run over Gloo writes the payloads and what the
      receiver decoded, and numpy decodes the payloads independently;
  and bad bounds are clear errors from straitc and strait-run.
"""
from __future__ import annotations

import math
import os
import re
import statistics
import subprocess
import sys

import numpy as np
import pytest

import jobutil  # noqa: E402

ROOT = jobutil.ROOT
BUILD = jobutil.BUILD
STRAITC = jobutil.STRAITC
STRAIT_RUN = jobutil.STRAIT_RUN
MODEL = jobutil.GPT2_TINY
TEXT = os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py")
WAN = os.path.join(ROOT, "runtime", "scripts", "wan-cluster.py")
COMM_TESTS = os.path.join(BUILD, "runtime", "test", "strait-comm-tests")

pytestmark = jobutil.needs_gpt2_tiny()

FILE_MBPS = 8  # what the cluster file says
REAL_MBPS = 2  # what the emulated link delivers


def cluster(tmp, mbps):
    path = tmp / f"two-hosts-{mbps}.yaml"
    path.write_text(jobutil.cpu_cluster(
        f"two-hosts-{mbps}", [("a0", "h0", "east"), ("b0", "h1", "west")],
        f"  intra_host: {{bandwidth_gbps: 10}}\n"
        f"  hosts:\n    - {{between: [h0, h1], bandwidth_mbps: {mbps}, latency_ms: 1}}\n"))
    return path


def compile_job(tmp, name, *extra):
    job = tmp / name
    out = jobutil.run([STRAITC, MODEL, "--input-shape", "input_ids=4x64", "--loss", "cross-entropy",
                       "--optimizer", "adamw", "--cluster", str(cluster(tmp, FILE_MBPS)),
                       "--num-stages", "2", "--global-batch", "16", "--schedule", "gpipe",
                       "--compress", "topk:0.1", *extra, "-o", str(job)]).stdout
    assert "(2 ranks, 2 stages)" in out, out
    return job, out


def decode_program(path):
    with open(path, "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", jobutil.PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    return p.stdout.decode()


def encode_program(text, path):
    p = subprocess.run(["protoc", "--encode=strait.program.Program", "-I", jobutil.PROTO_DIR,
                        "strait_program.proto"], input=text.encode(), capture_output=True,
                       timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    path.write_bytes(p.stdout)


def log_losses(job, rank=1):
    text = (job / "logs" / f"rank{rank}.log").read_text()
    return [float(x) for x in re.findall(r"iteration \d+/\d+ .*?loss (\S+)", text)]


def step_ms(job):
    """Per iteration: the slower rank's time."""
    per = {}
    for r in (0, 1):
        text = (job / "logs" / f"rank{r}.log").read_text()
        for it, ms in re.findall(r"iteration (\d+)/\d+ time ([0-9.]+) ms", text):
            per.setdefault(int(it), []).append(float(ms))
    return [max(per[i]) for i in sorted(per)]


def sent_bytes(job, rank):
    """The bytes rank sent (to every peer together) in each iteration: the rank log's `sent P:B,..`."""
    text = (job / "logs" / f"rank{rank}.log").read_text()
    return [sum(int(x.split(":")[1]) for x in sent.split(","))
            for sent in re.findall(r"iteration \d+/\d+ .* sent (\S+)", text)]


def topk_ratios(job, rank):
    """The ratio of each adaptive stream after every iteration: [{peer/chC: ratio}]."""
    text = (job / "logs" / f"rank{rank}.log").read_text()
    out = []
    for line in re.findall(r"^rank \d+ topk (.*)$", text, re.M):
        out.append({m[0]: float(m[1]) for m in re.findall(r"(\d+/ch\d+):([0-9.e+-]+):", line)})
    return out


@pytest.fixture(scope="module")
def text(tmp_path_factory):
    out = tmp_path_factory.mktemp("text")
    jobutil.run([sys.executable, TEXT, str(out), "--no-docstrings", "--max-bytes", "200000"])
    return out / "train.bin"


def run_args(data, steps):
    return ["--steps", str(steps), "--lr", "0.003", "--threads", "1", "--timeout-ms", "120000",
            "--data", str(data), "--data-format", "tokens-u16", "--seed", "7"]


def test_off_equals_fixed_ratio(tmp_path, text):
    fixed, _ = compile_job(tmp_path, "fixed")
    adapt, out = compile_job(tmp_path, "adapt", "--adaptive-topk=0.01:0.1")
    assert "straitc: compressed stage 0 -> 1: topk:0.1 adaptive 0.01:0.1" in out, out
    assert "straitc: compressed stage 1 -> 0: topk:0.1 adaptive 0.01:0.1" in out, out
    # The programs differ only by the sends' adapt fields.
    for r in (0, 1):
        a = decode_program(adapt / f"rank{r}.program.pb")
        f = decode_program(fixed / f"rank{r}.program.pb")
        # (The tied weight's per-step exchange, keep_decoded, never adapts.)
        sends = re.findall(r"send \{.*?\n  \}", a, re.S)
        assert sends and all("adapt: true" in s and "ratio_min: 0.01" in s and "ratio_max: 0.1" in s
                             for s in sends if "CODEC_TOPK" in s and "keep_decoded" not in s), sends
        stripped = re.sub(r"\n *(adapt: true|ratio_min: \S+|ratio_max: \S+)", "", a)
        assert stripped == f
        assert "adapt" not in "".join(re.findall(r"recv \{.*?\n  \}", a, re.S))
    jobutil.run([STRAIT_RUN, str(fixed), *run_args(text, 6)])
    jobutil.run([STRAIT_RUN, str(adapt), *run_args(text, 6), "--topk-adapt", "off"])
    want, got = log_losses(fixed), log_losses(adapt)
    assert len(want) == 6 and got == want, (got, want)
    assert not topk_ratios(adapt, 0), "adaptation was off: no ratio lines"
    # On: each rank reports its stream to the peer, inside the bounds.
    p = jobutil.run([STRAIT_RUN, str(adapt), *run_args(text, 4)])
    for r, peer in ((0, "1/ch"), (1, "0/ch")):
        ratios = topk_ratios(adapt, r)
        assert len(ratios) == 4, (adapt / "logs" / f"rank{r}.log").read_text()[-2000:]
        for line in ratios:
            assert line and all(k.startswith(peer) and 0.01 * 0.999 <= v <= 0.1 * 1.001
                                for k, v in line.items()), line
    assert re.search(r"^step 4/4 .*\| rank0 topk 1/ch\d+:", p.stdout, re.M), p.stdout


def test_bad_bounds_are_errors(tmp_path, text):
    for flag, message in (
            ("--adaptive-topk=0.2:0.5", "the top-k ratio 0.1 of the transfers from stage 0 to "
                                        "stage 1 (its starting ratio) is outside [0.2, 0.5]"),
            ("--adaptive-topk=0.5:0.2", "needs 0 < MIN <= MAX <= 1"),
            ("--adaptive-topk=0.05", "expected MIN:MAX")):
        p = subprocess.run([STRAITC, MODEL, "--input-shape", "input_ids=4x64", "--loss",
                            "cross-entropy", "--optimizer", "adamw", "--cluster",
                            str(cluster(tmp_path, FILE_MBPS)), "--num-stages", "2",
                            "--compress", "topk:0.1", flag, "-o", str(tmp_path / "bad")],
                           capture_output=True, text=True, timeout=300)
        assert p.returncode != 0 and message in p.stderr, (flag, p.stderr[-2000:])
        assert "Traceback" not in p.stderr and "Stack dump" not in p.stderr
    p = subprocess.run([STRAITC, MODEL, "--input-shape", "input_ids=4x64", "--loss",
                        "cross-entropy", "--cluster", str(cluster(tmp_path, FILE_MBPS)),
                        "--num-stages", "2", "--compress", "int8", "--adaptive-topk=0.01:0.1",
                        "-o", str(tmp_path / "bad")], capture_output=True, text=True, timeout=300)
    assert p.returncode != 0 and "no transfer between stages uses top-k" in p.stderr, p.stderr
    # 1F1B sends are deferred: the runtime cannot time them (a warning, the job is written).
    p = subprocess.run([STRAITC, MODEL, "--input-shape", "input_ids=4x64", "--loss",
                        "cross-entropy", "--cluster", str(cluster(tmp_path, FILE_MBPS)),
                        "--num-stages", "2", "--global-batch", "16", "--schedule", "1f1b",
                        "--compress", "topk:0.1", "--adaptive-topk=0.01:0.1",
                        "-o", str(tmp_path / "onefoneb")], capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0 and "warning: --adaptive-topk with the 1F1B schedule" in p.stderr, \
        p.stderr
    # strait-run: a flag value it does not know, and a program whose bounds
    # do not hold the ratio (edited after straitc).
    job, _ = compile_job(tmp_path, "edited", "--adaptive-topk=0.01:0.1")
    p = subprocess.run([STRAIT_RUN, str(job), "--topk-adapt", "maybe"], capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 2 and "--topk-adapt takes on or off" in p.stderr, p.stderr
    program = job / "rank0.program.pb"
    encode_program(decode_program(program).replace("ratio_min: 0.01", "ratio_min: 0.5"), program)
    p = subprocess.run([STRAIT_RUN, str(job), *run_args(text, 1)], capture_output=True, text=True,
                       timeout=120)
    log = (job / "logs" / "rank0.log").read_text()
    assert p.returncode != 0, p.stdout
    assert re.search(r"steps\[\d+\]\.send\.codec: adaptive top-k needs 0 < ratio_min <= "
                     r"topk_ratio <= ratio_max <= 1, got ratio_min 0\.5", log), log[-2000:]


def test_slow_link_lowers_the_ratio_and_the_bytes_sent(tmp_path, text):
    reason = jobutil.wan_unavailable()
    if reason:
        pytest.skip(reason)
    steps = 30
    slow = cluster(tmp_path, REAL_MBPS)  # the link as it really is: 1/4 of the file's
    runs = {}
    for name, extra in (("fixed", ()), ("adaptive", ("--adaptive-topk=0.005:0.1",))):
        job, _ = compile_job(tmp_path, name, *extra)
        p = subprocess.run([sys.executable, WAN, "--cluster", str(slow), "--strait-run", STRAIT_RUN,
                            "--", str(job), *run_args(text, steps)],
                           capture_output=True, text=True, timeout=900)
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
        runs[name] = job
    # The step times are printed, not asserted: on a loaded 2-core machine they say as much about
    # the other jobs as about the ratio (the speed-up is measured by bench/runtime/adaptive_topk.py,
    # docs/benchmarks.md "Adaptive top-k").
    fixed_ms = statistics.median(step_ms(runs["fixed"])[5:])
    adapt_ms = statistics.median(step_ms(runs["adaptive"])[5:])
    # Each stream's mean ratio over the last 10 steps (probing lifts single
    # steps for a while before a busy transfer brings the ratio back).
    late = {}
    for r in (0, 1):
        lines = topk_ratios(runs["adaptive"], r)[-10:]
        assert len(lines) == 10 and all(len(x) == 1 for x in lines), lines
        late[r] = statistics.mean(next(iter(x.values())) for x in lines)
    # What made the fixed job's steps slower: the bytes each rank puts on the slow link per step
    # (median over the same last 10 steps). Both carry the tied embedding's partial gradient
    # (256 x 64 f32) each way per step at the fixed top-k 0.1 (error feedback, never adapted:
    # 24 bytes of header and k, a 2048-byte bitmap, 1639 f32 values) besides the activations'
    # top-k payloads, whose size follows the ratio: at 0.1 about 35-43 KB per step, near 0.01
    # about 1-2 KB.
    sent = {name: [statistics.median(sent_bytes(job, r)[-10:]) for r in (0, 1)]
            for name, job in runs.items()}
    losses = log_losses(runs["adaptive"])
    print(f"median step: fixed 0.1 {fixed_ms:.1f} ms, adaptive {adapt_ms:.1f} ms "
          f"({fixed_ms / adapt_ms:.2f}x); median bytes sent per step (rank 0, rank 1): fixed "
          f"{sent['fixed']}, adaptive {sent['adaptive']}; mean ratios of the last 10 steps "
          f"{late}; losses {losses[:3]} ... {losses[-3:]}")
    # The ratio follows the sender's compute as well as the link (the budget is 0.8 x its compute
    # per micro-batch), and tbf's 16 KB bucket lets small payloads through faster than the rate:
    # on an idle machine the late means are about 0.011 / 0.014 (docs/benchmarks.md), in a loaded
    # CI run rank 1's was 0.052. At 30 % below the compiled 0.1 the link is plainly adapted to.
    assert all(v < 0.07 for v in late.values()), late
    for r in (0, 1):
        assert len(sent_bytes(runs["fixed"], r)) == steps == len(sent_bytes(runs["adaptive"], r))
        # The payloads shrank with the ratio. A top-k payload of n values at ratio r is 4rn
        # value bytes and min(2rn, n/8) index bytes (u16 gaps or a bitmap), so a ratio below
        # 0.07 (asserted above) sends at most (0.28 + 0.125) / (0.4 + 0.125) = 77 % of the
        # fixed 0.1's bytes. Measured: 24 % (rank 0) and 27 % (rank 1) on an idle machine; in a
        # loaded CI run rank 1's ratio averaged 0.045 over the last 10 steps and its median
        # bytes over steps 6-30 were 60 % of the fixed job's.
        embedding = 16 + 8 + 256 * 64 // 8 + 4 * math.ceil(0.1 * 256 * 64)
        fixed_topk = sent["fixed"][r] - embedding
        assert fixed_topk > 0, sent
        assert sent["adaptive"][r] - embedding < 0.8 * fixed_topk, (r, sent)
    assert len(losses) == steps
    first, last = statistics.mean(losses[:3]), statistics.mean(losses[-3:])
    assert last < first - 1.0, losses


def test_receiver_decodes_varying_k_like_numpy(tmp_path):
    if not os.path.isfile(COMM_TESTS):
        pytest.skip("needs build/runtime/test/strait-comm-tests")
    env = dict(os.environ, STRAIT_TOPK_DUMP_DIR=str(tmp_path))
    p = subprocess.run([COMM_TESTS, "--gtest_filter=AdaptiveTopKComm.ReceiverDecodesAnyK*"],
                       capture_output=True, text=True, timeout=300, env=env)
    assert p.returncode == 0, p.stdout[-3000:]
    seen = set()
    for tag in ("plain", "sealed", "deferred", "sealed-deferred"):
        ks = []
        for i in range(8):
            payload = (tmp_path / f"{tag}.{i}.payload").read_bytes()
            got = np.fromfile(tmp_path / f"{tag}.{i}.received", dtype="<f4")
            assert payload[0] == 0xC5 and payload[1] == 1, payload[:4]  # magic, CODEC_TOPK
            numel = int.from_bytes(payload[8:16], "little")
            k = int.from_bytes(payload[16:24], "little")
            values = np.frombuffer(payload, dtype="<f4", count=k, offset=24)
            rest = np.frombuffer(payload, dtype=np.uint8, offset=24 + 4 * k)
            encoding = payload[2]
            if encoding == 1:
                idx = rest.view("<u4").astype(np.int64)
            elif encoding == 2:
                gaps = rest.view("<u2").astype(np.int64)
                idx, pos, pending = [], -1, 0
                for g in gaps:
                    pending += g
                    if g == 0xFFFF:
                        continue
                    pos += pending + 1
                    pending = 0
                    idx.append(pos)
                idx = np.array(idx, dtype=np.int64)
            else:
                assert encoding == 3
                idx = np.flatnonzero(np.unpackbits(rest, bitorder="little")[:numel])
            want = np.zeros(numel, dtype=np.float32)
            want[idx] = values
            assert len(idx) == k and got.shape == (numel,)
            assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), (tag, i, k)
            ks.append(k)
            seen.add(int(encoding))
        assert len(set(ks)) == 8, ks  # k changed every transfer
    assert seen == {1, 2, 3}
