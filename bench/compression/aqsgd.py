#!/usr/bin/env python3
"""AQ-SGD on a pipeline cut against plain quantization: final loss and bytes over the cut.

Trains models/gpt2-tiny in 2 pipeline stages on 2 CPU ranks (two sites of a
2-device cluster; loopback, no shaping: the bytes are counted at the
transport, "sent PEER:BYTES" in each rank's progress line) for many epochs over
a SMALL dataset of real text (--samples sequences of --seq + 1 byte-level
tokens from runtime/scripts/make-text-tokens.py, as npy inputs and labels), so
that every sample repeats: AQ-SGD sends the delta against the last
reconstruction of the same sample. Same batches (per data order) and schedule
(AdamW, peak 1e-3, warm-up + cosine) for every codec: none, int8, int4, int2
(plain quantization of the activations AND their gradients) and aqsgd:2/3/4
(AQ-SGD on the activations, int8 on their gradients, or GRAD as
aqsgd:B:GRAD / --grad).

Prints per codec the final loss (mean of the last --tail steps, for each of
--seeds data orders, and their mean), its difference to the uncompressed
run's, the bytes each direction of the cut carried per
step (median over the steps after the first epoch; each direction includes
the tied wte weight's per-step partial gradient, 256x64 f32, which the
codec's gradient part compresses with error feedback: int8 under aqsgd:B,
GRAD under aqsgd:B:GRAD), and the ratio to the uncompressed run's. A run
whose tied copies (a parameter several ranks save) differ at the end fails.

Usage: .venv/bin/python bench/compression/aqsgd.py [--steps 200] [--samples 128] [--seeds 1,2,3]
       [--codecs none,int2,aqsgd:2,aqsgd:3:int4]   (~10 min for the default 8 codecs x 3 orders)
       [--stages 3 --model M.onnx]   (S stages on S ranks, one site each: the model needs S
                                      blocks; bytes are then summed over all cuts)
"""
from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "tests"))
from jobutil import GPT2_TINY as MODEL, ROOT, STRAIT_RUN, STRAITC, cpu_cluster  # noqa: E402

DATA = os.path.join(ROOT, "out", "text", "train.bin")


def cluster(stages):
    """`stages` CPU devices, one per host and site, every pair 100 Mbps / 1 ms."""
    names = "abcdefgh"[:stages]
    pairs = "".join(f"    - {{between: [h{x}, h{y}], bandwidth_mbps: 100, latency_ms: 1}}\n"
                    for i, x in enumerate(names) for y in names[i + 1:])
    return cpu_cluster("sites", [(x, f"h{x}", f"site{x}") for x in names],
                       "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n  hosts:\n" + pairs)


