// RUN: strait-opt %s --dist-split-stages | FileCheck %s

// One function per stage with its ops only; arguments are the inputs the
// stage uses, results the outputs it produces, both keeping graph.name;
// @main is gone.
module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["a"], ranks = [0]>, #dist.placement<stage = 1, devices = ["b"], ranks = [1]>]>} {
  graph.Variable @layers.0.w : tensor<4x4xf32>
  // CHECK-LABEL: func.func @stage0(%{{.*}}: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "h"}) attributes {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: graph.ReadVariable @layers.0.w
  // CHECK-NEXT: %[[H:.*]] = graph.MatMul
  // CHECK-NEXT: dist.send %[[H]] to stage 1 channel 0
  // CHECK-NEXT: return %[[H]]
  // CHECK: func.func @stage1(%[[Y:.*]]: tensor<2x4xf32> {graph.name = "y"}) -> (tensor<2x4xf32> {graph.name = "out"}) attributes {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[R:.*]] = dist.recv from stage 0 channel 0
  // CHECK-NEXT: %[[O:.*]] = graph.Add %[[R]], %[[Y]]
  // CHECK-NEXT: return %[[O]]
  // CHECK-NOT: func.func @main
  func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}, %y: tensor<2x4xf32> {graph.name = "y"})
      -> (tensor<2x4xf32> {graph.name = "h"}, tensor<2x4xf32> {graph.name = "out"}) {
    %w = graph.ReadVariable @layers.0.w {dist.stage = #dist.stage<0>} : tensor<4x4xf32>
    %h = graph.MatMul %x, %w {dist.stage = #dist.stage<0>} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    dist.send %h to stage 1 channel 0 {dist.stage = #dist.stage<0>} : tensor<2x4xf32>
    %r = dist.recv from stage 0 channel 0 {dist.stage = #dist.stage<1>} : tensor<2x4xf32>
    %o = graph.Add %r, %y {dist.stage = #dist.stage<1>} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %h, %o : tensor<2x4xf32>, tensor<2x4xf32>
  }
}
