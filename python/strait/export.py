"""Weights out: a ``strait-run --save-params`` folder into the formats other stacks load.

    python -m strait.export onnx MODEL.onnx PARAMS -o trained.onnx [--external-data auto]
    python -m strait.export safetensors PARAMS -o model.safetensors [--model MODEL.onnx]
    python -m strait.export peft MODEL.onnx PARAMS -o adapter/

* ``onnx``: the model the job was compiled from, each initializer that Strait trained replaced
  by its saved value (shape and dtype checked; the initializers the job kept frozen, and those
  Strait never saw, stay as they were). A LoRA job's adapters are merged into their base
  weights (``W + (alpha/R) A B``, python/strait/lora.py). The tensors go to a ``.data`` file
  next to the model (ONNX external data) when the model was stored that way, or when they
  exceed protobuf's 2 GB limit (``--external-data auto``, the default; ``always``, ``never``).
* ``safetensors``: every saved parameter under its name, in ONNX's stored layout; for a
  PyTorch dynamo export (``optimize=False``) and TorchScript exports these are the
  ``state_dict`` names and torch's layout (a Linear's weight [out, in]), so
  ``model.load_state_dict(safetensors.torch.load_file(...))`` loads them. A LoRA job's
  adapters are merged first (``--model`` gives the layouts); ``--torch-only`` leaves out the
  constants a dynamo export made (``val_N``, not in the ``state_dict``).
* ``peft``: a LoRA job's adapters as a PEFT adapter folder (``adapter_model.safetensors`` and
  ``adapter_config.json``) that ``peft.PeftModel.from_pretrained(torch_model, folder)`` loads:
  ``base_model.model.<module>.lora_A.weight`` [R, in] = A^T and ``lora_B.weight`` [out, R] =
  B^T, ``lora_alpha``/``r`` the job's scale, ``lora_dropout`` its ``--lora-dropout``, and
  ``fan_in_fan_out`` for weights stored [in, out] (transformers' GPT-2 ``Conv1D``).

The same from Python: ``write_onnx``, ``write_safetensors``, ``write_peft``. See docs/guide.md,
"Weights out".
"""
from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np

# Protobuf refuses to serialize a message of 2 GiB or more; leave room for the graph.
PROTOBUF_LIMIT = (2 << 30) - (64 << 20)


class SavedParams(dict):
    """{parameter name: array} of a ``--save-params`` folder; ``files[name]`` is the .npy the
    value came from (for error messages) and ``folder`` the folder."""

    def __init__(self, values=(), files=None, folder=None):
        super().__init__(values)
        self.files = dict(files or {})
        self.folder = folder

    def source(self, name: str) -> str:
        return self.files.get(name, "the parameters given")


def load_saved_params(folder) -> SavedParams:
    """{parameter name: array} of a ``strait-run --save-params`` folder (replicas are equal:
    the first rank's copy of each)."""
    folder = os.fspath(folder)
    lists = sorted(f for f in os.listdir(folder)
                   if f.startswith("params.rank") and f.endswith(".txt"))
    if not lists:
        raise ValueError(f"{folder} holds no params.rank<R>.txt: not a strait-run "
                         f"--save-params folder")
    out = SavedParams(folder=folder)
    for f in lists:
        for n, line in enumerate(open(os.path.join(folder, f)), 1):
            fields = line.split()
            if len(fields) != 2:
                raise ValueError(f"{folder}/{f}:{n}: expected 'FILE NAME', got {line!r}")
            file, name = fields
            if name not in out:
                path = os.path.join(folder, file)
                out[name] = np.load(path)
                out.files[name] = path
    return out


def as_params(params) -> SavedParams:
    """``params`` (a folder or a {name: array} dict) as SavedParams."""
    if isinstance(params, SavedParams):
        return params
    if isinstance(params, (str, os.PathLike)):
        return load_saved_params(params)
    return SavedParams(params)


def lora_record(params) -> dict | None:
    """The folder's ``lora.json`` (straitc's rank, alpha, seed, dropout; strait-run
    --save-params copies it), or None."""
    folder = params.folder if isinstance(params, SavedParams) else (
        os.fspath(params) if isinstance(params, (str, os.PathLike)) else None)
    if folder is None or not os.path.exists(os.path.join(folder, "lora.json")):
        return None
    with open(os.path.join(folder, "lora.json")) as f:
        return json.load(f)


