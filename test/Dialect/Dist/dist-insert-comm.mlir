// RUN: strait-opt %s -split-input-file --dist-insert-comm | FileCheck %s

// One transfer per value and consumer stage: %a goes to stages 1 and 2 (two
// send/recv pairs right after its producer, channels 0 and 1), its two uses
// in stage 1 share one recv; %c goes from stage 1 to stage 2 on channel 2.
// Each recv follows its send at once (one point of the shared order).
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>, #dist.placement<stage = 1, devices = ["b"], ranks = [1]>, #dist.placement<stage = 2, devices = ["c"], ranks = [2]>]>} {
  // CHECK-LABEL: func @main
  func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    // CHECK: %[[A:.*]] = graph.Relu
    // CHECK-NEXT: dist.send %[[A]] to stage 1 channel 0 {dist.stage = #dist.stage<0>}
    // CHECK-NEXT: %[[A1:.*]] = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>}
    // CHECK-NEXT: dist.send %[[A]] to stage 2 channel 1 {dist.stage = #dist.stage<0>}
    // CHECK-NEXT: %[[A2:.*]] = dist.recv from stage 0 channel 1 {dist.stage = #dist.stage<2>}
    // CHECK-NEXT: %[[B:.*]] = graph.Relu %[[A1]]
    // CHECK-NEXT: %[[C:.*]] = graph.Add %[[A1]], %[[B]]
    // CHECK-NEXT: dist.send %[[C]] to stage 2 channel 2 {dist.stage = #dist.stage<1>}
    // CHECK-NEXT: %[[C2:.*]] = dist.recv from stage 1 channel 2 {dist.stage = #dist.stage<2>}
    // CHECK-NEXT: %[[D:.*]] = graph.Add %[[A2]], %[[C2]]
    // CHECK-NEXT: return %[[D]]
    %a = graph.Relu %x {dist.stage = #dist.stage<0>} : tensor<2x4xf32>
    %b = graph.Relu %a {dist.stage = #dist.stage<1>} : tensor<2x4xf32>
    %c = graph.Add %a, %b {dist.stage = #dist.stage<1>} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %d = graph.Add %a, %c {dist.stage = #dist.stage<2>} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %d : tensor<2x4xf32>
  }
}

// -----

// Gradients flow backwards by the same rule: a value of stage 1 used in
// stage 0 travels 1 -> 0. Only backward ops read it there, so the transfer
// is a backward one although its producer is not (a fused loss's dScores).
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>, #dist.placement<stage = 1, devices = ["b"], ranks = [1]>]>} {
  // CHECK-LABEL: func @main
  func.func @main(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    // CHECK: %[[DY:.*]] = graph.Relu %{{.*}} {dist.stage = #dist.stage<1>
    // CHECK-NEXT: dist.send %[[DY]] to stage 0 channel 0 {dist.backward, dist.stage = #dist.stage<1>}
    // CHECK-NEXT: %[[R:.*]] = dist.recv from stage 1 channel 0 {dist.backward, dist.stage = #dist.stage<0>}
    // CHECK-NEXT: graph.Mul %[[R]], %{{.*}} {dist.stage = #dist.stage<0>
    %dy = graph.Relu %x {dist.stage = #dist.stage<1>} : tensor<2x4xf32>
    %dx = graph.Mul %dy, %x {dist.stage = #dist.stage<0>, graph.grad_of = 0 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %dx : tensor<2x4xf32>
  }
}

// -----

// The accumulated gradient of a variable on a replicated stage is averaged
// over the stage's ranks before any use; a stage with one replica needs no
// all-reduce.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a", "b"], ranks = [0, 1]>, #dist.placement<stage = 1, devices = ["c"], ranks = [2]>]>} {
  graph.Variable @w0 : tensor<4xf32>
  graph.Variable @w1 : tensor<4xf32>
  // CHECK-LABEL: func @main
  func.func @main(%g0: tensor<4xf32>, %g1: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    // CHECK: %[[A:.*]] = graph.AccumulateGrad %{{.*}} for @w0
    // CHECK-NEXT: %[[R:.*]] = dist.all_reduce %[[A]] reduce <mean> over [0, 1] channel 0 {dist.stage = #dist.stage<0>} : tensor<4xf32>
    // CHECK-NEXT: graph.AccumulateGrad %{{.*}} for @w1
    // CHECK-NOT: dist.all_reduce
    // CHECK: graph.Relu %[[R]]
    %a = graph.AccumulateGrad %g0 for @w0 {dist.stage = #dist.stage<0>, micro_batches = 1 : i64} : tensor<4xf32>
    %b = graph.AccumulateGrad %g1 for @w1 {dist.stage = #dist.stage<1>, micro_batches = 1 : i64} : tensor<4xf32>
    %c = graph.Relu %a {dist.stage = #dist.stage<0>} : tensor<4xf32>
    return %c, %b : tensor<4xf32>, tensor<4xf32>
  }
}
