"""ONNX op types of opsets 18-24 (lib/Target/ONNX/ImportAttention.cpp: Attention and
RotaryEmbedding; ImportOpset18.cpp: AffineGrid, CenterCropPad, LpPool, Swish, TensorScatter,
Col2Im, Det, RoiAlign and the Bitwise ops; Unique in ImportDataDependent.cpp), run on the CPU
runtime against independent references.

* ``test_node_case``: the onnx 1.23 backend node tests of these ops, generated in the test
  from onnx's own case generators (onnx/backend/test/case/node/attention.py,
  rotaryembedding.py, ...: the expected outputs come from onnx.reference), inputs bound as
  initializers. Every case at an opset the importer reads (<= 24) runs; Attention's opset-25
  cases (sliding windows) and its opset-24 nonpad_kv_seqlen cases are left out.
* ``test_torch_export_trains``: a GQA causal attention block with rotary embeddings exported
  by PyTorch's dynamo exporter at opset 23 (it emits Attention and RotaryEmbedding); the
  forward loss and the gradients of every parameter and of the input from a Strait training
  step against PyTorch autograd.
"""
from __future__ import annotations

import os
import subprocess
import warnings

import numpy as np
import pytest

from jobutil import STRAIT_RUN, STRAITC
from test_recurrent import _bind_inputs, strait_forward

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(STRAITC) or not os.path.isfile(STRAIT_RUN),
                                reason="straitc or strait-run not built")

MAX_OPSET = 24
OPS = {"Attention", "RotaryEmbedding", "AffineGrid", "CenterCropPad", "LpPool", "Swish",
       "BitwiseAnd", "BitwiseOr", "BitwiseXor", "BitwiseNot", "TensorScatter", "Col2Im", "Det",
       "RoiAlign"}
# Ops whose generated cases hold expected values from another implementation (RoiAlign's
# differ from onnx.reference's by 9e-5 relative): compared with onnx.reference instead.
REFERENCE_OPS = {"RoiAlign"}
# Relative tolerance by the element type of the outputs: f32 kernels vs onnx.reference's
# numpy; the 16-bit reference rounds every step, Strait's kernels once.
TOL = {np.float32: 1e-5, np.float16: 2e-3}
TOL_BF16 = 1e-2


def _cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases
        cases = collect_testcases(None)
    out = {}
    for c in cases:
        node = c.model.graph.node[-1]
        if c.name.endswith("_expanded") or node.op_type not in OPS:
            continue
        if len(node.input) > 6 and node.input[6]:  # Attention's nonpad_kv_seqlen
            continue
        opset = max(o.version for o in c.model.opset_import if o.domain in ("", "ai.onnx"))
        if opset <= MAX_OPSET:
            out[c.name] = c
    return out


try:
    CASES = _cases()
except Exception:  # noqa: BLE001 - an onnx without the case generators: nothing to run
    CASES = {}


