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
  func.func @codecs(%g: tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf16>, tensor<4x4xi4>) {
    // CHECK: %[[V:.*]]:2 = dist.compress %{{.*}} codec <topk> ratio 2.500000e-01 : tensor<4x4xf32> -> tensor<4xf32>, tensor<4xi64>
    %v, %i = dist.compress %g codec <topk> ratio 0.25 : tensor<4x4xf32> -> tensor<4xf32>, tensor<4xi64>
    // CHECK: dist.decompress %[[V]]#0, %[[V]]#1 codec <topk> : tensor<4xf32>, tensor<4xi64> -> tensor<4x4xf32>
    %d = dist.decompress %v, %i codec <topk> : tensor<4xf32>, tensor<4xi64> -> tensor<4x4xf32>
    // CHECK: dist.compress %{{.*}} codec <fp16> : tensor<4x4xf32> -> tensor<4x4xf16>
    %h = dist.compress %g codec <fp16> : tensor<4x4xf32> -> tensor<4x4xf16>
    // CHECK: dist.compress %{{.*}} codec <int4> : tensor<4x4xf32> -> tensor<4x4xi4>
    %q = dist.compress %g codec <int4> : tensor<4x4xf32> -> tensor<4x4xi4>
    return %d, %h, %q : tensor<4x4xf32>, tensor<4x4xf16>, tensor<4x4xi4>
  }
}
