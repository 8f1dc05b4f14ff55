// RUN: strait-opt %s -split-input-file --graph-fuse-loss-grad | FileCheck %s
// RUN: strait-opt %s -split-input-file --graph-fuse-loss-grad | strait-opt -split-input-file | FileCheck %s

// A training step's loss and gradient, as graph-build-training-step builds
// them: autodiff's seed constant (tagged graph.grad_of) comes after the
// loss. The pass puts one SoftmaxCrossEntropyLossWithGrad in the loss's
// place, with its graph.op_id and attributes, reading a copy of the seed
// made in front of it without the backward tag (so that the exporter runs
// it in the forward); the loss, the gradient and the seed are gone, and the
// backward reads dScores.
// CHECK-LABEL: func.func @step
// CHECK-SAME: (%[[S:.*]]: tensor<6x10xf32>, %[[Y:.*]]: tensor<6xi64>, %[[W:.*]]: tensor<10x4xf32>)
// CHECK-NEXT: %[[ONE:.*]] = graph.Constant dense<1.000000e+00> : tensor<f32>{{$}}
// CHECK-NEXT: %[[L:.*]], %[[D:.*]] = graph.SoftmaxCrossEntropyLossWithGrad %[[ONE]], %[[S]], %[[Y]] {graph.op_id = 7 : i64, ignore_index = -100 : i64} : (tensor<f32>, tensor<6x10xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>)
// CHECK-NEXT: %[[G:.*]] = graph.Gemm %[[D]], %[[W]] {graph.grad_of = 4 : i64}
// CHECK-NEXT: return %[[L]], %[[G]]
// CHECK-NOT: graph.SoftmaxCrossEntropyLoss
func.func @step(%s: tensor<6x10xf32>, %y: tensor<6xi64>, %w: tensor<10x4xf32>) -> (tensor<f32>, tensor<6x4xf32>) {
  %l = graph.SoftmaxCrossEntropyLoss %s, %y {graph.op_id = 7 : i64, ignore_index = -100 : i64} : (tensor<6x10xf32>, tensor<6xi64>) -> tensor<f32>
  %one = graph.Constant dense<1.0> : tensor<f32> {graph.grad_of = 7 : i64}
  %d = graph.SoftmaxCrossEntropyLossGrad %one, %s, %y {graph.grad_of = 7 : i64, ignore_index = -100 : i64} : (tensor<f32>, tensor<6x10xf32>, tensor<6xi64>) -> tensor<6x10xf32>
  %g = graph.Gemm %d, %w {graph.grad_of = 4 : i64} : (tensor<6x10xf32>, tensor<10x4xf32>) -> tensor<6x4xf32>
  return %l, %g : tensor<f32>, tensor<6x4xf32>
}

// -----