def _with_f32_outputs(model):
    """bf16 outputs cannot be dumped as .npy: a Cast to f32 after each."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for o in m.graph.output:
        if o.type.tensor_type.elem_type == TensorProto.BFLOAT16:
            inner = o.name + "_bf16"
            for node in m.graph.node:
                node.output[:] = [inner if x == o.name else x for x in node.output]
            m.graph.node.append(helper.make_node("Cast", [inner], [o.name], to=TensorProto.FLOAT))
            o.type.tensor_type.elem_type = TensorProto.FLOAT
    return m


def _compare(got, ref, tol):
    """Max relative difference over the finite entries; the infinite ones (masked scores of
    qk_matmul_output) must match exactly."""
    if ref.dtype.kind in "iub":  # integer ops: exact
        assert got.dtype == ref.dtype and np.array_equal(got, ref)
        return 0.0
    got, ref = np.asarray(got, np.float64), np.asarray(ref.astype(np.float32), np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    inf = np.isinf(ref)
    assert np.array_equal(np.isinf(got), inf) and np.array_equal(got[inf], ref[inf])
    assert not np.isnan(got).any(), "NaN in Strait's output"
    fin = ~inf
    if not fin.any():
        return 0.0
    err = float(np.abs(got[fin] - ref[fin]).max() / max(float(np.abs(ref[fin]).max()), 1e-6))
    assert err <= tol, err
    return err


@pytest.mark.skipif(not CASES, reason="needs onnx 1.23's backend test case generators")
@pytest.mark.parametrize("name", sorted(CASES))
def test_node_case(name, tmp_path):
    case = CASES[name]
    inputs, outputs = case.data_sets[0]
    feeds = {i.name: v for i, v in zip(case.model.graph.input, inputs)}
    got = strait_forward(_with_f32_outputs(case.model), feeds, tmp_path)
    if case.model.graph.node[-1].op_type in REFERENCE_OPS:
        from onnx.reference import ReferenceEvaluator
        outputs = ReferenceEvaluator(case.model).run(None, feeds)
    for o, ref in zip(case.model.graph.output, outputs):
        tol = TOL_BF16 if o.type.tensor_type.elem_type == TensorProto.BFLOAT16 else \
            TOL.get(ref.dtype.type, 0.0)
        err = _compare(got[o.name], ref, tol)
        print(f"{name}: {o.name} max relative difference {err:.1e}")


def test_cases_cover_all_ops():
    if not CASES:
        pytest.skip("needs onnx 1.23's backend test case generators")
    ops = {c.model.graph.node[-1].op_type for c in CASES.values()}
    assert ops == OPS and len(CASES) >= 110, (ops, len(CASES))


# ---------------------------------------------------------------------------------------
# A PyTorch export, forward and gradients

torch = None


def _block():
    import torch as t
    import torch.nn.functional as F

    class Block(t.nn.Module):
        """4 query heads, 2 key/value heads of 8, causal, rotary on Q and K."""

        def __init__(self):
            super().__init__()
            g = t.Generator().manual_seed(0)
            self.q = t.nn.Linear(32, 32)
            self.kv = t.nn.Linear(32, 32)
            pos = t.arange(16.0)[:, None] * (10000.0 ** (-t.arange(0, 8, 2) / 8))[None]
            self.register_buffer("cos", t.cos(pos))
            self.register_buffer("sin", t.sin(pos))
            self.register_buffer("R", t.randn(2, 6, 32, generator=g))

        export = True

        def rotate(self, x, pos):
            c = t.cat([self.cos[pos]] * 2, -1)[:, None]
            s = t.cat([self.sin[pos]] * 2, -1)[:, None]
            x1, x2 = x.chunk(2, -1)
            return x * c + t.cat([-x2, x1], -1) * s

        def forward(self, x, pos):
            B, T, C = x.shape
            q = self.q(x).view(B, T, 4, 8).transpose(1, 2)
            k, v = self.kv(x).view(B, T, 2, 2, 8).unbind(2)
            k, v = k.transpose(1, 2), v.transpose(1, 2)
            if self.export:
                q = t.onnx.ops.rotary_embedding(q, self.cos, self.sin, pos)
                k = t.onnx.ops.rotary_embedding(k, self.cos, self.sin, pos)
            else:  # the same rotation in plain PyTorch, which autograd differentiates
                q, k = self.rotate(q, pos), self.rotate(k, pos)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            return (y.transpose(1, 2).reshape(B, T, C) * self.R).sum()

    t.manual_seed(1)
    return t, Block()


def test_torch_export_trains(tmp_path):
    t = pytest.importorskip("torch")
    if not hasattr(t.onnx, "ops") or not hasattr(t.onnx.ops, "rotary_embedding"):
        pytest.skip("torch without torch.onnx.ops.rotary_embedding")
    t, block = _block()
    x = t.randn(2, 6, 32, generator=t.Generator().manual_seed(2), requires_grad=True)
    pos = t.tensor([[0, 1, 2, 3, 4, 5], [3, 4, 5, 6, 7, 8]])
    path = tmp_path / "block.onnx"
    block.eval()
    t.onnx.export(block, (x, pos), str(path), dynamo=True, opset_version=23, verbose=False)
    block.export = False
    model = onnx.load(str(path))
    ops = [n.op_type for n in model.graph.node]
    assert ops.count("Attention") == 1 and ops.count("RotaryEmbedding") == 2, ops

    loss = block(x, pos)
    loss.backward()
    ref = {"x": x.grad.numpy()}
    for name, p in block.named_parameters():
        ref[name] = p.grad.numpy()

    feeds = {"x": x.detach().numpy(), "pos": pos.numpy()}
    bound = _bind_inputs(model, feeds)
    out = model.graph.output[0].name
    onnx.save(bound, str(tmp_path / "bound.onnx"))
    job, dump = str(tmp_path / "job"), str(tmp_path / "dump")
    c = subprocess.run([STRAITC, str(tmp_path / "bound.onnx"), "--loss", "output",
                        "--optimizer", "none", "--return-gradients", "--trainable", "*",
                        "--frozen", "cos,sin,R",
                        "-o", job], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr[-3000:]
    r = subprocess.run([STRAIT_RUN, job, "--steps", "1", "--threads", "1", "--quiet",
                        "--dump-outputs", dump], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stderr + r.stdout)[-3000:]
    got_loss = float(np.load(os.path.join(dump, f"{out}.rank0.npy")))
    assert abs(got_loss - float(loss)) <= 1e-4 * max(1.0, abs(float(loss))), (got_loss, loss)

    # The exporter (default optimize=True) stores weights as unmarked initializers of its own
    # names (W^T for MatMul), constants by default: --trainable '*' above trains them.
    # match each Strait gradient to a PyTorch parameter through the initializer's value.
    inits = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    values = {"x": feeds["x"], **{n: p.detach().numpy() for n, p in block.named_parameters()}}
    checked = []
    for name, init in list(inits.items()) + [("x", feeds["x"])]:
        if name in ("cos", "sin", "R") or init.dtype != np.float32:
            continue
        match = [(pn, False) for pn, pv in values.items() if pv.shape == init.shape and
                 np.array_equal(pv, init)]
        match += [(pn, True) for pn, pv in values.items() if pv.ndim == 2 and
                  pv.T.shape == init.shape and np.array_equal(pv.T, init)]
        if not match:
            continue
        pname, transposed = match[0]
        g = np.load(os.path.join(dump, f"grad.{name}.rank0.npy"))
        want = ref[pname].T if transposed else ref[pname]
        err = float(np.abs(g - want).max() / np.abs(want).max())
        assert err <= 1e-4, f"d{pname} ({name}) differs from PyTorch by {err:.1e}"
        checked.append(pname)
        print(f"d{pname}: max relative difference to PyTorch {err:.1e}")
    assert sorted(checked) == sorted(values), (checked, list(values))


# ---------------------------------------------------------------------------------------
# Gradients of the lowered ops against finite differences (test_gradient_fd's harness:
# a Strait training step's gradients vs central differences through onnxruntime)

def _away_from_zero(shape, seed):
    rng = np.random.default_rng(seed)
    return (rng.uniform(0.3, 1.5, shape) * rng.choice([-1.0, 1.0], shape)).astype(np.float32)


def _grad_cases():
    from test_gradient_fd import Case
    return {
        "swish": Case("swish", lambda T: [helper.make_node("Swish", ["p0"], ["y"], alpha=1.3)],
                      {"p0": _away_from_zero((2, 5), 1)}, opset=24),
        "lppool-p2": Case("lppool_p2", lambda T: [helper.make_node(
            "LpPool", ["p0"], ["y"], kernel_shape=[2, 2], pads=[1, 0, 0, 1], strides=[1, 2])],
            {"p0": _away_from_zero((1, 2, 4, 4), 2)}, opset=18),
        "lppool-p3": Case("lppool_p3", lambda T: [helper.make_node(
            "LpPool", ["p0"], ["y"], kernel_shape=[3], p=3, strides=[2])],
            {"p0": _away_from_zero((2, 2, 7), 3)}, opset=18),
        "globallppool-p3": Case("globallppool_p3", lambda T: [helper.make_node(
            "GlobalLpPool", ["p0"], ["y"], p=3)], {"p0": _away_from_zero((2, 3, 2, 3), 4)},
            opset=18),
        "affinegrid": Case("affinegrid", lambda T: [
            helper.make_node("Constant", [], ["size"], value=onnx.numpy_helper.from_array(
                np.array([2, 1, 3, 4], np.int64), "size")),
            helper.make_node("AffineGrid", ["p0", "size"], ["y"], align_corners=0)],
            {"p0": _away_from_zero((2, 2, 3), 5)}, opset=20),
        "tensorscatter": Case("tensorscatter", lambda T: [
            helper.make_node("Constant", [], ["w"], value=onnx.numpy_helper.from_array(
                np.array([1, 3], np.int64), "w")),
            helper.make_node("TensorScatter", ["p0", "p1", "w"], ["y"], mode="circular")],
            {"p0": _away_from_zero((2, 2, 4, 3), 6), "p1": _away_from_zero((2, 2, 2, 3), 7)},
            opset=24),
    }


@pytest.mark.parametrize("name", ["swish", "lppool-p2", "lppool-p3", "globallppool-p3",
                                  "affinegrid", "tensorscatter"])
def test_lowered_op_gradient(name, tmp_path):
    pytest.importorskip("onnxruntime")
    from test_gradient_fd import _check
    dtype, worst = _check(_grad_cases()[name], tmp_path)
    print(f"{name}: gradient vs finite differences ({dtype}) max relative difference {worst:.1e}")


# ---------------------------------------------------------------------------------------
# Unique of a constant, evaluated at import (Debian's libonnx-testdata node tests)

UNIQUE_DATA = "/usr/share/libonnx-testdata/data/node"
UNIQUE_TESTS = [t for t in ("test_unique_not_sorted_without_axis", "test_unique_sorted_with_axis",
                            "test_unique_sorted_with_axis_3d",
                            "test_unique_sorted_with_negative_axis",
                            "test_unique_sorted_without_axis")
                if os.path.isdir(os.path.join(UNIQUE_DATA, t))]


@pytest.mark.skipif(not UNIQUE_TESTS, reason="needs Debian's libonnx-testdata")
@pytest.mark.parametrize("test", UNIQUE_TESTS)
def test_unique_of_constant(test, tmp_path):
    """X becomes a Constant node (Unique's output shapes depend on its values). A program
    returns no constants, so each output gets a zero computed from a float input (a
    variable) added: Y + z, the index outputs + Cast(z), z = ReduceSum of two zeros."""
    from test_recurrent import node_test_data
    model, feeds, outs = node_test_data(test)
    x = model.graph.input[0].name
    g = model.graph
    g.node.insert(0, helper.make_node("Constant", [], [x], value=onnx.numpy_helper.from_array(
        feeds[x], x)))
    del g.input[:]
    g.input.append(helper.make_tensor_value_info("z2", TensorProto.FLOAT, [2]))
    g.node.append(helper.make_node("ReduceSum", ["z2"], ["z"], keepdims=0))
    g.node.append(helper.make_node("Cast", ["z"], ["zi"], to=TensorProto.INT64))
    names = [o.name for o in g.output]
    del g.output[:]
    for name in names:
        zero = "z" if outs[name].dtype == np.float32 else "zi"
        g.node.append(helper.make_node("Add", [name, zero], [name + "_out"]))
        g.output.append(helper.make_tensor_value_info(name + "_out", TensorProto.UNDEFINED, None))
    got = strait_forward(model, {"z2": np.zeros(2, np.float32)}, tmp_path)
    for name in names:
        assert np.array_equal(got[name + "_out"], outs[name]), (name, got[name + "_out"], outs[name])
