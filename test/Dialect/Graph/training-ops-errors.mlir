// RUN: strait-opt %s -split-input-file -verify-diagnostics

// T1: the target shape must broadcast to the input's.
func.func @reduce_to_shape(%x: tensor<2x3xf32>) {
  // expected-error@+1 {{(T1) shape [4] does not broadcast to the input shape [2x3]}}
  %0 = graph.ReduceToShape %x {shape = array<i64: 4>} : (tensor<2x3xf32>) -> tensor<4xf32>
  return
}

// -----

// T2: an assignment must keep the variable's type.
graph.Variable @w : tensor<4xf32>
func.func @assign(%x: tensor<3xf32>) {
  // expected-error@+1 {{(T2) value type 'tensor<3xf32>' differs from the variable's 'tensor<4xf32>'}}
  graph.AssignVariable @w = %x : tensor<3xf32>
  return
}

// -----

// T3: dY must have the shape the convolution computes.
func.func @conv_grad(%dy: tensor<1x4x7x7xf32>, %w: tensor<4x3x3x3xf32>) {
  // expected-error@+1 {{(T3) dY 'tensor<1x4x7x7xf32>' should have shape [1x4x8x8]}}
  %0 = graph.ConvGradInput %dy, %w {dilations = array<i64: 1, 1>, group = 1 : i64, input_shape = array<i64: 1, 3, 8, 8>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x7x7xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x8x8xf32>
  return
}

// -----

// T4: GatherGrad's dY follows Gather's shape rule.
func.func @gather_grad(%dy: tensor<2x8x15xf32>, %ids: tensor<2x8xi64>) {
  // expected-error@+1 {{(T4) dY 'tensor<2x8x15xf32>' should have shape [2x8x16]}}
  %0 = graph.GatherGrad %dy, %ids {axis = 0 : i64, data_shape = array<i64: 100, 16>} : (tensor<2x8x15xf32>, tensor<2x8xi64>) -> tensor<100x16xf32>
  return
}

// -----

// T5: clipping needs a positive norm.
func.func @clip(%g: tensor<4xf32>) {
  // expected-error@+1 {{(T5) max_norm must be positive}}
  %n, %c = graph.ClipByGlobalNorm %g {max_norm = 0.0 : f32} : (tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
  return
}

// -----

// T6: the learning rate is an f32 scalar.
func.func @sgd(%lr: tensor<1xf32>, %w: tensor<4xf32>) {
  // expected-error@+1 {{(T6) lr must be tensor<f32>, got 'tensor<1xf32>'}}
  %p:2 = graph.SGD %lr, %w, %w, %w : (tensor<1xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// T6: AdamW's decay rates lie in [0, 1).
func.func @adamw(%lr: tensor<f32>, %s: tensor<i64>, %w: tensor<4xf32>) {
  // expected-error@+1 {{(T6) beta1 and beta2 must lie in [0, 1)}}
  %p:3 = graph.AdamW %lr, %s, %w, %w, %w, %w {beta1 = 1.0 : f32} : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// T7: ResizeGrad interpolates as nearest or linear Resize, over dY's rank.
func.func @resize_grad_cubic(%dy: tensor<2x4xf32>) {
  // expected-error@+1 {{(T7) mode must be nearest or linear}}
  %0 = graph.ResizeGrad %dy {input_shape = array<i64: 2, 2>, mode = #graph.resize_mode<cubic>} : (tensor<2x4xf32>) -> tensor<2x2xf32>
  return
}

// -----

func.func @resize_grad_rank(%dy: tensor<2x4xf32>) {
  // expected-error@+1 {{(T7) input_shape [2] should have dY's rank 2}}
  %0 = graph.ResizeGrad %dy {input_shape = array<i64: 2>} : (tensor<2x4xf32>) -> tensor<2xf32>
  return
}

// -----

// The gradient of bf16 scores takes the f32 loss's gradient.
func.func @sce_grad_dloss(%dl: tensor<bf16>, %s: tensor<4x10xbf16>, %l: tensor<4xi64>) {
  // expected-error@+1 {{dLoss 'tensor<bf16>' must have the loss's element type 'f32' (scores 'tensor<4x10xbf16>')}}
  %0 = graph.SoftmaxCrossEntropyLossGrad %dl, %s, %l : (tensor<bf16>, tensor<4x10xbf16>, tensor<4xi64>) -> tensor<4x10xbf16>
  return
}

// -----

func.func @sce_grad_int_scores(%dl: tensor<i32>, %s: tensor<4x10xi32>, %l: tensor<4xi64>) {
  // expected-error@+1 {{scores must be floats, got 'tensor<4x10xi32>'}}
  %0 = graph.SoftmaxCrossEntropyLossGrad %dl, %s, %l : (tensor<i32>, tensor<4x10xi32>, tensor<4xi64>) -> tensor<4x10xi32>
  return
}

// -----

// LayerNormalizationGrad: a 16-bit dY needs an f32 X of its shape.
func.func @layer_norm_grad_low_dy(%dy: tensor<2x3xbf16>, %x: tensor<2x3xf16>, %s: tensor<3xf16>) {
  // expected-error@+1 {{'graph.LayerNormalizationGrad' op dY type 'tensor<2x3xbf16>' differs from X's 'tensor<2x3xf16>' (a 16-bit dY needs an f32 X of its shape)}}
  %0:3 = graph.LayerNormalizationGrad %dy, %x, %s : (tensor<2x3xbf16>, tensor<2x3xf16>, tensor<3xf16>) -> (tensor<2x3xf16>, tensor<3xf16>, tensor<3xf16>)
  return
}

// -----

// AccumulateGrad: an f32 grad accumulates into f32 (no 16-bit total).
func.func @accumulate_narrowing(%g: tensor<4xf32>) {
  // expected-error@+1 {{'graph.AccumulateGrad' op total 'tensor<4xbf16>' must have grad's type 'tensor<4xf32>'}}
  %t = graph.AccumulateGrad %g for @w {micro_batches = 1 : i64} : tensor<4xf32> -> tensor<4xbf16>
  return
}

// -----

// AccumulateGrad: a 16-bit grad's f32 total keeps its shape.
func.func @accumulate_shape(%g: tensor<4xbf16>) {
  // expected-error@+1 {{'graph.AccumulateGrad' op total 'tensor<2x2xf32>' must have grad's type 'tensor<4xbf16>' or be its f32 counterpart}}
  %t = graph.AccumulateGrad %g for @w {micro_batches = 1 : i64} : tensor<4xbf16> -> tensor<2x2xf32>
  return
}

// -----

// LayerNormalization: a 16-bit Y needs an f32 X (a bf16 X gives bf16 Y).
func.func @layer_norm_low_x(%x: tensor<2x3xbf16>, %s: tensor<3xbf16>) {
  // expected-error@+2 {{'graph.LayerNormalization' op inferred type(s) 'tensor<2x3xbf16>' are incompatible with return type(s) of operation 'tensor<2x3xf16>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = graph.LayerNormalization %x, %s : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xf16>
  return
}
