#!/usr/bin/env python3
"""Training-step time of a Strait stage against PyTorch, same model, batch and threads.

    .venv/bin/python bench/runtime/step_vs_torch.py [--threads 1,2] [--steps 30] [--build build]

For each model the whole model is one stage (one rank, `straitc --emit=program`) and the step
is forward + backward + optimizer update:
  - gpt2-tiny (models/gpt2-tiny, 2 layers, 64 wide, vocab 256), batch 8 x 64 tokens, cross-entropy,
    AdamW; PyTorch runs transformers' GPT2LMHeadModel with the same configuration
    (python/strait/models/export.py builds the committed ONNX from it);
  - digits-cnn (models/digits-cnn), batch 256 images of 1 x 8 x 8, cross-entropy, SGD; PyTorch
    runs the same module (models/digits-cnn/export.py).
Strait: `strait-run --threads T` (its per-iteration time, median over iterations after 5 warm-up
ones). PyTorch: `torch.set_num_threads(T)`, median of the same number of steps after 5 warm-up.
Each is measured --rounds times (default 3) and the best median kept, which damps the load of
other processes on a shared machine.
Prints one row per (model, threads) with both times and the ratio Strait / PyTorch (< 1: Strait is
faster), all measured in this run.
"""
from __future__ import annotations

import argparse
import atexit
import shutil
import importlib.util
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
WARMUP = 5


def strait_step_ms(build, model, shape, optimizer, threads, steps, work, data_args):
    job = os.path.join(work, f"{os.path.basename(model)}-{optimizer}")
    subprocess.run([os.path.join(build, "bin", "straitc"), model, "--input-shape", shape, "--loss",
                    "cross-entropy", "--optimizer", optimizer, "--emit=program", "-o", job],
                   check=True, capture_output=True)
    subprocess.run([os.path.join(build, "runtime", "tools", "strait-run"), job, "--steps",
                    str(steps + WARMUP), "--threads", str(threads), "--lr", "0.001", "--quiet",
                    *data_args], check=True, capture_output=True)
    log = open(os.path.join(job, "logs", "rank0.log")).read()
    times = [float(x) for x in re.findall(r"iteration \d+/\d+ time (\S+) ms", log)]
    return statistics.median(times[WARMUP:])


def torch_step_ms(module, make_batch, optimizer, threads, steps, warmup=WARMUP):
    import torch
    torch.set_num_threads(threads)
    module.train()
    # The committed ONNX graphs have no Dropout (eval-mode exports): PyTorch drops nothing
    # either (transformers' GPT-2 config has 0.1 dropouts; BatchNorm stays in training mode).
    for m in module.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    opt = (torch.optim.AdamW(module.parameters(), lr=1e-3) if optimizer == "adamw"
           else torch.optim.SGD(module.parameters(), lr=1e-3))
    times = []
    for i in range(steps + warmup):
        x, y = make_batch(i)
        t0 = time.perf_counter()
        logits = module(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times[warmup:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    a = ap.parse_args()
    import numpy as np
    import torch
    from strait.models.export import build_gpt2

    work = tempfile.mkdtemp(prefix="strait-step-bench-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    # Data: random tokens / random images (timing does not depend on the values).
    rng = np.random.default_rng(0)
    tokens = os.path.join(work, "tokens.bin")
    rng.integers(0, 256, 200000, dtype=np.uint16).tofile(tokens)
    images, labels = os.path.join(work, "images.npy"), os.path.join(work, "labels.npy")
    np.save(images, rng.random((2048, 1, 8, 8), dtype=np.float32))
    np.save(labels, rng.integers(0, 10, 2048).astype(np.int64))

    gpt2 = build_gpt2(True).module  # the wrapper whose forward(input_ids) returns logits
    spec = importlib.util.spec_from_file_location("digits_export",
                                                  os.path.join(ROOT, "models", "digits-cnn", "export.py"))
    digits_mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(digits_mod)
    torch.manual_seed(0)
    cnn = digits_mod.DigitsCNN()
    tok = torch.from_numpy(np.fromfile(tokens, dtype=np.uint16).astype(np.int64))
    img = torch.from_numpy(np.load(images))
    lab = torch.from_numpy(np.load(labels))

    def gpt2_batch(i):
        offs = [(i * 8 + k) * 997 % (len(tok) - 65) for k in range(8)]
        return (torch.stack([tok[o:o + 64] for o in offs]), torch.stack([tok[o + 1:o + 65] for o in offs]))

    def cnn_batch(i):
        rows = [(i * 256 + k) % 2048 for k in range(256)]
        return img[rows], lab[rows]

    cases = [
        ("gpt2-tiny", os.path.join(ROOT, "models", "gpt2-tiny", "gpt2-tiny.onnx"), "input_ids=8x64",
         "adamw", ["--data", tokens, "--data-format", "tokens-u16"], gpt2, gpt2_batch, "8x64 tokens"),
        ("digits-cnn", os.path.join(ROOT, "models", "digits-cnn", "digits-cnn.onnx"),
         "images=256x1x8x8", "sgd", ["--data", images, "--labels", labels], cnn, cnn_batch, "256 images"),
    ]
    print(f"| model | batch | optimizer | threads | Strait step (ms) | PyTorch {torch.__version__} step (ms) "
          f"| Strait / PyTorch |")
    print("|---|---|---|---|---|---|---|")
    for name, model, shape, opt, data_args, module, batch, batch_text in cases:
        for t in [int(x) for x in a.threads.split(",")]:
            # Rounds alternate the two so that load from other processes hits both; the
            # best round's median of each is kept.
            s = min(strait_step_ms(a.build, model, shape, opt, t, a.steps, work, data_args)
                    for _ in range(a.rounds))
            p = min(torch_step_ms(module, batch, opt, t, a.steps) for _ in range(a.rounds))
            print(f"| {name} | {batch_text} | {opt} | {t} | {s:.2f} | {p:.2f} | {s / p:.2f} |", flush=True)


if __name__ == "__main__":
    main()
