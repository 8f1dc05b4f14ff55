#!/usr/bin/env bash
# strait-run on a compiled model with real data: compiles models/gpt2-tiny
# (forward, input_ids=2x16) with straitc --emit=program, makes the byte-level
# text dataset (runtime/scripts/make-text-tokens.py), runs
#   strait-run DIR --data train.bin --dump-outputs OUT --steps 3
# and compares the dumped logits with onnxruntime on the dumped input_ids
# (max abs error < 1e-4). Also checks the per-step progress lines.
# usage: strait-run-gpt2-data.sh STRAIT_RUN SOURCE_DIR WORK_DIR
# Exits 77 (ctest skip) and says why when straitc (SOURCE_DIR/build/bin/
# straitc, or $STRAITC) or python with onnxruntime + numpy is absent.
set -euo pipefail
run=$1 src=$2 work=$3/strait-run-gpt2-data
straitc=${STRAITC:-$src/build/bin/straitc}
if [ ! -x "$straitc" ]; then
  echo "skipped: no straitc at $straitc (build the compiler or set STRAITC)"
  exit 77
fi
python=$src/.venv/bin/python
[ -x "$python" ] || python=$(command -v python3 || true)
if [ -z "$python" ] || ! "$python" -c "import onnxruntime, numpy" 2>/dev/null; then
  echo "skipped: needs python with onnxruntime and numpy"
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"
model=$src/models/gpt2-tiny/gpt2-tiny.onnx
"$straitc" "$model" --input-shape input_ids=2x16 --emit=program -o "$work/job"
"$python" "$src/runtime/scripts/make-text-tokens.py" "$work/data" --max-bytes 200000
"$run" "$work/job" --steps 3 --threads 2 --data "$work/data/train.bin" \
  --dump-outputs "$work/out" | tee "$work/run.txt"
for s in 1 2 3; do
  grep -q "^step $s/3 tokens/s [0-9]" "$work/run.txt" ||
    { echo "FAIL: no progress line for step $s"; exit 1; }
done
"$python" - "$model" "$work/out" "$work/data/train.bin" <<'PY'
import sys
import numpy as np
import onnxruntime as ort
model, out, data = sys.argv[1:4]
ids = np.load(out + "/input_ids.rank0.npy")
logits = np.load(out + "/logits.rank0.npy")
tokens = np.fromfile(data, dtype=np.uint16)
assert ids.shape == (2, 16), ids.shape
# Every row is a window of the token file.
for row in ids:
    starts = np.flatnonzero(tokens[: len(tokens) - 16] == row[0])
    assert any((tokens[s:s + 16] == row).all() for s in starts), "row not in the data"
assert len(np.unique(ids)) > 4, "input looks unfed"
sess = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
ref = sess.run(None, {sess.get_inputs()[0].name: ids.astype(np.int64)})[0]
assert ref.shape == logits.shape, (ref.shape, logits.shape)
err = float(np.abs(ref - logits).max())
print("gpt2-tiny logits vs onnxruntime: max abs err %.3g on %s" % (err, ids.shape))
sys.exit(0 if err < 1e-4 else 1)
PY
