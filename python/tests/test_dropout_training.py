"""Seeded dropout in training steps (docs/training.md, "Dropout").

A two-block MLP with Dropout(0.1) is exported from PyTorch for training
(TrainingMode.TRAINING: its Dropout nodes carry ratio and training_mode = true). straitc
compiles each Dropout of the training step to a DropoutTraining kernel whose mask is a
splitmix64 hash of (job seed, key, iteration, micro-batch, replica, element); the gradient
is the same kernel on dY. Checked here:
- one SGD step equals PyTorch's with the masks recomputed independently in numpy from that
  hash (forward and backward through the same mask), and differs from the step without them;
- two runs of the same job are bit-identical, and so is a job compiled with --recompute
  full (the recomputed forward regenerates the mask); another --seed gives other losses;
- the training loss falls;
- a job resumed from its step-3 checkpoint ends bit-identical to the uninterrupted one;
- two data-parallel replicas: one step equals PyTorch's with each replica's own masks;
- evaluation (--eval-data) runs dropout as the identity: its loss equals onnxruntime's on
  an eval-mode export with the saved parameters.
"""
from __future__ import annotations

import re
import subprocess

import numpy as np
import pytest

from jobutil import STRAIT_RUN, STRAITC, cpu_cluster, kernel_ops, run, saved_params

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402

B, D, H, C, P = 16, 16, 32, 4, 0.1
M64 = (1 << 64) - 1
GOLDEN = 0x9E3779B97F4A7C15


class Block(torch.nn.Module):
    def __init__(self, i, o):
        super().__init__()
        self.fc = torch.nn.Linear(i, o)
        self.drop = torch.nn.Dropout(P)

    def forward(self, x, masks=None, key=0):
        h = torch.relu(self.fc(x))
        return self.drop(h) if masks is None else h * masks[key]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = torch.nn.ModuleList([Block(D, H), Block(H, H)])
        self.head = torch.nn.Linear(H, C)

    def forward(self, x, masks=None):
        for i, layer in enumerate(self.layers):
            x = layer(x, masks, i)
        return self.head(x)


def splitmix64(z):
    z = (z + GOLDEN) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


