"""A PyTorch dynamo export trains what PyTorch trains.

The model is the conv net of test/Target/ONNX/Inputs/torch-export/export.py, exported here with
the exporter's defaults (optimize=True). Its float initializers are of every kind: five
parameters, BatchNorm's running statistics (buffers the forward updates), a float buffer the
forward only reads (`scale`) and a constant the exporter's optimizer folded (`view`, no mark).
straitc compiles a training step, strait-run runs one step on a batch of equal rows (a one-row
file) and saves every variable; torch runs the same step (train mode, batch statistics) with its
optimizer. Checked:
- the set of variables the step changed is torch's named_parameters plus the running statistics
  (which torch's forward updates too), so the buffer and the constant are not trained;
- every updated parameter equals torch's after optimizer.step() (SGD, AdamW) within 1e-5
  (measured: at most 1.5e-8 for SGD, 1.2e-7 for AdamW, on steps of 8e-4 to 5e-2), the running
  statistics torch's within 1e-6;
- `scale` and `view` are bit for bit what the file holds.
"""
from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

from jobutil import ROOT, STRAIT_RUN, STRAITC, run, saved_params

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxscript")
from onnx import numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not all(os.path.exists(p) for p in (STRAITC, STRAIT_RUN)),
                                reason="needs straitc and strait-run")

B, LR = 4, 0.05


def _export_script():
    path = os.path.join(ROOT, "test", "Target", "ONNX", "Inputs", "torch-export", "export.py")
    spec = importlib.util.spec_from_file_location("torch_export_inputs", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    d = tmp_path_factory.mktemp("torch-trainables")
    net = _export_script().conv_net()
    model = d / "net.onnx"
    torch.onnx.export(net.eval(), (torch.randn(B, 3, 6, 6),), str(model), dynamo=True,
                      input_names=["x"], output_names=["logits"], external_data=False,
                      verbose=False)
    rng = np.random.default_rng(0)
    image = rng.normal(size=(1, 3, 6, 6)).astype(np.float32)
    label = np.array([2], dtype=np.int64)
    np.save(d / "x.npy", image)
    np.save(d / "y.npy", label)
    initial = {t.name: numpy_helper.to_array(t) for t in onnx.load(str(model)).graph.initializer}
    return d, model, net, image, label, initial


def torch_step(net, image, label, optimizer):
    net = net.train()
    params = dict(net.named_parameters())
    if optimizer == "sgd":
        opt = torch.optim.SGD(params.values(), lr=LR)
    else:
        opt = torch.optim.AdamW(params.values(), lr=LR, weight_decay=0.01)
    x = torch.from_numpy(image).expand(B, -1, -1, -1).contiguous()
    y = torch.from_numpy(label).expand(B).contiguous()
    opt.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    opt.step()
    return {n: t.detach().numpy().copy() for n, t in net.state_dict().items()}


@pytest.mark.parametrize("optimizer", ["sgd", "adamw"])
def test_one_step_trains_torch_parameters(exported, optimizer):
    d, model, _, image, label, initial = exported
    net = _export_script().conv_net()  # a fresh copy: the fixture's is the exported one
    job = d / f"job-{optimizer}"
    flags = ["--momentum", "0"] if optimizer == "sgd" else ["--weight-decay", "0.01"]
    p = run([STRAITC, str(model), "--input-shape", f"x={B}x3x6x6", "--loss", "cross-entropy",
             "--optimizer", optimizer, *flags, "-o", str(job)])
    assert "2 float variables are not parameters of the PyTorch export" in p.stderr, p.stderr
    out = d / f"params-{optimizer}"
    run([STRAIT_RUN, str(job), "--steps", "1", "--lr", str(LR), "--threads", "1",
         "--data", str(d / "x.npy"), "--data-format", "npy", "--labels", str(d / "y.npy"),
         "--save-params", str(out)], timeout=120)
    saved = {n: v for n, v in saved_params(out).items() if n in initial}
    assert set(saved) >= {"scale", "view", *dict(net.named_parameters())}, sorted(saved)

    changed = {n for n, v in saved.items() if not np.array_equal(v, initial[n])}
    parameters = {n for n, _ in net.named_parameters()}
    assert changed == parameters | {"bn.running_mean", "bn.running_var"}
    for name in ("scale", "view"):
        assert np.array_equal(saved[name], initial[name]), name

    reference = torch_step(net, image, label, optimizer)
    for name in parameters:
        moved = np.abs(reference[name] - initial[name]).max()
        assert moved > 1e-4, f"{name}: torch's step hardly moves it ({moved:.1e})"
        err = np.abs(saved[name] - reference[name]).max()
        assert err < 1e-5, f"{name}: |strait - torch| = {err:.2e} (the step moved it {moved:.1e})"
    for name in ("bn.running_mean", "bn.running_var"):  # updated by the forward, as torch's
        err = np.abs(saved[name] - reference[name]).max()
        assert err < 1e-6, f"{name}: |strait - torch| = {err:.2e}"
