#!/usr/bin/env python3
"""Data-parallel CPU training step with and without the runtime's bucket views and Gemm fold.

    .venv/bin/python bench/runtime/dp_step.py [--build build] [--rounds 2] [--steps 4]

GPT-2 small (models/gpt2, `--shape-only`: seeded random weights; input_ids 1x64, 4 micro-batches,
AdamW) on 2 data-parallel CPU ranks of this machine (a cluster file of two CPUs on two sites joined
by 1 Gbit/s; loopback Gloo in fact), compiled uncompressed and with `--compress int8`. Each job runs
`--steps` steps with the memory plan's Split/Concat views and the CPU backend's Gemm-into-
AccumulateGrad fold on (the default) and off (`STRAIT_MEMORY_VIEWS=0 STRAIT_CPU_FOLD_GEMM=0`),
alternating, `--rounds` times each; a run's figure is the median of rank 0's iteration times without
the first, each side keeps its best run. Prints both, their ratio, the executor's arena and
persistent buffers (parameters, optimizer state, inputs, outputs; gradient accumulators are in the
arena) and whether
the losses agree (they are bit-identical: M = 4 is a power of two). Error feedback's one-pass encode
has no switch: strait-codec-bench times it against its steps taken apart.
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = """name: two-site-cpus
device_types:
  - {name: cpu, kind: cpu, peak_tflops: {fp32: 0.05}, mem_bandwidth_gbs: 10, memory_gib: 8}
devices:
  - {name: e0, type: cpu, host: he0, site: east}
  - {name: w0, type: cpu, host: hw0, site: west}
links:
  sites:
    - {between: [east, west], bandwidth_gbps: 1, latency_ms: 1}
"""
OFF = {"STRAIT_MEMORY_VIEWS": "0", "STRAIT_CPU_FOLD_GEMM": "0"}


def run(strait_run, job, steps, env):
    subprocess.run([strait_run, job, "--steps", str(steps), "--quiet"], check=True,
                   capture_output=True, env={**os.environ, **env}, timeout=900)
    log = open(os.path.join(job, "logs", "rank0.log")).read()
    times = [float(t) for t in re.findall(r"iteration \d+/\d+ time ([0-9.]+) ms", log)]
    losses = re.findall(r"iteration \d+/\d+ time [0-9.]+ ms loss (\S+)", log)
    m = re.search(r"memory arena (\d+) bytes, persistent (\d+) bytes", log)
    return statistics.median(times[1:]) / 1e3, losses, (int(m.group(1)), int(m.group(2)))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    straitc = os.path.join(a.build, "bin", "straitc")
    strait_run = os.path.join(a.build, "runtime", "tools", "strait-run")
    work = tempfile.mkdtemp(prefix="strait-dp-step-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    cluster = os.path.join(work, "two-site-cpus.yaml")
    open(cluster, "w").write(CLUSTER)
    print("| job | views + fold off: step (s), arena + persistent (MB) | on (default) | speed-up "
          "| losses equal |")
    print("|---|---|---|---|---|")
    for codec in ["none", "int8"]:
        job = os.path.join(work, codec)
        subprocess.run([straitc, os.path.join(ROOT, "models", "gpt2", "gpt2.onnx"), "--shape-only",
                        "--input-shape", "input_ids=1x64", "--loss", "cross-entropy", "--optimizer",
                        "adamw", "--cluster", cluster, "--global-batch", "8", "--num-stages", "1",
                        "--compress", codec, "-o", job], check=True, capture_output=True)
        best = {}
        for _ in range(a.rounds):
            for side, env in (("off", OFF), ("on", {})):
                t, losses, arena = run(strait_run, job, a.steps, env)
                if side not in best or t < best[side][0]:
                    best[side] = (t, losses, arena)
        (t0, l0, m0), (t1, l1, m1) = best["off"], best["on"]
        mb = lambda m: f"{m[0] / 1e6:.0f} + {m[1] / 1e6:.0f}"
        print(f"| GPT-2 small, 2 ranks, {codec} | {t0:.2f}, {mb(m0)} | {t1:.2f}, {mb(m1)} "
              f"| {t0 / t1:.2f}x | {l0 == l1} |", flush=True)


if __name__ == "__main__":
    main()
