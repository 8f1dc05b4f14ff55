#!/usr/bin/env python3
"""Iteration time the planner predicts against the time strait-run measures, on this machine.

    .venv/bin/python bench/planner/prediction_error.py [--build build] [--steps 12] [--rounds 2]
                                                       [--repeats 3]

Each job is predicted and measured --repeats times, the jobs in turn (job 1, 2, ..., 7, then
again; --jobs picks some), so that every repeat of a job meets the machine in another state; within one repeat the
job's kernels are timed and its step measured right after each other, --rounds times
alternating (probe, step, probe, step), so the ratio of one repeat compares two measurements
taken within seconds of each other:

1. Per repeat, `strait-probe --link-rank` (two processes over Gloo) measures the loopback link
   between the two ranks (latency: the fastest round trip / 2; the all-reduce's per-step latency
   fitted from all-reduces of 4 KiB-4 MiB, unless --no-allreduce-latency) and
   `strait-probe --threads 1` the
   profile of one representative shape per kind ("probed").
2. `straitc --emit=kernels` lists the distinct kernels of the job's training step;
   `strait-probe --threads 1 --kernels` times them (vTrain's method), as many probe processes at
   once as the job's ranks compute at once (the replicas of a stage; all ranks of a pipeline
   with several micro-batches), their mean per kernel; each kernel keeps its lowest time over
   the rounds. The job is compiled with those times (`straitc --cluster`): the prediction is
   straitc.json's `predicted_iteration_s`, the simulator's steady-state period of back-to-back
   iterations; plan.json's `iteration_s` (the planner's one iteration from an empty pipeline)
   is printed beside it.
3. `strait-run --steps N --threads 1` trains the job; measured = the median of the launcher's
   step times (the slowest rank), the first 2 steps left out, the lowest over the rounds.

Every tool runs at niceness --nice (default -19) in a session of its own: with the kernel's
autogroups the scheduler shares the cores between sessions before it looks at niceness, so the
probe and the ranks then keep their cores while other sessions build and test (at load 7-9,
without it, one rank's step measured 1.6-2.1x its kernels' time while a 2-stage job, whose ranks
sleep in Gloo and get their core back first on waking, measured 0.8x). --nice 0 runs them as
started.

Prints one line per job and repeat (with the 1-minute load average before and after), then per
job the median over the repeats of measured / predicted, its range, and the load range.
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
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
sys.path.insert(0, os.path.join(ROOT, "python", "tests"))
from jobutil import cpu_cluster  # noqa: E402


JOBS = [
    # name, model, straitc flags, devices used
    ("gpt2-tiny 16x64, 1 rank", "gpt2-tiny",
     ["--input-shape", "input_ids=16x64", "--optimizer", "adamw"], 1),
    ("gpt2-tiny 8x64 x 2 replicas", "gpt2-tiny",
     ["--input-shape", "input_ids=8x64", "--optimizer", "adamw", "--global-batch", "16",
      "--num-stages", "1"], 2),
    ("gpt2-tiny 16x64, 2 stages", "gpt2-tiny",
     ["--input-shape", "input_ids=16x64", "--optimizer", "adamw", "--global-batch", "16",
      "--num-stages", "2"], 2),
    ("gpt2-tiny 4x64 x 4 replicas", "gpt2-tiny",
     ["--input-shape", "input_ids=4x64", "--optimizer", "adamw", "--global-batch", "16",
      "--num-stages", "1"], 4),
    ("gpt2-tiny 4x64, 2 stages x 2 replicas", "gpt2-tiny",
     ["--input-shape", "input_ids=4x64", "--optimizer", "adamw", "--global-batch", "16",
      "--num-stages", "2"], 4),
    ("llama-tiny 16x64, 1 rank", "llama-tiny",
     ["--input-shape", "input_ids=16x64", "--optimizer", "adamw"], 1),
    ("digits-cnn 256, 1 rank", "digits-cnn",
     ["--input-shape", "images=256x1x8x8", "--optimizer", "sgd"], 1),
]


NICE = 0  # --nice: each tool runs in a session (autogroup) of its own at this niceness


def boost():
    """In the child before exec: its own autogroup (start_new_session) at niceness NICE."""
    try:  # with autogroups the scheduler shares the cores between sessions first
        with open("/proc/self/autogroup", "w") as f:
            f.write(str(NICE))
    except OSError:
        pass
    os.setpriority(os.PRIO_PROCESS, 0, NICE)


def kw():
    return dict(start_new_session=True, preexec_fn=boost) if NICE else {}


def sh(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw())


def load():
    return float(open("/proc/loadavg").read().split()[0])


def probe_link(probe, work):
    """(Mbit/s, latency ms, median round trip ms, all-reduce step latency ms) of the loopback
    link between two Gloo ranks."""
    store = tempfile.mkdtemp(prefix="link-store-", dir=work)
    procs = [subprocess.Popen([probe, "--quick", "--threads", "1", "--link-rank", str(r),
                               "--link-store", store], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, **kw()) for r in (0, 1)]
    out = [p.communicate(timeout=300) for p in procs]
    m = re.search(r"bandwidth_mbps: ([\d.e+-]+), latency_ms: ([\d.e+-]+)", out[0][0])
    assert m, out[0]
    trip = re.search(r"median ([\d.e+-]+)", out[0][1])
    ar = re.search(r"allreduce_latency_ms: ([\d.e+-]+)", out[0][0])
    return (float(m.group(1)), float(m.group(2)), float(trip.group(1)) if trip else float("nan"),
            float(ar.group(1)) if ar else float("nan"))


def time_kernels(probe, kernels, concurrent):
    """{signature: seconds}: `concurrent` probes at once, the mean of their medians per kernel."""
    procs = [subprocess.Popen([probe, "--threads", "1", "--kernels", kernels],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw())
             for _ in range(concurrent)]
    runs = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        if p.returncode:
            raise RuntimeError(f"strait-probe --kernels {kernels}: {err}")
        body = re.search(r", kernel_times: \{([^}]*)\}", out).group(1)
        runs.append({k: float(v) for k, v in (e.split(": ") for e in body.split(", "))})
    return {k: statistics.mean(r[k] for r in runs) for k in runs[0]}


def step_ms(run, job, steps):
    p = sh([run, job, "--steps", str(steps), "--threads", "1"])
    times = [float(t) for t in re.findall(r"^step \d+/\d+ .*? time ([\d.]+) ms", p.stdout, re.M)]
    return statistics.median(times[2:])


def compile_job(straitc, onnx, flags, cluster, out):
    sh([straitc, onnx, "--loss", "cross-entropy", *flags, "--cluster", cluster, "-o", out])
    plan = json.load(open(os.path.join(out, "plan.json")))
    record = json.load(open(os.path.join(out, "straitc.json")))
    return plan, record["predicted_iteration_s"] * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2, help="probe/step alternations per repeat")
    ap.add_argument("--repeats", type=int, default=3, help="times each job is measured")
    ap.add_argument("--no-allreduce-latency", action="store_true",
                    help="leave out the probe's all-reduce step latency (the link's latency "
                         "prices every ring step, as before session 14)")
    ap.add_argument("--jobs", default="",
                    help="comma-separated job numbers (1-based) to run; default all")
    ap.add_argument("--nice", type=int, default=-19,
                    help="niceness of the probes and the jobs (default -19; 0: as started)")
    a = ap.parse_args()
    global NICE, JOBS
    if a.jobs:
        JOBS = [JOBS[int(x) - 1] for x in a.jobs.split(",")]
    priority = "normal"
    if a.nice:
        try:  # a child that cannot raise its priority fails: find out here
            subprocess.run(["true"], check=True, start_new_session=True,
                           preexec_fn=lambda: os.setpriority(os.PRIO_PROCESS, 0, a.nice))
            NICE = a.nice
            priority = f"nice {a.nice}, a session (autogroup) per tool"
        except (subprocess.SubprocessError, OSError):
            priority = f"normal (nice {a.nice} not permitted)"
    straitc = os.path.join(a.build, "bin", "straitc")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    probe = os.path.join(a.build, "runtime", "tools", "strait-probe")
    work = tempfile.mkdtemp(prefix="strait-prediction-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    lists = {}
    for i, (name, model, flags, devices) in enumerate(JOBS):
        lists[i] = os.path.join(work, f"job{i}.kernels.pb")
        sh([straitc, os.path.join(MODELS, model, model + ".onnx"), "--loss", "cross-entropy",
            *flags, "--emit=kernels", "-o", lists[i]])
    print(f"priority: {priority}; load average at start: {open('/proc/loadavg').read().strip()}")
    print()
    print("| repeat | job | link latency ms (median trip) all-reduce step ms | predicted, kernel times (ms) "
          "| planner's iteration_s (ms) | predicted, probed profile (ms) | measured (ms) "
          "| measured / predicted | (probed) | kernels timed | concurrent probes | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    results = {i: [] for i in range(len(JOBS))}
    for rep in range(a.repeats):
        bw, lat, trip, arlat = probe_link(probe, work)
        if a.no_allreduce_latency or arlat != arlat:
            arlat, arfield = float("nan"), ""
        else:
            arfield = f", allreduce_latency_ms: {arlat:.4f}"
        clusters = {}
        for n in sorted({j[3] for j in JOBS}):
            base = cpu_cluster("two-cpu", [(f"rank{r}", "h0", "local") for r in range(n)],
                               f"  intra_host: {{bandwidth_mbps: {bw:.1f}, latency_ms: {lat:.4f}"
                               f"{arfield}}}\n")
            clusters[n] = os.path.join(work, f"r{rep}-base{n}.yaml")
            with open(clusters[n], "w") as f:
                f.write(base)
        probed2 = os.path.join(work, f"r{rep}-probed2.yaml")
        sh([probe, "--threads", "1", "--cluster", clusters[2], "-o", probed2])
        profile = open(probed2).read().split("profiles:")[1]
        probed = {}
        for n, base in clusters.items():
            probed[n] = os.path.join(work, f"r{rep}-probed{n}.yaml")
            with open(probed[n], "w") as f:
                f.write(open(base).read() + "profiles:" + profile)
        for i, (name, model, flags, devices) in enumerate(JOBS):
            onnx = os.path.join(MODELS, model, model + ".onnx")
            load0 = load()
            job = os.path.join(work, f"r{rep}-job{i}-probed")
            plan_p, pred_p = compile_job(straitc, onnx, flags, probed[devices], job)
            used = sum(len(s["devices"]) for s in plan_p["stages"])
            assert used == devices, (name, used)
            concurrent = (used if plan_p["micro_batches"] > 1
                          else max(len(s["devices"]) for s in plan_p["stages"]))
            best, measured, ran = {}, float("inf"), None
            for _ in range(a.rounds):  # probe and step, alternating
                for k, v in time_kernels(probe, lists[i], concurrent).items():
                    best[k] = min(best.get(k, float("inf")), v)
                kfile = os.path.join(work, f"r{rep}-kernels{i}.yaml")
                times = ", kernel_times: {" + ", ".join(f"{k}: {v:.6g}" for k, v in best.items())
                with open(kfile, "w") as f:
                    f.write(re.sub(r"\}\}\n?$", "}" + times + "}}\n", open(probed[devices]).read()))
                plan_k, pred_k = compile_job(straitc, onnx, flags, kfile,
                                             os.path.join(work, f"r{rep}-job{i}-kernels"))
                if ran is None:  # the job that runs: planned with the first round's times
                    ran = os.path.join(work, f"r{rep}-job{i}-ran")
                    shutil.copytree(os.path.join(work, f"r{rep}-job{i}-kernels"), ran)
                measured = min(measured, step_ms(run, ran, a.steps))
            shape = lambda p: (p["micro_batches"], [(s["blocks"], s["devices"]) for s in p["stages"]])
            assert shape(plan_k) == shape(json.load(open(os.path.join(ran, "plan.json")))), name
            load1 = load()
            ratio = measured / pred_k
            results[i].append((ratio, measured / pred_p, pred_k, measured, load0, load1))
            print(f"| {rep + 1} | {name} | {lat:.3f} ({trip:.3f}) {arlat:.3f} | {pred_k:.1f} | "
                  f"{plan_k['iteration_s'] * 1e3:.1f} | {pred_p:.1f} | {measured:.1f} | "
                  f"{ratio:.2f} | {measured / pred_p:.2f} | "
                  f"{plan_k['kernels_measured']}/{plan_k['kernels']} | {concurrent} | "
                  f"{load0:.1f}-{load1:.1f} |", flush=True)
    print()
    print("| job | predicted, median (ms) | measured, median (ms) | measured / predicted, median "
          "| range | (probed profile) | load |")
    print("|---|---|---|---|---|---|---|")
    for i, (name, *_rest) in enumerate(JOBS):
        r = results[i]
        ratios = [x[0] for x in r]
        loads = [x[4] for x in r] + [x[5] for x in r]
        print(f"| {name} | {statistics.median(x[2] for x in r):.1f} | "
              f"{statistics.median(x[3] for x in r):.1f} | {statistics.median(ratios):.2f} | "
              f"{min(ratios):.2f}-{max(ratios):.2f} | "
              f"{statistics.median(x[1] for x in r):.2f} | {min(loads):.1f}-{max(loads):.1f} |")


if __name__ == "__main__":
    main()
