// RUN: strait-opt %s | strait-opt | FileCheck %s

// Ops print and parse back unchanged, attributes included.

// CHECK-LABEL: func @ops
func.func @ops(%x: tensor<2x3xf32>, %w: tensor<3x4xf32>, %ids: tensor<2x5xi64>,
               %e: tensor<10x3xf32>) -> (tensor<2x4xf32>, tensor<2x5x3xf32>, tensor<3x2xf32>) {
  // CHECK: %[[MM:.*]] = graph.MatMul %{{.*}}, %{{.*}} : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  %0 = graph.MatMul %x, %w : (tensor<2x3xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  // CHECK: graph.Relu %[[MM]] : tensor<2x4xf32>
  %1 = graph.Relu %0 : tensor<2x4xf32>
  // CHECK: graph.LeakyRelu %{{.*}} {alpha = 2.000000e-01 : f32} : tensor<2x4xf32>
  %2 = graph.LeakyRelu %1 {alpha = 0.2 : f32} : tensor<2x4xf32>
  // Attributes at their default value are elided.
  // CHECK: graph.Gather %{{.*}}, %{{.*}} : (tensor<10x3xf32>, tensor<2x5xi64>) -> tensor<2x5x3xf32>
  %3 = graph.Gather %e, %ids {axis = 0 : i64} : (tensor<10x3xf32>, tensor<2x5xi64>) -> tensor<2x5x3xf32>
  // CHECK: graph.Transpose %{{.*}} {perm = array<i64: 1, 0>}
  %4 = graph.Transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %2, %3, %4 : tensor<2x4xf32>, tensor<2x5x3xf32>, tensor<3x2xf32>
}

