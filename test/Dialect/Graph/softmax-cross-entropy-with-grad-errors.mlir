// RUN: strait-opt %s -split-input-file -verify-diagnostics

// T8: dLoss has the loss's element type, f32 for bf16 scores.
func.func @dloss_type(%dl: tensor<bf16>, %s: tensor<4x10xbf16>, %y: tensor<4xi64>) {
  // expected-error@+1 {{(T8) dLoss 'tensor<bf16>' must have the loss's element type 'f32' (scores 'tensor<4x10xbf16>')}}
  %l, %d = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y : (tensor<bf16>, tensor<4x10xbf16>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xbf16>)
  return
}

// -----

// T8: with reduction none, dLoss has the labels' shape.
func.func @dloss_shape(%dl: tensor<f32>, %s: tensor<4x10xf32>, %y: tensor<4xi64>) {
  // expected-error@+1 {{(T8) dLoss 'tensor<f32>' must have the loss's shape 'tensor<4xf32>'}}
  %l, %d = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y {reduction = #graph.loss_reduction<none>} : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> (tensor<4xf32>, tensor<4x10xf32>)
  return
}

// -----

// T8: a reduced loss takes a dLoss of one element.
func.func @dloss_reduced(%dl: tensor<4xf32>, %s: tensor<4x10xf32>, %y: tensor<4xi64>) {
  // expected-error@+1 {{(T8) dLoss 'tensor<4xf32>' must have the loss's shape 'tensor<f32>'}}
  %l, %d = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y : (tensor<4xf32>, tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return
}

// -----

// T8: integer scores have no softmax.
func.func @int_scores(%dl: tensor<i32>, %s: tensor<4x10xi32>, %y: tensor<4xi64>) {
  // expected-error@+2 {{SoftmaxCrossEntropyLossWithGrad: scores must be floats, got 'i32'}}
  // expected-error@+1 {{failed to infer returned types}}
  %l, %d = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y : (tensor<i32>, tensor<4x10xi32>, tensor<4xi64>) -> (tensor<i32>, tensor<4x10xi32>)
  return
}

// -----

// T8: labels are integers.
func.func @float_labels(%dl: tensor<f32>, %s: tensor<4x10xf32>, %y: tensor<4xf32>) {
  // expected-error@+2 {{SoftmaxCrossEntropyLossWithGrad: labels must be integers, got 'f32'}}
  // expected-error@+1 {{failed to infer returned types}}
  %l, %d = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y : (tensor<f32>, tensor<4x10xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<4x10xf32>)
  return
}

// -----

// T8: scores N x C x D... and labels N x D... agree.
func.func @shapes(%dl: tensor<f32>, %s: tensor<4x10x3xf32>, %y: tensor<4x2xi64>) {
  // expected-error@+2 {{SoftmaxCrossEntropyLossWithGrad: scores 'tensor<4x10x3xf32>' and labels 'tensor<4x2xi64>' disagree in dimension 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %l, %d = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y : (tensor<f32>, tensor<4x10x3xf32>, tensor<4x2xi64>) -> (tensor<f32>, tensor<4x10x3xf32>)
  return
}

// -----

// dScores has the scores' type (bf16 scores: bf16 dScores).
func.func @dscores_type(%dl: tensor<f32>, %s: tensor<4x10xbf16>, %y: tensor<4xi64>) {
  // expected-error@+2 {{inferred type(s) 'tensor<f32>', 'tensor<4x10xbf16>' are incompatible with return type(s) of operation 'tensor<f32>', 'tensor<4x10xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %l, %d = graph.SoftmaxCrossEntropyLossWithGrad %dl, %s, %y : (tensor<f32>, tensor<4x10xbf16>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return
}
