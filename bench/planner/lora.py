#!/usr/bin/env python3
"""Full fine-tuning against LoRA (straitc --lora R) on the Nebula-I-like cluster
(examples/clusters/nebula-2site.yaml: 16 V100s and 16 Ascend 910s, two sites joined by one
100 Mbit/s link): the planner's plan and predicted iteration time, and the bytes each replica
all-reduces per step (plan.json grad_bytes), for the imported GPT-2 and LLaMA-7B (shape-only).

Each case is planned by the planner; GPT-2 also with one stage forced over all 32 devices
(--num-stages 1: data parallel across the slow link). "all-reduce MB" is the gradient bytes of
all stages together (each stage's replicas all-reduce their stage's share every step).

Usage: bench/planner/lora.py [--build build] [--ranks 0,8,16]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLUSTER = os.path.join(ROOT, "examples", "clusters", "nebula-2site.yaml")
# model, input, global batch, extra flags, also forced over all 32 devices
MODELS = [("gpt2", "input_ids=8x1024", 512, [], True),
          ("llama-7b", "input_ids=1x2048", 64, ["--precision", "bf16"], False)]


def plan(straitc, model, spec, batch, extra, rank, forced):
    path = os.path.join(ROOT, "models", model, model + ".onnx")
    flags = ["--lora", str(rank)] if rank else []
    if forced:
        flags += ["--num-stages", "1"]
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        t0 = time.perf_counter()
        p = subprocess.run([straitc, path, "--shape-only", "--input-shape", spec, "--loss",
                            "cross-entropy", "--optimizer", "adamw", "--emit=plan", "--cluster",
                            CLUSTER, "--global-batch", str(batch), *extra, *flags,
                            "--plan-json", f.name], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            return None, wall, (p.stderr.strip().splitlines() or ["?"])[-1]
        return json.load(open(f.name)), wall, ""


def sites(devices):
    return "+".join(sorted({"gpu" if d.startswith("gpu") else "npu" for d in devices}))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--ranks", default="0,8,16")
    args = ap.parse_args()
    straitc = os.path.join(args.build, "bin", "straitc")
    ranks = [int(r) for r in args.ranks.split(",")]
    print("| model | training | plan | stages x replicas | sites | all-reduce MB/step "
          "| all-reduce s | iteration s | samples/s | vs full | plan s |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for model, spec, batch, extra, force in MODELS:
        for forced in (False, True) if force else (False,):
            base = None
            for r in ranks:
                p, wall, err = plan(straitc, model, spec, batch, extra, r, forced)
                name = f"LoRA r={r}" if r else "full"
                how = "forced 1 stage" if forced else "planner"
                if p is None or not p.get("feasible", True):
                    why = err or p.get("message", "")
                    print(f"| {model} | {name} | {how} | - | - | - | - | infeasible: {why[:80]} "
                          f"| - | - | {wall:.2f} |")
                    continue
                st = p["stages"]
                reps = sorted({len(s["devices"]) for s in st})
                shape = f"{len(st)} x {'/'.join(map(str, reps))}"
                used = sites([d for s in st for d in s["devices"]])
                mb = sum(s["grad_bytes"] for s in st) / 1e6
                ar = max(s["allreduce_s"] for s in st)
                it = p["iteration_s"]
                if r == 0:
                    base = it
                ratio = f"{base / it:.2f}x" if base else "-"
                print(f"| {model} | {name} | {how} | {shape} | {used} | {mb:.1f} | {ar:.4f} | "
                      f"{it:.3f} | {p['throughput_samples_per_s']:.1f} | {ratio} | {wall:.2f} |")


if __name__ == "__main__":
    main()
