#!/usr/bin/env python3
"""Mixture-of-experts training steps on the CPU runtime with and without
graph-rewrite-expert-matmuls, in its dense and grouped forms.

    PYTHONPATH=python .venv/bin/python bench/runtime/moe_experts.py [--hidden 128]
        [--intermediate 256] [--experts 8] [--top-k 2] [--layers 2] [--shape 2x64]
        [--steps 10] [--threads 1] [--rounds 2] [--variants gathered,dense,grouped] [--torch]

Builds a transformers MixtralForCausalLM of that size with the `batched_mm` experts (each
routed token's expert weights gathered, batched matmuls: static shapes), exports it with the
TorchScript exporter, imports it (straitc --emit=mlir) and builds two AdamW training steps
from the same forward graph: `strait-opt --graph-build-training-step` (gathered: the
weights as exported), `strait-opt --graph-rewrite-expert-matmuls=mode=dense
--graph-build-training-step` (dense: one product of all experts and a selection) and
`... mode=grouped ...` (grouped: GroupedMatMuls of the routed slots, the routed FLOPs). No
other forward rewrite runs in any. The first variant listed is the ratios' reference.
`--torch` also times PyTorch eager's AdamW step on the same model with transformers' default
experts implementation (its per-expert loop over the routed tokens) and with batched_mm,
on --threads threads. Both run with strait-run on the same token file; per variant:
the elements the expert products hold (gathered weight copies [S, O, I], or the all-experts
products [rows, E, O] that one-hot rows select from: rows = the slots, or the tokens when
the slots repeat them), the launcher's peak resident memory (/usr/bin/time), the median step
time after 3 warm-up steps (best of --rounds, run alternately), the ratio to the reference
and whether the losses agree (1e-5 relative).
"""
from __future__ import annotations

import argparse
import atexit
import os
import re
import shutil
import statistics
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))
WARMUP = 3
STEP = "--graph-build-training-step=loss=cross-entropy optimizer=adamw"


def run(cmd, stdin=None):
    p = subprocess.run(cmd, capture_output=True, text=True, input=stdin)
    if p.returncode:
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-2000:]}{p.stderr[-2000:]}")
    return p


def mixtral(a, impl: str):
    """The Mixtral-like model of the arguments (seed 0) with experts implementation `impl`
    ("default": transformers' own choice)."""
    import torch
    import transformers

    config = transformers.MixtralConfig(
        vocab_size=256, hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=1024, num_local_experts=a.experts,
        num_experts_per_tok=a.top_k)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = transformers.MixtralForCausalLM(config)
    if impl != "default":
        model.set_experts_implementation(impl)
    return model


def export(a, path):
    import torch

    from strait.models import export as ex

    ex._no_packed_sequences()
    model = mixtral(a, "batched_mm").eval()

    class Logits(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids):
            return self.m(input_ids=input_ids, use_cache=False, return_dict=False)[0]

    b, t = (int(x) for x in a.shape.split("x"))
    ids = torch.randint(0, 256, (b, t))
    torch.onnx.export(Logits(model), (ids,), path, input_names=["input_ids"],
                      output_names=["logits"], opset_version=17, do_constant_folding=False,
                      dynamo=False)


