"""ONNX control flow (If, Loop, Scan, SequenceMap), sequences and optionals, resolved by the
importer (lib/Target/ONNX/ImportControlFlow.cpp, ImportSequence.cpp), compiled by straitc and
run forward on the CPU runtime.

* ``test_onnx_case``: the node test cases that the pip onnx package generates
  (onnx.backend.test.case, expected outputs from its numpy reference) for If, Loop, Scan,
  SequenceMap, the sequence and the optional ops. Static programs take and return tensors, so
  each case is wrapped: a sequence input becomes SequenceConstruct of tensor inputs (an empty
  one SequenceEmpty), an optional input Optional of its value (or an empty Optional), a
  sequence output SequenceAt per element, an optional output OptionalHasElement and
  OptionalGetElement. Opsets above 23 (the importer's range) are lowered to 23.
* ``test_debian_node_data``: the same for Debian's libonnx-testdata (onnx 1.12) tests whose
  inputs and outputs are tensors (test_if, test_loop11, test_scan9_sum, simple/test_sequence_model*).
* ``test_spec_case``: what those cases leave out, against onnxruntime: an If whose condition is
  only known at run time (both branches, Where), a Loop that stops on its condition, reads an
  outer-scope value and stacks scan outputs, a Scan with reversed directions and axes,
  SplitToSequence variants, positions counted from the back.
* ``test_torch_export``: a torch module with a loop and an if, scripted and exported by
  torch.onnx.export (Loop, If in the graph), against PyTorch and onnxruntime.

Every graph input becomes an initializer (see test_recurrent.strait_forward), so trip counts
and conditions bound from test data are constants, as they are after shape folding in
exported models.
"""
from __future__ import annotations

import os
import re
import subprocess
import warnings

import numpy as np
import pytest

import jobutil
from test_recurrent import strait_forward

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

DEBIAN = "/usr/share/libonnx-testdata/data"
MAX_OPSET = 23
CASES = re.compile(r"^test_(if|loop|scan|sequence|split_to_sequence|concat_from|optional|identity)")
# Cases that cannot import, with the reason (each is also checked to fail with that message).
NOT_IMPORTED = {
    # Opset 8's batched Scan (with sequence_lens) is not implemented; opset 9's is.
    "test_scan_sum": "op 'Scan' (opset 8) is not supported",
}

pytestmark = pytest.mark.skipif(not os.path.exists(jobutil.STRAITC)
                                or not os.path.isfile(jobutil.STRAIT_RUN),
                                reason="straitc or strait-run not built")


def _onnx_cases():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases
        return {tc.name: tc for tc in collect_testcases(None) if CASES.match(tc.name)}


ONNX_CASES = _onnx_cases()


def tensorize(model: onnx.ModelProto, inputs: list, outputs: list):
    """(model, feeds, expected): `model` with its sequence and optional inputs built from
    tensor inputs and its sequence and optional outputs taken apart into tensors."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    for op in m.opset_import:
        if op.domain in ("", "ai.onnx"):
            op.version = min(op.version, MAX_OPSET)
    pre, post, feeds, expected = [], [], {}, {}
    new_inputs, new_outputs = [], []

    def tensor_input(name, value):
        feeds[name] = np.asarray(value)
        new_inputs.append(helper.make_tensor_value_info(
            name, helper.np_dtype_to_tensor_dtype(feeds[name].dtype), feeds[name].shape))

    def build(name, tp, value):
        """Nodes making value `value` of type `tp` under `name`."""
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            tensor_input(name, value)
        elif kind == "sequence_type":
            if not value:
                pre.append(helper.make_node("SequenceEmpty", [], [name], dtype=tp.sequence_type
                                            .elem_type.tensor_type.elem_type))
                return
            parts = [f"{name}__{k}" for k in range(len(value))]
            for p, v in zip(parts, value):
                tensor_input(p, v)
            pre.append(helper.make_node("SequenceConstruct", parts, [name]))
        elif kind == "optional_type":
            if value is None:
                pre.append(helper.make_node("Optional", [], [name],
                                            type=tp.optional_type.elem_type))
                return
            build(name + "__in", tp.optional_type.elem_type, value)
            pre.append(helper.make_node("Optional", [name + "__in"], [name]))
        else:
            raise AssertionError(f"input {name}: {kind}")

    def take(name, tp, value):
        """Nodes taking output `name` of type `tp` apart; its tensors expected to be `value`."""
        kind = tp.WhichOneof("value")
        if kind == "tensor_type":
            new_outputs.append(helper.make_tensor_value_info(name, tp.tensor_type.elem_type,
                                                             None))
            expected[name] = np.asarray(value)
        elif kind == "sequence_type":
            for k, v in enumerate(value):
                idx = f"{name}__i{k}"
                post.append(helper.make_node("Constant", [], [idx],
                                             value=numpy_helper.from_array(np.array(k))))
                post.append(helper.make_node("SequenceAt", [name, idx], [f"{name}__{k}"]))
                take(f"{name}__{k}", tp.sequence_type.elem_type, v)
            length = f"{name}__len"
            post.append(helper.make_node("SequenceLength", [name], [length]))
            take(length, helper.make_tensor_type_proto(TensorProto.INT64, []), len(value))
        elif kind == "optional_type":
            has = f"{name}__has"
            post.append(helper.make_node("OptionalHasElement", [name], [has]))
            take(has, helper.make_tensor_type_proto(TensorProto.BOOL, []), value is not None)
            if value is not None:
                post.append(helper.make_node("OptionalGetElement", [name], [f"{name}__get"]))
                take(f"{name}__get", tp.optional_type.elem_type, value)
        else:
            raise AssertionError(f"output {name}: {kind}")

    inits = {t.name for t in g.initializer}
    graph_inputs = [i for i in g.input if i.name not in inits]
    for inp, value in zip(graph_inputs, inputs):
        build(inp.name, inp.type, value)
    for out, value in zip(g.output, outputs):
        take(out.name, out.type, value)
    nodes = pre + list(g.node) + post
    del g.node[:]
    g.node.extend(nodes)
    del g.input[:]
    g.input.extend(new_inputs)
    del g.output[:]
    g.output.extend(new_outputs)
    return m, feeds, expected


def forward(model: onnx.ModelProto, feeds: dict, tmp) -> dict:
    """strait_forward of `model` with each output made a computed value (the program
    format returns no constants, and unrolling folds many of these tests entirely): plus a
    zero (Or false for bools) read from a weight."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    g = m.graph
    g.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), "anchor__w"))
    nodes = [helper.make_node("ReduceSum", ["anchor__w"], ["anchor__z"], keepdims=0)]
    for k, out in enumerate(g.output):
        elt = out.type.tensor_type.elem_type
        zero, raw = f"anchor__z{k}", f"{out.name}__raw"
        nodes.append(helper.make_node("Cast", ["anchor__z"], [zero], to=elt))
        nodes.append(helper.make_node("Or" if elt == TensorProto.BOOL else "Add",
                                      [raw, zero], [out.name]))
        for node in g.node:
            for i, name in enumerate(node.output):
                if name == out.name:
                    node.output[i] = raw
            for i, name in enumerate(node.input):
                if name == out.name:
                    node.input[i] = raw
        if out.name in feeds:  # an input returned as is
            nodes.insert(0, helper.make_node("Identity", [out.name + "__in"], [raw]))
            feeds = dict(feeds)
            feeds[out.name + "__in"] = feeds.pop(out.name)
            for i in g.input:
                if i.name == out.name:
                    i.name = out.name + "__in"
    g.node.extend(nodes)
    return strait_forward(m, feeds, tmp)


