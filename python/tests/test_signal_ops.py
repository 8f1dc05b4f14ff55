"""DFT, STFT, MelWeightMatrix and MaxUnpool, decomposed by the importer
(lib/Target/ONNX/ImportSignal.cpp, ImportUnpool.cpp), run forward on the CPU runtime.

* ``test_node_data``: the libonnx-testdata node tests of the four ops (inputs bound as
  initializers, outputs against output_*.pb, 1e-5 relative). MelWeightMatrix's output is a
  constant, which a program cannot return: its test multiplies a spectrogram input by it.
* ``test_dft_case`` / ``test_stft_case``: the attributes the node tests leave out
  (onesided, dft_length shorter and longer than the signal, complex input, inverse,
  inverse one-sided = irfft, opset 20's axis input) against numpy.fft.
* ``test_maxunpool_after_maxpool``: several batches and channels, pads and an
  output_shape, against the ONNX reference implementation.

The gradients of DFT and STFT against finite differences are cases of test_gradient_fd.py.
"""
from __future__ import annotations

import os

import numpy as np
import pytest

from test_recurrent import (NODE_DATA, REL, _max_rel, check_node_test, node_test_data,
                            strait_forward)

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

F = TensorProto.FLOAT

NODE_TESTS = [t for t in ("test_dft", "test_dft_axis", "test_dft_inverse", "test_stft",
                          "test_stft_with_window", "test_maxunpool_export_with_output_shape",
                          "test_maxunpool_export_without_output_shape")
              if os.path.isdir(os.path.join(NODE_DATA, t))]


@pytest.mark.skipif(not NODE_TESTS, reason="needs Debian's libonnx-testdata")
@pytest.mark.parametrize("test", NODE_TESTS)
def test_node_data(test, tmp_path):
    check_node_test(test, tmp_path)


@pytest.mark.skipif(not os.path.isdir(os.path.join(NODE_DATA, "test_melweightmatrix")),
                    reason="needs Debian's libonnx-testdata")
def test_melweightmatrix_node_data(tmp_path):
    model, feeds, outs = node_test_data("test_melweightmatrix")
    (mel_name, mel), = outs.items()
    spec = np.random.default_rng(0).uniform(0, 1, (3, mel.shape[0])).astype(np.float32)
    model.graph.node.append(helper.make_node("MatMul", ["spec", mel_name], ["mel_spec"]))
    model.graph.input.append(helper.make_tensor_value_info("spec", F, spec.shape))
    del model.graph.output[:]
    model.graph.output.append(helper.make_tensor_value_info("mel_spec", F, None))
    got = strait_forward(model, {**feeds, "spec": spec}, tmp_path)
    assert np.count_nonzero(mel) >= mel.shape[1], "a weak check"
    assert _max_rel(got["mel_spec"], spec @ mel) <= REL


