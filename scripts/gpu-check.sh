#!/usr/bin/env bash
# GPU check of the CUDA backend (issue #7), for a machine with one NVIDIA GPU
# (H100/H200, sm_90), the CUDA toolkit in /usr/local/cuda and this repository
# with its .venv (no network needed). Phases, each with its own timeout; a
# summary is printed at the end even when a phase fails:
#   1 build     the runtime only (-DSTRAIT_BUILD_COMPILER=OFF, CUDA on) into build-gpu
#   2 gtest     strait-cuda-tests: every CUDA kernel against the CPU backend, NCCL on one rank
#   3 conform   the CPU's ONNX conformance list on --backend cuda (no FAIL allowed)
#   4 tiny      gpt2-tiny training steps: CPU vs GPU losses (exact f32 matmul)
#   5 strait    GPT-2 small training step (8x1024 tokens, AdamW), bf16 tensor cores
#   6 torch     the same step in PyTorch eager with bf16 autocast (bench/gpu/torch_gpt2_step.py)
# MFU = FLOPs/step / time / 989 TFLOP/s (H200 bf16 dense), FLOPs/step =
# T (6 N + 12 L d S) with T = 8192 tokens, N = 124.44 M, L = 12, d = 768, S = 1024.
#
# Programs (prepared with straitc, ~200 KB, not committed; out/ is ignored):
#   build/bin/straitc models/gpt2/gpt2.onnx --shape-only --input-shape input_ids=8x1024 \
#       --loss cross-entropy --optimizer adamw --emit=program -o out/gpt2-small-step
#   build/bin/straitc models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64 \
#       --loss cross-entropy --optimizer adamw --emit=program -o out/gpt2-tiny-step
# The script runs these itself when build/bin/straitc works and the folders are
# missing. Usage: scripts/gpu-check.sh [SMALL_DIR [TINY_DIR]]
set -u
cd "$(dirname "$0")/.."
SMALL=${1:-out/gpt2-small-step}
TINY=${2:-out/gpt2-tiny-step}
B=build-gpu
LOG=${GPU_CHECK_LOG:-$B-logs}
mkdir -p "$LOG"
declare -A RESULT
SECONDS=0
FLOPS=$(python3 -c 'T=8*1024; N=124439808; print(T*(6*N+12*12*768*1024))')

phase() { # name timeout command...
  local name=$1 t=$2; shift 2
  echo "=== $name (timeout ${t}s, at ${SECONDS}s)"
  timeout --kill-after=5 "$t" "$@" > "$LOG/$name.log" 2>&1
  local rc=$?
  tail -n 25 "$LOG/$name.log"
  case $rc in
    0) RESULT[$name]=ok ;;
    77) RESULT[$name]="skipped" ;;
    124|137) RESULT[$name]="TIMEOUT after ${t}s" ;;
    *) RESULT[$name]="FAILED rc=$rc" ;;
  esac
  echo "=== $name: ${RESULT[$name]}"
}

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | head -2

phase build 170 bash -c "
  cmake -S . -B $B -G Ninja -DSTRAIT_BUILD_COMPILER=OFF -DSTRAIT_ENABLE_CUDA=ON \
        -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > /dev/null &&
  ninja -C $B -j16 strait-cuda-tests strait-onnx-node-test strait-cuda-step-bench"

for spec in "$SMALL|models/gpt2/gpt2.onnx --shape-only --input-shape input_ids=8x1024" \
            "$TINY|models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64"; do
  dir=${spec%%|*}; args=${spec#*|}
  if [ ! -f "$dir/rank0.program.pb" ] && [ -x build/bin/straitc ]; then
    timeout 60 build/bin/straitc $args --loss cross-entropy --optimizer adamw \
      --emit=program -o "$dir" > "$LOG/straitc-$(basename "$dir").log" 2>&1 ||
      echo "straitc failed for $dir (see $LOG)"
  fi
done

phase gtest 60 $B/runtime/test/strait-cuda-tests
phase conform 75 $B/runtime/tools/strait-onnx-node-test --quiet --backend cuda \
  --list runtime/test/conformance/expected-passes.txt
if [ -f "$TINY/rank0.program.pb" ]; then
  phase tiny 40 $B/runtime/test/strait-cuda-step-bench "$TINY" --vocab 256 --precision f32 \
    --compare-cpu 5 --tolerance 1e-3 --steps 5 --warmup 1
else RESULT[tiny]="no program in $TINY"; fi
if [ -f "$SMALL/rank0.program.pb" ]; then
  phase strait 90 $B/runtime/test/strait-cuda-step-bench "$SMALL" --precision bf16 \
    --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
else RESULT[strait]="no program in $SMALL"; fi
PY=.venv/bin/python; [ -x $PY ] || PY=python3
phase torch 90 $PY bench/gpu/torch_gpt2_step.py --batch 8 --seq 1024 --steps 10 --warmup 3

echo
echo "===================== gpu-check summary (${SECONDS}s) ====================="
for p in build gtest conform tiny strait torch; do printf '%-8s %s\n' "$p" "${RESULT[$p]:-not run}"; done
grep -h "tests ran\|PASSED\|FAILED TEST\|SKIPPED \]" "$LOG/gtest.log" 2>/dev/null | head -4
grep -h "^summary" "$LOG/conform.log" 2>/dev/null
grep -h "compare-cpu" "$LOG/tiny.log" 2>/dev/null
grep -h "^strait-cuda:" "$LOG/strait.log" 2>/dev/null
grep -h "^torch-eager:" "$LOG/torch.log" 2>/dev/null
S=$(sed -n 's/^strait-cuda: \([0-9.e+-]*\) ms\/step.*/\1/p' "$LOG/strait.log" 2>/dev/null | head -1)
T=$(sed -n 's/^torch-eager: \([0-9.e+-]*\) ms\/step.*/\1/p' "$LOG/torch.log" 2>/dev/null | head -1)
if [ -n "$S" ] && [ -n "$T" ]; then
  python3 -c "s,t=$S,$T; print(f'ratio: strait {s:.2f} ms vs torch eager {t:.2f} ms per step -> strait is {t/s:.2f}x torch eager')"
fi
echo "FLOPs/step = T*(6N + 12*L*d*S) = $FLOPS; peak 989 TFLOP/s (H200 bf16 dense); logs in $LOG/"
fail=0; for p in build gtest conform tiny strait; do case "${RESULT[$p]:-}" in ok|skipped) ;; *) fail=1 ;; esac; done
exit $fail
