// RUN: strait-opt %s -split-input-file -verify-diagnostics

// T9: UnscaleGradients' scale is an f32 scalar.
func.func @vector_scale(%s: tensor<2xf32>, %g: tensor<4xf32>) {
  // expected-error@+1 {{(T9) scale must be tensor<f32>, got 'tensor<2xf32>'}}
  %f, %u = graph.UnscaleGradients %s, %g : (tensor<2xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<4xf32>)
  return
}

// -----

// T9: the gradients are float tensors.
func.func @int_grad(%s: tensor<f32>, %g: tensor<4xi32>) {
  // expected-error@+1 {{(T9) gradients must be float tensors, got 'tensor<4xi32>'}}
  %f, %u = graph.UnscaleGradients %s, %g : (tensor<f32>, tensor<4xi32>) -> (tensor<f32>, tensor<4xi32>)
  return
}

// -----

// T9: the flag an optimizer reads is an f32 scalar.
func.func @adamw_flag(%lr: tensor<f32>, %s: tensor<i64>, %w: tensor<4xf32>, %flag: tensor<i1>) {
  // expected-error@+1 {{(T9) found_inf must be tensor<f32>, got 'tensor<i1>'}}
  %p:3 = graph.AdamW %lr, %s, %w, %w, %w, %w, %flag : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<i1>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

func.func @sgd_flag(%lr: tensor<f32>, %w: tensor<4xf32>, %flag: tensor<1xf32>) {
  // expected-error@+1 {{(T9) found_inf must be tensor<f32>, got 'tensor<1xf32>'}}
  %p:2 = graph.SGD %lr, %w, %w, %w, %flag : (tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<1xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// Valid ones round-trip: two gradients, and both optimizers with and without the flag.
func.func @valid(%s: tensor<f32>, %lr: tensor<f32>, %st: tensor<i64>, %a: tensor<4xf32>, %b: tensor<2x2xf32>) {
  %f, %u:2 = graph.UnscaleGradients %s, %a, %b : (tensor<f32>, tensor<4xf32>, tensor<2x2xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<2x2xf32>)
  %p:3 = graph.AdamW %lr, %st, %a, %u#0, %a, %a, %f : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<f32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %q:3 = graph.AdamW %lr, %st, %a, %a, %a, %a : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r:2 = graph.SGD %lr, %b, %u#1, %b, %f : (tensor<f32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<2x2xf32>, tensor<f32>) -> (tensor<2x2xf32>, tensor<2x2xf32>)
  return
}