// CHECK-LABEL: func @enums
func.func @enums(%x: tensor<2x3xf32>, %s: tensor<4x10xf32>, %l: tensor<4xi64>) -> (tensor<2x5xf32>, tensor<f32>, tensor<2x3xf32>) {
  // CHECK: mode = #graph.pad_mode<reflect>
  %0 = graph.Pad %x {mode = #graph.pad_mode<reflect>, pads = array<i64: 0, 1, 0, 1>} : (tensor<2x3xf32>) -> tensor<2x5xf32>
  // CHECK: reduction = #graph.loss_reduction<sum>
  %1 = graph.SoftmaxCrossEntropyLoss %s, %l {reduction = #graph.loss_reduction<sum>} : (tensor<4x10xf32>, tensor<4xi64>) -> tensor<f32>
  // CHECK: approximate = #graph.gelu_approx<tanh>
  %2 = graph.Gelu %x {approximate = #graph.gelu_approx<tanh>} : tensor<2x3xf32>
  return %0, %1, %2 : tensor<2x5xf32>, tensor<f32>, tensor<2x3xf32>
}

// CHECK: graph.Variable @w : tensor<3x4xf32>
graph.Variable @w : tensor<3x4xf32>
// CHECK: graph.Variable @b : tensor<4xf32> = dense<1.000000e+00> : tensor<4xf32>
graph.Variable @b : tensor<4xf32> = dense<1.0> : tensor<4xf32>

// CHECK-LABEL: func @variables
func.func @variables(%x: tensor<2x3xf32>) -> tensor<2x4xf32> {
  // CHECK: graph.ReadVariable @w : tensor<3x4xf32>
  %w = graph.ReadVariable @w : tensor<3x4xf32>
  %b = graph.ReadVariable @b : tensor<4xf32>
  %0 = graph.Gemm %x, %w, %b : (tensor<2x3xf32>, tensor<3x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  return %0 : tensor<2x4xf32>
}

// CHECK-LABEL: func @multi_result
func.func @multi_result(%x: tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x4xf32>, tensor<4x2xi64>) {
  // CHECK: %{{.*}}:2 = graph.Split
  %a:2 = graph.Split %x {axis = 1 : i64, split = array<i64: 2, 4>} : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x4xf32>)
  // CHECK: graph.TopK
  %v, %i = graph.TopK %x {k = 2 : i64} : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xi64>)
  return %a#0, %a#1, %i : tensor<4x2xf32>, tensor<4x4xf32>, tensor<4x2xi64>
}

// FusedAttention with and without its bias; causal prints when set, dynamic
// Tq and D are inferred through.
// CHECK-LABEL: func @attention
func.func @attention(%q: tensor<2x4x?x8xf32>, %kt: tensor<2x4x8x6xf32>, %v: tensor<2x4x6x3xf32>,
                     %m: tensor<2x1x1x6xf32>) -> (tensor<2x4x?x3xf32>, tensor<2x4x?xf32>) {
  // CHECK: %[[Y:.*]], %[[LSE:.*]] = graph.FusedAttention %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f32} : (tensor<2x4x?x8xf32>, tensor<2x4x8x6xf32>, tensor<2x4x6x3xf32>, tensor<2x1x1x6xf32>) -> (tensor<2x4x?x3xf32>, tensor<2x4x?xf32>)
  %y, %lse = graph.FusedAttention %q, %kt, %v, %m {scale = 0.125 : f32} : (tensor<2x4x?x8xf32>, tensor<2x4x8x6xf32>, tensor<2x4x6x3xf32>, tensor<2x1x1x6xf32>) -> (tensor<2x4x?x3xf32>, tensor<2x4x?xf32>)
  // CHECK: graph.FusedAttention %{{.*}}, %{{.*}}, %{{.*}} {causal = 1 : i64, scale = 1.000000e+00 : f32} : (tensor<2x4x?x8xf32>, tensor<2x4x8x6xf32>, tensor<2x4x6x3xf32>) -> (tensor<2x4x?x3xf32>, tensor<2x4x?xf32>)
  %c:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32, causal = 1 : i64} : (tensor<2x4x?x8xf32>, tensor<2x4x8x6xf32>, tensor<2x4x6x3xf32>) -> (tensor<2x4x?x3xf32>, tensor<2x4x?xf32>)
  return %y, %lse : tensor<2x4x?x3xf32>, tensor<2x4x?xf32>
}

// The routed expert products: both layouts, a dynamic row count inferred
// through, and the weight gradient in W's layout.
// CHECK-LABEL: func @grouped_matmul
func.func @grouped_matmul(%x: tensor<?x7xf32>, %w: tensor<3x4x7xf32>, %wt: tensor<3x7x4xbf16>,
                          %xb: tensor<6x7xbf16>, %i: tensor<?xi64>, %j: tensor<6xi32>,
                          %dy: tensor<6x4xbf16>) -> (tensor<?x4xf32>, tensor<6x4xbf16>, tensor<3x7x4xbf16>) {
  // CHECK: graph.GroupedMatMul %{{.*}}, %{{.*}}, %{{.*}} {transB = 1 : i64} : (tensor<?x7xf32>, tensor<3x4x7xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  %y = graph.GroupedMatMul %x, %w, %i {transB = 1 : i64} : (tensor<?x7xf32>, tensor<3x4x7xf32>, tensor<?xi64>) -> tensor<?x4xf32>
  // CHECK: graph.GroupedMatMul %{{.*}}, %{{.*}}, %{{.*}} {transB = 0 : i64} : (tensor<6x7xbf16>, tensor<3x7x4xbf16>, tensor<6xi32>) -> tensor<6x4xbf16>
  %z = graph.GroupedMatMul %xb, %wt, %j {transB = 0 : i64} : (tensor<6x7xbf16>, tensor<3x7x4xbf16>, tensor<6xi32>) -> tensor<6x4xbf16>
  // CHECK: graph.GroupedMatMulGradWeight %{{.*}}, %{{.*}}, %{{.*}} {num_experts = 3 : i64, transB = 0 : i64} : (tensor<6x7xbf16>, tensor<6x4xbf16>, tensor<6xi32>) -> tensor<3x7x4xbf16>
  %dw = graph.GroupedMatMulGradWeight %xb, %dy, %j {num_experts = 3 : i64, transB = 0 : i64} : (tensor<6x7xbf16>, tensor<6x4xbf16>, tensor<6xi32>) -> tensor<3x7x4xbf16>
  return %y, %z, %dw : tensor<?x4xf32>, tensor<6x4xbf16>, tensor<3x7x4xbf16>
}
