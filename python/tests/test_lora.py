"""LoRA (straitc --lora, graph-add-lora) against an independent PyTorch LoRA.

* ``test_matches_torch_lora``: a small PyTorch model whose linear layers export in the three
  layouts graph-add-lora rewrites (MatMul(x, Transpose(W)), Gemm(x, W, transB=1),
  MatMul(x, W [in, out])) plus an embedding and an LM head (not adapted), exported with
  torch.onnx; Strait trains it 3 AdamW steps with --lora 4 --lora-alpha 8. The reference is
  the same module with hand-written adapters y + (alpha/R) (x A) B in PyTorch, A from the seed
  contract (python/strait/lora.py initial_a), B zeros, base frozen, torch.optim.AdamW: every
  step's loss and the adapters after 3 steps agree to 1e-5, the base weights are bit-unchanged,
  and the merged model (lora.merge_into_onnx) in onnxruntime gives Strait's own forward after
  the 3 updates (the 4th step's logits) and the PyTorch model's.
* ``test_two_replicas_train_only_adapters``: gpt2-tiny with --lora 8 as 2 data-parallel
  replicas: the one gradient all-reduce carries R(in+out) per adapted weight (16384 floats
  instead of the full model's), the loss falls, both replicas end bit-identical and the base
  weights equal the ONNX initializers.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

from jobutil import (GPT2_TINY, PROTO_DIR, ROOT, STRAITC, STRAIT_RUN, cpu_cluster,
                     needs_gpt2_tiny, run, saved_params, write_tokens)

sys.path.insert(0, os.path.join(ROOT, "python"))
from strait import lora  # noqa: E402

torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402

pytestmark = needs_gpt2_tiny()

B, T, V, D, H = 2, 8, 32, 16, 24
RANK, ALPHA, SEED, LR, STEPS = 4, 8.0, 3, 0.01, 3


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(V, D)
        self.q = torch.nn.Linear(D, H)             # [B, T, D]: MatMul(x, Transpose(W)) + b
        self.fc = torch.nn.Linear(H, D)            # [B*T, H]: Gemm(x, W, b, transB=1)
        self.mm = torch.nn.Parameter(torch.randn(D, D) * 0.2)  # MatMul(x, W [in, out])
        self.head = torch.nn.Linear(D, V, bias=False)          # the output head: no adapter
        self.adapters = None

    def lin(self, name, x, y):
        """y + (alpha/R) (x A) B when adapters are on."""
        if self.adapters is None:
            return y
        a, b = self.adapters[name + ".lora_A"], self.adapters[name + ".lora_B"]
        return y + ((x @ a) * (ALPHA / RANK)) @ b

    def forward(self, ids):
        x = self.emb(ids)
        h = torch.relu(self.lin("q.weight", x, self.q(x)))
        h2 = h.reshape(B * T, H)
        h = torch.tanh(self.lin("fc.weight", h2, self.fc(h2))).reshape(B, T, D)
        h = self.lin("mm", h, torch.matmul(h, self.mm)) + x
        return self.head(h)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("lora")
    torch.manual_seed(0)
    net = Net()
    path = str(tmp / "net.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(net, (torch.zeros(B, T, dtype=torch.long),), path,
                          input_names=["input_ids"], output_names=["logits"], dynamo=False,
                          do_constant_folding=False, opset_version=17)
    # T + 1 tokens: every row of every batch is the one window (the loader's offsets are 0).
    tokens = np.random.default_rng(1).integers(0, V, T + 1).astype(np.uint16)
    data = tmp / "tokens.bin"
    data.write_bytes(tokens.tobytes())
    job = tmp / "job"
    run([STRAITC, path, "--input-shape", f"input_ids={B}x{T}", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--lora", str(RANK), "--lora-alpha", str(ALPHA),
         "--seed", str(SEED), "--step-outputs", "all", "-o", str(job)])
    common = ["--lr", str(LR), "--data", str(data), "--threads", "1", "--timeout-ms", "60000"]
    p = run([STRAIT_RUN, str(job), "--steps", str(STEPS), *common,
             "--save-params", str(tmp / "params")])
    losses = [float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", p.stdout, re.M)]
    # The 4th step's forward runs on the parameters after 3 updates.
    run([STRAIT_RUN, str(job), "--steps", str(STEPS + 1), *common, "--quiet",
         "--dump-outputs", str(tmp / "dump")])
    logits = np.load(tmp / "dump" / "logits.rank0.npy")
    return dict(net=net, onnx=path, tokens=tokens, losses=losses,
                params=saved_params(tmp / "params"), logits=logits, tmp=tmp)


def torch_lora(trained):
    """The PyTorch LoRA twin trained STEPS steps: (losses, adapters, net)."""
    net = Net()
    net.load_state_dict(trained["net"].state_dict(), strict=False)
    for p in net.parameters():
        p.requires_grad_(False)
    shapes = {"q.weight": (D, H), "fc.weight": (H, D), "mm": (D, D)}
    net.adapters = {}
    for w, (fan_in, fan_out) in shapes.items():
        net.adapters[w + ".lora_A"] = torch.tensor(lora.initial_a(w, fan_in, RANK, SEED),
                                                   requires_grad=True)
        net.adapters[w + ".lora_B"] = torch.zeros(RANK, fan_out, requires_grad=True)
    opt = torch.optim.AdamW(list(net.adapters.values()), lr=LR, betas=(0.9, 0.999), eps=1e-8,
                            weight_decay=0.0)
    tok = torch.tensor(trained["tokens"].astype(np.int64))
    ids, labels = tok[:T].repeat(B, 1), tok[1:].repeat(B, 1)
    losses = []
    for _ in range(STEPS):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(ids).reshape(-1, V), labels.reshape(-1))
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses, {k: v.detach().numpy() for k, v in net.adapters.items()}, net


def test_matches_torch_lora(trained):
    params = trained["params"]
    assert lora.adapted_weights(params) == ["fc.weight", "mm", "q.weight"]
    ref_losses, ref_adapters, ref_net = torch_lora(trained)
    assert len(trained["losses"]) == STEPS
    np.testing.assert_allclose(trained["losses"], ref_losses, rtol=1e-5)
    for name, ref in ref_adapters.items():
        got = params[name]
        assert got.shape == ref.shape, name
        err = np.abs(got - ref).max() / max(np.abs(ref).max(), 1e-6)
        assert err < 1e-5, f"{name}: {err:.2e}"
    # B moved off zero and A off its seeded start: the adapters trained.
    assert np.abs(params["q.weight.lora_B"]).max() > 1e-3
    assert not np.array_equal(params["q.weight.lora_A"], lora.initial_a("q.weight", D, RANK, SEED))
    # Frozen: every base weight is the exported one, bit for bit.
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(trained["onnx"]).graph.initializer}
    for name, value in inits.items():
        assert np.array_equal(params[name], value), name

    # The merged model: onnxruntime's forward equals Strait's after the 3 updates and torch's.
    # From the saved folder alone: its lora.json (straitc's, copied by --save-params) gives
    # alpha = 8 (the default would be R = 4, and the logits below would differ).
    merged = str(trained["tmp"] / "merged.onnx")
    assert lora.saved_alpha(str(trained["tmp"] / "params")) == ALPHA
    lora.merge_into_onnx(trained["onnx"], trained["tmp"] / "params", merged)
    with pytest.raises(ValueError, match="alpha"):
        lora.merge_into_onnx(trained["onnx"], trained["tmp"] / "params", merged, alpha=RANK)
    m = onnx.load(merged)
    assert not any(i.name.endswith((".lora_A", ".lora_B")) for i in m.graph.initializer)
    ids = np.tile(trained["tokens"][:T].astype(np.int64), (B, 1))
    sess = ort.InferenceSession(merged, providers=["CPUExecutionProvider"])
    got = sess.run(["logits"], {"input_ids": ids})[0]
    strait_logits = trained["logits"].reshape(got.shape)
    scale = np.abs(strait_logits).max()
    assert np.abs(got - strait_logits).max() <= 1e-5 * scale
    with torch.no_grad():
        ref = ref_net(torch.tensor(ids)).numpy()
    assert np.abs(got - ref).max() <= 1e-5 * scale
    # Without the merge the logits differ (the adapters changed the model).
    base = ort.InferenceSession(trained["onnx"], providers=["CPUExecutionProvider"])
    assert np.abs(base.run(["logits"], {"input_ids": ids})[0] - got).max() > 1e-4 * scale


def all_reduce_floats(job, rank=0):
    """Elements of each gradient all-reduce of rank `rank`'s program."""
    with open(job / f"rank{rank}.program.pb", "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I", PROTO_DIR,
                            "strait_program.proto"], stdin=f, capture_output=True, timeout=60)
    text = p.stdout.decode()
    sizes = {int(i): [int(d) for d in re.findall(r"shape: (\d+)", body)]
             for i, body in re.findall(r"^values \{\n  id: (\d+)\n((?:  .*\n)*?)\}", text, re.M)}
    ids = [int(i) for block in re.findall(r"all_reduce \{\n((?:    .*\n)*?)  \}", text)
           for i in re.findall(r"value_ids: (\d+)", block)]
    return [int(np.prod(sizes[i])) for i in ids]


