#!/usr/bin/env python3
"""Iteration time the planner predicts against the time strait-run measures, on this machine.

    .venv/bin/python bench/planner/prediction_error.py [--build build] [--steps 12] [--rounds 2]

1. `strait-probe --threads 1` measures this machine's CPU kernels into a 2-device cluster file
   (one host; the loopback link between the two ranks measured by two `strait-probe --link-rank`
   processes over Gloo). The probed file's profile states its rates (peak_tflops,
   mem_bandwidth_gbs); the "nominal" variant drops them, as strait-probe wrote profiles before
   session 10 (efficiencies applied to the type's nominal 0.2 TFLOP/s and 20 GB/s).
   The "kernels" variant adds the job's own kernel times (vTrain's method): `straitc
   --emit=kernels` lists the distinct kernels of the job's training step and `strait-probe
   --threads 1 --kernels` times each (--rounds times, keeping each kernel's lowest median); the
   planner costs those ops at their measured times.
2. Each job is compiled with `straitc --cluster` (plan.json's `iteration_s` is the prediction)
   and trained `--steps` steps with `--threads 1` (one core per rank: 2 ranks on the 2 cores);
   measured = the median of the launcher's step times (the slowest rank), first 2 steps left
   out. Each job is measured --rounds times, keeping the lower median.

Prints per job: predicted (kernel times, probed and nominal profile), measured, and measured /
predicted, and the seconds strait-probe took to time the job's kernels.
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
    ("llama-tiny 16x64, 1 rank", "llama-tiny",
     ["--input-shape", "input_ids=16x64", "--optimizer", "adamw"], 1),
    ("digits-cnn 256, 1 rank", "digits-cnn",
     ["--input-shape", "images=256x1x8x8", "--optimizer", "sgd"], 1),
]


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw)


def probe_link(probe, work):
    """(Mbit/s, latency ms) of the loopback link between two Gloo ranks."""
    store = os.path.join(work, "link-store")
    os.makedirs(store, exist_ok=True)
    procs = [subprocess.Popen([probe, "--quick", "--threads", "1", "--link-rank", str(r),
                               "--link-store", store], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in (0, 1)]
    out = [p.communicate(timeout=300)[0] for p in procs]
    m = re.search(r"bandwidth_mbps: ([\d.e+-]+), latency_ms: ([\d.e+-]+)", out[0])
    assert m, out[0]
    return float(m.group(1)), float(m.group(2))


def measure(run, job, steps, rounds):
    best = None
    for _ in range(rounds):
        p = sh([run, job, "--steps", str(steps), "--threads", "1"])
        times = [float(t) for t in re.findall(r"^step \d+/\d+ .*? time ([\d.]+) ms", p.stdout, re.M)]
        med = statistics.median(times[2:])
        best = med if best is None else min(best, med)
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    straitc = os.path.join(a.build, "bin", "straitc")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    probe = os.path.join(a.build, "runtime", "tools", "strait-probe")
    work = tempfile.mkdtemp(prefix="strait-prediction-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    bw, lat = probe_link(probe, work)
    clusters = {}
    for n in (1, 2):
        clusters[n] = os.path.join(work, f"base{n}.yaml")
        with open(clusters[n], "w") as f:
            f.write(cpu_cluster("two-cpu", [(f"rank{r}", "h0", "local") for r in range(n)],
                                f"  intra_host: {{bandwidth_mbps: {bw:.1f}, latency_ms: {lat:.4f}}}\n"))
    probed2 = os.path.join(work, "probed2.yaml")
    sh([probe, "--threads", "1", "--cluster", clusters[2], "-o", probed2])
    profile = open(probed2).read().split("profiles:")[1]
    files = {}
    no_curve = lambda t: re.sub(r", gemm_curve: \{[^}]*\}", "", t)
    for n, base in clusters.items():
        text = open(base).read() + "profiles:" + profile
        for label, body in (("probed", text), ("flat", no_curve(text)),
                            ("nominal", re.sub(r", peak_tflops: [\d.e+-]+, mem_bandwidth_gbs: [\d.e+-]+",
                                               "", no_curve(text)))):
            files[n, label] = os.path.join(work, f"{label}{n}.yaml")
            with open(files[n, label], "w") as f:
                f.write(body)
    line = re.search(r"^  - \{type: cpu.*$", profile, re.M).group(0)
    print(f"loopback link: {bw:.0f} Mbit/s, {lat:.3f} ms; profile:{line[3:]}")
    print()
    print("| job | predicted, kernel times (ms) | predicted, probed profile (ms) "
          "| predicted, without the GEMM curve (ms) | predicted, nominal peak (ms) | measured (ms) "
          "| measured / predicted (kernel times) | (probed) | (without the curve) | (nominal) "
          "| kernels timed | probe (s) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for i, (name, model, flags, devices) in enumerate(JOBS):
        onnx = os.path.join(MODELS, model, model + ".onnx")
        # The job's kernels, timed with the job's thread count, added to the probed profile.
        kernels = os.path.join(work, f"job{i}.kernels.pb")
        sh([straitc, onnx, "--loss", "cross-entropy", *flags, "--emit=kernels", "-o", kernels])
        # Timed --rounds times, keeping each kernel's lowest median, as the step's lower median.
        best, seconds = {}, 0.0
        for _ in range(a.rounds):
            p = sh([probe, "--threads", "1", "--kernels", kernels])
            body = re.search(r", kernel_times: \{([^}]*)\}", p.stdout).group(1)
            for k, v in (e.split(": ") for e in body.split(", ")):
                best[k] = min(best.get(k, float("inf")), float(v))
            seconds += float(re.search(r"timed \d+ kernels of .* in ([\d.e+-]+) s", p.stderr).group(1))
        times = ", kernel_times: {" + ", ".join(f"{k}: {v:.6g}" for k, v in best.items()) + "}"
        files[devices, "kernels"] = os.path.join(work, f"kernels{i}.yaml")
        with open(files[devices, "kernels"], "w") as f:
            f.write(re.sub(r"\}\}\n?$", "}" + times + "}\n", open(files[devices, "probed"]).read()))
        pred = {}
        for label in ("kernels", "probed", "flat", "nominal"):
            job = os.path.join(work, f"job{i}-{label}")
            sh([straitc, onnx, "--loss", "cross-entropy", *flags, "--cluster",
                files[devices, label], "-o", job])
            plan = json.load(open(os.path.join(job, "plan.json")))
            used = sum(len(s["devices"]) for s in plan["stages"])
            assert used == devices, (name, used)
            pred[label] = plan["iteration_s"] * 1e3
            if label == "kernels":
                measured_kernels = f"{plan['kernels_measured']}/{plan['kernels']}"
        measured = measure(run, os.path.join(work, f"job{i}-probed"), a.steps, a.rounds)
        print(f"| {name} | {pred['kernels']:.1f} | {pred['probed']:.1f} | {pred['flat']:.1f} | "
              f"{pred['nominal']:.1f} | {measured:.1f} | {measured / pred['kernels']:.2f} | "
              f"{measured / pred['probed']:.2f} | {measured / pred['flat']:.2f} | "
              f"{measured / pred['nominal']:.2f} | {measured_kernels} | {seconds:.1f} |",
              flush=True)


if __name__ == "__main__":
    main()