def _initializer_value(init, value: np.ndarray, source: str) -> np.ndarray:
    """``value`` checked against the initializer ``init`` and cast to its dtype (floats to
    floats only)."""
    import onnx
    want = onnx.helper.tensor_dtype_to_np_dtype(init.data_type)
    if tuple(value.shape) != tuple(init.dims):
        raise ValueError(f"parameter {init.name!r} ({source}) has shape {tuple(value.shape)}, "
                         f"the model's initializer {tuple(init.dims)}")
    kind = lambda dt: "f" if np.issubdtype(dt, np.floating) or dt.name == "bfloat16" else dt.kind
    if kind(np.dtype(value.dtype)) != kind(np.dtype(want)):
        raise ValueError(f"parameter {init.name!r} ({source}) is {value.dtype}, the model's "
                         f"initializer {np.dtype(want)}")
    if kind(np.dtype(value.dtype)) == "f" and not np.all(np.isfinite(value)):
        raise ValueError(f"parameter {init.name!r} ({source}) holds "
                         f"{int(np.sum(~np.isfinite(value)))} non-finite values (the training "
                         f"diverged?)")
    return value.astype(want, copy=False)


def _was_external(model) -> bool:
    from onnx import TensorProto
    return any(i.data_location == TensorProto.EXTERNAL for i in model.graph.initializer)


def write_onnx(model_path, params, out_path, external_data: str = "auto",
               alpha: float | None = None) -> dict:
    """Writes ``model_path`` with the trained values of ``params`` (a --save-params folder or
    {name: array}) to ``out_path``; LoRA adapters are merged (alpha from the folder's
    lora.json, or ``alpha``, default R). Every non-adapter parameter must be an initializer of
    the model. ``external_data``: ``auto`` (when the model was external or the tensors exceed
    protobuf's limit), ``always``, ``never``. Returns {"replaced": initializers written from
    ``params``, "kept": the others (constants, what the job did not hold), "external"}."""
    import onnx
    from onnx import numpy_helper

    from strait import lora
    if external_data not in ("auto", "always", "never"):
        raise ValueError(f"external_data must be auto, always or never, not {external_data!r}")
    params = as_params(params)
    model_path = os.fspath(model_path)
    model = onnx.load(model_path, load_external_data=False)
    was_external = _was_external(model)
    if was_external:
        onnx.external_data_helper.load_external_data_for_model(
            model, os.path.dirname(os.path.abspath(model_path)))
    if lora.adapted_weights(params):
        params = lora.merged_params(model, params, alpha, model_path)
    inits = {i.name: i for i in model.graph.initializer}
    unknown = [n for n in params if n not in inits]
    if unknown:
        raise ValueError(f"{model_path} has no initializer named {unknown[0]!r} "
                         f"({params.source(unknown[0])}; {len(unknown)} saved parameters are "
                         f"not in the model: was the job compiled from another file?)")
    total = 0
    for init in model.graph.initializer:
        if init.name in params:
            value = _initializer_value(init, params[init.name], params.source(init.name))
            init.CopyFrom(numpy_helper.from_array(value, init.name))
        total += int(np.prod(init.dims)) * np.dtype(
            onnx.helper.tensor_dtype_to_np_dtype(init.data_type)).itemsize
    external = external_data == "always" or (
        external_data == "auto" and (was_external or total > PROTOBUF_LIMIT))
    if external_data == "never" and total > PROTOBUF_LIMIT:
        raise ValueError(f"the initializers of {model_path} take {total} bytes, over protobuf's "
                         f"2 GB limit: write them as external data (external_data='auto')")
    out_path = os.fspath(out_path)
    if external:
        location = os.path.basename(out_path) + ".data"
        data = os.path.join(os.path.dirname(os.path.abspath(out_path)), location)
        if os.path.exists(data):
            os.remove(data)  # onnx appends to an existing file
        onnx.save_model(model, out_path, save_as_external_data=True,
                        all_tensors_to_one_file=True, location=location, size_threshold=1024)
    else:
        onnx.save_model(model, out_path)
    return {"replaced": sum(n in params for n in inits), "kept": len(inits) - sum(
        n in params for n in inits), "external": external}


