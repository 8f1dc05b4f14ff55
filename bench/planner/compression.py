#!/usr/bin/env python3
"""Predicted throughput of Strait's plan without and with compression on the
slow links (straitc --emit=plan --compress=auto), for the imported GPT-2 on
the bundled FusionLLM, DT-FM and Nebula-like clusters. Both figures are the
simulator's, on the same plan, in the same run: the ratio isolates the codecs
(dist-insert-compression's AdaTopK-like choice per link). The planner does
not yet plan with compression in mind (the plan is the uncompressed optimum).
The last column compares Strait with codecs to the DT-FM-like baseline's
plan without them (DT-FM does not compress), simulated in the same run.

Usage: bench/planner/compression.py [--build build] [--global-batch 512]
           [--seq 128] [--compress auto|int8|topk:0.01|...]
"""
import argparse
import glob
import json
import os
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODEL = "gpt2"


def plan(straitc, cluster, batch, seq, compress, strategy="strait"):
    path = os.path.join(ROOT, "models", MODEL, MODEL + ".onnx")
    spec = f"input_ids=8x{seq}"
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        t0 = time.perf_counter()
        p = subprocess.run([straitc, path, "--shape-only", "--input-shape", spec,
                            "--emit=plan", "--cluster", cluster, "--global-batch", str(batch),
                            "--compress", compress, "--strategy", strategy,
                            "--plan-json", f.name],
                           capture_output=True, text=True)
        wall = time.perf_counter() - t0
        if p.returncode != 0:
            lines = p.stderr.strip().splitlines()
            return None, wall, lines[-1] if lines else f"exit {p.returncode}"
        return json.load(open(f.name)), wall, ""


def codecs(c):
    """Short list of the codecs chosen: 'fwd int8, bwd int4, ar topk:0.01+ef'."""
    out = []
    for link in c["links"]:
        if link["codec"] != "none":
            d = "fwd" if link["to_stage"] > link["from_stage"] else "bwd"
            out.append(f"{d}{link['from_stage']}>{link['to_stage']} {link['codec']}")
    for ar in c["all_reduces"]:
        if ar["codec"] != "none":
            out.append(f"ar{ar['stage']} {ar['codec']}+ef")
    return ", ".join(out) if out else "none"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--global-batch", type=int, default=512)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--compress", default="auto")
    args = ap.parse_args()
    straitc = os.path.join(args.build, "bin", "straitc")
    clusters = sorted(glob.glob(os.path.join(ROOT, "examples", "clusters", "*.yaml")))
    clusters = [c for c in clusters if not os.path.basename(c).startswith("local")]
    print(f"GPT-2 (input_ids=8x{args.seq}, global batch {args.global_batch}), "
          f"--compress={args.compress}")
    print(f"{'cluster':22} {'stages':>6} {'samples/s plain':>16} {'compressed':>11} "
          f"{'ratio':>6} {'vs dtfm':>8} {'plan s':>7}  codecs")
    for cluster in clusters:
        name = os.path.basename(cluster)[:-5]
        result, wall, err = plan(straitc, cluster, args.global_batch, args.seq, args.compress)
        if result is None:
            print(f"{name:22} no plan: {err}")
            continue
        c = result["compression"]
        t0, t1 = c["iteration_time_without"], c["iteration_time_with"]
        b = args.global_batch
        # DT-FM-like baseline, uncompressed, simulated the same way (the
        # report's "without" figure of its own plan).
        base, _, _ = plan(straitc, cluster, args.global_batch, args.seq, "auto", "dtfm")
        vs = "infeasible"
        if base is not None:
            vs = f"{base['compression']['iteration_time_without'] / t1:.2f}x"
        print(f"{name:22} {len(result['stages']):>6} {b / t0:>16.1f} {b / t1:>11.1f} "
              f"{t0 / t1:>5.2f}x {vs:>8} {wall:>7.2f}  {codecs(c)}")


if __name__ == "__main__":
    main()
