"""Tests of python/strait/gradcheck.py: export (a) and compile (b) of the reference models to
training steps, the comparison helpers, and (c) once the runtime executes training steps."""
from __future__ import annotations

import os
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "python"))

from strait import gradcheck  # noqa: E402

BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
HAVE_TOOLS = all(os.path.exists(os.path.join(BUILD, "bin", t)) for t in ("straitc", "strait-opt"))
torch = pytest.importorskip("torch")


def test_max_relative_error():
    ref = np.array([1.0, -2.0, 4.0])
    assert gradcheck.max_relative_error(ref, ref) == 0.0
    assert gradcheck.max_relative_error(ref, ref + np.array([0, 0, 4e-4])) == pytest.approx(1e-4)
    assert gradcheck.max_relative_error(ref, ref[:2]) == float("inf")


def test_compare_reports_bad_and_missing():
    ref = {"a": np.ones(3), "b": np.ones(2), "c": np.ones(1)}
    got = {"a": np.ones(3), "b": np.array([1.0, 1.1])}
    bad = gradcheck.compare(ref, got)
    assert set(bad) == {"b", "c"}
    assert bad["c"] == float("inf")


@pytest.mark.skipif(not HAVE_TOOLS, reason="straitc/strait-opt not built")
@pytest.mark.parametrize("name", sorted(gradcheck.CASES))
def test_training_step_has_every_parameter(name, tmp_path):
    case = gradcheck.CASES[name]()
    path = gradcheck.export_model(case, str(tmp_path / f"{name}.onnx"))
    step = gradcheck.compile_training_step(path, case.input_shapes, BUILD)
    assert gradcheck.check_structure(case, step) == []
    params = [n for n, _ in case.module.named_parameters()]
    assert len(gradcheck.accumulated_variables(step)) == len(params)
    # Every backward op names the forward op it differentiates.
    assert "graph.grad_of" in step and "graph.SGD" in step
    assert '{graph.name = "loss"}' in step
    grads = gradcheck.compile_training_step(path, case.input_shapes, BUILD,
                                            gradcheck.GRADIENTS_ONLY)
    assert gradcheck.check_structure(case, grads) == []
    assert sorted(gradcheck.gradient_results(grads)) == sorted(params)
    assert "graph.AssignVariable" not in grads and "graph.SGD" not in grads


@pytest.mark.skipif(not HAVE_TOOLS, reason="straitc/strait-opt not built")
@pytest.mark.parametrize("name", sorted(gradcheck.CASES))
def test_gradients_match_torch(name, tmp_path):
    case = gradcheck.runtime_batch(gradcheck.CASES[name]())
    path = gradcheck.export_model(case, str(tmp_path / f"{name}.onnx"))
    try:
        computed = gradcheck.run_on_runtime(path, case, BUILD)
    except gradcheck.RuntimeUnavailable as e:
        pytest.skip(str(e))
    _, reference = gradcheck.torch_gradients(case)
    assert gradcheck.compare(reference, computed) == {}


# (optimizer options, torch optimizer arguments, steps, lr)
TRAJECTORIES = {
    "gpt2": ("optimizer=adamw weight-decay=0.01", dict(weight_decay=0.01), 100, 1e-3),
    "gpt2-clip": ("optimizer=adamw clip-norm=0.5", dict(clip=0.5), 15, 2e-3),
    "resnet": ("optimizer=sgd momentum=0.9 weight-decay=0.001",
               dict(weight_decay=0.001, momentum=0.9), 20, 0.002),
}


@pytest.mark.skipif(not HAVE_TOOLS, reason="straitc/strait-opt not built")
@pytest.mark.parametrize("name", sorted(TRAJECTORIES))
def test_training_follows_torch(name, tmp_path):
    """Whole training steps (loss, backward, optimizer, assignments) on the runtime follow
    PyTorch's loss trajectory on the same batch: per step within 1e-3 relative (the runtime
    prints 6 significant digits; f32 drift grows as the loss approaches 0)."""
    options, torch_args, steps, lr = TRAJECTORIES[name]
    case = gradcheck.runtime_batch(gradcheck.CASES[name.split("-")[0]]())
    path = gradcheck.export_model(case, str(tmp_path / f"{name}.onnx"))
    try:
        runtime = gradcheck.train_on_runtime(path, case, BUILD, steps, lr,
                                             "loss=cross-entropy " + options)
    except gradcheck.RuntimeUnavailable as e:
        pytest.skip(str(e))
    reference = gradcheck.torch_trajectory(case, steps, lr, **torch_args)
    rel = np.abs(np.array(runtime) - reference) / np.abs(reference)
    assert rel.max() < 1e-3, f"step {rel.argmax() + 1}: {runtime[rel.argmax()]} vs " \
                             f"{reference[rel.argmax()]}"
    assert runtime[-1] < 0.5 * runtime[0]
