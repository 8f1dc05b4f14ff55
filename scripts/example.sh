#!/usr/bin/env bash
# The main job on the bundled example: compile the tiny GPT-2 for the bundled
# local cluster and print what the compiler made of it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${STRAIT_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh" "$build"
model="$root/models/gpt2-tiny/gpt2-tiny.onnx"
echo "== straitc $model --input-shape input_ids=8x64"
"$build/bin/straitc" "$model" --input-shape input_ids=8x64 --emit=summary
