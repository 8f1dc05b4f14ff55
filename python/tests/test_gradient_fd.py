"""Finite-difference checks of the gradient rules, run on the CPU runtime.

For each op family with a gradient rule, a tiny ONNX model is built with onnx.helper whose
float tensors are initializers (the trainable variables) and whose output is a scalar
loss ``L = sum(y * R)`` (R a fixed random constant, so dL/dy is a generic direction).
straitc compiles it to a gradients-only training step (``--loss output --optimizer none
--return-gradients``), strait-run runs it and dumps ``grad.<name>``. The reference is a
central finite difference of the same model evaluated by onnxruntime (independent of Strait)
with the parameters as inputs:

* in float64 (h = 1e-6) when onnxruntime has float64 kernels for every op of the model:
  truncation h^2 f'''/6 ~ 1e-12 and rounding 1e-16 |L| / h ~ 1e-10, so the difference to
  Strait's f32 gradient is Strait's own rounding (~1e-6 relative); tolerance 2e-4;
* otherwise in float32 (h = 1e-2): truncation ~ 1e-5 and rounding 6e-8 |L| / h ~ 1e-5 for
  |L| ~ 1, tolerance 5e-3.

Errors are relative to the largest reference entry of each parameter (as gradcheck.py).
Inputs stay away from kinks (Relu, Abs, Clip, MaxPool ties) by more than h.

The optimizer checks run a few full training steps (SGD with momentum and Nesterov, AdamW
with weight decay and bias correction, clipping by global norm, a warm-up schedule) and
compare the parameters the step reads with a numpy implementation of the update.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import jobutil  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = jobutil.STRAIT_RUN  # the build's launcher, else build-rt's
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists(STRAITC) or not os.path.isfile(STRAIT_RUN),
                                reason="straitc or strait-run not built")

F32, F64 = TensorProto.FLOAT, TensorProto.DOUBLE
NP = {F32: np.float32, F64: np.float64}
OPSET = 17


class Case:
    """nodes(T) -> list of nodes reading parameters p0, p1, ... and writing `y`; params: name
    -> array; loss: straitc --loss (``output``: the model's sum(y*R); ``mse`` /
    ``cross-entropy``: built by the pass against all-zero labels, which strait-run feeds
    when no data is given)."""

    def __init__(self, name, nodes, params, loss="output", flags=(), opset=OPSET,
                 ref_nodes=None):
        self.name, self.nodes, self.params, self.loss, self.flags = (
            name, nodes, params, loss, list(flags))
        self.opset = opset
        # The reference's nodes when they differ (BatchNormalization: the training step
        # uses batch statistics, written out explicitly for onnxruntime).
        self.ref_nodes = ref_nodes or nodes


def _rng(name):
    """A generator seeded by the case name (stable across runs, unlike hash())."""
    return np.random.default_rng(sum(ord(c) * 131**i for i, c in enumerate(name)) % (2**32))


def _const(name, value, T):
    arr = np.asarray(value)
    if arr.dtype.kind == "f":
        arr = arr.astype(NP[T])
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(arr, name))


def _output_shape(case: Case, T) -> list[int]:
    """y's shape, from onnxruntime (ONNX shape inference leaves function ops such as
    GroupNormalization-21 unshaped)."""
    graph = helper.make_graph(
        case.nodes(T), "shape",
        [helper.make_tensor_value_info(n, T, a.shape) for n, a in case.params.items()],
        [helper.make_tensor_value_info("y", T, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feed = {n: a.astype(NP[T]) for n, a in case.params.items()}
    return list(sess.run(None, feed)[0].shape)


def _model(case: Case, T, as_inputs: bool, R: np.ndarray | None) -> bytes:
    """The case's model in element type T; parameters are initializers (Strait) or inputs
    (the onnxruntime reference). With loss=output the tail sum(y * R) makes `loss`."""
    nodes = case.ref_nodes(T) if as_inputs else case.nodes(T)
    outputs = []
    if case.loss == "output":
        nodes += [_const("R", R, T), helper.make_node("Mul", ["y", "R"], ["yr"]),
                  helper.make_node("ReduceSum", ["yr"], ["loss"], keepdims=0)]
        outputs.append(helper.make_tensor_value_info("loss", T, []))
    else:
        outputs.append(helper.make_tensor_value_info("y", T, None))
    params = {n: a.astype(NP[T]) for n, a in case.params.items()}
    if as_inputs:
        inputs = [helper.make_tensor_value_info(n, T, a.shape) for n, a in params.items()]
        inits = []
    else:
        inputs = []
        inits = [numpy_helper.from_array(a, n) for n, a in params.items()]
    graph = helper.make_graph(nodes, case.name.replace("-", "_"), inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", case.opset)])
    return model.SerializeToString()


def _reference_loss(case: Case, y: np.ndarray) -> float:
    """The pass-built losses against all-zero labels."""
    if case.loss == "mse":
        return float(np.mean(y.astype(np.float64) ** 2))
    logits = y.reshape(-1, y.shape[-1]).astype(np.float64)
    m = logits.max(axis=1, keepdims=True)
    logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
    return float(-np.mean(logp[:, 0]))


def finite_differences(case: Case, R) -> tuple[dict, str]:
    """Central differences of L with respect to every parameter entry, through onnxruntime
    (float64 when it runs the model, else float32). Returns ({name: grad}, dtype name)."""
    for T, h in ((F64, 1e-6), (F32, 1e-2)):
        try:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
            sess = ort.InferenceSession(_model(case, T, True, R), opts,
                                        providers=["CPUExecutionProvider"])
            base = {n: a.astype(np.float32).astype(NP[T]) for n, a in case.params.items()}
            sess.run(None, base)
            break
        except Exception:  # noqa: BLE001 - no kernel of that type: next type
            if T == F32:
                raise

    def loss(feed):
        out = sess.run(None, feed)[0]
        return float(out) if case.loss == "output" else _reference_loss(case, out)

    grads = {}
    for name, value in base.items():
        g = np.zeros(value.shape, np.float64)
        for idx in np.ndindex(value.shape):
            feed = dict(base)
            plus, minus = value.copy(), value.copy()
            plus[idx] += h
            minus[idx] -= h
            feed[name] = plus
            lp = loss(feed)
            feed[name] = minus
            g[idx] = (lp - loss(feed)) / (2 * h)
        grads[name] = g
    return grads, "f64" if T == F64 else "f32"


def strait_gradients(case: Case, R, tmp) -> dict:
    path = os.path.join(tmp, f"{case.name}.onnx")
    with open(path, "wb") as f:
        f.write(_model(case, F32, False, R))
    job, dump = os.path.join(tmp, "job"), os.path.join(tmp, "dump")
    c = subprocess.run([STRAITC, path, "--loss", case.loss, "--optimizer", "none",
                        "--return-gradients", *case.flags, "-o", job],
                       capture_output=True, text=True)
    assert c.returncode == 0, c.stderr[-2000:]
    r = subprocess.run([STRAIT_RUN, job, "--steps", "1", "--threads", "1", "--dump-outputs",
                        dump], capture_output=True, text=True, timeout=120)
    logs = os.path.join(job, "logs", "rank0.log")
    assert r.returncode == 0, (r.stderr + r.stdout + open(logs).read())[-2000:]
    return {n: np.load(os.path.join(dump, f"grad.{n}.rank0.npy")) for n in case.params}


def _check(case: Case, tmp):
    R = None
    if case.loss == "output":
        R = _rng(case.name + "R").uniform(-1, 1, _output_shape(case, F32))
    ref, dtype = finite_differences(case, R)
    got = strait_gradients(case, R, str(tmp))
    tol = 2e-4 if dtype == "f64" else 5e-3
    worst = 0.0
    for name, g in ref.items():
        assert got[name].shape == g.shape, name
        scale = float(np.abs(g).max())
        assert scale > 1e-3, f"{case.name}: d{name} is ~0, a weak check"
        err = float(np.abs(got[name] - g).max()) / scale
        assert err <= tol, f"{case.name}: d{name} differs by {err:.2e} (ref {dtype})"
        worst = max(worst, err)
    return dtype, worst


# ---------------------------------------------------------------------------------------
# Cases, by family.

def _u(name, low=-2.0, high=2.0, shape=(2, 3), **attrs):
    """A unary op on p0, values in [low, high] away from 0 (kinks of Relu, Abs...)."""
    rng = _rng(name)
    v = rng.uniform(low, high, shape)
    v = np.where(np.abs(v) < 0.05, v + 0.1, v)
    return Case(name, lambda T: [helper.make_node(name, ["p0"], ["y"], **attrs)], {"p0": v})


def _b(name, sa=(2, 3), sb=(3,), positive_b=False, **attrs):
    """A binary op on p0 [sa] and p1 [sb] (broadcast)."""
    rng = _rng(name)
    a = rng.uniform(-2, 2, sa)
    b = rng.uniform(0.5, 2, sb) if positive_b else rng.uniform(-2, 2, sb)
    return Case(name, lambda T: [helper.make_node(name, ["p0", "p1"], ["y"], **attrs)],
                {"p0": a, "p1": b})


def _n(name, nodes, **params):
    return Case(name, nodes, params)


def _r(shape, seed, low=-1.0, high=1.0):
    return np.random.default_rng(seed).uniform(low, high, shape)


def _cases():
    c = []
    # elementwise, unary
    for op in ("Sin", "Cos", "Softsign", "Exp", "Tanh", "Sigmoid", "Neg", "Abs", "Relu",
               "Erf", "Softplus", "HardSwish"):
        c.append(_u(op))
    for op in ("Sqrt", "Log", "Reciprocal"):
        c.append(_u(op, 0.3, 2.0))
    c.append(_u("LeakyRelu", alpha=0.1))
    c.append(_u("Elu", alpha=0.7))
    c.append(_u("HardSigmoid", -4.0, 4.0, alpha=0.3, beta=0.4))
    # elementwise, binary with broadcasting
    for op in ("Add", "Sub", "Mul"):
        c.append(_b(op))
    for op in ("Max", "Min"):  # p1 wins in some rows, p0 in others
        c.append(_b(op, sa=(5, 3)))
    c.append(_b("Div", positive_b=True))
    c.append(Case("Pow", lambda T: [helper.make_node("Pow", ["p0", "p1"], ["y"])],
                  {"p0": _r((2, 3), 1, 0.5, 2.0), "p1": _r((3,), 2, -1.5, 2.0)}))
    c.append(Case("Clip", lambda T: [_const("lo", np.array(-0.5), T),
                                     _const("hi", np.array(0.7), T),
                                     helper.make_node("Clip", ["p0", "lo", "hi"], ["y"])],
                  {"p0": np.array([[-1.2, -0.3, 0.1], [0.5, 0.9, 1.4]])}))
    c.append(Case("Where", lambda T: [
        _const("cond", np.array([[True, False, True], [False, False, True]]), T),
        helper.make_node("Where", ["cond", "p0", "p1"], ["y"])],
        {"p0": _r((2, 3), 3), "p1": _r((3,), 4)}))
    c.append(Case("Cast", lambda T: [
        helper.make_node("Cast", ["p0"], ["c"], to=T),
        helper.make_node("Mul", ["c", "c"], ["y"])], {"p0": _r((2, 3), 5)}))
    c.append(Case("Sum-Mean", lambda T: [
        helper.make_node("Sum", ["p0", "p1", "p0"], ["s"]),
        helper.make_node("Mean", ["s", "p1"], ["y"])], {"p0": _r((2, 3), 6), "p1": _r((3,), 7)}))
    # linear algebra
    c.append(Case("MatMul", lambda T: [helper.make_node("MatMul", ["p0", "p1"], ["y"])],
                  {"p0": _r((2, 3, 4), 8), "p1": _r((4, 5), 9)}))
    c.append(Case("MatMul-batched", lambda T: [helper.make_node("MatMul", ["p0", "p1"], ["y"])],
                  {"p0": _r((2, 3, 4), 10), "p1": _r((2, 4, 2), 11)}))
    c.append(Case("Gemm", lambda T: [helper.make_node("Gemm", ["p0", "p1", "p2"], ["y"],
                                                      transA=1, transB=1, alpha=0.7, beta=1.3)],
                  {"p0": _r((4, 3), 12), "p1": _r((5, 4), 13), "p2": _r((5,), 14)}))
    # reductions, softmax
    for op in ("ReduceSum", "ReduceMean", "ReduceSumSquare", "ReduceMax", "ReduceMin"):
        def nodes(T, op=op):
            if op == "ReduceSum":
                return [_const("axes", np.array([1], np.int64), T),
                        helper.make_node(op, ["p0", "axes"], ["y"], keepdims=1)]
            return [helper.make_node(op, ["p0"], ["y"], axes=[1], keepdims=0)]
        c.append(Case(op, nodes, {"p0": _r((2, 4, 3), 15)}))
    c.append(Case("Softmax", lambda T: [helper.make_node("Softmax", ["p0"], ["y"], axis=-1)],
                  {"p0": _r((2, 3, 4), 16, -2, 2)}))
    c.append(Case("LogSoftmax", lambda T: [helper.make_node("LogSoftmax", ["p0"], ["y"],
                                                            axis=1)],
                  {"p0": _r((2, 3, 4), 17, -2, 2)}))
    # normalization
    c.append(Case("LayerNormalization", lambda T: [helper.make_node(
        "LayerNormalization", ["p0", "p1", "p2"], ["y"], axis=-1, epsilon=1e-5)],
        {"p0": _r((2, 3, 4), 18, -2, 2), "p1": _r((4,), 19, 0.5, 1.5), "p2": _r((4,), 20)}))
    # RMSNormalization (opset 23) and the LLaMA decomposition that graph-fuse-rmsnorm
    # rewrites into it (x * Reciprocal(Sqrt(ReduceMean(Pow(x, 2)) + eps)) * w); the
    # reference evaluates the decomposition op by op.
    c.append(Case("RMSNormalization", lambda T: [helper.make_node(
        "RMSNormalization", ["p0", "p1"], ["y"], axis=-1, epsilon=1e-5)],
        {"p0": _r((2, 3, 8), 21, -2, 2), "p1": _r((8,), 22, 0.5, 1.5)}, opset=23))
    c.append(Case("RMSNormDecomposed", lambda T: [
        _const("two", np.array(2.0), T), _const("eps", np.array(1e-5), T),
        helper.make_node("Pow", ["p0", "two"], ["sq"]),
        helper.make_node("ReduceMean", ["sq"], ["ms"], axes=[-1], keepdims=1),
        helper.make_node("Add", ["ms", "eps"], ["mse"]),
        helper.make_node("Sqrt", ["mse"], ["rms"]),
        helper.make_node("Reciprocal", ["rms"], ["inv"]),
        helper.make_node("Mul", ["p0", "inv"], ["xn"]),
        helper.make_node("Mul", ["p1", "xn"], ["y"])],
        {"p0": _r((2, 3, 8), 23, -2, 2), "p1": _r((8,), 24, 0.5, 1.5)}))
    # BatchNormalization: the training step normalizes with the batch statistics
    mean, var = _r((3,), 87), _r((3,), 88, 0.5, 1.5)

    def bn_reference(T):
        return [_const("eps", np.array(1e-5), T),
                helper.make_node("ReduceMean", ["p0"], ["m"], axes=[0, 2, 3], keepdims=1),
                helper.make_node("Sub", ["p0", "m"], ["c"]),
                helper.make_node("Mul", ["c", "c"], ["c2"]),
                helper.make_node("ReduceMean", ["c2"], ["v"], axes=[0, 2, 3], keepdims=1),
                helper.make_node("Add", ["v", "eps"], ["ve"]),
                helper.make_node("Sqrt", ["ve"], ["sd"]),
                helper.make_node("Div", ["c", "sd"], ["xh"]),
                _const("cs", np.array([1, 3, 1, 1], np.int64), T),
                helper.make_node("Reshape", ["p1", "cs"], ["s4"]),
                helper.make_node("Reshape", ["p2", "cs"], ["b4"]),
                helper.make_node("Mul", ["xh", "s4"], ["xs"]),
                helper.make_node("Add", ["xs", "b4"], ["y"])]
    c.append(Case("BatchNormalization", lambda T: [
        _const("mean", mean, T), _const("var", var, T),
        helper.make_node("BatchNormalization", ["p0", "p1", "p2", "mean", "var"], ["y"],
                         epsilon=1e-5)],
        {"p0": _r((4, 3, 2, 2), 89, -2, 2), "p1": _r((3,), 90, 0.5, 1.5), "p2": _r((3,), 91)},
        ref_nodes=bn_reference))
    # convolution, pooling
    c.append(Case("Conv", lambda T: [helper.make_node(
        "Conv", ["p0", "p1", "p2"], ["y"], pads=[1, 0, 1, 1], strides=[2, 1], group=2)],
        {"p0": _r((2, 4, 5, 4), 21), "p1": _r((4, 2, 3, 2), 22), "p2": _r((4,), 23)}))
    # depthwise (group == channels): the CPU backend's direct kernels, strided and not
    c.append(Case("Conv-depthwise", lambda T: [helper.make_node(
        "Conv", ["p0", "p1", "p2"], ["y"], pads=[1, 1, 1, 0], strides=[2, 2], group=3)],
        {"p0": _r((2, 3, 5, 6), 190), "p1": _r((3, 1, 3, 3), 191), "p2": _r((3,), 192)}))
    c.append(Case("Conv-depthwise-5x5", lambda T: [helper.make_node(
        "Conv", ["p0", "p1"], ["y"], pads=[2, 2, 2, 2], group=2)],
        {"p0": _r((2, 2, 4, 5), 193), "p1": _r((2, 1, 5, 5), 194)}))
    c.append(Case("Conv-dilated", lambda T: [helper.make_node(
        "Conv", ["p0", "p1"], ["y"], dilations=[2, 1], pads=[1, 1, 1, 1])],
        {"p0": _r((1, 2, 5, 4), 24), "p1": _r((3, 2, 2, 2), 25)}))
    x = np.random.default_rng(26).permutation(2 * 2 * 4 * 5).reshape(2, 2, 4, 5) / 10.0 - 2
    c.append(Case("MaxPool", lambda T: [helper.make_node(
        "MaxPool", ["p0"], ["y"], kernel_shape=[2, 3], strides=[1, 2], pads=[0, 1, 1, 1])],
        {"p0": x}))
    c.append(Case("AveragePool", lambda T: [helper.make_node(
        "AveragePool", ["p0"], ["y"], kernel_shape=[2, 2], strides=[2, 1], pads=[1, 0, 0, 1],
        count_include_pad=0)], {"p0": _r((2, 2, 4, 5), 27)}))
    c.append(Case("AveragePool-pad", lambda T: [helper.make_node(
        "AveragePool", ["p0"], ["y"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1],
        count_include_pad=1)], {"p0": _r((1, 2, 5, 5), 28)}))
    c.append(Case("GlobalAveragePool", lambda T: [helper.make_node(
        "GlobalAveragePool", ["p0"], ["y"])], {"p0": _r((2, 3, 2, 4), 29)}))
    # data movement
    c.append(Case("Gather", lambda T: [
        _const("idx", np.array([[0, 2], [2, 3]], np.int64), T),
        helper.make_node("Gather", ["p0", "idx"], ["y"], axis=0)], {"p0": _r((4, 3), 30)}))
    c.append(Case("Gather-axis1", lambda T: [
        _const("idx", np.array([1, 1, 0], np.int64), T),
        helper.make_node("Gather", ["p0", "idx"], ["y"], axis=1)], {"p0": _r((2, 3), 31)}))
    c.append(Case("Concat-Split", lambda T: [
        helper.make_node("Concat", ["p0", "p1"], ["c"], axis=1),
        _const("sizes", np.array([1, 4], np.int64), T),
        helper.make_node("Split", ["c", "sizes"], ["s0", "s1"], axis=1),
        helper.make_node("Mul", ["s1", "s1"], ["m"]),
        helper.make_node("Concat", ["m", "s0"], ["y"], axis=1)],
        {"p0": _r((2, 2, 3), 32), "p1": _r((2, 3, 3), 33)}))
    c.append(Case("Slice", lambda T: [
        _const("st", np.array([3, 0], np.int64), T), _const("en", np.array([-5, 9], np.int64), T),
        _const("ax", np.array([1, 2], np.int64), T), _const("sp", np.array([-1, 2], np.int64), T),
        helper.make_node("Slice", ["p0", "st", "en", "ax", "sp"], ["y"])],
        {"p0": _r((2, 4, 5), 34)}))
    c.append(Case("Transpose-Reshape", lambda T: [
        helper.make_node("Transpose", ["p0"], ["t"], perm=[2, 0, 1]),
        _const("shape", np.array([4, -1], np.int64), T),
        helper.make_node("Reshape", ["t", "shape"], ["r"]),
        helper.make_node("Flatten", ["r"], ["f"], axis=1),
        _const("ax", np.array([0], np.int64), T),
        helper.make_node("Unsqueeze", ["f", "ax"], ["u"]),
        helper.make_node("Squeeze", ["u", "ax"], ["y"])], {"p0": _r((2, 3, 4), 35)}))
    c.append(Case("Expand", lambda T: [
        _const("shape", np.array([2, 3, 4], np.int64), T),
        helper.make_node("Expand", ["p0", "shape"], ["y"])], {"p0": _r((3, 1), 36)}))
    c.append(Case("Pad", lambda T: [
        _const("pads", np.array([0, 1, 2, 0, 2, 1], np.int64), T),
        helper.make_node("Pad", ["p0", "pads"], ["y"], mode="constant")],
        {"p0": _r((2, 3, 2), 37)}))
    # losses
    c.append(Case("SoftmaxCrossEntropyLoss", lambda T: [
        _const("lab", np.array([1, 0, 3, 2, 1], np.int64), T),
        helper.make_node("SoftmaxCrossEntropyLoss", ["p0", "lab"], ["sce"], reduction="mean",
                         ignore_index=2),
        helper.make_node("Mul", ["sce", "sce"], ["y"])], {"p0": _r((5, 4), 38, -2, 2)}))
    c.append(Case("mse-loss", lambda T: [helper.make_node("Mul", ["p0", "p1"], ["y"])],
                  {"p0": _r((3, 4), 39), "p1": _r((4,), 40)}, loss="mse"))
    c.append(Case("cross-entropy-loss", lambda T: [helper.make_node("MatMul", ["p0", "p1"],
                                                                     ["y"])],
                  {"p0": _r((2, 3, 4), 41), "p1": _r((4, 5), 42)}, loss="cross-entropy"))
    # rules added with this file: Einsum, ReduceProd and the other reductions,
    # Group/InstanceNormalization, Tile, ConvTranspose
    for i, (eq, sa, sb) in enumerate([("bij,bjk->bik", (2, 3, 4), (2, 4, 2)),
                                      ("bhqd,bhkd->bhqk", (1, 2, 3, 4), (1, 2, 5, 4)),
                                      ("ij,jk", (3, 4), (4, 2)),
                                      ("...ij,jk->...ik", (2, 1, 3, 4), (4, 2)),
                                      ("bi,bi->b", (3, 4), (3, 4)),
                                      ("i,j->ij", (3,), (4,)),
                                      ("...j,...j->...", (2, 1, 4), (1, 3, 4))]):
        c.append(Case(f"Einsum-{i}-{eq}", lambda T, eq=eq: [
            helper.make_node("Einsum", ["p0", "p1"], ["y"], equation=eq)],
            {"p0": _r(sa, 50 + i), "p1": _r(sb, 60 + i)}))
    c.append(Case("Einsum-transpose", lambda T: [
        helper.make_node("Einsum", ["p0"], ["y"], equation="ijk->kij")], {"p0": _r((2, 3, 4), 70)}))
    prod = _r((3, 4), 71, 0.5, 1.5) * np.sign(_r((3, 4), 72))
    prod[1, 2] = 0.0  # one zero in row 1: only that entry gets a gradient
    prod[2, 0] = prod[2, 3] = 0.0  # two zeros in row 2: no gradient
    c.append(Case("ReduceProd", lambda T: [helper.make_node("ReduceProd", ["p0"], ["y"],
                                                            axes=[1], keepdims=1)],
                  {"p0": prod}))
    c.append(Case("ReduceProd-all", lambda T: [helper.make_node("ReduceProd", ["p0"], ["y"],
                                                                keepdims=0)],
                  {"p0": _r((2, 3), 73, 0.5, 1.5)}))
    for op in ("ReduceL1", "ReduceL2", "ReduceLogSumExp"):
        c.append(Case(op, lambda T, op=op: [helper.make_node(op, ["p0"], ["y"], axes=[0, 2],
                                                             keepdims=0)],
                      {"p0": _u(op).params["p0"].reshape(1, 2, 3).repeat(2, 0) * 1.1}))
    c.append(Case("ReduceLogSum", lambda T: [helper.make_node("ReduceLogSum", ["p0"], ["y"],
                                                              axes=[1], keepdims=1)],
                  {"p0": _r((2, 3, 2), 74, 0.5, 2.0)}))
    c.append(Case("InstanceNormalization", lambda T: [helper.make_node(
        "InstanceNormalization", ["p0", "p1", "p2"], ["y"], epsilon=1e-5)],
        {"p0": _r((2, 3, 2, 3), 75, -2, 2), "p1": _r((3,), 76, 0.5, 1.5), "p2": _r((3,), 77)}))
    c.append(Case("GroupNormalization", lambda T: [helper.make_node(
        "GroupNormalization", ["p0", "p1", "p2"], ["y"], epsilon=1e-5, num_groups=2,
        stash_type=T)],  # statistics in T (default float32 even for a double model)
        {"p0": _r((2, 4, 3), 78, -2, 2), "p1": _r((4,), 79, 0.5, 1.5), "p2": _r((4,), 80)},
        opset=21))
    c.append(Case("Tile", lambda T: [
        _const("rep", np.array([2, 1, 3], np.int64), T),
        helper.make_node("Tile", ["p0", "rep"], ["y"])], {"p0": _r((2, 3, 2), 81)}))
    c.append(Case("ConvTranspose", lambda T: [helper.make_node(
        "ConvTranspose", ["p0", "p1", "p2"], ["y"], strides=[2, 1], pads=[1, 0, 0, 1],
        output_padding=[1, 0], group=2)],
        {"p0": _r((2, 4, 3, 3), 82), "p1": _r((4, 1, 3, 2), 83), "p2": _r((2,), 84)}))
    c.append(Case("ConvTranspose-dilated", lambda T: [helper.make_node(
        "ConvTranspose", ["p0", "p1"], ["y"], dilations=[2, 2])],
        {"p0": _r((1, 2, 3, 2), 85), "p1": _r((2, 3, 2, 2), 86)}))
    for i, (mode, coord, nearest, size) in enumerate([
            ("nearest", "asymmetric", "floor", [2, 2, 6, 7]),
            ("nearest", "half_pixel", "round_prefer_floor", [2, 2, 2, 5]),
            ("linear", "half_pixel", "round_prefer_floor", [2, 2, 7, 4]),
            ("linear", "align_corners", "round_prefer_floor", [2, 2, 6, 6]),
            ("linear", "pytorch_half_pixel", "round_prefer_floor", [2, 2, 2, 3])]):
        c.append(Case(f"Resize-{i}-{mode}-{coord}", lambda T, mode=mode, coord=coord,
                      nearest=nearest, size=size: [
            _const("sizes", np.array(size, np.int64), T),
            helper.make_node("Resize", ["p0", "", "", "sizes"], ["y"], mode=mode,
                             coordinate_transformation_mode=coord, nearest_mode=nearest)],
            {"p0": _r((2, 2, 3, 4), 90 + i)}))
    # MobileViT (32 px input): bilinear half_pixel from 1x1 up to 2x2 and from 2x2 down to
    # 1x1 (every output between two inputs: the average), and a general downsample
    for name, shape, size in (("up-1x1", (1, 2, 1, 1), [1, 2, 2, 2]),
                              ("down-1x1", (1, 2, 2, 2), [1, 2, 1, 1]),
                              ("down-3x2", (1, 2, 5, 4), [1, 2, 3, 2])):
        c.append(Case(f"Resize-linear-{name}", lambda T, size=size: [
            _const("sizes", np.array(size, np.int64), T),
            helper.make_node("Resize", ["p0", "", "", "sizes"], ["y"], mode="linear",
                             coordinate_transformation_mode="half_pixel")],
            {"p0": _r(shape, 95)}))
    # cubic to the same size at scale 1 (DINOv2's position embeddings, TorchScript export):
    # the identity, whose gradient is dY
    c.append(Case("Resize-cubic-same-size", lambda T: [
        _const("sizes", np.array([1, 2, 4, 4], np.int64), T),
        helper.make_node("Resize", ["p0", "", "", "sizes"], ["y"], mode="cubic",
                         coordinate_transformation_mode="pytorch_half_pixel",
                         cubic_coeff_a=-0.75)],
        {"p0": _r((1, 2, 4, 4), 96)}))
    for exclusive, reverse in ((0, 0), (1, 0), (0, 1), (1, 1)):
        c.append(Case(f"CumSum-{exclusive}{reverse}", lambda T, e=exclusive, r=reverse: [
            _const("axis", np.array(1, np.int64), T),
            helper.make_node("CumSum", ["p0", "axis"], ["y"], exclusive=e, reverse=r)],
            {"p0": _r((2, 4, 3), 100 + 2 * exclusive + reverse)}))
    for mode in ("DCR", "CRD"):
        c.append(Case(f"DepthToSpace-{mode}", lambda T, mode=mode: [
            helper.make_node("DepthToSpace", ["p0"], ["y"], blocksize=2, mode=mode)],
            {"p0": _r((2, 8, 2, 3), 110)}))
    c.append(Case("SpaceToDepth", lambda T: [
        helper.make_node("SpaceToDepth", ["p0"], ["y"], blocksize=2)], {"p0": _r((1, 3, 4, 6), 111)}))
    for size in (3, 5):  # onnxruntime runs odd windows only
        c.append(Case(f"LRN-{size}", lambda T, size=size: [helper.make_node(
            "LRN", ["p0"], ["y"], size=size, alpha=0.3, beta=0.75, bias=1.5)],
            {"p0": _r((2, 5, 2, 3), 120 + size, -2, 2)}))
    # recurrent ops (unrolled by the importer): W, R, B, P and the initial states get
    # gradients summed over the time steps
    c.append(Case("LSTM-bidirectional", lambda T: [helper.make_node(
        "LSTM", ["x", "w", "r", "b", "", "h0", "c0", "P"], ["y"], hidden_size=2,
        direction="bidirectional")],
        {"x": _r((3, 2, 3), 130), "w": _r((2, 8, 3), 131), "r": _r((2, 8, 2), 132),
         "b": _r((2, 16), 133), "h0": _r((2, 2, 2), 134), "c0": _r((2, 2, 2), 135),
         "P": _r((2, 6), 136)}))
    c.append(Case("LSTM-reverse-lengths", lambda T: [
        _const("lens", np.array([3, 1], np.int32), T),
        helper.make_node("LSTM", ["x", "w", "r", "b", "lens", "h0"], ["y", "yh"],
                         hidden_size=2, direction="reverse")],
        {"x": _r((3, 2, 3), 164), "w": _r((1, 8, 3), 165), "r": _r((1, 8, 2), 166),
         "b": _r((1, 16), 167), "h0": _r((1, 2, 2), 168)}))
    c.append(Case("GRU", lambda T: [helper.make_node(
        "GRU", ["x", "w", "r", "b", "", "h0"], ["y"], hidden_size=2)],
        {"x": _r((3, 2, 3), 141), "w": _r((1, 6, 3), 142), "r": _r((1, 6, 2), 143),
         "b": _r((1, 12), 144), "h0": _r((1, 2, 2), 145)}))
    c.append(Case("GRU-linear-before-reset-reverse", lambda T: [helper.make_node(
        "GRU", ["x", "w", "r", "b", "", "h0"], ["y"], hidden_size=2, direction="reverse",
        linear_before_reset=1)],
        {"x": _r((3, 2, 3), 146), "w": _r((1, 6, 3), 147), "r": _r((1, 6, 2), 148),
         "b": _r((1, 12), 149), "h0": _r((1, 2, 2), 150)}))
    c.append(Case("RNN-bidirectional", lambda T: [helper.make_node(
        "RNN", ["x", "w", "r", "b", "", "h0"], ["y"], hidden_size=3,
        direction="bidirectional")],
        {"x": _r((4, 2, 2), 151), "w": _r((2, 3, 2), 152), "r": _r((2, 3, 3), 153),
         "b": _r((2, 6), 154), "h0": _r((2, 2, 3), 155)}))
    # DFT and STFT: products with a constant DFT matrix (STFT: frames gathered, windowed)
    c.append(Case("DFT-inverse-complex", lambda T: [helper.make_node(
        "DFT", ["p0"], ["y"], axis=1, inverse=1)], {"p0": _r((2, 6, 2), 160)}))
    c.append(Case("DFT-onesided-padded", lambda T: [
        _const("n", np.array(8, np.int64), T),
        helper.make_node("DFT", ["p0", "n"], ["y"], axis=1, onesided=1)],
        {"p0": _r((2, 7, 1), 161)}))
    c.append(Case("STFT-window", lambda T: [
        _const("step", np.array(4, np.int64), T),
        helper.make_node("STFT", ["p0", "step", "p1"], ["y"])],
        {"p0": _r((1, 20, 1), 162), "p1": _r((8,), 163, 0.2, 1.0)}))
    # ScatterElements (reduction none): dData is dY with the written positions zeroed,
    # dUpdates gathers dY; MaxUnpool (a scatter into zeros) trains through it
    c.append(Case("ScatterElements-axis1", lambda T: [
        _const("idx", np.array([[2, 0], [1, 3], [0, 2]], np.int64), T),
        helper.make_node("ScatterElements", ["p0", "idx", "p1"], ["y"], axis=1)],
        {"p0": _r((3, 4), 170), "p1": _r((3, 2), 171)}, opset=16))
    # GatherElements: dData scatter-adds dY along the axis (DeBERTa's relative attention
    # gathers one score per query/key pair; indices repeat)
    c.append(Case("GatherElements-repeated", lambda T: [
        _const("idx", np.array([[2, 0, 2], [1, 1, 3], [0, 2, 0]], np.int64), T),
        helper.make_node("GatherElements", ["p0", "idx"], ["y"], axis=1)],
        {"p0": _r((3, 4), 177)}, opset=13))
    # GatherND: dData scatter-adds dY at the index tuples; a tuple that repeats (Swin's
    # relative-position bias table read at one index per query/key pair) accumulates
    c.append(Case("GatherND-repeated", lambda T: [
        _const("idx", np.array([[[0, 1], [2, 3]], [[0, 1], [1, 0]], [[2, 3], [0, 1]]],
                               np.int64), T),
        helper.make_node("GatherND", ["p0", "idx"], ["y"])],
        {"p0": _r((3, 4, 2), 173)}, opset=13))
    c.append(Case("GatherND-rows", lambda T: [
        _const("idx", np.array([[2], [0], [2], [1]], np.int64), T),
        helper.make_node("GatherND", ["p0", "idx"], ["y"])],
        {"p0": _r((3, 5), 174)}, opset=13))
    # ScatterND (reduction none): dData is dY with the written slices zeroed, dUpdates
    # gathers dY at the tuples
    c.append(Case("ScatterND", lambda T: [
        _const("idx", np.array([[1, 0], [0, 2], [2, 3]], np.int64), T),
        helper.make_node("ScatterND", ["p0", "idx", "p1"], ["y"])],
        {"p0": _r((3, 4, 2), 175), "p1": _r((3, 2), 176)}, opset=13))
    # TopK: dX scatter-adds dValues back at the Indices result (largest along the last
    # axis, smallest along a middle one: the rule reads the axis); random inputs have no
    # ties within 1e-6, so the selection is the same at x +- h
    c.append(Case("TopK-largest", lambda T: [
        _const("k", np.array([2], np.int64), T),
        helper.make_node("TopK", ["p0", "k"], ["y", "ti"], axis=-1)],
        {"p0": _r((3, 5), 178)}, opset=11))
    c.append(Case("TopK-smallest-axis1", lambda T: [
        _const("k", np.array([3], np.int64), T),
        helper.make_node("TopK", ["p0", "k"], ["y", "ti"], axis=1, largest=0)],
        {"p0": _r((2, 5, 3), 179)}, opset=11))
    # A Mixtral router: softmax over the experts, the top-2 probabilities renormalized
    # (every token's routing weights), scaled by a per-token value
    c.append(Case("TopK-router", lambda T: [
        _const("k", np.array([2], np.int64), T),
        helper.make_node("MatMul", ["p0", "p1"], ["logits"]),
        helper.make_node("Softmax", ["logits"], ["probs"], axis=-1),
        helper.make_node("TopK", ["probs", "k"], ["top", "ti"], axis=-1),
        helper.make_node("ReduceSum", ["top"], ["tsum"], keepdims=1, axes=[-1]),
        helper.make_node("Div", ["top", "tsum"], ["y"])],
        {"p0": _r((6, 4), 180), "p1": _r((4, 4), 181, -2.0, 2.0)}, opset=12))
    # MoE experts read per slot from an [E, O, I] table and multiplied (transformers'
    # batched_mm): straitc's graph-rewrite-expert-matmuls makes them one product of all
    # experts and a one-hot selection (--moe-experts dense; E * N < I here: 3 * 2 < 7) or
    # a GroupedMatMul of the routed slots (the "-grouped" copies below: dX a GroupedMatMul,
    # dW a GroupedMatMulGradWeight); every expert is used, expert 2 by three slots (one of
    # them a negative index in the Gather form)
    c.append(Case("ExpertMatMul-GatherND", lambda T: [
        _const("idx", np.array([[2], [0], [2], [1], [0], [2]], np.int64), T),
        helper.make_node("GatherND", ["p0", "idx"], ["wsel"]),
        helper.make_node("MatMul", ["wsel", "p1"], ["y"])],
        {"p0": _r((3, 4, 7), 182), "p1": _r((6, 7, 2), 183)}, opset=13))
    c.append(Case("ExpertMatMul-Gather", lambda T: [
        _const("idx", np.array([2, 0, -1, 1, 0, 2], np.int64), T),
        helper.make_node("Gather", ["p0", "idx"], ["wsel"], axis=0),
        helper.make_node("MatMul", ["wsel", "p1"], ["y"])],
        {"p0": _r((3, 4, 7), 184), "p1": _r((6, 7, 1), 185)}, opset=13))
    # ... and when the slots are 3 tokens repeated twice each (transformers'
    # repeat_interleave: Expand in the dynamo export, Tile in the TorchScript one), one
    # product per token serves both of its slots (dX sums them)
    c.append(Case("ExpertMatMul-repeated-Expand", lambda T: [
        _const("idx", np.array([[2], [0], [1], [2], [0], [1]], np.int64), T),
        _const("ax1", np.array([1], np.int64), T), _const("ax2", np.array([2], np.int64), T),
        _const("rep", np.array([1, 2, 1], np.int64), T),
        _const("flat", np.array([6, 7], np.int64), T),
        helper.make_node("Unsqueeze", ["p1", "ax1"], ["u"]),
        helper.make_node("Expand", ["u", "rep"], ["ue"]),
        helper.make_node("Reshape", ["ue", "flat"], ["uf"]),
        helper.make_node("Unsqueeze", ["uf", "ax2"], ["b"]),
        helper.make_node("GatherND", ["p0", "idx"], ["wsel"]),
        helper.make_node("MatMul", ["wsel", "b"], ["y"])],
        {"p0": _r((3, 4, 7), 186), "p1": _r((3, 7), 187)}, opset=13))
    c.append(Case("ExpertMatMul-repeated-Tile", lambda T: [
        _const("idx", np.array([1, 2, 0, 1, 2, 2], np.int64), T),
        _const("ax1", np.array([1], np.int64), T), _const("ax2", np.array([2], np.int64), T),
        _const("rep", np.array([1, 2, 1], np.int64), T),
        helper.make_node("Unsqueeze", ["p1", "ax1"], ["u"]),
        helper.make_node("Tile", ["u", "rep"], ["ue"]),
        helper.make_node("Flatten", ["ue"], ["uf"], axis=2),
        helper.make_node("Unsqueeze", ["uf", "ax2"], ["b"]),
        helper.make_node("Gather", ["p0", "idx"], ["wsel"], axis=0),
        helper.make_node("MatMul", ["wsel", "b"], ["y"])],
        {"p0": _r((3, 4, 7), 188), "p1": _r((3, 7), 189)}, opset=13))
    # transposed experts (W [E, I, O], the slot's row on the left: GPT-OSS-style), two
    # rows per slot (N = 2, E * N = 6 < I = 7)
    c.append(Case("ExpertMatMul-transposed", lambda T: [
        _const("idx", np.array([1, 0, 2, 2, 1, 0], np.int64), T),
        helper.make_node("Gather", ["p0", "idx"], ["wsel"], axis=0),
        helper.make_node("MatMul", ["p1", "wsel"], ["y"])],
        {"p0": _r((3, 7, 4), 190), "p1": _r((6, 2, 7), 191)}, opset=13))
    c.append(Case("MaxUnpool", lambda T: [
        _const("idx", np.array([[[[0, 3], [9, 10]], [[17, 18], [24, 31]]]], np.int64), T),
        helper.make_node("MaxUnpool", ["p0", "idx"], ["y"], kernel_shape=[2, 2],
                         strides=[2, 2])],
        {"p0": _r((1, 2, 2, 2), 172)}, opset=11))
    for case in [x for x in c if x.name.startswith("ExpertMatMul-")]:
        c.append(Case(case.name + "-grouped", case.nodes, case.params,
                      flags=["--moe-experts", "grouped"], opset=case.opset))
        case.flags += ["--moe-experts", "dense"]
    # E * N >= I (4 * 2 > 3): only the grouped form applies; expert 1 gets no slot (its
    # gradient is zero) and one index counts from the end
    c.append(Case("ExpertMatMul-wide-grouped", lambda T: [
        _const("idx", np.array([[3], [0], [-1], [2], [0], [2]], np.int64), T),
        helper.make_node("GatherND", ["p0", "idx"], ["wsel"]),
        helper.make_node("MatMul", ["wsel", "p1"], ["y"])],
        {"p0": _r((4, 5, 3), 192), "p1": _r((6, 3, 2), 193)}, opset=13))
    return {case.name: case for case in c}


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
def test_gradient_matches_finite_differences(name, tmp_path):
    dtype, worst = _check(CASES[name], tmp_path)
    print(f"{name}: worst {worst:.1e} (reference {dtype})")


# ---------------------------------------------------------------------------------------
# Optimizer updates against numpy.

def _optimizer_model(W, b, R, S) -> bytes:
    """loss = sum(R * W^2) / 2 + sum(S * b), so dW = R * W and db = S; the outputs `w_seen`
    and `b_seen` are the parameters the step reads (before its update)."""
    T = F32
    nodes = [_const("R", R, T), _const("S", S, T), _const("half", np.array(0.5), T),
             _const("one", np.array(1.0), T),
             helper.make_node("Mul", ["W", "W"], ["w2"]),
             helper.make_node("Mul", ["w2", "R"], ["w2r"]),
             helper.make_node("ReduceSum", ["w2r"], ["sw"], keepdims=0),
             helper.make_node("Mul", ["sw", "half"], ["lw"]),
             helper.make_node("Mul", ["b", "S"], ["bs"]),
             helper.make_node("ReduceSum", ["bs"], ["lb"], keepdims=0),
             helper.make_node("Add", ["lw", "lb"], ["loss"]),
             helper.make_node("Mul", ["W", "one"], ["w_seen"]),
             helper.make_node("Mul", ["b", "one"], ["b_seen"])]
    graph = helper.make_graph(
        nodes, "opt", [],
        [helper.make_tensor_value_info("loss", T, []),
         helper.make_tensor_value_info("w_seen", T, W.shape),
         helper.make_tensor_value_info("b_seen", T, b.shape)],
        [numpy_helper.from_array(W.astype(np.float32), "W"),
         numpy_helper.from_array(b.astype(np.float32), "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)]) \
        .SerializeToString()


def _lr_at(step, lr, warmup, total, min_lr):
    """docs/program-format.md, Learning-rate schedule."""
    if step <= warmup:
        return lr * step / warmup
    if total == 0:
        return lr
    if step >= total:
        return min_lr
    p = (step - warmup) / (total - warmup)
    return min_lr + (lr - min_lr) * (1 + np.cos(np.pi * p)) / 2


def _numpy_updates(params, grad_fn, updates, opt, lr, wd=0.0, momentum=0.0, nesterov=False,
                   beta1=0.9, beta2=0.999, eps=1e-8, clip=0.0, schedule=(0, 0, 0.0)):
    """PyTorch's SGD (dampening 0) / AdamW, clip_grad_norm_, in float64."""
    p = {k: v.astype(np.float32).astype(np.float64) for k, v in params.items()}
    state = {k: [np.zeros_like(v), np.zeros_like(v)] for k, v in p.items()}
    for t in range(1, updates + 1):
        g = grad_fn(p)
        if clip > 0:
            norm = np.sqrt(sum(float((x ** 2).sum()) for x in g.values()))
            g = {k: x * min(1.0, clip / (norm + 1e-6)) for k, x in g.items()}
        a = _lr_at(t, lr, *schedule)
        for k in p:
            m, v = state[k]
            if opt == "sgd":
                gk = g[k] + wd * p[k]
                if momentum:
                    m[...] = momentum * m + gk
                    gk = gk + momentum * m if nesterov else m
                p[k] = p[k] - a * gk
            else:
                p[k] = p[k] * (1 - a * wd)
                m[...] = beta1 * m + (1 - beta1) * g[k]
                v[...] = beta2 * v + (1 - beta2) * g[k] ** 2
                mh, vh = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
                p[k] = p[k] - a * mh / (np.sqrt(vh) + eps)
    return p


