"""100 AdamW steps of the bundled tiny GPT-2 on real text: Strait vs PyTorch.

strait-run trains models/gpt2-tiny (compiled by straitc into a full training step: loss,
backward, AdamW, assignment) on the byte-level token file that
runtime/scripts/make-text-tokens.py builds from the licence texts Debian ships; PyTorch
trains the same GPT-2 (transformers' GPT2LMHeadModel written out in plain torch, checked
equal to it where transformers is installed) from the same initial weights (the ONNX
file's initializers) on the same batches: the windows strait-run samples
are recomputed here from its seeded sampler (runtime/lib/data/DataLoader.cpp,
sampleOffsets). The per-step losses must agree within TOLERANCE (docs/training.md states
the measured deviation).
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import jobutil  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = jobutil.STRAIT_RUN  # the build's launcher, else build-rt's
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
torch = pytest.importorskip("torch")
onnx = pytest.importorskip("onnx")

pytestmark = pytest.mark.skipif(not os.path.exists(STRAITC) or not os.path.isfile(STRAIT_RUN),
                                reason="straitc or strait-run not built")

STEPS, BATCH, SEQ = 100, 4, 64
# The program's schedule (straitc --warmup-steps/--total-steps/--min-lr), evaluated by
# strait-run each step; torch gets the same lr through LambdaLR.
LR, WEIGHT_DECAY, WARMUP, TOTAL, MIN_LR = 1e-3, 0.01, 10, 100, 1e-4
SEED = 1234  # strait-run's default --seed
# Max relative difference of a step's loss. The runtime prints 6 significant digits (up to
# 1.7e-6 relative at loss ~3) and float32 rounding differs between the two kernel libraries;
# measured 8.2e-6 over the 100 steps (docs/training.md). At a constant lr of 3e-3 instead,
# both runs spike on the same batches and the trajectories part after ~30 steps (chaotic
# amplification of rounding by Adam's normalized steps), which is why the test uses the
# warm-up + cosine schedule GPT training uses anyway.
TOLERANCE = 1e-4
MASK64 = (1 << 64) - 1


def _splitmix(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
    return x ^ (x >> 31)


def sample_offsets(seed: int, stream: int, iteration: int, count: int, limit: int) -> list[int]:
    """strait-run's window offsets (DataLoader.cpp sampleOffsets), iteration 0-based."""
    base = _splitmix(_splitmix(_splitmix(seed) ^ stream) ^ iteration)
    return [_splitmix((base + i) & MASK64) % (limit + 1) for i in range(count)]


def test_sample_offsets_known_values():
    # Fixed points of the sampler, so that a change of the C++ side is noticed here.
    assert _splitmix(0) == 0xE220A8397B1DCDAF
    offs = sample_offsets(SEED, 0, 0, 3, 1000)
    assert len(offs) == 3 and all(0 <= o <= 1000 for o in offs)
    assert offs != sample_offsets(SEED, 0, 1, 3, 1000)


def lr_at(step: int) -> float:
    """Warm-up then cosine (docs/program-format.md, Learning-rate schedule)."""
    if step <= WARMUP:
        return LR * step / WARMUP
    if step >= TOTAL:
        return MIN_LR
    p = (step - WARMUP) / (TOTAL - WARMUP)
    return MIN_LR + (LR - MIN_LR) * (1 + np.cos(np.pi * p)) / 2


def _tokens(tmp) -> np.ndarray:
    out = os.path.join(tmp, "text")
    subprocess.run([sys.executable, os.path.join(ROOT, "runtime", "scripts",
                                                 "make-text-tokens.py"), out,
                    "--max-bytes", "400000", "--no-docstrings"], check=True,
                   capture_output=True)
    path = os.path.join(out, "train.bin")
    tokens = np.fromfile(path, dtype=np.uint16)
    if tokens.size < 10 * SEQ:
        pytest.skip("no licence texts to build the token file from")
    return path, tokens


def strait_losses(tokens_path: str, tmp) -> list[float]:
    job = os.path.join(tmp, "job")
    c = subprocess.run([STRAITC, MODEL, "--input-shape", f"input_ids={BATCH}x{SEQ}",
                        "--loss", "cross-entropy", "--optimizer", "adamw", "--lr", str(LR),
                        "--weight-decay", str(WEIGHT_DECAY), "--warmup-steps", str(WARMUP),
                        "--total-steps", str(TOTAL), "--min-lr", str(MIN_LR), "-o", job],
                       capture_output=True, text=True)
    assert c.returncode == 0, c.stderr[-2000:]
    r = subprocess.run([STRAIT_RUN, job, "--steps", str(STEPS), "--threads", "1", "--data",
                        tokens_path, "--data-format", "tokens-u16", "--seed", str(SEED)],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stderr + r.stdout)[-2000:]
    losses = [float(v) for v in re.findall(r"^step \d+/\d+ loss (\S+)", r.stdout, re.M)]
    assert len(losses) == STEPS, r.stdout[-2000:]
    return losses


LAYERS, WIDTH, HEADS, VOCAB = 2, 64, 4, 256  # models/gpt2-tiny (export.py build_gpt2)


