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

With --num-stages N the job is compiled in N pipeline stages (8 x 64 tokens a micro-batch, 4
micro-batches): the re-plan, whose recorded command forces the stages, gets the same plan back
and keeps it; the bench then prints only the calibration. Either way it prints the running plan's
step re-simulated on the measured cluster (straitc --evaluate-plan, the calibration's
denominator) next to the approximation used before session 16 (the prediction plus, per host
pair, the bytes a step at the measured rate minus at the assumed one), each with the calibration
(the measured step over it) it gives.

usage (from the repository root, after building build/):
  sudo .venv/bin/python bench/runtime/replan.py [--steps 40] [--slow-after 10] [--slow-mbps 10]
      [--num-stages N]
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


def compile_job(tmp, file_mbps, stages=0):
    with open(os.path.join(tmp, "two-hosts.yaml"), "w") as f:
        f.write(jobutil.cpu_cluster("two-hosts", [("c0", "h0", "s"), ("c1", "h1", "s")],
                                    f"  intra_site: {{bandwidth_mbps: {file_mbps}, "
                                    "latency_ms: 0.1}\n"))
    shutil.rmtree(os.path.join(tmp, "job"), ignore_errors=True)
    forced = ["--num-stages", str(stages)] if stages else []
    p = subprocess.run([os.path.abspath(jobutil.STRAITC), jobutil.GPT2_TINY, "--input-shape",
                        f"input_ids={8 if stages else 16}x64", "--global-batch", "32", "--loss",
                        "cross-entropy", "--compress", "auto", "--cluster", "two-hosts.yaml",
                        *forced, "-o", "job"],
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


def calibration(job, out, decided, file_mbps):
    """The re-plan's calibration line, and the approximation before session 16 for the same
    step: the prediction plus the link's bytes a step (the larger direction, rank 0's log) at the
    measured rate minus at the assumed one."""
    line = re.search(r"re-plan 1: new plan \(.*?\): predicted \S+ s x \S+ = \S+ ms a step, "
                     r"measured now (\S+) ms .*?current plan's (\S+) s re-simulated", out)
    bw = re.search(r"re-plan 1 at step \d+: link 0-1 \S+ delivers ([\d.]+) (M|G)bit/s", out)
    if not (line and bw):
        print("calibration: ?")
        return
    now_s, resim = float(line[1]) / 1e3, float(line[2])
    measured = float(bw[1]) * (1e6 if bw[2] == "M" else 1e9) / 8
    with open(os.path.join(job, "straitc.json")) as f:
        predicted = __import__("json").load(f)["predicted_iteration_s"]
    with open(os.path.join(job, "logs", "rank0.log")) as f:
        at = re.search(rf"iteration {decided}/\d+ .* sent 1:(\d+) recv 1:(\d+)", f.read())
    nbytes = max(int(at[1]), int(at[2]))
    approx = predicted + nbytes / measured - nbytes / (file_mbps * 1e6 / 8)
    print("new plan: " + re.search(r"re-plan 1: new plan \(.*?\): (.*)", out)[1])
    print(f"calibration: measured step {now_s:.4f} s; running plan re-simulated on the measured "
          f"cluster {resim:.4f} s (x{now_s / resim:.2f}); approximation before session 16 "
          f"{approx:.4f} s (x{now_s / approx:.2f}; {predicted:.4f} s predicted + {nbytes} B a "
          f"step at {measured * 8 / 1e6:.2f} Mbit/s)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--slow-after", type=int, default=10)
    ap.add_argument("--slow-mbps", type=float, default=10)
    ap.add_argument("--file-mbps", type=float, default=4000)
    ap.add_argument("--num-stages", type=int, default=0)
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
    job, plan = compile_job(tmp, args.file_mbps, args.num_stages)
    print(f"job: {plan}")
    s = args.slow_after
    med = lambda xs: statistics.median(xs) if xs else float("nan")  # noqa: E731

    off, _ = run(ns, job, data, args, ["--replan", "off"])
    before = med([ms for _, st, ms, _ in off if 2 <= st <= s])
    after_off = med([ms for _, st, ms, _ in off if st >= s + 3])

    job, _ = compile_job(tmp, args.file_mbps, args.num_stages)
    auto, out = run(ns, job, data, args, ["--replan", "auto", "--replan-factor", "30",
                                          "--replan-window", "3"])
    m = re.search(r"re-plan 1 at step (\d+): (.*)", out)
    sw = re.search(r"checkpoints after step (\d+)", out)
    if not m:
        sys.exit("no re-plan:\n" + out[-3000:])
    calibration(job, out, int(m[1]), args.file_mbps)
    if not sw:
        print("steps (ms), --replan auto: " + " ".join(f"{st}:{ms:.0f}" for _, st, ms, _ in auto))
        print("the re-plan kept the plan" if "keeping the current plan" in out else out[-3000:])
        return
    decided, stop = int(m[1]), int(sw[1])
    straitc_s = float(re.search(r"new plan \(straitc ([\d.]+) s", out)[1])
    resumed = [ms for _, st, ms, _ in auto if st >= stop + 2]
    slow_before = [ms for _, st, ms, _ in auto if s + 2 <= st <= stop]
    at = {st: (t, ms) for t, st, ms, _ in auto}
    switch_s = at[stop + 1][0] - at[stop][0] - at[stop + 1][1] / 1e3
    print("steps (ms), --replan off: " + " ".join(f"{st}:{ms:.0f}" for _, st, ms, _ in off))
    print("steps (ms), --replan auto: " + " ".join(f"{st}:{ms:.0f}" for _, st, ms, _ in auto))
    print(f"decision: {m[2]}")
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
