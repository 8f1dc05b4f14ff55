"""Export Strait's reference models to ONNX with PyTorch's own exporter.

    PYTHONPATH=python python -m strait.models.export --out models/ [--only NAME ...]
                                                     [--with-data] [--verify]

Every model is built from a config with random initialization (fixed seed), traced with
``torch.onnx.export(..., dynamo=True)`` (torch.export + onnxscript's torchlib, opset 18)
and saved as ``<out>/<name>/<name>.onnx``.

Large models are *shape-only*: each float initializer of >= 1024 bytes becomes an ONNX
external-data reference (location ``<name>.onnx.data``, offset, length) and the data file
itself is only written with ``--with-data``. ``python -m strait.weights`` regenerates such a
data file with random weights from the graph alone, without torch. Tiny models keep their
weights inline so tests can run them with onnxruntime.

LLaMA-7B (6.7 B parameters, 27 GB in f32) does not fit in memory. It is built on the meta
device and moved to CPU with ``Module.to_empty``: the parameter storages are allocated but
never written or read (untouched pages cost no memory), torch.export traces with fake tensors,
and the saver below only records offsets and lengths. Only the rotary ``inv_freq`` buffer is
re-created with real values. The graph is the exporter's real output for all 32 layers.

Post-processing differs from ``optimize=True`` in two ways, both needed for training:
 - initializers are never de-duplicated by value (the default optimizer merges e.g. all
   zero-initialized biases into one tensor, which would tie parameters together), and
 - nodes that read a parameter are never constant-folded (which would replace e.g. a weight
   by its transpose under a generated name).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import time
from typing import Callable

OPSET = 18
# onnx.save_model(size_threshold=1024): smaller tensors stay inline.
SIZE_THRESHOLD = 1024
# Each external tensor starts at a multiple of this (mmap-friendly).
ALIGN = 4096
SEED = 0
# Wrapper modules hold the real model as attribute `m`; the prefix is stripped on save.
WRAP_PREFIX = "m."


@dataclasses.dataclass
class Built:
    module: "object"  # torch.nn.Module
    args: tuple  # example inputs
    input_names: list
    output_names: list
    dynamic_shapes: dict
    source: str  # human-readable description of what was built
    config: dict | None = None


@dataclasses.dataclass
class Spec:
    name: str
    build: Callable[[], Built]
    inline_weights: bool = False  # tiny: weights inside the .onnx
    lazy: bool = False  # weights never materialized (shape-only, no --with-data)
    summary: str = ""


# ---------------------------------------------------------------------------------------
# Builders


def _torch():
    import torch

    return torch


class _CausalLM:  # factory for a wrapper class (keeps torch import lazy)
    @staticmethod
    def make(model):
        torch = _torch()

        class LM(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, use_cache=False, return_dict=False)[0]

        return LM(model).eval()


class _EncoderLM:
    @staticmethod
    def make(model):
        torch = _torch()

        class LM(torch.nn.Module):
            def __init__(self, m):
                super().__init__()
                self.m = m

            def forward(self, input_ids):
                return self.m(input_ids=input_ids, return_dict=False)[0]

        return LM(model).eval()


def _no_packed_sequences():
    """transformers 5 detects "packed" batches (several sequences per row) from position_ids
    when no attention mask is given; under tracing the check cannot short-circuit, so ~50
    ops (diff, CumSum, GatherND, ...) that always compute "one sequence per row" end up in
    the graph. We export plain causal/bidirectional LMs: the helper reports no packing."""
    import transformers.masking_utils as mu

    mu.find_packed_sequence_indices = lambda position_ids: None


def _text_inputs(vocab, max_seq, batch=2, seq=16):
    torch = _torch()
    from torch.export import Dim

    _no_packed_sequences()
    g = torch.Generator().manual_seed(SEED)
    ids = torch.randint(0, vocab, (batch, seq), generator=g, dtype=torch.int64)
    dyn = {"input_ids": {0: Dim("batch", min=1, max=4096), 1: Dim("seq", min=2, max=max_seq)}}
    return (ids,), dyn


def _hf_dict(cfg):
    d = cfg.to_diff_dict()
    return {k: v for k, v in d.items() if not k.startswith("_") and k != "transformers_version"}


def build_gpt2(tiny: bool) -> Built:
    torch = _torch()
    from transformers import GPT2Config, GPT2LMHeadModel

    if tiny:
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=256, n_positions=128,
                         bos_token_id=0, eos_token_id=0)
    else:
        cfg = GPT2Config()  # GPT-2 small: 12 layers, 768 wide, 12 heads, vocab 50257
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = GPT2LMHeadModel(cfg).eval()
    args, dyn = _text_inputs(cfg.vocab_size, cfg.n_positions)
    return Built(_CausalLM.make(model), args, ["input_ids"], ["logits"], dyn,
                 "transformers.GPT2LMHeadModel", _hf_dict(cfg))


def build_bert() -> Built:
    torch = _torch()
    from transformers import BertConfig, BertForMaskedLM

    cfg = BertConfig()  # bert-base-uncased shapes: 12 layers, 768 wide, vocab 30522
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    model = BertForMaskedLM(cfg).eval()
    args, dyn = _text_inputs(cfg.vocab_size, cfg.max_position_embeddings)
    return Built(_EncoderLM.make(model), args, ["input_ids"], ["logits"], dyn,
                 "transformers.BertForMaskedLM", _hf_dict(cfg))


def _llama_config(tiny: bool):
    from transformers import LlamaConfig

    if tiny:
        return LlamaConfig(hidden_size=64, intermediate_size=176, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=4, vocab_size=256,
                           max_position_embeddings=256, rms_norm_eps=1e-5,
                           bos_token_id=1, eos_token_id=2)
    # Llama-2-7B shapes.
    return LlamaConfig(hidden_size=4096, intermediate_size=11008, num_hidden_layers=32,
                       num_attention_heads=32, num_key_value_heads=32, vocab_size=32000,
                       max_position_embeddings=4096, rms_norm_eps=1e-5,
                       bos_token_id=1, eos_token_id=2, tie_word_embeddings=False)


def build_llama(tiny: bool) -> Built:
    torch = _torch()
    from transformers import LlamaForCausalLM
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    cfg = _llama_config(tiny)
    cfg._attn_implementation = "eager"
    torch.manual_seed(SEED)
    if tiny:
        model = LlamaForCausalLM(cfg).eval()
    else:
        # No weight is ever materialized: meta -> uninitialized CPU storage (lazy pages).
        with torch.device("meta"):
            model = LlamaForCausalLM(cfg)
        model = model.to_empty(device="cpu").eval()
        # The only state whose values matter to the graph: rotary inverse frequencies.
        model.model.rotary_emb = LlamaRotaryEmbedding(config=cfg)
    args, dyn = _text_inputs(cfg.vocab_size, cfg.max_position_embeddings)
    return Built(_CausalLM.make(model), args, ["input_ids"], ["logits"], dyn,
                 "transformers.LlamaForCausalLM", _hf_dict(cfg))


def _vision(ctor_name: str, **kw) -> Built:
    torch = _torch()
    import torchvision
    from torch.export import Dim

    torch.manual_seed(SEED)
    model = getattr(torchvision.models, ctor_name)(weights=None, **kw).eval()
    g = torch.Generator().manual_seed(SEED)
    x = torch.randn(2, 3, 224, 224, generator=g)
    dyn = {"x": {0: Dim("batch", min=1, max=4096)}}
    return Built(model, (x,), ["pixel_values"], ["logits"], dyn,
                 f"torchvision.models.{ctor_name}(weights=None)", {"num_classes": 1000})


SPECS = [
    Spec("gpt2-tiny", lambda: build_gpt2(True), inline_weights=True,
         summary="GPT-2 architecture, 2 layers, 64 wide, 4 heads, vocab 256, 128 positions"),
    Spec("gpt2", lambda: build_gpt2(False), summary="GPT-2 small (124M)"),
    Spec("bert-base", build_bert, summary="BERT-base masked LM (110M + MLM head)"),
    Spec("llama-tiny", lambda: build_llama(True), inline_weights=True,
         summary="LLaMA architecture, 2 layers, 64 wide, 4 heads, vocab 256"),
    Spec("llama-7b", lambda: build_llama(False), lazy=True,
         summary="LLaMA-2-7B shapes: 32 layers, 4096 wide, 32 heads, FFN 11008, vocab 32000"),
    Spec("vit-b-16", lambda: _vision("vit_b_16"), summary="ViT-B/16, 224x224"),
    Spec("resnet50", lambda: _vision("resnet50"), summary="ResNet-50, 224x224"),
    Spec("resnet101", lambda: _vision("resnet101"), summary="ResNet-101, 224x224"),
    Spec("mobilenet-v3-large", lambda: _vision("mobilenet_v3_large"),
         summary="MobileNetV3-Large, 224x224"),
]
SPEC_BY_NAME = {s.name: s for s in SPECS}


# ---------------------------------------------------------------------------------------
# Export and post-processing


def _rewrite_rules():
    """onnxscript's default rewrite rules minus those that look at parameter *values*:
    Conv+BatchNormalization fusion, dropping all-zero biases, and x*1 / x+0 no-op removal
    (all three would silently remove trainable parameters from the graph)."""
    from onnxscript import rewriter
    from onnxscript.rewriter.rules.common import _fuse_batchnorm, _no_op, _remove_optional_bias

    dropped = {id(r) for r in (*_fuse_batchnorm.rules, *_no_op.rules,
                               *_remove_optional_bias.rules)}
    return [r for r in rewriter._DEFAULT_REWRITE_RULES if id(r) not in dropped]


def _optimize(model, protected: set[str]) -> None:
    """onnxscript's default optimizer minus initializer de-duplication, never folding
    nodes that read a parameter or buffer (see module docstring)."""
    import onnx_ir as ir
    import onnx_ir.passes.common as common_passes
    from onnxscript import rewriter
    from onnxscript.optimizer import _constant_folding

    def should_fold(node):
        for v in node.inputs:
            if v is not None and v.name in protected:
                return False
        return None

    passes = ir.passes.Sequential(
        common_passes.InlinePass(),
        ir.passes.PassManager(
            [
                _constant_folding.FoldConstantsPass(
                    shape_inference=True,
                    input_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_INPUT_SIZE_LIMIT,
                    output_size_limit=_constant_folding.DEFAULT_CONSTANT_FOLD_OUTPUT_SIZE_LIMIT,
                    should_fold=should_fold,
                ),
                rewriter.RewritePass(_rewrite_rules()),
                common_passes.RemoveUnusedNodesPass(),
                common_passes.RemoveUnusedFunctionsPass(),
                common_passes.RemoveUnusedOpsetsPass(),
            ],
            steps=2,
            early_stop=True,
        ),
        common_passes.RemoveUnusedNodesPass(),
        common_passes.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=0),
        common_passes.LiftSubgraphInitializersToMainGraphPass(),
        common_passes.CommonSubexpressionEliminationPass(),
        common_passes.OutputFixPass(),
        common_passes.NameFixPass(),
    )
    passes(model)


def _is_float(dtype) -> bool:
    import onnx_ir as ir

    return dtype in (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16,
                     ir.DataType.DOUBLE)


def _rename(proto, mapping: dict[str, str]) -> None:
    g = proto.graph
    for t in g.initializer:
        t.name = mapping.get(t.name, t.name)
    for n in g.node:
        for i, x in enumerate(n.input):
            if x in mapping:
                n.input[i] = mapping[x]
        for i, x in enumerate(n.output):
            if x in mapping:
                n.output[i] = mapping[x]
    for coll in (g.input, g.output, g.value_info):
        for v in coll:
            v.name = mapping.get(v.name, v.name)


# Per-node metadata kept: the torch module path of each node (useful to coarsen the graph into
# layers). Stack traces, FX node text and class names are dropped (they triple the file size).
KEEP_NODE_METADATA = "pkg.torch.onnx.name_scopes"


def _strip_node_metadata(proto) -> None:
    import ast

    for n in proto.graph.node:
        scopes = None
        for p in n.metadata_props:
            if p.key == KEEP_NODE_METADATA:
                scopes = ast.literal_eval(p.value)
        del n.metadata_props[:]
        if scopes is not None:
            scopes = [s[len(WRAP_PREFIX):] if s.startswith(WRAP_PREFIX) else s
                      for s in scopes if s != WRAP_PREFIX[:-1]]
            e = n.metadata_props.add()
            e.key, e.value = KEEP_NODE_METADATA, repr(scopes)
    for vi in proto.graph.value_info:
        kind = [p.value for p in vi.metadata_props
                if p.key == "pkg.torch.export.graph_signature.InputSpec.kind"]
        del vi.metadata_props[:]
        if kind:
            e = vi.metadata_props.add()
            e.key, e.value = "pkg.torch.export.graph_signature.InputSpec.kind", kind[0]


def save(model, out_dir: str, name: str, *, inline_all: bool, write_data: bool,
         state_names: set[str], metadata: dict[str, str]) -> dict:
    """Save `model` (an onnx_ir.Model) as out_dir/name.onnx (+ name.onnx.data).

    Only torch state (parameters and buffers, `state_names`) goes external; constants the
    exporter made (e.g. the zero bias it gives a bias-less Conv) stay inline whatever their
    size, because their values are part of the computation and weights.py could not
    recreate them."""
    import onnx
    import onnx_ir as ir

    os.makedirs(out_dir, exist_ok=True)
    location = f"{name}.onnx.data"
    data_path = os.path.join(out_dir, location)
    entries = []
    offset = 0
    for v in model.graph.initializers.values():
        t = v.const_value
        if (inline_all or v.name not in state_names or not _is_float(t.dtype)
                or t.nbytes < SIZE_THRESHOLD):
            continue
        offset = (offset + ALIGN - 1) // ALIGN * ALIGN
        entries.append((v, t, offset, t.nbytes))
        offset += t.nbytes
    data_bytes = offset
    if entries and write_data:
        with open(data_path, "wb") as f:
            for _, t, off, n in entries:
                f.seek(off)
                b = t.tobytes()
                assert len(b) == n, (t.name, len(b), n)
                f.write(b)
            f.truncate(data_bytes)
    elif os.path.exists(data_path):
        os.remove(data_path)  # stale data for an older graph would be wrong
    for v, t, off, n in entries:
        v.const_value = ir.ExternalTensor(location, off, n, t.dtype, shape=t.shape,
                                          name=v.name, base_dir=out_dir)
    proto = ir.serde.serialize_model(model)
    _strip_node_metadata(proto)
    mapping = {}
    for t in proto.graph.initializer:
        if t.name.startswith(WRAP_PREFIX):
            mapping[t.name] = t.name[len(WRAP_PREFIX):]
    _rename(proto, mapping)
    del proto.metadata_props[:]
    for k, val in metadata.items():
        e = proto.metadata_props.add()
        e.key, e.value = k, str(val)
    path = os.path.join(out_dir, f"{name}.onnx")
    onnx.save_model(proto, path)
    return {"path": path, "external_tensors": len(entries), "data_bytes": data_bytes,
            "data_written": bool(entries and write_data)}


def _check_parameters(model, module, num_params: int) -> None:
    """Every torch parameter must be an initializer of the same shape, once."""
    names = {}
    for n, p in module.named_parameters(remove_duplicate=False):
        names[n] = tuple(p.shape)
    found = 0
    for name, v in model.graph.initializers.items():
        if name in names:
            shape = tuple(v.const_value.shape.numpy())
            if shape != names[name]:
                raise SystemExit(f"parameter {name}: graph shape {shape} != {names[name]}")
            found += v.const_value.size
    if found != num_params:
        missing = sorted(set(names) - set(model.graph.initializers))
        raise SystemExit(f"graph holds {found} parameter elements, torch has {num_params}; "
                         f"not in the graph: {missing[:20]}")


def export_one(spec: Spec, out_root: str, *, with_data: bool, verify: bool) -> dict:
    torch = _torch()
    import onnx

    t0 = time.time()
    b = spec.build()
    module = b.module
    params = {id(p): p for p in module.parameters()}  # unique (tied weights count once)
    num_params = sum(p.numel() for p in params.values())
    expected = None
    if verify and not spec.lazy:
        with torch.no_grad():
            expected = module(*b.args).numpy()
    # dynamic_shapes is keyed by forward()'s argument names (input_ids, x); input_names renames
    program = torch.onnx.export(
        module, b.args, dynamo=True, opset_version=OPSET, optimize=False,
        input_names=b.input_names, output_names=b.output_names,
        dynamic_shapes=b.dynamic_shapes, verify=False, report=False)
    model = program.model
    _check_parameters(model, module, num_params)
    protected = set(model.graph.initializers.keys())
    _optimize(model, protected)
    _check_parameters(model, module, num_params)
    t_export = time.time() - t0

    meta = {
        "strait.model": spec.name,
        "strait.source": b.source,
        "strait.config": json.dumps(b.config, sort_keys=True),
        "strait.exporter": f"torch.onnx.export(dynamo=True, opset_version={OPSET}) "
                           f"torch {torch.__version__.split('+')[0]}",
        "strait.seed": str(SEED),
        "strait.num_parameters": str(num_params),
        "strait.weights": "inline" if spec.inline_weights else
                          ("external-uninitialized" if spec.lazy else "external"),
    }
    out_dir = os.path.join(out_root, spec.name)
    state_names = {n for n, _ in module.named_parameters(remove_duplicate=False)}
    state_names |= {n for n, _ in module.named_buffers(remove_duplicate=False)}
    info = save(model, out_dir, spec.name, inline_all=spec.inline_weights,
                state_names=state_names,
                write_data=(with_data or verify) and not spec.lazy, metadata=meta)
    info.update(name=spec.name, num_parameters=num_params, export_s=round(t_export, 1))

    if expected is not None:
        import onnxruntime as ort

        sess = ort.InferenceSession(info["path"], providers=["CPUExecutionProvider"])
        got = sess.run(None, {b.input_names[0]: b.args[0].numpy()})[0]
        # relative to the output's scale (random-init vision nets give tiny logits)
        err = float(abs(got - expected).max() / max(float(abs(expected).max()), 1e-30))
        info["verify_max_rel_err"] = err
        if not err < 1e-4:
            raise SystemExit(f"{spec.name}: onnxruntime differs from torch by {err}")
    _check_file(info["path"], info["data_bytes"])
    if expected is not None and not with_data and info["data_written"]:
        os.remove(os.path.join(out_dir, f"{spec.name}.onnx.data"))
        info["data_written"] = False
    info["onnx_bytes"] = os.path.getsize(info["path"])
    return info


def _check_file(path: str, data_bytes: int) -> None:
    """onnx.checker (full, with shape inference) on the saved file. The checker insists on
    the external data file existing, so a sparse placeholder stands in when there is none."""
    import onnx

    data = path + ".data"
    placeholder = data_bytes > 0 and not os.path.exists(data)
    if placeholder:
        with open(data, "wb") as f:
            f.truncate(data_bytes)
    try:
        onnx.checker.check_model(path, full_check=True)
    finally:
        if placeholder:
            os.remove(data)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="models", help="output root (models/<name>/<name>.onnx)")
    ap.add_argument("--only", action="append", choices=sorted(SPEC_BY_NAME),
                    help="export only this model (repeatable)")
    ap.add_argument("--with-data", action="store_true",
                    help="also write <name>.onnx.data with the torch weights (not for llama-7b)")
    ap.add_argument("--verify", action="store_true",
                    help="compare onnxruntime against torch on the example input")
    ap.add_argument("--list", action="store_true", help="list the models and exit")
    a = ap.parse_args(argv)
    if a.list:
        for s in SPECS:
            print(f"{s.name:20s} {s.summary}")
        return 0
    names = a.only or [s.name for s in SPECS]
    for n in names:
        info = export_one(SPEC_BY_NAME[n], a.out, with_data=a.with_data, verify=a.verify)
        print(json.dumps(info), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
