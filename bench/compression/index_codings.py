#!/usr/bin/env python3
"""Top-k of real gradients: index codings and value types, bytes against f32.

Takes gpt2-tiny's gradient at a few points of training on the bundled text
(1 rank, plain SGD at a constant rate: the gradient of step s is
(params after s-1 steps - params after s steps) / lr, each run saved with
strait-run --save-params), flattens the parameters in name order (one
bucket, as the all-reduce of a small model), keeps the top-k magnitudes at
1%, 0.5% and 0.1%, and prints the bytes per kept index of the index codings
- u32, u16 gaps (the f32 top-k's; 0xFFFF escapes), bitmap, byte-aligned
varint (LEB128) gaps, Elias-gamma of gap + 1, Rice with the codec's fixed
parameter (b least with k 2^b >= n; bound k (b + 2) bits), Rice with the
best parameter for the data, and the entropy bound log2 C(n, k) / k - and
the ratio against f32 of f32 top-k (smallest of u32 / u16 gaps / bitmap, as
CODEC_TOPK chooses) and of the Rice-coded int8 / int4 values
(CODEC_TOPK_INT8 / INT4 payloads, header included).

Usage: .venv/bin/python bench/compression/index_codings.py [--steps 2,20,200]
"""
from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "tests"))
from jobutil import GPT2_TINY as MODEL, ROOT, STRAIT_RUN, STRAITC  # noqa: E402
DATA = os.path.join(ROOT, "out", "text", "train.bin")
LR = 0.1


def sh(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")


def params_after(tmp, job, steps):
    out = os.path.join(tmp, f"p{steps}")
    sh([STRAIT_RUN, job, "--steps", steps, "--lr", LR, "--data", DATA, "--data-format",
        "tokens-u16", "--seed", 3, "--threads", 1, "--save-params", out])
    names = sorted(f for f in os.listdir(out) if f.endswith(".npy"))
    return np.concatenate([np.load(os.path.join(out, f)).astype(np.float64).ravel() for f in names])


def gap_sizes(idx, n):
    """Bytes of each index coding of the sorted positions idx among n."""
    k = len(idx)
    gaps = np.diff(np.concatenate([[-1], idx])) - 1
    u16 = 2 * int(np.sum(gaps // 0xFFFF + 1))
    varint = int(np.sum(np.where(gaps < 1 << 7, 1, np.where(gaps < 1 << 14, 2,
                                                             np.where(gaps < 1 << 21, 3, 4)))))
    gamma_bits = int(np.sum(2 * np.floor(np.log2(gaps + 1)) + 1))
    b_fixed = 0
    while k << b_fixed < n:
        b_fixed += 1

    def rice(b):
        return int(np.sum((gaps >> b) + 1 + b))
    best = min(range(0, 24), key=rice)
    entropy = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)) / math.log(2)
    return {"u32": 4 * k, "u16 gaps": u16, "bitmap": (n + 7) // 8, "varint": varint,
            "Elias-gamma": (gamma_bits + 7) // 8,
            f"Rice fixed b": (k * (b_fixed + 2) + 7) // 8,
            "Rice best b": (rice(best) + 7) // 8, "entropy": entropy / 8}, b_fixed, best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", default="2,20,200")
    args = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="strait-index-codings-")
    try:
        report(tmp, [int(s) for s in args.steps.split(",")])
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def report(tmp, steps):
    job = os.path.join(tmp, "job")
    sh([STRAITC, MODEL, "--input-shape", "input_ids=8x64", "--loss", "cross-entropy",
        "--optimizer", "sgd", "-o", job])
    for step in steps:
        g = (params_after(tmp, job, step - 1) - params_after(tmp, job, step)) / LR
        n = g.size
        print(f"\n== gradient of step {step} (SGD at {LR}), n = {n}")
        print("| ratio | k | " + " | ".join(["u32", "u16 gaps", "bitmap", "varint", "Elias-gamma",
                                                "Rice fixed b", "Rice best b", "entropy"]) +
              " | f32 top-k | int8 values | int4 values |")
        print("|---" * 14 + "|")
        for ratio in (0.01, 0.005, 0.001):
            k = max(1, math.ceil(ratio * n))
            idx = np.sort(np.argsort(-np.abs(g), kind="stable")[:k])
            sizes, b, best = gap_sizes(idx, n)
            bits = {name: f"{8 * v / k:.2f}" for name, v in sizes.items()}
            f32 = 24 + 4 * k + min(sizes["u32"], sizes["u16 gaps"], sizes["bitmap"])
            q8 = 24 + 4 * math.ceil(k / 256) + k + sizes["Rice fixed b"]
            q4 = 24 + 4 * math.ceil(k / 256) + (k + 1) // 2 + sizes["Rice fixed b"]
            print(f"| {ratio:g} | {k} | " + " | ".join(bits.values()) +
                  f" | {4 * n / f32:.0f}x | {4 * n / q8:.0f}x | {4 * n / q4:.0f}x |"
                  f"  (b fixed {b}, best {best})")
    print("\nindex columns: bits per kept index; ratios: f32 bytes / payload bytes")


if __name__ == "__main__":
    main()
