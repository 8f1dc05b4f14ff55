#!/usr/bin/env python3
"""Peak memory of each rank against the compiler's prediction (plan JSON, memory per stage).

    .venv/bin/python bench/runtime/memory_vs_plan.py [--build build]

Jobs, planned on examples/clusters/local-4cpu.yaml with `straitc --cluster ... -o DIR` (DIR/plan.json):
  - gpt2-tiny, input_ids 8x64, global batch 16, 2 stages x 2 replicas (the quick start's job),
  - gpt2-tiny, input_ids 32x128, 2 stages x 2 replicas (activations dominate),
  - digits-cnn, images 256x1x8x8, the planner's layout.
Each runs 3 training steps with strait-run; every worker logs its executor memory (activation
arena + persistent buffers: parameters, gradients, optimizer state, inputs, outputs) and its
peak RSS (getrusage). The prediction is the stage's `peak_memory_bytes` in plan.json. Printed
per rank: predicted, executor (arena + persistent), peak RSS, and the ratios executor / predicted
and RSS / predicted, all measured in this run. The RSS also holds the binary, its libraries and
OpenBLAS's buffers (about 15 MiB for a tiny program).
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")


def mib(b):
    return f"{b / 2**20:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    straitc = os.path.join(a.build, "bin", "straitc")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    work = tempfile.mkdtemp(prefix="strait-memory-bench-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    gpt2 = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
    digits = os.path.join(ROOT, "models", "digits-cnn", "digits-cnn.onnx")
    jobs = [
        ("gpt2-tiny 8x64, 2x2", gpt2, ["--input-shape", "input_ids=8x64", "--optimizer", "adamw",
                                        "--global-batch", "16", "--num-stages", "2"]),
        ("gpt2-tiny 32x128, 2x2", gpt2, ["--input-shape", "input_ids=32x128", "--optimizer", "adamw",
                                          "--num-stages", "2"]),
        ("digits-cnn 256", digits, ["--input-shape", "images=256x1x8x8", "--optimizer", "sgd"]),
    ]
    print("| job | rank (stage) | predicted (MiB) | executor: arena + persistent (MiB) | peak RSS (MiB) "
          "| executor / predicted | RSS / predicted |")
    print("|---|---|---|---|---|---|---|")
    for i, (name, model, args) in enumerate(jobs):
        job = os.path.join(work, f"job{i}")
        subprocess.run([straitc, model, "--loss", "cross-entropy", *args, "--cluster", CLUSTER,
                        "-o", job], check=True, capture_output=True)
        plan = json.load(open(os.path.join(job, "plan.json")))
        stage_of = [s["stage"] for s in plan["stages"] for _ in s["devices"]]
        predicted = {s["stage"]: s["peak_memory_bytes"] for s in plan["stages"]}
        subprocess.run([run, job, "--steps", "3", "--threads", "1", "--quiet"], check=True,
                       capture_output=True)
        for r, stage in enumerate(stage_of):
            log = open(os.path.join(job, "logs", f"rank{r}.log")).read()
            m = re.search(r"memory arena (\d+) bytes, persistent (\d+) bytes", log)
            rss = re.search(r"peak RSS (\d+) KiB", log)
            if not (m and rss):
                raise SystemExit(f"rank {r} of {name}: no memory line in its log (strait-run too old?)")
            ex = int(m.group(1)) + int(m.group(2))
            rss_b = int(rss.group(1)) * 1024
            p = predicted[stage]
            print(f"| {name} | {r} ({stage}) | {mib(p)} | {mib(int(m.group(1)))} + {mib(int(m.group(2)))} "
                  f"= {mib(ex)} | {mib(rss_b)} | {ex / p:.2f} | {rss_b / p:.2f} |", flush=True)


if __name__ == "__main__":
    main()
