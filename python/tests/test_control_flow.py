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
  inputs and outputs are tensors (test_if, test_loop11, test_scan9_sum, the Loop of Range's
  expanded function, simple/test_sequence_model*).
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
NOT_IMPORTED: dict[str, str] = {}

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


DEBIAN_TESTS = ["node/test_if", "node/test_loop11", "node/test_scan9_sum",
                "node/test_range_int32_type_negative_delta_expanded",
                "node/test_range_float_type_positive_delta_expanded"] + [
    f"simple/test_sequence_model{k}" for k in range(1, 9)]


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


# ---------------------------------------------------------------------------------------
# What the node tests leave out, against onnxruntime (onnx.reference for SequenceMap)

F32, I64, BOOL = TensorProto.FLOAT, TensorProto.INT64, TensorProto.BOOL


def _info(name, elt=F32, shape=None):
    return helper.make_tensor_value_info(name, elt, shape)


def _const(name, value):
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(
        np.asarray(value), name))


def _model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    return model


def _if_runtime_condition():
    """The condition comes from a weight: not constant, both branches and Where."""
    then = helper.make_graph([helper.make_node("Mul", ["x", "x"], ["a"])], "then", [],
                             [_info("a")])
    other = helper.make_graph([_const("one", np.float32(1)),
                               helper.make_node("Sub", ["x", "one"], ["b"])], "else", [],
                              [_info("b")])
    nodes = [helper.make_node("ReduceSum", ["w"], ["s"], keepdims=0),
             _const("zero", np.float32(0)),
             helper.make_node("Greater", ["s", "zero"], ["c"]),
             helper.make_node("If", ["c"], ["y"], then_branch=then, else_branch=other)]
    return _model(nodes, [_info("w", F32, [2]), _info("x", F32, [3, 2])], [_info("y")])


def _loop_early_exit(with_trip_count=True):
    """Carried h and an outer-scope weight; stops when i reaches 4 (5 iterations of at most
    10); scan output stacked."""
    body = helper.make_graph(
        [helper.make_node("Cast", ["i"], ["fi"], to=F32),
         helper.make_node("Mul", ["h", "scale"], ["hs"]),
         helper.make_node("Add", ["hs", "fi"], ["h2"]),
         helper.make_node("Tanh", ["h2"], ["h_out"]),
         _const("four", np.int64(4)),
         helper.make_node("Less", ["i", "four"], ["c_out"]),
         helper.make_node("ReduceSum", ["h_out"], ["scan"], keepdims=1)],
        "body", [_info("i", I64, []), _info("c", BOOL, []), _info("h")],
        [_info("c_out", BOOL, []), _info("h_out"), _info("scan")])
    nodes = [_const("M", np.int64(10)), _const("cond", np.bool_(True)),
             helper.make_node("Loop", ["M" if with_trip_count else "", "cond", "h0"],
                              ["h", "ys"], body=body)]
    return _model(nodes, [_info("h0", F32, [3]), _info("scale", F32, [3])],
                  [_info("h"), _info("ys")])


