#!/usr/bin/env python3
"""Strait against its baselines, measured: training throughput on an emulated multi-site cluster.

    sudo .venv/bin/python bench/runtime/baselines_wan.py [--build build]
        [--models gpt2-tiny,llama-tiny] [--steps 20] [--cap 0.35] [--global-batch 80]
        [--medium 200] [--slow 20,8] [--order sites|alpha] [--compress] [--tag T] [--keep DIR]

The cluster (written out in full, probed numbers included, and printed): three sites of CPU
ranks, one network namespace per site (runtime/scripts/wan-cluster.py --level site), every pair of
sites joined by its own veth pair shaped with tbf (no netem: no latency is emulated), ranks of one
site over the namespace's loopback:

    east (e0, e1) --- MEDIUM Mbit/s --- west (w0, w1)        FusionLLM-like: two sites on a
        \\                                  /                  medium link and one slow site
       SLOW_E Mbit/s                 SLOW_W Mbit/s
               \\                      /
                     south (s0)

The devices' file order (--order) is what uniform and PipeDream go by: "sites" lists e0, e1,
w0, w1, s0 (the slow site last), "alpha" the sites alphabetically (e0, e1, s0, w0, w1).

Every rank runs in a cpu cgroup of its own capped at --cap cores (wan-cluster.py --cpu-cap), so
each one computes like a device of fixed speed however many ranks share this machine's 2 cores
(5 x 0.35 = 1.75 cores). The devices' numbers come from strait-probe under the same cap, as many
probes at once as the cluster has ranks: the profile (per-kind efficiencies, GEMM curve, memory
bandwidth) and the model's kernel times (straitc --emit=kernels, the mean over the concurrent
probes, vTrain's method), scaled to the cap (the probe's medians of short kernels run inside the
cgroup's quota windows at a full core's speed: rates x cap, kernel times / cap); the intra-site
link is two probes (--link-rank) under the cap. Every strategy plans with that one file.

For each model and strategy (straitc --strategy strait|uniform|pipedream|dtfm, the same global
batch of 80 sequences of 64 tokens, IR batch 4, AdamW) the job is compiled and trained for --steps
steps on real text (out/text/train.bin, runtime/scripts/make-text-tokens.py). Measured iteration time: per step the
slowest rank's time from the rank logs, the median over the steps after the first 2. Printed per
strategy: the plan (stages x devices, micro-batches), predicted iteration time (straitc.json's
predicted_iteration_s, the simulator's steady state) and measured, measured / predicted, tokens/s;
then the measured speed-up of strait over each baseline beside the predicted one (the ratio of
the predicted iteration times). With --compress also every strategy with --compress auto (the
codecs straitc chose are printed). Namespaces and cgroups are named TAG-PID-... (--tag) and
removed on exit; the jobs and cluster files too unless --keep DIR.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAN = os.path.join(ROOT, "runtime", "scripts", "wan-cluster.py")
DATA = os.path.join(ROOT, "out", "text", "train.bin")
STRATEGIES = ["strait", "uniform", "pipedream", "dtfm"]
# name: (straitc input shape, sequence length)
MODELS = {"gpt2-tiny": ("input_ids=4x64", 64), "llama-tiny": ("input_ids=4x64", 64)}

_spec = importlib.util.spec_from_file_location("wan_cluster", WAN)
wan_cluster = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(wan_cluster)

CLUSTER = """name: h59-three-sites
# Emulated by bench/runtime/baselines_wan.py: one network namespace per site, tbf-shaped veth
# pairs between sites (no latency emulated), loopback inside a site; every device is one
# strait-run rank capped at {cap} cores (a cpu cgroup); profiles: strait-probe under that cap.
device_types:
  - {{name: cpu, kind: cpu, peak_tflops: {{fp32: 0.2}}, mem_bandwidth_gbs: 20, memory_gib: 8}}
