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

import pytest

from jobutil import ROOT, STRAIT_RUN, STRAITC, kernel_ops, run, step_losses, write_tokens

MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN) and os.path.exists(MODEL)),
    reason="needs build/bin/straitc, strait-run and models/gpt2-tiny")


def compile_job(tmp_path, fuse):
    job = tmp_path / fuse
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
         "--optimizer", "sgd", f"--fuse={fuse}", "-o", str(job)])
    return job


def test_fused_gpt2_tiny_trains_like_unfused(tmp_path):
    # Token ids below gpt2-tiny's 256-entry vocabulary, fixed seed.
    data = write_tokens(tmp_path / "tokens.bin", seed=12345)

    fused, unfused = compile_job(tmp_path, "elementwise"), compile_job(tmp_path, "none")
    ops_f, ops_u = kernel_ops(fused), kernel_ops(unfused)
    n_fused = ops_f.count("FusedElementwise")
    assert n_fused > 0 and "FusedElementwise" not in ops_u
    assert len(ops_f) < len(ops_u), (len(ops_f), len(ops_u))
    elementwise = {"Add", "Sub", "Mul", "Div", "Pow", "Tanh", "Where"}
    print(f"gpt2-tiny training step: {len(ops_u)} kernels unfused, {len(ops_f)} fused "
          f"({n_fused} FusedElementwise; elementwise kernels "
          f"{sum(o in elementwise for o in ops_u)} -> {sum(o in elementwise for o in ops_f)})")

    got, ref = step_losses(fused, data), step_losses(unfused, data)
    assert len(ref) == 5 and len(got) == 5, (got, ref)
    for g, e in zip(got, ref):
        assert abs(g - e) <= 1e-5 * abs(e), (got, ref)
    print(f"losses fused {got} unfused {ref}")
