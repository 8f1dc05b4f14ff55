// RUN: strait-opt %s --graph-fuse-rotary -split-input-file | FileCheck %s
// RUN: strait-opt %s --graph-fuse-rotary --graph-fold-transposes -split-input-file | FileCheck %s --check-prefix=FOLD

// LLaMA's rotate-half form, as exported: x * cos + Concat(-x[..., 8:],
// x[..., :8]) * sin over the last axis (ends of INT64_MAX, a positive axis).
// One op; the slices, the negation and the concatenation are gone.
// CHECK-LABEL: func.func @llama
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x16x16xf32>, %[[C:.*]]: tensor<1x1x16x16xf32>, %[[S:.*]]: tensor<1x1x16x16xf32>)
// CHECK-NEXT: %[[Y:.*]] = graph.FusedRotaryEmbedding %[[X]], %[[C]], %[[S]] : (tensor<2x4x16x16xf32>, tensor<1x1x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<2x4x16x16xf32>
// CHECK-NEXT: return %[[Y]]
func.func @llama(%x: tensor<2x4x16x16xf32>, %cos: tensor<1x1x16x16xf32>, %sin: tensor<1x1x16x16xf32>) -> tensor<2x4x16x16xf32> {
  %a = graph.Mul %x, %cos : (tensor<2x4x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<2x4x16x16xf32>
  %lo = graph.Slice %x {axes = array<i64: 3>, ends = array<i64: 8>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x8xf32>
  %hi = graph.Slice %x {axes = array<i64: 3>, ends = array<i64: 9223372036854775807>, starts = array<i64: 8>, steps = array<i64: 1>} : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x8xf32>
  %n = graph.Neg %hi : tensor<2x4x16x8xf32>
  %r = graph.Concat %n, %lo {axis = -1 : i64} : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x16xf32>
  %b = graph.Mul %r, %sin : (tensor<2x4x16x16xf32>, tensor<1x1x16x16xf32>) -> tensor<2x4x16x16xf32>
  %y = graph.Add %a, %b : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  return %y : tensor<2x4x16x16xf32>
}

// -----

// Operands of Add and Mul in the other order, a negative slice axis, a
// [T, D] table.
// CHECK-LABEL: func.func @swapped
// CHECK: graph.FusedRotaryEmbedding %arg0, %arg1, %arg2 : (tensor<3x6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<3x6x4xf32>
// CHECK-NOT: graph.Slice
func.func @swapped(%x: tensor<3x6x4xf32>, %cos: tensor<6x4xf32>, %sin: tensor<6x4xf32>) -> tensor<3x6x4xf32> {
  %lo = graph.Slice %x {axes = array<i64: -1>, ends = array<i64: 2>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<3x6x4xf32>) -> tensor<3x6x2xf32>
  %hi = graph.Slice %x {axes = array<i64: -1>, ends = array<i64: 4>, starts = array<i64: 2>, steps = array<i64: 1>} : (tensor<3x6x4xf32>) -> tensor<3x6x2xf32>
  %n = graph.Neg %hi : tensor<3x6x2xf32>
  %r = graph.Concat %n, %lo {axis = 2 : i64} : (tensor<3x6x2xf32>, tensor<3x6x2xf32>) -> tensor<3x6x4xf32>
  %b = graph.Mul %sin, %r : (tensor<6x4xf32>, tensor<3x6x4xf32>) -> tensor<3x6x4xf32>
  %a = graph.Mul %cos, %x : (tensor<6x4xf32>, tensor<3x6x4xf32>) -> tensor<3x6x4xf32>
  %y = graph.Add %b, %a : (tensor<3x6x4xf32>, tensor<3x6x4xf32>) -> tensor<3x6x4xf32>
  return %y : tensor<3x6x4xf32>
}

// -----

// Not the rotation: the halves swapped without the negation, and a slice
// another op reads. Nothing changes.
// CHECK-LABEL: func.func @not_rotary
// CHECK-NOT: graph.FusedRotaryEmbedding
func.func @not_rotary(%x: tensor<3x4xf32>, %cos: tensor<4xf32>, %sin: tensor<4xf32>) -> (tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x2xf32>) {
  %a = graph.Mul %x, %cos : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %lo = graph.Slice %x {axes = array<i64: 1>, ends = array<i64: 2>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x2xf32>
  %hi = graph.Slice %x {axes = array<i64: 1>, ends = array<i64: 4>, starts = array<i64: 2>, steps = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x2xf32>
  %r = graph.Concat %hi, %lo {axis = 1 : i64} : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x4xf32>
  %b = graph.Mul %r, %sin : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %y = graph.Add %a, %b : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  %a2 = graph.Mul %x, %cos : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %lo2 = graph.Slice %x {axes = array<i64: 1>, ends = array<i64: 2>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x2xf32>
  %hi2 = graph.Slice %x {axes = array<i64: 1>, ends = array<i64: 4>, starts = array<i64: 2>, steps = array<i64: 1>} : (tensor<3x4xf32>) -> tensor<3x2xf32>
  %n2 = graph.Neg %hi2 : tensor<3x2xf32>
  %r2 = graph.Concat %n2, %lo2 {axis = 1 : i64} : (tensor<3x2xf32>, tensor<3x2xf32>) -> tensor<3x4xf32>
  %b2 = graph.Mul %r2, %sin : (tensor<3x4xf32>, tensor<4xf32>) -> tensor<3x4xf32>
  %y2 = graph.Add %a2, %b2 : (tensor<3x4xf32>, tensor<3x4xf32>) -> tensor<3x4xf32>
  return %y, %y2, %lo2 : tensor<3x4xf32>, tensor<3x4xf32>, tensor<3x2xf32>
}

// -----

// LLaMA's heads: Q as [B, T, H, D] is transposed to [B, H, T, D], rotated
// with [1, 1, T, D] tables and read by the attention. graph-fold-transposes
// moves the Transpose past the rotation (the tables transposed to [1, T, 1,
// D] instead) and into the attention's q_perm: no head moves.
// CHECK-LABEL: func.func @heads
// FOLD-LABEL: func.func @heads
// FOLD: %[[C:.*]] = graph.Transpose %arg1 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x1x16x8xf32>) -> tensor<1x16x1x8xf32>
// FOLD: %[[S:.*]] = graph.Transpose %arg2 {perm = array<i64: 0, 2, 1, 3>} : (tensor<1x1x16x8xf32>) -> tensor<1x16x1x8xf32>
// FOLD: %[[R:.*]] = graph.FusedRotaryEmbedding %arg0, %[[C]], %[[S]] : (tensor<2x16x4x8xf32>, tensor<1x16x1x8xf32>, tensor<1x16x1x8xf32>) -> tensor<2x16x4x8xf32>
// FOLD-NOT: graph.Transpose
// FOLD: graph.FusedAttention %[[R]], %arg3, %arg4 {kt_perm = array<i64: 0, 2, 3, 1>, q_perm = array<i64: 0, 2, 1, 3>, scale = 5.000000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>}
func.func @heads(%q: tensor<2x16x4x8xf32>, %cos: tensor<1x1x16x8xf32>, %sin: tensor<1x1x16x8xf32>, %k: tensor<2x16x4x8xf32>, %v: tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32> {
  %qt = graph.Transpose %q {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %a = graph.Mul %qt, %cos : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %lo = graph.Slice %qt {axes = array<i64: 3>, ends = array<i64: 4>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x4xf32>
  %hi = graph.Slice %qt {axes = array<i64: 3>, ends = array<i64: 8>, starts = array<i64: 4>, steps = array<i64: 1>} : (tensor<2x4x16x8xf32>) -> tensor<2x4x16x4xf32>
  %n = graph.Neg %hi : tensor<2x4x16x4xf32>
  %r = graph.Concat %n, %lo {axis = 3 : i64} : (tensor<2x4x16x4xf32>, tensor<2x4x16x4xf32>) -> tensor<2x4x16x8xf32>
  %b = graph.Mul %r, %sin : (tensor<2x4x16x8xf32>, tensor<1x1x16x8xf32>) -> tensor<2x4x16x8xf32>
  %qr = graph.Add %a, %b : (tensor<2x4x16x8xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  %kt = graph.Transpose %k {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x8x16xf32>
  %vt = graph.Transpose %v {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x8xf32>) -> tensor<2x4x16x8xf32>
  %y, %lse = graph.FusedAttention %qr, %kt, %vt {scale = 0.5 : f32} : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>)
  return %y : tensor<2x4x16x8xf32>
}
