#!/usr/bin/env python3
"""strait-run --replan: a link that slows down mid-run, with and without re-planning (root only).

models/gpt2-tiny, 16 x 64 tokens per replica, global batch 32, compiled for two CPU devices on two
hosts joined by a --file-mbps link (4000: straitc plans two data-parallel replicas). The
launcher runs in a network namespace of this bench whose loopback is shaped with tbf, so the
ranks talk over it: 10 Gbit/s first, then, once step --slow-after printed, `tc qdisc change`
drops it to --slow-mbps. Two runs of --steps steps:

  off   --replan off: the job keeps its plan;
  auto  --replan auto --replan-factor 30 --replan-window 3: the job re-plans for the measured
        link, checkpoints and resumes under the new plan.

Prints the re-plan's calibration line, the median step time (the launcher's merged line: the slowest rank) before the slowdown,
after it without re-planning, after the re-plan, their ratio, the steps from the slowdown to the
decision, straitc's time, and what the switch itself cost: the wall time between the merged
lines of the stop step and the first resumed step, less that step's own time (checkpoint, exit,
start, load, rendezvous, resume).

usage (from the repository root, after building build/):
  sudo .venv/bin/python bench/runtime/replan.py [--steps 40] [--slow-after 10] [--slow-mbps 10]
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
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
import jobutil  # noqa: E402

FAST = "rate 10gbit burst 4mb latency 100ms"


def netns(name, *cmd):
    subprocess.run(["ip", "netns", "exec", name, *cmd], check=True, capture_output=True)


def compile_job(tmp, file_mbps):
    with open(os.path.join(tmp, "two-hosts.yaml"), "w") as f:
        f.write(jobutil.cpu_cluster("two-hosts", [("c0", "h0", "s"), ("c1", "h1", "s")],
                                    f"  intra_site: {{bandwidth_mbps: {file_mbps}, "
                                    "latency_ms: 0.1}\n"))
    shutil.rmtree(os.path.join(tmp, "job"), ignore_errors=True)
    p = subprocess.run([os.path.abspath(jobutil.STRAITC), jobutil.GPT2_TINY, "--input-shape",
                        "input_ids=16x64", "--global-batch", "32", "--loss", "cross-entropy",
                        "--compress", "auto", "--cluster", "two-hosts.yaml", "-o", "job"],
                       cwd=tmp, capture_output=True, text=True, timeout=300)
    if p.returncode:
        sys.exit(p.stderr)
    return os.path.join(tmp, "job"), p.stdout.splitlines()[0]


def run(ns, job, data, args, flags):
    """Merged lines as (arrival time, step, ms, loss) and the whole output."""
    netns(ns, "tc", "qdisc", "replace", "dev", "lo", "root", "tbf", *FAST.split())
    slow = f"rate {args.slow_mbps}mbit burst 32kb latency 100ms".split()
    p = subprocess.Popen(["ip", "netns", "exec", ns, jobutil.STRAIT_RUN, job, "--steps",
                          str(args.steps), "--data", data, "--lr", "0.05", "--threads", "1",
                          *flags], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines, out = [], []
    for line in p.stdout:
        out.append(line)
        m = re.match(r"step (\d+)/\d+ loss (\S+) .*? time (\S+) ms", line)
        if m:
            lines.append((time.monotonic(), int(m[1]), float(m[3]), float(m[2])))
            if int(m[1]) == args.slow_after:
                netns(ns, "tc", "qdisc", "change", "dev", "lo", "root", "tbf", *slow)
    if p.wait():
        sys.exit("".join(out[-40:]))
    return lines, "".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--slow-after", type=int, default=10)
    ap.add_argument("--slow-mbps", type=float, default=10)
    ap.add_argument("--file-mbps", type=float, default=4000)
    args = ap.parse_args()
    why = jobutil.wan_unavailable()
    if why:
        sys.exit(why)
    tmp = tempfile.mkdtemp(prefix="strait-replan-bench-")
    ns = f"strait50-replan-bench-{os.getpid()}"
    subprocess.run(["ip", "netns", "add", ns], check=True)

    def cleanup():
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):
            shutil.rmtree(tmp, ignore_errors=True)
    atexit.register(cleanup)
    netns(ns, "ip", "link", "set", "lo", "mtu", "1500")
    netns(ns, "ip", "link", "set", "lo", "up")
    netns(ns, "tc", "qdisc", "add", "dev", "lo", "root", "tbf", *FAST.split())
    data = str(jobutil.write_tokens(__import__("pathlib").Path(tmp) / "tokens.bin", seed=5,
                                    vocab=32))
    job, plan = compile_job(tmp, args.file_mbps)
    print(f"job: {plan}")
    s = args.slow_after
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731

    off, _ = run(ns, job, data, args, ["--replan", "off"])
    before = med([ms for _, st, ms, _ in off if 2 <= st <= s])
    after_off = med([ms for _, st, ms, _ in off if st >= s + 3])

    job, _ = compile_job(tmp, args.file_mbps)
    auto, out = run(ns, job, data, args, ["--replan", "auto", "--replan-factor", "30",
                                          "--replan-window", "3"])
    m = re.search(r"re-plan 1 at step (\d+): (.*)", out)
    sw = re.search(r"checkpoints after step (\d+)", out)
    if not (m and sw):
        sys.exit("no re-plan:\n" + out[-3000:])
    decided, stop = int(m[1]), int(sw[1])
    straitc_s = float(re.search(r"new plan \(straitc ([\d.]+) s", out)[1])
    resumed = [ms for _, st, ms, _ in auto if st >= stop + 2]
    slow_before = [ms for _, st, ms, _ in auto if s + 2 <= st <= stop]
    at = {st: (t, ms) for t, st, ms, _ in auto}
    switch_s = at[stop + 1][0] - at[stop][0] - at[stop + 1][1] / 1e3
    print("steps (ms), --replan off: " + " ".join(f"{st}:{ms:.0f}" for _, st, ms, _ in off))
    print("steps (ms), --replan auto: " + " ".join(f"{st}:{ms:.0f}" for _, st, ms, _ in auto))
    print(f"decision: {m[2]}")
    # The calibration: the measured step over the running plan re-simulated on the measured
    # cluster (straitc --evaluate-plan).
    cal = re.search(r"re-plan 1: new plan \(.*?\): (.*)", out)
    print(f"new plan: {cal[1] if cal else '?'}")
    print(f"{'':34}{'median step (ms)':>18}")
    print(f"{'before the slowdown':34}{before:18.1f}")
    print(f"{'after, --replan off':34}{after_off:18.1f}")
    print(f"{'after, slow steps until the stop':34}{med(slow_before):18.1f}")
    print(f"{'after, --replan auto (resumed)':34}{med(resumed):18.1f}")
    print(f"re-plan gain (off / auto after the slowdown): {after_off / med(resumed):.1f}x")
    print(f"slowdown after step {s}, decision at step {decided} ({decided - s} steps), "
          f"stop after step {stop}; straitc {straitc_s:.2f} s (the launcher waits, the ranks "
          f"train); switch (checkpoint, restart, resume) {switch_s:.2f} s")
    losses = {st: loss for _, st, _, loss in auto}
    print(f"loss: step 1 {losses[1]:.3f}, stop step {stop} {losses[stop]:.3f}, "
          f"first resumed {losses[stop + 1]:.3f}, last {losses[args.steps]:.3f}")


if __name__ == "__main__":
    main()
