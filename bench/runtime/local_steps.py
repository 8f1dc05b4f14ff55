#!/usr/bin/env python3
"""Local steps (DiLoCo-like outer synchronization) on an emulated slow link between two islands.

    sudo .venv/bin/python bench/runtime/local_steps.py [--rate 20] [--steps 48] [--h 8] [--build build]

gpt2-tiny (AdamW, 4 x 32 tokens per replica) compiled as 4 data-parallel replicas on a cluster of
two sites, east (r0, r1) and west (r2, r3), joined by --rate Mbit/s; the hierarchical all-reduce's
islands are the sites. Two jobs in this run, on the same text tokens (runtime/scripts/
make-text-tokens.py): synchronous (straitc default, --local-steps 1) and --local-steps H (outer
lr 0.7, Nesterov momentum 0.9). Each runs --steps steps under runtime/scripts/wan-cluster.py
(--level site: one network namespace per site, the sites' veth shaped with tbf to the rate);
without root (no namespaces) it runs on loopback and says so.

Printed per job, from the ranks' own progress lines (DIR/logs/rank<R>.log): mean step time
(iterations 2..N, the outer step included), bytes sent from the east island to the west (ranks
0 and 1 to ranks 2 and 3, all steps), the mean loss of the last 8 steps; then the ratios
sync / H.
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAN = os.path.join(ROOT, "runtime", "scripts", "wan-cluster.py")
MODEL = os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx")
CLUSTER = """name: two-sites
device_types:
  - {{name: cpu, kind: cpu, peak_tflops: {{fp32: 0.2}}, mem_bandwidth_gbs: 20, memory_gib: 8}}
devices:
  - {{name: r0, type: cpu, host: he, site: east}}
  - {{name: r1, type: cpu, host: he, site: east}}
  - {{name: r2, type: cpu, host: hw, site: west}}
  - {{name: r3, type: cpu, host: hw, site: west}}
links:
  intra_host: {{bandwidth_gbps: 10, latency_us: 20}}
  sites:
    - {{between: [east, west], bandwidth_mbps: {rate}, latency_ms: 1}}
"""
EAST, WEST = (0, 1), (2, 3)


def namespaces_available():
    if os.geteuid() != 0:
        return False
    p = subprocess.run(["ip", "netns", "add", "strait-ls-probe"], capture_output=True)
    if p.returncode != 0:
        return False
    subprocess.run(["ip", "netns", "del", "strait-ls-probe"], capture_output=True)
    return True


def job_figures(job, steps):
    """(mean step ms over iterations 2..N on the slowest rank, bytes east -> west, last-8 loss)."""
    per_rank_ms, sent, losses = {}, 0, {}
    for r in range(4):
        ms = []
        for line in open(os.path.join(job, "logs", f"rank{r}.log")):
            m = re.match(rf"rank {r} iteration (\d+)/\d+ time (\S+) ms(?: loss (\S+))?", line)
            if not m:
                continue
            it = int(m.group(1))
            if it >= 2:
                ms.append(float(m.group(2)))
            if m.group(3):
                losses.setdefault(it, []).append(float(m.group(3)))
            if r in EAST:
                s = re.search(r" sent (\S+)", line)
                for item in s.group(1).split(","):
                    if ":" in item and int(item.split(":")[0]) in WEST:
                        sent += int(item.split(":")[1])
        per_rank_ms[r] = sum(ms) / len(ms)
    last = [sum(v) / len(v) for it, v in sorted(losses.items())][-8:]
    return max(per_rank_ms.values()), sent, sum(last) / len(last)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=int, default=20, help="Mbit/s between the islands")
    ap.add_argument("--steps", type=int, default=48)
    ap.add_argument("--h", type=int, default=8)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    straitc = os.path.join(a.build, "bin", "straitc")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    if os.path.isdir(run):
        run = os.path.join(run, "strait-run")
    work = tempfile.mkdtemp(prefix="strait-local-steps-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    cluster = os.path.join(work, "two-sites.yaml")
    open(cluster, "w").write(CLUSTER.format(rate=a.rate))
    subprocess.run([sys.executable, os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py"),
                    os.path.join(work, "text"), "--max-bytes", "400000", "--no-docstrings"],
                   check=True, capture_output=True)
    data = os.path.join(work, "text", "train.bin")
    wan = namespaces_available()
    print(f"link: {a.rate} Mbit/s between the islands "
          + ("(network namespaces + tbf, wan-cluster.py --level site)" if wan else
             "NOT emulated: no root / network namespaces; loopback, so step times are not "
             "those of a slow link (bytes and losses still are)"))
    rows = {}
    for name, flags in (("sync (H=1)", []), (f"H={a.h}", ["--local-steps", str(a.h)])):
        job = os.path.join(work, "sync" if not flags else f"h{a.h}")
        subprocess.run([straitc, MODEL, "--input-shape", "input_ids=4x32", "--loss", "cross-entropy",
                        "--optimizer", "adamw", "--cluster", cluster, "--global-batch", "16",
                        "--num-stages", "1", *flags, "-o", job], check=True, capture_output=True)
        args = [job, "--steps", str(a.steps), "--lr", "0.003", "--data", data, "--data-format",
                "tokens-u16", "--threads", "1", "--timeout-ms", "300000"]
        if wan:
            cmd = [sys.executable, WAN, "--cluster", cluster, "--level", "site", "--latency",
                   "--strait-run", run, "--", *args]
            p = subprocess.run(cmd, capture_output=True, text=True)
            if p.returncode != 0 and "netem" in p.stderr:  # no sch_netem: bandwidth only
                cmd.remove("--latency")
                p = subprocess.run(cmd, capture_output=True, text=True)
            print(f"{name}: " + ("tbf + 1 ms netem delay" if "--latency" in cmd else
                                 "tbf only (no sch_netem for the 1 ms latency)"))
        else:
            p = subprocess.run([run, *args, "--quiet"], capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(f"{name}: exit {p.returncode}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
        rows[name] = job_figures(job, a.steps)
    print(f"| job | mean step (ms) | bytes east -> west ({a.steps} steps) | loss (last 8 steps) |")
    print("|---|---|---|---|")
    for name, (ms, sent, loss) in rows.items():
        print(f"| {name} | {ms:.1f} | {sent} | {loss:.4f} |")
    (ms1, b1, l1), (msh, bh, lh) = rows.values()
    print(f"sync / H={a.h}: step time {ms1 / msh:.2f}x, bytes across {b1 / bh:.2f}x; "
          f"loss H={a.h} - sync = {lh - l1:+.4f}")
    print(f"work folder: {work}")


if __name__ == "__main__":
    main()
