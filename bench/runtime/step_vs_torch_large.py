#!/usr/bin/env python3
"""Training step of real-sized models on the CPU against PyTorch: same weights, batch, threads.

    .venv/bin/python bench/runtime/step_vs_torch_large.py [--threads 1,2] [--steps 5] [--rounds 2]
                                                          [--only resnet50,mobilenet-v3-large,gpt2]
                                                          [--build build]

The sibling of step_vs_torch.py (tiny models) for the committed real-sized graphs, which carry no
weights: each graph is copied to a temporary folder and `python -m strait.weights` writes seeded
random weights next to it. The whole model is one stage (`straitc --emit=program`, one rank) and
the step is forward + backward + optimizer update:
  - resnet50 (models/resnet50), batch 2 x 3 x 224 x 224, cross-entropy over 1000 classes, SGD;
  - mobilenet-v3-large (models/mobilenet-v3-large), batch 4 x 3 x 224 x 224, cross-entropy, SGD;
  - gpt2 (models/gpt2, GPT-2 small, 124M parameters), batch 1 x 64 tokens, cross-entropy, AdamW.
PyTorch runs the same weights: the two CNNs through a small interpreter of their ONNX graphs
(Conv, BatchNormalization, Relu, HardSwish, HardSigmoid, Add, Mul, MaxPool, ReduceMean, Reshape,
Gemm: each node the torch.nn.functional call that torchvision's module makes; torchvision is not
installed here), GPT-2 as transformers' GPT2LMHeadModel with its state dict loaded from the ONNX
initializers and its dropouts off (the graph is the eval-mode export). BatchNormalization runs in training mode on both sides (batch statistics).
Parameters: every ONNX initializer the compiler trains; the running statistics and the
exporter's zero convolution biases (val_N) are constants on both sides.

Loss check: Strait's first step is run with --dump-outputs and PyTorch computes the loss of the
same dumped inputs and labels with the same weights; the row prints both losses (they agree to
float rounding, ~1e-5 relative, or the script fails).
Timing: Strait's per-iteration time from `strait-run --threads T` (median after 2 warm-up
iterations); PyTorch: `torch.set_num_threads(T)`, median of the same number of steps after 2
warm-up. Each side is measured --rounds times and the best median kept. Prints one row per
(model, threads) with both times and the ratio Strait / PyTorch (< 1: Strait is faster);
--before-build DIR adds the step time of another build's strait-run (e.g. the previous
commit's) on the same compiled job, measured in the same rounds.
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
sys.path.insert(0, os.path.join(ROOT, "python"))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # step_vs_torch
WARMUP = 2
LOSS_RTOL = 1e-4


class OnnxModule:
    """A torch module that evaluates a CNN's ONNX graph node by node (the ops listed above)."""

    @staticmethod
    def make(path):
        import numpy as np
        import onnx
        import torch
        from onnx import numpy_helper

        model = onnx.load(path)  # with its external data
        g = model.graph

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.params = torch.nn.ParameterDict()
                self.consts = {}
                for t in g.initializer:
                    v = torch.from_numpy(np.array(numpy_helper.to_array(t)))
                    if (t.name.startswith("val_") or "running_" in t.name
                            or v.dtype != torch.float32):  # buffers and constants
                        self.consts[t.name] = v
                    else:  # ParameterDict keys may not contain '.'
                        self.params[t.name.replace(".", "/")] = torch.nn.Parameter(v)
                self.nodes = list(g.node)
                self.input = g.input[0].name
                self.output = g.output[0].name

            def value(self, env, name):
                if name in env:
                    return env[name]
                if name in self.consts:
                    return self.consts[name]
                return self.params[name.replace(".", "/")]

            def forward(self, x):
                F = torch.nn.functional
                env = {self.input: x}
                for n in self.nodes:
                    at = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
                    ins = [self.value(env, i) if i else None for i in n.input]
                    op = n.op_type
                    if op == "Conv":
                        p = at.get("pads", [0, 0, 0, 0])
                        assert p[:2] == p[2:], f"{n.name}: asymmetric pads"
                        y = F.conv2d(ins[0], ins[1], ins[2] if len(ins) > 2 else None,
                                     at.get("strides", 1), p[:2], at.get("dilations", 1),
                                     at.get("group", 1))
                    elif op == "BatchNormalization":
                        y = F.batch_norm(ins[0], ins[3].clone(), ins[4].clone(), ins[1], ins[2],
                                         True, 1 - at.get("momentum", 0.9), at.get("epsilon", 1e-5))
                    elif op == "Relu":
                        y = F.relu(ins[0])
                    elif op == "HardSwish":
                        y = F.hardswish(ins[0])
                    elif op == "HardSigmoid":
                        y = torch.clamp(ins[0] * at.get("alpha", 0.2) + at.get("beta", 0.5), 0, 1)
                    elif op == "Add":
                        y = ins[0] + ins[1]
                    elif op == "Mul":
                        y = ins[0] * ins[1]
                    elif op == "MaxPool":
                        p = at.get("pads", [0, 0, 0, 0])
                        y = F.max_pool2d(ins[0], at["kernel_shape"], at.get("strides", 1), p[:2],
                                         at.get("dilations", 1), bool(at.get("ceil_mode", 0)))
                    elif op == "ReduceMean":
                        y = ins[0].mean(dim=[int(d) for d in ins[1]], keepdim=bool(at.get("keepdims", 1)))
                    elif op == "Reshape":
                        y = ins[0].reshape([int(d) for d in ins[1]])
                    elif op == "Gemm":
                        assert not at.get("transA", 0) and at.get("alpha", 1.0) == 1.0
                        w = ins[1].t() if at.get("transB", 0) else ins[1]
                        y = ins[0] @ w * 1.0 + at.get("beta", 1.0) * ins[2]
                    else:
                        raise NotImplementedError(f"{path}: node {n.name}: op {op}")
                    env[n.output[0]] = y
                return env[self.output]

        return Net()


