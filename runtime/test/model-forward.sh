#!/usr/bin/env bash
# Whole-model forward check: runs each committed tiny model through the
# runtime (strait-onnx-node-test) and compares with onnxruntime.
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
for m in gpt2-tiny llama-tiny; do
  model=$src/models/$m/$m.onnx
  [ -f "$model" ] || { echo "missing $model"; status=1; continue; }
  for shape in "batch=1 seq=5" "batch=2 seq=16"; do
    set -- $shape
    out=$work/model-forward/$m-${1#batch=}x${2#seq=}
    "$python" "$src/runtime/scripts/make-model-testdata.py" "$model" "$out" \
      --shape "$1" --shape "$2" --vocab 200 --seed 7
    "$tool" --strict --rtol 1e-3 --atol 1e-4 "$out" || status=1
  done
done
exit $status
