#!/usr/bin/env bash
# The main job on the bundled example: compile the tiny GPT-2 (models/gpt2-tiny)
# into a training step (cross-entropy, AdamW) planned on the bundled local
# 4-CPU cluster, then train it on real English text with strait-run, one
# process per rank over Gloo/TCP: 2 pipeline stages x 2 data-parallel
# replicas, 4 local ranks. (Left to itself the planner picks 2 replicas on one
# host for a model this small; --num-stages 2 forces the 2x2 layout.)
# Usage: scripts/example.sh [steps]
# (STRAIT_SKIP_SETUP=1 uses the existing build; STRAIT_EXAMPLE_OUT=DIR writes
# the job and the text data under DIR instead of out/: the tests do both.)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${STRAIT_BUILD_DIR:-$root/build}"
steps="${1:-100}"
[ "${STRAIT_SKIP_SETUP:-0}" = 1 ] || "$root/scripts/setup.sh" "$build"

outroot="${STRAIT_EXAMPLE_OUT:-$root/out}"
out="$outroot/gpt2-tiny"
data="$outroot/text"
[ -f "$data/train.bin" ] || "$root/.venv/bin/python" "$root/runtime/scripts/make-text-tokens.py" "$data"

echo "== straitc: import, training step, plan, per-rank programs"
rm -rf "$out"
"$build/bin/straitc" "$root/models/gpt2-tiny/gpt2-tiny.onnx" --input-shape input_ids=8x64 \
  --loss cross-entropy --optimizer adamw \
  --cluster "$root/examples/clusters/local-4cpu.yaml" --global-batch 16 --num-stages 2 -o "$out"

echo "== strait-run: $steps steps on byte-level text ($data/train.bin)"
"$build/runtime/tools/strait-run" "$out" --data "$data/train.bin" --data-format tokens-u16 \
  --steps "$steps" --lr 0.003
