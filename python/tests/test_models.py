"""Checks of the committed reference models in models/ (see docs/models.md).

Needs onnx, onnxruntime and numpy only: no torch. The big models are committed shape-only
(initializers reference a git-ignored <name>.onnx.data file); tiny ones carry their weights.
"""
from __future__ import annotations

import collections
import json
import os
import shutil
import subprocess
import sys

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MODELS = os.path.join(ROOT, "models")
sys.path.insert(0, os.path.join(ROOT, "python"))

from strait import weights  # noqa: E402

PARAM_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"
OPSET = 18
CONTROL_FLOW = {"If", "Loop", "Scan", "SequenceMap"}

# name -> what the export must contain. params: exact torch parameter count (unique tensors);
# n_params: number of parameter tensors; ops: op types that must occur (with their exact
# count where given); inputs: the graph inputs with their (symbolic) dims.
TEXT = {"input_ids": ["batch", "seq"]}
IMAGE = {"pixel_values": ["batch", 3, 224, 224]}
EXPECTED = {
    "gpt2-tiny": dict(params=124_672, n_params=28, inline=True, inputs=TEXT,
                      out=["batch", "seq", 256],
                      ops={"LayerNormalization": 5, "Gemm": 8, "Softmax": 2, "Tanh": 2}),
    "gpt2": dict(params=124_439_808, n_params=148, inline=False, inputs=TEXT,
                 out=["batch", "seq", 50257],
                 ops={"LayerNormalization": 25, "Gemm": 48, "Softmax": 12, "Tanh": 12}),
    "bert-base": dict(params=109_514_298, n_params=202, inline=False, inputs=TEXT,
                      out=["batch", "seq", 30522],
                      ops={"LayerNormalization": 26, "Softmax": 12, "Erf": 13}),
    "llama-tiny": dict(params=133_440, n_params=21, inline=True, inputs=TEXT,
                       out=["batch", "seq", 256],
                       ops={"Softmax": 2, "Sigmoid": 2, "ReduceMean": 5, "Cos": 1, "Sin": 1}),
    "llama-7b": dict(params=6_738_415_616, n_params=291, inline=False, inputs=TEXT,
                     out=["batch", "seq", 32000],
                     ops={"Softmax": 32, "Sigmoid": 32, "ReduceMean": 65, "Cos": 1, "Sin": 1}),
    "vit-b-16": dict(params=86_567_656, n_params=152, inline=False, inputs=IMAGE,
                     out=["batch", 1000],
                     ops={"Conv": 1, "LayerNormalization": 25, "Softmax": 12, "Erf": 12}),
    "resnet50": dict(params=25_557_032, n_params=161, inline=False, inputs=IMAGE,
                     out=["batch", 1000],
                     ops={"Conv": 53, "BatchNormalization": 53, "MaxPool": 1, "Gemm": 1}),
    "resnet101": dict(params=44_549_160, n_params=314, inline=False, inputs=IMAGE,
                      out=["batch", 1000],
                      ops={"Conv": 104, "BatchNormalization": 104, "MaxPool": 1, "Gemm": 1}),
    "mobilenet-v3-large": dict(params=5_483_032, n_params=174, inline=False, inputs=IMAGE,
                               out=["batch", 1000],
                               ops={"Conv": 62, "BatchNormalization": 46, "HardSwish": 21,
                                    "HardSigmoid": 8, "Gemm": 2}),
}
NAMES = sorted(EXPECTED)


def _path(name):
    return os.path.join(MODELS, name, f"{name}.onnx")


_cache = {}


def _load(name) -> onnx.ModelProto:
    if name not in _cache:
        _cache[name] = onnx.load(_path(name), load_external_data=False)
    return _cache[name]


def _meta(m):
    return {p.key: p.value for p in m.metadata_props}


def _numel(t):
    return int(np.prod(t.dims, dtype=np.int64))


def _param_names(m, kinds=("PARAMETER",)):
    return {vi.name for vi in m.graph.value_info
            for p in vi.metadata_props if p.key == PARAM_KIND and p.value in kinds}


def _dims(vi):
    return [d.dim_param or d.dim_value for d in vi.type.tensor_type.shape.dim]


@pytest.mark.parametrize("name", NAMES)
def test_committed_file(name):
    p = _path(name)
    assert os.path.isfile(p)
    assert os.path.getsize(p) < 5 * 1024 * 1024
    m = _load(name)
    assert [(o.domain, o.version) for o in m.opset_import] == [("", OPSET)]
    meta = _meta(m)
    assert meta["strait.model"] == name
    assert meta["strait.exporter"].startswith("torch.onnx.export(dynamo=True")
    assert {i.name: _dims(i) for i in m.graph.input} == EXPECTED[name]["inputs"]
    assert [_dims(o) for o in m.graph.output] == [EXPECTED[name]["out"]]


