"""The libonnx-testdata import report must not regress (docs/onnx-testdata-import.md).

Runs python/strait/testdata_report.py on the `node` folder with the built tools and
compares the number of tests that import, verify and match their expected output
types against a committed floor. Raise NODE_PASS_FLOOR when the importer improves.
"""
from __future__ import annotations

import os
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from strait import testdata_report  # noqa: E402

BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
DATA = testdata_report.DATA
NODE_PASS_FLOOR = 869  # docs/onnx-testdata-import.md: 871 of 932
MIN_SUPPORTED_OPS = 100


needs_tools = pytest.mark.skipif(
    not os.path.exists(os.path.join(BUILD, "bin", "strait-translate"))
    or not os.path.isdir(os.path.join(DATA, "node")),
    reason="needs the built tools and Debian's libonnx-testdata")


@needs_tools
def test_node_folder_does_not_regress():
    results = testdata_report.run(DATA, BUILD, ["node"], jobs=2)
    passed = [r for r in results if r.passed]
    mismatched = [f"{r.name}: {r.mismatches[0]}" for r in results if r.mismatches]
    assert len(results) > 900, "the node folder lost tests"
    assert not mismatched, "imported with wrong output types:\n" + "\n".join(mismatched)
    assert len(passed) >= NODE_PASS_FLOOR, (
        f"{len(passed)} node tests pass, fewer than the floor {NODE_PASS_FLOOR}")


def test_supported_op_count():
    ops = testdata_report.supported_ops()
    assert len(ops) >= MIN_SUPPORTED_OPS, ops
    for op in ("MatMul", "Reshape", "Softmax", "LayerNormalization", "Conv"):
        assert op in ops


def test_classify_diagnostics():
    c = testdata_report.classify
    assert c("m.onnx:0:0: error: Foo node 'n': op 'Foo' (opset 13) is not supported",
             []) == ("unsupported-op", "Foo")
    assert c("error: Scan node 's': op 'Scan' (opset 8) is not supported", [])[0] == \
        "control-flow"
    assert c("error: graph output 'res' is a sequence: a static program returns tensors",
             [])[0] == "sequence"
    assert c("error: Reshape node 'r': input 'shape' (s) must be constant once shapes "
             "are static", [])[0] == "non-constant"
    assert c("error: graph input 'x' has unsupported data type STRING", [])[0] == "dtype"
    assert c("error: op 'SequenceAt' (opset 13) is not supported", [])[0] == "sequence"
    assert c("error: something else", [])[0] == "other"


def test_result_types_parse():
    mlir = ('module {\n  func.func @main(%arg0: tensor<2x3xf32> {graph.name = "x"}) -> '
            '(tensor<2xi64> {graph.name = "y"}, tensor<f32> {graph.name = "z"}) {\n')
    assert testdata_report.tensor_types(mlir) == ["2xi64", "f32"]
