#!/usr/bin/env python3
"""Compression over an emulated WAN: convergence and speed (issue #6).

Trains models/gpt2-tiny on real English text (runtime/scripts/make-text-tokens.py)
on 4 local ranks whose two hosts (ns0: ranks 0-1, ns1: ranks 2-3, as in
examples/clusters/local-4cpu.yaml) are joined by a tbf-shaped link
(runtime/scripts/wan-cluster.py; root only), once per codec, and reports:

  * convergence: the final loss of each compressed run against the
    uncompressed run after the same number of steps (same data, same seed),
    with both curves drawn to a PNG;
  * speed: tokens/s with compression over tokens/s without, at several link
    rates, next to the planner's predicted ratio (straitc --emit=plan
    --compress ..., the simulator's iteration time with and without).

Two layouts: "pipeline" (2 stages x 2 replicas, --num-stages 2: the stage cut
crosses the slow link, both directions) and "data-parallel" (1 stage x 4
replicas: the hierarchical gradient all-reduce crosses it).

Usage (from the repository root, after building build/):
  sudo .venv/bin/python bench/compression/wan_bench.py [--quick] [--png docs/img/compression-convergence.png]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = os.path.join(BUILD, "runtime", "tools", "strait-run")
WAN = os.path.join(ROOT, "runtime", "scripts", "wan-cluster.py")
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
DATA = os.path.join(ROOT, "out", "text", "train.bin")
BATCH, SEQ = 8, 64
# Every job runs BATCH sequences per replica and micro-batch: 16 sequences an
# iteration on 2 replicas a stage (pipeline), 32 on 4 (data-parallel).
GLOBAL = {"pipeline": 16, "data-parallel": 32}
# AdamW with a warm-up + cosine schedule (the program's lr_schedule): at a
# constant rate two runs that differ only by rounding part ways after tens
# of steps (docs/training.md), which would hide the codecs' effect.
LR, WARMUP, MIN_LR = 0.003, 10, 0.0003
LAST = 10  # final loss = mean over the last LAST steps

CLUSTER = """name: wan-{mbps}mbps
device_types:
  - name: cpu
    kind: cpu
    peak_tflops: {{fp32: 0.2}}
    mem_bandwidth_gbs: 20
    memory_gib: 8
devices:
  - {{name: rank0, type: cpu, host: ns0, site: local}}
  - {{name: rank1, type: cpu, host: ns0, site: local}}
  - {{name: rank2, type: cpu, host: ns1, site: local}}
  - {{name: rank3, type: cpu, host: ns1, site: local}}
links:
  intra_host: {{bandwidth_gbps: 10, latency_us: 20}}
  hosts:
    - {{between: [ns0, ns1], bandwidth_mbps: {mbps}, latency_ms: 0.1, shared: true}}
