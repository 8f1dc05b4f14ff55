// RUN: strait-opt %s --split-input-file --verify-diagnostics --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=none compress-link=east:west=int8' | FileCheck %s

// A given quantizing codec whose error-feedback residual does not fit in
// what the plan leaves (dist.memory_left) is an error naming the flag, the
// transfer and the bytes (dist-insert-compression-memory.mlir has the
// cases that fit).

// 4 ranks in 2 islands of 2: a 128 KiB residual per rank, which fits in
// 131072 bytes.
// CHECK-LABEL: module @fits
// CHECK: dist.compress %{{.*}} codec <int8> block 256 error_feedback
module @fits attributes {dist.memory_left = array<i64: 131072>, dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}

// -----

// 97.66 KiB left: an error.
module attributes {dist.memory_left = array<i64: 100000>, dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    // expected-error @+1 {{--compress-link=east:west=int8: the gradient all-reduce of stage 0: int8 needs error feedback, whose residual (128.00 KiB per rank) does not fit in the 97.66 KiB the plan leaves on the stage's devices; give it bf16 (no residual) or none, or more memory}}
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}

// -----

// Loss scaling keeps two residuals: 256 KiB, where 200000 bytes are left.
module attributes {dist.memory_left = array<i64: 200000>, dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> attributes {graph.training = {loss_scale = 65536.0 : f64}} {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    // expected-error @+1 {{int8 needs error feedback, whose residual (256.00 KiB per rank) does not fit in the 195.31 KiB the plan leaves}}
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}

// -----

// The attribute holds one count per stage of the plan.
// expected-error @+1 {{'dist.memory_left' has 2 entries, not one per stage of the plan (1)}}
module attributes {dist.memory_left = array<i64: 1, 2>, dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>]>} {
}

// -----

// expected-error @+1 {{'dist.memory_left' is an array<i64> of bytes per stage on a module}}
func.func @f() attributes {dist.memory_left = array<i64: 1>} {
  return
}
