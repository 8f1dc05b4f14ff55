"""LoRA adapters trained by Strait (straitc --lora): the seed contract of their initial values
and the merge of trained adapters into the base weights.

straitc --lora R (the graph-add-lora pass) gives each target weight W two parameters,
``<W>.lora_A`` [in, R] and ``<W>.lora_B`` [R, out], and computes y = x W + (alpha/R) (x A) B,
where W is the logical [in, out] matrix: an ONNX weight read through Transpose or by a Gemm
with transB (a PyTorch Linear's [out, in]) holds W transposed. ``strait-run --save-params``
writes them by name next to the (frozen) base weights. See docs/training.md, "LoRA".

    from strait import lora
    lora.merge_into_onnx("model.onnx", "params/", "merged.onnx")   # alpha from params/lora.json
    params = lora.load_saved_params("params/")                     # or {name: array} ...
    lora.merge_into_onnx("model.onnx", params, "merged.onnx", alpha=16)  # ... and alpha by hand

straitc writes the adapters' rank, alpha and dropout into the job folder (``lora.json``) and
``strait-run --save-params`` copies it next to the parameters, so a folder carries its scale.
``python -m strait.export`` (python/strait/export.py) writes the merged model as ONNX or
safetensors, or the adapters as a PEFT adapter folder.
"""
from __future__ import annotations

import os

import numpy as np

_MASK = (1 << 64) - 1


def _splitmix64(x: np.ndarray) -> np.ndarray:
    """splitmix64 of each uint64 (the state increment included), as graph-add-lora computes it."""
    with np.errstate(over="ignore"):
        z = x + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def _fnv1a64(text: str) -> int:
    h = 0xCBF29CE484222325
    for c in text.encode():
        h = ((h ^ c) * 0x100000001B3) & _MASK
    return h


def initial_a(weight: str, in_features: int, rank: int, seed: int = 0) -> np.ndarray:
    """The initial ``<weight>.lora_A`` [in_features, rank] (f32) of straitc --lora rank --seed seed
    for a weight with a value: element k (row-major) is (2u - 1) / sqrt(in_features) rounded to
    f32, u = (splitmix64(base + k) >> 11) * 2^-53, base = splitmix64(seed ^ fnv1a64(weight)).
    Uniform in +-1/sqrt(in), PEFT's kaiming_uniform(a=sqrt(5)) bound."""
    base = _splitmix64(np.array([(seed ^ _fnv1a64(weight)) & _MASK], np.uint64))[0]
    with np.errstate(over="ignore"):
        k = base + np.arange(in_features * rank, dtype=np.uint64)
    u = (_splitmix64(k) >> np.uint64(11)).astype(np.float64) * 2.0 ** -53
    bound = 1.0 / np.sqrt(np.float64(in_features))
    return ((2.0 * u - 1.0) * bound).astype(np.float32).reshape(in_features, rank)


def load_saved_params(folder: str) -> dict:
    """{parameter name: array} of a ``strait-run --save-params`` folder (replicas are equal: the
    first rank's copy of each); python/strait/export.py's."""
    from strait import export
    return export.load_saved_params(folder)


def saved_alpha(folder: str) -> float | None:
    """The alpha of the LoRA job whose parameters ``folder`` holds (its ``lora.json``, which
    strait-run --save-params copies from the job folder); None without one."""
    from strait import export
    record = export.lora_record(folder)
    return None if record is None else float(record["alpha"])


def resolve_alpha(params, alpha: float | None) -> float | None:
    """``alpha``, or the one of the folder ``params`` came from (its lora.json); an ``alpha``
    that differs from the folder's is an error. None: R (straitc's default)."""
    folder = getattr(params, "folder", None)
    if folder is None and isinstance(params, (str, os.PathLike)):
        folder = os.fspath(params)
    recorded = saved_alpha(folder) if folder else None
    if recorded is not None and alpha is not None and float(alpha) != recorded:
        raise ValueError(f"alpha={alpha} but {folder}/lora.json says the job trained with "
                         f"alpha={recorded}")
    return recorded if alpha is None else alpha


def adapted_weights(params: dict) -> list:
    """Names of the weights that have both adapters in ``params``."""
    return sorted(n[:-len(".lora_A")] for n in params
                  if n.endswith(".lora_A") and n[:-len(".lora_A")] + ".lora_B" in params)


