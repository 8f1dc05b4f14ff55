// RUN: strait-opt %s --graph-fuse-elementwise -split-input-file | FileCheck %s

// A chain with a scalar constant becomes one op; the constant is inlined
// and erased.
// CHECK-LABEL: func.func @chain
// CHECK-SAME: (%[[X:.*]]: tensor<2x3xf32>, %[[Y:.*]]: tensor<3xf32>)
// CHECK-NOT: graph.Constant
// CHECK: %[[F:.*]] = graph.FusedElementwise %[[X]], %[[Y]] {args = array<i32: 0, -1, -1, 0, 2, -1, 3, 1, -1, 4, -1, -1>, constants = array<f32: 5.000000e-01>, ops = [#graph.fused_op<Const>, #graph.fused_op<Mul>, #graph.fused_op<Add>, #graph.fused_op<Tanh>], outputs = array<i32: 5>} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
// CHECK-NOT: graph.Mul
// CHECK: return %[[F]]
func.func @chain(%x: tensor<2x3xf32>, %y: tensor<3xf32>) -> tensor<2x3xf32> {
  %c = graph.Constant dense<5.000000e-01> : tensor<f32>
  %a = graph.Mul %x, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %b = graph.Add %a, %y : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %t = graph.Tanh %b : tensor<2x3xf32>
  return %t : tensor<2x3xf32>
}

// -----

