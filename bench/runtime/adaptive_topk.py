#!/usr/bin/env python3
"""Adaptive top-k against a fixed ratio over an emulated WAN (root only).

Trains models/gpt2-tiny on real English text (runtime/scripts/make-text-tokens.py)
as a 2-stage pipeline, one CPU rank per stage on two hosts joined by a
tbf-shaped link (runtime/scripts/wan-cluster.py), GPipe order, 4 micro-batches
of 4 x 64 tokens, AdamW, top-k with error feedback on the cut (both directions):

  fixed     straitc --compress topk:R
  adaptive  straitc --compress topk:R --adaptive-topk=MIN:R

both compiled for a cluster file that says the link has FILE Mbit/s.

  1. "slow link": the emulated link delivers FILE/4 for the whole run;
  2. "change":    it delivers FILE for the first half of the run, then
                  `tc qdisc change` on both veth ends of the namespaces drops
                  it to FILE/4: the adaptive ratio follows.

Prints, per scenario and job: the median step time (the slower rank, after
5 warm-up steps; for "change" per half), the ratio of the fixed job's over
the adaptive one's, the final loss (mean of the last 5 steps of the whole
run) and the mean ratio of each adaptive sender (per half for "change").

usage (from the repository root, after building build/):
  sudo .venv/bin/python bench/runtime/adaptive_topk.py [--steps 40] [--file-mbps 8] [--ratio 0.1] [--min 0.005]
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
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = os.path.join(BUILD, "runtime", "tools", "strait-run")
WAN = os.path.join(ROOT, "runtime", "scripts", "wan-cluster.py")
TEXT = os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py")
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
WARMUP, LAST = 5, 5

CLUSTER = """name: two-hosts-{mbps}
device_types:
  - {{name: cpu, kind: cpu, peak_tflops: {{fp32: 0.2}}, mem_bandwidth_gbs: 20, memory_gib: 8}}
devices:
  - {{name: a0, type: cpu, host: h0, site: east}}
  - {{name: b0, type: cpu, host: h1, site: west}}
links:
  intra_host: {{bandwidth_gbps: 10}}
  hosts:
    - {{between: [h0, h1], bandwidth_mbps: {mbps}, latency_ms: 1}}
"""


def sh(cmd, timeout=1800):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def cluster(tmp, mbps):
    path = os.path.join(tmp, f"two-hosts-{mbps:g}.yaml")
    with open(path, "w") as f:
        f.write(CLUSTER.format(mbps=f"{mbps:g}"))
    return path


def compile_job(tmp, name, file_mbps, ratio, extra):
    job = os.path.join(tmp, name)
    shutil.rmtree(job, ignore_errors=True)
    sh([STRAITC, MODEL, "--input-shape", "input_ids=4x64", "--loss", "cross-entropy",
        "--optimizer", "adamw", "--cluster", cluster(tmp, file_mbps), "--num-stages", "2",
        "--global-batch", "16", "--schedule", "gpipe", "--compress", f"topk:{ratio:g}", *extra,
        "-o", job])
    return job


def iterations(job, rank):
    text = open(os.path.join(job, "logs", f"rank{rank}.log")).read()
    return [(int(i), float(ms), float(loss) if loss else None) for i, ms, loss in
            re.findall(r"iteration (\d+)/\d+ time ([0-9.]+) ms(?: loss (\S+))?", text)]


def ratios(job, rank):
    """Mean ratio of the rank's adaptive streams after each iteration."""
    text = open(os.path.join(job, "logs", f"rank{rank}.log")).read()
    out = []
    for line in re.findall(r"^rank \d+ topk (.*)$", text, re.M):
        vals = [float(v) for v in re.findall(r"\d+/ch\d+:([0-9.e+-]+):", line)]
        out.append(statistics.mean(vals) if vals else float("nan"))
    return out


def tc_rate(pid, bits):
    """Reshapes both ends of the 2-namespace WAN of wan-cluster.py process `pid`."""
    burst = max(16384, int(bits / 8 / 100))
    for ns, dev in ((f"straitwan-{pid}-n0", f"sw{pid % 100000}p0a"),
                    (f"straitwan-{pid}-n1", f"sw{pid % 100000}p0b")):
        sh(["ip", "netns", "exec", ns, "tc", "qdisc", "change", "dev", dev, "root", "tbf",
            "rate", f"{int(bits)}bit", "burst", str(burst), "latency", "100ms"])


