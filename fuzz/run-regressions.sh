#!/usr/bin/env bash
#===- fuzz/run-regressions.sh - Replay fuzzer finds through the tools ------===#
#
#   run-regressions.sh BIN_DIR [DIR...]     (default DIR: fuzz/regressions)
#
# Imports every file of DIR (.onnxtxt as text, anything else as binary) with
# the normal, uninstrumented tools in each option mode the fuzzer uses:
# straitc, straitc --shape-only, strait-translate --allow-dynamic. Exit code
# 0 (the input was fine after all) or 1 (a diagnostic) passes; a signal,
# another code or a 60 s hang prints a CRASH line. The last line sums up.
#
#===----------------------------------------------------------------------===#
set -u
bin=$1
shift
dirs=("$@")
[[ ${#dirs[@]} -gt 0 ]] || dirs=("$(dirname "$0")/regressions")

files=0 crashes=0
check() { # FILE CMD...
  local f=$1 rc
  shift
  timeout 60 "$@" > /dev/null 2>&1
  rc=$?
  if [[ $rc -ne 0 && $rc -ne 1 ]]; then
    echo "CRASH rc=$rc: $* ($f)"
    crashes=$((crashes + 1))
  fi
}
for d in "${dirs[@]}"; do
  for f in "$d"/*; do
    [[ -f $f ]] || continue
    files=$((files + 1))
    imp=--import-onnx
    [[ $f == *.onnxtxt ]] && imp=--import-onnx-text
    check "$f" "$bin/straitc" "$f"
    check "$f" "$bin/straitc" --shape-only "$f"
    check "$f" "$bin/strait-translate" $imp --allow-dynamic "$f" -o /dev/null
  done
done
echo "regressions: $files files, $crashes crashes"
[[ $crashes -eq 0 ]]