def _one_node(node, inputs: dict, opset):
    graph = helper.make_graph(
        [node], "g", [helper.make_tensor_value_info(n, F if v.dtype == np.float32
                                                    else TensorProto.INT64, v.shape)
                      for n, v in inputs.items()],
        [helper.make_tensor_value_info(node.output[0], F, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def _complex(x):
    return x[..., 0] + 1j * x[..., 1] if x.shape[-1] == 2 else x[..., 0]


def _split(c):
    return np.stack([c.real, c.imag], axis=-1).astype(np.float32)


def _numpy_dft(x, axis, length, inverse, onesided):
    c = _complex(x.astype(np.float64))
    if inverse and onesided:
        return np.fft.irfft(c, n=length, axis=axis)[..., None].astype(np.float32)
    y = (np.fft.ifft if inverse else np.fft.fft)(c, n=length, axis=axis)
    if onesided:
        y = np.take(y, np.arange(length // 2 + 1), axis=axis)
    return _split(y)


DFT_CASES = {
    # name: (input shape, axis, dft_length, inverse, onesided, opset)
    "real-axis1": ((2, 12, 3, 1), 1, None, 0, 0, 17),
    "real-axis2-onesided": ((2, 3, 11, 1), 2, None, 0, 1, 17),
    "complex-truncate": ((2, 12, 3, 2), 1, 8, 0, 0, 17),
    "complex-pad": ((2, 5, 3, 2), 1, 9, 0, 0, 17),
    "inverse-complex": ((3, 10, 2), 1, None, 1, 0, 17),
    "opset20-axis-input": ((2, 3, 7, 2), -2, None, 0, 0, 20),
    "opset20-irfft": ((2, 3, 6, 2), 2, 10, 1, 1, 20),
}


@pytest.mark.parametrize("name", sorted(DFT_CASES))
def test_dft_case(name, tmp_path):
    shape, axis, length, inverse, onesided, opset = DFT_CASES[name]
    x = np.random.default_rng(sum(map(ord, name))).uniform(-1, 1, shape).astype(np.float32)
    inputs, names = {"x": x}, ["x"]
    if length is not None:
        inputs["dft_length"] = np.array(length, np.int64)
    names.append("dft_length" if length is not None else "")
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset >= 20:
        inputs["axis"] = np.array(axis, np.int64)
        names.append("axis")
    else:
        attrs["axis"] = axis
    model = _one_node(helper.make_node("DFT", names, ["y"], **attrs), inputs, opset)
    ref = _numpy_dft(x, axis % x.ndim, length or (2 * (shape[axis] - 1) if inverse and onesided
                                                  else shape[axis]), inverse, onesided)
    got = strait_forward(model, inputs, tmp_path)["y"]
    err = _max_rel(got, ref)
    print(f"{name}: max relative difference to numpy.fft {err:.1e}")
    assert err <= REL, err


STFT_CASES = {
    # name: (signal shape, frame_step, window length or None, frame_length or None, onesided)
    "window-onesided": ((2, 40, 1), 6, 12, None, 1),
    "frame-length-two-sided": ((1, 33, 1), 5, None, 8, 0),
    "complex-window": ((2, 30, 2), 4, 10, 10, 0),
}


@pytest.mark.parametrize("name", sorted(STFT_CASES))
def test_stft_case(name, tmp_path):
    shape, step, wlen, flen, onesided = STFT_CASES[name]
    rng = np.random.default_rng(sum(map(ord, name)))
    x = rng.uniform(-1, 1, shape).astype(np.float32)
    inputs = {"signal": x, "frame_step": np.array(step, np.int64)}
    names = ["signal", "frame_step", "", ""]
    frame = wlen or flen
    window = np.ones(frame, np.float32)
    if wlen:
        window = (0.5 - 0.5 * np.cos(2 * np.pi * np.arange(wlen) / wlen)).astype(np.float32)
        inputs["window"], names[2] = window, "window"
    if flen:
        inputs["frame_length"], names[3] = np.array(flen, np.int64), "frame_length"
    model = _one_node(helper.make_node("STFT", names, ["y"], onesided=onesided), inputs, 17)
    frames = 1 + (shape[1] - frame) // step
    c = _complex(x.astype(np.float64))
    ref = np.stack([np.fft.fft(c[:, f * step:f * step + frame] * window, axis=1)
                    for f in range(frames)], axis=1)
    if onesided:
        ref = ref[:, :, :frame // 2 + 1]
    got = strait_forward(model, inputs, tmp_path)["y"]
    err = _max_rel(got, _split(ref))
    print(f"{name}: max relative difference to numpy.fft {err:.1e}")
    assert err <= REL, err


def test_maxunpool_after_maxpool(tmp_path):
    """MaxPool's values and flat indices of a [2, 3, 6, 7] input, unpooled with pads and
    an output_shape larger than the inferred one, against onnx.reference."""
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(3)
    x = rng.permutation(2 * 3 * 6 * 7).reshape(2, 3, 6, 7).astype(np.float32)
    pool = helper.make_node("MaxPool", ["x"], ["v", "i"], kernel_shape=[2, 3],
                            strides=[2, 2], pads=[0, 1, 0, 1])
    graph = helper.make_graph([pool], "p", [helper.make_tensor_value_info("x", F, x.shape)],
                              [helper.make_tensor_value_info("v", F, None),
                               helper.make_tensor_value_info("i", TensorProto.INT64, None)])
    v, i = ReferenceEvaluator(helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 12)])).run(None, {"x": x})
    inputs = {"v": v, "i": i, "output_shape": np.array([2, 3, 7, 8], np.int64)}
    model = _one_node(helper.make_node("MaxUnpool", ["v", "i", "output_shape"], ["y"],
                                       kernel_shape=[2, 3], strides=[2, 2],
                                       pads=[0, 1, 0, 1]), inputs, 11)
    ref = ReferenceEvaluator(model).run(None, inputs)[0]
    got = strait_forward(model, inputs, tmp_path)["y"]
    assert np.count_nonzero(ref) == len(np.unique(i))  # overlapping windows share some
    assert got.shape == ref.shape and (got == ref).all()