def gpt2_module(path):
    """transformers' GPT-2 small with the state dict read from the ONNX initializers."""
    import numpy as np
    import onnx
    import torch
    from onnx import numpy_helper
    from strait.models.export import build_gpt2

    wrapper = build_gpt2(False).module
    model = onnx.load(path)
    state = {t.name: torch.from_numpy(np.array(numpy_helper.to_array(t)))
             for t in model.graph.initializer if not t.name.startswith("val_")}
    sd = wrapper.m.state_dict()
    # The export keeps the tied embedding once, as lm_head.weight; the rest are the graph's
    # constants (zeros, reshape shapes).
    state = {k: v for k, v in state.items() if k in sd}
    state["transformer.wte.weight"] = state.get("lm_head.weight")
    missing = [k for k in sd if state.get(k) is None and not k.endswith(".attn.bias")]
    unknown = [t.name for t in model.graph.initializer if t.name.count(".") >= 2
               and t.name not in sd]
    if missing or unknown:
        sys.exit(f"{path}: initializers do not match GPT2LMHeadModel: missing {missing[:5]}, "
                 f"unknown {unknown[:5]}")
    wrapper.m.load_state_dict(state, strict=False)
    wrapper.m.tie_weights()
    for mod in wrapper.modules():  # the ONNX graph is the eval-mode export: no dropout
        if isinstance(mod, torch.nn.Dropout):
            mod.p = 0.0
    return wrapper


def strait_step_ms(build, job, threads, steps, data_args):
    subprocess.run([os.path.join(build, "runtime", "tools", "strait-run"), job, "--steps",
                    str(steps + WARMUP), "--threads", str(threads), "--lr", "0.001", "--quiet",
                    *data_args], check=True, capture_output=True)
    log = open(os.path.join(job, "logs", "rank0.log")).read()
    times = [float(x) for x in re.findall(r"iteration \d+/\d+ time (\S+) ms", log)]
    return statistics.median(times[WARMUP:])


