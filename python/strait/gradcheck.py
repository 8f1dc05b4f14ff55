"""Gradients of Strait training steps against PyTorch autograd.

    PYTHONPATH=python .venv/bin/python -m strait.gradcheck [--model gpt2|resnet|all]
                                                           [--build build] [--out DIR]

For each reference model (a tiny GPT-2 and a tiny ResNet-like CNN, fixed weights and batch):

  (a) ``export_model``: build it in torch and export it to ONNX (eval mode, weights inline,
      no constant folding so that initializers keep their parameter names);
  (b) ``compile_training_step``: ``straitc --emit=mlir`` then ``strait-opt
      --graph-build-training-step`` (loss, reverse-mode autodiff, SGD with lr 0) and check the
      step's structure: one ``graph.AccumulateGrad`` per torch parameter, same names;
  (c) ``run_on_runtime``: compile the gradients-only step (``optimizer=none
      return-gradients=true``), export it with ``straitc step.mlir --emit=program``, run it
      with ``strait-run --dump-outputs`` on a deterministic batch (``runtime_batch``: every
      row equal, so the runtime's seeded sampling cannot differ from torch's batch) and read
      ``grad.<name>`` back; ``RuntimeUnavailable`` when a tool cannot do its part;
  (d) ``compare``: max relative error per parameter against ``torch_gradients`` (<= 1e-4 f32).

Python stays a helper: all compilation happens in the C++ tools.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import re
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOLERANCE = 1e-4
SEED = 0


class RuntimeUnavailable(RuntimeError):
    """The runtime path (exporter + strait-run) cannot execute training steps yet."""


@dataclasses.dataclass
class Case:
    name: str
    module: object  # torch.nn.Module producing logits
    inputs: dict  # graph input name -> torch tensor
    labels: object  # torch int64 tensor
    input_shapes: str  # straitc --input-shape value


# ---------------------------------------------------------------------------------------
# (a) models


def _tiny_gpt2():
    """GPT-2 architecture in plain torch (pre-LN blocks, causal attention, tanh GELU, tied
    embedding/head so that one variable is read twice), 2 layers, width 32, vocab 64."""
    import math

    import torch
    from torch import nn

    vocab, width, heads, layers, positions = 64, 32, 2, 2, 16

    class Attention(nn.Module):
        def __init__(self):
            super().__init__()
            self.c_attn = nn.Linear(width, 3 * width)
            self.c_proj = nn.Linear(width, width)

        def forward(self, x):
            b, t, c = x.shape
            q, k, v = self.c_attn(x).split(width, dim=2)
            q, k, v = (z.reshape(b, t, heads, c // heads).transpose(1, 2) for z in (q, k, v))
            att = q @ k.transpose(-2, -1) / math.sqrt(c // heads)
            mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
            att = torch.softmax(att.masked_fill(~mask, -1e9), dim=-1)
            y = (att @ v).transpose(1, 2).reshape(b, t, c)
            return self.c_proj(y)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(width)
            self.attn = Attention()
            self.ln_2 = nn.LayerNorm(width)
            self.c_fc = nn.Linear(width, 4 * width)
            self.c_proj = nn.Linear(4 * width, width)

        def forward(self, x):
            x = x + self.attn(self.ln_1(x))
            h = nn.functional.gelu(self.c_fc(self.ln_2(x)), approximate="tanh")
            return x + self.c_proj(h)

    class GPT(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(vocab, width)
            self.wpe = nn.Embedding(positions, width)
            self.h = nn.ModuleList(Block() for _ in range(layers))
            self.ln_f = nn.LayerNorm(width)

        def forward(self, input_ids):
            t = input_ids.shape[1]
            x = self.wte(input_ids) + self.wpe(torch.arange(t))
            for block in self.h:
                x = block(x)
            return self.ln_f(x) @ self.wte.weight.t()

    torch.manual_seed(SEED)
    model = GPT()
    gen = torch.Generator().manual_seed(SEED + 1)
    ids = torch.randint(0, vocab, (2, 8), generator=gen)
    labels = torch.randint(0, vocab, (2, 8), generator=gen)
    return Case("gpt2", model, {"input_ids": ids}, labels, "input_ids=2x8")


def _tiny_resnet():
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c):
            super().__init__()
            self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(c)
            self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(c)

        def forward(self, x):
            y = torch.relu(self.bn1(self.conv1(x)))
            return torch.relu(x + self.bn2(self.conv2(y)))

    class TinyResNet(nn.Module):
        def __init__(self, classes=10):
            super().__init__()
            self.stem = nn.Conv2d(3, 8, 3, padding=1, bias=False)
            self.bn = nn.BatchNorm2d(8)
            self.pool = nn.MaxPool2d(2)
            self.block = Block(8)
            self.fc = nn.Linear(8, classes)

        def forward(self, pixels):
            x = self.pool(torch.relu(self.bn(self.stem(pixels))))
            x = self.block(x)
            return self.fc(torch.flatten(nn.functional.adaptive_avg_pool2d(x, 1), 1))

    torch.manual_seed(SEED)
    model = TinyResNet()
    gen = torch.Generator().manual_seed(SEED + 1)
    pixels = torch.randn(4, 3, 8, 8, generator=gen)
    labels = torch.randint(0, 10, (4,), generator=gen)
    return Case("resnet", model, {"pixels": pixels}, labels, "pixels=4x3x8x8")


def _tiny_mixed():
    """A classifier over features that runs many elementwise, reduction and data-movement
    rules at once (one numerical check per rule family)."""
    import torch
    from torch import nn

    class Mixed(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1 = nn.Linear(12, 16)
            self.scale = nn.Parameter(torch.rand(1, 16) + 0.5)
            self.head = nn.Linear(40, 5)

        def forward(self, features):
            h = self.fc1(features) * self.scale
            g = torch.sqrt(h * h + 1.0)
            parts = [torch.sigmoid(h) * torch.tanh(h), nn.functional.gelu(h),
                     nn.functional.leaky_relu(h, 0.1), nn.functional.hardswish(h),
                     nn.functional.elu(h), torch.log(g) + h / g + torch.pow(h, 2) * 0.1,
                     torch.exp(-torch.abs(h)) - h.mean(dim=-1, keepdim=True)]
            y = torch.cat(parts, dim=-1)[:, ::3]  # [4, 112] -> strided slice [4, 38]
            y = torch.cat([y, y.sum(dim=-1, keepdim=True), y.amax(dim=-1, keepdim=True) * 0.5],
                          dim=-1)
            return self.head(torch.log_softmax(y, dim=-1))

    torch.manual_seed(SEED)
    model = Mixed()
    gen = torch.Generator().manual_seed(SEED + 1)
    x = torch.randn(4, 12, generator=gen)
    labels = torch.randint(0, 5, (4,), generator=gen)
    return Case("mixed", model, {"features": x}, labels, "features=4x12")


def _perturb(module, seed: int):
    """Makes every parameter and float buffer distinct and non-trivial (ONNX exporters merge
    initializers of equal value, e.g. all LayerNorm weights of 1, which would tie them)."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            if t.is_floating_point():
                t.add_(0.1 * torch.rand(t.shape, generator=gen))