def test_two_replicas_train_only_adapters(tmp_path):
    cluster = tmp_path / "two.yaml"
    cluster.write_text(cpu_cluster("two-cpu", [("r0", "h0", "s"), ("r1", "h0", "s")],
                                   "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n"))
    job = tmp_path / "job"
    run([STRAITC, GPT2_TINY, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
         "--optimizer", "adamw", "--lora", "8", "--cluster", str(cluster), "--global-batch", "8",
         "--num-stages", "1", "-o", str(job)])
    # gpt2-tiny: 2 blocks of c_attn 64x192, attn.c_proj 64x64, c_fc 64x256, mlp.c_proj 256x64.
    expected = 2 * 8 * ((64 + 192) + (64 + 64) + (64 + 256) + (256 + 64))
    assert sum(all_reduce_floats(job)) == expected
    data = write_tokens(tmp_path / "tokens.bin", seed=5, n=1 << 14)
    p = run([STRAIT_RUN, str(job), "--steps", "6", "--lr", "0.01", "--data", str(data),
             "--threads", "1", "--timeout-ms", "60000", "--save-params", str(tmp_path / "p")])
    losses = [float(x) for x in re.findall(r"^step \d+/\d+ loss (\S+)", p.stdout, re.M)]
    assert len(losses) == 6 and losses[-1] < losses[0], losses
    files = os.listdir(tmp_path / "p")
    per_rank = [{f.rsplit(".rank", 1)[0]: np.load(tmp_path / "p" / f)
                 for f in files if f.endswith(f".rank{r}.npy")} for r in (0, 1)]
    assert per_rank[0].keys() == per_rank[1].keys() and len(per_rank[0]) > 16
    for name, value in per_rank[0].items():
        assert np.array_equal(value, per_rank[1][name]), name
    inits = {i.name: numpy_helper.to_array(i) for i in onnx.load(GPT2_TINY).graph.initializer}
    adapters = [n for n in per_rank[0] if n.endswith((".lora_A", ".lora_B"))]
    assert len(adapters) == 16
    for name, value in per_rank[0].items():
        if name in inits:
            assert np.array_equal(value, inits[name]), name
