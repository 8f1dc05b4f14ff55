"""Summarize the committed models (no torch needed): the tables of docs/models.md.

    PYTHONPATH=python python -m strait.models.summary [models/] [--json]
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import sys

import numpy as np
import onnx

PARAM_KIND = "pkg.torch.export.graph_signature.InputSpec.kind"


def summarize(path: str) -> dict:
    m = onnx.load(path, load_external_data=False)
    g = m.graph
    kinds = {vi.name: p.value for vi in g.value_info for p in vi.metadata_props
             if p.key == PARAM_KIND}
    hist = collections.Counter(n.op_type for n in g.node)
    params = [t for t in g.initializer if kinds.get(t.name) == "PARAMETER"]
    ext_end = 0
    for t in g.initializer:
        info = {e.key: e.value for e in t.external_data}
        if info:
            ext_end = max(ext_end, int(info.get("offset", 0)) + int(info["length"]))
    meta = {p.key: p.value for p in m.metadata_props}

    def dims(vi):
        return "x".join(str(d.dim_param or d.dim_value) for d in vi.type.tensor_type.shape.dim)

    return {
        "name": meta.get("strait.model", os.path.basename(path)),
        "source": meta.get("strait.source", ""),
        "opset": max(o.version for o in m.opset_import if o.domain in ("", "ai.onnx")),
        "nodes": len(g.node),
        "op_types": len(hist),
        "histogram": dict(hist.most_common()),
        "parameters": int(sum(np.prod(t.dims, dtype=np.int64) for t in params)),
        "parameter_tensors": len(params),
        "initializers": len(g.initializer),
        "onnx_bytes": os.path.getsize(path),
        "external_bytes": ext_end,
        "weights": meta.get("strait.weights", ""),
        "inputs": {i.name: dims(i) for i in g.input},
        "outputs": {o.name: dims(o) for o in g.output},
    }


def _human(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return str(n)


def _count(n: int) -> str:
    return f"{n / 1e9:.2f} B" if n >= 1e9 else f"{n / 1e6:.2f} M" if n >= 1e6 else f"{n:,}"


def markdown(rows: list[dict]) -> str:
    out = ["| model | source | opset | nodes | op types | parameters | param tensors "
           "| .onnx (committed) | weights | inputs |",
           "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        w = ("inline" if r["weights"] == "inline" else
             f"external {_human(r['external_bytes'])} (not committed)")
        ins = ", ".join(f"`{k}` {v}" for k, v in r["inputs"].items())
        out.append(f"| {r['name']} | {r['source']} | {r['opset']} | {r['nodes']} | "
                   f"{r['op_types']} | {_count(r['parameters'])} ({r['parameters']:,}) | "
                   f"{r['parameter_tensors']} | {_human(r['onnx_bytes'])} | {w} | {ins} |")
    out += ["", "Op histograms (count per op type, most frequent first):", ""]
    for r in rows:
        h = ", ".join(f"{k} {v}" for k, v in r["histogram"].items())
        out.append(f"- **{r['name']}**: {h}")
    return "\n".join(out) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("root", nargs="?", default="models")
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args(argv)
    rows = []
    for name in sorted(os.listdir(a.root)):
        p = os.path.join(a.root, name, f"{name}.onnx")
        if os.path.isfile(p):
            rows.append(summarize(p))
    print(json.dumps(rows, indent=1) if a.json else markdown(rows), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
