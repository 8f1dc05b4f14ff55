#!/usr/bin/env python3
"""Import time of an ONNX Loop, unrolled by the importer, against the same
computation already unrolled in the ONNX file.

The body is an RNN-like cell of 8 nodes (MatMul with an outer-scope weight,
Add of the iteration's input slice, Tanh, a residual Add, a scan output, the
condition) over a carried [16, 64] state; N iterations. The baseline is a flat
graph holding N copies of those nodes (what an exporter that unrolls would
write), so the ratio is the cost of importing the body once per iteration
(binding its inputs, scoping, folding the iteration number) over importing
the same nodes from the file. Both imports are straitc's own --mlir-timing
"import" phase (--shape-only --emit=summary), best of --repeat.

Usage: bench/import/loop_unroll.py [--build build] [--repeat 3] [--steps 100,500,2000]
"""
import argparse
import os
import sys
import tempfile

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from run import import_seconds, run_measured  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
B, H = 16, 64


def _info(name, elt=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elt, shape)


def _cell(i, h, x_t, out, scan, prefix=""):
    """The body's nodes: out = h + tanh(h @ W + x_t); scan = sum over rows of out."""
    p = prefix
    return [helper.make_node("MatMul", [h, "W"], [p + "hw"]),
            helper.make_node("Add", [p + "hw", x_t], [p + "pre"]),
            helper.make_node("Tanh", [p + "pre"], [p + "act"]),
            helper.make_node("Add", [h, p + "act"], [out]),
            helper.make_node("ReduceSum", [out, "axes0"], [scan], keepdims=0)]


def loop_model(steps):
    w = numpy_helper.from_array(np.zeros((H, H), np.float32), "W")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes0")
    body_nodes = [helper.make_node("Gather", ["xs", "i"], ["x_t"], axis=0)]
    body_nodes += _cell("i", "h", "x_t", "h_out", "scan")
    body_nodes += [helper.make_node("Identity", ["c"], ["c_out"])]
    body = helper.make_graph(body_nodes, "body",
                             [_info("i", TensorProto.INT64, []), _info("c", TensorProto.BOOL, []),
                              _info("h", shape=[B, H])],
                             [_info("c_out", TensorProto.BOOL, []), _info("h_out", shape=[B, H]),
                              _info("scan", shape=[H])])
    nodes = [helper.make_node("Constant", [], ["M"],
                              value=numpy_helper.from_array(np.array(steps, np.int64))),
             helper.make_node("Constant", [], ["t"],
                              value=numpy_helper.from_array(np.array(True))),
             helper.make_node("Loop", ["M", "t", "h0"], ["h", "ys"], body=body)]
    graph = helper.make_graph(nodes, "loop", [_info("h0", shape=[B, H]),
                                              _info("xs", shape=[steps, B, H])],
                              [_info("h"), _info("ys")], [w, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def flat_model(steps):
    w = numpy_helper.from_array(np.zeros((H, H), np.float32), "W")
    axes = numpy_helper.from_array(np.array([0], np.int64), "axes0")
    nodes, h, scans = [], "h0", []
    for s in range(steps):
        idx = numpy_helper.from_array(np.array(s, np.int64), f"i{s}")
        nodes.append(helper.make_node("Constant", [], [f"i{s}"], value=idx))
        nodes.append(helper.make_node("Gather", ["xs", f"i{s}"], [f"x{s}"], axis=0))
        nodes += _cell(f"i{s}", h, f"x{s}", f"st{s}", f"scan{s}", prefix=f"s{s}_")
        nodes.append(helper.make_node("Unsqueeze", [f"scan{s}", "axes0"], [f"u{s}"]))
        h = f"st{s}"
        scans.append(f"u{s}")
    nodes.append(helper.make_node("Concat", scans, ["ys"], axis=0))
    nodes.append(helper.make_node("Identity", [h], ["h"]))
    graph = helper.make_graph(nodes, "flat", [_info("h0", shape=[B, H]),
                                              _info("xs", shape=[steps, B, H])],
                              [_info("h"), _info("ys")], [w, axes])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def import_time(straitc, path, repeat):
    cmd = [straitc, path, "--shape-only", "--emit=summary", "--mlir-timing"]
    return min(import_seconds(run_measured(cmd)[1]) for _ in range(repeat))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--steps", default="100,500,2000")
    args = ap.parse_args()
    straitc = os.path.join(args.build, "bin", "straitc")
    print(f"{'steps':>6} {'loop import s':>14} {'flat import s':>14} {'ratio loop/flat':>16}"
          f" {'loop us/step':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for steps in (int(s) for s in args.steps.split(",")):
            loop, flat = os.path.join(tmp, "loop.onnx"), os.path.join(tmp, "flat.onnx")
            onnx.save(loop_model(steps), loop)
            onnx.save(flat_model(steps), flat)
            t_loop = import_time(straitc, loop, args.repeat)
            t_flat = import_time(straitc, flat, args.repeat)
            print(f"{steps:6d} {t_loop:14.4f} {t_flat:14.4f} {t_loop / t_flat:15.2f}x"
                  f" {1e6 * t_loop / steps:13.1f}")


if __name__ == "__main__":
    main()