def torch_step_ms(a, impl: str) -> float:
    """Median ms of PyTorch eager AdamW steps (forward, cross-entropy, backward, update)
    of the same Mixtral-like model with experts implementation `impl`."""
    import torch

    torch.set_num_threads(int(a.threads))
    model = mixtral(a, impl)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    b, t = (int(x) for x in a.shape.split("x"))
    ids = torch.randint(0, 256, (b, t))
    import time
    times = []
    for i in range(a.steps + WARMUP):
        t0 = time.perf_counter()
        logits = model(input_ids=ids, use_cache=False, return_dict=False)[0]
        loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, 256),
                                                 ids[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        if i >= WARMUP:
            times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def held_elements(mlir: str, experts: int) -> tuple[int, int]:
    """(elements of gathered [S, O, I] expert weights, of all-experts products [rows, E, O]
    that the one-hot rows select from)."""
    def elems(shape):
        n = 1
        for d in shape.split("x"):
            n *= int(d)
        return n
    gathered = sum(elems(s) for s in re.findall(
        r"graph\.Gather(?:ND)? [^\n]*: \(tensor<\d+x\d+x\d+xf32>, [^\n]*"
        r"-> tensor<(\d+x\d+x\d+)xf32>", mlir))
    products = sum(int(r) * experts * int(o) for r, o in re.findall(
        rf"graph\.MatMul [^\n]*: \(tensor<(\d+)x\d+x{experts}xf32>, "
        rf"tensor<\1x{experts}x(\d+)xf32>\)", mlir))
    return gathered, products


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=128)
    ap.add_argument("--intermediate", type=int, default=256)
    ap.add_argument("--experts", type=int, default=8)
    ap.add_argument("--top-k", type=int, default=2)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--shape", default="2x64", help="input_ids batch x tokens")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--threads", default="1")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--variants", default="gathered,dense,grouped",
                    help="comma-separated, the first the reference")
    ap.add_argument("--torch", action="store_true", help="also time PyTorch eager")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--export", metavar="PATH",
                    help="only export the model to PATH (scripts/gpu-prepare.sh's MoE step)")
    a = ap.parse_args()
    if a.export:
        export(a, a.export)
        return
    straitc = os.path.join(a.build, "bin", "straitc")
    opt = os.path.join(a.build, "bin", "strait-opt")
    strait_run = os.path.join(a.build, "runtime", "tools", "strait-run")
    tmp = tempfile.mkdtemp(prefix="strait-moe-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):
        atexit.register(shutil.rmtree, tmp, ignore_errors=True)
    onnx_path = os.path.join(tmp, "mixtral.onnx")
    export(a, onnx_path)
    forward = run([straitc, onnx_path, "--input-shape", f"input_ids={a.shape}",
                   "--emit=mlir", "--print-weights"]).stdout
    data = os.path.join(tmp, "tokens.bin")
    state, ids = 7, []
    for _ in range(1 << 15):
        state = (1103515245 * state + 12345) % (1 << 31)
        ids.append(state % 256)
    with open(data, "wb") as f:
        f.write(struct.pack(f"<{len(ids)}H", *ids))
    known = {"gathered": [STEP],
             "dense": ["--graph-rewrite-expert-matmuls=mode=dense", STEP],
             "grouped": ["--graph-rewrite-expert-matmuls=mode=grouped", STEP]}
    variants = {v: known[v] for v in a.variants.split(",")}
    jobs, held = {}, {}
    for i, (name, passes) in enumerate(variants.items()):
        step = run([opt, *passes], stdin=forward).stdout
        held[name] = held_elements(step, a.experts)
        path = os.path.join(tmp, f"step{i}.mlir")
        with open(path, "w") as f:
            f.write(step)
        jobs[name] = os.path.join(tmp, f"job{i}")
        run([straitc, path, "--emit=program", "-o", jobs[name]])
    best = {n: float("inf") for n in jobs}
    rss, loss = {}, {}
    for _ in range(a.rounds):
        for name, job in jobs.items():
            p = run(["/usr/bin/time", "-f", "maxrss %M", strait_run, job, "--steps",
                     str(a.steps + WARMUP), "--lr", "0.001", "--data", data, "--threads",
                     a.threads, "--timeout-ms", "600000"])
            steps = re.findall(r"^step (\d+)/\d+ loss (\S+) .*?time (\S+) ms", p.stdout, re.M)
            times = [float(t) for s, _, t in steps if int(s) > WARMUP]
            best[name] = min(best[name], statistics.median(times))
            loss[name] = [float(x) for _, x, _ in steps]
            rss[name] = int(re.search(r"maxrss (\d+)", p.stderr).group(1)) / 1024
    b, t = (int(x) for x in a.shape.split("x"))
    print(f"Mixtral-like: hidden {a.hidden}, expert intermediate {a.intermediate}, "
          f"{a.experts} experts, top-{a.top_k}, {a.layers} layers; input_ids {a.shape} "
          f"({b * t * a.top_k} routed slots per layer); AdamW, {a.threads} thread(s), "
          f"median of {a.steps} steps, best of {a.rounds}")
    ref = next(iter(jobs))
    for name in jobs:
        g, z = held[name]
        same = all(abs(x - y) <= 1e-5 * abs(y) for x, y in zip(loss[name], loss[ref]))
        print(f"  {name:30s} gathered weights {g / 1e6:8.2f} M elements, all-experts "
              f"products {z / 1e6:6.2f} M; peak RSS {rss[name]:7.1f} MiB; "
              f"{best[name]:8.2f} ms/step  x{best[name] / best[ref]:.3f}  "
              f"losses {'equal' if same else 'DIFFER'} ({loss[name][0]:.5f} .. "
              f"{loss[name][-1]:.5f})")
    if a.torch:
        for impl in ("default", "batched_mm"):
            ms = torch_step_ms(a, impl)
            print(f"  PyTorch eager ({impl} experts): {ms:8.2f} ms/step; "
                  + ", ".join(f"{n} x{best[n] / ms:.3f}" for n in jobs))


if __name__ == "__main__":
    main()
