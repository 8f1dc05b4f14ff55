// RUN: strait-opt %s -split-input-file --graph-build-training-step='optimizer=sgd momentum=0 micro-batches=4 clip-norm=1.0 step-outputs=all' | FileCheck %s

// Language-model cross-entropy: logits [2,3,10] and i64 labels [2,3] are
// flattened to [6,10] and [6]; the loss ignores label -100. Softmax's
// gradient uses its output; the embedding gets a scatter-add (GatherGrad) and
// the indices none. Gradients are averaged over 4 micro-batches, then
// clipped jointly, then SGD without momentum needs no state variable.

// CHECK-NOT: .momentum
// CHECK-LABEL: func.func @main
// CHECK-SAME: %[[IDS:[a-z0-9]+]]: tensor<2x3xi64> {graph.name = "input_ids"}
// CHECK-SAME: %[[LAB:[a-z0-9]+]]: tensor<2x3xi64> {graph.name = "labels"}
// CHECK-SAME: -> (tensor<2x3x10xf32> {graph.name = "logits"}, tensor<f32> {graph.name = "loss"})
// CHECK-SAME: graph.training = {loss = "cross-entropy", {{.*}}micro_batches = 4 : i64, {{.*}}optimizer = "sgd"
// CHECK: %[[P:.*]] = graph.Softmax {{.*}}graph.op_id = 2
// CHECK: %[[LOGITS:.*]] = graph.MatMul
// CHECK: %[[S:.*]] = graph.Reshape %[[LOGITS]] {graph.op_id = 5 : i64, shape = array<i64: 6, 10>}
// CHECK: %[[L:.*]] = graph.Reshape %[[LAB]] {graph.op_id = 6 : i64, shape = array<i64: 6>}
// CHECK: %[[LOSS:.*]] = graph.SoftmaxCrossEntropyLoss %[[S]], %[[L]] {graph.op_id = 7 : i64, ignore_index = -100 : i64} : (tensor<6x10xf32>, tensor<6xi64>) -> tensor<f32>
// CHECK: %[[ONE:.*]] = graph.Constant dense<1.000000e+00> : tensor<f32> {graph.grad_of = 7 : i64}
// CHECK: graph.SoftmaxCrossEntropyLossGrad %[[ONE]], %[[S]], %[[L]] {graph.grad_of = 7 : i64, ignore_index = -100 : i64}
// CHECK: %[[DP2:.*]] = graph.Gemm %{{.*}} {beta = 0.000000e+00 : f32, graph.grad_of = 4 : i64, transB = 1 : i64} : (tensor<6x10xf32>, tensor<4x10xf32>) -> tensor<6x4xf32>
// CHECK: %[[DP:.*]] = graph.Reshape %[[DP2]] {{.*}}graph.grad_of = 4 : i64{{.*}} -> tensor<2x3x4xf32>
// CHECK: %[[DE:.*]] = graph.SoftmaxGrad %[[DP]], %[[P]] {graph.grad_of = 2 : i64}
// CHECK: %[[DW:.*]] = graph.GatherGrad %[[DE]], %[[IDS]] {data_shape = array<i64: 10, 4>, graph.grad_of = 1 : i64}
// CHECK: %[[GW:.*]] = graph.AccumulateGrad %[[DW]] for @wte {micro_batches = 4 : i64}
// CHECK: %[[GH:.*]] = graph.AccumulateGrad %{{.*}} for @head {micro_batches = 4 : i64}
// CHECK: %{{.*}}, %[[C:.*]]:2 = graph.ClipByGlobalNorm %[[GW]], %[[GH]] {max_norm = 1.000000e+00 : f32}
// CHECK: graph.SGD %{{.*}}, %{{.*}}, %[[C]]#0, %{{.*}} : (tensor<f32>, tensor<10x4xf32>
// CHECK: graph.SGD %{{.*}}, %{{.*}}, %[[C]]#1, %{{.*}} : (tensor<f32>, tensor<4x10xf32>
// CHECK: return %[[LOGITS]], %[[LOSS]]
module {
  graph.Variable @wte : tensor<10x4xf32> = dense<0.5> : tensor<10x4xf32>
  graph.Variable @head : tensor<4x10xf32> = dense<0.5> : tensor<4x10xf32>
  func.func @main(%ids: tensor<2x3xi64> {graph.name = "input_ids"}) -> (tensor<2x3x10xf32> {graph.name = "logits"}) {
    %wte = graph.ReadVariable @wte : tensor<10x4xf32>
    %e = graph.Gather %wte, %ids {axis = 0 : i64} : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
    %p = graph.Softmax %e {axis = -1 : i64} : (tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
    %h = graph.ReadVariable @head : tensor<4x10xf32>
    %l = graph.MatMul %p, %h : (tensor<2x3x4xf32>, tensor<4x10xf32>) -> tensor<2x3x10xf32>
    return %l : tensor<2x3x10xf32>
  }
}

// -----

// Classifier cross-entropy: logits [4,5] against labels [4], no reshape.

// CHECK-LABEL: func.func @main
// CHECK-SAME: tensor<4xi64> {graph.name = "labels"}
// CHECK-NOT: graph.Reshape
// CHECK: graph.SoftmaxCrossEntropyLoss %{{.*}}, %{{.*}} {graph.op_id = {{[0-9]+}} : i64, ignore_index = -100 : i64} : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
// CHECK: graph.LogSoftmaxGrad
module {
  graph.Variable @w : tensor<4x5xf32> = dense<0.5> : tensor<4x5xf32>
  func.func @main(%x: tensor<4x5xf32> {graph.name = "x"}) -> (tensor<4x5xf32> {graph.name = "logits"}) {
    %w = graph.ReadVariable @w : tensor<4x5xf32>
    %a = graph.Mul %x, %w : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
    %l = graph.LogSoftmax %a {axis = 1 : i64} : (tensor<4x5xf32>) -> tensor<4x5xf32>
    return %l : tensor<4x5xf32>
  }
}