def _distinct(build):
    def make():
        case = build()
        _perturb(case.module, SEED + 2)
        return case
    return make


CASES = {"gpt2": _distinct(_tiny_gpt2), "resnet": _distinct(_tiny_resnet),
         "mixed": _distinct(_tiny_mixed)}


def export_model(case: Case, path: str) -> str:
    """Exports `case.module` to ONNX at `path` (eval mode: BatchNorm as the inference op,
    which graph-build-training-step turns into batch statistics)."""
    import torch

    case.module.eval()
    torch.onnx.export(case.module, tuple(case.inputs.values()), path,
                      input_names=list(case.inputs), output_names=["logits"],
                      opset_version=17, do_constant_folding=False, dynamo=False)
    return path


# ---------------------------------------------------------------------------------------
# (b) compile


def _tool(build: str, name: str) -> str:
    path = os.path.join(build, "bin", name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path} not built (ninja -C {build} {name})")
    return path


FULL_STEP = "loss=cross-entropy optimizer=sgd momentum=0"
# What the numerical check runs: forward, loss and gradients as named results.
GRADIENTS_ONLY = "loss=cross-entropy optimizer=none return-gradients=true"


def compile_training_step(onnx_path: str, input_shapes: str, build: str,
                          options: str = FULL_STEP) -> str:
    """Returns the training step's MLIR (straitc import + graph-build-training-step)."""
    forward = subprocess.run(
        [_tool(build, "straitc"), onnx_path, "--input-shape", input_shapes, "--emit=mlir",
         "--print-weights"],
        check=True, capture_output=True, text=True).stdout
    step = subprocess.run(
        [_tool(build, "strait-opt"), f"--graph-build-training-step={options}"],
        input=forward, check=True, capture_output=True, text=True)
    return step.stdout


def accumulated_variables(step_mlir: str) -> list[str]:
    """Variables that get a gradient in the step, in order."""
    return re.findall(r"graph\.AccumulateGrad %\S+ for @([\w.\-]+|\"[^\"]+\")", step_mlir)


