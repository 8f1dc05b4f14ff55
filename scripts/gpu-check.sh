#!/usr/bin/env bash
# GPU check of the CUDA backend (issue #7), for a machine with one NVIDIA GPU
# (H100/H200, sm_90). The GPU machines of this workplace have CUDA, PyTorch,
# CMake and ninja but not the project's Debian libraries (protobuf, Gloo,
# OpenBLAS, ONNX), so the runtime is built HERE and travels as a bundle:
#
#   here:   scripts/gpu-prepare.sh      # programs, jobs, data and the bundle in out/gpu
#   there:  scripts/gpu-check.sh        # run(command=..., carry=["out/gpu"], timeout_s=540)
#
# Without out/gpu/bundle.tar.xz the script builds the runtime itself into
# build-gpu (for a machine that has the libraries). Phases, each with its
# own timeout; a summary is printed at the end even when a phase fails:
#   build     (only without a bundle) the runtime with CUDA into build-gpu
#   gtest     strait-cuda-tests: every CUDA kernel against the CPU backend, NCCL on one rank
#   gemm      strait-cuda-gemm-bench: the LM-head products under the GEMM switches
#   attn      FusedAttention fwd+bwd vs the composed ops (MatMul, Mul, Add, Softmax,
#             MatMul and gradients) at GPT-2 small shapes, f32; attn-bf16 in bf16
#   conform   the CPU's ONNX conformance list on --backend cuda (no FAIL allowed;
#             natively vs. through the host fallback is counted)
#   tiny      gpt2-tiny training steps: CPU vs GPU losses (exact f32 matmul); tiny-amp bf16
#   llama     llama-tiny training steps (rotary embeddings, permuted attention): CPU vs GPU,
#             f32; llama-amp bf16
#   digits    the digits CNN's training steps (cuDNN conv, batch norm, pooling): CPU vs GPU
#   moe       a Mixtral-like MoE training step (grouped expert GEMMs, TopK, ScatterElements):
#             CPU vs GPU losses
#   strait    GPT-2 small training step (8x1024 tokens, AdamW), bf16 tensor cores,
#             CUDA graphs on; strait-nograph the same without graphs; strait-unfused
#             the same with attention decomposed (--fuse-attention=false); strait-amp
#             the step compiled with --precision bf16 (bf16 storage of the products);
#             strait-amp-keep the bf16 step compiled with --rematerialize=false;
#             strait-amp-nofold with --fold-transposes=false (the heads'
#             Transposes left in, FusedAttention on [B, H, T, D] heads);
#             profile: device time per op of the bf16 step (graphs off, CUDA events);
#             strait-amp-best: the bf16 step under the gemm phase's fastest LM-head variant
#             (when it is not the default; profile then runs under it too)
#   torch     the same step in PyTorch eager with bf16 autocast (bench/gpu/torch_gpt2_step.py),
#             attention written out as the exported model has it; torch-sdpa the same
#             with F.scaled_dot_product_attention (PyTorch's flash kernels)
#   run1      strait-run: gpt2-tiny job planned for one H200, 20 steps on text,
#             GPU (f32 matmul) vs --device cpu losses
#   run2      strait-run: gpt2-tiny in 2 pipeline stages on two "hosts" (both on
#             GPU 0 here), Gloo between them, vs --device cpu
#   run2-1f1b the same with 4 micro-batches in 1F1B order (deferred sends of
#             GPU memory staged through pinned host memory)
#   probe     strait-probe --backend cuda: the device profile for the planner
# MFU = FLOPs/step / time / 989 TFLOP/s (H200 bf16 dense), FLOPs/step =
# T (6 N + 12 L d S) with T = 8192 tokens, N = 124.44 M, L = 12, d = 768, S = 1024.
# Usage: scripts/gpu-check.sh [GPU_DIR (default out/gpu)]
#   GPU_CHECK_PHASES="gtest strait ..." runs only the phases named (a quick recheck);
#   GTEST_FILTER narrows the gtest phase.
set -u
cd "$(dirname "$0")/.."
G=${1:-out/gpu}
SMALL=$G/small-step
TINY=$G/tiny-step
LOG=${GPU_CHECK_LOG:-${OUT:-/tmp}/gpu-check-logs}
mkdir -p "$LOG"
declare -A RESULT
SECONDS=0
FLOPS=$(python3 -c 'T=8*1024; N=124439808; print(T*(6*N+12*12*768*1024))')