@pytest.mark.parametrize("name", NAMES)
def test_parameters(name):
    m, exp = _load(name), EXPECTED[name]
    params = _param_names(m)
    inits = {t.name: t for t in m.graph.initializer}
    assert params <= set(inits), "a parameter is not an initializer"
    assert len(params) == exp["n_params"]
    total = sum(_numel(inits[n]) for n in params)
    assert total == exp["params"] == int(_meta(m)["strait.num_parameters"])
    for n in params:
        assert inits[n].data_type == TensorProto.FLOAT, n
    # no two parameters were merged: every weight/bias name of torch is its own tensor
    assert len({n for n in params}) == len(params)


@pytest.mark.parametrize("name", NAMES)
def test_ops(name):
    m, exp = _load(name), EXPECTED[name]
    hist = collections.Counter(n.op_type for n in m.graph.node)
    assert not CONTROL_FLOW & set(hist), hist
    assert all(n.domain in ("", "ai.onnx") for n in m.graph.node)
    for op, count in exp["ops"].items():
        assert hist[op] == count, (op, hist[op], count)


@pytest.mark.parametrize("name", NAMES)
def test_shape_inference(name):
    m = _load(name)
    inferred = onnx.shape_inference.infer_shapes(m, check_type=True, strict_mode=True)
    out = inferred.graph.output[0]
    assert _dims(out) == EXPECTED[name]["out"]


@pytest.mark.parametrize("name", NAMES)
def test_external_data_layout(name):
    m, exp = _load(name), EXPECTED[name]
    ext = weights.external_tensors(m)
    if exp["inline"]:
        assert ext == []
        return
    state = _param_names(m, ("PARAMETER", "BUFFER"))
    location = f"{name}.onnx.data"
    spans = []
    for t, loc, off, length in ext:
        assert loc == location
        assert off % 4096 == 0
        assert not t.raw_data and not t.float_data
        spans.append((off, off + length))
    spans.sort()
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:])), "overlapping tensors"
    ext_names = {t.name for t, *_ in ext}
    for t in m.graph.initializer:
        big_float = t.data_type == TensorProto.FLOAT and _numel(t) * 4 >= 1024
        # torch state goes external from 1 KiB; constants made by the exporter stay inline
        assert (t.name in ext_names) == (big_float and t.name in state), t.name
    # almost every parameter byte is external; what stays inline is < 1 MiB
    inline_bytes = sum(len(t.raw_data) for t in m.graph.initializer)
    assert inline_bytes < 1 << 20


@pytest.mark.parametrize("name", ["gpt2", "llama-7b", "bert-base"])
def test_transformer_layers(name):
    """All layers are there, each with its own weights (the 7B one is built without them)."""
    m = _load(name)
    cfg = json.loads(_meta(m)["strait.config"])
    layers = cfg.get("n_layer") or cfg.get("num_hidden_layers") or 12
    params = _param_names(m)
    key = {"gpt2": "transformer.h.{}.", "llama-7b": "model.layers.{}.",
           "bert-base": "bert.encoder.layer.{}."}[name]
    for i in range(layers):
        assert any(p.startswith(key.format(i)) for p in params), i
    assert not any(p.startswith(key.format(layers)) for p in params)
    if name == "llama-7b":
        shapes = {t.name: list(t.dims) for t in m.graph.initializer}
        assert shapes["model.layers.31.mlp.gate_proj.weight"] == [11008, 4096]
        assert shapes["model.layers.0.self_attn.q_proj.weight"] == [4096, 4096]
        assert shapes["model.embed_tokens.weight"] == [32000, 4096]
        assert shapes["lm_head.weight"] == [32000, 4096]
        assert shapes["model.norm.weight"] == [4096]


def _ids(rng, b, s, vocab=256):
    return rng.integers(0, vocab, size=(b, s), dtype=np.int64)