def gradient_results(step_mlir: str) -> list[str]:
    """Variables whose gradient a gradients-only step returns (results grad.<name>)."""
    return re.findall(r'\{graph\.name = "grad\.([^"]+)"\}', step_mlir)


def check_structure(case: Case, step_mlir: str) -> list[str]:
    """Every trainable torch parameter has exactly one AccumulateGrad in the step (or one
    grad.<name> result in a gradients-only step)."""
    params = {n.removeprefix("m.") for n, p in case.module.named_parameters() if p.requires_grad}
    got = [v.strip('"') for v in accumulated_variables(step_mlir)] or gradient_results(step_mlir)
    problems = []
    if len(got) != len(set(got)):
        problems.append("a variable is accumulated twice")
    missing, extra = params - set(got), set(got) - params
    if missing:
        problems.append(f"no gradient for {sorted(missing)}")
    if extra:
        problems.append(f"gradients for non-parameters {sorted(extra)}")
    return problems


# ---------------------------------------------------------------------------------------
# (c) runtime, (d) reference and comparison


def runtime_batch(case: Case) -> Case:
    """The batch strait-run feeds deterministically: a token file of exactly T+1 tokens (or
    a one-row npy array) makes every one of the B rows the same, at any seed."""
    import torch

    (name, x), = case.inputs.items()
    rows = x.shape[0]
    first = x[:1].expand(rows, *x.shape[1:]).contiguous()
    labels = case.labels[:1].expand(rows, *case.labels.shape[1:]).contiguous()
    if x.dtype == torch.int64:  # language model: labels are the next tokens
        labels = torch.cat([first[:, 1:], case.labels[:1, -1:].expand(rows, 1)], dim=1)
    return dataclasses.replace(case, inputs={name: first}, labels=labels)


def _write_data(case: Case, work: str) -> list[str]:
    """strait-run data arguments for `case` (already a runtime_batch)."""
    import numpy as np

    (x,) = case.inputs.values()
    if x.dtype.is_floating_point:
        np.save(os.path.join(work, "samples.npy"), x[:1].numpy())
        np.save(os.path.join(work, "labels.npy"), case.labels[:1].numpy().astype(np.int64))
        return ["--data", os.path.join(work, "samples.npy"), "--data-format", "npy",
                "--labels", os.path.join(work, "labels.npy")]
    tokens = np.concatenate([x[0].numpy(), case.labels[0, -1:].numpy()]).astype(np.uint16)
    tokens.tofile(os.path.join(work, "tokens.bin"))
    return ["--data", os.path.join(work, "tokens.bin"), "--data-format", "tokens-u16"]


def _strait_run(build: str) -> str:
    for path in (os.path.join(build, "runtime", "tools", "strait-run"),
                 os.path.join(ROOT, "build-rt", "runtime", "tools", "strait-run")):
        if os.path.exists(path):
            return path
    raise RuntimeUnavailable("strait-run is not built (ninja -C build strait-run)")


def run_on_runtime(onnx_path: str, case: Case, build: str) -> dict:
    """Runs the gradients-only step of `case` (a runtime_batch) on the CPU runtime and
    returns {param: gradient}: straitc exports the step (a plain function of forward and
    gradient ops whose results include grad.<name>), strait-run feeds the batch and dumps
    the outputs. Raises RuntimeUnavailable when a tool cannot do its part yet."""
    grads_mlir = compile_training_step(onnx_path, case.input_shapes, build, GRADIENTS_ONLY)
    _, files = _export_and_run(grads_mlir, case, build, ["--steps", "1"])
    out = {f[len("grad."):-len(".rank0.npy")]: v for f, v in files.items()
           if f.startswith("grad.") and f.endswith(".rank0.npy")}
    if not out:
        raise RuntimeUnavailable("strait-run dumped no gradients")
    return out


def _export_and_run(step_mlir: str, case: Case, build: str, run_args: list[str]):
    """Exports `step_mlir` with straitc and runs it with strait-run; returns (stdout,
    dump folder contents as {file: array}) or raises RuntimeUnavailable."""
    import numpy as np

    with tempfile.TemporaryDirectory() as work:
        step = os.path.join(work, "step.mlir")
        with open(step, "w") as f:
            f.write(step_mlir)
        job, dump = os.path.join(work, "job"), os.path.join(work, "dump")
        export = subprocess.run([_tool(build, "straitc"), step, "--emit=program", "-o", job],
                                capture_output=True, text=True)
        if export.returncode != 0:
            raise RuntimeUnavailable("straitc cannot export the step: " + export.stderr[-400:])
        run = subprocess.run([_strait_run(build), job, "--dump-outputs", dump, *run_args,
                              *_write_data(case, work)], capture_output=True, text=True,
                             timeout=900)
        if run.returncode != 0:
            raise RuntimeUnavailable("strait-run failed: " + (run.stderr + run.stdout)[-600:])
        files = {f: np.load(os.path.join(dump, f)) for f in os.listdir(dump)} \
            if os.path.isdir(dump) else {}
        return run.stdout, files


