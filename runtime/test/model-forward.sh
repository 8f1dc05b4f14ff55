#!/usr/bin/env bash
# Whole-model forward check: runs reference models through the runtime
# (strait-onnx-node-test) and compares with onnxruntime.
#   default: gpt2-tiny and llama-tiny (committed weights) at two shapes, and
#            mobilenet-v3-large with seeded random weights;
#   STRAIT_FORWARD_ALL=1: also resnet50, resnet101, vit-b-16, bert-base and
#            gpt2 with seeded random weights (several GB of scratch space).
# usage: model-forward.sh TOOL SOURCE_DIR WORK_DIR
# Exits 77 (ctest skip) when Python with onnx + onnxruntime is not available.
set -euo pipefail
tool=$1 src=$2 work=$3
python=$src/.venv/bin/python
[ -x "$python" ] || python=$(command -v python3 || true)
if [ -z "$python" ] || ! "$python" -c "import onnx, onnxruntime, numpy" 2>/dev/null; then
  echo "skipped: needs python with onnx, onnxruntime and numpy"
  exit 77
fi
status=0
check() { # name out-suffix make-testdata-args...
  local m=$1 suffix=$2
  shift 2
  local model=$src/models/$m/$m.onnx out=$work/model-forward/$m-$suffix
  [ -f "$model" ] || { echo "FAIL missing $model"; status=1; return; }
  "$python" "$src/runtime/scripts/make-model-testdata.py" "$model" "$out" --seed 7 "$@"
  "$tool" --strict --rtol 1e-3 --atol 1e-4 "$out" || status=1
  rm -rf "$out"
}
for m in gpt2-tiny llama-tiny; do
  check $m 1x5 --shape batch=1 --shape seq=5 --vocab 200
  check $m 2x16 --shape batch=2 --shape seq=16 --vocab 200
done
check mobilenet-v3-large 2 --shape batch=2 --random-weights
if [ "${STRAIT_FORWARD_ALL:-0}" = 1 ]; then
  for m in resnet50 resnet101 vit-b-16; do
    check $m 1 --shape batch=1 --random-weights
  done
  for m in bert-base gpt2; do
    check $m 2x16 --shape batch=2 --shape seq=16 --vocab 1000 --random-weights
  done
fi
exit $status