@pytest.mark.parametrize("name", ["gpt2-tiny", "llama-tiny"])
def test_tiny_runs_and_is_causal(name):
    sess = ort.InferenceSession(_path(name), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(0)
    for b, s in [(1, 2), (3, 17), (2, 128)]:
        ids = _ids(rng, b, s)
        (logits,) = sess.run(None, {"input_ids": ids})
        assert logits.shape == (b, s, 256) and logits.dtype == np.float32
        assert np.isfinite(logits).all()
        assert logits.std() > 1e-3
        changed = ids.copy()
        changed[:, -1] = (changed[:, -1] + 1) % 256
        (logits2,) = sess.run(None, {"input_ids": changed})
        np.testing.assert_allclose(logits2[:, :-1], logits[:, :-1], atol=1e-5)
        assert not np.allclose(logits2[:, -1], logits[:, -1])
    # rows of a batch are independent
    ids = _ids(rng, 2, 9)
    (both,) = sess.run(None, {"input_ids": ids})
    (one,) = sess.run(None, {"input_ids": ids[1:]})
    np.testing.assert_allclose(both[1:], one, atol=1e-5)


def test_init_kind():
    assert weights.init_kind("transformer.h.0.ln_1.weight", (768,)) == "ones"
    assert weights.init_kind("layer1.0.bn1.running_var", (64,)) == "ones"
    assert weights.init_kind("layer1.0.bn1.running_mean", (64,)) == "zeros"
    assert weights.init_kind("transformer.h.0.attn.c_attn.bias", (2304,)) == "zeros"
    assert weights.init_kind("model.layers.0.mlp.up_proj.weight", (11008, 4096)) == "normal"
    assert weights.init_kind("conv1.weight", (64, 3, 7, 7)) == "normal"
    assert weights.init_kind("encoder.pos_embedding", (1, 197, 768)) == "normal"


def _externalize(name, tmp_path):
    """A tiny model rewritten with external data, then its data file deleted."""
    m = onnx.load(_path(name))
    out = tmp_path / f"{name}.onnx"
    onnx.save_model(m, str(out), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=f"{name}.onnx.data", size_threshold=1024)
    os.remove(tmp_path / f"{name}.onnx.data")
    return out


def test_weights_tiny_roundtrip(tmp_path):
    p = _externalize("gpt2-tiny", tmp_path)
    r = weights.regenerate(str(p), seed=3)
    assert r["tensors"] > 10 and os.path.getsize(r["files"][0]) >= r["bytes"]
    m = onnx.load(str(p), load_external_data=True)
    inits = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    assert (inits["transformer.h.1.ln_2.weight"] == 1).all()
    assert (inits["transformer.h.1.mlp.c_fc.bias"] == 0).all()
    w = inits["transformer.h.0.attn.c_attn.weight"]
    assert w.shape == (64, 192) and abs(w.std() - 0.02) < 0.002 and abs(w.mean()) < 0.002
    sess = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    (logits,) = sess.run(None, {"input_ids": _ids(np.random.default_rng(1), 2, 10)})
    assert logits.shape == (2, 10, 256) and np.isfinite(logits).all()
    # deterministic per seed, different across seeds
    first = open(r["files"][0], "rb").read()
    weights.regenerate(str(p), seed=3)
    assert open(r["files"][0], "rb").read() == first
    weights.regenerate(str(p), seed=4)
    assert open(r["files"][0], "rb").read() != first


def test_weights_cli_mobilenet(tmp_path):
    name = "mobilenet-v3-large"
    shutil.copy(_path(name), tmp_path)
    p = tmp_path / f"{name}.onnx"
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))
    r = subprocess.run([sys.executable, "-m", "strait.weights", str(p), "--seed", "0"],
                       env=env, capture_output=True, text=True, check=True)
    assert "wrote" in r.stdout
    data = tmp_path / f"{name}.onnx.data"
    m = _load(name)
    last = max(off + n for _, _, off, n in weights.external_tensors(m))
    assert os.path.getsize(data) == last
    loaded = onnx.load(str(p), load_external_data=True)
    assert sum(_numel(t) for t in loaded.graph.initializer
               if t.name in _param_names(m)) == EXPECTED[name]["params"]
    sess = ort.InferenceSession(str(p), providers=["CPUExecutionProvider"])
    x = np.random.default_rng(0).standard_normal((2, 3, 224, 224)).astype(np.float32)
    (y,) = sess.run(None, {"pixel_values": x})
    assert y.shape == (2, 1000) and np.isfinite(y).all()


def test_weights_rejects_bad_length(tmp_path):
    m = onnx.load(_path("resnet50"), load_external_data=False)
    t = next(t for t in m.graph.initializer if t.data_location == TensorProto.EXTERNAL)
    for e in t.external_data:
        if e.key == "length":
            e.value = str(int(e.value) - 4)
    p = tmp_path / "bad.onnx"
    onnx.save_model(m, str(p))
    with pytest.raises(ValueError, match="length"):
        weights.regenerate(str(p))


def test_weights_rejects_escaping_location(tmp_path):
    m = onnx.load(_path("resnet50"), load_external_data=False)
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../escape.data"
    p = tmp_path / "bad.onnx"
    onnx.save_model(m, str(p))
    with pytest.raises(ValueError, match="escapes"):
        weights.regenerate(str(p))
    assert not (tmp_path.parent / "escape.data").exists()
