"""Mixture-of-experts language models train in Strait as in PyTorch.

transformers' MixtralForCausalLM, GptOssForCausalLM, Qwen2MoeForCausalLM and OlmoeForCausalLM
(tiny: 2 layers, width 32, 4 experts, top-2 routing; GPT-OSS with transposed expert weights
and biases, attention sinks and a sliding window; Qwen2-MoE with its gated shared expert;
OLMoE with QK-norm) with the ``batched_mm`` experts implementation: every token's k experts'
weights are gathered from the expert tables and applied with batched matmuls, static shapes
throughout (the default ``grouped_mm`` and ``eager`` implementations select each expert's
tokens with ``nonzero``, a data-dependent shape; docs/models.md, "Mixture of experts").
Exported with the TorchScript exporter (1 s; the dynamo export is checked by
bench/import/zoo.py and test/Target/ONNX/zoo-training-steps.test), compiled by straitc's
whole pipeline, whose graph-rewrite-expert-matmuls turns the gathered-weight products into
GroupedMatMuls of the routed slots (``--moe-experts grouped``) or into products of all experts
and a one-hot selection (``--moe-experts dense``; both checked in the step's MLIR), and run by
strait-run:

* one step (every model, both forms): the loss and every parameter gradient (the router's
  through TopK, each expert table's through the rewritten products) against torch autograd,
  within the architecture sweep's tolerance (1e-3 relative to each gradient's largest entry;
  measured 8.3e-7 for Mixtral's 21, 7.5e-7 for GPT-OSS's 37 with the dense form);
* AdamW (Mixtral, Qwen2-MoE, OLMoE): 8 steps per form whose losses follow torch's within 1e-3
  relative per step and fall, and the two forms' losses agree within 1e-5.

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
# window on the first layer; Qwen2-MoE and OLMoE name their experts num_experts (bench/import/
# zoo.py's configurations), Qwen2-MoE adds a gated shared expert; OLMoE without a pad token
# (torch's Embedding padding_idx gives its row no gradient, which no ONNX export carries)
_NAMED = {k: v for k, v in COMMON.items() if k != "num_local_experts"}
MODELS = {"mixtral": ("MixtralForCausalLM", "MixtralConfig", {}),
          "gpt-oss": ("GptOssForCausalLM", "GptOssConfig",
                      dict(sliding_window=4, layer_types=["sliding_attention",
                                                          "full_attention"])),
          "qwen2-moe": ("Qwen2MoeForCausalLM", "Qwen2MoeConfig",
                        dict(num_experts=EXPERTS, moe_intermediate_size=16,
                             shared_expert_intermediate_size=32, norm_topk_prob=True)),
          "olmoe": ("OlmoeForCausalLM", "OlmoeConfig",
                    dict(num_experts=EXPERTS, intermediate_size=16, pad_token_id=None))}
# Seeds of the zero-mean perturbation under which the batch routes tokens to every expert
# of both layers (checked by the step test: the check is not vacuous)
PERTURB_SEED = {"mixtral": 2, "gpt-oss": 3, "qwen2-moe": 1, "olmoe": 1}


def _moe_case(name: str = "mixtral") -> gradcheck.Case:
    export._no_packed_sequences()  # as every transformers export here (bench/import/zoo.py)
    cls, cfg, extra = MODELS[name]
    common = COMMON if "num_experts" not in extra else _NAMED
    config = getattr(transformers, cfg)(**{**common, **extra})
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


def _check_form(mlir: str, form: str):
    """The experts' four products (gate_up and down, 2 layers) read no per-token weight
    copies. grouped: four GroupedMatMuls of the 64 slot rows forward (four more for dX) and
    one GroupedMatMulGradWeight per product; dense: products of all experts and, per token
    (gate_up: the 32 tokens, each routed twice) or per slot (down: 64), one-hot [k, E] rows
    times the token's [E, O] products."""
    assert not re.search(r"graph\.Gather(ND)? [^\n]*: \(tensor<4x\d+x\d+xf32>", mlir)
    grads = re.findall(r"graph\.GroupedMatMulGradWeight [^\n]*-> tensor<4x\d+x\d+xf32>", mlir)
    if form == "grouped":
        assert len(grads) == 4, grads
        assert len(re.findall(r"graph\.GroupedMatMul [^\n]*: \(tensor<64x\d+xf32>, "
                              r"tensor<4x\d+x\d+xf32>, tensor<64xi64>\)", mlir)) == 8
    else:
        assert "GroupedMatMul" not in mlir
        assert len(re.findall(r"graph\.MatMul [^\n]*: \(tensor<32x2x4xf32>, tensor<32x4x\d+xf32>\)",
                              mlir)) == 2
        assert len(re.findall(r"graph\.MatMul [^\n]*: \(tensor<64x1x4xf32>, tensor<64x4x\d+xf32>\)",
                              mlir)) == 2


@pytest.mark.parametrize("form", ["grouped", "dense"])
@pytest.mark.parametrize("name", sorted(MODELS))
def test_moe_step_matches_torch(name, form, tmp_path):
    case = _moe_case(name)
    job, mlir = _straitc_job(case, str(tmp_path), "--optimizer", "none", "--return-gradients",
                             "--moe-experts", form)
    _check_form(mlir, form)
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


@pytest.mark.parametrize("name", ["mixtral", "qwen2-moe", "olmoe"])
def test_adamw_follows_torch_in_both_forms(name, tmp_path):
    """AdamW steps on the runtime follow torch's losses on the same batch (the runtime
    prints 6 significant digits; the routing is the same at every step, so the trajectory
    stays smooth), with the grouped and with the dense experts; the two forms' losses
    agree."""
    steps, lr = 8, 3e-3
    case = _moe_case(name)
    losses, runs = {}, {}
    for form in ("grouped", "dense"):
        tmp = os.path.join(str(tmp_path), form)
        os.makedirs(tmp)
        job, mlir = _straitc_job(case, tmp, "--optimizer", "adamw", "--weight-decay", "0.01",
                                 "--lr", str(lr), "--moe-experts", form)
        _check_form(mlir, form)
        out, _ = _run(case, job, tmp, "--steps", str(steps))
        runtime = [float(v) for v in re.findall(r"^step \d+/\d+ loss (\S+)", out, re.M)]
        assert len(runtime) == steps, out[-1000:]
        runs[form] = runtime
    # After both exports: torch_trajectory trains the module in place.
    reference = gradcheck.torch_trajectory(case, steps, lr, weight_decay=0.01)
    for form, runtime in runs.items():
        rel = np.abs(np.array(runtime) - reference) / np.abs(reference)
        assert rel.max() < 1e-3, f"{form} step {rel.argmax() + 1}: {runtime[rel.argmax()]} " \
                                 f"vs {reference[rel.argmax()]}"
        assert runtime[-1] < 0.9 * runtime[0], (form, runtime)
        losses[form] = np.array(runtime)
    assert np.abs(losses["grouped"] - losses["dense"]).max() <= 1e-5 * np.abs(losses["dense"]).max()
