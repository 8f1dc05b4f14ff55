#!/usr/bin/env bash
# The digits CNN example (docs/runtime.md, "Examples: the digits CNN"):
# scikit-learn's 8x8 digits as npy arrays, models/digits-cnn compiled with
# cross-entropy and SGD for the bundled local cluster (the planner runs it as
# data-parallel ranks), trained by strait-run, evaluated by onnxruntime on the
# held-out 20 %. Needs a build (scripts/setup.sh) and the venv with
# scikit-learn (python/requirements-check.txt).
# Usage: examples/digits.sh [steps] [out-dir]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${STRAIT_BUILD_DIR:-$root/build}"
steps="${1:-300}"
out="${2:-$root/out/digits}"
py="$root/.venv/bin/python"
"$py" "$root/models/digits-cnn/make-data.py" "$out"
rm -rf "$out/job" "$out/params"
"$build/bin/straitc" "$root/models/digits-cnn/digits-cnn.onnx" --input-shape images=32x1x8x8 \
  --loss cross-entropy --optimizer sgd --cluster "$root/examples/clusters/local-4cpu.yaml" -o "$out/job"
"$build/runtime/tools/strait-run" "$out/job" --data "$out/train-images.npy" \
  --labels "$out/train-labels.npy" --steps "$steps" --lr 0.1 --save-params "$out/params"
"$py" "$root/models/digits-cnn/evaluate.py" "$out/params" "$out"