def splitmix64_np(z):
    with np.errstate(over="ignore"):
        z = z + np.uint64(GOLDEN)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def mask(shape, seed, key, iteration, micro_batch, replica=0, p=P):
    """runtime/lib/cpu/DropoutMask.h, reimplemented: the kept elements scaled by 1/(1-p)."""
    h = splitmix64(seed & M64)
    for part in (key, iteration, micro_batch, replica):
        h = splitmix64(h ^ (part & M64))
    n = int(np.prod(shape))
    with np.errstate(over="ignore"):
        bits = splitmix64_np(np.uint64(h) + np.arange(n, dtype=np.uint64) * np.uint64(GOLDEN))
    threshold = int(float(np.float32(p)) * 4294967296.0)
    keep = (bits >> np.uint64(32)) >= np.uint64(threshold)
    scale = np.float32(1.0) / (np.float32(1.0) - np.float32(p))
    return torch.from_numpy((keep.astype(np.float32) * scale).reshape(shape))


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    d = tmp_path_factory.mktemp("dropout")
    torch.manual_seed(0)
    net = Net().train()
    model = d / "train.onnx"
    torch.onnx.export(net, (torch.zeros(B, D),), str(model), input_names=["x"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    drops = [n for n in onnx.load(str(model)).graph.node if n.op_type == "Dropout"]
    assert len(drops) == 2 and all(len(n.input) == 3 for n in drops)
    net.eval()
    torch.onnx.export(net, (torch.zeros(B, D),), str(d / "eval.onnx"), input_names=["x"],
                      output_names=["logits"], opset_version=17, dynamo=False,
                      do_constant_folding=False)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(512, D)).astype(np.float32)
    np.save(d / "x.npy", x)
    np.save(d / "y.npy", (x @ rng.normal(size=(D, C))).argmax(1).astype(np.int64))
    one = rng.normal(size=(1, D)).astype(np.float32)
    np.save(d / "val.npy", np.repeat(one, 4, axis=0))
    np.save(d / "val-labels.npy", np.full(4, 2, dtype=np.int64))
    net.train()
    return d, net, model


def compile_job(d, model, out, *extra):
    p = run([STRAITC, str(model), "--input-shape", f"x={B}x{D}", "--loss", "cross-entropy",
             "--optimizer", "sgd", "-o", str(out), *map(str, extra)])
    assert "run as the identity" not in p.stderr, p.stderr
    return out


def train(d, job, out, steps, *extra, ran=None):
    p = subprocess.run([STRAIT_RUN, str(job), "--steps", str(steps), "--lr", "0.1", "--threads",
                        "1", "--data", str(d / "x.npy"), "--labels", str(d / "y.npy"),
                        "--timeout-ms", "60000", "--save-params", str(out), *map(str, extra)],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    losses = [float(v) for v in re.findall(rf"^step \d+/{steps} loss (\S+)", p.stdout, re.M)]
    assert len(losses) == (steps if ran is None else ran), p.stdout[-2000:]
    return losses, saved_params(out), p.stdout


def test_one_step_equals_torch_with_the_hashed_mask(setup, tmp_path):
    d, net, model = setup
    job = compile_job(d, model, tmp_path / "job", "--seed", 5)
    subprocess.run([STRAIT_RUN, str(job), "--steps", "1", "--lr", "0.1", "--threads", "1",
                    "--data", str(d / "x.npy"), "--labels", str(d / "y.npy"), "--dump-outputs",
                    str(tmp_path / "out"), "--save-params", str(tmp_path / "params")],
                   check=True, capture_output=True, timeout=120)
    x = torch.from_numpy(np.load(tmp_path / "out" / "x.rank0.npy"))
    y = torch.from_numpy(np.load(tmp_path / "out" / "labels.rank0.npy")).long()
    ref = Net()
    ref.load_state_dict(net.state_dict())
    # seed 5, keys 0 and 1 (the Dropouts in program order), iteration 1, no micro-batch
    # split (-1), replica 0.
    masks = [mask((B, H), 5, k, 1, -1) for k in range(2)]
    torch.nn.functional.cross_entropy(ref(x, masks), y).backward()
    got = saved_params(tmp_path / "params")
    with torch.no_grad():
        for name, q in ref.named_parameters():
            expect = (q - 0.1 * q.grad).numpy()
            np.testing.assert_allclose(got[name], expect, rtol=1e-4, atol=1e-6, err_msg=name)
    # Without the masks (dropout as the identity) the step is another one: the check sees them.
    plain = Net()
    plain.load_state_dict(net.state_dict())
    torch.nn.functional.cross_entropy(plain(x, [torch.ones(B, H)] * 2), y).backward()
    w = plain.layers[0].fc.weight
    assert not np.allclose(got["layers.0.fc.weight"], (w - 0.1 * w.grad).detach().numpy(),
                           rtol=1e-4, atol=1e-6)


def test_deterministic_recompute_exact_seeded_and_learning(setup, tmp_path):
    d, _, model = setup
    job = compile_job(d, model, tmp_path / "job")
    first, params, _ = train(d, job, tmp_path / "p1", 40)
    again, params2, _ = train(d, job, tmp_path / "p2", 40)
    assert first == again
    for name in params:
        np.testing.assert_array_equal(params[name], params2[name], err_msg=name)
    assert np.mean(first[-5:]) < 0.8 * np.mean(first[:5]), first

    rjob = tmp_path / "rjob"
    p = run([STRAITC, str(model), "--input-shape", f"x={B}x{D}", "--loss", "cross-entropy",
             "--optimizer", "sgd", "--recompute", "full", "-o", str(rjob)])
    assert "not recomputed" not in p.stderr, p.stderr
    # The backward recomputes block 1's forward, its Dropout included (same key, same mask).
    assert kernel_ops(rjob).count("DropoutTraining") > kernel_ops(job).count("DropoutTraining")
    recomputed, rparams, _ = train(d, rjob, tmp_path / "p3", 40)
    assert recomputed == first
    for name in params:
        np.testing.assert_array_equal(rparams[name], params[name], err_msg=name)

    other, _, _ = train(d, compile_job(d, model, tmp_path / "sjob", "--seed", 9),
                        tmp_path / "p4", 40)
    assert other != first


def test_eval_runs_dropout_as_the_identity(setup, tmp_path):
    d, _, model = setup
    job = compile_job(d, model, tmp_path / "job")
    _, params, out = train(d, job, tmp_path / "p", 3, "--eval-data", d / "val.npy",
                           "--eval-labels", d / "val-labels.npy", "--eval-batches", "2")
    m = re.search(r"^eval after step 3/3: loss (\S+) \((\d+) samples\)", out, re.M)
    assert m, out[-2000:]
    ev = onnx.load(str(d / "eval.onnx"))
    assert not any(n.op_type == "Dropout" for n in ev.graph.node)
    for init in ev.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(params[init.name].astype(np.float32), init.name))
    sess = ort.InferenceSession(ev.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"x": np.load(d / "val.npy")[:1].repeat(B, 0)})[0][0]
    logits = logits.astype(np.float64) - logits.max()
    reference = float(np.log(np.exp(logits).sum()) - logits[2])
    assert float(m.group(1)) == pytest.approx(reference, rel=1e-4)


