#!/usr/bin/env bash
# Prepares, on a machine with the compiler built (build/bin/straitc) and the
# venv, everything scripts/gpu-check.sh runs on a GPU machine, under out/gpu/
# (git-ignored; carry it: run(carry=["out/gpu"])):
#   small-step/   GPT-2 small training step (8x1024 tokens, AdamW), one rank
#   small-step-unfused/  the same with --fuse-attention=false
#   small-step-bf16/  the same with --precision bf16 (graph-autocast: bf16 operands
#                 and results of the products, f32 master weights)
#   small-step-bf16-keep/  the same with --rematerialize=false
#   tiny-step/    gpt2-tiny training step (8x64), one rank
#   tiny-step-bf16/  the same with --precision bf16 (flash attention, bf16 GEMMs), its
#                 256 classes padded to 288 as GPT-2's LM head is (--pad-classes)
#   digits-step/  the digits CNN's training step (32 images: Conv, BatchNorm, pooling), one rank
#   moe-step/     a Mixtral-like MoE training step (8 experts, top-2, 2x64 tokens), one rank
#   tiny-1gpu/    gpt2-tiny job for a cluster of one H200 (rank 0 on cuda:0)
#   tiny-2host/   gpt2-tiny in 2 pipeline stages on two hosts of one H200 each
#   tiny-2host-1f1b/  the same with 4 micro-batches in 1F1B order, classic warm-up (deferred
#                 sends staged through pinned memory)
#                 (100 Gbit/s between them: each rank on cuda:0 of its host, Gloo between)
#   text/         byte-level text tokens (runtime/scripts/make-text-tokens.py)
#   bundle.tar.xz the CUDA runtime's tools built here (build-cuda: strait-cuda-tests,
#                 strait-onnx-node-test, strait-cuda-step-bench, strait-cuda-attention-bench,
#                 strait-cuda-gemm-bench,
#                 strait-run, strait-probe)
#                 with the shared libraries the GPU machines lack (protobuf, Gloo,
#                 OpenBLAS, ONNX, hiredis, ...; not glibc, libstdc++ or CUDA's own) and
#                 the ONNX node tests of the conformance list: the GPU machines have
#                 CUDA, PyTorch, CMake and ninja, not the project's Debian libraries.
# Takes a few minutes here (the CUDA build). Usage: scripts/gpu-prepare.sh
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
STRAITC=${STRAITC:-build/bin/straitc}
PY=.venv/bin/python; [ -x $PY ] || PY=python3
out=out/gpu
rm -rf "$out"
mkdir -p "$out"

common=(--loss cross-entropy --optimizer adamw)
# The step jobs below name no cluster (one rank, run on the GPU by the step
# bench): ask for the GPU's recomputation explicitly (auto is on for GPU clusters).
step=(--rematerialize=true)
"$STRAITC" models/gpt2/gpt2.onnx --shape-only --input-shape input_ids=8x1024 "${common[@]}" \
  "${step[@]}" --emit=program -o "$out/small-step"
# The same step with attention left decomposed (MatMul, Softmax, ...): the
# check times both, so a fault in the fused attention kernels still leaves an
# MFU figure, and the fused kernels' gain is measured in the whole step.
"$STRAITC" models/gpt2/gpt2.onnx --shape-only --input-shape input_ids=8x1024 "${common[@]}" \
  "${step[@]}" --fuse-attention=false --emit=program -o "$out/small-step-unfused"
"$STRAITC" models/gpt2/gpt2.onnx --shape-only --input-shape input_ids=8x1024 "${common[@]}" \
  "${step[@]}" --precision bf16 --emit=program -o "$out/small-step-bf16"
# The bf16 step without graph-rematerialize (the forward GELU keeps x, x/2,
# tanh, 1 + tanh in f32 for the backward): the check times the recomputation's gain.
"$STRAITC" models/gpt2/gpt2.onnx --shape-only --input-shape input_ids=8x1024 "${common[@]}" \
  --rematerialize=false --precision bf16 --emit=program -o "$out/small-step-bf16-keep"
# The bf16 step with the heads' Transposes left in the graph (FusedAttention
# reads [B, H, T, D] heads instead of [B, T, H, D] ones through its
# permutations): the check times the fold's gain, and keeps a step figure
# should the strided attention kernels misbehave.
"$STRAITC" models/gpt2/gpt2.onnx --shape-only --input-shape input_ids=8x1024 "${common[@]}" \
  "${step[@]}" --fold-transposes=false --precision bf16 --emit=program \
  -o "$out/small-step-bf16-nofold"
"$STRAITC" models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64 "${common[@]}" \
  "${step[@]}" --emit=program -o "$out/tiny-step"
"$STRAITC" models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64 "${common[@]}" \
  "${step[@]}" --precision bf16 --pad-classes=96 --pad-classes-min-work=0 \
  --emit=program -o "$out/tiny-step-bf16"
