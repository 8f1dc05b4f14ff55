// RUN: strait-opt %s --graph-build-training-step | FileCheck %s

// Convolution and pooling: ConvGradInput/ConvGradWeight carry the forward
// shapes, the bias gradient sums dY over N, H, W; MaxPoolGrad takes the pooled
// input; AveragePoolGrad and GlobalAveragePool spread dY. The input of the
// first convolution is not trainable: its ConvGradInput is never built (or is
// erased), only one for the second convolution remains.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x3x8x8xf32> {graph.name = "pixels"}
// CHECK-SAME: tensor<2xi64> {graph.name = "labels"}
// CHECK: %[[C1:.*]] = graph.Conv %[[X]], {{.*}}graph.op_id = 2
// CHECK: %[[R1:.*]] = graph.Relu %[[C1]]
// CHECK: %[[P1:.*]] = graph.MaxPool %[[R1]]
// CHECK: %[[W2:.*]] = graph.ReadVariable @c2.weight
// CHECK: graph.Conv %[[P1]], %[[W2]] {{.*}}graph.op_id = 6
// CHECK: %[[GAP:.*]] = graph.Expand %{{.*}} {graph.grad_of = 8 : i64, shape = array<i64: 2, 4, 2, 2>}
// CHECK: %[[QUARTER:.*]] = graph.Constant dense<2.500000e-01> : tensor<f32> {graph.grad_of = 8 : i64}
// CHECK: %[[DA:.*]] = graph.Mul %[[GAP]], %[[QUARTER]]
// CHECK: %[[DC2:.*]] = graph.AveragePoolGrad %[[DA]] {{{.*}}graph.grad_of = 7 : i64, input_shape = array<i64: 2, 4, 4, 4>, kernel_shape = array<i64: 2, 2>
// CHECK: %[[DP1:.*]] = graph.ConvGradInput %[[DC2]], %[[W2]] {{{.*}}graph.grad_of = 6 : i64, input_shape = array<i64: 2, 4, 4, 4>
// CHECK: %[[DW2:.*]] = graph.ConvGradWeight %[[DC2]], %[[P1]] {{{.*}}graph.grad_of = 6 : i64, {{.*}}weight_shape = array<i64: 4, 4, 3, 3>}
// CHECK: %[[DR1:.*]] = graph.MaxPoolGrad %[[DP1]], %[[R1]] {{{.*}}graph.grad_of = 4 : i64
// CHECK: %[[DC1:.*]] = graph.Where %{{.*}}, %[[DR1]], %{{.*}} {graph.grad_of = 3 : i64}
// CHECK: %[[DW1:.*]] = graph.ConvGradWeight %[[DC1]], %[[X]] {{{.*}}graph.grad_of = 2 : i64, {{.*}}weight_shape = array<i64: 4, 3, 3, 3>}
// CHECK: %[[DB1:.*]] = graph.ReduceSum %[[DC1]] {axes = array<i64: 0, 2, 3>, graph.grad_of = 2 : i64, keepdims = 0 : i64} : (tensor<2x4x8x8xf32>) -> tensor<4xf32>
// CHECK: graph.AccumulateGrad %[[DW1]] for @c1.weight
// CHECK: graph.AccumulateGrad %[[DB1]] for @c1.bias
// CHECK: graph.AccumulateGrad %[[DW2]] for @c2.weight
// CHECK-NOT: graph.ConvGradInput
// CHECK: return
module {
  graph.Variable @c1.weight : tensor<4x3x3x3xf32> = dense<0.1> : tensor<4x3x3x3xf32>
  graph.Variable @c1.bias : tensor<4xf32> = dense<0.0> : tensor<4xf32>
  graph.Variable @c2.weight : tensor<4x4x3x3xf32> = dense<0.1> : tensor<4x4x3x3xf32>
  graph.Variable @fc.weight : tensor<5x4xf32> = dense<0.1> : tensor<5x4xf32>
  func.func @main(%x: tensor<2x3x8x8xf32> {graph.name = "pixels"}) -> (tensor<2x5xf32> {graph.name = "logits"}) {
    %w1 = graph.ReadVariable @c1.weight : tensor<4x3x3x3xf32>
    %b1 = graph.ReadVariable @c1.bias : tensor<4xf32>
    %c1 = graph.Conv %x, %w1, %b1 {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x3x8x8xf32>, tensor<4x3x3x3xf32>, tensor<4xf32>) -> tensor<2x4x8x8xf32>
    %r1 = graph.Relu %c1 : tensor<2x4x8x8xf32>
    %p1 = graph.MaxPool %r1 {ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x8x8xf32>) -> tensor<2x4x4x4xf32>
    %w2 = graph.ReadVariable @c2.weight : tensor<4x4x3x3xf32>
    %c2 = graph.Conv %p1, %w2 {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<2x4x4x4xf32>, tensor<4x4x3x3xf32>) -> tensor<2x4x4x4xf32>
    %a = graph.AveragePool %c2 {ceil_mode = 0 : i64, count_include_pad = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<2x4x4x4xf32>) -> tensor<2x4x2x2xf32>
    %g = graph.GlobalAveragePool %a : (tensor<2x4x2x2xf32>) -> tensor<2x4x1x1xf32>
    %f = graph.Flatten %g {axis = 1 : i64} : (tensor<2x4x1x1xf32>) -> tensor<2x4xf32>
    %fw = graph.ReadVariable @fc.weight : tensor<5x4xf32>
    %y = graph.Gemm %f, %fw {transB = 1 : i64} : (tensor<2x4xf32>, tensor<5x4xf32>) -> tensor<2x5xf32>
    return %y : tensor<2x5xf32>
  }
}
