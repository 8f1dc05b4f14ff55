// RUN: strait-opt %s --graph-autocast --graph-build-training-step='loss=mse optimizer=adamw' | FileCheck %s

// Autocast before the training step: the forward MatMul runs on bf16 casts
// of the input and of the f32 variable; the backward product is bf16 too,
// and the Cast rule carries the weight's gradient back to f32 before
// AccumulateGrad, so AdamW, the variable and its moments are all f32.
// CHECK: graph.Variable @w : tensor<4x3xf32>
// CHECK: graph.Variable @w.adam_m {{.*}} : tensor<4x3xf32>
// CHECK: graph.Variable @w.adam_v {{.*}} : tensor<4x3xf32>
// CHECK-LABEL: func.func @main
// CHECK: %[[W:.*]] = graph.ReadVariable @w {graph.op_id = 0 : i64} : tensor<4x3xf32>
// CHECK: %[[XC:.*]] = graph.Cast %{{.*}} {graph.op_id = 1 : i64, to = bf16}
// CHECK: %[[WC:.*]] = graph.Cast %[[W]] {graph.op_id = 2 : i64, to = bf16} : (tensor<4x3xf32>) -> tensor<4x3xbf16>
// CHECK: graph.MatMul %[[XC]], %[[WC]] {graph.op_id = 3 : i64} : (tensor<5x6x4xbf16>, tensor<4x3xbf16>) -> tensor<5x6x3xbf16>
// CHECK: graph.Cast %{{.*}} {graph.op_id = 4 : i64, to = f32}
// The gradient reaching the MatMul is cast to bf16 (rule of the Cast back).
// CHECK: %[[DY:.*]] = graph.Cast %{{.*}} {graph.grad_of = 4 : i64, to = bf16} : (tensor<5x6x3xf32>) -> tensor<5x6x3xbf16>
// CHECK: %[[DW:.*]] = graph.Gemm %{{.*}}, %{{.*}} {beta = 0.000000e+00 : f32, graph.grad_of = 3 : i64, transA = 1 : i64} : (tensor<30x4xbf16>, tensor<30x3xbf16>) -> tensor<4x3xbf16>
// The weight's gradient goes back to f32 (rule of the Cast to bf16).
// CHECK: %[[DWF:.*]] = graph.Cast %[[DW]] {graph.grad_of = 2 : i64, to = f32} : (tensor<4x3xbf16>) -> tensor<4x3xf32>
// CHECK: %[[G:.*]] = graph.AccumulateGrad %[[DWF]] for @w {{.*}} : tensor<4x3xf32>
// CHECK: graph.AdamW {{.*}}%[[G]]{{.*}} : (tensor<f32>, tensor<i64>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>) -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
// CHECK-NOT: bf16
module {
  graph.Variable @w : tensor<4x3xf32> = dense<0.5> : tensor<4x3xf32>
  func.func @main(%x: tensor<5x6x4xf32> {graph.name = "x"}) -> (tensor<5x6x3xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @w : tensor<4x3xf32>
    %y = graph.MatMul %x, %w : (tensor<5x6x4xf32>, tensor<4x3xf32>) -> tensor<5x6x3xf32>
    %t = graph.Tanh %y : tensor<5x6x3xf32>
    return %t : tensor<5x6x3xf32>
  }
}