// An intermediate used outside the group becomes a second result.
// CHECK-LABEL: func.func @two_outputs
// CHECK: %[[F:.*]]:2 = graph.FusedElementwise %{{.*}} {{.*}}outputs = array<i32: 1, 2>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
// CHECK: %[[S:.*]] = graph.Softmax %[[F]]#0
// CHECK: return %[[F]]#1, %[[S]]
func.func @two_outputs(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
  %a = graph.Tanh %x : tensor<4xf32>
  %b = graph.Mul %a, %a : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s = graph.Softmax %a {axis = -1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  return %b, %s : tensor<4xf32>, tensor<4xf32>
}

// -----

// Add reads a value (the Softmax) computed from the Mul by an op outside
// the group: one fused op could not be placed, so nothing fuses.
// CHECK-LABEL: func.func @outside_path
// CHECK-NOT: graph.FusedElementwise
// CHECK: graph.Mul
// CHECK: graph.Softmax
// CHECK: graph.Add
func.func @outside_path(%x: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.Mul %x, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %s = graph.Softmax %a {axis = -1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  %b = graph.Add %a, %s : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %b : tensor<4xf32>
}

// -----

// A shape-changing op (Reshape) and a non-elementwise op (MatMul) end
// groups; single ops stay as they are.
// CHECK-LABEL: func.func @breaks
// CHECK-NOT: graph.FusedElementwise
// CHECK: graph.Exp
// CHECK: graph.Reshape
// CHECK: graph.Neg
// CHECK: graph.MatMul
// CHECK: graph.Sqrt
func.func @breaks(%x: tensor<2x3xf32>, %w: tensor<2x2xf32>) -> tensor<2x2xf32> {
  %a = graph.Exp %x : tensor<2x3xf32>
  %r = graph.Reshape %a {shape = array<i64: 3, 2>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %b = graph.Neg %r : tensor<3x2xf32>
  %m = graph.MatMul %b, %w : (tensor<3x2xf32>, tensor<2x2xf32>) -> tensor<3x2xf32>
  %s = graph.Sqrt %m : tensor<3x2xf32>
  %t = graph.Reshape %s {shape = array<i64: 2, 3>} : (tensor<3x2xf32>) -> tensor<2x3xf32>
  %u = graph.Slice %t {axes = array<i64: 1>, ends = array<i64: 2>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return %u : tensor<2x2xf32>
}

// -----

// Exp has another shape than the Add it feeds (a broadcast operand):
// different iteration shapes do not fuse. Integer ops do not fuse.
// CHECK-LABEL: func.func @shapes_and_types
// CHECK-NOT: graph.FusedElementwise
// CHECK: graph.Exp
// CHECK: graph.Add
// CHECK: graph.Mul {{.*}} -> tensor<3xi64>
func.func @shapes_and_types(%x: tensor<3xf32>, %y: tensor<2x3xf32>, %i: tensor<3xi64>) -> (tensor<2x3xf32>, tensor<3xi64>) {
  %a = graph.Exp %x : tensor<3xf32>
  %b = graph.Add %a, %y : (tensor<3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %j = graph.Add %i, %i : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  %k = graph.Mul %j, %i : (tensor<3xi64>, tensor<3xi64>) -> tensor<3xi64>
  return %b, %k : tensor<2x3xf32>, tensor<3xi64>
}

// -----

// Forward and backward ops (graph.grad_of) are not mixed; the backward
// pair fuses and keeps its graph.grad_of.
// CHECK-LABEL: func.func @phases
// CHECK: %[[E:.*]] = graph.Exp
// CHECK: graph.FusedElementwise %[[E]], %{{.*}} {args = {{.*}}graph.grad_of = 1 : i64, ops = [#graph.fused_op<Mul>, #graph.fused_op<Neg>]
func.func @phases(%x: tensor<4xf32>, %g: tensor<4xf32>) -> tensor<4xf32> {
  %a = graph.Exp %x {graph.op_id = 1 : i64} : tensor<4xf32>
  %b = graph.Mul %a, %g {graph.grad_of = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %c = graph.Neg %b {graph.grad_of = 1 : i64} : tensor<4xf32>
  return %c : tensor<4xf32>
}

// -----

// Where over a bool mask, a comparison producing a boolean register, a Cast
// of a bool to f32; a non-splat constant stays an input.
// CHECK-LABEL: func.func @predicates
// CHECK: %[[C:.*]] = graph.Constant dense<[1.000000e+00, 2.000000e+00, 3.000000e+00, 4.000000e+00]>
// CHECK: graph.FusedElementwise %{{.*}}, %[[C]], %{{.*}} {{.*}}ops = [#graph.fused_op<Less>, #graph.fused_op<Const>, #graph.fused_op<Where>, #graph.fused_op<Identity>, #graph.fused_op<Add>]{{.*}} : (tensor<4xf32>, tensor<4xf32>, tensor<4xi1>) -> tensor<4xf32>
func.func @predicates(%x: tensor<4xf32>, %m: tensor<4xi1>) -> tensor<4xf32> {
  %k = graph.Constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %lt = graph.Less %x, %k : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %z = graph.Constant dense<0.0> : tensor<f32>
  %w = graph.Where %lt, %x, %z : (tensor<4xi1>, tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %f = graph.Cast %m {to = f32} : (tensor<4xi1>) -> tensor<4xf32>
  %s = graph.Add %w, %f : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s : tensor<4xf32>
}

// -----

// A boolean splat constant is not inlined (a Const is a float register): it
// stays an i1 input that And reads (transformers' causal masks: And(q >= k,
// true)).
// CHECK-LABEL: func.func @bool_constant
// CHECK: %[[T:.*]] = graph.Constant dense<true> : tensor<i1>
// CHECK: graph.FusedElementwise %{{.*}}, %{{.*}}, %[[T]], %{{.*}} {{.*}}ops = [#graph.fused_op<LessOrEqual>, #graph.fused_op<And>, #graph.fused_op<Equal>, #graph.fused_op<And>]{{.*}} : (tensor<4xf32>, tensor<4xf32>, tensor<i1>, tensor<4xf32>) -> tensor<4xi1>
func.func @bool_constant(%q: tensor<4xf32>, %k: tensor<4xf32>, %s: tensor<4xf32>) -> tensor<4xi1> {
  %le = graph.LessOrEqual %k, %q : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %t = graph.Constant dense<true> : tensor<i1>
  %a = graph.And %le, %t : (tensor<4xi1>, tensor<i1>) -> tensor<4xi1>
  %e = graph.Equal %s, %q : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xi1>
  %m = graph.And %a, %e : (tensor<4xi1>, tensor<4xi1>) -> tensor<4xi1>
  return %m : tensor<4xi1>
}

// -----

// Two groups where the backward one ({Neg, Mul}) must be placed before the
// Softmax and reads the forward one ({Exp, Tanh}), whose own place is the
// Mul: groups are fused in the order of their places, so the forward group
// lands before the backward one and every operand still dominates its use.
// CHECK-LABEL: func.func @cross_group_order
// CHECK: %[[F:.*]]:2 = graph.FusedElementwise %arg0 {{.*}}ops = [#graph.fused_op<Exp>, #graph.fused_op<Tanh>]
// CHECK: %[[B:.*]]:2 = graph.FusedElementwise %arg1, %[[F]]#0 {{.*}}ops = [#graph.fused_op<Neg>, #graph.fused_op<Mul>]
// CHECK: %[[S:.*]] = graph.Softmax %[[B]]#0
// CHECK: return %[[S]], %[[B]]#1, %[[F]]#1
func.func @cross_group_order(%x: tensor<4xf32>, %y: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) {
  %p = graph.Exp %x : tensor<4xf32>
  %a = graph.Neg %y {graph.grad_of = 1 : i64} : tensor<4xf32>
  %s = graph.Softmax %a {axis = -1 : i64, graph.grad_of = 1 : i64} : (tensor<4xf32>) -> tensor<4xf32>
  %q = graph.Tanh %p : tensor<4xf32>
  %m = graph.Mul %a, %p {graph.grad_of = 1 : i64} : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  return %s, %m, %q : tensor<4xf32>, tensor<4xf32>, tensor<4xf32>
}

// -----

// Casts between f32 and bf16 at a group's edge become the fused op's 16-bit
// input and result (Identity instructions: loads widen, the store rounds).
// CHECK-LABEL: func.func @casts_at_the_edges
// CHECK-SAME: (%[[X:.*]]: tensor<4xbf16>)
// CHECK: %[[F:.*]] = graph.FusedElementwise %[[X]] {args = array<i32: 0, -1, -1, 1, -1, -1, 2, -1, -1>, constants = array<f32>, ops = [#graph.fused_op<Identity>, #graph.fused_op<Tanh>, #graph.fused_op<Identity>], outputs = array<i32: 3>} : (tensor<4xbf16>) -> tensor<4xbf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[F]]
func.func @casts_at_the_edges(%x: tensor<4xbf16>) -> tensor<4xbf16> {
  %a = graph.Cast %x {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %t = graph.Tanh %a : tensor<4xf32>
  %b = graph.Cast %t {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  return %b : tensor<4xbf16>
}

// -----

// A 16-bit value read again inside the group is rounded there (RoundBF16,
// RoundF16 after its Cast), as the unfused 16-bit tensor would be; a splat
// f16 constant is inlined (its exact f32 value); the f16 Mul's result is
// only stored, and the store rounds.
// CHECK-LABEL: func.func @rounding_inside
// CHECK: graph.FusedElementwise %{{.*}} {args = array<i32: 0, -1, -1, 1, -1, -1, 2, -1, -1, 3, 0, -1, 4, -1, -1, 5, -1, -1, 0, -1, -1, 6, 7, -1>, constants = array<f32: 2.500000e+00>, ops = [#graph.fused_op<Identity>, #graph.fused_op<RoundBF16>, #graph.fused_op<Identity>, #graph.fused_op<Add>, #graph.fused_op<Identity>, #graph.fused_op<RoundF16>, #graph.fused_op<Const>, #graph.fused_op<Mul>], outputs = array<i32: 8>} : (tensor<4xf32>) -> tensor<4xf16>
// CHECK-NOT: graph.Constant
func.func @rounding_inside(%x: tensor<4xf32>) -> tensor<4xf16> {
  %a = graph.Cast %x {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %b = graph.Cast %a {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %c = graph.Add %b, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
  %h = graph.Cast %c {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  %k = graph.Constant dense<2.5> : tensor<f16>
  %m = graph.Mul %h, %k : (tensor<4xf16>, tensor<f16>) -> tensor<4xf16>
  return %m : tensor<4xf16>
}
