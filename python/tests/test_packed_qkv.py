"""graph-fold-transposes reads GPT-2's Q, K and V straight out of the packed QKV projection.

GPT-2 computes qkv = c_attn(x) as [B, T, 3C] and splits it into Q, K, V, each reshaped to
[B, T, H, D] heads. With --fold-transposes (the default) the Split and the heads' Reshapes
become one Reshape (a view) to [B, T, 3, H, D], which FusedAttention reads through
q_select, kt_select, v_select = [2, i]; its gradient op writes the packed tensor's one
gradient dQKV in place (packed_grad: no Concat of dQ, dK, dV). The CPU kernels gather the
selected slices into the same dense f32 blocks as the split operands
(runtime/test/AttentionTest.cpp, PackedOperandsEqualTheDenseKernels), so five SGD steps give the losses of the unfolded
step, parameters bit-identical in bf16 and within test_attention_layouts.py's 1e-6 in
f32 (the LM head's Gemm with transB sums in another order), and the step has no Split and
two Concats fewer.
"""

import os

import numpy as np

import pytest

from jobutil import (GPT2_TINY, STRAITC, kernel_ops, needs_gpt2_tiny, run, train_saving_params,
                     write_tokens)

MODEL = GPT2_TINY

pytestmark = needs_gpt2_tiny()


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_packed_qkv_step(tmp_path, precision):
    data = write_tokens(tmp_path / "tokens.bin", seed=77)
    results, ops, mlir = {}, {}, {}
    for fold in ("true", "false"):
        args = [STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
                "--optimizer", "sgd", "--precision", precision, f"--fold-transposes={fold}"]
        mlir[fold] = run(args + ["--emit=mlir"]).stdout
        job = tmp_path / fold
        run(args + ["-o", str(job)])
        ops[fold] = kernel_ops(job)
        results[fold] = train_saving_params(job, data, tmp_path / (fold + "-params"), lr=0.01,
                                            threads=2)
    # gpt2-tiny has 2 blocks, one QKV Split each and its gradient's Concat of dQ, dK, dV:
    # the gradient op writes the packed dQKV itself (packed_grad).
    assert ops["false"].count("Split") == 2, ops["false"].count("Split")
    assert ops["true"].count("Split") == 0, [o for o in ops["true"] if "Split" in o]
    assert ops["true"].count("Concat") == ops["false"].count("Concat") - 2, (
        ops["true"].count("Concat"), ops["false"].count("Concat"))
    for op in ("graph.FusedAttention ", "graph.FusedAttentionGrad "):
        lines = [l for l in mlir["true"].splitlines() if op in l]
        assert len(lines) == 2, lines
        for l in lines:
            assert "q_select = array<i64: 2, 0>" in l and "kt_select = array<i64: 2, 1>" in l
            assert "v_select = array<i64: 2, 2>" in l
            assert "tensor<2x16x3x4x16x" in l  # the packed [B, T, 3, H, D] view
        grads = [l for l in mlir["true"].splitlines() if "graph.FusedAttentionGrad " in l]
        assert all("packed_grad = 1" in l for l in grads), grads
        assert not any("_select" in l for l in mlir["false"].splitlines() if op in l)
    (losses_t, params_t), (losses_f, params_f) = results["true"], results["false"]
    assert len(losses_t) == 5 and losses_t == losses_f, (losses_t, losses_f)
    assert params_t.keys() == params_f.keys() and len(params_t) > 10
    differ = [k for k in params_t if params_t[k].tobytes() != params_f[k].tobytes()]
    worst = max(float(np.max(np.abs(params_t[k].astype(np.float64) - params_f[k])) /
                      max(1e-30, float(np.max(np.abs(params_f[k])))))
                for k in params_t)
    if precision == "bf16":
        assert not differ, differ[:5]
    assert worst <= 1e-6, (worst, differ[:5])
    print(f"{precision}: Split kernels {ops['false'].count('Split')} -> 0; losses {losses_t}; "
          f"{len(params_t) - len(differ)} of {len(params_t)} parameters bit-identical, "
          f"largest relative difference {worst:.2e}")
