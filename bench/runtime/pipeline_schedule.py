#!/usr/bin/env python3
"""GPipe against 1F1B on a real pipeline job: step time and memory per rank.

    .venv/bin/python bench/runtime/pipeline_schedule.py [--build build] [--rounds 3]
        [--model gpt2-tiny] [--input-shape input_ids=4x128] [--stages 2] [--micro-batches 8]
        [--wan MBITS]

Compiles the model for examples/clusters/local-4cpu.yaml (forced stages, the replicas that
leave, cross-entropy, AdamW) once per variant: `--schedule gpipe`, `--schedule 1f1b` (the
planner's warm-up) and, with --wan, `--schedule 1f1b --pipeline-warmup classic`; then runs
the jobs with strait-run on the same token data in alternating rounds (these machines are
noisy: each round runs every variant once). With --wan R (root), the cluster is instead two
sites of one CPU each joined by R Mbit/s, and runtime/scripts/wan-cluster.py runs the ranks
in network namespaces joined by a tbf-shaped veth pair of that rate. Printed per variant: the
median step time over the rounds (each round's median of its steps after the first, as the
last rank logs them), the losses (equal for all: the backwards run in micro-batch order), and
per rank the executor's activation arena and peak RSS from the worker logs. The ratios are
taken in this run.
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
from jobutil import write_tokens  # noqa: E402

CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")
WAN = os.path.join(ROOT, "runtime", "scripts", "wan-cluster.py")
TWO_SITES = """name: two-sites
device_types:
  - {{name: cpu, kind: cpu, peak_tflops: {{fp32: 0.05}}, mem_bandwidth_gbs: 10, memory_gib: 8}}
devices:
  - {{name: a0, type: cpu, host: ha, site: east}}
  - {{name: b0, type: cpu, host: hb, site: west}}
links:
  sites: [{{between: [east, west], bandwidth_mbps: {rate}}}]
"""


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout


def worker_memory(job):
    """{rank: (arena bytes, peak RSS KiB)} from the workers' logs."""
    out = {}
    for name in os.listdir(os.path.join(job, "logs")):
        text = open(os.path.join(job, "logs", name)).read()
        for rank, arena in re.findall(r"^rank (\d+): memory arena (\d+) bytes", text, re.M):
            rss = re.search(r"peak RSS (\d+) KiB", text)
            out[int(rank)] = (int(arena), int(rss.group(1)) if rss else 0)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--model", default="gpt2-tiny")
    ap.add_argument("--input-shape", default="input_ids=4x128")
    ap.add_argument("--stages", type=int, default=2)
    ap.add_argument("--micro-batches", type=int, default=8)
    ap.add_argument("--wan", type=float, default=0,
                    help="two sites joined by this many Mbit/s (root: namespaces and tc)")
    a = ap.parse_args()
    if a.wan and os.geteuid() != 0:
        sys.exit("pipeline_schedule: --wan needs root (network namespaces and tc)")
    straitc = os.path.join(a.build, "bin", "straitc")
    launcher = os.path.join(a.build, "runtime", "tools", "strait-run")
    model = os.path.join(ROOT, "models", a.model, a.model + ".onnx")
    with tempfile.TemporaryDirectory() as work:
        data = write_tokens(__import__("pathlib").Path(work) / "tokens.bin", seed=5, n=1 << 16)
        cluster = CLUSTER
        if a.wan:
            cluster = os.path.join(work, "two-sites.yaml")
            with open(cluster, "w") as f:
                f.write(TWO_SITES.format(rate=a.wan))
        variants = {"gpipe": ["--schedule", "gpipe"], "1f1b": ["--schedule", "1f1b"]}
        if a.wan:
            variants["1f1b-classic"] = ["--schedule", "1f1b", "--pipeline-warmup", "classic"]
        jobs, warmups = {}, {}
        for name, flags in variants.items():
            jobs[name] = os.path.join(work, name)
            out = run([straitc, model, "--input-shape", a.input_shape, "--loss", "cross-entropy",
                       "--optimizer", "adamw", "--cluster", cluster, "--num-stages",
                       str(a.stages), "--micro-batches", str(a.micro_batches), *flags,
                       "-o", jobs[name]])
            w = re.search(r"warm-up forwards per stage: ([\d ]+)", out)
            warmups[name] = w.group(1).strip() if w else "all"
        times = {s: [] for s in jobs}
        losses, memory = {}, {}
        args = ["--steps", str(a.steps), "--lr", "0.001", "--data", str(data), "--threads", "1",
                "--timeout-ms", "300000"]
        for _ in range(a.rounds):
            for name, job in jobs.items():
                if a.wan:
                    run([sys.executable, WAN, "--cluster", cluster, "--level", "site",
                         "--strait-run", launcher, "--", job, *args])
                else:
                    run([launcher, job, *args])
                last = max(int(f[4:-4]) for f in os.listdir(os.path.join(job, "logs"))
                           if re.fullmatch(r"rank\d+\.log", f))
                log = open(os.path.join(job, "logs", f"rank{last}.log")).read()
                steps = re.findall(r"iteration \d+/\d+ time (\S+) ms loss (\S+)", log)
                times[name].append(statistics.median(float(t) for t, _ in steps[1:]))
                losses[name] = [l for _, l in steps]
                memory[name] = worker_memory(job)
        where = f"two sites at {a.wan:g} Mbit/s" if a.wan else "local-4cpu"
        print(f"{a.model} {a.input_shape}, {a.stages} stages on {where}, "
              f"{a.micro_batches} micro-batches, AdamW, {a.rounds} rounds of {a.steps} steps")
        for schedule in jobs:
            med = statistics.median(times[schedule])
            mem = memory[schedule]
            print(f"  {schedule:12s}: warm-up {warmups[schedule]}; step {med:8.1f} ms (rounds "
                  f"{', '.join(f'{t:.1f}' for t in times[schedule])}); "
                  f"losses {' '.join(losses[schedule])}")
            for rank in sorted(mem):
                print(f"         rank {rank}: arena {mem[rank][0] / 2**20:7.2f} MiB, "
                      f"peak RSS {mem[rank][1] / 1024:7.1f} MiB")
        g = statistics.median(times["gpipe"])
        for name in jobs:
            if name != "gpipe":
                print(f"  {name} / gpipe step time: {statistics.median(times[name]) / g:.3f}; "
                      f"losses equal: {losses['gpipe'] == losses[name]}")
        for rank in sorted(memory["gpipe"]):
            ga, oa = memory["gpipe"][rank][0], memory["1f1b"][rank][0]
            print(f"  rank {rank}: arena 1f1b / gpipe {oa / ga:.3f}")


if __name__ == "__main__":
    main()