def torch_names(model) -> set | None:
    """Initializers a PyTorch dynamo export marked as parameters or buffers (the
    ``pkg.torch.export.graph_signature.InputSpec.kind`` of their value_info, which
    lib/Target/ONNX/TorchExport.cpp reads too), or None when the file has no such marks."""
    key = "pkg.torch.export.graph_signature.InputSpec.kind"
    kinds = {v.name: p.value for v in model.graph.value_info for p in v.metadata_props
             if p.key == key}
    inits = {i.name for i in model.graph.initializer}
    marked = {n for n, k in kinds.items() if n in inits and k in ("PARAMETER", "BUFFER")}
    return marked or None


def write_safetensors(params, out_path, model_path=None, alpha: float | None = None,
                      torch_only: bool = False) -> list:
    """Writes the parameters (a --save-params folder or {name: array}) to one safetensors
    file under their names, in ONNX's stored layout (torch's for PyTorch exports); a LoRA
    job's adapters merged into their base weights (``model_path`` gives the layouts).
    ``torch_only``: only the initializers a dynamo export marked as parameters or buffers.
    Returns the names written."""
    from safetensors.numpy import save_file

    from strait import lora
    params = as_params(params)
    model = None
    if model_path is not None:
        import onnx
        model = onnx.load(os.fspath(model_path), load_external_data=False)
    if lora.adapted_weights(params):
        if model is None:
            raise ValueError("the parameters hold LoRA adapters: give the ONNX model "
                             "(--model) to merge them, or write a PEFT adapter (peft)")
        params = lora.merged_params(model, params, alpha, os.fspath(model_path))
    names = sorted(params)
    if torch_only:
        if model is None:
            raise ValueError("torch_only needs the ONNX model (--model)")
        marked = torch_names(model)
        if marked is None:
            raise ValueError(f"{model_path} has no PyTorch parameter marks (only a dynamo "
                             f"export has them); leave out --torch-only")
        names = [n for n in names if n in marked]
    tensors = {}
    for n in names:
        v = np.ascontiguousarray(params[n])
        if v.dtype.name == "bfloat16":
            raise ValueError(f"parameter {n!r} is bfloat16, which safetensors.numpy cannot "
                             f"write: cast the folder's values to float32 first")
        tensors[n] = v
    save_file(tensors, os.fspath(out_path), metadata={"format": "pt"})
    return names