def _scan_directions():
    """Two scan inputs along axes 0 and 1, the second reversed; two scan outputs, the
    second reversed and stacked along the last axis."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["ab"]),
         helper.make_node("Add", ["s", "ab"], ["s2"]),
         helper.make_node("Identity", ["s2"], ["y1"]),
         helper.make_node("Sigmoid", ["ab"], ["y2"])],
        "body", [_info("s", F32, [4]), _info("a", F32, [4]), _info("b", F32, [4])],
        [_info("s2", F32, [4]), _info("y1", F32, [4]), _info("y2", F32, [4])])
    node = helper.make_node("Scan", ["s0", "A", "B"], ["s", "Y1", "Y2"], body=body,
                            num_scan_inputs=2, scan_input_axes=[0, 1],
                            scan_input_directions=[0, 1], scan_output_axes=[0, -1],
                            scan_output_directions=[0, 1])
    return _model([node], [_info("s0", F32, [4]), _info("A", F32, [3, 4]),
                           _info("B", F32, [4, 3])],
                  [_info("s"), _info("Y1"), _info("Y2")])


def _scan8(lens=None):
    """Opset 8's batched Scan: batch 2, one of two scan inputs reversed, sequence_lens."""
    body = helper.make_graph(
        [helper.make_node("Mul", ["a", "b"], ["ab"]),
         helper.make_node("Add", ["s", "ab"], ["s2"]),
         helper.make_node("Tanh", ["s2"], ["y"])],
        "body", [_info("s", F32, [4]), _info("a", F32, [4]), _info("b", F32, [4])],
        [_info("s2", F32, [4]), _info("y", F32, [4])])
    inputs = [_info("s0", F32, [2, 4]), _info("A", F32, [2, 3, 4]), _info("B", F32, [2, 3, 4])]
    nodes = [helper.make_node("Scan", ["lens" if lens else "", "s0", "A", "B"], ["s", "Y"],
                              body=body, num_scan_inputs=2, directions=[0, 1])]
    if lens:
        nodes.insert(0, _const("lens", np.array(lens, np.int64)))
    return _model(nodes, inputs, [_info("s"), _info("Y")], opset=8)


def _sequences():
    """SplitToSequence (scalar split, keepdims=0, list), positions from the back,
    ConcatFromSequence with and without new_axis, SequenceLength, SequenceMap (the optional
    ops are covered by the onnx node cases)."""
    add_body = helper.make_graph([helper.make_node("Add", ["e", "t"], ["o"])], "map",
                                 [_info("e"), _info("t")], [_info("o")])
    nodes = [
        _const("two", np.int64(2)), _const("m1", np.int64(-1)), _const("m2", np.int64(-2)),
        _const("sizes", np.array([1, 3], np.int64)),
        helper.make_node("SplitToSequence", ["x", "two"], ["s1"], axis=1),      # [4,2] x3
        helper.make_node("SplitToSequence", ["x"], ["rows"], axis=0, keepdims=0),  # [6] x4
        helper.make_node("SplitToSequence", ["x", "sizes"], ["s3"], axis=0),   # [1,6],[3,6]
        helper.make_node("SequenceAt", ["s1", "m1"], ["last"]),
        helper.make_node("SequenceErase", ["rows", "m2"], ["rows3"]),
        helper.make_node("SequenceInsert", ["rows3", "v", "m1"], ["rows4"]),
        helper.make_node("ConcatFromSequence", ["rows4"], ["stacked"], axis=-1, new_axis=1),
        helper.make_node("ConcatFromSequence", ["s3"], ["joined"], axis=0),
        helper.make_node("SequenceLength", ["s1"], ["n"]),
        helper.make_node("SequenceMap", ["rows4", "v"], ["mapped"], body=add_body),
        helper.make_node("ConcatFromSequence", ["mapped"], ["mapped_t"], axis=0),
    ]
    return _model(nodes, [_info("x", F32, [4, 6]), _info("v", F32, [6])],
                  [_info("last"), _info("stacked"), _info("joined"), _info("n", I64),
                   _info("mapped_t")])


SPEC = {
    "if-runtime-true": (_if_runtime_condition, {"w": [1.0, 2.0]}),
    "if-runtime-false": (_if_runtime_condition, {"w": [-3.0, 1.0]}),
    "loop-early-exit": (_loop_early_exit, {}),
    "loop-while": (lambda: _loop_early_exit(False), {}),
    "scan-directions": (_scan_directions, {}),
    "scan8-batched": (_scan8, {}),
    "scan8-full-lengths": (lambda: _scan8([3, 3]), {}),
    "sequences": (_sequences, {}),
}


@pytest.mark.parametrize("case", sorted(SPEC))
def test_spec_case(case, tmp_path):
    make, fixed = SPEC[case]
    model = make()
    rng = np.random.default_rng(7)
    feeds = {}
    for inp in model.graph.input:
        shape = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        feeds[inp.name] = np.asarray(fixed.get(inp.name, rng.standard_normal(shape)),
                                     np.float32)
    if case == "sequences":  # onnxruntime does not run SequenceMap
        from onnx.reference import ReferenceEvaluator
        ref = ReferenceEvaluator(model).run(None, feeds)
    else:
        ref = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"]).run(None, feeds)
    expected = {o.name: np.asarray(r) for o, r in zip(model.graph.output, ref)}
    check_outputs(forward(model, feeds, tmp_path), expected, what=f"{case}: ")


