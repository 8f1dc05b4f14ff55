"""graph-fuse-rmsnorm end to end: llama-tiny trains to the same losses.

Compiles the llama-tiny training step twice (--fuse-rmsnorm, the default, and
--fuse-rmsnorm=false), runs both on the CPU runtime for a few SGD steps on the
same token data and checks:
  - the fused program has 5 RMSNormalization and 5 RMSNormalizationGrad
    kernels (2 layers x 2 norms and the final one), no Pow, and fewer kernels;
  - the losses of every step agree within 2e-5 relative. The two programs do
    not evaluate the same float operations: the fused kernel sums x^2 in 16
    f32 lanes combined in double and takes 1/sqrt in double, while the
    decomposition rounds Pow, ReduceMean, Add, Sqrt, Reciprocal and both Muls
    to f32 one by one (a few ulp, ~1e-7 relative per normalized value), and the
    fused gradient is one closed form where autodiff chains six rules. Those
    per-element differences pass through the layers' matmuls and 5 SGD
    updates. Measured: the losses agree in all 6 significant digits that
    strait-run prints (relative difference below 1e-6); 2e-5 leaves room for
    a different summation order on another machine's vector width while
    staying far below what a wrong rule or kernel gives (the losses fall by
    ~4e-2 over the 5 steps).
"""

import os

import pytest

from jobutil import ROOT, STRAIT_RUN, STRAITC, kernel_ops, run, step_losses, write_tokens

MODEL = os.path.join(ROOT, "models", "llama-tiny", "llama-tiny.onnx")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN) and os.path.exists(MODEL)),
    reason="needs build/bin/straitc, strait-run and models/llama-tiny")


def compile_job(tmp_path, name, *flags):
    job = tmp_path / name
    run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
         "--optimizer", "sgd", *flags, "-o", str(job)])
    return job


def test_fused_rmsnorm_llama_tiny_trains_like_decomposed(tmp_path):
    # Token ids below llama-tiny's 256-entry vocabulary, fixed seed.
    data = write_tokens(tmp_path / "tokens.bin", seed=2024)

    fused = compile_job(tmp_path, "fused")
    decomposed = compile_job(tmp_path, "decomposed", "--fuse-rmsnorm=false")
    ops_f, ops_d = kernel_ops(fused), kernel_ops(decomposed)
    assert ops_f.count("RMSNormalization") == 5 and ops_f.count("RMSNormalizationGrad") == 5
    assert "Pow" not in ops_f and "RMSNormalization" not in ops_d
    assert len(ops_f) < len(ops_d), (len(ops_f), len(ops_d))
    print(f"llama-tiny training step: {len(ops_d)} kernels decomposed, {len(ops_f)} with "
          f"RMSNormalization")

    got, ref = step_losses(fused, data), step_losses(decomposed, data)
    assert len(ref) == 5 and len(got) == 5, (got, ref)
    assert ref[-1] < ref[0], ref  # it trains
    worst = max(abs(g - e) / abs(e) for g, e in zip(got, ref))
    print(f"losses fused {got} decomposed {ref}; largest relative difference {worst:.2e}")
    assert worst <= 2e-5, (got, ref)
