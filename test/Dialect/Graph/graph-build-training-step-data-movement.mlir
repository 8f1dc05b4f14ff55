// RUN: strait-opt %s --graph-build-training-step='loss=output' | FileCheck %s

// Data movement: Unsqueeze reshapes back, Concat's gradient is a Split and
// Split's a Concat (pieces swapped here), Transpose inverts its permutation,
// the broadcast Add sums the positional gradient back to [3,4], Slice writes
// into zeros of the variable's shape (SliceGrad), Gather scatter-adds into
// the embedding (GatherGrad) and its i64 indices get no gradient.

// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[IDS:[a-z0-9]+]]: tensor<2x3xi64>
// CHECK: graph.Transpose {{.*}}perm = array<i64: 2, 0, 1>
// CHECK: %[[DU:.*]] = graph.Reshape %{{.*}} {allowzero = 1 : i64, graph.grad_of = 8 : i64, shape = array<i64: 4, 2, 3>}
// CHECK: %[[SP:.*]]:2 = graph.Split %[[DU]] {graph.grad_of = 7 : i64, split = array<i64: 3, 1>}
// CHECK: %[[CC:.*]] = graph.Concat %[[SP]]#1, %[[SP]]#0 {axis = 0 : i64, graph.grad_of = 6 : i64}
// CHECK: %[[DT:.*]] = graph.Transpose %[[CC]] {graph.grad_of = 5 : i64, perm = array<i64: 1, 2, 0>} : (tensor<4x2x3xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[DP:.*]] = graph.ReduceToShape %[[DT]] {graph.grad_of = 4 : i64, shape = array<i64: 3, 4>}
// CHECK: %[[DPOS:.*]] = graph.SliceGrad %[[DP]] {axes = array<i64: 0>, ends = array<i64: 3>, graph.grad_of = 3 : i64, input_shape = array<i64: 8, 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<8x4xf32>
// CHECK: %[[DEMB:.*]] = graph.GatherGrad %[[DT]], %[[IDS]] {data_shape = array<i64: 6, 4>, graph.grad_of = 1 : i64} : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<6x4xf32>
// CHECK: graph.AccumulateGrad %[[DEMB]] for @emb
// CHECK: graph.AccumulateGrad %[[DPOS]] for @pos
module {
  graph.Variable @emb : tensor<6x4xf32> = dense<0.5> : tensor<6x4xf32>
  graph.Variable @pos : tensor<8x4xf32> = dense<0.25> : tensor<8x4xf32>
  func.func @main(%ids: tensor<2x3xi64> {graph.name = "input_ids"}) -> (tensor<f32> {graph.name = "loss"}) {
    %emb = graph.ReadVariable @emb : tensor<6x4xf32>
    %e = graph.Gather %emb, %ids {axis = 0 : i64} : (tensor<6x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
    %pos = graph.ReadVariable @pos : tensor<8x4xf32>
    %p = graph.Slice %pos {axes = array<i64: 0>, ends = array<i64: 3>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<8x4xf32>) -> tensor<3x4xf32>
    %a = graph.Add %e, %p : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> tensor<2x3x4xf32>
    %t = graph.Transpose %a {perm = array<i64: 2, 0, 1>} : (tensor<2x3x4xf32>) -> tensor<4x2x3xf32>
    %s:2 = graph.Split %t {axis = 0 : i64, split = array<i64: 1, 3>} : (tensor<4x2x3xf32>) -> (tensor<1x2x3xf32>, tensor<3x2x3xf32>)
    %c = graph.Concat %s#1, %s#0 {axis = 0 : i64} : (tensor<3x2x3xf32>, tensor<1x2x3xf32>) -> tensor<4x2x3xf32>
    %u = graph.Unsqueeze %c {axes = array<i64: 0>} : (tensor<4x2x3xf32>) -> tensor<1x4x2x3xf32>
    %sq = graph.Mul %u, %u : (tensor<1x4x2x3xf32>, tensor<1x4x2x3xf32>) -> tensor<1x4x2x3xf32>
    %l = graph.ReduceMean %sq {axes = array<i64>, keepdims = 0 : i64} : (tensor<1x4x2x3xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