def delta(params: dict, weight: str, alpha: float | None = None) -> np.ndarray:
    """(alpha / R) A B, the logical [in, out] update of ``weight`` (alpha defaults to R, as
    straitc --lora-alpha does)."""
    a, b = params[weight + ".lora_A"], params[weight + ".lora_B"]
    r = a.shape[1]
    scale = (alpha if alpha else r) / r
    return (scale * (a.astype(np.float64) @ b.astype(np.float64))).astype(np.float32)


def merge(params: dict, alpha: float | None = None, transposed=()) -> dict:
    """``params`` with each adapted W replaced by W + (alpha/R) A B (added transposed for the
    names in ``transposed``: weights stored [out, in]) and the adapters dropped."""
    out = {k: v for k, v in params.items() if not k.endswith((".lora_A", ".lora_B"))}
    for w in adapted_weights(params):
        d = delta(params, w, alpha)
        out[w] = (params[w] + (d.T if w in transposed else d)).astype(params[w].dtype)
    return out


def transposed_weights(model) -> set:
    """Initializers of the ONNX ``model`` that a product reads transposed (through a Transpose,
    or as a Gemm's B with transB = 1): their [out, in] layout gets the update transposed."""
    names = {i.name for i in model.graph.initializer}
    out = set()
    for node in model.graph.node:
        attrs = {a.name: a for a in node.attribute}
        if node.op_type == "Transpose" and node.input[0] in names:
            out.add(node.input[0])
        if (node.op_type == "Gemm" and len(node.input) > 1 and node.input[1] in names
                and "transB" in attrs and attrs["transB"].i):
            out.add(node.input[1])
    return out


def shared_weights(model, weights) -> dict:
    """{weight: an ONNX node that reads it otherwise than as a product's weight} for the
    ``weights`` of ``model`` that have such a reader (a Gather of a tied embedding, ...):
    graph-add-lora adapted only their products (a remark said so), and a merge would change
    the other readers too."""
    names = set(weights)
    through = {}  # Transpose output -> the weight it transposes
    for node in model.graph.node:
        if node.op_type == "Transpose" and node.input and node.input[0] in names:
            through[node.output[0]] = node.input[0]
    out = {}
    for node in model.graph.node:
        for k, name in enumerate(node.input):
            w = name if name in names else through.get(name)
            if w is None or (node.op_type == "Transpose" and name == w):
                continue
            if not (node.op_type in ("MatMul", "Gemm") and k == 1):
                out.setdefault(w, node.name or node.op_type)
    return out


def merged_params(model, params, alpha: float | None = None, model_path: str = "the model"):
    """``params`` (a dict or export.SavedParams) with the adapters merged into the base
    weights of the ONNX ``model`` in their stored layout; alpha from ``params``' folder."""
    alpha = resolve_alpha(params, alpha)
    weights = adapted_weights(params)
    inits = {i.name for i in model.graph.initializer}
    missing = [w for w in weights if w not in inits]
    if missing:
        raise ValueError(f"{model_path} has no initializer named {missing[0]!r} "
                         f"(adapters of {len(missing)} weights have no base weight)")
    shared = shared_weights(model, weights)
    if shared:
        w, node = next(iter(shared.items()))
        raise ValueError(f"{w!r} is also read by {node!r}, which its adapter does not apply "
                         f"to (graph-add-lora adapted its products only): a merged weight "
                         f"would change that reader too; write a PEFT adapter instead "
                         f"(python -m strait.export peft)")
    out = merge(params, alpha, transposed_weights(model))
    if hasattr(params, "files"):
        out = type(params)(out, params.files, params.folder)
    return out


def merge_into_onnx(model_path: str, params, out_path: str, alpha: float | None = None):
    """Writes ``model_path`` with the merged weights (and every other trained parameter of
    ``params``) to ``out_path``: a plain model for onnxruntime or PyTorch, no adapters.
    ``params``: {name: array}, or a ``strait-run --save-params`` folder, whose ``lora.json``
    gives alpha (an ``alpha`` that differs from it is an error). python/strait/export.py's
    write_onnx, which also writes large models as external data."""
    from strait import export
    export.write_onnx(model_path, params, out_path, alpha=alpha)
