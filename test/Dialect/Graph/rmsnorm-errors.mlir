// RUN: strait-opt %s -split-input-file -verify-diagnostics

// RMSNormalization's scale must broadcast with the normalized dims ...
func.func @scale_does_not_broadcast(%x: tensor<2x8xf32>, %s: tensor<3xf32>) {
  // expected-error@+2 {{operand shapes [8] [3] do not broadcast: dimension 0 is 8 and 3}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.RMSNormalization %x, %s : (tensor<2x8xf32>, tensor<3xf32>) -> tensor<2x8xf32>
  return
}

// -----

// ... and not widen them (a scale over the rows too is not a scale).
func.func @scale_widens(%x: tensor<2x8xf32>, %s: tensor<2x8xf32>) {
  // expected-error@+2 {{RMSNormalization: parameter 'tensor<2x8xf32>' does not broadcast to the normalized dims}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.RMSNormalization %x, %s {axis = 1 : i64} : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// The axis must be within X's rank.
func.func @axis_out_of_range(%x: tensor<2x8xf32>, %s: tensor<8xf32>) {
  // expected-error@+2 {{axis 2 is out of range for rank 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.RMSNormalization %x, %s {axis = 2 : i64} : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return
}

// -----

// RMSNormalizationGrad's dY must have X's type.
func.func @grad_dy_type(%dy: tensor<2x4xf32>, %x: tensor<2x8xf32>, %s: tensor<8xf32>) {
  // expected-error@+1 {{'graph.RMSNormalizationGrad' op dY type 'tensor<2x4xf32>' differs from X's 'tensor<2x8xf32>'}}
  %0:2 = graph.RMSNormalizationGrad %dy, %x, %s : (tensor<2x4xf32>, tensor<2x8xf32>, tensor<8xf32>) -> (tensor<2x4xf32>, tensor<8xf32>)
  return
}