OPTIMIZERS = {
    "sgd-momentum": dict(opt="sgd", lr=0.1, momentum=0.9, wd=0.01),
    "sgd-nesterov": dict(opt="sgd", lr=0.05, momentum=0.8, nesterov=True, wd=0.1),
    "sgd-plain": dict(opt="sgd", lr=0.2),
    "adamw": dict(opt="adamw", lr=0.01, wd=0.1, beta1=0.8, beta2=0.95, eps=1e-6),
    "adamw-clip-schedule": dict(opt="adamw", lr=0.02, wd=0.05, clip=0.3,
                                schedule=(2, 5, 0.002)),
    "sgd-clip": dict(opt="sgd", lr=0.1, momentum=0.5, clip=0.5),
    # strait-run --lr replaces the compiled schedule's peak (here 0.5 -> 0.1).
    "adamw-run-lr": dict(opt="adamw", lr=0.1, compiled_lr=0.5, schedule=(2, 0, 0.0)),
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optimizer_update_matches_numpy(name, tmp_path):
    cfg = OPTIMIZERS[name]
    rng = _rng(name)
    W, b = rng.uniform(-1, 1, (2, 3)), rng.uniform(-1, 1, (3,))
    R, S = rng.uniform(0.5, 2, (2, 3)), rng.uniform(-1, 1, (3,))
    path = tmp_path / "opt.onnx"
    path.write_bytes(_optimizer_model(W, b, R, S))
    flags = ["--loss", "output", "--step-outputs=all", "--optimizer", cfg["opt"],
             "--lr", str(cfg.get("compiled_lr", cfg["lr"])),
             "--weight-decay", str(cfg.get("wd", 0.0)), "--clip-norm", str(cfg.get("clip", 0.0))]
    if cfg["opt"] == "sgd":
        flags += ["--momentum", str(cfg.get("momentum", 0.0))]
        if cfg.get("nesterov"):
            flags.append("--nesterov")
    else:
        flags += ["--beta1", str(cfg["beta1"]) if "beta1" in cfg else "0.9",
                  "--beta2", str(cfg.get("beta2", 0.999)), "--eps", str(cfg.get("eps", 1e-8))]
    warmup, total, min_lr = cfg.get("schedule", (0, 0, 0.0))
    flags += ["--warmup-steps", str(warmup), "--total-steps", str(total), "--min-lr", str(min_lr)]
    job, dump = tmp_path / "job", tmp_path / "dump"
    c = subprocess.run([STRAITC, str(path), *flags, "-o", str(job)], capture_output=True,
                       text=True)
    assert c.returncode == 0, c.stderr[-2000:]
    steps = 4  # the 4th step reads the parameters after 3 updates
    run_lr = ["--lr", str(cfg["lr"])] if "compiled_lr" in cfg else []
    r = subprocess.run([STRAIT_RUN, str(job), "--steps", str(steps), "--threads", "1",
                        "--dump-outputs", str(dump), *run_lr], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, (r.stderr + r.stdout)[-2000:]
    got = {"W": np.load(dump / "w_seen.rank0.npy"), "b": np.load(dump / "b_seen.rank0.npy")}
    ref = _numpy_updates({"W": W, "b": b},
                         lambda p: {"W": R.astype(np.float32) * p["W"],
                                    "b": S.astype(np.float32).astype(np.float64)},
                         steps - 1, **{k: v for k, v in cfg.items() if k != "compiled_lr"})
    moved = max(float(np.abs(ref[k] - v.astype(np.float32)).max())
                for k, v in {"W": W, "b": b}.items())
    assert moved > 1e-3, "the updates barely move the parameters: a weak check"
    for k in ("W", "b"):
        # f32 arithmetic in the runtime over 3 updates: ~1e-7 relative per operation.
        np.testing.assert_allclose(got[k], ref[k], rtol=2e-5, atol=2e-6, err_msg=f"{name}: {k}")


def test_bad_schedule_is_an_error_naming_the_field(tmp_path):
    """strait-run checks the program's lr_schedule (after --lr) before connecting."""
    rng = _rng("bad-schedule")
    path = tmp_path / "opt.onnx"
    path.write_bytes(_optimizer_model(rng.uniform(-1, 1, (2, 3)), rng.uniform(-1, 1, (3,)),
                                      rng.uniform(0.5, 2, (2, 3)), rng.uniform(-1, 1, (3,))))
    job = tmp_path / "job"
    c = subprocess.run([STRAITC, str(path), "--loss", "output", "--optimizer", "sgd",
                        "--warmup-steps", "2", "-o", str(job)], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr[-2000:]
    r = subprocess.run([STRAIT_RUN, str(job), "--steps", "1", "--lr", "-1"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    log = (job / "logs" / "rank0.log").read_text()
    assert "lr_schedule.peak_lr" in log and "(after --lr -1)" in log, log[-1000:]
