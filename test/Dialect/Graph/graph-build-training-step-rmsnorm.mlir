// RUN: strait-opt %s --graph-fuse-rmsnorm --graph-build-training-step='loss=output' | FileCheck %s

// The decomposed RMSNorm becomes one RMSNormalization before autodiff, whose
// rule is one RMSNormalizationGrad: dX flows on to x's producer, dScale to
// the weight's AccumulateGrad.
// CHECK-LABEL: func.func @main
// CHECK: %[[W:.*]] = graph.ReadVariable @norm.weight
// CHECK: %[[X:.*]] = graph.Tanh
// CHECK: graph.RMSNormalization %[[X]], %[[W]] {{{.*}}graph.op_id = [[ID:[0-9]+]]
// CHECK-NOT: graph.Pow
// CHECK: %[[DX:.*]], %[[DS:.*]] = graph.RMSNormalizationGrad %{{.*}}, %[[X]], %[[W]] {axis = 1 : i64, graph.grad_of = [[ID]] : i64}
// CHECK: graph.AccumulateGrad %[[DS]] for @norm.weight
// CHECK: return
module {
  graph.Variable @norm.weight : tensor<8xf32> = dense<1.0> : tensor<8xf32>
  func.func @main(%in: tensor<2x8xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @norm.weight : tensor<8xf32>
    %x = graph.Tanh %in : tensor<2x8xf32>
    %two = graph.Constant dense<2.0> : tensor<f32>
    %eps = graph.Constant dense<1.0e-5> : tensor<f32>
    %p = graph.Pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
    %m = graph.ReduceMean %p {axes = array<i64: 1>} : (tensor<2x8xf32>) -> tensor<2x1xf32>
    %a = graph.Add %m, %eps : (tensor<2x1xf32>, tensor<f32>) -> tensor<2x1xf32>
    %s = graph.Sqrt %a : tensor<2x1xf32>
    %r = graph.Reciprocal %s : tensor<2x1xf32>
    %n = graph.Mul %x, %r : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
    %y = graph.Mul %w, %n : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
    %l = graph.ReduceSum %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
