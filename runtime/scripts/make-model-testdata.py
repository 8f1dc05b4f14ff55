#!/usr/bin/env python3
"""Makes an ONNX-test-style folder for a whole model: MODEL.onnx saved as
OUT/model.onnx with the static shape of every intermediate value (recorded
from an onnxruntime run, as the compiler's shape refinement would fix them)
and OUT/test_data_set_0/{input,output}_*.pb, with seeded
inputs (token ids below --vocab for int64 inputs, N(0,1) for float inputs)
and the outputs onnxruntime computes. strait-onnx-node-test then runs the
folder through the runtime, comparing with onnxruntime.

usage: make-model-testdata.py MODEL.onnx OUT --shape batch=2 --shape seq=8
           [--vocab 100] [--seed 0]
Needs numpy, onnx and onnxruntime (the repo's .venv has them).
"""
import argparse
import os

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper


def randomize_external(model, rng):
    for i, t in enumerate(model.graph.initializer):
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        shape = list(t.dims)
        dtype = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
        if len(shape) >= 2:
            fan_in = int(np.prod(shape[1:]))
            v = rng.standard_normal(shape) * np.sqrt(1.0 / max(fan_in, 1))
        elif "var" in t.name or "weight" in t.name:
            v = rng.uniform(0.5, 1.5, size=shape)
        else:
            v = rng.standard_normal(shape) * 0.05
        model.graph.initializer[i].CopyFrom(
            numpy_helper.from_array(v.astype(dtype), t.name))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("out")
    ap.add_argument("--shape", action="append", default=[],
                    help="symbolic dim value, e.g. batch=2")
    ap.add_argument("--vocab", type=int, default=100)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--random-weights", action="store_true",
                    help="replace external (uncommitted) initializers by seeded "
                         "random data: fan-in scaled normals for weights, "
                         "U(0.5, 1.5) for variances and scales, small biases")
    args = ap.parse_args()
    dims = dict(s.split("=") for s in args.shape)
    rng = np.random.default_rng(args.seed)
    model = onnx.load(args.model, load_external_data=not args.random_weights)
    if args.random_weights:
        randomize_external(model, rng)
    feeds = {}
    init_names = {i.name for i in model.graph.initializer}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        tt = inp.type.tensor_type
        shape = [d.dim_value if d.HasField("dim_value") else int(dims[d.dim_param])
                 for d in tt.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        if np.issubdtype(dtype, np.integer):
            feeds[inp.name] = rng.integers(0, args.vocab, size=shape).astype(dtype)
        else:
            feeds[inp.name] = rng.standard_normal(shape).astype(dtype)
    sess = ort.InferenceSession(model.SerializeToString(),
                                providers=["CPUExecutionProvider"])
    outs = sess.run(None, feeds)
    # Static shapes of every intermediate, as a compiler's shape refinement
    # would produce them: run once more with all node outputs exposed.
    probe = onnx.ModelProto()
    probe.CopyFrom(model)
    known = {o.name for o in probe.graph.output}
    names = [n for node in probe.graph.node for n in node.output
             if n and n not in known]
    del probe.graph.value_info[:]
    for n in names:
        probe.graph.output.append(onnx.ValueInfoProto(name=n))
    psess = ort.InferenceSession(probe.SerializeToString(),
                                 providers=["CPUExecutionProvider"])
    values = psess.run(names, feeds)
    del model.graph.value_info[:]
    for n, v in zip(names, values):
        elem = onnx.helper.np_dtype_to_tensor_dtype(np.asarray(v).dtype)
        model.graph.value_info.append(
            onnx.helper.make_tensor_value_info(n, elem, list(np.shape(v))))
    data = os.path.join(args.out, "test_data_set_0")
    os.makedirs(data, exist_ok=True)
    onnx.save(model, os.path.join(args.out, "model.onnx"))
    for i, inp in enumerate(n for n in model.graph.input if n.name not in init_names):
        t = numpy_helper.from_array(feeds[inp.name], inp.name)
        open(os.path.join(data, f"input_{i}.pb"), "wb").write(t.SerializeToString())
    for i, (o, val) in enumerate(zip(model.graph.output, outs)):
        t = numpy_helper.from_array(val, o.name)
        open(os.path.join(data, f"output_{i}.pb"), "wb").write(t.SerializeToString())
    print(f"{args.out}: {len(feeds)} inputs, {len(outs)} outputs "
          f"{[o.shape for o in outs]}")


if __name__ == "__main__":
    main()