def sh(cmd, timeout=3600):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def run(tmp, codec, args, inputs, labels, seed):
    job = os.path.join(tmp, "job-" + codec.replace(":", "_"))
    sh([STRAITC, args.model, "--input-shape", f"input_ids={args.batch}x{args.seq}", "--loss",
        "cross-entropy", "--optimizer", "adamw", "--cluster", os.path.join(tmp, "cluster.yaml"),
        "--num-stages", args.stages, "--micro-batches", args.micro_batches, "--compress", codec,
        "--lr", args.lr, "--warmup-steps", 10, "--total-steps", args.steps, "--min-lr",
        args.lr / 10, "-o", job])
    sh([STRAIT_RUN, job, "--steps", args.steps, "--data", inputs, "--labels", labels,
        "--input-name", "input_ids", "--seed", seed, "--threads", 1, "--timeout-ms", 600000,
        "--save-params", os.path.join(job, "params")])
    # A parameter saved by several ranks is a tied variable's copies: they must be equal.
    copies = {}
    for f in sorted(os.listdir(os.path.join(job, "params"))):
        if f.endswith(".npy"):
            copies.setdefault(f.rsplit(".rank", 1)[0], []).append(
                np.load(os.path.join(job, "params", f)))
    for name, arrays in copies.items():
        if any(not np.array_equal(arrays[0], a) for a in arrays[1:]):
            sys.exit(f"{codec}: the copies of {name} differ after {args.steps} steps")
    # Per step: bytes sent to a later stage (fwd) and to an earlier one (bwd),
    # summed over the ranks (one per stage); the loss is the last stage's.
    losses, fwd, bwd = [], None, None
    for r in range(args.stages):
        text = open(os.path.join(job, "logs", f"rank{r}.log")).read()
        lines = re.findall(r"iteration \d+/\d+ .*", text)
        fwd = fwd or [0] * len(lines)
        bwd = bwd or [0] * len(lines)
        for i, line in enumerate(lines):
            m = re.search(r" sent (\S+)", line)
            peers = dict(x.split(":") for x in m.group(1).split(",")) if m and m.group(1) != "-" else {}
            for peer, n in peers.items():
                (fwd if int(peer) > r else bwd)[i] += int(n)
            if r == args.stages - 1:
                losses.append(float(re.search(r" loss (\S+)", line).group(1)))
    sent = {0: fwd, 1: bwd}
    shutil.rmtree(job, ignore_errors=True)
    return losses, sent


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--samples", type=int, default=128)
    ap.add_argument("--seq", type=int, default=64)
    ap.add_argument("--batch", type=int, default=8, help="sequences per micro-batch")
    ap.add_argument("--micro-batches", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--grad", default="int8", help="AQ-SGD's activation-gradient codec")
    ap.add_argument("--codecs",
                    default="none,int8,int4,int2,aqsgd:4,aqsgd:3,aqsgd:2,aqsgd:2:int4")
    ap.add_argument("--seeds", default="1,2,3", help="data orders (strait-run --seed)")
    ap.add_argument("--tail", type=int, default=50, help="final loss: mean of the last N steps")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--model", default=MODEL)
    args = ap.parse_args()
    if not os.path.exists(DATA):
        sh([sys.executable, os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py"),
            os.path.dirname(DATA)])
    tmp = tempfile.mkdtemp(prefix="strait-aqsgd-bench-")
    try:
        with open(os.path.join(tmp, "cluster.yaml"), "w") as f:
            f.write(cluster(args.stages))
        n = args.samples * (args.seq + 1)
        seqs = np.fromfile(DATA, dtype=np.uint16, count=n).astype(np.int64)
        seqs = seqs.reshape(args.samples, args.seq + 1)
        inputs, labels = os.path.join(tmp, "inputs.npy"), os.path.join(tmp, "labels.npy")
        np.save(inputs, seqs[:, :-1])
        np.save(labels, seqs[:, 1:])
        per_step = args.batch * args.micro_batches
        epoch = max(1, args.samples // per_step)
        print(f"{os.path.basename(args.model)}, {args.stages} stages on {args.stages} CPU ranks, {args.samples} sequences of {args.seq} tokens, "
              f"{per_step} per step ({args.micro_batches} micro-batches), {args.steps} steps = "
              f"{args.steps / epoch:.0f} epochs; AQ-SGD gradients: {args.grad}")
        seeds = [int(x) for x in args.seeds.split(",")]
        results = {}
        for codec in args.codecs.split(","):
            spec = codec if codec.count(":") != 1 or not codec.startswith("aqsgd") \
                else f"{codec}:{args.grad}"
            finals, fwd, bwd = [], None, None
            for seed in seeds:
                losses, sent = run(tmp, spec, args, inputs, labels, seed)
                finals.append(statistics.mean(losses[-args.tail:]))
                if fwd is None:
                    fwd = statistics.median(sent[0][epoch:])
                    bwd = statistics.median(sent[1][epoch:])
            results[spec] = (finals, fwd, bwd)
            print(f"  {spec}: final loss {' '.join(f'{x:.4f}' for x in finals)}, bytes per step "
                  f"forward {fwd:.0f}, backward {bwd:.0f}", flush=True)
        base = results["none"]
        base_total = base[1] + base[2]
        print()
        print(f"| codec | final loss (mean of {len(seeds)} data orders) | vs none (per order: min, max) "
              "| fwd bytes/step | bwd bytes/step | cuts total | ratio |")
        print("|---|---|---|---|---|---|---|")
        for spec, (finals, fwd, bwd) in results.items():
            rel = [100 * (f / b - 1) for f, b in zip(finals, base[0])]
            total = fwd + bwd
            print(f"| {spec} | {statistics.mean(finals):.4f} | "
                  f"{100 * (statistics.mean(finals) / statistics.mean(base[0]) - 1):+.2f}% "
                  f"({min(rel):+.2f}%, {max(rel):+.2f}%) | {fwd:.0f} | {bwd:.0f} | {total:.0f} | "
                  f"{base_total / total:.2f}x |")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
