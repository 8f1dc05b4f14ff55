// RUN: strait-opt %s --split-input-file --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=auto' | FileCheck %s --check-prefix=AUTO
// RUN: strait-opt %s --split-input-file --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=bf16' | FileCheck %s --check-prefix=CAST

// Error feedback keeps a residual per rank beside the memory the planner
// counted; dist-assign-stages records what each stage's devices have left
// (dist.memory_left). Here 4 ranks in 2 islands of 2: each rank encodes half
// of the 256 KiB gradient, a 128 KiB residual (131072 bytes). A given
// quantizing codec that does not fit is an error (the -errors file).

// 131072 bytes left: the residual fits exactly; every codec keeps feedback
// (int8 too: dist-insert-compression-memory-errors.mlir).
// AUTO-LABEL: module @fits
// AUTO: dist.compress %{{.*}} error_feedback
// CAST-LABEL: module @fits
// CAST: dist.compress %{{.*}} codec <bf16> error_feedback
module @fits attributes {dist.memory_left = array<i64: 131072>, dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}

// -----

// One byte short: auto takes bf16 without feedback; a given bf16 goes
// without it.
// AUTO-LABEL: module @short
// AUTO: dist.compress %{{.*}} codec <bf16> {dist.stage
// CAST-LABEL: module @short
// CAST: dist.compress %{{.*}} codec <bf16> {dist.stage
module @short attributes {dist.memory_left = array<i64: 131071>, dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}
