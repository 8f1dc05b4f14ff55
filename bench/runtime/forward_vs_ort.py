#!/usr/bin/env python3
"""Forward time of the committed models on the runtime against onnxruntime, same threads.

    .venv/bin/python bench/runtime/forward_vs_ort.py [--threads 1] [--iters 30] [--build build]

Models with committed weights: gpt2-tiny and llama-tiny (batch 8 x 64 tokens), digits-cnn
(batch 256 images); with --large also mobilenet-v3-large and resnet50 (batch 1 x 3 x 224 x 224,
seeded random weights written by `python -m strait.weights` next to a temporary copy). Strait: `straitc --emit=program` (forward only, one rank), `strait-run
--threads T` with zero inputs, median per-iteration time after 5 warm-up iterations.
onnxruntime: the same ONNX file, CPUExecutionProvider, intra_op_num_threads=T, inter_op 1,
sequential execution, the same zero inputs, median of the same number of runs after 5 warm-up.
Each side is measured --rounds times (default 3), keeping the best median (damps the load of
other processes). Prints time per model and the ratio Strait / onnxruntime (< 1: Strait is faster).
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
WARMUP = 5
MODELS = [("gpt2-tiny", "input_ids", (8, 64), "int64"),
          ("llama-tiny", "input_ids", (8, 64), "int64"),
          ("digits-cnn", "images", (256, 1, 8, 8), "float32")]
# --large: committed graphs without their weights; the bench copies the graph to a temporary
# folder and writes seeded random weights next to it (python -m strait.weights).
LARGE = [("mobilenet-v3-large", "pixel_values", (1, 3, 224, 224), "float32"),
         ("resnet50", "pixel_values", (1, 3, 224, 224), "float32")]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--large", action="store_true",
                    help="also mobilenet-v3-large and resnet50 (batch 1, random weights)")
    a = ap.parse_args()
    import numpy as np
    import onnxruntime as ort

    work = tempfile.mkdtemp(prefix="strait-forward-bench-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    print(f"| model | input | threads | Strait forward (ms) | onnxruntime {ort.__version__} (ms) | Strait / ORT |")
    print("|---|---|---|---|---|---|")
    for name, input_name, shape, dtype in MODELS + (LARGE if a.large else []):
        model = os.path.join(ROOT, "models", name, name + ".onnx")
        if (name, input_name, shape, dtype) in LARGE:
            copy = os.path.join(work, name + ".onnx")
            shutil.copy(model, copy)
            subprocess.run([sys.executable, "-m", "strait.weights", copy], check=True,
                           capture_output=True, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python")))
            model = copy
        job = os.path.join(work, name)
        shape_text = "x".join(map(str, shape))
        subprocess.run([os.path.join(a.build, "bin", "straitc"), model, "--input-shape",
                        f"{input_name}={shape_text}", "--emit=program", "-o", job],
                       check=True, capture_output=True)
        for t in [int(x) for x in a.threads.split(",")]:
            s = 1e30
            for _ in range(a.rounds):
                subprocess.run([os.path.join(a.build, "runtime", "tools", "strait-run"), job,
                                "--steps", str(a.iters + WARMUP), "--threads", str(t), "--quiet"],
                               check=True, capture_output=True)
                log = open(os.path.join(job, "logs", "rank0.log")).read()
                times = [float(x) for x in re.findall(r"iteration \d+/\d+ time (\S+) ms", log)]
                s = min(s, statistics.median(times[WARMUP:]))
            opts = ort.SessionOptions()
            opts.intra_op_num_threads = t
            opts.inter_op_num_threads = 1
            opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
            sess = ort.InferenceSession(model, opts, providers=["CPUExecutionProvider"])
            feed = {input_name: np.zeros(shape, dtype=dtype)}
            o = 1e30
            for _ in range(a.rounds):
                ot = []
                for _ in range(a.iters + WARMUP):
                    t0 = time.perf_counter()
                    sess.run(None, feed)
                    ot.append((time.perf_counter() - t0) * 1e3)
                o = min(o, statistics.median(ot[WARMUP:]))
            print(f"| {name} | {input_name} {shape_text} | {t} | {s:.2f} | {o:.2f} | {s / o:.2f} |",
                  flush=True)


if __name__ == "__main__":
    main()
