#!/usr/bin/env python3
"""Training steps on the CPU runtime under straitc flag variants: fused (--fuse=elementwise) vs
--fuse=none by default.

    python3 bench/runtime/fusion.py [--model gpt2-tiny] [--shape 8x128] [--steps 30]
        [--threads 1] [--rounds 3] [--variant=FLAGS ...]

Compiles the model's training step (cross-entropy, SGD) once per variant (a string of straitc
flags; the first is the reference; default: --fuse=elementwise and --fuse=none), e.g.

    fusion.py --model llama-tiny --variant= --variant='--fuse-rotary=false --frozen=*inv_freq'

and runs each with strait-run on the same token file (seeded, ids below the 256-token
vocabulary). Step time: the median of the "time X ms" of the launcher's step lines after 5
warm-up steps; each variant runs --rounds times alternately and keeps its best median (damps
the load of other processes). Prints kernels per program, step times, each variant's time over
the first's (> 1: the first is faster) and whether its losses agree with the first's.
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import shlex
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
    ap.add_argument("--model", default="gpt2-tiny", help="a model of models/ (NAME/NAME.onnx)")
    ap.add_argument("--shape", default="8x128", help="input_ids batch x tokens")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--variant", action="append", default=None,
                    help="straitc flags of one compilation (repeatable; the first is the "
                         "reference)")
    a = ap.parse_args()
    variants = a.variant if a.variant is not None else ["--fuse=elementwise", "--fuse=none"]
    straitc = os.path.join(a.build, "bin", "straitc")
    strait_run = os.path.join(a.build, "runtime", "tools", "strait-run")
    model = os.path.join(ROOT, "models", a.model, a.model + ".onnx")
    tmp = tempfile.mkdtemp(prefix="strait-fusion-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    data = os.path.join(tmp, "tokens.bin")
    state, ids = 7, []
    for _ in range(1 << 16):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(state % 256)
    with open(data, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    jobs = {}
    for i, v in enumerate(variants):
        jobs[v] = os.path.join(tmp, f"v{i}")
        run([straitc, model, "--input-shape", f"input_ids={a.shape}", "--loss", "cross-entropy",
             "--optimizer", "sgd", *shlex.split(v), "-o", jobs[v]])
    best = {v: float("inf") for v in jobs}
    loss = {}
    for _ in range(a.rounds):
        for v, job in jobs.items():
            out = run([strait_run, job, "--steps", str(a.steps + WARMUP), "--lr", "0.01",
                       "--data", data, "--threads", a.threads, "--timeout-ms", "600000"])
            steps = re.findall(r"^step (\d+)/\d+ loss (\S+) .*?time (\S+) ms", out, re.M)
            times = [float(t) for s, _, t in steps if int(s) > WARMUP]
            best[v] = min(best[v], statistics.median(times))
            loss[v] = [float(l) for _, l, _ in steps]
    print(f"{a.model} training step, input_ids {a.shape}, {a.threads} thread(s), "
          f"median of {a.steps} steps, best of {a.rounds}")
    ref = variants[0]
    for v in variants:
        k, nf = kernels(jobs[v])
        same = all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(loss[v], loss[ref]))
        print(f"  {v or '(defaults)':45s} {k:5d} kernels ({nf} FusedElementwise) "
              f"{best[v]:8.2f} ms/step  x{best[v] / best[ref]:.3f}  "
              f"losses {'equal' if same else 'DIFFER'}")


if __name__ == "__main__":
    main()
