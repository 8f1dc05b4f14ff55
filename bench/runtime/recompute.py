#!/usr/bin/env python3
"""Activation recomputation (straitc --recompute): memory and step time against the same job without it.

    .venv/bin/python bench/runtime/recompute.py [--build build] [--steps 12]

CPU runtime: gpt2-tiny and llama-tiny (input_ids 32x128, AdamW), on 1 rank and in a 2-stage 1F1B
pipeline of 4 micro-batches (one CPU each), each compiled with `--recompute none` and `--recompute
full` and trained for --steps steps with strait-run (--threads 1). Printed per rank: the executor's
activation arena (bytes, liveness-planned), the planner's prediction (plan.json, arena + persistent)
against the executor's, the median step time after the first two steps and the planner's predicted
iteration ratio; ratios full / none are measured in this run.

Planner: LLaMA-7B (models/llama-7b, shape-only, 1024 tokens, bf16, AdamW) on the FusionLLM-like
cluster (RTX 3090 24 GB, global batch 16) and DT-FM's data centre (V100 16 GB, global batch 64)
with --recompute auto, against the same cluster whose GPUs have 80 GiB (no recomputation needed):
the predicted iteration time, the stages that recompute and the ratio (the recompute overhead).
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import statistics
import subprocess
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cpu_cluster(path, devices):
    rows = "".join(f"  - {{name: cpu{i}, type: cpu, host: h0, site: s0}}\n" for i in range(devices))
    with open(path, "w") as f:
        f.write("name: bench-cpu\ndevice_types:\n  - {name: cpu, kind: cpu, peak_tflops: {fp32: 0.2}, "
                f"mem_bandwidth_gbs: 20, memory_gib: 8}}\ndevices:\n{rows}"
                "links:\n  intra_host: {bandwidth_gbps: 10, latency_ms: 0}\n")
    return path


def runtime_job(straitc, run, work, model, devices, mode, steps):
    job = os.path.join(work, f"{os.path.basename(model)}-{devices}-{mode}")
    args = ["--num-stages", "2", "--micro-batches", "4", "--global-batch", "128"] if devices == 2 else []
    subprocess.run([straitc, model, "--input-shape", "input_ids=32x128", "--loss", "cross-entropy",
                    "--optimizer", "adamw", "--cluster",
                    cpu_cluster(os.path.join(work, f"c{devices}.yaml"), devices),
                    "--recompute", mode, *args, "-o", job], check=True, capture_output=True)
    p = subprocess.run([run, job, "--steps", str(steps), "--threads", "1",
                        "--data", os.path.join(ROOT, "out", "text", "train.bin")],
                       check=True, capture_output=True, text=True)
    times = [float(t) for t in re.findall(r"^step \d+/\d+ loss \S+ .*time (\S+) ms", p.stdout, re.M)]
    losses = re.findall(r"^step \d+/\d+ loss (\S+)", p.stdout, re.M)
    plan = json.load(open(os.path.join(job, "plan.json")))
    ranks = []
    for r, s in enumerate(plan["stages"]):
        log = open(os.path.join(job, "logs", f"rank{r}.log")).read()
        m = re.search(r"memory arena (\d+) bytes, persistent (\d+) bytes", log)
        ranks.append((int(m.group(1)), int(m.group(2)), s["peak_memory_bytes"], s["in_flight"]))
    return statistics.median(times[2:]), losses, ranks, plan["iteration_s"]


def planned(straitc, work, cluster, batch, recompute):
    """The job's plan (DIR/plan.json of a shape-only compile: the micro-batches the job runs)."""
    job = os.path.join(work, f"llama7b-{os.path.basename(cluster)}-{recompute}")
    p = subprocess.run([straitc, os.path.join(ROOT, "models", "llama-7b", "llama-7b.onnx"),
                        "--shape-only", "--input-shape", "input_ids=1x1024", "--loss", "cross-entropy",
                        "--optimizer", "adamw", "--precision", "bf16", "--cluster", cluster,
                        "--global-batch", str(batch), "--recompute", recompute, "-o", job],
                       capture_output=True, text=True)
    if p.returncode:
        return None, p.stderr.strip().splitlines()[-1][-200:]
    plan = json.load(open(os.path.join(job, "plan.json")))
    stages = plan["stages"]
    rec = sum(s["recompute"] for s in stages)
    peak = max(s["peak_memory_bytes"] / s["capacity_bytes"] for s in stages)
    return plan["iteration_s"], (f"{len(stages)} stages x {len(stages[0]['devices'])} replicas, "
                                 f"{plan['micro_batches']} micro-batches, {plan['iteration_s']:.2f} s, "
                                 f"{rec} stages recompute, fullest device {100 * peak:.0f} % of usable")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=12)
    a = ap.parse_args()
    straitc = os.path.join(a.build, "bin", "straitc")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    work = tempfile.mkdtemp(prefix="strait-recompute-bench-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    if a.steps < 4:
        raise SystemExit("--steps must be at least 4 (the first two are not timed)")
    print("| job | rank (in flight) | arena none / full (MiB) | arena full / none | predicted / executor "
          "(full) | step none / full (ms) | step full / none | predicted full / none | losses equal |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("gpt2-tiny", "llama-tiny"):
        model = os.path.join(ROOT, "models", name, name + ".onnx")
        for devices in (1, 2):
            t0, l0, r0, p0 = runtime_job(straitc, run, work, model, devices, "none", a.steps)
            t1, l1, r1, p1 = runtime_job(straitc, run, work, model, devices, "full", a.steps)
            for r, ((a0, _, _, _), (a1, s1, pred, fl)) in enumerate(zip(r0, r1)):
                print(f"| {name} 32x128, {devices} rank(s) | {r} ({fl}) | {a0 / 2**20:.2f} / {a1 / 2**20:.2f} "
                      f"| {a1 / a0:.2f} | {pred / (a1 + s1):.2f} | {t0:.1f} / {t1:.1f} | {t1 / t0:.2f} "
                      f"| {p1 / p0:.2f} | {l0 == l1} |", flush=True)
    print()
    print("| cluster | --recompute auto: plan | 80 GiB GPUs, none: plan | predicted ratio |")
    print("|---|---|---|---|")
    clusters = os.path.join(ROOT, "examples", "clusters")
    for file, batch in (("fusionllm-48.yaml", 16), ("dtfm-1-datacenter.yaml", 64)):
        src = os.path.join(clusters, file)
        big = os.path.join(work, "80gib-" + file)
        with open(src) as f, open(big, "w") as g:
            g.write(re.sub(r"memory_gib: [0-9.]+", "memory_gib: 80", f.read()))
        t, text = planned(straitc, work, src, batch, "auto")
        tb, textb = planned(straitc, work, big, batch, "none")
        ratio = f"{t / tb:.2f}" if t and tb else "-"
        print(f"| {file} (batch {batch}) | {text} | {textb} | {ratio} |", flush=True)


if __name__ == "__main__":
    main()