def torch_loss(module, x, y):
    import torch
    logits = module(x)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def torch_step_ms(module, x, y, optimizer, threads, steps):
    """PyTorch's step on the same batch every time (step_vs_torch.py's loop)."""
    import step_vs_torch
    return step_vs_torch.torch_step_ms(module, lambda i: (x, y), optimizer, threads, steps,
                                       warmup=WARMUP)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", default="resnet50,mobilenet-v3-large,gpt2")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--before-build", default="",
                    help="also time this build's strait-run on the same job (an earlier version: "
                         "before / after in one run, under the same load)")
    a = ap.parse_args()
    import numpy as np
    import torch

    work = tempfile.mkdtemp(prefix="strait-step-large-")
    if not os.environ.get("STRAIT_KEEP_BENCH_DIRS"):  # removed at exit unless asked to keep
        atexit.register(shutil.rmtree, work, ignore_errors=True)
    rng = np.random.default_rng(0)
    images, labels = os.path.join(work, "images.npy"), os.path.join(work, "labels.npy")
    np.save(images, rng.random((16, 3, 224, 224), dtype=np.float32))
    np.save(labels, rng.integers(0, 1000, 16).astype(np.int64))
    tokens = os.path.join(work, "tokens.bin")
    rng.integers(0, 50257, 100000, dtype=np.uint16).tofile(tokens)
    image_data = ["--data", images, "--labels", labels]
    cases = {  # name: (input shape, optimizer, data arguments, batch text)
        "resnet50": ("pixel_values=2x3x224x224", "sgd", image_data, "2 x 224²"),
        "mobilenet-v3-large": ("pixel_values=4x3x224x224", "sgd", image_data, "4 x 224²"),
        "gpt2": ("input_ids=1x64", "adamw", ["--data", tokens, "--data-format", "tokens-u16"],
                 "1 x 64 tokens"),
    }
    before = "before (ms) | " if a.before_build else ""
    print(f"| model | batch | optimizer | threads | {before}Strait step (ms) | PyTorch {torch.__version__} "
          f"step (ms) | Strait / PyTorch | first-step loss Strait / PyTorch |")
    print("|---|---|---|---|---|---|---|---|" + ("---|" if a.before_build else ""))
    for name in a.only.split(","):
        shape, opt, data_args, batch_text = cases[name]
        model = os.path.join(work, name + ".onnx")
        shutil.copy(os.path.join(ROOT, "models", name, name + ".onnx"), model)
        env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
        subprocess.run([sys.executable, "-m", "strait.weights", model], check=True,
                       capture_output=True, env=env)
        job = os.path.join(work, name)
        subprocess.run([os.path.join(a.build, "bin", "straitc"), model, "--input-shape", shape,
                        "--loss", "cross-entropy", "--optimizer", opt, "--emit=program", "-o", job],
                       check=True, capture_output=True)
        dump = os.path.join(work, name + "-dump")
        subprocess.run([os.path.join(a.build, "runtime", "tools", "strait-run"), job, "--steps", "1",
                        "--threads", "1", "--lr", "0.001", "--quiet", "--dump-outputs", dump,
                        *data_args], check=True, capture_output=True)
        s_loss = float(np.load(os.path.join(dump, "loss.rank0.npy")))
        in_name = shape.split("=")[0]
        x = torch.from_numpy(np.load(os.path.join(dump, f"{in_name}.rank0.npy")))
        y = torch.from_numpy(np.load(os.path.join(dump, "labels.rank0.npy"))).long()
        module = gpt2_module(model) if name == "gpt2" else OnnxModule.make(model)
        module.train()
        torch.set_num_threads(1)
        with torch.no_grad():
            p_loss = float(torch_loss(module, x, y))
        if abs(s_loss - p_loss) > LOSS_RTOL * abs(p_loss):
            sys.exit(f"{name}: first-step loss differs: Strait {s_loss} PyTorch {p_loss}")
        for t in [int(v) for v in a.threads.split(",")]:
            s = p = b = 1e30
            for _ in range(a.rounds):  # alternate the sides so that others' load hits each
                s = min(s, strait_step_ms(a.build, job, t, a.steps, data_args))
                p = min(p, torch_step_ms(module, x, y, opt, t, a.steps))
                if a.before_build:
                    b = min(b, strait_step_ms(a.before_build, job, t, a.steps, data_args))
            b_text = f"{b:.1f} | " if a.before_build else ""
            print(f"| {name} | {batch_text} | {opt} | {t} | {b_text}{s:.1f} | {p:.1f} | {s / p:.2f} "
                  f"| {s_loss:.5f} / {p_loss:.5f} |", flush=True)
        del module
        shutil.rmtree(job, ignore_errors=True)
        os.remove(model + ".data")


if __name__ == "__main__":
    main()
