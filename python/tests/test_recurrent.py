"""ONNX RNN, GRU and LSTM, unrolled by the importer (lib/Target/ONNX/ImportRecurrent.cpp),
run forward on the CPU runtime and trained.

* ``test_node_data``: the ONNX backend node tests of Debian's libonnx-testdata
  (test_lstm_*, test_gru_*, test_rnn_*, test_simple_rnn_*): every graph input becomes an
  initializer holding its test_data_set_0 value, straitc compiles the forward program,
  strait-run runs it and dumps the outputs, which must equal output_*.pb (1e-5 relative).
* ``test_spec_case``: the attributes and optional inputs the node tests do not cover
  (directions, layouts, biases, initial states, peepholes, input_forget, clip, every
  activation with alpha/beta, linear_before_reset, output subsets, longer sequences,
  sequence_lens shorter than the sequence: constant, or computed at run time)
  against onnxruntime. onnxruntime has no layout=1: its reference runs the layout-0 twin
  on transposed inputs and transposes the outputs back.
* ``test_torch_export``: torch.nn.LSTM / GRU / RNN (2 layers, bidirectional,
  batch_first) exported with torch.onnx.export, against PyTorch and onnxruntime.
* ``test_torch_gradients_per_parameter``: the same modules under a linear head, exported
  without constant folding: one AccumulateGrad per torch parameter and every gradient equal
  to torch's (strait.gradcheck, 1e-4).
* ``test_training_matches_torch``: a few SGD and AdamW steps of a small PyTorch LSTM
  classifier (its loss exported with it): the losses strait-run prints equal PyTorch's
  own training of the same module (1e-4 relative).

The gradients of W, R, B, P and initial states against finite differences are cases of
test_gradient_fd.py (``LSTM-*``, ``GRU-*``, ``RNN-*``).
"""
from __future__ import annotations

import glob
import os
import re
import subprocess

import numpy as np
import pytest

import jobutil

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

STRAITC = jobutil.STRAITC
STRAIT_RUN = jobutil.STRAIT_RUN
NODE_DATA = "/usr/share/libonnx-testdata/data/node"
REL = 1e-5

pytestmark = pytest.mark.skipif(not os.path.exists(STRAITC) or not os.path.isfile(STRAIT_RUN),
                                reason="straitc or strait-run not built")


def _max_rel(got, ref) -> float:
    got, ref = np.asarray(got, np.float64), np.asarray(ref, np.float64)
    assert got.shape == ref.shape, (got.shape, ref.shape)
    return float(np.abs(got - ref).max() / max(float(np.abs(ref).max()), 1e-6))


