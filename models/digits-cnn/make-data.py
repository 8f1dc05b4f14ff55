#!/usr/bin/env python3
"""scikit-learn's digits (1797 8x8 images, 10 classes, shipped inside the
scikit-learn package: no download) as npy arrays for strait-run --data:
  OUT/train-images.npy f32 [N, 1, 8, 8] (pixels / 16), OUT/train-labels.npy int64 [N]
  OUT/test-images.npy, OUT/test-labels.npy: a held-out 20 % (stratified, seed 0)
usage: make-data.py OUT_DIR
"""
import os
import sys

import numpy as np
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    d = load_digits()
    x = (d.images.astype(np.float32) / 16.0)[:, None, :, :]
    y = d.target.astype(np.int64)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    for name, a in (("train-images", xtr), ("train-labels", ytr), ("test-images", xte),
                    ("test-labels", yte)):
        np.save(os.path.join(out, name + ".npy"), np.ascontiguousarray(a))
    print(f"make-data: {len(xtr)} train, {len(xte)} test digits in {out}")


if __name__ == "__main__":
    main()
