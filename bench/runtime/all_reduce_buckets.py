#!/usr/bin/env python3
"""Step time with the gradient all-reduces in buckets against one all-reduce per gradient.

    .venv/bin/python bench/runtime/all_reduce_buckets.py [--build build] [--steps 20] [--rounds 3]

gpt2-tiny (input_ids 8x64 per replica, AdamW) on 2 data-parallel CPU ranks of one host (a cluster
file of two CPU devices, loopback Gloo), compiled twice: `--all-reduce-bucket-mib 0` (one
all-reduce per gradient tensor, as before dist-bucket-all-reduces) and the default (one bucket).
Both are trained `--steps` steps with `--threads 1`, alternating, --rounds times each; a run's
figure is the median of the launcher's step times (the slowest rank) without the first 2 steps,
and each side keeps its best run. Prints the all-reduce steps of each program, both step times,
their ratio and whether the final losses agree (2 ranks: bit-identical).
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

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
from jobutil import cpu_cluster  # noqa: E402

CLUSTER = cpu_cluster("two-cpu", [("r0", "h0", "s"), ("r1", "h0", "s")],
                      "  intra_host: {bandwidth_gbps: 10, latency_us: 20}\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    straitc = os.path.join(a.build, "bin", "straitc")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    work = tempfile.mkdtemp(prefix="strait-buckets-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    cluster = os.path.join(work, "two-cpu.yaml")
    with open(cluster, "w") as f:
        f.write(CLUSTER)
    data = os.path.join(ROOT, "out", "text", "train.bin")
    if not os.path.exists(data):
        subprocess.run([os.path.join(ROOT, ".venv", "bin", "python"),
                        os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py"),
                        os.path.dirname(data)], check=True, capture_output=True)
    jobs = {}
    for label, mib in (("per gradient", "0"), ("buckets", "256")):
        job = os.path.join(work, label.replace(" ", "-"))
        subprocess.run([straitc, os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx"),
                        "--input-shape", "input_ids=8x64", "--loss", "cross-entropy",
                        "--optimizer", "adamw", "--cluster", cluster, "--global-batch", "16",
                        "--num-stages", "1", "--all-reduce-bucket-mib", mib, "-o", job],
                       check=True, capture_output=True)
        text = subprocess.run(["protoc", "--decode=strait.program.Program", "-I",
                               os.path.join(ROOT, "runtime", "proto"), "strait_program.proto"],
                              stdin=open(os.path.join(job, "rank0.program.pb"), "rb"),
                              capture_output=True, check=True).stdout.decode()
        jobs[label] = (job, text.count("all_reduce {"))
    best, loss = {}, {}
    for _ in range(a.rounds):
        for label, (job, _) in jobs.items():
            p = subprocess.run([run, job, "--steps", str(a.steps), "--threads", "1", "--data", data,
                                "--data-format", "tokens-u16", "--lr", "0.003"],
                               check=True, capture_output=True, text=True)
            times = [float(t) for t in re.findall(r"^step \d+/\d+ .*? time ([\d.]+) ms", p.stdout,
                                                  re.M)]
            med = statistics.median(times[2:])
            best[label] = min(best.get(label, med), med)
            loss[label] = re.findall(r"^step \d+/\d+ loss (\S+)", p.stdout, re.M)[-1]
    for label, (_, n) in jobs.items():
        print(f"{label:13s}: {n:3d} all-reduce steps, {best[label]:7.1f} ms/step, "
              f"final loss {loss[label]}")
    print(f"buckets / per gradient: {best['buckets'] / best['per gradient']:.3f}; losses "
          f"{'identical' if loss['buckets'] == loss['per gradient'] else 'differ'}")


if __name__ == "__main__":
    main()
