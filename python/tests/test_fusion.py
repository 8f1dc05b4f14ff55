"""graph-fuse-elementwise end to end: gpt2-tiny trains to the same losses.

Compiles the gpt2-tiny training step twice (--fuse=elementwise, the
default, and --fuse=none), runs both on the CPU runtime for a few steps on
the same token data and checks:
  - the fused program has fewer kernels, FusedElementwise among them;
  - the losses of every step agree. The fused CPU kernel evaluates the same
    f32 operations as the unfused kernels in the same order per element
    (runtime/test/FusedTest.cpp checks bit equality op by op), so the only
    expected difference is none at all; the tolerance (1e-5 relative) only
    leaves room for a libm that vectorizes differently in the two loops.
"""

import os
import re
import struct
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = os.path.join(BUILD, "runtime", "tools", "strait-run")
PROTO_DIR = os.path.join(ROOT, "runtime", "proto")
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN) and os.path.exists(MODEL)),
    reason="needs build/bin/straitc, strait-run and models/gpt2-tiny")


def run(cmd, timeout=300):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def kernel_ops(job):
    """Op of every kernel of rank 0's program."""
    with open(job / "rank0.program.pb", "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    text = p.stdout.decode()
    return re.findall(r'^kernels \{\n(?:  .*\n)*?  op: "([^"]+)"', text, re.M)


def compile_job(tmp_path, fuse):
    job = tmp_path / fuse
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
         "--optimizer", "sgd", f"--fuse={fuse}", "-o", str(job)])
    return job


def losses(job, data):
    p = run([STRAIT_RUN, str(job), "--steps", "5", "--lr", "0.1", "--data", str(data),
             "--threads", "2", "--timeout-ms", "60000"])
    return [float(x) for x in re.findall(r"^step \d+/5 loss (\S+)", p.stdout, re.M)]


def test_fused_gpt2_tiny_trains_like_unfused(tmp_path):
    # Token ids below gpt2-tiny's 256-entry vocabulary, fixed seed.
    data = tmp_path / "tokens.bin"
    state = 12345
    ids = []
    for _ in range(4096):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(state % 256)
    data.write_bytes(struct.pack(f"<{len(ids)}H", *ids))

    fused, unfused = compile_job(tmp_path, "elementwise"), compile_job(tmp_path, "none")
    ops_f, ops_u = kernel_ops(fused), kernel_ops(unfused)
    n_fused = ops_f.count("FusedElementwise")
    assert n_fused > 0 and "FusedElementwise" not in ops_u
    assert len(ops_f) < len(ops_u), (len(ops_f), len(ops_u))
    elementwise = {"Add", "Sub", "Mul", "Div", "Pow", "Tanh", "Where"}
    print(f"gpt2-tiny training step: {len(ops_u)} kernels unfused, {len(ops_f)} fused "
          f"({n_fused} FusedElementwise; elementwise kernels "
          f"{sum(o in elementwise for o in ops_u)} -> {sum(o in elementwise for o in ops_f)})")

    got, ref = losses(fused, data), losses(unfused, data)
    assert len(ref) == 5 and len(got) == 5, (got, ref)
    for g, e in zip(got, ref):
        assert abs(g - e) <= 1e-5 * abs(e), (got, ref)
    print(f"losses fused {got} unfused {ref}")