def write_peft(model_path, params, out_dir, alpha: float | None = None,
               dropout: float | None = None, base_model: str | None = None) -> dict:
    """Writes a LoRA job's adapters as a PEFT LoRA adapter folder (see the module docstring);
    alpha and dropout from the folder's lora.json unless given. Each adapted weight must be
    named ``<module>.weight`` (a PyTorch export's state_dict name), and the job must not have
    trained base weights (the adapter would lose them: write ``onnx``/``safetensors``
    instead). Returns the adapter config."""
    import onnx
    from onnx import numpy_helper
    from safetensors.numpy import save_file

    from strait import lora
    params = as_params(params)
    record = lora_record(params) or {}
    alpha = lora.resolve_alpha(params, alpha)
    if dropout is None:
        dropout = float(record.get("dropout", 0.0))
    weights = lora.adapted_weights(params)
    if not weights:
        raise ValueError("the parameters hold no LoRA adapters (<W>.lora_A and <W>.lora_B): "
                         "was the job compiled with straitc --lora?")
    model_path = os.fspath(model_path)
    model = onnx.load(model_path, load_external_data=False)
    transposed = lora.transposed_weights(model)
    onnx_dir = os.path.dirname(os.path.abspath(model_path))
    ranks = {params[w + ".lora_A"].shape[1] for w in weights}
    if len(ranks) != 1:
        raise ValueError(f"adapters of ranks {sorted(ranks)}: a PEFT config has one r")
    rank = ranks.pop()
    base = {n: v for n, v in params.items() if not n.endswith((".lora_A", ".lora_B"))}
    inits = {i.name: i for i in model.graph.initializer}
    trained = []
    for n, v in base.items():
        if n in inits:
            ref = numpy_helper.to_array(inits[n], base_dir=onnx_dir)
            if ref.shape != v.shape or not np.array_equal(ref, v):
                trained.append(n)
    if trained:
        raise ValueError(f"the job also trained base weights ({', '.join(trained[:4])}"
                         f"{', ...' if len(trained) > 4 else ''}), which a PEFT LoRA adapter "
                         f"does not hold: write them with 'onnx' or 'safetensors' instead")
    tensors, modules, layouts = {}, [], set()
    for w in weights:
        if not w.endswith(".weight"):
            raise ValueError(f"adapted weight {w!r} is not a PyTorch module's '<module>.weight' "
                             f"(a constant the exporter made? export with optimize=False)")
        module = w[:-len(".weight")]
        modules.append(module)
        layouts.add(w not in transposed)
        prefix = f"base_model.model.{module}"
        tensors[prefix + ".lora_A.weight"] = np.ascontiguousarray(params[w + ".lora_A"].T)
        tensors[prefix + ".lora_B.weight"] = np.ascontiguousarray(params[w + ".lora_B"].T)
    os.makedirs(out_dir, exist_ok=True)
    save_file(tensors, os.path.join(out_dir, "adapter_model.safetensors"),
              metadata={"format": "pt"})
    config = {
        "peft_type": "LORA", "task_type": None, "base_model_name_or_path": base_model,
        "r": int(rank), "lora_alpha": float(alpha), "lora_dropout": float(dropout),
        "target_modules": modules, "bias": "none", "inference_mode": True,
        # PEFT applies fan_in_fan_out per layer type ([in, out] Conv1D: True) and corrects
        # a mismatch with a warning; a job with both layouts gets the Linear setting.
        "fan_in_fan_out": layouts == {True}, "init_lora_weights": True,
        "modules_to_save": None, "use_rslora": False, "use_dora": False,
        "layers_to_transform": None, "layers_pattern": None, "rank_pattern": {},
        "alpha_pattern": {}, "revision": None,
    }
    with open(os.path.join(out_dir, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return config


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m strait.export", description=__doc__.split(
        "\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="format", required=True)
    o = sub.add_parser("onnx", help="the ONNX model with the trained initializers")
    o.add_argument("model")
    o.add_argument("params", help="strait-run --save-params folder")
    o.add_argument("-o", "--output", required=True)
    o.add_argument("--external-data", choices=("auto", "always", "never"), default="auto")
    o.add_argument("--alpha", type=float, help="LoRA alpha (default: the folder's lora.json)")
    s = sub.add_parser("safetensors", help="one safetensors file of the trained parameters")
    s.add_argument("params", help="strait-run --save-params folder")
    s.add_argument("-o", "--output", required=True)
    s.add_argument("--model", help="the ONNX model (to merge LoRA adapters, --torch-only)")
    s.add_argument("--torch-only", action="store_true",
                   help="only a dynamo export's parameters and buffers (not its val_N)")
    s.add_argument("--alpha", type=float)
    p = sub.add_parser("peft", help="a LoRA job's adapters as a PEFT adapter folder")
    p.add_argument("model")
    p.add_argument("params", help="strait-run --save-params folder")
    p.add_argument("-o", "--output", required=True)
    p.add_argument("--alpha", type=float)
    p.add_argument("--dropout", type=float)
    p.add_argument("--base-model", help="adapter_config's base_model_name_or_path")
    a = ap.parse_args(argv)
    try:
        if a.format == "onnx":
            r = write_onnx(a.model, a.params, a.output, a.external_data, a.alpha)
            print(f"{a.output}: {r['replaced']} initializers from {a.params}, {r['kept']} "
                  f"as they were"
                  + (f", data in {a.output}.data" if r["external"] else ""))
        elif a.format == "safetensors":
            names = write_safetensors(a.params, a.output, a.model, a.alpha, a.torch_only)
            print(f"{a.output}: {len(names)} tensors")
        else:
            c = write_peft(a.model, a.params, a.output, a.alpha, a.dropout, a.base_model)
            print(f"{a.output}: {len(c['target_modules'])} adapted modules, r={c['r']}, "
                  f"lora_alpha={c['lora_alpha']:g}, lora_dropout={c['lora_dropout']:g}")
    except (ValueError, OSError) as e:
        print(f"strait.export: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
