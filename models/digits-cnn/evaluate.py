#!/usr/bin/env python3
"""Held-out accuracy of digits-cnn weights saved by `strait-run --save-params DIR`, evaluated by
onnxruntime on models/digits-cnn/digits-cnn.onnx with its initializers replaced.
usage: evaluate.py PARAMS_DIR DATA_DIR   (DATA_DIR from make-data.py: test-images.npy, test-labels.npy)
"""
import glob
import os
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import numpy_helper

MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "digits-cnn.onnx")


def main():
    params_dir, data_dir = sys.argv[1], sys.argv[2]
    params = {}
    for index in sorted(glob.glob(os.path.join(params_dir, "params.rank*.txt"))):
        for line in open(index):
            file, name = line.split()
            params[name] = np.load(os.path.join(params_dir, file))
    model = onnx.load(MODEL)
    missing = [i.name for i in model.graph.initializer if i.name not in params]
    if missing:
        sys.exit(f"evaluate: {params_dir} lacks parameters {missing}")
    for init in model.graph.initializer:
        init.CopyFrom(numpy_helper.from_array(params[init.name].astype(np.float32), init.name))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    images = np.load(os.path.join(data_dir, "test-images.npy"))
    labels = np.load(os.path.join(data_dir, "test-labels.npy"))
    pred = sess.run(["logits"], {"images": images})[0].argmax(1)
    print(f"evaluate: held-out accuracy {(pred == labels).mean():.1%} ({len(labels)} images)")


if __name__ == "__main__":
    main()