def run(job, shaped_mbps, data, steps, change_to=None):
    """Runs the job over the emulated link; with change_to, reshapes it to that
    rate once rank 0 finished half the steps. Returns the iteration at the change."""
    cmd = [sys.executable, WAN, "--cluster", cluster(os.path.dirname(job), shaped_mbps),
           "--strait-run", STRAIT_RUN, "--", job, "--steps", str(steps), "--lr", "0.003",
           "--threads", "1", "--timeout-ms", "120000", "--data", data,
           "--data-format", "tokens-u16", "--seed", "7"]
    shutil.rmtree(os.path.join(job, "logs"), ignore_errors=True)  # the previous run's
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    changed = None
    log = os.path.join(job, "logs", "rank0.log")
    while p.poll() is None:
        if change_to is not None and changed is None and os.path.exists(log):
            done = len(re.findall(r"iteration \d+/", open(log).read()))
            if done >= steps // 2:
                tc_rate(p.pid, change_to * 1e6)
                changed = done
        time.sleep(0.05)
    out, err = p.communicate()
    if p.returncode != 0:
        sys.exit(f"wan-cluster failed:\n{out[-2000:]}\n{err[-2000:]}")
    return changed


def summary(job, lo, hi):
    per = {}
    for r in (0, 1):
        for it, ms, _ in iterations(job, r):
            per.setdefault(it, []).append(ms)
    steps = [max(per[i]) for i in sorted(per) if lo < i <= hi]
    losses = [loss for _, _, loss in iterations(job, 1) if loss is not None]
    means = []
    for r in (0, 1):
        rs = ratios(job, r)[lo:hi]
        means.append(f"{statistics.mean(rs):.4f}" if rs else "-")
    return statistics.median(steps), statistics.mean(losses[-LAST:]), " / ".join(means)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--file-mbps", type=float, default=8.0)
    ap.add_argument("--ratio", type=float, default=0.1)
    ap.add_argument("--min", type=float, default=0.005)
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("adaptive_topk: needs root (network namespaces and tc)")
    tmp = tempfile.mkdtemp(prefix="strait-adaptive-topk-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    sh([sys.executable, TEXT, os.path.join(tmp, "text"), "--no-docstrings", "--max-bytes", "200000"])
    data = os.path.join(tmp, "text", "train.bin")
    slow = a.file_mbps / 4
    print(f"gpt2-tiny, 2 stages x 1 rank, GPipe 4 x (4 x 64 tokens), AdamW 3e-3, {a.steps} steps; "
          f"cluster file {a.file_mbps:g} Mbit/s; fixed topk:{a.ratio:g} vs adaptive "
          f"[{a.min:g}, {a.ratio:g}]")
    print("| scenario | steps | fixed ms | adaptive ms | fixed / adaptive | fixed final loss | "
          "adaptive final loss | adaptive mean ratio, rank 0 (forward) / rank 1 (backward) |")
    print("|---|---|---|---|---|---|---|---|")
    jobs = {}
    for name, extra in (("fixed", ()), ("adaptive", (f"--adaptive-topk={a.min:g}:{a.ratio:g}",))):
        jobs[name] = compile_job(tmp, name, a.file_mbps, a.ratio, extra)
    # 1. The link delivers a quarter of what the file says.
    for name in jobs:
        run(jobs[name], slow, data, a.steps)
    f = summary(jobs["fixed"], WARMUP, a.steps)
    d = summary(jobs["adaptive"], WARMUP, a.steps)
    print(f"| {slow:g} Mbit/s (file/4) | {WARMUP + 1}-{a.steps} | {f[0]:.1f} | {d[0]:.1f} | "
          f"{f[0] / d[0]:.2f}x | {f[1]:.4f} | {d[1]:.4f} | {d[2]} |")
    # 2. The file's rate, then a quarter of it from the middle of the run.
    at = {name: run(jobs[name], a.file_mbps, data, a.steps, change_to=slow) for name in jobs}
    for half, (lo, hi) in (("before", (WARMUP, min(at.values()))),
                           ("after", (max(at.values()) + 2, a.steps))):
        f = summary(jobs["fixed"], lo, hi)
        d = summary(jobs["adaptive"], lo, hi)
        rate = a.file_mbps if half == "before" else slow
        print(f"| {a.file_mbps:g} -> {slow:g} Mbit/s, {half} ({rate:g}) | {lo + 1}-{hi} | "
              f"{f[0]:.1f} | {d[0]:.1f} | {f[0] / d[0]:.2f}x | {f[1]:.4f} | {d[1]:.4f} | "
              f"{d[2]} |")
    print(f"(rate changed after iteration {at}; jobs in {tmp})")


if __name__ == "__main__":
    main()