devices:
{devices}links:
  intra_site: {{bandwidth_mbps: {intra_mbps:.0f}, latency_ms: {lat_ms:.4f}}}
  # One veth pair per pair of sites carries every rank pair's traffic between them: shared.
  sites:
    - {{between: [east, west], bandwidth_mbps: {medium}, latency_ms: {lat_ms:.4f}, shared: true}}
    - {{between: [east, south], bandwidth_mbps: {slow_e}, latency_ms: {lat_ms:.4f}, shared: true}}
    - {{between: [west, south], bandwidth_mbps: {slow_w}, latency_ms: {lat_ms:.4f}, shared: true}}
"""
RANKS = 5
# The devices in file order (uniform and PipeDream take them in this order; Strait and DT-FM
# order them by bandwidth): "sites" lists the fast sites first and the slow one last,
# "alpha" the sites alphabetically (east, south, west), the slow site between the fast ones.
ORDERS = {"sites": ["e0", "e1", "w0", "w1", "s0"], "alpha": ["e0", "e1", "s0", "w0", "w1"]}
SITE = {"e": "east", "w": "west", "s": "south"}


def sh(cmd, timeout=1800, **kw):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout, **kw)
    if p.returncode != 0:
        raise RuntimeError(f"failed: {' '.join(map(str, cmd))}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}")
    return p.stdout


def load():
    return float(open("/proc/loadavg").read().split()[0])


def capped(caps, name):
    """Popen keywords running a child in a capped cgroup of its own."""
    return {"preexec_fn": wan_cluster.CpuCaps.preexec(caps.make(name))}


def probe_link(probe, caps, work):
    """(Mbit/s, latency ms) of loopback Gloo between two probes under the cap."""
    store = tempfile.mkdtemp(prefix="link-store-", dir=work)
    procs = [subprocess.Popen([probe, "--quick", "--threads", "1", "--link-rank", str(r),
                               "--link-store", store], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, **capped(caps, f"link{r}"))
             for r in (0, 1)]
    out = [p.communicate(timeout=300) for p in procs]
    m = re.search(r"bandwidth_mbps: ([\d.e+-]+), latency_ms: ([\d.e+-]+)", out[0][0])
    if not m:
        raise RuntimeError(f"strait-probe --link-rank: {out[0]}")
    return float(m.group(1)), float(m.group(2))


def scale_profile(text, cap):
    """The probed profile of a device with `cap` of the core: rates x cap, kernel times / cap.

    The probe's medians of short kernels run inside the cgroup's quota windows at a full core's
    speed; a training step spans many windows and gets `cap` of the core on average."""
    def rates(m):
        return m.group(1) + ", ".join(f"{k}: {float(v) * cap:.4g}" for k, v in
                                      (e.split(": ") for e in m.group(2).split(", "))) + "}"

    def times(m):
        return m.group(1) + ", ".join(f"{k}: {float(v) / cap:.6g}" for k, v in
                                      (e.split(": ") for e in m.group(2).split(", "))) + "}"
    head, prof = text.split("profiles:", 1)
    for key in ("gemm_tflops", "peak_tflops", "mem_bandwidth_gbs"):
        prof = re.sub(rf"({key}: )([\d.e+-]+)", lambda m: m.group(1) + f"{float(m.group(2)) * cap:.4g}",
                      prof)
    for key in ("gemm_curve", "op_tflops", "op_gbs"):
        prof = re.sub(rf"({key}: \{{)([^}}]*)\}}", rates, prof)
    prof = re.sub(r"(kernel_times: \{)([^}]*)\}", times, prof)
    return head + "profiles:" + prof


def probe_devices(probe, caps, base, kernels, out, tag, cap):
    """Writes `out`: `base` plus the profile of RANKS concurrent capped probes (the first's
    profile, the mean kernel times), scaled to the cap (scale_profile)."""
    files = [f"{out}.{i}" for i in range(RANKS)]
    procs = [subprocess.Popen([probe, "--threads", "1", "--cluster", base, "--kernels", kernels,
                               "-o", files[i]], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, **capped(caps, f"{tag}-probe{i}"))
             for i in range(RANKS)]
    runs = []
    for p, f in zip(procs, files):
        _, err = p.communicate(timeout=900)
        if p.returncode:
            raise RuntimeError(f"strait-probe --kernels {kernels}: {err}")
        body = re.search(r", kernel_times: \{([^}]*)\}", open(f).read()).group(1)
        runs.append({k: float(v) for k, v in (e.split(": ") for e in body.split(", "))})
    mean = {k: statistics.mean(r[k] for r in runs) for k in runs[0]}
    text = open(files[0]).read()
    times = ", kernel_times: {" + ", ".join(f"{k}: {v:.6g}" for k, v in mean.items()) + "}"
    text = re.sub(r", kernel_times: \{[^}]*\}", lambda _m: times, text)
    with open(out, "w") as f:
        f.write(scale_profile(text, cap))


def compile_job(straitc, model, cluster, strategy, codec, gbatch, steps, job):
    shape, _ = MODELS[model]
    shutil.rmtree(job, ignore_errors=True)
    out = sh([straitc, os.path.join(ROOT, "models", model, model + ".onnx"), "--input-shape",
              shape, "--loss", "cross-entropy", "--optimizer", "adamw", "--lr", "0.003",
              "--global-batch", gbatch, "--cluster", cluster, "--strategy", strategy,
              "--compress", codec, "--total-steps", steps, "-o", job])
    plan = json.load(open(os.path.join(job, "plan.json")))
    predicted = json.load(open(os.path.join(job, "straitc.json")))["predicted_iteration_s"]
    # What --compress chose: straitc's "compressed ..." lines (none: nothing pays).
    chosen = "; ".join(m.strip() for m in re.findall(r"^straitc: compressed (.*)$", out, re.M))
    return plan, predicted, chosen or "-"


def run_job(run, cluster, cap, job, steps, tag):
    sh([sys.executable, WAN, "--cluster", cluster, "--level", "site", "--cpu-cap", cap,
        "--name-prefix", tag,
        "--strait-run", run, "--", job, "--data", DATA, "--data-format", "tokens-u16",
        "--steps", steps, "--threads", "1", "--timeout-ms", 300000], timeout=3600)
    times, losses = {}, {}
    for log in sorted(os.listdir(os.path.join(job, "logs"))):
        for it, ms, loss in re.findall(r"iteration (\d+)/\d+ time ([0-9.]+) ms(?: loss (\S+))?",
                                       open(os.path.join(job, "logs", log)).read()):
            times.setdefault(int(it), []).append(float(ms))
            if loss:
                losses.setdefault(int(it), []).append(float(loss))
    slowest = [max(times[i]) for i in sorted(times)]
    last = statistics.mean(losses[max(losses)]) if losses else float("nan")
    return statistics.median(slowest[2:]) / 1e3, last


def describe(plan):
    stages = "+".join(",".join(s["devices"]) for s in plan["stages"])
    return f"{len(plan['stages'])} st [{stages}] M={plan['micro_batches']}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--models", default="gpt2-tiny")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--cap", type=float, default=0.35, help="cores per rank (cpu cgroup)")
    ap.add_argument("--global-batch", type=int, default=80)
    ap.add_argument("--medium", type=int, default=200, help="east-west Mbit/s")
    ap.add_argument("--slow", default="20,8", help="east-south,west-south Mbit/s")
    ap.add_argument("--order", choices=sorted(ORDERS), default="sites",
                    help="device order in the cluster file (see ORDERS)")
    ap.add_argument("--strategies", default=",".join(STRATEGIES))
    ap.add_argument("--compress", action="store_true", help="also every strategy with --compress auto")
    ap.add_argument("--tag", default="straitbase",
                    help="prefix of the namespaces' and cgroups' names")
    ap.add_argument("--keep", default="", help="keep the cluster files and jobs in this folder")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("baselines_wan: needs root (network namespaces, tc, cpu cgroups)")
    straitc = os.path.join(a.build, "bin", "straitc")
    run = os.path.join(a.build, "runtime", "tools", "strait-run")
    probe = os.path.join(a.build, "runtime", "tools", "strait-probe")
    if not os.path.exists(DATA):
        sh([sys.executable, os.path.join(ROOT, "runtime", "scripts", "make-text-tokens.py"),
            os.path.dirname(DATA)])
    work = a.keep or tempfile.mkdtemp(prefix="strait-baselines-wan-")
    os.makedirs(work, exist_ok=True)
    caps = wan_cluster.CpuCaps(f"{a.tag}-{os.getpid()}", a.cap)
    slow_e, slow_w = (int(x) for x in a.slow.split(","))
    strategies = a.strategies.split(",")
    codecs = ["none", "auto"] if a.compress else ["none"]
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # remove the cgroups on kill
    try:
        print(f"load average at start: {open('/proc/loadavg').read().strip()}")
        intra, lat = probe_link(probe, caps, work)
        base = os.path.join(work, "cluster-base.yaml")
        with open(base, "w") as f:
            devices = "".join(f"  - {{name: {d}, type: cpu, host: {d}, site: {SITE[d[0]]}}}\n"
                              for d in ORDERS[a.order])
            f.write(CLUSTER.format(cap=a.cap, intra_mbps=intra, lat_ms=lat, medium=a.medium,
                                   slow_e=slow_e, slow_w=slow_w, devices=devices))
        for model in a.models.split(","):
            kernels = os.path.join(work, f"{model}.kernels.pb")
            sh([straitc, os.path.join(ROOT, "models", model, model + ".onnx"), "--input-shape",
                MODELS[model][0], "--loss", "cross-entropy", "--optimizer", "adamw",
                "--emit=kernels", "-o", kernels])
            cluster = os.path.join(work, f"cluster-{model}.yaml")
            probe_devices(probe, caps, base, kernels, cluster, model, a.cap)
            print(f"\n== {model}: cluster {cluster} (intra-site {intra:.0f} Mbit/s, "
                  f"{lat:.3f} ms probed)")
            print(f"devices in file order: {', '.join(ORDERS[a.order])}; cap {a.cap} cores a rank")
            print(open(base).read().split("links:")[1].rstrip())
            seq = MODELS[model][1]
            print(f"\n| strategy | --compress | codecs chosen | plan | predicted (ms) | measured (ms) | measured / "
                  f"predicted | tokens/s | final loss | load |")
            print("|---|---|---|---|---|---|---|---|---|---|")
            res = {}
            for codec in codecs:
                for strategy in strategies:
                    job = os.path.join(work, f"job-{model}-{strategy}-{codec}")
                    plan, pred, chosen = compile_job(straitc, model, cluster, strategy, codec,
                                             a.global_batch, a.steps, job)
                    l0 = load()
                    meas, loss = run_job(run, cluster, a.cap, job, a.steps, a.tag)
                    l1 = load()
                    res[(strategy, codec)] = (pred, meas)
                    print(f"| {strategy} | {codec} | {chosen} | {describe(plan)} | {pred * 1e3:.1f} | "
                          f"{meas * 1e3:.1f} | {meas / pred:.2f} | "
                          f"{a.global_batch * seq / meas:.0f} | {loss:.3f} | {l0:.1f}-{l1:.1f} |",
                          flush=True)
            print("\n| strait | baseline | measured speed-up | predicted speed-up |")
            print("|---|---|---|---|")
            for codec in codecs:
                if ("strait", codec) not in res:
                    continue
                sp, sm = res[("strait", codec)]
                for (strategy, bcodec), (bp, bm) in res.items():
                    if strategy == "strait":
                        continue
                    print(f"| strait {codec} | {strategy} {bcodec} | {bm / sm:.2f}x | {bp / sp:.2f}x |")
    finally:
        caps.remove()
        if not a.keep:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
