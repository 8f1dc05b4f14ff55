// RUN: strait-opt %s -split-input-file --dist-insert-compression='cluster=%inputs/compress-2site.yaml' | FileCheck %s --check-prefix=AUTO
// RUN: strait-opt %s -split-input-file --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=int8' | FileCheck %s --check-prefix=INT8
// RUN: strait-opt %s -split-input-file --dist-insert-compression='cluster=%inputs/compress-2site.yaml compress=none' | FileCheck %s --check-prefix=NONE

// Test cluster: sites east (e0, e1) and west (w0, w1), 10 Gbps inside a
// site, 10 Mbps / 1 ms between them. CPUs of 0.1 TFLOP/s and 10 GB/s.

// A 16x256 f32 activation (16 KiB) crosses the 10 Mbps link: 14.1 ms
// uncompressed. Stage 1 computes 10.7 ms per micro-batch (a 16x256x32768
// MatMul, forward and estimated backward, memory bound): fp16 (8 KiB, 7.6
// ms) is the least lossy codec that fits, so auto picks it.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  // AUTO-LABEL: func @main
  // AUTO: %[[H:.*]] = graph.Relu
  // AUTO-NEXT: %[[C:.*]] = dist.compress %[[H]] codec <fp16> {dist.stage = #dist.stage<0>} : tensor<16x256xf32> -> tensor<8192xi8>
  // AUTO-NEXT: dist.send %[[C]] to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<8192xi8>
  // AUTO-NEXT: %[[R:.*]] = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<8192xi8>
  // AUTO-NEXT: %[[D:.*]] = dist.decompress %[[R]] codec <fp16> {dist.stage = #dist.stage<1>} : tensor<8192xi8> -> tensor<16x256xf32>
  // AUTO-NEXT: graph.MatMul %[[D]]
  // The global codec applies to every link; none inserts nothing.
  // INT8-LABEL: func @main(%{{.*}}: tensor<16x256xf32>, %{{.*}}: tensor<256x32768xf32>)
  // INT8: dist.compress %{{.*}} codec <int8> block 256 {dist.stage = #dist.stage<0>} : tensor<16x256xf32> -> tensor<4160xi8>
  // NONE-NOT: dist.compress
  func.func @main(%x: tensor<16x256xf32>, %w: tensor<256x32768xf32>) -> tensor<16x32768xf32> {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<16x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<16x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<16x256xf32>
    %y = graph.MatMul %r, %w {dist.stage = #dist.stage<1>} : (tensor<16x256xf32>, tensor<256x32768xf32>) -> tensor<16x32768xf32>
    return %y : tensor<16x32768xf32>
  }
}

// -----

// Half the compute (5.3 ms): fp16 no longer fits, int8 (4,160 bytes with
// one f32 scale per 256 values, 4.3 ms) does.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  // AUTO-LABEL: func @main
  // AUTO: dist.compress %{{.*}} codec <int8> block 256 {dist.stage = #dist.stage<0>} : tensor<16x256xf32> -> tensor<4160xi8>
  // AUTO: dist.decompress %{{.*}} codec <int8> block 256 {dist.stage = #dist.stage<1>} : tensor<4160xi8> -> tensor<16x256xf32>
  func.func @main(%x: tensor<16x256xf32>, %w: tensor<256x16384xf32>) -> tensor<16x16384xf32> {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<16x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<16x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<16x256xf32>
    %y = graph.MatMul %r, %w {dist.stage = #dist.stage<1>} : (tensor<16x256xf32>, tensor<256x16384xf32>) -> tensor<16x16384xf32>
    return %y : tensor<16x16384xf32>
  }
}

// -----

