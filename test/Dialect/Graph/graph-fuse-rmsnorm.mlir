// RUN: strait-opt %s --graph-fuse-rmsnorm -split-input-file | FileCheck %s

// The LLaMA export's form (Reciprocal, weight on the left) becomes one op;
// the chain and the constants only it used are gone.
// CHECK-LABEL: func.func @llama
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NOT: graph.Constant
// CHECK: %[[Y:.*]] = graph.RMSNormalization %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
// CHECK-NOT: graph.Pow
// CHECK-NOT: graph.ReduceMean
// CHECK-NOT: graph.Sqrt
// CHECK-NOT: graph.Reciprocal
// CHECK-NOT: graph.Mul
// CHECK: return %[[Y]]
func.func @llama(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %two = graph.Constant dense<2.0> : tensor<f32>
  %eps = graph.Constant dense<1.0e-6> : tensor<f32>
  %p = graph.Pow %x, %two : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %m = graph.ReduceMean %p {axes = array<i64: 2>} : (tensor<2x3x8xf32>) -> tensor<2x3x1xf32>
  %a = graph.Add %m, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %s = graph.Sqrt %a : tensor<2x3x1xf32>
  %r = graph.Reciprocal %s : tensor<2x3x1xf32>
  %n = graph.Mul %x, %r : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %y = graph.Mul %w, %n : (tensor<8xf32>, tensor<2x3x8xf32>) -> tensor<2x3x8xf32>
  return %y : tensor<2x3x8xf32>
}

// -----

// Div(1, sqrt), operands of Add and Muls swapped, weight on the right; two
// trailing axes give axis 1.
// CHECK-LABEL: func.func @div_one_two_axes
// CHECK-SAME: (%[[X:.*]]: tensor<4x2x8xf32>, %[[W:.*]]: tensor<2x8xf32>)
// CHECK: %[[Y:.*]] = graph.RMSNormalization %[[X]], %[[W]] {axis = 1 : i64} : (tensor<4x2x8xf32>, tensor<2x8xf32>) -> tensor<4x2x8xf32>
// CHECK-NOT: graph.Div
// CHECK: return %[[Y]]
func.func @div_one_two_axes(%x: tensor<4x2x8xf32>, %w: tensor<2x8xf32>) -> tensor<4x2x8xf32> {
  %two = graph.Constant dense<2.0> : tensor<f32>
  %one = graph.Constant dense<1.0> : tensor<f32>
  %eps = graph.Constant dense<1.0e-5> : tensor<1xf32>
  %p = graph.Pow %x, %two : (tensor<4x2x8xf32>, tensor<f32>) -> tensor<4x2x8xf32>
  %m = graph.ReduceMean %p {axes = array<i64: 1, 2>} : (tensor<4x2x8xf32>) -> tensor<4x1x1xf32>
  %a = graph.Add %eps, %m : (tensor<1xf32>, tensor<4x1x1xf32>) -> tensor<4x1x1xf32>
  %s = graph.Sqrt %a : tensor<4x1x1xf32>
  %r = graph.Div %one, %s : (tensor<f32>, tensor<4x1x1xf32>) -> tensor<4x1x1xf32>
  %n = graph.Mul %r, %x : (tensor<4x1x1xf32>, tensor<4x2x8xf32>) -> tensor<4x2x8xf32>
  %y = graph.Mul %n, %w : (tensor<4x2x8xf32>, tensor<2x8xf32>) -> tensor<4x2x8xf32>
  return %y : tensor<4x2x8xf32>
}

// -----

