// RUN: strait-opt %s -split-input-file --graph-cast-motion | FileCheck %s

// Rules 13 and 14: a LLaMA block's RMSNorm feeding the bf16 Q, K and V
// products (through one cast and three Reshapes), and its backward: the norm
// writes bf16 Y itself (its cast folds in), and the gradient reads the bf16
// dY (its widening cast folds in; dX and dScale stay f32).
// CHECK-LABEL: func.func @rms_norm_block
// CHECK-SAME: (%[[X:.*]]: tensor<2x4x8xf32>, %[[S:.*]]: tensor<8xf32>, %[[DY:.*]]: tensor<2x4x8xbf16>)
// CHECK-NOT: graph.Cast
// CHECK: %[[Y:.*]] = graph.RMSNormalization %[[X]], %[[S]] {axis = 2 : i64, graph.op_id = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[Q:.*]] = graph.Reshape %[[Y]] {{.*}} : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
// CHECK: %[[K:.*]] = graph.Reshape %[[Y]] {{.*}} : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
// CHECK: %[[V:.*]] = graph.Reshape %[[Y]] {{.*}} : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
// CHECK: %[[DX:.*]], %[[DS:.*]] = graph.RMSNormalizationGrad %[[DY]], %[[X]], %[[S]] {axis = 2 : i64, graph.grad_of = 0 : i64} : (tensor<2x4x8xbf16>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
// CHECK-NOT: graph.Cast
// CHECK: return %[[Q]], %[[K]], %[[V]], %[[DX]], %[[DS]]
func.func @rms_norm_block(%x: tensor<2x4x8xf32>, %s: tensor<8xf32>, %dy: tensor<2x4x8xbf16>) -> (tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<2x4x8xf32>, tensor<8xf32>) {
  %y = graph.RMSNormalization %x, %s {axis = 2 : i64, graph.op_id = 0 : i64} : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
  %c = graph.Cast %y {graph.op_id = 1 : i64, to = bf16} : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
  %q = graph.Reshape %c {graph.op_id = 2 : i64, shape = array<i64: 8, 8>} : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
  %k = graph.Reshape %c {graph.op_id = 3 : i64, shape = array<i64: 8, 8>} : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
  %v = graph.Reshape %c {graph.op_id = 4 : i64, shape = array<i64: 8, 8>} : (tensor<2x4x8xbf16>) -> tensor<8x8xbf16>
  %w = graph.Cast %dy {graph.grad_of = 1 : i64, to = f32} : (tensor<2x4x8xbf16>) -> tensor<2x4x8xf32>
  %dx:2 = graph.RMSNormalizationGrad %w, %x, %s {axis = 2 : i64, graph.grad_of = 0 : i64} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
  return %q, %k, %v, %dx#0, %dx#1 : tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<8x8xbf16>, tensor<2x4x8xf32>, tensor<8xf32>
}

// -----

// An f16 norm read by two products (one cast per use): the duplicate casts
// merge first (rule 6), then the norm writes f16.
// CHECK-LABEL: func.func @rms_norm_two_casts
// CHECK-NOT: graph.Cast
// CHECK: %[[Y:.*]] = graph.RMSNormalization {{.*}} -> tensor<4x8xf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[Y]], %[[Y]]
func.func @rms_norm_two_casts(%x: tensor<4x8xf32>, %s: tensor<8xf32>) -> (tensor<4x8xf16>, tensor<4x8xf16>) {
  %y = graph.RMSNormalization %x, %s : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %a = graph.Cast %y {to = f16} : (tensor<4x8xf32>) -> tensor<4x8xf16>
  %b = graph.Cast %y {to = f16} : (tensor<4x8xf32>) -> tensor<4x8xf16>
  return %a, %b : tensor<4x8xf16>, tensor<4x8xf16>
}

// -----

// Not rewritten: a norm whose f32 Y is also used in f32 (the Add would read
// a rounded value), a forward norm cast in the backward (phases differ), a
// norm cast to f64 (not a 16-bit rounding), and an f32 dY with no cast. A
// widening cast with another user stays for it, while the gradient reads its
// bf16 input.
// CHECK-LABEL: func.func @rms_norm_not_exact
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[S:.*]]: tensor<8xf32>, %[[DY:.*]]: tensor<4x8xbf16>, %[[G:.*]]: tensor<4x8xf32>)
// CHECK: %[[Y:.*]] = graph.RMSNormalization %[[X]], %[[S]] : {{.*}} -> tensor<4x8xf32>
// CHECK: graph.Cast %[[Y]] {to = bf16}
// CHECK: graph.Add %[[Y]], %[[X]]
// CHECK: %[[Y2:.*]] = graph.RMSNormalization %[[X]], %[[S]] {graph.op_id = 7 : i64} : {{.*}} -> tensor<4x8xf32>
// CHECK: graph.Cast %[[Y2]] {graph.grad_of = 7 : i64, to = bf16}
// CHECK: %[[Y3:.*]] = graph.RMSNormalization %[[X]], %[[S]] : {{.*}} -> tensor<4x8xf32>
// CHECK: graph.Cast %[[Y3]] {to = f64}
// CHECK: %[[W:.*]] = graph.Cast %[[DY]] {to = f32}
// CHECK: graph.RMSNormalizationGrad %[[DY]], %[[X]], %[[S]] : (tensor<4x8xbf16>,
// CHECK: graph.RMSNormalizationGrad %[[G]], %[[X]], %[[S]] : (tensor<4x8xf32>,
// CHECK: return {{.*}}, %[[W]] :
func.func @rms_norm_not_exact(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %dy: tensor<4x8xbf16>, %g: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf64>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>) {
  %y = graph.RMSNormalization %x, %s : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c = graph.Cast %y {to = bf16} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %a = graph.Add %y, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y2 = graph.RMSNormalization %x, %s {graph.op_id = 7 : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c2 = graph.Cast %y2 {graph.grad_of = 7 : i64, to = bf16} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %y3 = graph.RMSNormalization %x, %s : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c3 = graph.Cast %y3 {to = f64} : (tensor<4x8xf32>) -> tensor<4x8xf64>
  %w = graph.Cast %dy {to = f32} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %dx:2 = graph.RMSNormalizationGrad %w, %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  %dg:2 = graph.RMSNormalizationGrad %g, %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  return %c, %a, %c2, %c3, %dx#0, %dg#0, %w : tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf64>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>
}
