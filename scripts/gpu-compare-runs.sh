#!/usr/bin/env bash
# Runs a compiled job with strait-run on its GPUs (exact f32 GEMMs) and again
# with --device cpu, both on the same text, and compares the losses
# (relative difference below 2e-3). Used by scripts/gpu-check.sh.
# Usage: scripts/gpu-compare-runs.sh STRAIT_RUN JOB_DIR STEPS TEXT_DIR
set -euo pipefail
run=$1 job=$2 steps=$3 text=$4
data=(--data "$text/train.bin" --data-format tokens-u16 --steps "$steps" --timeout-ms 60000)
# The held-out loss every 5 steps (evaluation on the ranks' own device).
[ -f "$text/val.bin" ] && data+=(--eval-data "$text/val.bin" --eval-every 5 --eval-batches 2)
if ! "$run" "$job" "${data[@]}" --matmul-precision f32; then
  if grep -q "is not usable\|built without" "$job"/logs/rank0.log; then
    echo "skipped: no usable GPU"; exit 77
  fi
  exit 1
fi
cat "$job"/logs/rank*.log > "$job/gpu-ranks.txt"
"$run" "$job" "${data[@]}" --device cpu
cat "$job"/logs/rank*.log > "$job/cpu-ranks.txt"
python3 - "$job/gpu-ranks.txt" "$job/cpu-ranks.txt" <<'PY'
import re, sys
def losses(path, what="iteration"):
    return [float(m.group(1)) for m in re.finditer(what + r" \d+/\d+ .*?loss (\S+)", open(path).read())]
g, c = losses(sys.argv[1]), losses(sys.argv[2])
ge, ce = losses(sys.argv[1], "eval"), losses(sys.argv[2], "eval")
print(f"compare-runs: {len(ge)} eval losses, gpu {ge} cpu {ce}")
if len(ge) != len(ce) or any(abs(a - b) > 2e-3 * max(abs(b), 1e-6) for a, b in zip(ge, ce)):
    sys.exit(1)
ok = bool(g) and len(g) == len(c)
worst = max(abs(a - b) / max(abs(b), 1e-6) for a, b in zip(g, c)) if ok else float("inf")
print(f"compare-runs: {len(g)} losses, gpu first/last {g[:1]}/{g[-1:]}, cpu first/last "
      f"{c[:1]}/{c[-1:]}, max rel diff {worst:.2e}")
grep = [l for l in open(sys.argv[1]) if "device " in l and "communication" in l]
print("".join(grep[:4]), end="")
sys.exit(0 if worst < 2e-3 else 1)
PY