// Div(x, sqrt) in place of the reciprocal and the Mul.
// CHECK-LABEL: func.func @div_x
// CHECK: graph.RMSNormalization
// CHECK-NOT: graph.Div
func.func @div_x(%x: tensor<3x8xf32>, %w: tensor<8xf32>) -> tensor<3x8xf32> {
  %two = graph.Constant dense<2.0> : tensor<f32>
  %eps = graph.Constant dense<1.0e-5> : tensor<f32>
  %p = graph.Pow %x, %two : (tensor<3x8xf32>, tensor<f32>) -> tensor<3x8xf32>
  %m = graph.ReduceMean %p {axes = array<i64: 1>} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %a = graph.Add %m, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s = graph.Sqrt %a : tensor<3x1xf32>
  %n = graph.Div %x, %s : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %y = graph.Mul %w, %n : (tensor<8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// The inverse RMS has a second user: nothing is rewritten.
// CHECK-LABEL: func.func @intermediate_used_twice
// CHECK-NOT: graph.RMSNormalization
// CHECK: graph.Pow
// CHECK: graph.Reciprocal
// CHECK: return
func.func @intermediate_used_twice(%x: tensor<3x8xf32>, %w: tensor<8xf32>) -> (tensor<3x8xf32>, tensor<3x1xf32>) {
  %two = graph.Constant dense<2.0> : tensor<f32>
  %eps = graph.Constant dense<1.0e-5> : tensor<f32>
  %p = graph.Pow %x, %two : (tensor<3x8xf32>, tensor<f32>) -> tensor<3x8xf32>
  %m = graph.ReduceMean %p {axes = array<i64: 1>} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %a = graph.Add %m, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s = graph.Sqrt %a : tensor<3x1xf32>
  %r = graph.Reciprocal %s : tensor<3x1xf32>
  %n = graph.Mul %x, %r : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %y = graph.Mul %w, %n : (tensor<8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  return %y, %r : tensor<3x8xf32>, tensor<3x1xf32>
}

// -----

// The mean is over a leading axis, not the trailing dims: no match.
// CHECK-LABEL: func.func @axes_not_last
// CHECK-NOT: graph.RMSNormalization
// CHECK: graph.ReduceMean
func.func @axes_not_last(%x: tensor<3x8xf32>, %w: tensor<8xf32>) -> tensor<3x8xf32> {
  %two = graph.Constant dense<2.0> : tensor<f32>
  %eps = graph.Constant dense<1.0e-5> : tensor<f32>
  %p = graph.Pow %x, %two : (tensor<3x8xf32>, tensor<f32>) -> tensor<3x8xf32>
  %m = graph.ReduceMean %p {axes = array<i64: 0>} : (tensor<3x8xf32>) -> tensor<1x8xf32>
  %a = graph.Add %m, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %s = graph.Sqrt %a : tensor<1x8xf32>
  %r = graph.Reciprocal %s : tensor<1x8xf32>
  %n = graph.Mul %x, %r : (tensor<3x8xf32>, tensor<1x8xf32>) -> tensor<3x8xf32>
  %y = graph.Mul %w, %n : (tensor<8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A cube, not a square: no match.
// CHECK-LABEL: func.func @not_square
// CHECK-NOT: graph.RMSNormalization
func.func @not_square(%x: tensor<3x8xf32>, %w: tensor<8xf32>) -> tensor<3x8xf32> {
  %three = graph.Constant dense<3.0> : tensor<f32>
  %eps = graph.Constant dense<1.0e-5> : tensor<f32>
  %p = graph.Pow %x, %three : (tensor<3x8xf32>, tensor<f32>) -> tensor<3x8xf32>
  %m = graph.ReduceMean %p {axes = array<i64: 1>} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %a = graph.Add %m, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s = graph.Sqrt %a : tensor<3x1xf32>
  %r = graph.Reciprocal %s : tensor<3x1xf32>
  %n = graph.Mul %x, %r : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %y = graph.Mul %w, %n : (tensor<8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// A "weight" that also varies over the rows is not a scale: no match.
// CHECK-LABEL: func.func @weight_over_rows
// CHECK-NOT: graph.RMSNormalization
func.func @weight_over_rows(%x: tensor<3x8xf32>, %w: tensor<3x8xf32>) -> tensor<3x8xf32> {
  %two = graph.Constant dense<2.0> : tensor<f32>
  %eps = graph.Constant dense<1.0e-5> : tensor<f32>
  %p = graph.Pow %x, %two : (tensor<3x8xf32>, tensor<f32>) -> tensor<3x8xf32>
  %m = graph.ReduceMean %p {axes = array<i64: 1>} : (tensor<3x8xf32>) -> tensor<3x1xf32>
  %a = graph.Add %m, %eps : (tensor<3x1xf32>, tensor<f32>) -> tensor<3x1xf32>
  %s = graph.Sqrt %a : tensor<3x1xf32>
  %r = graph.Reciprocal %s : tensor<3x1xf32>
  %n = graph.Mul %x, %r : (tensor<3x8xf32>, tensor<3x1xf32>) -> tensor<3x8xf32>
  %y = graph.Mul %w, %n : (tensor<3x8xf32>, tensor<3x8xf32>) -> tensor<3x8xf32>
  return %y : tensor<3x8xf32>
}

// -----

// f16 values are left alone (the fused kernels are f32).
// CHECK-LABEL: func.func @f16
// CHECK-NOT: graph.RMSNormalization
func.func @f16(%x: tensor<3x8xf16>, %w: tensor<8xf16>) -> tensor<3x8xf16> {
  %two = graph.Constant dense<2.0> : tensor<f16>
  %eps = graph.Constant dense<1.0e-5> : tensor<f16>
  %p = graph.Pow %x, %two : (tensor<3x8xf16>, tensor<f16>) -> tensor<3x8xf16>
  %m = graph.ReduceMean %p {axes = array<i64: 1>} : (tensor<3x8xf16>) -> tensor<3x1xf16>
  %a = graph.Add %m, %eps : (tensor<3x1xf16>, tensor<f16>) -> tensor<3x1xf16>
  %s = graph.Sqrt %a : tensor<3x1xf16>
  %r = graph.Reciprocal %s : tensor<3x1xf16>
  %n = graph.Mul %x, %r : (tensor<3x8xf16>, tensor<3x1xf16>) -> tensor<3x8xf16>
  %y = graph.Mul %w, %n : (tensor<8xf16>, tensor<3x8xf16>) -> tensor<3x8xf16>
  return %y : tensor<3x8xf16>
}
