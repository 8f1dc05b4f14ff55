// RUN: strait-opt %s | strait-opt | FileCheck %s

// The plan, the stage attribute and every op print and parse back unchanged.

// CHECK: module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 2, stages = [#dist.placement<stage = 0, devices = ["rank0", "rank1"], ranks = [0, 1]>, #dist.placement<stage = 1, devices = ["rank2"], ranks = [2]>]>}
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 2, stages = [#dist.placement<stage = 0, devices = ["rank0", "rank1"], ranks = [0, 1]>, #dist.placement<stage = 1, devices = ["rank2"], ranks = [2]>]>} {
  // CHECK-LABEL: func @transfers
  func.func @transfers(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    // CHECK: dist.send %{{.*}} to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<2x4xf32>
    dist.send %x to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<2x4xf32>
    // CHECK: %[[R:.*]] = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<2x4xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<2x4xf32>
    // CHECK: dist.all_reduce %[[R]] reduce <mean> over [0, 1] channel 1 : tensor<2x4xf32>
    %a = dist.all_reduce %r reduce <mean> over [0, 1] channel 1 : tensor<2x4xf32>
    return %a : tensor<2x4xf32>
  }

  // CHECK-LABEL: func @codecs
  // Encoded values are the wire bytes (D8): 16 f32 -> topk 0.25 keeps 4
  // values and their u32 indices (32 bytes), fp16 32 bytes, int4 8 bytes and
  // one scale (12), int8 with blocks of 8: 16 bytes and two scales (24).
  func.func @codecs(%g: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<32xi8>, tensor<12xi8>, tensor<4x4xf32>) {
    // CHECK: %[[V:.*]] = dist.compress %{{.*}} codec <topk> ratio 2.500000e-01 error_feedback : tensor<4x4xf32> -> tensor<32xi8>
    %v = dist.compress %g codec <topk> ratio 0.25 error_feedback : tensor<4x4xf32> -> tensor<32xi8>
    // CHECK: dist.decompress %[[V]] codec <topk> ratio 2.500000e-01 : tensor<32xi8> -> tensor<4x4xf32>
    %d = dist.decompress %v codec <topk> ratio 0.25 : tensor<32xi8> -> tensor<4x4xf32>
    // CHECK: dist.compress %{{.*}} codec <fp16> : tensor<4x4xf32> -> tensor<32xi8>
    %h = dist.compress %g codec <fp16> : tensor<4x4xf32> -> tensor<32xi8>
    // CHECK: dist.compress %{{.*}} codec <int4> : tensor<4x4xf32> -> tensor<12xi8>
    %q = dist.compress %g codec <int4> : tensor<4x4xf32> -> tensor<12xi8>
    // CHECK: %[[B:.*]] = dist.compress %{{.*}} codec <int8> block 8 : tensor<4x4xf32> -> tensor<24xi8>
    %b = dist.compress %g codec <int8> block 8 : tensor<4x4xf32> -> tensor<24xi8>
    // CHECK: dist.decompress %[[B]] codec <int8> block 8 : tensor<24xi8> -> tensor<4x4xf32>
    %e = dist.decompress %b codec <int8> block 8 : tensor<24xi8> -> tensor<4x4xf32>
    return %d, %h, %q, %e : tensor<4x4xf32>, tensor<32xi8>, tensor<12xi8>, tensor<4x4xf32>
  }

  // CHECK-LABEL: func @quantized_topk
  // 64x64 at 1%: k = 41, Rice parameter 7 (41 * 2^7 >= 4096): 41 int8 codes,
  // one f32 scale, ceil(41 * 9 / 8) = 47 bytes of gaps: 92 bytes (D8).
  func.func @quantized_topk(%g: tensor<64x64xf32>) -> tensor<64x64xf32> {
    // CHECK: %[[Q:.*]] = dist.compress %{{.*}} codec <topk_int8> ratio 1.000000e-02 block 256 error_feedback : tensor<64x64xf32> -> tensor<92xi8>
    %q = dist.compress %g codec <topk_int8> ratio 0.01 block 256 error_feedback : tensor<64x64xf32> -> tensor<92xi8>
    // CHECK: dist.decompress %[[Q]] codec <topk_int8> ratio 1.000000e-02 block 256 : tensor<92xi8> -> tensor<64x64xf32>
    %d = dist.decompress %q codec <topk_int8> ratio 0.01 block 256 : tensor<92xi8> -> tensor<64x64xf32>
    return %d : tensor<64x64xf32>
  }

  // CHECK-LABEL: func @low_bit_codecs
  // 64 f32: int2 16 code bytes, int3 24, aqsgd_int2 as int2 (the delta's
  // steady-state codes), each with one f32 scale per block of 256 (D8).
  func.func @low_bit_codecs(%g: tensor<4x16xf32>) -> (tensor<20xi8>, tensor<4x16xf32>) {
    // CHECK: dist.compress %{{.*}} codec <int2> : tensor<4x16xf32> -> tensor<20xi8>
    %a = dist.compress %g codec <int2> : tensor<4x16xf32> -> tensor<20xi8>
    // CHECK: dist.compress %{{.*}} codec <int3> block 32 : tensor<4x16xf32> -> tensor<32xi8>
    %b = dist.compress %g codec <int3> block 32 : tensor<4x16xf32> -> tensor<32xi8>
    // CHECK: dist.decompress %{{.*}} codec <aqsgd_int2> : tensor<20xi8> -> tensor<4x16xf32>
    %c = dist.decompress %a codec <aqsgd_int2> : tensor<20xi8> -> tensor<4x16xf32>
    return %a, %c : tensor<20xi8>, tensor<4x16xf32>
  }

  // CHECK-LABEL: func @hierarchical
  func.func @hierarchical(%g: tensor<4xf32>) -> tensor<4xf32> {
    // CHECK: dist.all_reduce %{{.*}} reduce <mean> over [0, 1, 2] islands [array<i64: 0, 1>, array<i64: 2>] channel 3 : tensor<4xf32>
    %r = dist.all_reduce %g reduce <mean> over [0, 1, 2] islands [array<i64: 0, 1>, array<i64: 2>] channel 3 : tensor<4xf32>
    return %r : tensor<4xf32>
  }
}
