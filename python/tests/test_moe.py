"""Mixture-of-experts language models train in Strait as in PyTorch.

transformers' MixtralForCausalLM and GptOssForCausalLM (tiny: 2 layers, width 32, 4 experts,
top-2 routing; GPT-OSS with transposed expert weights and biases, attention sinks and a
sliding window) with the ``batched_mm`` experts implementation: every token's k experts'
weights are gathered from the expert tables and applied with batched matmuls, static shapes
throughout (the default ``grouped_mm`` and ``eager`` implementations select each expert's
tokens with ``nonzero``, a data-dependent shape; docs/models.md, "Mixture of experts").
Exported with the TorchScript exporter (1 s; the dynamo export is checked by
bench/import/zoo.py and test/Target/ONNX/zoo-training-steps.test), compiled by straitc's
whole pipeline, whose graph-rewrite-expert-matmuls turns the gathered-weight products into
products of all experts and a one-hot selection (checked in the step's MLIR), and run by
strait-run:

* one step (both models): the loss and every parameter gradient (the router's through TopK,
  each expert table's through the rewritten products) against torch autograd, within the
  architecture sweep's tolerance (1e-3 relative to each gradient's largest entry; measured
  8.3e-7 for Mixtral's 21, 7.5e-7 for GPT-OSS's 37);
* AdamW (Mixtral): 8 steps whose losses follow torch's within 1e-3 relative per step (measured
  9e-7) and fall.

Skips without torch, transformers or the built tools.
"""
from __future__ import annotations

import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from strait import gradcheck  # noqa: E402
from strait.models import export  # noqa: E402

BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = os.path.join(BUILD, "runtime", "tools", "strait-run")
HAVE_TOOLS = os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN)
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

pytestmark = pytest.mark.skipif(not HAVE_TOOLS, reason="straitc/strait-run not built")

VOCAB, SEQ, BATCH, EXPERTS, TOP_K = 64, 16, 2, 4, 2
TOLERANCE = 1e-3  # bench/import/zoo.py's


class _Logits(torch.nn.Module):
    def __init__(self, m):
        super().__init__()
        self.m = m

    def forward(self, input_ids):
        return self.m(input_ids=input_ids, use_cache=False, return_dict=False)[0]


COMMON = dict(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=8, intermediate_size=32,
              max_position_embeddings=32, num_local_experts=EXPERTS,
              num_experts_per_tok=TOP_K, attention_dropout=0.0)
# GPT-OSS: transposed experts (W [E, in, out]) with biases, attention sinks, a sliding
# window on the first layer
MODELS = {"mixtral": ("MixtralForCausalLM", "MixtralConfig", {}),
          "gpt-oss": ("GptOssForCausalLM", "GptOssConfig",
                      dict(sliding_window=4, layer_types=["sliding_attention",
                                                          "full_attention"]))}
# Seeds of the zero-mean perturbation under which the batch routes tokens to every expert
# of both layers (checked by the step test: the check is not vacuous)
PERTURB_SEED = {"mixtral": 2, "gpt-oss": 3}


def _moe_case(name: str = "mixtral") -> gradcheck.Case:
    export._no_packed_sequences()  # as every transformers export here (bench/import/zoo.py)
    cls, cfg, extra = MODELS[name]
    config = getattr(transformers, cfg)(**COMMON, **extra)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = getattr(transformers, cls)(config)
    # What a user sets: the static-shape experts formulation.
    model.set_experts_implementation("batched_mm")
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, VOCAB, (BATCH, SEQ), generator=gen)
    case = gradcheck.Case(name, _Logits(model), {"input_ids": ids}, ids,
                          f"input_ids={BATCH}x{SEQ}")
    # No two parameters equal (exporters merge those), with a zero-mean perturbation:
    # gradcheck._perturb's + 0.1 U(0, 1) gives the hidden states a common positive offset
    # and the router rows different sums, so every token would pick the same two experts.
    gen = torch.Generator().manual_seed(PERTURB_SEED[name])
    with torch.no_grad():
        for t in case.module.parameters():
            t.add_(0.1 * (torch.rand(t.shape, generator=gen) - 0.5))
    return gradcheck.runtime_batch(case)


