#!/usr/bin/env python3
"""The cost of strait-run --trace: step time with every step after the first traced vs untraced.

    python3 bench/runtime/trace_overhead.py [--shape 8x64] [--steps 30] [--rounds 4]
        [--stages 2] [--threads 1]

Compiles the README's job (gpt2-tiny, cross-entropy, AdamW, examples/clusters/local-4cpu.yaml,
global batch 16, --num-stages 2: 4 local ranks) and runs it --rounds times without and with
`--trace FILE --trace-steps 2:N`, alternately (damps the load of other processes), on the same
token file. Step time: the median of the launcher's "time X ms" over steps 6..N (5 warm-up
steps); each variant keeps its best median. Prints both, traced over untraced, the trace's spans
per step and its size. Off, every hook is one relaxed atomic load and a branch, so the untraced
run is the baseline of a build with tracing.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WARMUP = 5


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build")))
    ap.add_argument("--shape", default="8x64")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    straitc = os.path.join(args.build, "bin", "straitc")
    strait_run = os.path.join(args.build, "runtime", "tools", "strait-run")
    work = tempfile.mkdtemp(prefix="strait-trace-bench-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    job = os.path.join(work, "job")
    run([straitc, os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx"), "--input-shape",
         f"input_ids={args.shape}", "--loss", "cross-entropy", "--optimizer", "adamw", "--cluster",
         os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml"), "--global-batch", "16",
         "--num-stages", str(args.stages), "-o", job])
    tokens = os.path.join(work, "tokens.bin")
    state, ids = 7, []
    for _ in range(1 << 16):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(state % 256)
    with open(tokens, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    trace = os.path.join(work, "trace.json")
    base = [strait_run, job, "--steps", str(args.steps), "--threads", str(args.threads), "--data",
            tokens, "--data-format", "tokens-u16"]
    best = {"off": float("inf"), "on": float("inf")}
    for r in range(args.rounds):
        for variant in ("off", "on"):
            cmd = base + (["--trace", trace, "--trace-steps", f"2:{args.steps}"]
                          if variant == "on" else [])
            p = run(cmd)
            times = [float(t) for n, t in re.findall(r"^step (\d+)/\d+ .*? time ([\d.]+) ms",
                                                     p.stdout, re.M) if int(n) > WARMUP]
            med = statistics.median(times)
            best[variant] = min(best[variant], med)
            print(f"round {r + 1} {variant:3s}: median {med:.2f} ms over {len(times)} steps",
                  flush=True)
    with open(trace) as f:
        events = [e for e in json.load(f)["traceEvents"] if e["ph"] == "X"]
    per_step = len(events) / (args.steps - 1)
    print(f"trace: {len(events)} spans ({per_step:.0f} per step over 4 ranks), "
          f"{os.path.getsize(trace) / 1e6:.2f} MB for {args.steps - 1} steps")
    print(f"step time, best median of {args.rounds}: untraced {best['off']:.2f} ms, traced "
          f"{best['on']:.2f} ms, traced / untraced {best['on'] / best['off']:.3f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
