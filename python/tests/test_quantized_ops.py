"""Quantized and data-dependent ONNX ops, decomposed by the importer
(lib/Target/ONNX/ImportQuantized.cpp, ImportDataDependent.cpp), run forward on the CPU
runtime. Integer outputs must be equal, not close.

* ``test_node_data``: the libonnx-testdata node tests of DynamicQuantizeLinear,
  MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, Compress and NonZero (inputs
  bound as initializers, every output bit-exact against output_*.pb). NonZero of a constant
  is a constant, which a program cannot return: its test adds a zero the runtime computes
  (Round, which does not fold at compile time, of a float zero).
* ``test_matmul_integer_case`` / ``test_qlinear_matmul_case`` / ``test_conv_integer_case``
  / ``test_qlinear_conv_case`` / ``test_dynamic_quantize_case``: what the node tests leave
  out (int8 operands, per-row and per-column zero points and scales, 1-D and batched
  operands, groups, strides, dilations, auto_pad, bias, int8 outputs, a sum that wraps
  like an int32 accumulator) against onnx.reference. The 8-bit inputs are Cast from float
  variables inside the model, so the runtime computes every op (nothing folds at import).
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from test_recurrent import NODE_DATA, node_test_data, strait_forward

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

NODE_TESTS = [t for t in (
    "test_dynamicquantizelinear", "test_dynamicquantizelinear_max_adjusted",
    "test_dynamicquantizelinear_min_adjusted", "test_matmulinteger", "test_qlinearmatmul_2D",
    "test_qlinearmatmul_3D", "test_basic_convinteger", "test_convinteger_with_padding",
    "test_convinteger_without_padding", "test_qlinearconv", "test_compress_0",
    "test_compress_1", "test_compress_default_axis", "test_compress_negative_axis")
    if os.path.isdir(os.path.join(NODE_DATA, t))]


def _assert_equal(got, ref, what):
    assert got.dtype == ref.dtype, f"{what}: {got.dtype} != {ref.dtype}"
    assert got.shape == ref.shape, f"{what}: {got.shape} != {ref.shape}"
    bad = np.flatnonzero(got != ref)
    assert bad.size == 0, (f"{what}: {bad.size} of {got.size} entries differ, first at "
                           f"{bad[0]}: {got.flat[bad[0]]} != {ref.flat[bad[0]]}")


@pytest.mark.skipif(not NODE_TESTS, reason="needs Debian's libonnx-testdata")
@pytest.mark.parametrize("test", NODE_TESTS)
def test_node_data(test, tmp_path):
    model, feeds, outs = node_test_data(test)
    got = strait_forward(model, feeds, tmp_path)
    for name, ref in outs.items():
        _assert_equal(got[name], ref, f"{test}: {name}")


@pytest.mark.skipif(not os.path.isdir(os.path.join(NODE_DATA, "test_nonzero_example")),
                    reason="needs Debian's libonnx-testdata")
def test_nonzero_node_data(tmp_path):
    model, feeds, outs = node_test_data("test_nonzero_example")
    (name, ref), = outs.items()
    model.graph.node.extend([
        helper.make_node("Round", ["zero_f"], ["zero_r"]),  # Round does not fold
        helper.make_node("Cast", ["zero_r"], ["zero_i"], to=TensorProto.INT64),
        helper.make_node("Add", [name, "zero_i"], ["computed"])])
    model.graph.input.append(helper.make_tensor_value_info("zero_f", TensorProto.FLOAT, [1]))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("computed", TensorProto.INT64,
                                                            None))
    got = strait_forward(model, {**feeds, "zero_f": np.zeros(1, np.float32)}, tmp_path)
    assert ref.size > 0
    _assert_equal(got["computed"], ref, "NonZero")


# ---------------------------------------------------------------------------------------
# Cases against onnx.reference

U8, I8, I32, F = TensorProto.UINT8, TensorProto.INT8, TensorProto.INT32, TensorProto.FLOAT
NP = {U8: np.uint8, I8: np.int8, I32: np.int32}


def _ints(rng, shape, dtype):
    info = np.iinfo(NP[dtype])
    return rng.integers(info.min, info.max + 1, shape).astype(NP[dtype])


def _run_case(node, values: dict, out_type, opset, tmp_path):
    """One `node` whose integer inputs are Cast from float variables inside the model;
    Strait's output against onnx.reference's on the same model."""
    nodes, inputs, feeds = [], [], {}
    for name, v in values.items():
        if v.dtype == np.float32:
            inputs.append(helper.make_tensor_value_info(name, F, v.shape))
            feeds[name] = v
            continue
        t = {np.dtype(np.uint8): U8, np.dtype(np.int8): I8, np.dtype(np.int32): I32}[v.dtype]
        inputs.append(helper.make_tensor_value_info(name + "_f", F, v.shape))
        feeds[name + "_f"] = v.astype(np.float32)
        nodes.append(helper.make_node("Cast", [name + "_f"], [name], to=t))
    graph = helper.make_graph(nodes + [node], "g", inputs,
                              [helper.make_tensor_value_info(node.output[0], out_type, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    ref = ReferenceEvaluator(model).run(None, feeds)[0]
    got = strait_forward(model, feeds, tmp_path)[node.output[0]]
    _assert_equal(got, ref, node.op_type)
    return ref


MATMUL_CASES = {
    # name: (A shape, A type, B shape, B type, a_zero_point shape, b_zero_point shape)
    "u8-scalar-zp": ((3, 5), U8, (5, 4), U8, (), ()),
    "i8-u8-per-row-col": ((3, 5), I8, (5, 4), U8, (3,), (4,)),
    "batched-broadcast": ((2, 3, 5), U8, (5, 2), I8, (1,), (2,)),
    "batched-nd-zp": ((2, 3, 4), I8, (2, 4, 5), I8, (2, 3, 1), (2, 1, 5)),
    "vector-a": ((6,), U8, (6, 3), U8, (), (3,)),
    "vector-b": ((2, 6), I8, (6,), I8, (2,), ()),
    "no-zero-points": ((4, 7), I8, (7, 3), I8, None, None),
}


@pytest.mark.parametrize("name", sorted(MATMUL_CASES))
def test_matmul_integer_case(name, tmp_path):
    sa, ta, sb, tb, za, zb = MATMUL_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    values = {"A": _ints(rng, sa, ta), "B": _ints(rng, sb, tb)}
    names = ["A", "B"]
    if za is not None:
        values["az"], values["bz"] = _ints(rng, za, ta), _ints(rng, zb, tb)
        names += ["az", "bz"]
    if name == "i8-u8-per-row-col" or name == "vector-b":
        # onnx.reference subtracts a 1-D a_zero_point along the last axis: give it the
        # spec's per-row semantics through an [M, 1] zero point instead.
        values["az"] = values["az"].reshape(-1, 1)
    ref = _run_case(helper.make_node("MatMulInteger", names, ["Y"]), values, I32, 10, tmp_path)
    assert np.count_nonzero(ref) > ref.size // 2


def test_matmul_integer_per_row_vector(tmp_path):
    """A 1-D a_zero_point of M entries applies per row of A (the spec; onnx.reference
    would subtract it along K): against numpy."""
    rng = np.random.default_rng(7)
    a, b, az = _ints(rng, (3, 4), U8), _ints(rng, (4, 2), U8), _ints(rng, (3,), U8)
    node = helper.make_node("MatMulInteger", ["A", "B", "az"], ["Y"])
    graph = helper.make_graph([node], "g", [
        helper.make_tensor_value_info("A", U8, a.shape),
        helper.make_tensor_value_info("B", U8, b.shape),
        helper.make_tensor_value_info("az", U8, az.shape)],
        [helper.make_tensor_value_info("Y", I32, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    got = strait_forward(model, {"A": a, "B": b, "az": az}, tmp_path)["Y"]
    ref = (a.astype(np.int32) - az.astype(np.int32)[:, None]) @ b.astype(np.int32)
    _assert_equal(got, ref, "MatMulInteger per row")


def test_matmul_integer_wraps_like_int32(tmp_path):
    """K = 40000 products of 255 * 255 sum to 2.6e9: past int32, the result wraps like
    the reference's int32 accumulator (through an int64 cast)."""
    k = 40000
    values = {"A": np.full((1, k), 255, np.uint8), "B": np.full((k, 2), 255, np.uint8)}
    ref = _run_case(helper.make_node("MatMulInteger", ["A", "B"], ["Y"]), values, I32, 10,
                    tmp_path)
    assert ref[0, 0] == np.int32(np.int64(k * 255 * 255) - 2**32)