def test_resume_draws_the_same_masks(setup, tmp_path):
    d, _, model = setup
    job = compile_job(d, model, tmp_path / "job")
    full, p_full, _ = train(d, job, tmp_path / "full", 6)
    train(d, job, tmp_path / "first", 3, "--checkpoint", tmp_path / "ck")
    resumed, p_res, _ = train(d, job, tmp_path / "res", 6, "--resume", tmp_path / "ck" / "step-3",
                              ran=3)
    assert resumed == full[3:]
    for name in p_full:
        np.testing.assert_array_equal(p_res[name], p_full[name], err_msg=name)


def test_replicas_draw_their_own_masks(setup, tmp_path):
    """Two data-parallel CPU replicas: one SGD step equals PyTorch's mean of the replicas'
    gradients, replica r's rows through the masks of replica r."""
    d, net, model = setup
    (tmp_path / "cluster.yaml").write_text(cpu_cluster(
        "dropout-2", [("d0", "a", "east"), ("d1", "a", "east")],
        "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"))
    job = compile_job(d, model, tmp_path / "job", "--cluster", tmp_path / "cluster.yaml",
                      "--global-batch", 2 * B, "--num-stages", 1, "--seed", 3)
    subprocess.run([STRAIT_RUN, str(job), "--steps", "1", "--lr", "0.1", "--threads", "1",
                    "--timeout-ms", "60000", "--data", str(d / "x.npy"), "--labels",
                    str(d / "y.npy"), "--dump-outputs", str(tmp_path / "out"), "--save-params",
                    str(tmp_path / "params")], check=True, capture_output=True, timeout=120)
    ref = Net()
    ref.load_state_dict(net.state_dict())
    loss = 0
    for r in range(2):
        x = torch.from_numpy(np.load(tmp_path / "out" / f"x.rank{r}.npy"))
        y = torch.from_numpy(np.load(tmp_path / "out" / f"labels.rank{r}.npy")).long()
        masks = [mask((B, H), 3, k, 1, -1, replica=r) for k in range(2)]
        loss = loss + torch.nn.functional.cross_entropy(ref(x, masks), y) / 2
    loss.backward()
    got = saved_params(tmp_path / "params")
    with torch.no_grad():
        for name, q in ref.named_parameters():
            np.testing.assert_allclose(got[name], (q - 0.1 * q.grad).numpy(), rtol=1e-4,
                                       atol=1e-6, err_msg=name)
