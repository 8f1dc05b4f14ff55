"""The digits CNN example: scikit-learn's 8x8 digits trained across ranks.

models/digits-cnn/make-data.py writes the digits as npy arrays (80 % train,
20 % held out), straitc compiles models/digits-cnn/digits-cnn.onnx with
cross-entropy and SGD for examples/clusters/local-4cpu.yaml (the planner
picks 2 data-parallel ranks), strait-run trains 300 steps of 32 images per
replica on 2 processes and saves the weights (--save-params). Checked:
  - the loss falls from about ln(10) to below a tenth of it,
  - both replicas end with the same weights,
  - held-out accuracy of the trained weights, evaluated by onnxruntime on
    the exported model with its initializers replaced, exceeds 90 %
    (and the untrained model's is below 30 %, so training did it).
"""
from __future__ import annotations

import math
import os
import re
import subprocess
import sys

import pytest

np = pytest.importorskip("numpy")
pytest.importorskip("sklearn")
onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import numpy_helper  # noqa: E402

import jobutil  # noqa: E402
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.environ.get("STRAIT_BUILD_DIR", os.path.join(ROOT, "build"))
STRAITC = os.path.join(BUILD, "bin", "straitc")
STRAIT_RUN = jobutil.STRAIT_RUN  # the build's launcher, else build-rt's
MODEL_DIR = os.path.join(ROOT, "models", "digits-cnn")
MODEL = os.path.join(MODEL_DIR, "digits-cnn.onnx")
CLUSTER = os.path.join(ROOT, "examples", "clusters", "local-4cpu.yaml")

pytestmark = pytest.mark.skipif(not (os.path.exists(STRAITC) and os.path.isfile(STRAIT_RUN)),
                                reason="needs build/bin/straitc and strait-run")


def run(cmd, timeout=600):
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    assert p.returncode == 0, f"{' '.join(cmd)}: exit {p.returncode}\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    return p


def accuracy(params, images, labels):
    model = onnx.load(MODEL)
    for init in model.graph.initializer:
        if init.name in params:
            init.CopyFrom(numpy_helper.from_array(params[init.name].astype(np.float32), init.name))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    logits = sess.run(["logits"], {"images": images})[0]
    return float((logits.argmax(1) == labels).mean())


def test_digits_cnn_trains_on_two_ranks(tmp_path):
    data, job, saved = tmp_path / "data", tmp_path / "job", tmp_path / "params"
    run([sys.executable, os.path.join(MODEL_DIR, "make-data.py"), str(data)])
    out = run([STRAITC, MODEL, "--input-shape", "images=32x1x8x8", "--loss", "cross-entropy",
               "--optimizer", "sgd", "--cluster", CLUSTER, "-o", str(job)]).stdout
    m = re.search(r"\((\d+) ranks", out)
    assert m and int(m.group(1)) >= 2, out
    ranks = int(m.group(1))
    run([STRAIT_RUN, str(job), "--data", str(data / "train-images.npy"), "--labels",
         str(data / "train-labels.npy"), "--steps", "300", "--lr", "0.1", "--threads", "1",
         "--save-params", str(saved)])
    log = (job / "logs" / "rank0.log").read_text()
    losses = [float(x) for x in re.findall(r"iteration \d+/\d+ .*?loss (\S+)", log)]
    assert len(losses) == 300, log[-2000:]
    first, last = np.mean(losses[:5]), np.mean(losses[-20:])
    assert abs(first - math.log(10)) < 0.3, losses[:5]
    assert last < first / 10, (first, last)
    params = {}
    for r in range(ranks):
        for line in (saved / f"params.rank{r}.txt").read_text().splitlines():
            file, name = line.split()
            value = np.load(saved / file)
            if name in params:
                np.testing.assert_allclose(value, params[name], rtol=1e-6, atol=1e-7, err_msg=name)
            params[name] = value
    images = np.load(data / "test-images.npy")
    labels = np.load(data / "test-labels.npy")
    before = accuracy({}, images, labels)
    after = accuracy(params, images, labels)
    assert before < 0.3, before
    assert after > 0.90, after
    print(f"digits CNN on {ranks} ranks: loss {first:.3f} -> {last:.4f}; held-out accuracy "
          f"{before:.1%} untrained -> {after:.1%} ({len(labels)} images)")