QLINEAR_MATMUL_CASES = {
    # name: (a shape, b shape, 8-bit type of a, b and y, per-column b scale)
    "u8": ((3, 6), (6, 4), U8, False),
    "i8-per-column": ((3, 6), (6, 4), I8, True),
    "batched-i8": ((2, 3, 5), (2, 5, 2), I8, False),
}


@pytest.mark.parametrize("name", sorted(QLINEAR_MATMUL_CASES))
def test_qlinear_matmul_case(name, tmp_path):
    sa, sb, t, per_column = QLINEAR_MATMUL_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    n = sb[-1]
    a, az, b = _ints(rng, sa, t), _ints(rng, (), t), _ints(rng, sb, t)
    bz = _ints(rng, (n,) if per_column else (), t)
    b_scale = (rng.uniform(0.005, 0.02, (n,)) if per_column else np.array(0.01))
    # y_scale such that the outputs span about 1.5 times the 8-bit range (some saturate).
    c = (a.astype(np.int64) - az) @ (b.astype(np.int64) - bz)
    y_scale = np.abs(c).max() * 0.02 * b_scale.max() / 200
    values = {"a": a, "a_scale": np.float32(0.02), "a_zero_point": az, "b": b,
              "b_scale": b_scale.astype(np.float32), "b_zero_point": bz,
              "y_scale": np.float32(y_scale), "y_zero_point": _ints(rng, (), t)}
    values = {k: np.asarray(v) for k, v in values.items()}
    node = helper.make_node("QLinearMatMul", list(values), ["y"])
    ref = _run_case(node, values, t, 10, tmp_path)
    info = np.iinfo(NP[t])
    assert (ref == info.min).any() or (ref == info.max).any(), "saturation is exercised"
    assert len(np.unique(ref)) > ref.size // 2


