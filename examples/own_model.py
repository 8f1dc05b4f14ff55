#!/usr/bin/env python3
"""Bring your own PyTorch model: export it, train it with Strait, load the weights back.

    .venv/bin/python examples/own_model.py [--steps 300] [--out out/own-model] [--hosts 2]

1. A PyTorch model written here (a small transformer classifier reading each 8x8 digit as a
   sequence of 8 rows; nothing Strait-specific in it) is exported with PyTorch's own exporter,
   `torch.onnx.export(..., dynamo=True, optimize=False)`: optimize=False keeps every parameter
   an initializer under its state_dict name (the default optimizer folds and merges parameters,
   which straitc warns about; docs/models.md, "Exporting your own model").
2. straitc builds the training step (cross-entropy on the `logits` output against `labels`,
   AdamW with warm-up and cosine decay) and plans it on a cluster file written here: two hosts
   of two CPU ranks each joined by a 100 Mbit/s link (all on this machine), in 2 pipeline stages.
3. strait-run trains it on scikit-learn's digits (npy arrays), one launcher per host
   (`--host`, as on two machines; they meet through a shared folder), and saves the parameters.
4. The saved parameters are loaded into the same PyTorch module by name (`load_state_dict`),
   which then classifies the held-out digits: the printed accuracy is PyTorch's, on weights
   Strait trained.

Exits non-zero when any step fails or the accuracy is below --min-accuracy (default 0.85).
Needs a build (scripts/setup.sh) and the venv's torch and scikit-learn
(python/requirements-check.txt).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys

import numpy as np
import torch
import torch.nn as nn

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = os.path.join(BUILD, "runtime", "tools", "strait-run")


class DigitsTransformer(nn.Module):
    """Rows of an 8x8 image as 8 tokens -> one transformer encoder layer -> mean -> 10 classes."""

    def __init__(self, width=32, heads=4):
        super().__init__()
        self.embed = nn.Linear(8, width)
        self.position = nn.Parameter(torch.zeros(1, 8, width))
        self.encoder = nn.TransformerEncoderLayer(width, heads, 2 * width, dropout=0.0,
                                                  batch_first=True)
        self.norm = nn.LayerNorm(width)
        self.head = nn.Linear(width, 10)

    def forward(self, images):  # [batch, 8, 8]
        x = self.encoder(self.embed(images) + self.position)
        return self.head(self.norm(x.mean(1)))


CLUSTER = """\
# Two hosts of two CPU ranks each, joined by a 100 Mbit/s link (written by examples/own_model.py)
name: own-model-2hosts
device_types:
  - {name: cpu, kind: cpu, peak_tflops: {fp32: 0.2}, mem_bandwidth_gbs: 20, memory_gib: 8}
devices:
  - {name: r0, type: cpu, host: alpha, site: east}
  - {name: r1, type: cpu, host: alpha, site: east}
  - {name: r2, type: cpu, host: beta, site: west}
  - {name: r3, type: cpu, host: beta, site: west}
links:
  intra_host: {bandwidth_gbps: 10, latency_us: 20}
  hosts:
    - {between: [alpha, beta], bandwidth_mbps: 100, latency_ms: 1}
"""


HOST_OF = dict(re.findall(r"\{name: (\w+), type: cpu, host: (\w+)", CLUSTER))


def sh(cmd, **kw):
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(list(map(str, cmd)), check=True, **kw)


def digits(out):
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    d = load_digits()
    x = (d.images / 16.0).astype(np.float32)  # [N, 8, 8]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    np.save(os.path.join(out, "train-images.npy"), xtr)
    np.save(os.path.join(out, "train-labels.npy"), ytr)
    return xte, yte


def saved_state(folder):
    """{parameter name: tensor} from strait-run --save-params (replicas hold equal copies)."""
    state = {}
    for f in sorted(os.listdir(folder)):
        if f.startswith("params.rank"):
            for line in open(os.path.join(folder, f)):
                file, name = line.split()
                state.setdefault(name, torch.from_numpy(np.load(os.path.join(folder, file))))
    return state


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--out", default=os.path.join(ROOT, "out", "own-model"))
    ap.add_argument("--min-accuracy", type=float, default=0.85)
    args = ap.parse_args()
    out = os.path.abspath(args.out)
    shutil.rmtree(out, ignore_errors=True)
    os.makedirs(out)

    # 1. Export (batch dimension dynamic; straitc fixes it with --input-shape).
    torch.manual_seed(0)
    model = DigitsTransformer().eval()
    onnx_path = os.path.join(out, "digits-transformer.onnx")
    torch.onnx.export(model, (torch.zeros(4, 8, 8),), onnx_path, dynamo=True, optimize=False,
                      input_names=["images"], output_names=["logits"],
                      dynamic_shapes={"images": {0: "batch"}}, external_data=False)
    x_test, y_test = digits(out)
    with open(os.path.join(out, "cluster.yaml"), "w") as f:
        f.write(CLUSTER)

    # 2. Compile: 64 images a step in 2 pipeline stages (one per host: the cut crosses the
    # link, each stage's 2 replicas all-reduce inside their host). Without --num-stages the
    # planner would keep this small model on one host: the link does not pay for itself.
    job = os.path.join(out, "job")
    sh([STRAITC, onnx_path, "--input-shape", "images=16x8x8", "--loss", "cross-entropy",
        "--optimizer", "adamw", "--lr", "0.003", "--warmup-steps", "20",
        "--total-steps", args.steps, "--cluster", os.path.join(out, "cluster.yaml"),
        "--global-batch", "64", "--num-stages", "2", "-o", job])
    with open(os.path.join(job, "plan.json")) as f:
        used = {d for stage in json.load(f)["stages"] for d in stage["devices"]}
    hosts = sorted({HOST_OF[d] for d in used})

    # 3. Train: one launcher per host, meeting through a shared folder.
    common = ["--run-id", f"own-model-{os.getpid()}", "--rendezvous",
              os.path.join(out, "rendezvous"), "--data", os.path.join(out, "train-images.npy"),
              "--labels", os.path.join(out, "train-labels.npy"), "--steps", args.steps,
              "--save-params", os.path.join(out, "params"), "--quiet"]
    procs = [subprocess.Popen(list(map(str, [STRAIT_RUN, job, "--host", host, *common])),
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
             for host in hosts]
    for p in procs:
        text = p.communicate()[0]
        print(text, end="")
        if p.returncode != 0:
            sys.exit(f"own_model: strait-run exited {p.returncode}")
    logs = "".join(open(os.path.join(job, "logs", f)).read()
                   for f in sorted(os.listdir(os.path.join(job, "logs"))))
    losses = [float(v) for v in re.findall(rf"iteration {args.steps}/{args.steps} .*?loss (\S+)",
                                           logs)]

    # 4. Back into PyTorch, by name.
    state = saved_state(os.path.join(out, "params"))
    result = model.load_state_dict(state, strict=False)
    if result.missing_keys or result.unexpected_keys:
        sys.exit(f"own_model: saved parameters do not match the module: {result}")
    with torch.no_grad():
        predicted = model(torch.from_numpy(x_test)).argmax(1).numpy()
    accuracy = float((predicted == y_test).mean())
    print(f"own_model: {len(state)} parameters loaded into PyTorch; final training loss "
          f"{np.mean(losses):.4f}; held-out accuracy (PyTorch forward) {accuracy:.3f} "
          f"on {len(y_test)} digits")
    if accuracy < args.min_accuracy:
        sys.exit(f"own_model: accuracy {accuracy:.3f} below {args.min_accuracy}")


if __name__ == "__main__":
    main()