// bf16 scores (after graph-cast-motion: an f32 loss, bf16 dScores), class
// weights, reduction sum, and a dLoss that is an argument: fused, reading
// the argument.
// CHECK-LABEL: func.func @bf16_weights_sum
// CHECK-SAME: (%[[S:.*]]: tensor<4x5xbf16>, %[[Y:.*]]: tensor<4xi32>, %[[W:.*]]: tensor<5xf32>, %[[DL:.*]]: tensor<f32>)
// CHECK-NEXT: %[[L:.*]], %[[D:.*]] = graph.SoftmaxCrossEntropyLossWithGrad %[[DL]], %[[S]], %[[Y]], %[[W]] {reduction = #graph.loss_reduction<sum>} : (tensor<f32>, tensor<4x5xbf16>, tensor<4xi32>, tensor<5xf32>) -> (tensor<f32>, tensor<4x5xbf16>)
// CHECK-NEXT: return %[[L]], %[[D]]
func.func @bf16_weights_sum(%s: tensor<4x5xbf16>, %y: tensor<4xi32>, %w: tensor<5xf32>, %dl: tensor<f32>) -> (tensor<f32>, tensor<4x5xbf16>) {
  %l = graph.SoftmaxCrossEntropyLoss %s, %y, %w {reduction = #graph.loss_reduction<sum>} : (tensor<4x5xbf16>, tensor<4xi32>, tensor<5xf32>) -> tensor<f32>
  %d = graph.SoftmaxCrossEntropyLossGrad %dl, %s, %y, %w {reduction = #graph.loss_reduction<sum>} : (tensor<f32>, tensor<4x5xbf16>, tensor<4xi32>, tensor<5xf32>) -> tensor<4x5xbf16>
  return %l, %d : tensor<f32>, tensor<4x5xbf16>
}

// -----

// Reduction none over [N, C, D] scores: the loss and dLoss have the labels'
// shape; a forward constant before the loss is read as it is.
// CHECK-LABEL: func.func @none_3d
// CHECK-NEXT: %[[DL:.*]] = graph.Constant dense<5.000000e-01> : tensor<2x3xf32>
// CHECK-NEXT: %{{.*}}, %{{.*}} = graph.SoftmaxCrossEntropyLossWithGrad %[[DL]], %arg0, %arg1 {reduction = #graph.loss_reduction<none>} : (tensor<2x3xf32>, tensor<2x4x3xf32>, tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x4x3xf32>)
// CHECK-NOT: graph.Constant
func.func @none_3d(%s: tensor<2x4x3xf32>, %y: tensor<2x3xi64>) -> (tensor<2x3xf32>, tensor<2x4x3xf32>) {
  %dl = graph.Constant dense<0.5> : tensor<2x3xf32>
  %l = graph.SoftmaxCrossEntropyLoss %s, %y {reduction = #graph.loss_reduction<none>} : (tensor<2x4x3xf32>, tensor<2x3xi64>) -> tensor<2x3xf32>
  %d = graph.SoftmaxCrossEntropyLossGrad %dl, %s, %y {reduction = #graph.loss_reduction<none>} : (tensor<2x3xf32>, tensor<2x4x3xf32>, tensor<2x3xi64>) -> tensor<2x4x3xf32>
  return %l, %d : tensor<2x3xf32>, tensor<2x4x3xf32>
}

// -----

// Not the loss's gradient: another ignore_index, other labels, other
// weights, another reduction. Nothing changes.
// CHECK-LABEL: func.func @mismatched
// CHECK-NOT: SoftmaxCrossEntropyLossWithGrad
// CHECK-COUNT-4: graph.SoftmaxCrossEntropyLossGrad
func.func @mismatched(%s: tensor<4x5xf32>, %y: tensor<4xi64>, %y2: tensor<4xi64>, %w: tensor<5xf32>, %w2: tensor<5xf32>) -> (tensor<f32>, tensor<4x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>) {
  %one = graph.Constant dense<1.0> : tensor<f32>
  %l = graph.SoftmaxCrossEntropyLoss %s, %y, %w {ignore_index = 1 : i64} : (tensor<4x5xf32>, tensor<4xi64>, tensor<5xf32>) -> tensor<f32>
  %d1 = graph.SoftmaxCrossEntropyLossGrad %one, %s, %y, %w {ignore_index = 2 : i64} : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>, tensor<5xf32>) -> tensor<4x5xf32>
  %d2 = graph.SoftmaxCrossEntropyLossGrad %one, %s, %y2, %w {ignore_index = 1 : i64} : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>, tensor<5xf32>) -> tensor<4x5xf32>
  %d3 = graph.SoftmaxCrossEntropyLossGrad %one, %s, %y, %w2 {ignore_index = 1 : i64} : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>, tensor<5xf32>) -> tensor<4x5xf32>
  %d4 = graph.SoftmaxCrossEntropyLossGrad %one, %s, %y, %w {ignore_index = 1 : i64, reduction = #graph.loss_reduction<sum>} : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>, tensor<5xf32>) -> tensor<4x5xf32>
  return %l, %d1, %d2, %d3, %d4 : tensor<f32>, tensor<4x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>, tensor<4x5xf32>
}

// -----

// A dLoss the backward computes (a scaled seed, tagged graph.grad_of) is
// not known when the loss runs, nor is one computed from the loss itself:
// both pairs stay apart.
// CHECK-LABEL: func.func @dloss_after_loss
// CHECK-NOT: SoftmaxCrossEntropyLossWithGrad
// CHECK: graph.SoftmaxCrossEntropyLoss %
// CHECK: graph.SoftmaxCrossEntropyLossGrad
// CHECK: graph.SoftmaxCrossEntropyLoss %
// CHECK: graph.SoftmaxCrossEntropyLossGrad
func.func @dloss_after_loss(%s: tensor<4x5xf32>, %y: tensor<4xi64>, %k: tensor<f32>) -> (tensor<f32>, tensor<4x5xf32>, tensor<f32>, tensor<4x5xf32>) {
  %l = graph.SoftmaxCrossEntropyLoss %s, %y {graph.op_id = 3 : i64} : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
  %one = graph.Constant dense<1.0> : tensor<f32> {graph.grad_of = 3 : i64}
  %dl = graph.Mul %one, %k {graph.grad_of = 3 : i64} : (tensor<f32>, tensor<f32>) -> tensor<f32>
  %d = graph.SoftmaxCrossEntropyLossGrad %dl, %s, %y {graph.grad_of = 3 : i64} : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  %l2 = graph.SoftmaxCrossEntropyLoss %s, %y {reduction = #graph.loss_reduction<sum>} : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
  %d2 = graph.SoftmaxCrossEntropyLossGrad %l2, %s, %y {reduction = #graph.loss_reduction<sum>} : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  return %l, %d, %l2, %d2 : tensor<f32>, tensor<4x5xf32>, tensor<f32>, tensor<4x5xf32>
}

// -----

// Two gradients of one loss (two seeds): the first fuses, the second reads
// the scores as before.
// CHECK-LABEL: func.func @two_grads
// CHECK: %[[L:.*]], %[[D:.*]] = graph.SoftmaxCrossEntropyLossWithGrad
// CHECK: %[[D2:.*]] = graph.SoftmaxCrossEntropyLossGrad
// CHECK: return %[[L]], %[[D]], %[[D2]]
func.func @two_grads(%s: tensor<4x5xf32>, %y: tensor<4xi64>) -> (tensor<f32>, tensor<4x5xf32>, tensor<4x5xf32>) {
  %l = graph.SoftmaxCrossEntropyLoss %s, %y : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
  %one = graph.Constant dense<1.0> : tensor<f32>
  %two = graph.Constant dense<2.0> : tensor<f32>
  %d = graph.SoftmaxCrossEntropyLossGrad %one, %s, %y : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  %d2 = graph.SoftmaxCrossEntropyLossGrad %two, %s, %y : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  return %l, %d, %d2 : tensor<f32>, tensor<4x5xf32>, tensor<4x5xf32>
}
