"""Bad input through the built straitc: errors, never crashes (docs/fuzzing.md).

Complements the lit tests of test/Target/ONNX/bad-input with inputs made here:
every prefix of a small valid model, seeded random byte corruption, and models
that onnx's own helpers build (If/Loop with real subgraphs, external data written
by onnx.save). Each run must exit with 0 or 1 (1 with a message naming the file),
never with a signal, another code or a hang.
"""
from __future__ import annotations

import os
import random
import subprocess

import onnx
import pytest
from onnx import TensorProto, helper

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
BAD = os.path.join(ROOT, "test", "Target", "ONNX", "Inputs", "bad")

pytestmark = pytest.mark.skipif(not os.path.exists(STRAITC), reason="needs build/bin/straitc")


def straitc(path, *args):
    p = subprocess.run([STRAITC, path, *args], capture_output=True, text=True,
                       errors="replace", timeout=60)
    assert p.returncode in (0, 1), f"{path}: exit code {p.returncode}\n{p.stderr[-2000:]}"
    if p.returncode == 1:
        assert f"{path}:0:0: error:" in p.stderr, p.stderr
    return p


def small_model(nodes=None, inits=(), opset=17):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = nodes or [helper.make_node("Relu", ["x"], ["y"], name="relu0")]
    graph = helper.make_graph(nodes, "g", [x], [y], list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def test_every_prefix_fails_cleanly(tmp_path):
    data = open(os.path.join(BAD, "valid.onnx"), "rb").read()
    assert straitc(os.path.join(BAD, "valid.onnx")).returncode == 0
    failures = 0
    for n in range(1, len(data)):
        f = tmp_path / f"prefix{n}.onnx"
        f.write_bytes(data[:n])
        failures += straitc(str(f)).returncode == 1
    # Almost every prefix is invalid; a few cut exactly between fields parse.
    assert failures > len(data) // 2


def test_random_corruption(tmp_path):
    data = bytearray(open(os.path.join(BAD, "valid.onnx"), "rb").read())
    rng = random.Random(20261129)
    for i in range(150):
        bad = bytearray(data)
        for _ in range(rng.randint(1, 6)):
            bad[rng.randrange(len(bad))] = rng.randrange(256)
        f = tmp_path / f"corrupt{i}.onnx"
        f.write_bytes(bytes(bad))
        straitc(str(f))


def _control_flow_model(case):
    """A model whose control flow or sequence use cannot be resolved at import."""
    f32 = TensorProto.FLOAT
    x = helper.make_tensor_value_info("x", f32, [2, 3])
    y = helper.make_tensor_value_info("y", f32, None)
    cond = helper.make_tensor_value_info("c", TensorProto.BOOL, [])
    inputs, nodes = [x], []
    if case == "if-shapes":
        then = helper.make_graph([helper.make_node("Relu", ["x"], ["a"], name="inner")], "then",
                                 [], [helper.make_tensor_value_info("a", f32, None)])
        other = helper.make_graph([helper.make_node("ReduceSum", ["x"], ["b"], keepdims=0,
                                                    name="sum")], "else",
                                  [], [helper.make_tensor_value_info("b", f32, None)])
        nodes = [helper.make_node("If", ["c"], ["y"], name="cf", then_branch=then,
                                  else_branch=other)]
        inputs.append(cond)
    elif case in ("loop-count", "loop-cond"):
        body = helper.make_graph(
            [helper.make_node("Relu", ["xi"], ["xo"], name="inner"),
             helper.make_node("ReduceSum", ["xo"], ["s"], keepdims=0, name="sum"),
             helper.make_node("Greater", ["s", "zero"], ["co"], name="test")],
            "body",
            [helper.make_tensor_value_info("i", TensorProto.INT64, []),
             helper.make_tensor_value_info("ci", TensorProto.BOOL, []),
             helper.make_tensor_value_info("xi", f32, None)],
            [helper.make_tensor_value_info("co", TensorProto.BOOL, []),
             helper.make_tensor_value_info("xo", f32, None)],
            [helper.make_tensor("zero", f32, [], [0.0])])
        count = "n" if case == "loop-count" else "three"
        nodes = [helper.make_node("Constant", [], ["three"], name="k",
                                  value=helper.make_tensor("v", TensorProto.INT64, [], [3])),
                 helper.make_node("Constant", [], ["true"], name="t",
                                  value=helper.make_tensor("v", TensorProto.BOOL, [], [True])),
                 helper.make_node("Loop", [count, "true", "x"], ["y"], name="cf", body=body)]
        if case == "loop-count":
            inputs.append(helper.make_tensor_value_info("n", TensorProto.INT64, []))
    elif case == "sequence-input":
        inputs = [helper.make_tensor_sequence_value_info("x", f32, [2, 3])]
        nodes = [helper.make_node("ConcatFromSequence", ["x"], ["y"], axis=0, name="cf")]
    graph = helper.make_graph(nodes, "g", inputs, [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("case,message", [
    ("if-shapes", "If node 'cf': output 0: the branches give 'tensor<2x3xf32>' and "
                  "'tensor<f32>'; with a condition that is not constant both branches must "
                  "give the same static type"),
    ("loop-count", "Loop node 'cf': input 'M' (n) must be constant (an integer): a loop is "
                   "unrolled at import"),
    ("loop-cond", "Loop node 'cf': the body's condition output 'co' is not constant in "
                  "iteration 0: a data-dependent loop cannot be unrolled"),
    ("sequence-input", "graph input 'x' is not a tensor (sequences, maps and optionals are "
                       "not supported)"),
])
def test_control_flow_with_subgraphs(tmp_path, case, message):
    """Control flow that onnx's helpers build (real subgraphs), unresolvable at import."""
    f = tmp_path / "cf.onnx"
    onnx.save(_control_flow_model(case), str(f))
    p = straitc(str(f))
    assert p.returncode == 1
    assert message in p.stderr, p.stderr


def test_external_data_written_by_onnx(tmp_path):
    w = helper.make_tensor("w", TensorProto.FLOAT, [2, 3], b"\0\0\x80\x3f" * 6, raw=True)
    model = small_model([helper.make_node("Add", ["x", "w"], ["y"], name="add0")], [w])
    f = tmp_path / "m.onnx"
    onnx.save(model, str(f), save_as_external_data=True, all_tensors_to_one_file=True,
              location="m.data", size_threshold=0)
    assert straitc(str(f)).returncode == 0
    # Point the weight outside the folder: rejected before any file is opened.
    for loc in ("../m.data", "/etc/passwd", "a/../../m.data"):
        m = onnx.load(str(f), load_external_data=False)
        m.graph.initializer[0].external_data[0].value = loc
        g = tmp_path / "escape.onnx"
        g.write_bytes(m.SerializeToString())
        p = straitc(str(g))
        assert p.returncode == 1
        assert f"external data path '{loc}' must stay inside the model's folder" in p.stderr
    # Shrink the data file under the model: the range check catches it.
    (tmp_path / "m.data").write_bytes(b"\0" * 10)
    p = straitc(str(f))
    assert p.returncode == 1 and "lies outside 'm.data' (10 bytes)" in p.stderr


def test_huge_declared_sizes(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2**40, 2**40])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="r")], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    f = tmp_path / "huge.onnx"
    f.write_bytes(model.SerializeToString())
    p = straitc(str(f))
    assert p.returncode == 1 and "graph input 'x' has more than 2^48 elements" in p.stderr
