#!/usr/bin/env python3
"""Achieved throughput over a tbf-shaped emulated-WAN link against its configured rate (root).

    sudo .venv/bin/python bench/runtime/wan_throughput.py [--rates 8,20,50,100,500] [--build build]

For each rate R (Mbit/s) a two-site cluster file (sites east and west joined by R) is written and
runtime/scripts/wan-cluster.py builds its namespaces (one per site, one veth pair shaped with tbf
to R on both ends). Two measurements per rate, both in this run:
  - TCP: `wan-cluster.py --measure` (a Python socket sender, 3 s);
  - Gloo through strait-run: the 2-rank plan of strait-test-sendrecv-plan (rank 0 in east sends an
    f32 tensor to rank 1 in west every iteration; sized to ~0.5 s per iteration), run by
    wan-cluster.py; rank 1's received bytes over its iteration times (iterations 2..N).
Prints achieved / configured for both.
"""
from __future__ import annotations

import argparse
import atexit
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAN = os.path.join(ROOT, "runtime", "scripts", "wan-cluster.py")
CLUSTER = """name: two-sites
device_types:
  - {{name: cpu, kind: cpu, peak_tflops: {{fp32: 0.2}}, mem_bandwidth_gbs: 20, memory_gib: 8}}
devices:
  - {{name: a0, type: cpu, host: ha, site: east}}
  - {{name: b0, type: cpu, host: hb, site: west}}
links:
  sites: [{{between: [east, west], bandwidth_mbps: {rate}}}]
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rates", default="8,20,50,100,500")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("wan_throughput: needs root (network namespaces and tc)")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    writer = os.path.join(a.build, "runtime", "test", "strait-test-sendrecv-plan")
    work = tempfile.mkdtemp(prefix="strait-wan-bench-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    print("| configured (Mbit/s) | TCP achieved (Mbit/s) | TCP achieved / configured "
          "| Gloo via strait-run (Mbit/s) | Gloo achieved / configured |")
    print("|---|---|---|---|---|")
    for rate in [int(x) for x in a.rates.split(",")]:
        cluster = os.path.join(work, f"c{rate}.yaml")
        open(cluster, "w").write(CLUSTER.format(rate=rate))
        p = subprocess.run([sys.executable, WAN, "--cluster", cluster, "--level", "site", "--measure"],
                           capture_output=True, text=True, check=True)
        tcp = float(re.search(r"achieved ([\d.]+) Mbit/s", p.stdout).group(1))
        job = os.path.join(work, f"job{rate}")
        floats = max(1 << 16, rate * 1000000 // 8 // 4 // 2)  # ~0.5 s per iteration
        os.makedirs(job, exist_ok=True)
        subprocess.run([writer, job, str(floats)], check=True, capture_output=True)
        json.dump({"stages": [{"stage": 0, "devices": ["a0"]}, {"stage": 1, "devices": ["b0"]}]},
                  open(os.path.join(job, "plan.json"), "w"))
        subprocess.run([sys.executable, WAN, "--cluster", cluster, "--level", "site",
                        "--strait-run", run, "--", job, "--steps", "6", "--threads", "1",
                        "--timeout-ms", "120000"], capture_output=True, text=True, check=True)
        ms = nbytes = 0.0
        for line in open(os.path.join(job, "logs", "rank1.log")):
            m = re.match(r"rank 1 iteration (\d+)/\d+ time (\S+) ms.* recv 0:(\d+)", line)
            if m and int(m.group(1)) >= 2:
                ms += float(m.group(2))
                nbytes += int(m.group(3))
        gloo = nbytes * 8 / (ms / 1e3) / 1e6
        print(f"| {rate} | {tcp:.1f} | {tcp / rate:.3f} | {gloo:.1f} | {gloo / rate:.3f} |", flush=True)


if __name__ == "__main__":
    main()
