#!/usr/bin/env python3
"""Plans the imported GPT-2 and ResNet-101 (real ONNX exports, IR cost graphs
through straitc) on every bundled cluster with each strategy, and prints the
predicted throughput of Strait's plan over each baseline's.

Usage: bench/planner/imported.py [--build build] [--global-batch 512]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = [("gpt2", "input_ids=8x1024"), ("resnet101", "pixel_values=8x3x224x224")]
STRATEGIES = ["strait", "uniform", "pipedream", "dtfm"]


def plan(straitc, model, spec, cluster, strategy, batch):
    path = os.path.join(ROOT, "models", model, model + ".onnx")
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        t0 = time.perf_counter()
        p = subprocess.run([straitc, path, "--shape-only", "--input-shape", spec,
                            "--emit=plan", "--cluster", cluster, "--strategy", strategy,
                            "--global-batch", str(batch), "--plan-json", f.name],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            return None, wall, p.stderr.strip().splitlines()[-1]
        return json.load(open(f.name)), wall, ""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--global-batch", type=int, default=512)
    args = ap.parse_args()
    straitc = os.path.join(args.build, "bin", "straitc")
    print(f"{'cluster':22} {'model':10} {'strait samples/s':>17} {'stages':>6} "
          f"{'vs uniform':>11} {'vs pipedream':>13} {'vs dtfm':>8} {'plan s':>7}")
    for cluster in sorted(glob.glob(os.path.join(ROOT, "examples", "clusters", "*.yaml"))):
        name = os.path.basename(cluster)[:-5]
        for model, spec in MODELS:
            results = {}
            for s in STRATEGIES:
                results[s] = plan(straitc, model, spec, cluster, s, args.global_batch)
            ours, wall, err = results["strait"]
            if ours is None:
                print(f"{name:22} {model:10} no plan: {err}")
                continue
            cells = []
            for s in STRATEGIES[1:]:
                other = results[s][0]
                if other is None:
                    cells.append("infeasible")
                else:
                    cells.append(f"{ours['throughput_samples_per_s'] / other['throughput_samples_per_s']:.2f}x")
            print(f"{name:22} {model:10} {ours['throughput_samples_per_s']:17.1f} "
                  f"{len(ours['stages']):6d} {cells[0]:>11} {cells[1]:>13} {cells[2]:>8} "
                  f"{wall:7.2f}")


if __name__ == "__main__":
    sys.exit(main())
