// RUN: strait-opt %s -split-input-file --graph-build-training-step='loss=mse step-outputs=all' | FileCheck %s

// MatMul of a batched input with a 2-D weight: dW is one Gemm over the
// flattened input with transA (no batched product summed afterwards, no
// Transpose); Gemm with transB and alpha gets one
// Gemm per operand (no Transpose), the bias ReduceToShape. MSE adds a target
// argument, lr and step follow; the loss is a new result.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<5x6x4xf32> {graph.name = "x"}
// CHECK-SAME: %[[T:[a-z0-9]+]]: tensor<5x6x2xf32> {graph.name = "labels"}
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {graph.name = "lr"}
// CHECK-SAME: %[[STEP:[a-z0-9]+]]: tensor<i64> {graph.name = "step"}
// CHECK-SAME: -> (tensor<5x6x2xf32> {graph.name = "y"}, tensor<f32> {graph.name = "loss"})
// CHECK: %[[W:.*]] = graph.ReadVariable @w {graph.op_id = 0 : i64}
// CHECK: graph.MatMul %[[X]], %[[W]] {graph.op_id = 1 : i64}
// CHECK: %[[F:.*]] = graph.Reshape {{.*}}graph.op_id = 2
// CHECK: %[[FW:.*]] = graph.ReadVariable @fc.weight
// CHECK: graph.Gemm %[[F]], %[[FW]], %{{.*}} {alpha = 2.000000e+00 : f32, graph.op_id = 5 : i64, transB = 1 : i64}
// CHECK: %[[L:.*]] = graph.ReduceMean {{.*}}graph.op_id = 9
// CHECK: %[[DY:.*]] = graph.Reshape {{.*}}graph.grad_of = 6
// CHECK: graph.Gemm %[[DY]], %[[FW]] {alpha = 2.000000e+00 : f32, beta = 0.000000e+00 : f32, graph.grad_of = 5 : i64} : (tensor<30x2xf32>, tensor<2x3xf32>) -> tensor<30x3xf32>
// CHECK: %[[DFW:.*]] = graph.Gemm %[[DY]], %[[F]] {alpha = 2.000000e+00 : f32, beta = 0.000000e+00 : f32, graph.grad_of = 5 : i64, transA = 1 : i64} : (tensor<30x2xf32>, tensor<30x3xf32>) -> tensor<2x3xf32>
// CHECK: %[[DFB:.*]] = graph.ReduceToShape %[[DY]] {graph.grad_of = 5 : i64, shape = array<i64: 2>}
// CHECK: %[[X2:.*]] = graph.Reshape %[[X]] {graph.grad_of = 1 : i64, shape = array<i64: 30, 4>}
// CHECK-NOT: graph.Transpose
// CHECK: %[[DW:.*]] = graph.Gemm %[[X2]], %{{.*}} {beta = 0.000000e+00 : f32, graph.grad_of = 1 : i64, transA = 1 : i64} : (tensor<30x4xf32>, tensor<30x3xf32>) -> tensor<4x3xf32>
// CHECK: %[[GW:.*]] = graph.AccumulateGrad %[[DW]] for @w {micro_batches = 1 : i64}
// CHECK: graph.AccumulateGrad %[[DFW]] for @fc.weight
// CHECK: graph.AccumulateGrad %[[DFB]] for @fc.bias
// CHECK: %[[P:.*]] = graph.ReadVariable @w :
// CHECK: %[[M:.*]] = graph.ReadVariable @w.adam_m
// CHECK: %[[V:.*]] = graph.ReadVariable @w.adam_v
// CHECK: %[[NP:.*]], %[[NM:.*]], %[[NV:.*]] = graph.AdamW %[[LR]], %[[STEP]], %[[P]], %[[GW]], %[[M]], %[[V]]
// CHECK: graph.AssignVariable @w = %[[NP]]
// CHECK: graph.AssignVariable @w.adam_m = %[[NM]]
// CHECK: graph.AssignVariable @w.adam_v = %[[NV]]
// CHECK: return %{{.*}}, %[[L]]
module {
  graph.Variable @w : tensor<4x3xf32> = dense<0.5> : tensor<4x3xf32>
  graph.Variable @fc.weight : tensor<2x3xf32> = dense<0.25> : tensor<2x3xf32>
  graph.Variable @fc.bias : tensor<2xf32> = dense<0.0> : tensor<2xf32>
  func.func @main(%x: tensor<5x6x4xf32> {graph.name = "x"}) -> (tensor<5x6x2xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @w : tensor<4x3xf32>
    %h = graph.MatMul %x, %w : (tensor<5x6x4xf32>, tensor<4x3xf32>) -> tensor<5x6x3xf32>
    %f = graph.Reshape %h {shape = array<i64: 30, 3>} : (tensor<5x6x3xf32>) -> tensor<30x3xf32>
    %fw = graph.ReadVariable @fc.weight : tensor<2x3xf32>
    %fb = graph.ReadVariable @fc.bias : tensor<2xf32>
    %y = graph.Gemm %f, %fw, %fb {alpha = 2.0 : f32, transB = 1 : i64} : (tensor<30x3xf32>, tensor<2x3xf32>, tensor<2xf32>) -> tensor<30x2xf32>
    %r = graph.Reshape %y {shape = array<i64: 5, 6, 2>} : (tensor<30x2xf32>) -> tensor<5x6x2xf32>
    return %r : tensor<5x6x2xf32>
  }
}