// Almost no compute: nothing fits, the fastest codec (int4) is used for the
// activation, and for the gradient flowing back (stage 1 -> 0) too: the
// ladder of activation gradients is bf16, int8, int4, never top-k.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["w0"], ranks = [1]>]>} {
  // AUTO-LABEL: func @main
  // AUTO: dist.compress %{{.*}} codec <int4> block 256 {dist.stage = #dist.stage<0>} : tensor<64x256xf32> -> tensor<8448xi8>
  // AUTO: dist.compress %{{.*}} codec <int4> block 256 {dist.stage = #dist.stage<1>} : tensor<64x256xf32> -> tensor<8448xi8>
  // AUTO-NEXT: dist.send %{{.*}} to stage 0 channel 1
  func.func @main(%x: tensor<64x256xf32>) -> tensor<64x256xf32> {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %g = graph.Relu %r {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    dist.send %g to stage 0 channel 1 {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    %gr = dist.recv from stage 1 channel 1 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %y = graph.Relu %gr {dist.stage = #dist.stage<0>, graph.grad_of = 0 : i64} : tensor<64x256xf32>
    return %y : tensor<64x256xf32>
  }
}

// -----

// A fast link (e0 -> e1, 10 Gbps inside the site): auto inserts nothing;
// integer and f16 values and values under 64 elements are never encoded,
// even with a global codec (the runtime's codecs carry f32).
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["e1"], ranks = [1]>]>} {
  // AUTO-LABEL: func @main
  // AUTO-NOT: dist.compress
  // AUTO: return
  // INT8-LABEL: func @main(%{{.*}}: tensor<64x256xf32>, %{{.*}}: tensor<64xi64>, %{{.*}}: tensor<8xf32>, %{{.*}}: tensor<64x64xf16>)
  // INT8: dist.compress %{{.*}} codec <int8> block 256 {{.*}} : tensor<64x256xf32> -> tensor<16640xi8>
  // INT8-NOT: dist.compress
  // INT8: return
  func.func @main(%x: tensor<64x256xf32>, %i: tensor<64xi64>, %s: tensor<8xf32>, %f: tensor<64x64xf16>) -> (tensor<64x256xf32>, tensor<64xi64>, tensor<8xf32>, tensor<64x64xf16>) {
    %h = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<64x256xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    dist.send %i to stage 1 channel 1 {dist.stage = #dist.stage<0>} : tensor<64xi64>
    %ri = dist.recv from stage 0 channel 1 {dist.stage = #dist.stage<1>} : tensor<64xi64>
    dist.send %s to stage 1 channel 2 {dist.stage = #dist.stage<0>} : tensor<8xf32>
    %rs = dist.recv from stage 0 channel 2 {dist.stage = #dist.stage<1>} : tensor<8xf32>
    dist.send %f to stage 1 channel 3 {dist.stage = #dist.stage<0>} : tensor<64x64xf16>
    %rf = dist.recv from stage 0 channel 3 {dist.stage = #dist.stage<1>} : tensor<64x64xf16>
    %y = graph.Relu %r {dist.stage = #dist.stage<1>} : tensor<64x256xf32>
    return %y, %ri, %rs, %rf : tensor<64x256xf32>, tensor<64xi64>, tensor<8xf32>, tensor<64x64xf16>
  }
}

// -----

// The gradient all-reduce of a stage on both sites (islands [0, 1] and
// [2, 3]): its inter-island phase carries 256 KiB over 10 Mbps. With little
// compute nothing fits; top-k with int8 values at the smallest ratio (0.001:
// 66 codes, one scale, 99 bytes of Rice-coded gaps: 169 bytes) is the
// fastest, with error feedback. The reduction runs on the encoded bytes
// between compress and decompress.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  // AUTO-LABEL: func @main
  // AUTO: %[[C:.*]] = dist.compress %{{.*}} codec <topk_int8> ratio 1.000000e-03 block 256 error_feedback {dist.stage = #dist.stage<0>} : tensor<256x256xf32> -> tensor<169xi8>
  // AUTO-NEXT: %[[A:.*]] = dist.all_reduce %[[C]] reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<169xi8>
  // AUTO-NEXT: %[[D:.*]] = dist.decompress %[[A]] codec <topk_int8> ratio 1.000000e-03 block 256 {dist.stage = #dist.stage<0>} : tensor<169xi8> -> tensor<256x256xf32>
  // AUTO-NEXT: return %[[D]]
  // The global codec on an all-reduce gets error feedback too.
  // INT8-LABEL: func @main(%{{.*}}: tensor<256x256xf32>)
  // INT8: dist.compress %{{.*}} codec <int8> block 256 error_feedback
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    %r = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}

// -----

// An all-reduce inside one site (no islands, a 10 Gbps ring) stays plain.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1"], ranks = [0, 1]>]>} {
  // AUTO-LABEL: func @main
  // AUTO-NOT: dist.compress
  // AUTO: dist.all_reduce %{{.*}} : tensor<256x256xf32>
  func.func @main(%g: tensor<256x256xf32>) -> tensor<256x256xf32> {
    %a = graph.Relu %g {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    %r = dist.all_reduce %a reduce <mean> over [0, 1] channel 0 {dist.stage = #dist.stage<0>} : tensor<256x256xf32>
    return %r : tensor<256x256xf32>
  }
}

// -----

// The all-reduces of a stage share one codec chosen for their total: each
// 64 KiB gradient alone would cross the 10 Mbps link in 54 ms, within the
// stage's 84 ms of compute (a 256x1024x8192 MatMul, forward and estimated
// backward), but together they take 107 ms: bf16 (54 ms) on both.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["e0", "e1", "w0", "w1"], ranks = [0, 1, 2, 3]>]>} {
  // AUTO-LABEL: func @main
  // AUTO: dist.compress %{{.*}} codec <bf16> error_feedback {{.*}} : tensor<128x128xf32> -> tensor<32768xi8>
  // AUTO: dist.compress %{{.*}} codec <bf16> error_feedback {{.*}} : tensor<128x128xf32> -> tensor<32768xi8>
  func.func @main(%x: tensor<256x1024xf32>, %w: tensor<1024x8192xf32>, %g0: tensor<128x128xf32>, %g1: tensor<128x128xf32>) -> (tensor<256x8192xf32>, tensor<128x128xf32>, tensor<128x128xf32>) {
    %y = graph.MatMul %x, %w {dist.stage = #dist.stage<0>} : (tensor<256x1024xf32>, tensor<1024x8192xf32>) -> tensor<256x8192xf32>
    %a = graph.Relu %g0 {dist.stage = #dist.stage<0>} : tensor<128x128xf32>
    %r0 = dist.all_reduce %a reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 0 {dist.stage = #dist.stage<0>} : tensor<128x128xf32>
    %b = graph.Relu %g1 {dist.stage = #dist.stage<0>} : tensor<128x128xf32>
    %r1 = dist.all_reduce %b reduce <mean> over [0, 1, 2, 3] islands [array<i64: 0, 1>, array<i64: 2, 3>] channel 1 {dist.stage = #dist.stage<0>} : tensor<128x128xf32>
    return %y, %r0, %r1 : tensor<256x8192xf32>, tensor<128x128xf32>, tensor<128x128xf32>
  }
}
