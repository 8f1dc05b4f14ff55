"""End to end: codecs chosen by the compiler shrink the bytes on the wire.

Compiles models/gpt2-tiny for examples/clusters/local-4cpu.yaml (two hosts
joined by a 100 Mbps link) with and without --compress, runs both jobs with
strait-run, and compares the bytes the runtime counts at the transport per
peer ("sent R:BYTES" in the rank's progress line) and the training losses:
  - two stages of two replicas, --compress=int8: the cut (both directions)
    and the gradient all-reduces carry int8 with block scales: ~3.9x fewer
    bytes; the losses follow the uncompressed job's;
  - one stage of four replicas over both hosts: dist-insert-comm marks the
    all-reduce hierarchical (one island per host) and --compress=topk:0.1
    applies between the islands only: the inter-host bytes shrink, the
    intra-host bytes do not.
Inputs are zeros (no --data), as in test_pipeline_e2e.py.
"""
from __future__ import annotations

import os
import re
import subprocess

import pytest

import jobutil  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = jobutil.STRAIT_RUN  # the build's launcher, else build-rt's
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.isfile(STRAIT_RUN) and os.path.exists(MODEL)),
    reason="needs build/bin/straitc, strait-run and models/gpt2-tiny")


def run(cmd, timeout=300):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{cmd}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p.stdout


def compile_and_run(job, stages, compress, steps=4):
    out = run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
               "--optimizer", "sgd", "--cluster", CLUSTER, "--num-stages", str(stages),
               "--compress", compress, "-o", job])
    run([STRAIT_RUN, job, "--steps", str(steps), "--lr", "0.1", "--timeout-ms", "60000"])
    logs = {}
    for r in range(4):
        text = (job / "logs" / f"rank{r}.log").read_text()
        assert f"rank {r} done" in text, text[-2000:]
        logs[r] = text
    return out, logs


def last_sent(log):
    """Bytes sent to each peer in the last iteration: {peer: bytes}."""
    lines = re.findall(r"iteration \d+/\d+ .* sent (\S+)", log)
    assert lines, log[-2000:]
    return {int(p): int(b) for p, b in (x.split(":") for x in lines[-1].split(","))}


def losses(log):
    return [float(x) for x in re.findall(r"iteration \d+/\d+ .*?loss (\S+)", log)]


def test_int8_on_the_cut_and_all_reduce(tmp_path):
    _, plain = compile_and_run(tmp_path / "plain", 2, "none")
    out, coded = compile_and_run(tmp_path / "int8", 2, "int8")
    assert "straitc: compressed stage 0 -> 1: int8" in out, out
    assert "straitc: compressed stage 1 -> 0: int8" in out, out
    assert "straitc: compressed all-reduce of stage 0: int8+ef" in out, out
    # Rank 2 (stage 1, replica 0) sends gradients to rank 0 over the cut and
    # all-reduces with rank 3; rank 0 sends activations to rank 2.
    p2, c2 = last_sent(plain[2]), last_sent(coded[2])
    p0, c0 = last_sent(plain[0]), last_sent(coded[0])
    # Ranks 0 and 2 also send their partial gradient of the tied wte / LM-head weight
    # (256x64 f32) once per step: int8 with error feedback too, the sender
    # adding the decoded value it sent (docs/runtime.md, "Compressed
    # tied-gradient exchange"). The ratio is the cut's, the exchange included.
    assert "straitc: compressed stage 0 -> 1 (per step): int8+ef" in out, out
    assert "straitc: compressed stage 1 -> 0 (per step): int8+ef" in out, out
    for name, before, after in (("gradients 2->0", p2[0], c2[0]),
                                ("all-reduce 2<->3", p2[3], c2[3]),
                                ("activations 0->2", p0[2], c0[2])):
        ratio = before / after
        print(f"{name}: {before} -> {after} bytes ({ratio:.2f}x)")
        assert 3.0 < ratio < 4.1, (name, before, after)
    ref, got = losses(plain[2]), losses(coded[2])
    assert len(ref) == len(got) == 4
    # Quantization perturbs the steps slightly; training follows.
    assert abs(got[0] - ref[0]) <= 0.01 * ref[0], (got, ref)
    assert abs(got[1] - ref[1]) <= 0.05 * ref[1], (got, ref)
    assert got[-1] < 1e-3 and ref[-1] < 1e-3, (got, ref)


def test_hierarchical_topk_between_islands(tmp_path):
    _, plain = compile_and_run(tmp_path / "plain", 1, "none")
    out, coded = compile_and_run(tmp_path / "topk", 1, "topk:0.1")
    assert "straitc: compressed all-reduce of stage 0: topk:0.1+ef" in out, out
    p0, c0 = last_sent(plain[0]), last_sent(coded[0])
    # Ranks 0, 1 on host ns0, 2, 3 on ns1: rank 0 talks to rank 1 inside
    # its island (plain both times) and to rank 2 across (top-k 10%: values
    # and indices, ~1/5 of the bytes or less).
    assert c0[1] == p0[1], (p0, c0)
    print(f"inter-island 0->2: {p0[2]} -> {c0[2]} bytes ({p0[2] / c0[2]:.2f}x)")
    assert p0[2] / c0[2] > 4.0, (p0, c0)
    ref, got = losses(plain[0]), losses(coded[0])
    assert abs(got[0] - ref[0]) <= 1e-6 * ref[0], (got, ref)  # before any update
    assert got[-1] < 1e-3, got