def _straitc_job(case, tmp, *options) -> tuple[str, str]:
    """straitc's whole pipeline (forward rewrites, graph-rewrite-expert-matmuls among them,
    the training step, export) on the TorchScript export of `case`; returns (job, mlir)."""
    path = gradcheck.export_model(case, os.path.join(tmp, "mixtral.onnx"))
    args = [STRAITC, path, "--input-shape", case.input_shapes, "--loss", "cross-entropy",
            *options]
    mlir = subprocess.run(args + ["--emit=mlir"], capture_output=True, text=True)
    assert mlir.returncode == 0, mlir.stderr[-2000:]
    job = os.path.join(tmp, "job")
    c = subprocess.run(args + ["-o", job], capture_output=True, text=True)
    assert c.returncode == 0, c.stderr[-2000:]
    return job, mlir.stdout


def _run(case, job, tmp, *args) -> tuple[str, dict]:
    dump = os.path.join(tmp, "dump")
    data = gradcheck._write_data(case, tmp)
    r = subprocess.run([STRAIT_RUN, job, "--threads", "1", "--dump-outputs", dump, *args,
                        *data], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, (r.stderr + r.stdout)[-2000:]
    files = {f: np.load(os.path.join(dump, f)) for f in os.listdir(dump)} \
        if os.path.isdir(dump) else {}
    return r.stdout, files


@pytest.mark.parametrize("name", sorted(MODELS))
def test_moe_step_matches_torch(name, tmp_path):
    case = _moe_case(name)
    job, mlir = _straitc_job(case, str(tmp_path), "--optimizer", "none", "--return-gradients")
    # The experts' four products (gate_up and down, 2 layers) read no per-token weight
    # copies: graph-rewrite-expert-matmuls made them products of all experts and, per
    # token (gate_up: the 32 tokens, each routed twice) or per slot (down: 64), one-hot
    # [k, E] rows times the token's [E, O] products.
    assert len(re.findall(r"graph\.MatMul [^\n]*: \(tensor<32x2x4xf32>, tensor<32x4x64xf32>\)",
                          mlir)) == 2
    assert len(re.findall(r"graph\.MatMul [^\n]*: \(tensor<64x1x4xf32>, tensor<64x4x32xf32>\)",
                          mlir)) == 2
    assert not re.search(r"graph\.Gather(ND)? [^\n]*: \(tensor<4x(64|32)x32xf32>", mlir)
    _, files = _run(case, job, str(tmp_path), "--steps", "1")
    computed = {f[len("grad.m."):-len(".rank0.npy")]: v for f, v in files.items()
                if f.startswith("grad.m.")}
    loss, reference = gradcheck.torch_gradients(case)
    # The check is not vacuous: the batch routes tokens to every expert of both layers,
    # and the routers get a gradient through TopK.
    for layer in range(2):
        mlp = f"model.layers.{layer}.mlp"
        table = reference[f"{mlp}.experts.gate_up_proj"]
        assert table.shape[0] == EXPERTS
        assert all(np.abs(table[e]).max() > 0 for e in range(EXPERTS)), layer
        router = reference.get(f"{mlp}.gate.weight", reference.get(f"{mlp}.router.weight"))
        assert np.abs(router).max() > 1e-4
    assert set(computed) == set(reference), sorted(set(computed) ^ set(reference))
    assert gradcheck.compare(reference, computed, TOLERANCE) == {}
    got = float(files["loss.rank0.npy"])
    assert abs(got - loss) <= TOLERANCE * abs(loss), (got, loss)


def test_mixtral_adamw_follows_torch(tmp_path):
    """AdamW steps on the runtime follow torch's losses on the same batch (the runtime
    prints 6 significant digits; the routing is the same at every step, so the trajectory
    stays smooth)."""
    steps, lr = 8, 3e-3
    case = _moe_case("mixtral")
    job, _ = _straitc_job(case, str(tmp_path), "--optimizer", "adamw", "--weight-decay",
                          "0.01", "--lr", str(lr))
    out, _ = _run(case, job, str(tmp_path), "--steps", str(steps))
    runtime = [float(v) for v in re.findall(r"^step \d+/\d+ loss (\S+)", out, re.M)]
    assert len(runtime) == steps, out[-1000:]
    reference = gradcheck.torch_trajectory(case, steps, lr, weight_decay=0.01)
    rel = np.abs(np.array(runtime) - reference) / np.abs(reference)
    assert rel.max() < 1e-3, f"step {rel.argmax() + 1}: {runtime[rel.argmax()]} vs " \
                             f"{reference[rel.argmax()]}"
    assert runtime[-1] < 0.9 * runtime[0], runtime