"""

LAYOUTS = {"pipeline": 2, "data-parallel": 1}


def sh(cmd, timeout=1800):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def cluster_file(tmp, mbps):
    path = os.path.join(tmp, f"wan-{mbps}.yaml")
    with open(path, "w") as f:
        f.write(CLUSTER.format(mbps=mbps))
    return path


def compile_job(tmp, cluster, layout, codec, steps):
    job = os.path.join(tmp, f"job-{layout}-{codec.replace(':', '_')}-{os.path.basename(cluster)[:-5]}")
    shutil.rmtree(job, ignore_errors=True)
    common = [MODEL, "--input-shape", f"input_ids={BATCH}x{SEQ}", "--loss", "cross-entropy",
              "--optimizer", "adamw", "--cluster", cluster, "--global-batch", GLOBAL[layout],
              "--num-stages", LAYOUTS[layout], "--compress", codec,
              "--lr", LR, "--warmup-steps", WARMUP, "--total-steps", steps, "--min-lr", MIN_LR]
    plan = sh([STRAITC, *common, "-o", job])
    m = re.search(r"predicted iteration \(simulated\): ([0-9.e+-]+) s without compression, "
                  r"([0-9.e+-]+) s with", plan)
    predicted = float(m.group(1)) / float(m.group(2)) if m else None
    return job, predicted


def run_job(job, cluster, steps, layout):
    sh([sys.executable, WAN, "--cluster", cluster, "--strait-run", STRAIT_RUN, "--", job,
        "--data", DATA, "--data-format", "tokens-u16", "--steps", steps, "--timeout-ms", 120000])
    manifest = json.load(open(os.path.join(job, "plan.json")))
    last = len(manifest["stages"]) - 1
    losses, times = {}, {}
    for r in range(4):
        text = open(os.path.join(job, "logs", f"rank{r}.log")).read()
        for it, ms, loss in re.findall(r"iteration (\d+)/\d+ time ([0-9.]+) ms(?: loss (\S+))?", text):
            times.setdefault(int(it), []).append(float(ms))
            if loss:
                losses.setdefault(int(it), []).append(float(loss))
    # The step's loss: the mean over the last stage's replicas (the launcher's).
    curve = [statistics.mean(losses[i]) for i in sorted(losses)]
    # A step takes as long as its slowest rank; skip the first (warm-up).
    step_ms = statistics.median(max(times[i]) for i in sorted(times)[1:])
    return curve, GLOBAL[layout] * SEQ / (step_ms / 1e3), last


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="fewer steps and rates (a smoke run)")
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "img", "compression-convergence.png"))
    ap.add_argument("--conv-mbps", type=int, default=25)
    ap.add_argument("--conv-steps", type=int, default=150)
    ap.add_argument("--speed-only", action="store_true", help="skip the convergence runs")
    args = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("wan_bench: needs root (network namespaces, tc)")
    if not os.path.exists(DATA):
        sh([sys.executable, os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py"),
            os.path.dirname(DATA)])
    conv_steps = 12 if args.quick else args.conv_steps
    speed_rates = [25] if args.quick else [10, 25, 100]
    speed_steps = 6 if args.quick else 12
    codecs = {"pipeline": ["none", "fp16", "int8", "int4", "auto"],
              "data-parallel": ["none", "int8", "topk:0.05", "auto"]}
    tmp = tempfile.mkdtemp(prefix="strait-wan-bench-")

    curves = {}
    if not args.speed_only:
        print(f"== convergence: {conv_steps} steps over a {args.conv_mbps} Mbit/s link")
    cluster = cluster_file(tmp, args.conv_mbps)
    for layout, names in codecs.items() if not args.speed_only else ():
        for codec in names:
            job, _ = compile_job(tmp, cluster, layout, codec, conv_steps)
            curve, tps, _ = run_job(job, cluster, conv_steps, layout)
            curves[(layout, codec)] = curve
            final = statistics.mean(curve[-LAST:])
            base = statistics.mean(curves[(layout, "none")][-LAST:])
            print(f"{layout:14} {codec:10} final loss {final:.4f} (mean of the last {LAST} steps; "
                  f"uncompressed {base:.4f}, {100 * (final / base - 1):+.2f}%) tokens/s {tps:.0f}",
                  flush=True)

    print(f"\n== speed: tokens/s with / without compression ({speed_steps} steps)")
    print("| layout | link Mbit/s | codec | tokens/s | measured speed-up | predicted speed-up |")
    print("|---|---|---|---|---|---|")
    for mbps in speed_rates:
        cluster = cluster_file(tmp, mbps)
        for layout, names in codecs.items():
            base = None
            for codec in names:
                job, predicted = compile_job(tmp, cluster, layout, codec, speed_steps)
                _, tps, _ = run_job(job, cluster, speed_steps, layout)
                base = base or tps
                pred = f"{predicted:.2f}x" if predicted else "n/a"
                print(f"| {layout} | {mbps} | {codec} | {tps:.0f} | {tps / base:.2f}x | {pred} |",
                      flush=True)

    if not curves:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plot")
        return
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, layout in zip(axes, codecs):
        for codec in codecs[layout]:
            c = curves[(layout, codec)]
            ax.plot(range(1, len(c) + 1), c, label=codec, lw=1.2)
        ax.set_title(f"gpt2-tiny, {layout}, {args.conv_mbps} Mbit/s link")
        ax.set_xlabel("step")
        ax.legend()
    axes[0].set_ylabel("training loss (real text)")
    fig.tight_layout()
    os.makedirs(os.path.dirname(args.png), exist_ok=True)
    fig.savefig(args.png, dpi=110)
    print(f"wrote {args.png}")
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