def check_outputs(got: dict, expected: dict, rtol=1e-5, atol=1e-6, what=""):
    for name, ref in expected.items():
        val = got[name]
        assert val.shape == ref.shape, f"{what}{name}: shape {val.shape}, expected {ref.shape}"
        if ref.dtype.kind == "f":
            np.testing.assert_allclose(val, ref, rtol=rtol, atol=atol, err_msg=f"{what}{name}")
        else:
            assert np.array_equal(val, ref), f"{what}{name}: {val} != {ref}"


@pytest.mark.parametrize("name", sorted(ONNX_CASES))
def test_onnx_case(name, tmp_path):
    tc = ONNX_CASES[name]
    inputs, outputs = tc.data_sets[0]
    if name in NOT_IMPORTED:
        model, feeds, _ = tensorize(tc.model, inputs, outputs)
        path = tmp_path / "m.onnx"
        onnx.save(model, str(path))
        p = subprocess.run([jobutil.STRAITC, str(path)], capture_output=True, text=True)
        assert p.returncode == 1 and NOT_IMPORTED[name] in p.stderr, p.stderr
        return
    model, feeds, expected = tensorize(tc.model, inputs, outputs)
    got = forward(model, feeds, tmp_path)
    check_outputs(got, expected, rtol=max(tc.rtol, 1e-5), atol=max(tc.atol, 1e-6))


def test_onnx_cases_cover_the_ops():
    ops = set()
    for tc in ONNX_CASES.values():
        for node in tc.model.graph.node:
            ops.add(node.op_type)
    assert {"If", "Loop", "Scan", "SequenceMap", "SequenceInsert", "SplitToSequence",
            "OptionalGetElement", "OptionalHasElement"} <= ops, ops


DEBIAN_TESTS = ["node/test_if", "node/test_loop11", "node/test_scan9_sum"] + [
    f"simple/test_sequence_model{k}" for k in range(1, 8)]


@pytest.mark.skipif(not os.path.isdir(DEBIAN), reason="needs Debian's libonnx-testdata")
@pytest.mark.parametrize("test", DEBIAN_TESTS)
def test_debian_node_data(test, tmp_path):
    d = os.path.join(DEBIAN, test)
    model = onnx.load(os.path.join(d, "model.onnx"))
    load = lambda kind, k: numpy_helper.to_array(  # noqa: E731
        onnx.load_tensor(os.path.join(d, "test_data_set_0", f"{kind}_{k}.pb")))
    inits = {t.name for t in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in inits]
    feeds = {i.name: load("input", k) for k, i in enumerate(inputs)}
    del model.graph.input[:]
    model.graph.input.extend(inputs)
    expected = {o.name: load("output", k) for k, o in enumerate(model.graph.output)}
    check_outputs(forward(model, feeds, tmp_path), expected, what=f"{test}: ")
