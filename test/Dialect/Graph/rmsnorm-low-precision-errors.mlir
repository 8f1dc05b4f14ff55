// RUN: strait-opt %s -split-input-file -verify-diagnostics

// RMSNormalization: a 16-bit Y needs an f32 X (a bf16 X gives a bf16 Y).
func.func @low_y_of_low_x(%x: tensor<2x3xbf16>, %s: tensor<3xbf16>) {
  // expected-error@+2 {{'graph.RMSNormalization' op inferred type(s) 'tensor<2x3xbf16>' are incompatible with return type(s) of operation 'tensor<2x3xf16>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = graph.RMSNormalization %x, %s : (tensor<2x3xbf16>, tensor<3xbf16>) -> tensor<2x3xf16>
  return
}

// -----

// ... only bf16 or f16 (an f64 Y is not a rounding of the f32 one) ...
func.func @f64_y(%x: tensor<2x3xf32>, %s: tensor<3xf32>) {
  // expected-error@+2 {{'graph.RMSNormalization' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<2x3xf64>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = graph.RMSNormalization %x, %s : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf64>
  return
}

// -----

// ... of X's shape.
func.func @low_y_shape(%x: tensor<2x3xf32>, %s: tensor<3xf32>) {
  // expected-error@+2 {{'graph.RMSNormalization' op inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x2xbf16>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = graph.RMSNormalization %x, %s : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<3x2xbf16>
  return
}

// -----

// RMSNormalizationGrad: a 16-bit dY needs an f32 X ...
func.func @grad_low_dy_of_low_x(%dy: tensor<2x3xbf16>, %x: tensor<2x3xf16>, %s: tensor<3xf16>) {
  // expected-error@+1 {{'graph.RMSNormalizationGrad' op dY type 'tensor<2x3xbf16>' differs from X's 'tensor<2x3xf16>' (a 16-bit dY needs an f32 X of its shape)}}
  %0:2 = graph.RMSNormalizationGrad %dy, %x, %s : (tensor<2x3xbf16>, tensor<2x3xf16>, tensor<3xf16>) -> (tensor<2x3xf16>, tensor<3xf16>)
  return
}

// -----

// ... of its shape.
func.func @grad_low_dy_shape(%dy: tensor<2x4xbf16>, %x: tensor<2x3xf32>, %s: tensor<3xf32>) {
  // expected-error@+1 {{'graph.RMSNormalizationGrad' op dY type 'tensor<2x4xbf16>' differs from X's 'tensor<2x3xf32>' (a 16-bit dY needs an f32 X of its shape)}}
  %0:2 = graph.RMSNormalizationGrad %dy, %x, %s : (tensor<2x4xbf16>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>)
  return
}