CONV_CASES = {
    # name: (x shape, w shape, x type, w type, per-channel w zero point, attributes)
    "u8-pads-strides": ((1, 2, 7, 6), (3, 2, 3, 2), U8, U8, False,
                        dict(pads=[1, 0, 2, 1], strides=[2, 1])),
    "i8-groups-dilations": ((2, 4, 6, 6), (4, 2, 2, 3), I8, I8, True,
                            dict(group=2, dilations=[2, 1])),
    # onnx.reference expands a per-channel w zero point for 2-D kernels only
    "same-lower-1d": ((1, 3, 9), (2, 3, 4), U8, I8, False,
                      dict(auto_pad="SAME_LOWER", strides=[2])),
    "3d": ((1, 2, 4, 3, 4), (2, 2, 2, 2, 3), I8, U8, False, dict(pads=[0, 1, 1, 1, 0, 1])),
}


@pytest.mark.parametrize("name", sorted(CONV_CASES))
def test_conv_integer_case(name, tmp_path):
    sx, sw, tx, tw, per_channel, attrs = CONV_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    values = {"x": _ints(rng, sx, tx), "w": _ints(rng, sw, tw), "xz": _ints(rng, (), tx),
              "wz": _ints(rng, (sw[0],) if per_channel else (), tw)}
    node = helper.make_node("ConvInteger", list(values), ["y"], **attrs)
    ref = _run_case(node, values, I32, 10, tmp_path)
    assert np.count_nonzero(ref) > ref.size // 2


@pytest.mark.parametrize("out_type", [U8, I8])
def test_qlinear_conv_case(out_type, tmp_path):
    """Per-channel w scale and zero point, a bias, pads and strides."""
    rng = np.random.default_rng(out_type)
    m = 3
    values = {
        "x": _ints(rng, (1, 2, 6, 5), out_type), "x_scale": np.float32(0.03),
        "x_zero_point": _ints(rng, (), out_type),
        "w": _ints(rng, (m, 2, 3, 3), out_type),
        "w_scale": rng.uniform(0.002, 0.01, (m,)).astype(np.float32),
        "w_zero_point": _ints(rng, (m,), out_type),
        "y_scale": np.float32(0.4), "y_zero_point": _ints(rng, (), out_type),
        "B": rng.integers(-5000, 5000, (m,)).astype(np.int32)}
    values = {k: np.asarray(v) for k, v in values.items()}
    node = helper.make_node("QLinearConv", list(values), ["y"], pads=[1, 1, 1, 1],
                            strides=[1, 2])
    ref = _run_case(node, values, out_type, 10, tmp_path)
    assert len(np.unique(ref)) > 10


@pytest.mark.parametrize("kind", ["mixed", "positive", "negative", "zeros"])
def test_dynamic_quantize_case(kind, tmp_path):
    rng = np.random.default_rng(len(kind))
    x = {"mixed": rng.uniform(-3, 7, (4, 5)), "positive": rng.uniform(0.5, 2, (3, 4)),
         "negative": rng.uniform(-9, -1, (6,)), "zeros": np.zeros((2, 3))}[kind]
    node = helper.make_node("DynamicQuantizeLinear", ["x"], ["y", "s", "z"])
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", F, x.shape)],
                              [helper.make_tensor_value_info("y", U8, None),
                               helper.make_tensor_value_info("s", F, None),
                               helper.make_tensor_value_info("z", U8, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 11)])
    feeds = {"x": x.astype(np.float32)}
    refs = ReferenceEvaluator(model).run(None, feeds)
    got = strait_forward(model, feeds, tmp_path)
    for name, ref in zip("ysz", refs):
        _assert_equal(got[name], np.asarray(ref), f"DynamicQuantizeLinear {kind}: {name}")
