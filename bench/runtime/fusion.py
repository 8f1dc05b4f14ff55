#!/usr/bin/env python3
"""gpt2-tiny training steps on the CPU runtime, fused (--fuse=elementwise) vs --fuse=none.

    python3 bench/runtime/fusion.py [--shape 8x128] [--steps 30] [--threads 1] [--rounds 3]

Compiles the gpt2-tiny training step (cross-entropy, SGD) twice with straitc, once per
--fuse mode, and runs each with strait-run on the same token file (seeded, ids below the
256-token vocabulary). Step time: the median of the "time X ms" of the launcher's step lines
after 5 warm-up steps; each mode runs --rounds times alternately and keeps its best median
(damps the load of other processes). Prints kernels per program, step times, the ratio
unfused / fused (> 1: fusion is faster) and whether the losses agree.
"""
from __future__ import annotations

import argparse
import os
import re
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
    return p.stdout


def kernels(job):
    with open(os.path.join(job, "rank0.program.pb"), "rb") as f:
        p = subprocess.run(["protoc", "--decode=strait.program.Program", "-I",
                            os.path.join(ROOT, "runtime", "proto"), "strait_program.proto"],
                           stdin=f, capture_output=True)
    text = p.stdout.decode()
    return text.count("\nkernels {"), text.count('op: "FusedElementwise"')


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="8x128", help="input_ids batch x tokens")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    straitc = os.path.join(a.build, "bin", "straitc")
    strait_run = os.path.join(a.build, "runtime", "tools", "strait-run")
    model = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
    tmp = tempfile.mkdtemp(prefix="strait-fusion-")
    data = os.path.join(tmp, "tokens.bin")
    state, ids = 7, []
    for _ in range(1 << 16):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(state % 256)
    with open(data, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    jobs = {}
    for mode in ("elementwise", "none"):
        jobs[mode] = os.path.join(tmp, mode)
        run([straitc, model, "--input-shape", f"input_ids={a.shape}", "--loss", "cross-entropy",
             "--optimizer", "sgd", f"--fuse={mode}", "-o", jobs[mode]])
    best = {m: float("inf") for m in jobs}
    loss = {}
    for _ in range(a.rounds):
        for mode, job in jobs.items():
            out = run([strait_run, job, "--steps", str(a.steps + WARMUP), "--lr", "0.01",
                       "--data", data, "--threads", a.threads, "--timeout-ms", "600000"])
            steps = re.findall(r"^step (\d+)/\d+ loss (\S+) .*?time (\S+) ms", out, re.M)
            times = [float(t) for s, _, t in steps if int(s) > WARMUP]
            best[mode] = min(best[mode], statistics.median(times))
            loss[mode] = [float(l) for _, l, _ in steps]
    kf, nf = kernels(jobs["elementwise"])
    ku, _ = kernels(jobs["none"])
    same = all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(loss["elementwise"], loss["none"]))
    print(f"gpt2-tiny training step, input_ids {a.shape}, {a.threads} thread(s), "
          f"median of {a.steps} steps, best of {a.rounds}")
    print(f"  --fuse=none:        {ku:5d} kernels  {best['none']:8.2f} ms/step")
    print(f"  --fuse=elementwise: {kf:5d} kernels  {best['elementwise']:8.2f} ms/step "
          f"({nf} FusedElementwise)")
    print(f"  speed-up (unfused / fused): {best['none'] / best['elementwise']:.3f}x; "
          f"losses {'equal' if same else 'DIFFER'} over {len(loss['none'])} steps")


if __name__ == "__main__":
    main()
