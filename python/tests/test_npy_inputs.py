"""npy data for a model whose only data input is integer (a BERT-style classifier's input_ids).

strait-run fed an npy array to the first floating-point input only: a classifier reading token
ids got zeros on every step (a warning in the rank's log), and trained on nothing. It now feeds
the integer input when the program has no float one. A misspelt --input-name fed nothing either,
and --eval-data of npy samples without --eval-labels failed at the first evaluation, after the
training: both are now errors before the first step. Float npy labels (regression targets for
--loss mse) were refused; they now feed the labels input of their float type.
"""
from __future__ import annotations

import os
import subprocess

import numpy as np
import pytest

from jobutil import STRAIT_RUN, STRAITC, run

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

pytestmark = pytest.mark.skipif(not (os.path.exists(STRAITC) and os.path.exists(STRAIT_RUN)),
                                reason="needs build/bin/straitc and strait-run")

V, D, C, B, T = 12, 6, 3, 4, 5


def classifier(path):
    """input_ids [B, T] -> embedding -> mean over T -> [B, C] logits."""
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((V, D)).astype(np.float32)
    w = rng.standard_normal((D, C)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("Gather", ["emb", "input_ids"], ["e"]),
         helper.make_node("ReduceMean", ["e"], ["m"], axes=[1], keepdims=0),
         helper.make_node("MatMul", ["m", "w"], ["logits"])],
        "classifier",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [B, T])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [B, C])],
        [numpy_helper.from_array(emb, "emb"), numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), path)
    return emb, w


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    d = tmp_path_factory.mktemp("npy-int")
    emb, w = classifier(str(d / "m.onnx"))
    run([STRAITC, str(d / "m.onnx"), "--loss", "cross-entropy", "--optimizer", "sgd",
         "-o", str(d / "job")])
    rng = np.random.default_rng(1)
    np.save(d / "ids.npy", rng.integers(1, V, (64, T)).astype(np.int64))
    np.save(d / "labels.npy", rng.integers(0, C, 64).astype(np.int64))
    return d, emb, w


def strait_run(d, *extra):
    return subprocess.run([STRAIT_RUN, str(d / "job"), "--steps", "1", "--lr", "0.1",
                           "--threads", "1", "--data", str(d / "ids.npy"), *extra],
                          capture_output=True, text=True, timeout=120)


def test_integer_npy_feeds_input_ids(job, tmp_path):
    d, emb, w = job
    p = strait_run(d, "--labels", str(d / "labels.npy"), "--dump-outputs", str(tmp_path))
    assert p.returncode == 0, p.stdout + p.stderr
    log = open(d / "job" / "logs" / "rank0.log").read()
    assert "-> 'input_ids', labels 'labels'" in log and "gets no data" not in log, log
    ids = np.load(tmp_path / "input_ids.rank0.npy")
    labels = np.load(tmp_path / "labels.rank0.npy")
    rows = [int(np.flatnonzero((np.load(d / "ids.npy") == r).all(1))[0]) for r in ids]
    assert (labels == np.load(d / "labels.npy")[rows]).all()  # the same rows of both files
    # The step's loss is numpy's cross-entropy of the initial model on the fed rows.
    logits = emb[ids].mean(1) @ w
    z = logits - logits.max(1, keepdims=True)
    want = float(np.mean(np.log(np.exp(z).sum(1)) - z[np.arange(B), labels]))
    got = float(p.stdout.split("loss ")[1].split()[0])
    assert abs(got - want) < 1e-4 * max(1.0, abs(want)), (got, want)


def test_float_npy_for_integer_input_is_an_error(job, tmp_path):
    d, _, _ = job
    np.save(tmp_path / "f.npy", np.zeros((64, T), np.float32))
    p = subprocess.run([STRAIT_RUN, str(d / "job"), "--steps", "1", "--data",
                        str(tmp_path / "f.npy"), "--labels", str(d / "labels.npy")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "input 'input_ids'" in p.stdout + p.stderr and "f.npy" in p.stdout + p.stderr


def test_misspelt_input_name_is_an_error(job):
    d, _, _ = job
    p = strait_run(d, "--labels", str(d / "labels.npy"), "--input-name", "input_idz")
    assert p.returncode != 0
    assert ("--input-name 'input_idz' is not an input of the job (its inputs: 'input_ids', "
            "'labels')") in p.stdout + p.stderr, p.stdout + p.stderr


def test_npy_eval_data_without_labels_fails_before_training(job):
    d, _, _ = job
    p = strait_run(d, "--labels", str(d / "labels.npy"), "--eval-data", str(d / "ids.npy"))
    assert p.returncode != 0
    out = p.stdout + p.stderr
    assert "is an npy array and the program reads labels 'labels': give them with " \
           "--eval-labels FILE.npy" in out, out
    assert "step 1/1" not in out and "iteration 1" not in out, out


def test_float_targets_train_an_mse_regression(tmp_path):
    """--loss mse reads float targets: an npy of float32 labels feeds them row by row (labels
    had to be integer class ids); the step's loss is numpy's mean squared error on the fed
    rows, and float64 targets for the f32 labels input are refused naming both."""
    rng = np.random.default_rng(2)
    w = rng.standard_normal((D, C)).astype(np.float32)
    g = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "regression",
                          [helper.make_tensor_value_info("x", TensorProto.FLOAT, [B, D])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [B, C])],
                          [numpy_helper.from_array(w, "w")])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]),
              str(tmp_path / "r.onnx"))
    run([STRAITC, str(tmp_path / "r.onnx"), "--loss", "mse", "--optimizer", "sgd",
         "-o", str(tmp_path / "job")])
    x = rng.standard_normal((64, D)).astype(np.float32)
    y = rng.standard_normal((64, C)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "y.npy", y)
    p = subprocess.run([STRAIT_RUN, str(tmp_path / "job"), "--steps", "1", "--lr", "0.1",
                        "--threads", "1", "--data", str(tmp_path / "x.npy"), "--labels",
                        str(tmp_path / "y.npy"), "--dump-outputs", str(tmp_path / "out")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    fx = np.load(tmp_path / "out" / "x.rank0.npy")
    fy = np.load(tmp_path / "out" / "labels.rank0.npy")
    rows = [int(np.flatnonzero((x == r).all(1))[0]) for r in fx]
    np.testing.assert_array_equal(fy, y[rows])  # each row's own targets
    want = float(np.mean((fx @ w - fy) ** 2))
    got = float(p.stdout.split("loss ")[1].split()[0])
    assert abs(got - want) < 1e-4 * max(1.0, abs(want)), (got, want)

    np.save(tmp_path / "y64.npy", y.astype(np.float64))
    p = subprocess.run([STRAIT_RUN, str(tmp_path / "job"), "--steps", "1", "--data",
                        str(tmp_path / "x.npy"), "--labels", str(tmp_path / "y64.npy")],
                       capture_output=True, text=True, timeout=120)
    assert p.returncode != 0
    assert "must both be of integer types, or of the same float type" in p.stdout + p.stderr