class Gpt2(torch.nn.Module):
    """transformers' GPT2LMHeadModel in plain torch (so CI needs no transformers): pre-LN
    blocks, Conv1D projections (x @ W + b, W as [in, out]), tanh GELU, causal attention
    scaled by 1/sqrt(head size), LayerNorm eps 1e-5, head tied to the token embedding.
    Parameters carry the HF names of the ONNX initializers."""

    def __init__(self, inits: dict):
        super().__init__()
        self.p = torch.nn.ParameterDict({
            n.replace(".", "__"): torch.nn.Parameter(torch.from_numpy(a.copy()))
            for n, a in inits.items()
            if n.startswith(("transformer.", "lm_head."))})

    def w(self, name):
        return self.p[name.replace(".", "__")]

    def ln(self, x, name):
        return torch.nn.functional.layer_norm(x, (WIDTH,), self.w(name + ".weight"),
                                              self.w(name + ".bias"), 1e-5)

    def conv1d(self, x, name):
        return x @ self.w(name + ".weight") + self.w(name + ".bias")

    def attention(self, q, k, v, mask):
        att = (q @ k.transpose(-1, -2)) / math.sqrt(q.shape[-1])
        att = torch.softmax(att.masked_fill(~mask, torch.finfo(att.dtype).min), -1)
        return att @ v

    def forward(self, ids):
        b, t = ids.shape
        wte = self.w("lm_head.weight")  # tied: the ONNX file names it lm_head.weight
        x = wte[ids] + self.w("transformer.wpe.weight")[:t]
        hd = WIDTH // HEADS
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        for i in range(LAYERS):
            h = f"transformer.h.{i}"
            q, k, v = self.conv1d(self.ln(x, h + ".ln_1"), h + ".attn.c_attn").split(WIDTH, 2)
            q, k, v = (z.reshape(b, t, HEADS, hd).transpose(1, 2) for z in (q, k, v))
            y = self.attention(q, k, v, mask).transpose(1, 2).reshape(b, t, WIDTH)
            x = x + self.conv1d(y, h + ".attn.c_proj")
            m = torch.nn.functional.gelu(self.conv1d(self.ln(x, h + ".ln_2"), h + ".mlp.c_fc"),
                                         approximate="tanh")
            x = x + self.conv1d(m, h + ".mlp.c_proj")
        return self.ln(x, "transformer.ln_f") @ wte.t()


def _initializers() -> dict:
    from onnx import numpy_helper

    return {i.name: numpy_helper.to_array(i) for i in onnx.load(MODEL).graph.initializer}


def test_plain_gpt2_equals_transformers():
    """The reference model is transformers' GPT-2 (checked where transformers is
    installed; models/ is exported with it)."""
    transformers = pytest.importorskip("transformers")
    inits = _initializers()
    cfg = transformers.GPT2Config(n_layer=LAYERS, n_embd=WIDTH, n_head=HEADS,
                                  vocab_size=VOCAB, n_positions=128)
    cfg._attn_implementation = "eager"
    hf = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for name, tensor in hf.state_dict().items():
            if name in inits:
                tensor.copy_(torch.from_numpy(inits[name].copy()))
    ids = torch.randint(0, VOCAB, (2, 16), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        ref = hf(input_ids=ids, use_cache=False, return_dict=False)[0]
        ours = Gpt2(inits)(ids)
    assert float((ours - ref).abs().max()) < 1e-5


def torch_losses(tokens: np.ndarray) -> list[float]:
    model = Gpt2(_initializers())
    # 28 tensors: wpe, 12 per block, ln_f, the tied embedding/head.
    assert len(list(model.parameters())) == 28
    opt = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    # LambdaLR's epoch e is the (e+1)-th step: lr(step) / LR of docs/program-format.md.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: lr_at(e + 1) / LR)
    t = torch.from_numpy(tokens.astype(np.int64))
    losses = []
    for it in range(STEPS):
        offs = sample_offsets(SEED, 0, it, BATCH, tokens.size - SEQ - 1)
        x = torch.stack([t[o:o + SEQ] for o in offs])
        y = torch.stack([t[o + 1:o + SEQ + 1] for o in offs])
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, VOCAB), y.reshape(-1))
        loss.backward()
        opt.step()
        sched.step()
        losses.append(float(loss.detach()))
    return losses


def test_gpt2_tiny_text_follows_torch(tmp_path):
    path, tokens = _tokens(str(tmp_path))
    ours = np.array(strait_losses(path, str(tmp_path)))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # tiny model: more threads only wait on each other
    try:
        ref = np.array(torch_losses(tokens))
    finally:
        torch.set_num_threads(threads)
    rel = np.abs(ours - ref) / np.abs(ref)
    print(f"max relative loss difference {rel.max():.2e} at step {rel.argmax() + 1}; "
          f"loss {ref[0]:.4f} -> {ref[-1]:.4f}")
    assert ref[-1] < 0.75 * ref[0], "the model does not learn: a weak check"
    assert rel.max() <= TOLERANCE, (rel.max(), rel.argmax() + 1)