def _bind_inputs(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """A copy of `model` whose graph inputs are initializers holding `feeds` (float ones
    become Strait variables, integer ones constants)."""
    m = onnx.ModelProto()
    m.CopyFrom(model)
    for inp in m.graph.input:
        m.graph.initializer.append(numpy_helper.from_array(np.asarray(feeds[inp.name]),
                                                           inp.name))
    del m.graph.input[:]
    return m


def strait_forward(model: onnx.ModelProto, feeds: dict, tmp) -> dict:
    """Runs `model` on the CPU runtime with `feeds` bound; {output name: array}."""
    tmp = str(tmp)
    path = os.path.join(tmp, "model.onnx")
    onnx.save(_bind_inputs(model, feeds), path)
    job, dump = os.path.join(tmp, "job"), os.path.join(tmp, "dump")
    c = subprocess.run([STRAITC, path, "--emit=program", "-o", job], capture_output=True,
                       text=True)
    assert c.returncode == 0, c.stderr[-3000:]
    r = subprocess.run([STRAIT_RUN, job, "--steps", "1", "--threads", "1", "--quiet",
                        "--dump-outputs", dump], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stderr + r.stdout)[-3000:]
    return {o.name: np.load(os.path.join(dump, f"{o.name}.rank0.npy"))
            for o in model.graph.output}


def node_test_data(test):
    """An ONNX backend node test of NODE_DATA: (model, {input name: array}, {output name:
    array}) of its test_data_set_0."""
    d = os.path.join(NODE_DATA, test)
    model = onnx.load(os.path.join(d, "model.onnx"))
    load = lambda kind, k: numpy_helper.to_array(  # noqa: E731
        onnx.load_tensor(os.path.join(d, "test_data_set_0", f"{kind}_{k}.pb")))
    feeds = {i.name: load("input", k) for k, i in enumerate(model.graph.input)}
    outs = {o.name: load("output", k) for k, o in enumerate(model.graph.output)}
    return model, feeds, outs


# ---------------------------------------------------------------------------------------
# ONNX backend node tests

NODE_TESTS = sorted(os.path.basename(d) for pattern in ("test_lstm_*", "test_gru_*",
                                                         "test_rnn_*", "test_simple_rnn_*")
                    for d in glob.glob(os.path.join(NODE_DATA, pattern)))


@pytest.mark.skipif(not NODE_TESTS, reason="needs Debian's libonnx-testdata")
@pytest.mark.parametrize("test", NODE_TESTS)
def test_node_data(test, tmp_path):
    check_node_test(test, tmp_path)


def check_node_test(test, tmp):
    """Runs node test `test` on the CPU runtime: every output within REL of the expected."""
    model, feeds, outs = node_test_data(test)
    got = strait_forward(model, feeds, tmp)
    for name, ref in outs.items():
        err = _max_rel(got[name], ref)
        assert err <= REL, f"{test}: {name} differs by {err:.2e}"


def test_node_data_covers_all_three_ops():
    if not NODE_TESTS:
        pytest.skip("needs Debian's libonnx-testdata")
    ops = {onnx.load(os.path.join(NODE_DATA, t, "model.onnx")).graph.node[0].op_type
           for t in NODE_TESTS}
    assert ops == {"RNN", "GRU", "LSTM"}, ops


# ---------------------------------------------------------------------------------------
# Attributes and optional inputs against onnxruntime

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def _spec_model(op, seq, batch, inp, hidden, direction="forward", layout=0,
                optional=(), outputs=("Y", "Y_h", "Y_c"), seq_lens=None, dynamic_lens=False,
                seed=0, **attrs):
    """(model, feeds) for one `op` node whose inputs are all graph inputs. seq_lens: None,
    True (all seq) or a list; dynamic_lens: sequence_lens is Cast from a float input (not
    a constant once the inputs become initializers)."""
    rng = np.random.default_rng(seed)
    d = 2 if direction == "bidirectional" else 1
    g = GATES[op]
    u = lambda *s: rng.uniform(-1, 1, s).astype(np.float32)  # noqa: E731
    state = (batch, d, hidden) if layout else (d, batch, hidden)
    values = {"X": u(batch, seq, inp) if layout else u(seq, batch, inp),
              "W": u(d, g * hidden, inp), "R": u(d, g * hidden, hidden)}
    optional_values = {"B": u(d, 2 * g * hidden), "initial_h": u(*state),
                       "initial_c": u(*state), "P": u(d, 3 * hidden)}
    names = ["X", "W", "R", "B", "sequence_lens", "initial_h"]
    if op == "LSTM":
        names += ["initial_c", "P"]
    if seq_lens is not None:
        lens = [seq] * batch if seq_lens is True else seq_lens
        values["sequence_lens"] = np.array(lens, np.int32)
    for n in optional:
        values[n] = optional_values[n]
    inputs = [n if n in values else "" for n in names]
    while inputs and not inputs[-1]:
        inputs.pop()
    outs = ["Y", "Y_h"] + (["Y_c"] if op == "LSTM" else [])
    outs = [o if o in outputs else "" for o in outs]
    while not outs[-1]:
        outs.pop()
    node = helper.make_node(op, inputs, outs, hidden_size=hidden, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    nodes = [node]
    if dynamic_lens:
        values["lens_f"] = values.pop("sequence_lens").astype(np.float32)
        names[names.index("sequence_lens")] = "lens_f"
        nodes.insert(0, helper.make_node("Cast", ["lens_f"], ["sequence_lens"],
                                         to=TensorProto.INT32))
    graph = helper.make_graph(
        nodes, "rec",
        [helper.make_tensor_value_info(n, TensorProto.INT32 if n == "sequence_lens"
                                       else TensorProto.FLOAT, values[n].shape)
         for n in names if n in values],
        [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outs if o])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    return model, values


def _onnxruntime(model, feeds) -> dict:
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in model.graph.output]
    return dict(zip(names, sess.run(names, feeds)))


def _reference(model, feeds) -> dict:
    """onnxruntime's outputs; layout 1 through the layout-0 twin."""
    node = next(n for n in model.graph.node if n.op_type in GATES)
    layout = next((a.i for a in node.attribute if a.name == "layout"), 0)
    if not layout:
        return _onnxruntime(model, feeds)
    twin = onnx.ModelProto()
    twin.CopyFrom(model)
    twin_node = next(n for n in twin.graph.node if n.op_type in GATES)
    attrs = [a for a in twin_node.attribute if a.name != "layout"]
    del twin_node.attribute[:]
    twin_node.attribute.extend(attrs)
    swap = {"X": (1, 0, 2), "initial_h": (1, 0, 2), "initial_c": (1, 0, 2)}
    f = {k: np.ascontiguousarray(v.transpose(swap[k])) if k in swap else v
         for k, v in feeds.items()}
    for inp in twin.graph.input:
        inp.CopyFrom(helper.make_tensor_value_info(
            inp.name, inp.type.tensor_type.elem_type, f[inp.name].shape))
    out = _onnxruntime(twin, f)
    back = {"Y": (2, 0, 1, 3), "Y_h": (1, 0, 2), "Y_c": (1, 0, 2)}
    return {k: v.transpose(back[k]) for k, v in out.items()}


SPEC_CASES = {
    # RNN
    "rnn-forward-Y": dict(op="RNN", outputs=("Y",)),
    "rnn-reverse-B-h0": dict(op="RNN", direction="reverse", optional=("B", "initial_h")),
    "rnn-bidirectional-relu-clip": dict(op="RNN", direction="bidirectional", optional=("B",),
                                        activations=["Relu", "Tanh"], clip=0.6),
    "rnn-leakyrelu-alpha": dict(op="RNN", activations=["LeakyRelu"], activation_alpha=[0.3]),
    "rnn-bidirectional-layout1": dict(op="RNN", direction="bidirectional", layout=1,
                                      optional=("B", "initial_h")),
    # GRU
    "gru-forward": dict(op="GRU", optional=("B",)),
    "gru-linear-before-reset": dict(op="GRU", optional=("B", "initial_h"),
                                    linear_before_reset=1),
    "gru-lbr-no-bias-no-h0": dict(op="GRU", linear_before_reset=1, outputs=("Y_h",)),
    "gru-bidirectional-h0": dict(op="GRU", direction="bidirectional",
                                 optional=("B", "initial_h")),
    "gru-reverse-clip": dict(op="GRU", direction="reverse", optional=("B",), clip=0.5),
    "gru-layout1-lbr": dict(op="GRU", layout=1, direction="bidirectional",
                            optional=("B", "initial_h"), linear_before_reset=1),
    "gru-activations": dict(op="GRU", direction="bidirectional", optional=("B",),
                            activations=["HardSigmoid", "Softsign", "Sigmoid", "Softplus"],
                            activation_alpha=[0.3], activation_beta=[0.45]),
    # LSTM
    "lstm-forward": dict(op="LSTM"),
    "lstm-all-inputs": dict(op="LSTM", optional=("B", "initial_h", "initial_c", "P"),
                            seq_lens=True),
    # sequence_lens shorter than seq_length: masked steps (constant or run-time lengths)
    "lstm-bidirectional-lengths": dict(op="LSTM", direction="bidirectional", seq_lens=[5, 3, 1],
                                       optional=("B", "initial_h", "initial_c", "P")),
    "lstm-lengths-no-initial-state": dict(op="LSTM", seq_lens=[2, 5, 4], optional=("B",)),
    "gru-reverse-lengths": dict(op="GRU", direction="reverse", seq_lens=[4, 5, 2],
                                optional=("B", "initial_h"), linear_before_reset=1),
    "gru-layout1-dynamic-lengths": dict(op="GRU", layout=1, direction="bidirectional",
                                        seq_lens=[3, 1, 5], dynamic_lens=True,
                                        optional=("B", "initial_h")),
    "rnn-bidirectional-dynamic-lengths": dict(op="RNN", direction="bidirectional",
                                              seq_lens=[1, 4, 5], dynamic_lens=True,
                                              optional=("B", "initial_h")),
    "lstm-bidirectional-peepholes": dict(op="LSTM", direction="bidirectional",
                                         optional=("B", "initial_h", "initial_c", "P")),
    "lstm-reverse-Yc-only": dict(op="LSTM", direction="reverse", optional=("B",),
                                 outputs=("Y_c",)),
    "lstm-input-forget": dict(op="LSTM", optional=("B", "initial_c", "P"), input_forget=1),
    "lstm-clip": dict(op="LSTM", optional=("B", "initial_h", "initial_c"), clip=0.4),
    "lstm-layout1-bidirectional": dict(op="LSTM", direction="bidirectional", layout=1,
                                       optional=("B", "initial_h", "initial_c", "P")),
    "lstm-activations": dict(op="LSTM", optional=("B",),
                             activations=["HardSigmoid", "ScaledTanh", "Elu"],
                             activation_alpha=[0.25, 0.8, 0.6], activation_beta=[0.4, 1.3]),
    "lstm-affine-thresholded": dict(op="LSTM", direction="bidirectional",
                                    activations=["Sigmoid", "Affine", "Tanh",
                                                 "Sigmoid", "ThresholdedRelu", "Softsign"],
                                    activation_alpha=[0.7, 0.1], activation_beta=[0.2]),
}


@pytest.mark.parametrize("name", sorted(SPEC_CASES))
def test_spec_case(name, tmp_path):
    cfg = dict(SPEC_CASES[name])
    op = cfg.pop("op")
    model, feeds = _spec_model(op, seq=5, batch=3, inp=4, hidden=6,
                               seed=sum(map(ord, name)), **cfg)
    ref = _reference(model, feeds)
    got = strait_forward(model, feeds, tmp_path)
    assert set(got) == set(ref)
    for k in ref:
        assert float(np.abs(ref[k]).max()) > 1e-2, f"{name}: {k} is ~0, a weak check"
        err = _max_rel(got[k], ref[k])
        print(f"{name}: {k} max relative difference {err:.1e}")
        assert err <= REL, f"{name}: {k} differs from onnxruntime by {err:.2e}"


# ---------------------------------------------------------------------------------------
# PyTorch exports


def _torch_module(kind, seed=0):
    import torch

    torch.manual_seed(seed)
    cls = {"LSTM": torch.nn.LSTM, "GRU": torch.nn.GRU, "RNN": torch.nn.RNN}[kind]
    return cls(5, 7, num_layers=2, bidirectional=True, batch_first=True)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_torch_export(kind, tmp_path):
    torch = pytest.importorskip("torch")
    module = _torch_module(kind).eval()
    x = torch.randn(3, 6, 5, generator=torch.Generator().manual_seed(1))
    names = ["y", "h"] + (["c"] if kind == "LSTM" else [])
    path = str(tmp_path / f"{kind}.onnx")
    torch.onnx.export(module, (x,), path, input_names=["x"], output_names=names,
                      opset_version=17, dynamo=False)
    model = onnx.load(path)
    assert sum(n.op_type == kind for n in model.graph.node) == 2
    with torch.no_grad():
        out = module(x)
    flat = [out[0], *(out[1] if kind == "LSTM" else (out[1],))]
    ref_torch = {n: t.numpy() for n, t in zip(names, flat)}
    ref_ort = _onnxruntime(model, {"x": x.numpy()})
    got = strait_forward(model, {"x": x.numpy()}, tmp_path)
    for n in names:
        assert _max_rel(got[n], ref_torch[n]) <= REL, (n, _max_rel(got[n], ref_torch[n]))
        assert _max_rel(got[n], ref_ort[n]) <= REL, (n, _max_rel(got[n], ref_ort[n]))


# ---------------------------------------------------------------------------------------
# Gradients of layout 1 (the other recurrent cases are in test_gradient_fd.py)


def test_layout1_gradients_match_finite_differences(tmp_path):
    """test_gradient_fd's check for a batch-first LSTM with input_forget: onnxruntime has
    no layout 1, so its finite differences run the layout-0 op between Transposes."""
    import test_gradient_fd as fd

    rng = np.random.default_rng(137)
    r = lambda *s: rng.uniform(-1, 1, s)  # noqa: E731
    case = fd.Case(
        "LSTM-layout1-input-forget",
        lambda T: [helper.make_node("LSTM", ["x", "w", "r", "b"], ["", "y"], hidden_size=3,
                                    layout=1, input_forget=1)],
        {"x": r(2, 4, 2), "w": r(1, 12, 2), "r": r(1, 12, 3), "b": r(1, 24)},
        ref_nodes=lambda T: [
            helper.make_node("Transpose", ["x"], ["xt"], perm=[1, 0, 2]),
            helper.make_node("LSTM", ["xt", "w", "r", "b"], ["", "yt"], hidden_size=3,
                             input_forget=1),
            helper.make_node("Transpose", ["yt"], ["y"], perm=[1, 0, 2])])
    R = rng.uniform(-1, 1, (2, 1, 3))  # Y_h: [batch, directions, hidden]
    ref, dtype = fd.finite_differences(case, R)
    got = fd.strait_gradients(case, R, str(tmp_path))
    tol = 2e-4 if dtype == "f64" else 5e-3
    for name, g in ref.items():
        scale = float(np.abs(g).max())
        assert scale > 1e-3, f"d{name} is ~0, a weak check"
        err = float(np.abs(got[name] - g).max()) / scale
        print(f"layout 1: d{name} max relative difference {err:.1e} (reference {dtype})")
        assert err <= tol, f"d{name} differs by {err:.2e} (reference {dtype})"


# ---------------------------------------------------------------------------------------
# Per-parameter gradients of PyTorch modules (strait.gradcheck)


@pytest.mark.parametrize("kind", ["LSTM", "GRU", "RNN"])
def test_torch_gradients_per_parameter(kind, tmp_path):
    """A 2-layer bidirectional batch-first recurrent classifier exported without constant
    folding (the ONNX weights are Slices/Concats of torch's parameters): the training step
    has one AccumulateGrad per torch parameter, and its gradients (summed over the time
    steps and both directions) equal torch's within gradcheck's 1e-4."""
    torch = pytest.importorskip("torch")
    import sys

    sys.path.insert(0, os.path.join(jobutil.ROOT, "python"))
    from strait import gradcheck

    class Classifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.rnn = _torch_module(kind, seed=3)
            self.head = torch.nn.Linear(14, 3)

        def forward(self, x):
            y = self.rnn(x)[0]
            return self.head(y[:, -1])

    torch.manual_seed(4)
    module = Classifier()
    gen = torch.Generator().manual_seed(5)
    case = gradcheck.runtime_batch(gradcheck.Case(
        kind, module, {"x": torch.randn(4, 6, 5, generator=gen)},
        torch.tensor([0, 2, 1, 2]), "x=4x6x5"))
    path = gradcheck.export_model(case, str(tmp_path / "m.onnx"))
    assert sum(n.op_type == kind for n in onnx.load(path).graph.node) == 2
    step = gradcheck.compile_training_step(path, case.input_shapes, jobutil.BUILD)
    assert gradcheck.check_structure(case, step) == []
    assert len(gradcheck.accumulated_variables(step)) == 2 + 2 * 2 * 4
    got = gradcheck.run_on_runtime(path, case, jobutil.BUILD)
    _, ref = gradcheck.torch_gradients(case)
    worst = max(gradcheck.max_relative_error(ref[k], got[k]) for k in ref)
    print(f"{kind}: {len(ref)} gradients, worst max relative error {worst:.1e}")
    assert gradcheck.compare(ref, got) == {}


# ---------------------------------------------------------------------------------------
# Training


def _classifier(seed=0):
    import torch

    class LSTMClassifier(torch.nn.Module):
        """LSTM over [batch, time, features], logits from the last step's hidden state;
        forward returns the cross-entropy against fixed labels (the loss straitc trains
        with --loss output)."""

        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(4, 8, batch_first=True)
            self.head = torch.nn.Linear(8, 3)

        def forward(self, x, labels):
            y, _ = self.lstm(x)
            return torch.nn.functional.cross_entropy(self.head(y[:, -1]), labels)

    torch.manual_seed(seed)
    return LSTMClassifier()


def _constant_inputs(model: onnx.ModelProto, feeds: dict) -> onnx.ModelProto:
    """Graph inputs replaced by Constant nodes (data, not trainable variables)."""
    nodes = [helper.make_node("Constant", [], [n], value=numpy_helper.from_array(v, n))
             for n, v in feeds.items()]
    m = onnx.ModelProto()
    m.CopyFrom(model)
    del m.graph.input[:]
    old = list(m.graph.node)
    del m.graph.node[:]
    m.graph.node.extend(nodes + old)
    return m


TRAINING = {"sgd": dict(opt="sgd", lr=0.5, momentum=0.9),
            "adamw": dict(opt="adamw", lr=0.02, wd=0.1)}


@pytest.mark.parametrize("name", sorted(TRAINING))
def test_training_matches_torch(name, tmp_path):
    torch = pytest.importorskip("torch")
    cfg = TRAINING[name]
    steps = 5
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(4, 6, 4, generator=gen)
    labels = torch.tensor([0, 2, 1, 2])
    module = _classifier()
    path = str(tmp_path / "cls.onnx")
    torch.onnx.export(module, (x, labels), path, input_names=["x", "labels"],
                      output_names=["loss"], opset_version=17, dynamo=False)
    model = _constant_inputs(onnx.load(path), {"x": x.numpy(), "labels": labels.numpy()})
    assert any(n.op_type == "LSTM" for n in model.graph.node)
    onnx.save(model, path)
    flags = ["--loss", "output", "--optimizer", cfg["opt"], "--lr", str(cfg["lr"]),
             "--weight-decay", str(cfg.get("wd", 0.0))]
    if cfg["opt"] == "sgd":
        flags += ["--momentum", str(cfg["momentum"])]
    job = str(tmp_path / "job")
    c = subprocess.run([STRAITC, path, *flags, "-o", job], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr[-3000:]
    r = subprocess.run([STRAIT_RUN, job, "--steps", str(steps), "--threads", "1"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stderr + r.stdout)[-3000:]
    got = [float(v) for v in re.findall(r"^step \d+/\d+ loss (\S+)", r.stdout, re.M)]
    assert len(got) == steps, r.stdout[-2000:]

    module = _classifier()
    if cfg["opt"] == "sgd":
        opt = torch.optim.SGD(module.parameters(), lr=cfg["lr"], momentum=cfg["momentum"])
    else:
        opt = torch.optim.AdamW(module.parameters(), lr=cfg["lr"], weight_decay=cfg["wd"])
    ref = []
    for _ in range(steps):
        opt.zero_grad()
        loss = module(x, labels)
        loss.backward()
        opt.step()
        ref.append(float(loss))
    assert ref[-1] < 0.9 * ref[0], f"torch's loss barely moves: {ref}"
    rel = np.abs(np.array(got) - np.array(ref)) / np.abs(np.array(ref))
    print(f"{name}: strait {got}, torch {ref}, max relative difference {rel.max():.1e}")
    assert rel.max() <= 1e-4, (got, ref, rel)