phase() { # name timeout command...
  local name=$1 t=$2; shift 2
  if [ -n "${GPU_CHECK_PHASES:-}" ] && [[ " $GPU_CHECK_PHASES " != *" $name "* ]]; then
    RESULT[$name]="not selected"; return 0
  fi
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

nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version --format=csv,noheader 2>&1 | head -2

# CUDA libraries of this machine: the toolkit's cudart/cuBLAS, and NCCL and
# cuDNN wherever they are (the toolkit, or PyTorch's nvidia-* wheels).
libdirs=/usr/local/cuda/lib64:/usr/local/cuda/lib
for lib in libnccl.so.2 libcudnn.so.9 libcublas.so.13 libnvrtc.so.13; do
  d=$(find /usr/local/cuda/ /usr/lib /opt /usr/local/lib -name "$lib" 2>/dev/null | head -1)
  [ -n "$d" ] && libdirs="$libdirs:$(dirname "$d")"
done

if [ -f "$G/bundle.tar.xz" ]; then
  B=/tmp/strait-gpu
  rm -rf $B && mkdir -p $B && tar -xJf "$G/bundle.tar.xz" -C $B
  export LD_LIBRARY_PATH="$B/lib:$libdirs:${LD_LIBRARY_PATH:-}"
  RESULT[build]="bundle ($(cat $B/BUILD_INFO 2>/dev/null | head -1))"
  CUDA_TESTS=$B/bin/strait-cuda-tests NODE_TEST=$B/bin/strait-onnx-node-test
  STEP_BENCH=$B/bin/strait-cuda-step-bench STRAIT_RUN=$B/bin/strait-run PROBE=$B/bin/strait-probe
  ATTN_BENCH=$B/bin/strait-cuda-attention-bench GEMM_BENCH=$B/bin/strait-cuda-gemm-bench
  NODE_ROOT=$B/node
  for b in $B/bin/*; do ldd "$b" | grep "not found" | sed "s|^|$(basename "$b"): |"; done
else
  B=build-gpu
  export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
  phase build 170 bash -c "
    cmake -S . -B $B -G Ninja -DSTRAIT_BUILD_COMPILER=OFF -DSTRAIT_ENABLE_CUDA=ON \
          -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release > /dev/null &&
    ninja -C $B -j16 strait-cuda-tests strait-onnx-node-test strait-cuda-step-bench strait-run strait-probe \
      strait-cuda-attention-bench strait-cuda-gemm-bench"
  CUDA_TESTS=$B/runtime/test/strait-cuda-tests NODE_TEST=$B/runtime/tools/strait-onnx-node-test
  STEP_BENCH=$B/runtime/test/strait-cuda-step-bench STRAIT_RUN=$B/runtime/tools/strait-run
  PROBE=$B/runtime/tools/strait-probe ATTN_BENCH=$B/runtime/test/strait-cuda-attention-bench
  GEMM_BENCH=$B/runtime/test/strait-cuda-gemm-bench
  NODE_ROOT=/usr/share/libonnx-testdata/data/node
fi

phase gtest 120 $CUDA_TESTS
# GPT-2's LM-head products (rows of 50257) under the GEMM switches: padded
# copies on/off, 16-bit split-K reductions allowed/forbidden, cublasLt with
# timed candidates (STRAIT_CUDA_GEMM_TUNE=1); then a layer's product and the
# LM head over 50304 classes (straitc --pad-classes, the default now).
phase gemm 180 bash -c "for v in '' STRAIT_CUDA_GEMM_PAD=0 STRAIT_CUDA_GEMM_SPLITK_16=1 \
    'STRAIT_CUDA_GEMM_PAD=0 STRAIT_CUDA_GEMM_SPLITK_16=1' STRAIT_CUDA_GEMM_TUNE=1; do
  echo \"variant: \${v:-default}\"; env \$v $GEMM_BENCH --iters 10 || exit \$?; done"
# FusedAttention (cuBLAS + fused row kernels) against the composed ops, GPT-2 small shapes.
phase attn 40 $ATTN_BENCH --b 8 --h 12 --t 1024 --d 64 --iters 10 --precision f32 --tolerance 1e-3
phase attn-bf16 40 $ATTN_BENCH --b 8 --h 12 --t 1024 --d 64 --iters 20 --precision bf16
phase conform 75 $NODE_TEST --quiet --backend cuda --root "$NODE_ROOT" \
  --list runtime/test/conformance/expected-passes.txt
if [ -f "$TINY/rank0.program.pb" ]; then
  phase tiny 40 $STEP_BENCH "$TINY" --vocab 256 --precision f32 \
    --compare-cpu 5 --tolerance 1e-3 --steps 5 --warmup 1
else RESULT[tiny]="no program in $TINY (run scripts/gpu-prepare.sh)"; fi
# The bf16 step (flash attention, cublasLt bias epilogue) against the CPU's
# bf16 step (f32 arithmetic on bf16 storage): the products' summation order
# differs, so a looser bound than f32's.
[ -f "$TINY-bf16/rank0.program.pb" ] &&
  phase tiny-amp 40 $STEP_BENCH "$TINY-bf16" --vocab 256 --precision bf16 \
    --compare-cpu 5 --tolerance 1e-2 --steps 5 --warmup 1
# llama-tiny: the rotary embedding and the permuted attention of LLaMA's
# heads (K rows rotated in [B, T, H, D]) end to end, f32 and bf16.
[ -f "$G/llama-step/rank0.program.pb" ] &&
  phase llama 40 $STEP_BENCH "$G/llama-step" --vocab 256 --precision f32 \
    --compare-cpu 5 --tolerance 1e-3 --steps 5 --warmup 1
[ -f "$G/llama-step-bf16/rank0.program.pb" ] &&
  phase llama-amp 40 $STEP_BENCH "$G/llama-step-bf16" --vocab 256 --precision bf16 \
    --compare-cpu 5 --tolerance 1e-2 --steps 5 --warmup 1
if [ -f "$G/digits-step/rank0.program.pb" ]; then # cuDNN conv, batch norm, pooling
  phase digits 40 $STEP_BENCH "$G/digits-step" --vocab 10 --precision f32 \
    --compare-cpu 3 --tolerance 1e-3 --steps 5 --warmup 1
fi
# The MoE step: the grouped expert products, the router's TopK and its
# gradient's ScatterElements against the CPU.
[ -f "$G/moe-step/rank0.program.pb" ] &&
  phase moe 40 $STEP_BENCH "$G/moe-step" --vocab 256 --precision f32 \
    --compare-cpu 5 --tolerance 1e-3 --steps 5 --warmup 1
if [ -f "$SMALL/rank0.program.pb" ]; then
  phase strait 75 $STEP_BENCH "$SMALL" --precision bf16 --graphs on \
    --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
  phase strait-nograph 60 $STEP_BENCH "$SMALL" --precision bf16 --graphs off \
    --steps 5 --warmup 2 --flops-per-step "$FLOPS" --peak-tflops 989
  [ -f "$SMALL-unfused/rank0.program.pb" ] &&
    phase strait-unfused 60 $STEP_BENCH "$SMALL-unfused" --precision bf16 --graphs on \
      --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
  [ -f "$SMALL-bf16/rank0.program.pb" ] && {
    phase strait-amp 60 $STEP_BENCH "$SMALL-bf16" --precision bf16 --graphs on \
      --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
    # The same without this session's new paths (flash attention, cublasLt
    # bias epilogue, padded GEMMs): their gain, or a figure if one misbehaves.
    phase strait-amp-safe 60 env STRAIT_CUDA_FLASH_ATTENTION=0 STRAIT_CUDA_GEMM_LT=0 \
      STRAIT_CUDA_GEMM_PAD=0 $STEP_BENCH "$SMALL-bf16" --precision bf16 --graphs on \
      --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
    # graph-rematerialize's gain: the same step keeping the forward GELU's
    # f32 intermediates for the backward instead of recomputing them.
    [ -f "$SMALL-bf16-keep/rank0.program.pb" ] &&
      phase strait-amp-keep 60 $STEP_BENCH "$SMALL-bf16-keep" --precision bf16 --graphs on \
        --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
    # The fold of the heads' Transposes into FusedAttention's permutations:
    # the same step with the 96 Transposes left in.
    [ -f "$SMALL-bf16-nofold/rank0.program.pb" ] &&
      phase strait-amp-nofold 60 $STEP_BENCH "$SMALL-bf16-nofold" --precision bf16 \
        --graphs on --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
    # The gemm phase's fastest variant for the LM-head shapes (the sum of the
    # first three shapes' ms), if it is not the default: the bf16 step under it.
    BEST_GEMM=$(awk '/^variant:/ {v=substr($0, 10); n=0; next}
      /^gemm / && n < 3 {t[v] += $4; n++}
      END {best=""; for (k in t) if (best == "" || t[k] < t[best]) best=k; print best}' \
      "$LOG/gemm.log" 2>/dev/null)
    if [ -n "$BEST_GEMM" ] && [ "$BEST_GEMM" != default ]; then
      echo "gemm: fastest LM-head variant: $BEST_GEMM"
      phase strait-amp-best 60 env $BEST_GEMM $STEP_BENCH "$SMALL-bf16" --precision bf16 \
        --graphs on --steps 10 --warmup 3 --flops-per-step "$FLOPS" --peak-tflops 989
    fi
    phase profile 60 env ${BEST_GEMM/default/} $STEP_BENCH "$SMALL-bf16" --precision bf16 \
      --steps 1 --warmup 1 --profile 3
  }
else RESULT[strait]="no program in $SMALL (run scripts/gpu-prepare.sh)"; fi
PY=.venv/bin/python; [ -x $PY ] || PY=python3
phase torch 75 $PY bench/gpu/torch_gpt2_step.py --batch 8 --seq 1024 --steps 10 --warmup 3
phase torch-sdpa 60 $PY bench/gpu/torch_gpt2_step.py --batch 8 --seq 1024 --steps 10 --warmup 3 \
  --attention sdpa

# strait-run end to end: GPU losses against the same job on the CPU.
[ -f "$G/tiny-1gpu/plan.pb" ] && phase run1 60 scripts/gpu-compare-runs.sh $STRAIT_RUN "$G/tiny-1gpu" 20 "$G/text"
[ -f "$G/tiny-2host/plan.pb" ] && phase run2 60 scripts/gpu-compare-runs.sh $STRAIT_RUN "$G/tiny-2host" 10 "$G/text"
[ -f "$G/tiny-2host-1f1b/plan.pb" ] && phase run2-1f1b 45 scripts/gpu-compare-runs.sh $STRAIT_RUN "$G/tiny-2host-1f1b" 5 "$G/text"
phase probe 45 $PROBE --backend cuda --quick --type H200 --peak-tflops 989

echo
echo "===================== gpu-check summary (${SECONDS}s) ====================="
for p in build gtest gemm attn attn-bf16 conform tiny tiny-amp llama llama-amp digits moe strait strait-nograph strait-unfused strait-amp strait-amp-safe strait-amp-keep strait-amp-nofold strait-amp-best profile torch torch-sdpa run1 run2 run2-1f1b probe; do
  printf '%-15s %s\n' "$p" "${RESULT[$p]:-not run}"
done
grep -h "tests ran\|PASSED\|FAILED TEST\|SKIPPED \]" "$LOG/gtest.log" 2>/dev/null | head -4
grep -h "^summary\|^cuda:" "$LOG/conform.log" 2>/dev/null
grep -h "^variant\|^gemm" "$LOG/gemm.log" 2>/dev/null
grep -h "speedup\|FAIL" "$LOG/attn.log" "$LOG/attn-bf16.log" 2>/dev/null | head -8
grep -h "compare-cpu" "$LOG/tiny.log" "$LOG/tiny-amp.log" "$LOG/llama.log" "$LOG/llama-amp.log" \
  "$LOG/digits.log" "$LOG/moe.log" 2>/dev/null
for f in strait strait-nograph strait-unfused strait-amp strait-amp-safe strait-amp-keep strait-amp-nofold strait-amp-best; do
  grep -h "^strait-cuda:" "$LOG/$f.log" 2>/dev/null | sed "s/^strait-cuda:/$f:/"
done
grep -h "^torch-eager" "$LOG/torch.log" "$LOG/torch-sdpa.log" 2>/dev/null
grep -h "^compare-runs:" "$LOG/run1.log" "$LOG/run2.log" "$LOG/run2-1f1b.log" 2>/dev/null
grep -h "gemm_tflops\|memory bandwidth" "$LOG/probe.log" 2>/dev/null
S=$(sed -n 's/^strait-cuda: \([0-9.e+-]*\) ms\/step.*/\1/p' "$LOG/strait.log" 2>/dev/null | head -1)
T=$(sed -n 's/^torch-eager: \([0-9.e+-]*\) ms\/step.*/\1/p' "$LOG/torch.log" 2>/dev/null | head -1)
if [ -n "$S" ] && [ -n "$T" ]; then
  python3 -c "s,t=$S,$T; print(f'ratio: strait {s:.2f} ms vs torch eager {t:.2f} ms per step -> strait is {t/s:.2f}x torch eager')"
fi
U=$(sed -n 's/^strait-cuda: \([0-9.e+-]*\) ms\/step.*/\1/p' "$LOG/strait-unfused.log" 2>/dev/null | head -1)
if [ -n "$U" ] && [ -n "$T" ]; then
  python3 -c "s,t=$U,$T; print(f'ratio: strait with attention unfused {s:.2f} ms vs torch eager {t:.2f} ms per step -> {t/s:.2f}x')"
fi
A=$(sed -n 's/^strait-cuda: \([0-9.e+-]*\) ms\/step.*/\1/p' "$LOG/strait-amp.log" 2>/dev/null | head -1)
if [ -n "$A" ] && [ -n "$T" ]; then
  python3 -c "s,t=$A,$T; print(f'ratio: strait --precision bf16 {s:.2f} ms vs torch eager {t:.2f} ms per step -> {t/s:.2f}x')"
fi
grep -h "^profile:\|^kernel:" "$LOG/profile.log" 2>/dev/null | head -45
T2=$(sed -n 's/^torch-eager-sdpa: \([0-9.e+-]*\) ms\/step.*/\1/p' "$LOG/torch-sdpa.log" 2>/dev/null | head -1)
if [ -n "$S" ] && [ -n "$T2" ]; then
  python3 -c "s,t=$S,$T2; print(f'ratio: strait {s:.2f} ms vs torch eager + sdpa {t:.2f} ms per step -> strait is {t/s:.2f}x')"
fi
echo "FLOPs/step = T*(6N + 12*L*d*S) = $FLOPS; peak 989 TFLOP/s (H200 bf16 dense); logs in $LOG/"
fail=0
for p in gtest attn conform tiny tiny-amp digits strait strait-amp run1 run2 run2-1f1b; do
  case "${RESULT[$p]:-}" in ok|skipped) ;; *) fail=1 ;; esac
done
exit $fail