def train_on_runtime(onnx_path: str, case: Case, build: str, steps: int, lr: float,
                     options: str) -> list[float]:
    """The loss of each of `steps` training steps on the runtime (constant `lr`)."""
    step = compile_training_step(onnx_path, case.input_shapes, build, options)
    out, _ = _export_and_run(step, case, build, ["--steps", str(steps), "--lr", str(lr)])
    losses = [float(v) for v in re.findall(r"^step \d+/\d+ loss (\S+)", out, re.M)]
    if len(losses) != steps:
        raise RuntimeUnavailable(f"strait-run printed {len(losses)} losses for {steps} steps")
    return losses


def torch_trajectory(case: Case, steps: int, lr: float, weight_decay: float = 0.0,
                     momentum: float | None = None, clip: float = 0.0) -> list[float]:
    """The same steps in torch: AdamW (PyTorch defaults but the weight decay), or SGD when
    `momentum` is given."""
    import torch

    model = case.module
    model.train()
    if momentum is None:
        opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=lr, momentum=momentum,
                              weight_decay=weight_decay)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(*case.inputs.values())
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 case.labels.reshape(-1))
        loss.backward()
        if clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
        opt.step()
        losses.append(float(loss))
    return losses


def torch_gradients(case: Case) -> tuple[float, dict]:
    """Loss and parameter gradients of one step in torch (train mode: batch statistics)."""
    import torch

    model = case.module
    model.train()
    model.zero_grad()
    logits = model(*case.inputs.values())
    loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                             case.labels.reshape(-1))
    loss.backward()
    grads = {n.removeprefix("m."): p.grad.detach().numpy().copy()
             for n, p in model.named_parameters() if p.grad is not None}
    return float(loss), grads


def max_relative_error(ref, got) -> float:
    import numpy as np

    ref, got = np.asarray(ref, np.float64), np.asarray(got, np.float64)
    if ref.shape != got.shape:
        return float("inf")
    scale = max(float(np.max(np.abs(ref))), 1e-12)
    return float(np.max(np.abs(ref - got)) / scale)


def compare(reference: dict, computed: dict, tolerance: float = TOLERANCE) -> dict:
    """{param: max relative error} for errors above `tolerance` or missing gradients."""
    bad = {}
    for name, ref in reference.items():
        err = max_relative_error(ref, computed[name]) if name in computed else float("inf")
        if err > tolerance:
            bad[name] = err
    return bad


def check(name: str, build: str, out_dir: str) -> int:
    case = runtime_batch(CASES[name]())
    onnx_path = export_model(case, os.path.join(out_dir, f"{name}.onnx"))
    step = compile_training_step(onnx_path, case.input_shapes, build)
    grads = compile_training_step(onnx_path, case.input_shapes, build, GRADIENTS_ONLY)
    for suffix, text in (("train", step), ("grads", grads)):
        with open(os.path.join(out_dir, f"{name}.{suffix}.mlir"), "w") as f:
            f.write(text)
    problems = check_structure(case, step) + check_structure(case, grads)
    print(f"{name}: training step with {len(accumulated_variables(step))} gradients"
          + ("" if not problems else f"; problems: {problems}"))
    try:
        computed = run_on_runtime(onnx_path, case, build)
    except RuntimeUnavailable as e:
        print(f"{name}: numerical check skipped: {e}")
        return 1 if problems else 0
    _, reference = torch_gradients(case)
    bad = compare(reference, computed)
    for param, err in sorted(bad.items()):
        print(f"{name}: {param}: max relative error {err:.3g} > {TOLERANCE}")
    worst = max((max_relative_error(reference[k], computed[k]) for k in reference
                 if k in computed), default=float("inf"))
    print(f"{name}: {len(reference) - len(bad)}/{len(reference)} gradients match torch "
          f"(worst max relative error {worst:.2g}, tolerance {TOLERANCE})")
    return 1 if problems or bad else 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=[*CASES, "all"], default="all")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--out", default=None, help="keep the ONNX and MLIR files here")
    args = ap.parse_args(argv)
    names = list(CASES) if args.model == "all" else [args.model]
    with tempfile.TemporaryDirectory() as tmp:
        out = args.out or tmp
        os.makedirs(out, exist_ok=True)
        return max(check(n, args.build, out) for n in names)


if __name__ == "__main__":
    sys.exit(main())