# llama-tiny (RMSNorm, FusedRotaryEmbedding, permuted attention operands, Gemm
# transposition flags, SwiGLU), f32 and bf16: the check compares both with the CPU.
"$STRAITC" models/llama-tiny/llama-tiny.onnx --input-shape input_ids=8x64 "${common[@]}" \
  "${step[@]}" --emit=program -o "$out/llama-step"
"$STRAITC" models/llama-tiny/llama-tiny.onnx --input-shape input_ids=8x64 "${common[@]}" \
  "${step[@]}" --precision bf16 --emit=program -o "$out/llama-step-bf16"
"$STRAITC" models/digits-cnn/digits-cnn.onnx --input-shape images=32x1x8x8 "${common[@]}" \
  "${step[@]}" --emit=program -o "$out/digits-step"
# A Mixtral-like mixture of experts (bench/runtime/moe_experts.py's model: 8 experts, top-2),
# its experts grouped (straitc's default): GroupedMatMul, TopK and ScatterElements on the GPU.
PYTHONPATH=python $PY bench/runtime/moe_experts.py --export "$out/moe.onnx" 2>/dev/null
"$STRAITC" "$out/moe.onnx" --input-shape input_ids=2x64 "${common[@]}" "${step[@]}" \
  --emit=program -o "$out/moe-step"

h200='  - name: H200
    kind: gpu
    peak_tflops: {fp32: 67, bf16: 989}
    mem_bandwidth_gbs: 4800
    memory_gib: 141'
cat > "$out/one-h200.yaml" <<EOF
name: one-h200
device_types:
$h200
devices:
  - {name: gpu0, type: H200, host: node0, site: dc}
EOF
cat > "$out/two-hosts-h200.yaml" <<EOF
name: two-hosts-h200
device_types:
$h200
devices:
  - {name: gpu0, type: H200, host: node0, site: dc}
  - {name: gpu1, type: H200, host: node1, site: dc}
links:
  intra_site: {bandwidth_gbps: 100, latency_us: 10}
EOF
"$STRAITC" models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64 "${common[@]}" \
  --cluster "$out/one-h200.yaml" --global-batch 8 -o "$out/tiny-1gpu"
"$STRAITC" models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64 "${common[@]}" \
  --cluster "$out/two-hosts-h200.yaml" --global-batch 8 --num-stages 2 -o "$out/tiny-2host"
"$STRAITC" models/gpt2-tiny/gpt2-tiny.onnx --input-shape input_ids=8x64 "${common[@]}" \
  --cluster "$out/two-hosts-h200.yaml" --global-batch 32 --num-stages 2 --micro-batches 4 \
  --schedule 1f1b --pipeline-warmup classic -o "$out/tiny-2host-1f1b"
$PY runtime/scripts/make-text-tokens.py "$out/text" > /dev/null

# The bundle.
BC=${STRAIT_CUDA_BUILD:-build-cuda}
[ -f "$BC/CMakeCache.txt" ] || cmake -S . -B "$BC" -G Ninja -DSTRAIT_BUILD_COMPILER=OFF \
  -DSTRAIT_ENABLE_CUDA=ON -DCMAKE_BUILD_TYPE=Release > /dev/null
ninja -C "$BC" -j2 strait-cuda-tests strait-onnx-node-test strait-cuda-step-bench strait-run strait-probe \
  strait-cuda-attention-bench strait-cuda-gemm-bench
stage=$(mktemp -d)
mkdir -p "$stage/bin" "$stage/lib" "$stage/node"
cp "$BC"/runtime/test/strait-cuda-tests "$BC"/runtime/test/strait-cuda-step-bench \
   "$BC"/runtime/test/strait-cuda-attention-bench "$BC"/runtime/test/strait-cuda-gemm-bench \
   "$BC"/runtime/tools/strait-onnx-node-test "$BC"/runtime/tools/strait-run \
   "$BC"/runtime/tools/strait-probe "$stage/bin/"
# Shared libraries to bring: everything ldd resolves except the C/C++ runtime
# and CUDA's libraries (the GPU machine's own driver-matched ones are used).
for b in "$stage"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|libstdc\+\+|libgcc_s|ld-linux[^/]*|libcuda[^/]*|libcudart|libcublas[^/]*|libcudnn[^/]*|libnccl|libnvrtc[^/]*)\.so' |
  while read -r lib; do cp -L "$lib" "$stage/lib/"; done
node=/usr/share/libonnx-testdata/data/node
grep -v '^#' runtime/test/conformance/expected-passes.txt | awk 'NF {print $1}' |
  while read -r t; do [ -d "$node/$t" ] && cp -r "$node/$t" "$stage/node/"; done
echo "built here $(date -u +%FT%TZ) at $(git rev-parse --short HEAD)$(git diff --quiet || echo +changes)" > "$stage/BUILD_INFO"
ls "$stage/lib" >> "$stage/BUILD_INFO"
tar -cJf "$out/bundle.tar.xz" -C "$stage" .
rm -rf "$stage"
du -sh "$out" "$out/bundle.tar.xz"
echo "prepared $out: run(command=\"scripts/gpu-check.sh\", carry=[\"$out\"], timeout_s=540)"
