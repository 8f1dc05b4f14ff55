#!/usr/bin/env python3
"""Top-k with quantized values on the gradient all-reduce: bytes and convergence.

Trains models/gpt2-tiny data-parallel over 2 local ranks (one stage, two
hosts of a 2-device cluster, so the flat all-reduce carries the codec) on
the bundled real text (out/text/train.bin), AdamW with warm-up + cosine
schedule as bench/compression/wan_bench.py, once per codec and data seed,
and prints per codec:

  * the gradient bytes a rank sends per step (the transport's "sent" count
    of the last step; with 2 ranks that is the all-reduce alone) and the
    ratio against the uncompressed run of the same seeds; and the mean over
    every step of the run and its ratio (they differ for compressed AdamW,
    whose warm-up steps reduce exact values);
  * the final training loss (mean of the last LAST steps, then over the
    seeds) against the uncompressed run.

No network emulation: the link's speed does not change the arithmetic.

A codec written CODEC+cadam=N (e.g. topk:0.01:int8+cadam=100) compiles with
`--compress CODEC --compressed-adam N` (AdamW only): N exact warm-up steps,
then AdamW's second moment frozen and the gradients compressed
(docs/training.md, "Compressed AdamW"); CODEC+cadam=N+warm=W (e.g.
topk:0.02:int4+cadam=500+warm=int4) adds `--compressed-adam-warmup W`: the
warm-up steps all-reduce the dense codec W with error feedback instead of f32.

Usage (from the repository root, after building build/):
  .venv/bin/python bench/compression/quantized_topk.py [--steps 300] [--seeds 1,2,3]
      [--codecs none,topk:0.01,topk:0.01:int8+cadam=100,...] [--optimizer adamw|sgd]
      [--sgd-lr 0.1]
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "python", "tests"))
from jobutil import GPT2_TINY as MODEL, ROOT, STRAIT_RUN, STRAITC  # noqa: E402
DATA = os.path.join(ROOT, "out", "text", "train.bin")
BATCH, SEQ, RANKS = 8, 64, 2
LR, WARMUP, MIN_LR = 0.003, 10, 0.0003
# --optimizer sgd: momentum 0.9, peak rate --sgd-lr, same warm-up, cosine decay to a tenth
LAST = 20

CLUSTER = """name: two-hosts
device_types:
  - {name: cpu, kind: cpu, peak_tflops: {fp32: 0.2}, mem_bandwidth_gbs: 20, memory_gib: 8}
devices:
  - {name: rank0, type: cpu, host: ns0, site: local}
  - {name: rank1, type: cpu, host: ns1, site: local}
links:
  intra_host: {bandwidth_gbps: 10, latency_us: 20}
  hosts:
    - {between: [ns0, ns1], bandwidth_mbps: 100, latency_ms: 0.1}
"""

CODECS = ["none", "int4", "topk:0.01", "topk:0.01:int8", "topk:0.01:int4", "topk:0.03:int8",
          "topk:0.003:int8", "topk:0.001:int8"]


def sh(cmd, timeout=1800):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def run(tmp, cluster, codec, steps, seed, optimizer, sgd_lr):
    job = os.path.join(tmp, f"job-{re.sub(r'[^A-Za-z0-9.]', '_', codec)}")
    shutil.rmtree(job, ignore_errors=True)
    opt = (["--optimizer", "adamw", "--lr", LR, "--min-lr", MIN_LR] if optimizer == "adamw" else
           ["--optimizer", "sgd", "--momentum", 0.9, "--lr", sgd_lr, "--min-lr", sgd_lr / 10])
    codec, _, cadam = codec.partition("+cadam=")
    cadam, _, warm = cadam.partition("+warm=")
    if cadam:
        opt += ["--compressed-adam", cadam]
    if warm:
        opt += ["--compressed-adam-warmup", warm]
    sh([STRAITC, MODEL, "--input-shape", f"input_ids={BATCH}x{SEQ}", "--loss", "cross-entropy",
        *opt, "--cluster", cluster, "--global-batch", BATCH * RANKS, "--num-stages", 1,
        "--compress", codec, "--warmup-steps", WARMUP, "--total-steps", steps, "-o", job])
    sh([STRAIT_RUN, job, "--data", DATA, "--data-format", "tokens-u16", "--steps", steps,
        "--seed", seed, "--timeout-ms", 120000])
    losses, sent, mean_sent = {}, [], []
    for r in range(RANKS):
        text = open(os.path.join(job, "logs", f"rank{r}.log")).read()
        for it, loss in re.findall(r"iteration (\d+)/\d+ time [0-9.]+ ms loss (\S+)", text):
            losses.setdefault(int(it), []).append(float(loss))
        per_step = [sum(int(x.split(":")[1]) for x in s.split(","))
                    for s in re.findall(r"iteration \d+/\d+ .* sent (\S+)", text)]
        sent.append(per_step[-1])
        mean_sent.append(statistics.mean(per_step))
    curve = [statistics.mean(losses[i]) for i in sorted(losses)]
    return statistics.mean(curve[-LAST:]), statistics.mean(sent), statistics.mean(mean_sent)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--codecs", default=",".join(CODECS), help="';'-separated is also accepted")
    ap.add_argument("--optimizer", choices=["adamw", "sgd"], default="adamw")
    ap.add_argument("--sgd-lr", type=float, default=0.1)
    args = ap.parse_args()
    if not os.path.exists(DATA):
        sh([sys.executable, os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py"),
            os.path.dirname(DATA)])
    seeds = [int(s) for s in args.seeds.split(",")]
    codecs = [c for c in re.split(r"[;,]", args.codecs) if c]
    if codecs[0] != "none":
        codecs.insert(0, "none")
    tmp = tempfile.mkdtemp(prefix="strait-qtopk-bench-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit, failed runs included
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    cluster = os.path.join(tmp, "cluster.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER)
    opt = args.optimizer if args.optimizer == "adamw" else f"sgd lr {args.sgd_lr} momentum 0.9"
    print(f"gpt2-tiny, {RANKS} data-parallel ranks, {opt}, {args.steps} steps, "
          f"batch {BATCH}x{SEQ} "
          f"per rank, seeds {seeds}; final loss = mean of the last {LAST} steps")
    print("| codec | bytes sent per rank and step (last step) | vs f32 | mean over the run | "
          "vs f32 | final loss | vs none |")
    print("|---|---|---|---|---|---|---|")
    base = None
    for codec in codecs:
        finals, sent, mean_sent = [], [], []
        for seed in seeds:
            f, s, m = run(tmp, cluster, codec, args.steps, seed, args.optimizer, args.sgd_lr)
            finals.append(f)
            sent.append(s)
            mean_sent.append(m)
        final, bytes_, mean_ = (statistics.mean(finals), statistics.mean(sent),
                                statistics.mean(mean_sent))
        if base is None:
            base = (final, bytes_, mean_)
        spread = f" (seeds {min(finals):.4f}-{max(finals):.4f})" if len(seeds) > 1 else ""
        print(f"| {codec} | {bytes_:.0f} | {base[1] / bytes_:.1f}x | {mean_:.0f} | "
              f"{base[2] / mean_:.1f}x | {final:.4f}{spread} | "
              f"{100 * (final / base[0] - 1):+.2f}% |", flush=True)


if __name__ == "__main__":
    main()
