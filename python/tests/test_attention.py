"""graph-fuse-attention end to end, on the CPU runtime.

Exported transformers spell attention as MatMul(Q, Kt) -> Mul|Div by a constant ->
[Add a mask] -> Softmax -> MatMul(P, V); graph-fuse-attention rewrites it into one
FusedAttention (and autodiff into one FusedAttentionGrad) that never holds the whole
T x T score matrix. Checks:

* gradients of small decomposed-attention models (GPT-2's scaled and masked form, BERT's
  Div form, a causal mask with fewer queries than keys) against central finite
  differences through onnxruntime of the same decomposition (the machinery of
  test_gradient_fd.py, independent of Strait), with the compiled programs holding the
  fused kernels and none of the decomposition;
* the bundled gpt2-tiny and llama-tiny train to the same losses fused and with
  --fuse-attention=false. The two programs do not round alike: the fused kernel sums the
  softmax in blocks of query rows with f32 exponentials and recomputes the probabilities in
  the backward from the saved log-sum-exp, the decomposition rounds each op's result.
  Those differences (~1e-7 relative per score) pass through the layers and 5 SGD steps;
  2e-5 relative is far below what a wrong kernel or rule gives (the SGD steps at lr 0.1 move
  the losses by ~1e-2 to 1e-1).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

import test_gradient_fd as fd
from jobutil import ROOT, STRAIT_RUN, STRAITC, kernel_ops, run, step_losses, write_tokens

helper = fd.helper


def _attention_nodes(scale_op, scale, bias=None, extra=()):
    """p0 = Q, p1 = Kt, p2 = V; `bias` a constant mask added to the scaled scores."""
    def nodes(T):
        out = [fd._const("c", np.array(scale), T),
               helper.make_node("MatMul", ["p0", "p1"], ["s"]),
               helper.make_node(scale_op, ["s", "c"], ["ss"])]
        last = "ss"
        if bias is not None:
            out += [fd._const("mask", bias, T), helper.make_node("Add", [last, "mask"], ["sb"])]
            last = "sb"
        out += [helper.make_node("Softmax", [last], ["pr"], axis=-1),
                helper.make_node("MatMul", ["pr", "p2"], ["y"])]
        return out + list(extra)
    return nodes


def _causal(tq, tk, lead=(1, 1), masked=-1e9):
    """0 where key j <= i + tk - tq, `masked` above. A finite -1e9 stays a Bias operand
    (graph-fuse-attention turns only masks <= -1e30 or -inf into causal = 1)."""
    i, j = np.arange(tq)[:, None], np.arange(tk)[None, :]
    return np.where(j <= i + tk - tq, 0.0, masked).reshape(*lead, tq, tk)


CASES = {
    # GPT-2: Mul by 1/sqrt(d), Add a [B, 1, T, T] causal mask, batch [B, H].
    "gpt2-masked": fd.Case("attn_gpt2", _attention_nodes("Mul", 0.5, _causal(5, 5)), {
        "p0": fd._r((2, 2, 5, 4), 301), "p1": fd._r((2, 2, 4, 5), 302),
        "p2": fd._r((2, 2, 5, 3), 303)}),
    # BERT: Div by sqrt(d), no mask, one batch dim, odd sizes.
    "bert-div": fd.Case("attn_bert", _attention_nodes("Div", 2.0), {
        "p0": fd._r((3, 7, 4), 311), "p1": fd._r((3, 4, 6), 312),
        "p2": fd._r((3, 6, 5), 313)}),
    # Fewer queries than keys (a decoding window): the mask is offset by Tk - Tq.
    "causal-window": fd.Case("attn_window", _attention_nodes("Mul", 0.7, _causal(3, 6, (1,))), {
        "p0": fd._r((2, 3, 4), 321), "p1": fd._r((2, 4, 6), 322),
        "p2": fd._r((2, 6, 4), 323)}),
    # The same two masks at -inf: the pass drops the constant Bias for causal = 1.
    "gpt2-causal-flag": fd.Case("attn_gpt2_causal", _attention_nodes(
        "Mul", 0.5, _causal(5, 5, masked=-np.inf)), {
        "p0": fd._r((2, 2, 5, 4), 331), "p1": fd._r((2, 2, 4, 5), 332),
        "p2": fd._r((2, 2, 5, 3), 333)}),
    "window-causal-flag": fd.Case("attn_window_causal", _attention_nodes(
        "Mul", 0.7, _causal(3, 6, (1,), masked=-np.inf)), {
        "p0": fd._r((2, 3, 4), 341), "p1": fd._r((2, 4, 6), 342),
        "p2": fd._r((2, 6, 4), 343)}),
}
CAUSAL_FLAG = {"gpt2-causal-flag", "window-causal-flag"}

pytestmark = pytest.mark.skipif(
    not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN)),
    reason="needs build/bin/straitc and strait-run")


def _write_model(case, tmp_path):
    path = tmp_path / f"{case.name}.onnx"
    path.write_bytes(fd._model(case, fd.F32, False, np.ones(fd._output_shape(case, fd.F32))))
    return path


def _compiled_ops(case, tmp_path, *flags):
    path = _write_model(case, tmp_path)
    job = tmp_path / ("ops" + "".join(flags).replace("-", "_").replace("=", "_"))
    run([STRAITC, str(path), "--loss", "output", "--optimizer", "none", "--return-gradients",
         *flags, "-o", str(job)])
    return kernel_ops(job)


@pytest.mark.parametrize("name", sorted(CASES))
def test_fused_attention_gradients_match_finite_differences(name, tmp_path):
    case = CASES[name]
    ops = _compiled_ops(case, tmp_path)
    assert ops.count("FusedAttention") == 1 and ops.count("FusedAttentionGrad") == 1, ops
    assert "Softmax" not in ops and "SoftmaxGrad" not in ops, ops
    assert "FusedAttention" not in _compiled_ops(case, tmp_path, "--fuse-attention=false")
    ir = run([STRAITC, str(_write_model(case, tmp_path)), "--loss", "output", "--optimizer",
              "none", "--emit=mlir", "-o", "-"]).stdout
    fused = [line for line in ir.splitlines() if "graph.FusedAttention " in line]
    assert len(fused) == 1, ir
    # Causal masks at -inf become the flag (no Bias operand); finite ones stay a Bias.
    assert ("causal = 1" in fused[0]) == (name in CAUSAL_FLAG), fused[0]
    operands = fused[0].split(") -> (")[0].count("tensor<")
    assert operands == (4 if name in {"gpt2-masked", "causal-window"} else 3), fused[0]
    dtype, worst = fd._check(case, tmp_path)
    print(f"{name}: largest relative gradient error {worst:.2e} against {dtype} differences")


@pytest.mark.parametrize("model,blocks", [("gpt2-tiny", 2), ("llama-tiny", 2)])
def test_fused_attention_model_trains_like_decomposed(model, blocks, tmp_path):
    path = os.path.join(ROOT, "models", model, f"{model}.onnx")
    if not os.path.exists(path):
        pytest.skip(f"models/{model} missing")
    data = write_tokens(tmp_path / "tokens.bin", seed=77)

    def compile_job(name, *flags):
        job = tmp_path / name
        run([STRAITC, path, "--input-shape", "input_ids=2x16", "--loss", "cross-entropy",
             "--optimizer", "sgd", *flags, "-o", str(job)])
        return job

    fused, decomposed = compile_job("fused"), compile_job("decomposed", "--fuse-attention=false")
    ops_f, ops_d = kernel_ops(fused), kernel_ops(decomposed)
    assert ops_f.count("FusedAttention") == blocks, ops_f
    assert ops_f.count("FusedAttentionGrad") == blocks, ops_f
    assert "Softmax" not in ops_f and "FusedAttention" not in ops_d
    assert len(ops_f) < len(ops_d), (len(ops_f), len(ops_d))
    print(f"{model} training step: {len(ops_d)} kernels decomposed, {len(ops_f)} fused")

    got, ref = step_losses(fused, data), step_losses(decomposed, data)
    assert len(ref) == 5 and len(got) == 5, (got, ref)
    assert max(ref) - min(ref) > 1e-3, ref  # the steps update and differ
    worst = max(abs(g - e) / abs(e) for g, e in zip(got, ref))
    print(f"losses fused {got} decomposed {ref}; largest relative difference {worst:.2e}")
    assert worst <= 2e-5, (got, ref)
