"""strait-run --eval-data on a model with BatchNorm: evaluation normalizes with the running
statistics (PyTorch's eval()), not with the evaluation batch's.

A small CNN with BatchNorm is exported from PyTorch in eval mode (its BatchNormalization node
reads the running mean and variance); straitc trains it in training form (batch statistics,
running averages updated by the step). After 3 SGD steps:
- the eval loss equals onnxruntime's cross-entropy of the exported model with the saved
  parameters (running statistics included) in inference form, and differs from what the same
  parameters give with batch statistics by far more than the tolerance;
- the job ends with the same parameters, running statistics included, bit for bit, as the job
  that does not evaluate.
The eval file holds one image repeated, so every sampled row is that image (the loader samples
rows at random).
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from jobutil import STRAIT_RUN, STRAITC, run, saved_params
from test_dropout_training import mask

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402

B = 16


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(1, 4, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(4)
        self.fc = torch.nn.Linear(4 * 64, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("eval-bn")
    torch.manual_seed(0)
    net = Net()
    with torch.no_grad():  # distinct values: the exporter merges equal initializers
        net.bn.weight.uniform_(0.5, 1.5)
        net.bn.bias.uniform_(-0.5, 0.5)
        net.bn.running_mean.uniform_(-0.3, 0.3)
        net.bn.running_var.uniform_(0.5, 2.0)
    net.eval()
    model = d / "bn.onnx"
    torch.onnx.export(net, (torch.zeros(B, 1, 8, 8),), str(model), input_names=["images"],
                      output_names=["logits"], opset_version=17, do_constant_folding=False,
                      dynamo=False)
    assert [n.op_type for n in onnx.load(str(model)).graph.node].count("BatchNormalization") == 1
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 10, 256)
    images = (rng.normal(size=(256, 1, 8, 8)) + 0.3 * labels[:, None, None, None])
    np.save(d / "train.npy", images.astype(np.float32))
    np.save(d / "train-labels.npy", labels.astype(np.int64))
    one = rng.normal(size=(1, 1, 8, 8)).astype(np.float32)
    np.save(d / "val.npy", np.repeat(one, 4, axis=0))
    np.save(d / "val-labels.npy", np.full(4, 3, dtype=np.int64))
    run([STRAITC, str(model), "--input-shape", f"images={B}x1x8x8", "--loss", "cross-entropy",
         "--optimizer", "sgd", "--momentum", "0.9", "-o", str(d / "job")])
    return d, model, one


def train(d, out, *extra):
    p = subprocess.run([STRAIT_RUN, str(d / "job"), "--steps", "3", "--lr", "0.05", "--threads",
                        "1", "--data", str(d / "train.npy"), "--labels",
                        str(d / "train-labels.npy"), "--save-params", str(out), *map(str, extra)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return p.stdout


def cross_entropy(model, params, image, label, training_form):
    m = onnx.load(str(model))
    for init in m.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(params[init.name].astype(np.float32), init.name))
    if training_form:  # batch statistics, as the training step computes them
        for n in m.graph.node:
            if n.op_type == "BatchNormalization":
                for a in n.attribute:
                    if a.name == "training_mode":
                        a.i = 1
                n.output.extend(["running_mean_out", "running_var_out"])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"images": np.repeat(image, B, axis=0)})[0][0]
    logits = logits.astype(np.float64) - logits.max()
    return float(np.log(np.exp(logits).sum()) - logits[label])


def test_eval_uses_running_statistics(setup, tmp_path):
    d, model, one = setup
    out = train(d, tmp_path / "eval", "--eval-data", d / "val.npy", "--eval-labels",
                d / "val-labels.npy", "--eval-batches", "2")
    m = re.search(r"^eval after step 3/3: loss (\S+) \((\d+) samples\)", out, re.M)
    assert m, out[-2000:]
    assert int(m.group(2)) == 2 * B
    params = saved_params(tmp_path / "eval")
    assert {"bn.running_mean", "bn.running_var"} <= set(params)
    reference = cross_entropy(model, params, one, 3, training_form=False)
    batch_stats = cross_entropy(model, params, one, 3, training_form=True)
    got = float(m.group(1))
    assert got == pytest.approx(reference, rel=1e-4)
    assert abs(batch_stats - reference) > 100 * 1e-4 * reference, (batch_stats, reference)

    # Evaluating changed nothing: the running statistics and weights equal a plain run's.
    plain_out = train(d, tmp_path / "plain")
    plain = saved_params(tmp_path / "plain")
    assert re.findall(r"^step \d/3 loss (\S+)", out, re.M) == \
        re.findall(r"^step \d/3 loss (\S+)", plain_out, re.M)
    assert sorted(plain) == sorted(params)
    for name in plain:
        np.testing.assert_array_equal(plain[name], params[name], err_msg=name)


class MaskMul(torch.nn.Module):
    def __init__(self, keep):
        super().__init__()
        self.keep = keep

    def forward(self, x):
        return x * self.keep


class DropNet(Net):
    def __init__(self, p):
        super().__init__()
        self.drop = torch.nn.Dropout(p)

    def forward(self, x):
        return self.fc(self.drop(torch.relu(self.bn(self.conv(x))).flatten(1)))


def test_training_mode_export_trains_as_torch(setup, tmp_path):
    """PyTorch's export for training (TrainingMode.TRAINING: BatchNormalization with
    training_mode = 1, Dropout with training_mode = true) imports: one SGD step gives torch's
    parameters and running statistics (torch's dropout applies the mask Strait's seeded
    DropoutTraining drew, recomputed by test_dropout_training.mask)."""
    d, _, _ = setup
    torch.manual_seed(1)
    net = DropNet(0.1).train()
    model = tmp_path / "train-mode.onnx"
    torch.onnx.export(net, (torch.zeros(B, 1, 8, 8),), str(model), input_names=["images"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      training=torch.onnx.TrainingMode.TRAINING)
    nodes = onnx.load(str(model)).graph.node
    bn = next(n for n in nodes if n.op_type == "BatchNormalization")
    assert any(a.name == "training_mode" and a.i == 1 for a in bn.attribute)
    assert any(n.op_type == "Dropout" for n in nodes)
    p = run([STRAITC, str(model), "--input-shape", f"images={B}x1x8x8", "--loss",
             "cross-entropy", "--optimizer", "sgd", "-o", str(tmp_path / "job")])
    assert "as the identity" not in p.stderr, p.stderr
    subprocess.run([STRAIT_RUN, str(tmp_path / "job"), "--steps", "1", "--lr", "0.1",
                    "--threads", "1", "--data", str(d / "train.npy"), "--labels",
                    str(d / "train-labels.npy"), "--dump-outputs", str(tmp_path / "out"),
                    "--save-params", str(tmp_path / "params")], check=True,
                   capture_output=True, timeout=120)
    images = torch.from_numpy(np.load(tmp_path / "out" / "images.rank0.npy"))
    labels = torch.from_numpy(np.load(tmp_path / "out" / "labels.rank0.npy")).long()
    # straitc's default seed 0, key 0 (the only Dropout), iteration 1, no micro-batch split.
    keep = mask((B, 4 * 64), 0, 0, 1, -1)
    net.drop = MaskMul(keep)
    before = {k: v.clone() for k, v in net.state_dict().items()}
    loss = torch.nn.functional.cross_entropy(net(images), labels)
    loss.backward()
    with torch.no_grad():
        for q in net.parameters():
            q -= 0.1 * q.grad
    got = saved_params(tmp_path / "params")
    expect = {k: v.numpy() for k, v in net.state_dict().items() if k != "bn.num_batches_tracked"}
    assert sorted(got) == sorted(expect)
    for name, value in expect.items():
        np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-6, err_msg=name)
        # every tensor moved: parameters by the step, running statistics by the batch
        assert not np.array_equal(value, before[name].numpy()), name
