#!/usr/bin/env python3
"""Generates the binary bad-input models of test/Target/ONNX/bad-input.

The outputs are committed, so lit needs no Python; rerun this script (with
the onnx package, e.g. from .venv) only to change them:

    python3 test/Target/ONNX/Inputs/bad/gen_bad_inputs.py
"""
import os
import struct

import onnx
from onnx import TensorProto, helper

HERE = os.path.dirname(os.path.abspath(__file__))


def write(name, data):
    with open(os.path.join(HERE, name), "wb") as f:
        f.write(data)


def small_model():
    """A valid two-node model (Relu then Add of a constant), ~200 bytes."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    b = helper.make_tensor("b", TensorProto.FLOAT, [3], [1.0, 2.0, 3.0])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu0"),
             helper.make_node("Add", ["r", "b"], ["y"], name="add0")]
    graph = helper.make_graph(nodes, "small", [x], [y], [b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model.SerializeToString()


def main():
    good = small_model()
    write("valid.onnx", good)
    write("truncated-half.onnx", good[: len(good) // 2])
    write("truncated-one-byte.onnx", good[:-1])
    # A length prefix (the graph field, tag 0x3a) claiming 2^31 bytes.
    graph_at = good.index(b"\x3a")
    write("huge-length.onnx", good[:graph_at] + b"\x3a\xff\xff\xff\xff\x07" + b"\x00" * 8)
    # Bytes flipped inside the graph: an invalid wire type at the start.
    corrupt = bytearray(good)
    corrupt[graph_at + 2] = 0xFF
    corrupt[graph_at + 3] = 0xFF
    write("corrupted.onnx", bytes(corrupt))
    # Deeply nested group/message start tags (a recursion bomb).
    write("deep-nesting.onnx", b"\x3a\x80\x80\x04" + b"\x0a\x80\x80\x04" * 200)
    # A PNG: 8-byte signature and an IHDR chunk.
    ihdr = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    write("image.onnx", b"\x89PNG\r\n\x1a\n" + struct.pack(">I", 13) + b"IHDR" + ihdr +
          b"\x90wS\xde" + b"\x00\x00\x00\x00IEND\xaeB`\x82")
    write("text.onnx", b"This is a README, not a model.\nSee https://onnx.ai\n")
    write("empty.onnx", b"")
    # The real models carry external weights; valid-looking varints everywhere.
    write("zeros.onnx", b"\x00" * 64)


if __name__ == "__main__":
    main()
