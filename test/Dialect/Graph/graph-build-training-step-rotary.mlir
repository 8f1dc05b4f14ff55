// RUN: strait-opt %s --graph-build-training-step='loss=output' | FileCheck %s

// The gradient of FusedRotaryEmbedding is the same op with adjoint = 1 on
// the incoming gradient and the forward's tables. The tables come from
// @inv_freq alone (HF's rotary buffer, exported as an initializer): such a
// variable is frozen, not trained (no AccumulateGrad, no update), while @w
// trains.
// CHECK: graph.Variable @inv_freq {{.*}}frozen
// CHECK-LABEL: func.func @main
// CHECK: %[[Q:.*]] = graph.MatMul
// CHECK: %[[C:.*]] = graph.Cos
// CHECK: %[[S:.*]] = graph.Sin
// CHECK: %[[R:.*]] = graph.FusedRotaryEmbedding %[[Q]], %[[C]], %[[S]] {graph.op_id = [[ID:[0-9]+]] : i64}
// CHECK: graph.FusedRotaryEmbedding %{{.*}}, %[[C]], %[[S]] {adjoint = 1 : i64, graph.grad_of = [[ID]] : i64} : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NOT: AccumulateGrad %{{.*}} for @inv_freq
// CHECK: graph.AccumulateGrad %{{.*}} for @w
// CHECK-NOT: @inv_freq
// CHECK: return
module {
  graph.Variable @w : tensor<8x8xf32> = dense<0.1> : tensor<8x8xf32>
  graph.Variable @inv_freq : tensor<4xf32> = dense<[1.0, 0.5, 0.25, 0.125]> : tensor<4xf32>
  func.func @main(%x: tensor<2x4x8xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<8x8xf32>
    %f = graph.ReadVariable @inv_freq : tensor<4xf32>
    %ff = graph.Concat %f, %f {axis = 0 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<8xf32>
    %q = graph.MatMul %x, %w : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %c = graph.Cos %ff : tensor<8xf32>
    %s = graph.Sin %ff : tensor<8xf32>
    %r = graph.FusedRotaryEmbedding %q, %c, %s : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
    %t = graph.Tanh %r : tensor<2x4x8xf32>
    %l = graph.ReduceSum %t {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x4x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
