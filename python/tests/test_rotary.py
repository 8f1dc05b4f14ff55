"""graph-fuse-rotary end to end: llama-tiny's rotary embeddings as FusedRotaryEmbedding.

LLaMA exports rotate Q and K in the rotate-half form: x * cos + Concat(-x[..., h:],
x[..., :h]) * sin, five kernels forward (two Slices, Neg, Concat and the products) and their
gradients (SliceGrad, Split, ...) backward. graph-fuse-rotary makes each one
FusedRotaryEmbedding, whose gradient is the same op with adjoint = 1; graph-fold-transposes
then moves the heads' Transposes past it into the attention. The tables come from
rotary_emb.inv_freq, which PyTorch keeps as a buffer: the fused step freezes it (the
decomposed one is compiled with --frozen to match).

The fused f32 kernel computes x * c and (-x_p) * s rounded as the composed Mul, Neg, Concat,
Mul and Add kernels do, and its adjoint the gradient's products, each sum once
(runtime/test/RotaryTest.cpp checks that bit for bit), so five SGD steps give the same losses
and bit-identical parameters; bf16 losses agree to rounding.
"""

import os
import re

import pytest

from jobutil import ROOT, STRAIT_RUN, STRAITC, kernel_ops, run, train_saving_params, write_tokens

MODEL = os.path.join(ROOT, "models", "llama-tiny", "llama-tiny.onnx")

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN) and os.path.exists(MODEL)),
    reason="needs build/bin/straitc, strait-run and models/llama-tiny")


@pytest.mark.parametrize("precision", ["f32", "bf16"])
def test_fused_rotary_trains_like_decomposed(tmp_path, precision):
    data = write_tokens(tmp_path / "tokens.bin", seed=31)
    results, ops = {}, {}
    for fuse in ("true", "false"):
        args = [STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
                "--optimizer", "sgd", "--precision", precision, f"--fuse-rotary={fuse}"]
        if fuse == "false":
            args += ["--frozen", "*inv_freq"]
        job = tmp_path / fuse
        run(args + ["-o", str(job)])
        ops[fuse] = kernel_ops(job)
        results[fuse] = train_saving_params(job, data, tmp_path / (fuse + "-params"), lr=0.05, threads=2)
    fused, plain = ops["true"], ops["false"]
    # 2 layers x (Q, K): 4 rotations forward, 4 adjoints backward.
    assert fused.count("FusedRotaryEmbedding") == 8, fused.count("FusedRotaryEmbedding")
    assert "FusedRotaryEmbedding" not in plain
    for op in ("Slice", "SliceGrad", "Neg"):
        assert op not in fused and op in plain, op
    # The head Transposes moved past the rotations into the attention; the 2 left move the
    # [1, 1, T, D] tables once for all layers.
    assert fused.count("Transpose") == 2 and plain.count("Transpose") > 2
    (losses_f, params_f), (losses_p, params_p) = results["true"], results["false"]
    assert len(losses_f) == 5 and float(losses_f[-1]) < float(losses_f[0]), losses_f
    assert params_f.keys() == params_p.keys() and len(params_f) > 10
    if precision == "f32":
        assert losses_f == losses_p, (losses_f, losses_p)
        differ = [k for k in params_f if params_f[k].tobytes() != params_p[k].tobytes()]
        assert not differ, f"parameters differ fused vs decomposed: {differ[:5]}"
    else:
        # bf16: the fused op rounds once where the decomposed kernels round each product.
        worst = max(abs(float(a) - float(b)) / abs(float(b)) for a, b in zip(losses_f, losses_p))
        assert worst <= 2e-3, (losses_f, losses_p)
    print(f"{precision}: kernels {len(plain)} -> {len(fused)}; losses fused {losses_f} "
          f"decomposed {losses_p}")


def test_inv_freq_is_frozen():
    """The fused step trains no position table: rotary_emb.inv_freq, which only reaches the
    loss as the rotations' tables, is frozen (no gradient, no AdamW state, no update); without
    the fusion it is an ordinary variable. (--trainable '*': the export marks inv_freq as a
    buffer, which the default set leaves out anyway; this checks the rotary rule alone.)"""
    args = [STRAITC, MODEL, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
            "--optimizer", "adamw", "--emit=mlir", "--trainable", "*"]
    fused, plain = run(args).stdout, run(args + ["--fuse-rotary=false"]).stdout
    var = "@model.rotary_emb.inv_freq"
    assert re.search(rf"graph.Variable {re.escape(var)} {{frozen[,}}]", fused)
    assert f"for {var} " not in fused and f"{var}.adam_m" not in fused
    assert f"for {var} " in plain and f"{var}.adam_m" in plain
