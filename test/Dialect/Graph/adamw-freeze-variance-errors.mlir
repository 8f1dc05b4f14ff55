// RUN: strait-opt %s -split-input-file -verify-diagnostics

// T6: AdamW's freeze_variance_after counts steps (0: never frozen).
func.func @negative(%lr: tensor<f32>, %s: tensor<i64>, %w: tensor<4xf32>) {
  // expected-error@+1 {{(T6) freeze_variance_after must be >= 0 (0: never), got -2}}
  %p:3 = graph.AdamW %lr, %s, %w, %w, %w, %w {freeze_variance_after = -2 : i64} : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// -----

// CHECK-free round trip of a valid one.
func.func @frozen(%lr: tensor<f32>, %s: tensor<i64>, %w: tensor<4xf32>) {
  %p:3 = graph.AdamW %lr, %s, %w, %w, %w, %w {freeze_variance_after = 100 : i64} : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}
