#!/usr/bin/env python3
"""PyTorch eager baseline for scripts/gpu-check.sh: one GPT-2 small training
step (embeddings, 12 pre-LN blocks with tanh-GELU MLP and causal softmax
attention written as matmul + mask + softmax, tied LM head, mean cross-entropy,
AdamW with f32 master weights) under bf16 autocast, on cuda:0. With
--attention sdpa the attention is F.scaled_dot_product_attention(is_causal=True)
instead (PyTorch's fused flash/memory-efficient kernels: the strongest eager
baseline; the model as exported is the explicit form). Prints ms/step,
tokens/s and MFU with the same FLOP formula as strait-cuda-step-bench:
  FLOPs/step = T * (6 N + 12 L d S)   (T tokens, N parameters, S sequence).
Needs no download (random weights)."""
import argparse
import math
import sys
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--peak-tflops", type=float, default=989.0)
    ap.add_argument("--attention", choices=["explicit", "sdpa"], default="explicit")
    a = ap.parse_args()
    import torch
    import torch.nn as nn
    import torch.nn.functional as F

    if not torch.cuda.is_available():
        print("skipped: torch sees no GPU")
        return 77
    V, L, D, H, P = 50257, 12, 768, 12, 1024

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1, self.ln2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.fc, self.out = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x, mask):
            B, S, _ = x.shape
            q, k, v = self.qkv(self.ln1(x)).split(D, dim=2)
            q, k, v = (t.view(B, S, H, D // H).transpose(1, 2) for t in (q, k, v))
            if a.attention == "sdpa":
                y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(D // H))
                att = att.masked_fill(mask[:, :, :S, :S] == 0, float("-inf")).softmax(-1)
                y = att @ v
            x = x + self.proj(y.transpose(1, 2).reshape(B, S, D))
            return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))

    class GPT2(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte, self.wpe = nn.Embedding(V, D), nn.Embedding(P, D)
            self.blocks = nn.ModuleList(Block() for _ in range(L))
            self.lnf = nn.LayerNorm(D)
            self.register_buffer("mask", torch.tril(torch.ones(P, P)).view(1, 1, P, P))

        def forward(self, idx, labels):
            pos = torch.arange(idx.shape[1], device=idx.device)
            x = self.wte(idx) + self.wpe(pos)
            for b in self.blocks:
                x = b(x, self.mask)
            logits = self.lnf(x) @ self.wte.weight.t()
            return F.cross_entropy(logits.float().view(-1, V), labels.view(-1))

    dev = torch.device("cuda:0")
    model = GPT2().to(dev)
    n = sum(p.numel() for p in model.parameters())
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.0, foreach=True)
    g = torch.Generator(device=dev).manual_seed(0)
    T = a.batch * a.seq
    flops = T * (6 * n + 12 * L * D * a.seq)
    times = []
    for i in range(a.warmup + a.steps):
        idx = torch.randint(0, V, (a.batch, a.seq), device=dev, generator=g)
        lab = torch.randint(0, V, (a.batch, a.seq), device=dev, generator=g)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = model(idx, lab)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        if i >= a.warmup:
            times.append(time.perf_counter() - t0)
    ms = 1e3 * sum(times) / len(times)
    tag = "torch-eager" if a.attention == "explicit" else "torch-eager-sdpa"
    print(f"{tag}: {n/1e6:.1f} M parameters, loss {loss.item():.3f}")
    print(f"{tag}: {ms:.2f} ms/step, {T / (ms / 1e3):.0f} tokens/s, "
          f"MFU {100 * flops / (ms / 1e3) / (a.peak_tflops * 1e12):.1f} % "
          f"(FLOPs/step {flops:.3e})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
