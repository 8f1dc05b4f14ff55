"""graph-fold-transposes folds the heads' Transposes into FusedAttention's permutations.

GPT-2 exports its heads as Reshape [B, T, H, D] -> Transpose [B, H, T, D] (Kt: [B, H, D, T])
and Y back with a Transpose; each has a Transpose in the backward too. With
--fold-transposes (the default) FusedAttention reads Q, K, V and writes Y as
[B, T, H, D] tensors (q_perm, kt_perm, v_perm, y_perm), and the gradient inherits the
layouts. The CPU kernels gather the strided slices into the same dense f32 blocks the dense
kernels read (runtime/test/AttentionTest.cpp checks that bit for bit); the tied LM head's
MatMul by Transpose(wte) becomes a Gemm with transB, whose f32 sums may round differently.
Five SGD steps give the same losses and parameters within 1e-6 (relative to each tensor's
largest entry), in f32 and bf16, and a pipelined 4-rank job the same losses.
"""

import os
import re

import numpy as np

import pytest

from jobutil import (GPT2_TINY, ROOT, STRAITC, STRAIT_RUN, kernel_ops, needs_gpt2_tiny, run,
                     train_saving_params, write_tokens)

MODEL = GPT2_TINY

pytestmark = needs_gpt2_tiny()


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_folded_step_is_bit_identical(tmp_path, precision):
    data = write_tokens(tmp_path / "tokens.bin", seed=2024)
    results, ops, mlir = {}, {}, {}
    for fold in ("true", "false"):
        # SGD: AdamW's m / sqrt(v) would turn last-bit differences of near-zero gradients
        # into steps of the learning rate.
        args = [STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
                "--optimizer", "sgd", "--precision", precision,
                f"--fold-transposes={fold}"]
        mlir[fold] = run(args + ["--emit=mlir"]).stdout
        job = tmp_path / fold
        run(args + ["-o", str(job)])
        ops[fold] = kernel_ops(job)
        results[fold] = train_saving_params(job, data, tmp_path / (fold + "-params"), lr=0.01, threads=2)
    # gpt2-tiny has 2 blocks: 4 head Transposes forward (Q, Kt, V, Y) and 4 backward (dY,
    # dQ, dKt, dV) each, and the tied LM head's weight Transpose forward and backward: all
    # gone (the LM head's MatMul by Transpose(wte) is a Gemm with transB).
    folded, kept = ops["true"].count("Transpose"), ops["false"].count("Transpose")
    assert folded == 0 and kept == 18, (kept, folded)
    for op in ("graph.FusedAttention ", "graph.FusedAttentionGrad "):
        lines = [l for l in mlir["true"].splitlines() if op in l]
        assert len(lines) == 2, lines
        for l in lines:
            assert "q_perm = array<i64: 0, 2, 1, 3>" in l and "kt_perm = array<i64: 0, 2, 3, 1>" in l
            assert "v_perm = array<i64: 0, 2, 1, 3>" in l and "y_perm = array<i64: 0, 2, 1, 3>" in l
            assert "tensor<2x16x4x16x" in l  # [B, T, H, D] heads
        assert not any("_perm" in l for l in mlir["false"].splitlines() if op in l)
    (losses_t, params_t), (losses_f, params_f) = results["true"], results["false"]
    assert len(losses_t) == 5 and losses_t == losses_f, (losses_t, losses_f)
    assert params_t.keys() == params_f.keys() and len(params_t) > 10
    differ = [k for k in params_t if params_t[k].tobytes() != params_f[k].tobytes()]
    worst = max(float(np.max(np.abs(params_t[k].astype(np.float64) - params_f[k])) /
                      max(1e-30, float(np.max(np.abs(params_f[k])))))
                for k in params_t)
    # The attention layouts alone are bit-identical (the CPU kernels gather into the same
    # dense blocks); the LM head's Gemm(transB) sums its products in another order than
    # MatMul on the transposed copy does, so f32 parameters may differ in the last bits.
    assert worst <= 1e-6, (worst, differ[:5])
    print(f"{precision}: Transpose kernels {kept} -> {folded}; losses {losses_t}; "
          f"{len(params_t) - len(differ)} of {len(params_t)} parameters bit-identical, "
          f"largest relative difference {worst:.2e}")


def test_folded_pipeline_is_bit_identical(tmp_path):
    """A pipelined bf16 job (4 ranks: 2 stages x 2 replicas, 2 micro-batches): the folded
    layouts cross no stage boundary unchanged, and the losses equal the unfolded job's."""
    data = write_tokens(tmp_path / "tokens.bin", seed=99)
    cluster = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")
    losses = {}
    for fold in ("true", "false"):
        job = tmp_path / fold
        run([STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
             "--optimizer", "adamw", "--precision", "bf16", "--cluster", cluster,
             "--num-stages", "2", "--micro-batches", "2", f"--fold-transposes={fold}",
             "-o", str(job)])
        p = run([STRAIT_RUN, str(job), "--steps", "4", "--lr", "0.01", "--data", str(data),
                 "--threads", "1", "--timeout-ms", "60000"])
        losses[fold] = re.findall(r"^step \d+/4 loss (\S+)", p.stdout, re.M)
    assert len(losses["true"]) == 4 and losses["true"] == losses["false"], losses
    print(f"4 ranks, 2 stages, bf16: losses {losses['true']} with and without the fold")