def test_scan8_partial_lengths(tmp_path):
    """Sequences shorter than the scan axis would need masking: a diagnostic."""
    path = tmp_path / "scan8.onnx"
    onnx.save(_scan8([3, 2]), str(path))
    p = subprocess.run([jobutil.STRAITC, str(path)], capture_output=True, text=True)
    assert p.returncode == 1
    assert ("Scan node 'Scan_1': input 'sequence_lens' holds 2; only full sequences (3) are "
            "supported") in p.stderr, p.stderr


# ---------------------------------------------------------------------------------------
# A real exporter: TorchScript's Loop and If

def test_torch_export(tmp_path):
    torch = pytest.importorskip("torch")

    class Recur(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(4, 4)

        def forward(self, x):
            h = torch.zeros_like(x[0])
            for i in range(x.shape[0]):  # a Loop over the (dynamic) first dimension
                h = torch.tanh(self.lin(h) + x[i])
            if x.shape[0] > 2:  # an If on a shape
                h = h * 2.0
            else:
                h = h - 1.0
            return h

    torch.manual_seed(0)
    module = torch.jit.script(Recur())
    x = torch.randn(5, 4)
    path = str(tmp_path / "recur.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(module, (x,), path, dynamo=False, input_names=["x"],
                          output_names=["y"], opset_version=17,
                          dynamic_axes={"x": {0: "seq"}})
    model = onnx.load(path)
    assert {"Loop", "If"} <= {n.op_type for n in model.graph.node}
    ref_ort = ort.InferenceSession(path, providers=["CPUExecutionProvider"]).run(
        None, {"x": x.numpy()})[0]
    with torch.no_grad():
        ref_torch = module(x).numpy()
    np.testing.assert_allclose(ref_ort, ref_torch, rtol=1e-5, atol=1e-6)
    # The dynamic dimension becomes static (as --input-shape would make it): x is bound.
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 5
    got = forward(model, {"x": x.numpy()}, tmp_path)
    check_outputs(got, {"y": ref_torch}, what="torch: ")


def test_torch_loop_gradients(tmp_path):
    """Training through an unrolled Loop: a scripted recurrent classifier (a Loop over the
    time axis) exported without constant folding; the training step has
    one AccumulateGrad per torch parameter and its gradients, summed over the iterations,
    equal torch's autograd (strait.gradcheck, 1e-4)."""
    torch = pytest.importorskip("torch")
    import sys

    sys.path.insert(0, os.path.join(jobutil.ROOT, "python"))
    from strait import gradcheck

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.inp = torch.nn.Linear(5, 8)
            self.rec = torch.nn.Linear(8, 8, bias=False)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x):
            h = torch.zeros(x.shape[0], 8)
            for t in range(x.shape[1]):
                h = torch.tanh(self.inp(x[:, t]) + self.rec(h))
            if x.shape[1] > 3:
                h = h * 0.5
            return self.head(h)

    torch.manual_seed(4)
    module = torch.jit.script(Classifier())
    gen = torch.Generator().manual_seed(5)
    case = gradcheck.runtime_batch(gradcheck.Case(
        "loop", module, {"x": torch.randn(4, 6, 5, generator=gen)},
        torch.tensor([0, 2, 1, 2]), "x=4x6x5"))
    path = str(tmp_path / "m.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        gradcheck.export_model(case, path)
    assert "Loop" in {n.op_type for n in onnx.load(path).graph.node}
    step = gradcheck.compile_training_step(path, case.input_shapes, jobutil.BUILD)
    assert gradcheck.check_structure(case, step) == []
    got = gradcheck.run_on_runtime(path, case, jobutil.BUILD)
    _, ref = gradcheck.torch_gradients(case)
    assert gradcheck.compare(ref, got) == {}
