"""Regenerate the external-data file of a shape-only ONNX model with random weights.

    PYTHONPATH=python python -m strait.weights models/gpt2/gpt2.onnx [--seed 0] [--out FILE]

The committed graphs under models/ carry every initializer's name, dtype, shape and its
external-data reference (location, offset, length) but no weight bytes. This tool writes the
file the references name (next to the model unless --out is given), placing each tensor at
exactly its recorded offset and length, so the model can be loaded with
``onnx.load(..., load_external_data=True)`` or run with onnxruntime. It needs numpy and onnx
only (no torch).

Init scheme, decided from the initializer's name and shape (last name component = the
torch attribute; float tensors only, see ``init_kind``):
  - ``*.bias``, ``*running_mean``                       -> zeros
  - ``*running_var``, and 1-D ``*.weight`` (the scale of LayerNorm/RMSNorm/BatchNorm:
    every 1-D weight in these models is a normalization scale)  -> ones
  - everything else (weight matrices, convolution kernels, embeddings, position/class
    tokens)                                              -> normal(0, 0.02)
Non-float external tensors (none in the committed models) are filled with zeros.

Each tensor draws from its own generator seeded by (seed, crc32(name)), so a tensor's values
do not depend on the order of the file or on the other tensors, and the file is written
tensor by tensor (memory stays at one tensor, even for the 27 GB LLaMA-7B file).
"""
from __future__ import annotations

import argparse
import os
import sys
import zlib

import numpy as np
import onnx
from onnx import TensorProto, helper

STD = 0.02


def init_kind(name: str, dims) -> str:
    """'zeros' | 'ones' | 'normal' for a float initializer (see the module docstring)."""
    leaf = name.rsplit(".", 1)[-1].rsplit("/", 1)[-1]
    if leaf == "bias" or leaf.endswith("running_mean") or name.endswith("_bias"):
        return "zeros"
    if leaf.endswith("running_var"):
        return "ones"
    if leaf == "weight" and len(dims) == 1:
        return "ones"
    return "normal"


def _external_info(t: onnx.TensorProto) -> dict[str, str]:
    return {e.key: e.value for e in t.external_data}


def external_tensors(model: onnx.ModelProto):
    """(tensor, location, offset, length) for every externally stored initializer."""
    out = []
    for t in model.graph.initializer:
        if t.data_location != TensorProto.EXTERNAL:
            continue
        info = _external_info(t)
        np_dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
        numel = int(np.prod(t.dims, dtype=np.int64)) if len(t.dims) else 1
        nbytes = numel * np.dtype(np_dtype).itemsize
        offset = int(info.get("offset", 0))
        length = int(info.get("length", nbytes))
        if length != nbytes:
            raise ValueError(f"{t.name}: external length {length} != {nbytes} for "
                             f"dims {list(t.dims)} of {TensorProto.DataType.Name(t.data_type)}")
        out.append((t, info["location"], offset, length))
    return out


def random_tensor(name: str, dims, np_dtype, seed: int) -> np.ndarray:
    shape = tuple(int(d) for d in dims)
    if not np.issubdtype(np_dtype, np.floating):
        return np.zeros(shape, dtype=np_dtype)
    kind = init_kind(name, shape)
    if kind == "zeros":
        return np.zeros(shape, dtype=np_dtype)
    if kind == "ones":
        return np.ones(shape, dtype=np_dtype)
    rng = np.random.default_rng([seed, zlib.crc32(name.encode())])
    return (rng.standard_normal(shape, dtype=np.float32) * STD).astype(np_dtype)


def regenerate(model_path: str, seed: int = 0, out: str | None = None) -> dict:
    model = onnx.load(model_path, load_external_data=False)
    tensors = external_tensors(model)
    if not tensors:
        return {"tensors": 0, "bytes": 0, "files": []}
    locations = {loc for _, loc, _, _ in tensors}
    if out is not None and len(locations) != 1:
        raise ValueError("--out needs a model whose tensors all live in one file")
    base = os.path.dirname(os.path.abspath(model_path))
    files = {}
    for loc in sorted(locations):
        if os.path.isabs(loc) or ".." in loc.replace("\\", "/").split("/"):
            raise ValueError(f"external data location {loc!r} escapes the model's folder")
        path = out or os.path.join(base, loc)
        files[loc] = open(path, "wb")
    total = 0
    try:
        ends = {loc: 0 for loc in locations}
        for t, loc, offset, length in tensors:
            np_dtype = helper.tensor_dtype_to_np_dtype(t.data_type)
            if t.data_type == TensorProto.BFLOAT16:
                arr = random_tensor(t.name, t.dims, np.float32, seed)
                raw = (arr.view(np.uint32) >> 16).astype(np.uint16).tobytes()
            else:
                raw = random_tensor(t.name, t.dims, np_dtype, seed).astype("<" + np.dtype(np_dtype).str[1:]).tobytes()
            assert len(raw) == length
            f = files[loc]
            f.seek(offset)
            f.write(raw)
            ends[loc] = max(ends[loc], offset + length)
            total += length
        for loc, f in files.items():
            f.truncate(ends[loc])
    finally:
        for f in files.values():
            f.close()
    return {"tensors": len(tensors), "bytes": total,
            "files": [out or os.path.join(base, loc) for loc in sorted(locations)]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model", help="a .onnx file whose initializers reference external data")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", help="write here instead of the location the graph names")
    a = ap.parse_args(argv)
    r = regenerate(a.model, a.seed, a.out)
    print(f"{a.model}: wrote {r['tensors']} tensors, {r['bytes']} bytes -> "
          f"{', '.join(r['files']) or '(nothing external)'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
