// RUN: strait-opt %s -split-input-file --graph-cast-motion | FileCheck %s

// Attention input after autocast: the bf16 QKV product is cast to f32, split,
// reshaped and transposed, and each head tensor is cast back to bf16. The
// narrowing casts move up through Transpose, Reshape and the Split (every
// result cast to bf16: one cast of its input), where Cast(f32 -> bf16) of
// Cast(bf16 -> f32) is the bf16 value itself: no cast is left and the layout
// ops move bf16.
// CHECK-LABEL: func.func @qkv
// CHECK-SAME: (%[[G:.*]]: tensor<2x4x12xbf16>)
// CHECK-NOT: graph.Cast
// CHECK: %[[S:.*]]:3 = graph.Split %[[G]] {{.*}} : (tensor<2x4x12xbf16>) -> (tensor<2x4x4xbf16>, tensor<2x4x4xbf16>, tensor<2x4x4xbf16>)
// CHECK: %[[R:.*]] = graph.Reshape %[[S]]#0 {{.*}} : (tensor<2x4x4xbf16>) -> tensor<2x4x2x2xbf16>
// CHECK: %[[T:.*]] = graph.Transpose %[[R]] {{.*}} : (tensor<2x4x2x2xbf16>) -> tensor<2x2x4x2xbf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[T]], %[[S]]#1, %[[S]]#2
func.func @qkv(%g: tensor<2x4x12xbf16>) -> (tensor<2x2x4x2xbf16>, tensor<2x4x4xbf16>, tensor<2x4x4xbf16>) {
  %f = graph.Cast %g {to = f32} : (tensor<2x4x12xbf16>) -> tensor<2x4x12xf32>
  %s:3 = graph.Split %f {axis = 2 : i64, split = array<i64: 4, 4, 4>} : (tensor<2x4x12xf32>) -> (tensor<2x4x4xf32>, tensor<2x4x4xf32>, tensor<2x4x4xf32>)
  %r = graph.Reshape %s#0 {shape = array<i64: 2, 4, 2, 2>} : (tensor<2x4x4xf32>) -> tensor<2x4x2x2xf32>
  %t = graph.Transpose %r {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x2xf32>) -> tensor<2x2x4x2xf32>
  %q = graph.Cast %t {to = bf16} : (tensor<2x2x4x2xf32>) -> tensor<2x2x4x2xbf16>
  %k = graph.Cast %s#1 {to = bf16} : (tensor<2x4x4xf32>) -> tensor<2x4x4xbf16>
  %v = graph.Cast %s#2 {to = bf16} : (tensor<2x4x4xf32>) -> tensor<2x4x4xbf16>
  return %q, %k, %v : tensor<2x2x4x2xbf16>, tensor<2x4x4xbf16>, tensor<2x4x4xbf16>
}

// -----

// Attention output: Y (bf16) is cast to f32, transposed and reshaped, and
// cast to bf16 for the projection. The widening cast moves down through the
// layout ops and cancels against the narrowing one.
// CHECK-LABEL: func.func @attention_out
// CHECK-SAME: (%[[Y:.*]]: tensor<2x2x4x2xbf16>)
// CHECK-NOT: graph.Cast
// CHECK: %[[T:.*]] = graph.Transpose %[[Y]] {{.*}} : (tensor<2x2x4x2xbf16>) -> tensor<2x4x2x2xbf16>
// CHECK: %[[R:.*]] = graph.Reshape %[[T]] {{.*}} : (tensor<2x4x2x2xbf16>) -> tensor<8x4xbf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[R]]
func.func @attention_out(%y: tensor<2x2x4x2xbf16>) -> tensor<8x4xbf16> {
  %f = graph.Cast %y {to = f32} : (tensor<2x2x4x2xbf16>) -> tensor<2x2x4x2xf32>
  %t = graph.Transpose %f {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x2x4x2xf32>) -> tensor<2x4x2x2xf32>
  %r = graph.Reshape %t {shape = array<i64: 8, 4>} : (tensor<2x4x2x2xf32>) -> tensor<8x4xf32>
  %c = graph.Cast %r {to = bf16} : (tensor<8x4xf32>) -> tensor<8x4xbf16>
  return %c : tensor<8x4xbf16>
}

// -----

// The gradient of the Split: a Concat of f16 values cast to f32 becomes the
// Concat of the f16 values and one cast of its result, which then cancels.
// CHECK-LABEL: func.func @concat
// CHECK-SAME: (%[[A:.*]]: tensor<2x3xf16>, %[[B:.*]]: tensor<2x5xf16>)
// CHECK-NOT: graph.Cast
// CHECK: %[[C:.*]] = graph.Concat %[[A]], %[[B]] {{.*}} : (tensor<2x3xf16>, tensor<2x5xf16>) -> tensor<2x8xf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[C]]
func.func @concat(%a: tensor<2x3xf16>, %b: tensor<2x5xf16>) -> tensor<2x8xf16> {
  %fa = graph.Cast %a {to = f32} : (tensor<2x3xf16>) -> tensor<2x3xf32>
  %fb = graph.Cast %b {to = f32} : (tensor<2x5xf16>) -> tensor<2x5xf32>
  %c = graph.Concat %fa, %fb {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  %l = graph.Cast %c {to = f16} : (tensor<2x8xf32>) -> tensor<2x8xf16>
  return %l : tensor<2x8xf16>
}

// -----

// A Concat whose f32 result other ops read: the widening cast moves after the
// Concat (one cast instead of two) and stays.
// CHECK-LABEL: func.func @concat_f32_user
// CHECK: %[[C:.*]] = graph.Concat %{{.*}}, %{{.*}} {{.*}} : (tensor<3xbf16>, tensor<5xbf16>) -> tensor<8xbf16>
// CHECK: %[[F:.*]] = graph.Cast %[[C]] {to = f32} : (tensor<8xbf16>) -> tensor<8xf32>
// CHECK: graph.Tanh %[[F]]
func.func @concat_f32_user(%a: tensor<3xbf16>, %b: tensor<5xbf16>) -> tensor<8xf32> {
  %fa = graph.Cast %a {to = f32} : (tensor<3xbf16>) -> tensor<3xf32>
  %fb = graph.Cast %b {to = f32} : (tensor<5xbf16>) -> tensor<5xf32>
  %c = graph.Concat %fa, %fb {axis = 0 : i64} : (tensor<3xf32>, tensor<5xf32>) -> tensor<8xf32>
  %t = graph.Tanh %c : tensor<8xf32>
  return %t : tensor<8xf32>
}

// -----

// f32 -> bf16 -> f32 rounds: both casts are kept.
// CHECK-LABEL: func.func @lossy_round_trip
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK: %[[L:.*]] = graph.Cast %[[X]] {to = bf16}
// CHECK: %[[F:.*]] = graph.Cast %[[L]] {to = f32}
// CHECK: return %[[F]]
func.func @lossy_round_trip(%x: tensor<4xf32>) -> tensor<4xf32> {
  %l = graph.Cast %x {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %f = graph.Cast %l {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  return %f : tensor<4xf32>
}

// -----

// bf16 -> f32 -> f16 is no round trip: kept.
// CHECK-LABEL: func.func @other_low_type
// CHECK: graph.Cast %{{.*}} {to = f32}
// CHECK: graph.Cast %{{.*}} {to = f16}
func.func @other_low_type(%x: tensor<4xbf16>) -> tensor<4xf16> {
  %f = graph.Cast %x {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %h = graph.Cast %f {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  return %h : tensor<4xf16>
}

// -----

// A Split with one result not cast: nothing moves.
// CHECK-LABEL: func.func @split_partly_cast
// CHECK: %[[S:.*]]:2 = graph.Split %{{.*}} {{.*}} : (tensor<6xf32>) -> (tensor<3xf32>, tensor<3xf32>)
// CHECK: graph.Cast %[[S]]#0 {to = bf16}
// CHECK: graph.Tanh %[[S]]#1
func.func @split_partly_cast(%x: tensor<6xf32>) -> (tensor<3xbf16>, tensor<3xf32>) {
  %s:2 = graph.Split %x {axis = 0 : i64, split = array<i64: 3, 3>} : (tensor<6xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  %a = graph.Cast %s#0 {to = bf16} : (tensor<3xf32>) -> tensor<3xbf16>
  %b = graph.Tanh %s#1 : tensor<3xf32>
  return %a, %b : tensor<3xbf16>, tensor<3xf32>
}

// -----

// A Split whose results are cast to different types: nothing moves.
// CHECK-LABEL: func.func @split_mixed_types
// CHECK: graph.Split %{{.*}} : (tensor<6xf32>) -> (tensor<3xf32>, tensor<3xf32>)
// CHECK: graph.Cast %{{.*}} {to = bf16}
// CHECK: graph.Cast %{{.*}} {to = f16}
func.func @split_mixed_types(%x: tensor<6xf32>) -> (tensor<3xbf16>, tensor<3xf16>) {
  %s:2 = graph.Split %x {axis = 0 : i64, split = array<i64: 3, 3>} : (tensor<6xf32>) -> (tensor<3xf32>, tensor<3xf32>)
  %a = graph.Cast %s#0 {to = bf16} : (tensor<3xf32>) -> tensor<3xbf16>
  %b = graph.Cast %s#1 {to = f16} : (tensor<3xf32>) -> tensor<3xf16>
  return %a, %b : tensor<3xbf16>, tensor<3xf16>
}

// -----

// A Transpose whose f32 result has a second user: the cast stays after it.
// CHECK-LABEL: func.func @layout_two_users
// CHECK: %[[T:.*]] = graph.Transpose %{{.*}} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK: graph.Cast %[[T]] {to = bf16} : (tensor<3x2xf32>) -> tensor<3x2xbf16>
// CHECK: graph.Tanh %[[T]]
func.func @layout_two_users(%x: tensor<2x3xf32>) -> (tensor<3x2xbf16>, tensor<3x2xf32>) {
  %t = graph.Transpose %x {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %c = graph.Cast %t {to = bf16} : (tensor<3x2xf32>) -> tensor<3x2xbf16>
  %u = graph.Tanh %t : tensor<3x2xf32>
  return %c, %u : tensor<3x2xbf16>, tensor<3x2xf32>
}

// -----

// A widening cast with a second user: it stays before the Transpose.
// CHECK-LABEL: func.func @widening_two_users
// CHECK: %[[F:.*]] = graph.Cast %{{.*}} {to = f32} : (tensor<2x3xbf16>) -> tensor<2x3xf32>
// CHECK: graph.Transpose %[[F]] {{.*}} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK: graph.Tanh %[[F]]
func.func @widening_two_users(%x: tensor<2x3xbf16>) -> (tensor<3x2xf32>, tensor<2x3xf32>) {
  %f = graph.Cast %x {to = f32} : (tensor<2x3xbf16>) -> tensor<2x3xf32>
  %t = graph.Transpose %f {perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %u = graph.Tanh %f : tensor<2x3xf32>
  return %t, %u : tensor<3x2xf32>, tensor<2x3xf32>
}

// -----

// A narrowing cast moves up through Gather's data operand (the indices stay
// i64) when the table has fewer elements than the gathered rows, and up
// through Unsqueeze.
// CHECK-LABEL: func.func @gather
// CHECK-SAME: (%[[W:.*]]: tensor<10x4xf32>, %[[I:.*]]: tensor<4x5xi64>)
// CHECK: %[[C:.*]] = graph.Cast %[[W]] {to = bf16} : (tensor<10x4xf32>) -> tensor<10x4xbf16>
// CHECK: %[[G:.*]] = graph.Gather %[[C]], %[[I]] : (tensor<10x4xbf16>, tensor<4x5xi64>) -> tensor<4x5x4xbf16>
// CHECK: %[[U:.*]] = graph.Unsqueeze %[[G]] {{.*}} : (tensor<4x5x4xbf16>) -> tensor<1x4x5x4xbf16>
// CHECK: return %[[U]]
func.func @gather(%w: tensor<10x4xf32>, %i: tensor<4x5xi64>) -> tensor<1x4x5x4xbf16> {
  %g = graph.Gather %w, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<4x5xi64>) -> tensor<4x5x4xf32>
  %u = graph.Unsqueeze %g {axes = array<i64: 0>} : (tensor<4x5x4xf32>) -> tensor<1x4x5x4xf32>
  %c = graph.Cast %u {to = bf16} : (tensor<1x4x5x4xf32>) -> tensor<1x4x5x4xbf16>
  return %c : tensor<1x4x5x4xbf16>
}

// -----

// Gathering 3 of 10 rows: casting the table would convert more elements, so
// the cast stays after the Gather; the same for a Slice.
// CHECK-LABEL: func.func @gather_fewer
// CHECK: %[[G:.*]] = graph.Gather %{{.*}}, %{{.*}} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
// CHECK: graph.Cast %[[G]] {to = bf16}
// CHECK: %[[S:.*]] = graph.Slice %{{.*}} : (tensor<10x4xf32>) -> tensor<2x4xf32>
// CHECK: graph.Cast %[[S]] {to = bf16}
func.func @gather_fewer(%w: tensor<10x4xf32>, %i: tensor<3xi64>) -> (tensor<3x4xbf16>, tensor<2x4xbf16>) {
  %g = graph.Gather %w, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  %c = graph.Cast %g {to = bf16} : (tensor<3x4xf32>) -> tensor<3x4xbf16>
  %s = graph.Slice %w {axes = array<i64: 0>, ends = array<i64: 2>, starts = array<i64: 0>, steps = array<i64: 1>} : (tensor<10x4xf32>) -> tensor<2x4xf32>
  %d = graph.Cast %s {to = bf16} : (tensor<2x4xf32>) -> tensor<2x4xbf16>
  return %c, %d : tensor<3x4xbf16>, tensor<2x4xbf16>
}

// -----

// ...unless the table is a bf16 value cast to f32: the casts cancel.
// CHECK-LABEL: func.func @gather_cancel
// CHECK-SAME: (%[[W:.*]]: tensor<10x4xbf16>, %[[I:.*]]: tensor<3xi64>)
// CHECK-NOT: graph.Cast
// CHECK: %[[G:.*]] = graph.Gather %[[W]], %[[I]] : (tensor<10x4xbf16>, tensor<3xi64>) -> tensor<3x4xbf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[G]]
func.func @gather_cancel(%w: tensor<10x4xbf16>, %i: tensor<3xi64>) -> tensor<3x4xbf16> {
  %f = graph.Cast %w {to = f32} : (tensor<10x4xbf16>) -> tensor<10x4xf32>
  %g = graph.Gather %f, %i {axis = 0 : i64} : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
  %c = graph.Cast %g {to = bf16} : (tensor<3x4xf32>) -> tensor<3x4xbf16>
  return %c : tensor<3x4xbf16>
}

// -----

// A widening cast does not move down through an Expand (more elements).
// CHECK-LABEL: func.func @expand
// CHECK: %[[F:.*]] = graph.Cast %{{.*}} {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
// CHECK: graph.Expand %[[F]] {{.*}} : (tensor<4xf32>) -> tensor<3x4xf32>
func.func @expand(%x: tensor<4xbf16>) -> tensor<3x4xf32> {
  %f = graph.Cast %x {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %e = graph.Expand %f {shape = array<i64: 3, 4>} : (tensor<4xf32>) -> tensor<3x4xf32>
  return %e : tensor<3x4xf32>
}

// -----

// Two casts of one value to one type merge; a cast to another type stays.
// CHECK-LABEL: func.func @duplicates
// CHECK-SAME: (%[[X:.*]]: tensor<4xf32>)
// CHECK: %[[A:.*]] = graph.Cast %[[X]] {to = bf16}
// CHECK-NEXT: %[[H:.*]] = graph.Cast %[[X]] {to = f16}
// CHECK-NEXT: return %[[A]], %[[A]], %[[H]]
func.func @duplicates(%x: tensor<4xf32>) -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xf16>) {
  %a = graph.Cast %x {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %b = graph.Cast %x {to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %h = graph.Cast %x {to = f16} : (tensor<4xf32>) -> tensor<4xf16>
  return %a, %b, %h : tensor<4xbf16>, tensor<4xbf16>, tensor<4xf16>
}

// -----

// Ops keep their phase: a forward cast does not move into a backward
// Transpose (graph.grad_of), nor merge with a backward duplicate.
// CHECK-LABEL: func.func @phases
// CHECK: graph.Transpose %{{.*}} {graph.grad_of = 2 : i64, perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
// CHECK: graph.Cast %{{.*}} {graph.op_id = 2 : i64, to = bf16} : (tensor<3x2xf32>) -> tensor<3x2xbf16>
// CHECK: graph.Cast %{{.*}} {graph.op_id = 3 : i64, to = bf16} : (tensor<2x3xf32>)
// CHECK: graph.Cast %{{.*}} {graph.grad_of = 3 : i64, to = bf16} : (tensor<2x3xf32>)
func.func @phases(%x: tensor<2x3xf32>) -> (tensor<3x2xbf16>, tensor<2x3xbf16>, tensor<2x3xbf16>) {
  %t = graph.Transpose %x {graph.grad_of = 2 : i64, perm = array<i64: 1, 0>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %c = graph.Cast %t {graph.op_id = 2 : i64, to = bf16} : (tensor<3x2xf32>) -> tensor<3x2xbf16>
  %a = graph.Cast %x {graph.op_id = 3 : i64, to = bf16} : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  %b = graph.Cast %x {graph.grad_of = 3 : i64, to = bf16} : (tensor<2x3xf32>) -> tensor<2x3xbf16>
  return %c, %a, %b : tensor<3x2xbf16>, tensor<2x3xbf16>, tensor<2x3xbf16>
}

// -----

// Both casts of a cancelled round trip (op ids 5 and 6) are erased; the
// backward ops that named them name the nearest earlier forward op left
// (op id 4), so every graph.grad_of still names an op.
// CHECK-LABEL: func.func @grad_of_retargeted
// CHECK: graph.Tanh %{{.*}} {graph.op_id = 4 : i64}
// CHECK-NOT: graph.Cast
// CHECK: graph.Neg %{{.*}} {graph.grad_of = 4 : i64}
// CHECK: graph.Neg %{{.*}} {graph.grad_of = 4 : i64}
func.func @grad_of_retargeted(%x: tensor<4xbf16>) -> (tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>) {
  %y = graph.Tanh %x {graph.op_id = 4 : i64} : tensor<4xbf16>
  %f = graph.Cast %y {graph.op_id = 5 : i64, to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %l = graph.Cast %f {graph.op_id = 6 : i64, to = bf16} : (tensor<4xf32>) -> tensor<4xbf16>
  %d1 = graph.Neg %l {graph.grad_of = 6 : i64} : tensor<4xbf16>
  %d2 = graph.Neg %d1 {graph.grad_of = 5 : i64} : tensor<4xbf16>
  return %l, %d1, %d2 : tensor<4xbf16>, tensor<4xbf16>, tensor<4xbf16>
}

// -----

// ...but it does when the expanded value is cast back to bf16: the casts
// cancel and the Expand moves bf16.
// CHECK-LABEL: func.func @expand_cancel
// CHECK-SAME: (%[[X:.*]]: tensor<4xbf16>)
// CHECK-NOT: graph.Cast
// CHECK: %[[E:.*]] = graph.Expand %[[X]] {{.*}} : (tensor<4xbf16>) -> tensor<3x4xbf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[E]]
func.func @expand_cancel(%x: tensor<4xbf16>) -> tensor<3x4xbf16> {
  %f = graph.Cast %x {to = f32} : (tensor<4xbf16>) -> tensor<4xf32>
  %e = graph.Expand %f {shape = array<i64: 3, 4>} : (tensor<4xf32>) -> tensor<3x4xf32>
  %c = graph.Cast %e {to = bf16} : (tensor<3x4xf32>) -> tensor<3x4xbf16>
  return %c : tensor<3x4xbf16>
}

// -----

// The language-model loss of a bf16 step: the bf16 logits are cast to f32,
// reshaped to [N, V] and fed to the loss and its gradient, whose result is
// cast back to bf16 for the head's backward products. The widening cast
// moves below the Reshape, the loss and the gradient read the bf16 logits
// (the loss stays f32, the gradient is bf16) and no cast is left.
// CHECK-LABEL: func.func @sce_lm
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x8xbf16>, %[[Y:.*]]: tensor<6xi64>)
// CHECK-NOT: graph.Cast
// CHECK: %[[R:.*]] = graph.Reshape %[[X]] {{.*}} : (tensor<2x3x8xbf16>) -> tensor<6x8xbf16>
// CHECK: %[[L:.*]] = graph.SoftmaxCrossEntropyLoss %[[R]], %[[Y]] {{.*}} : (tensor<6x8xbf16>, tensor<6xi64>) -> tensor<f32>
// CHECK: %[[D:.*]] = graph.SoftmaxCrossEntropyLossGrad %{{.*}}, %[[R]], %[[Y]] {graph.grad_of = 2 : i64{{.*}}} : (tensor<f32>, tensor<6x8xbf16>, tensor<6xi64>) -> tensor<6x8xbf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[L]], %[[D]]
func.func @sce_lm(%x: tensor<2x3x8xbf16>, %y: tensor<6xi64>) -> (tensor<f32>, tensor<6x8xbf16>) {
  %f = graph.Cast %x {graph.op_id = 0 : i64, to = f32} : (tensor<2x3x8xbf16>) -> tensor<2x3x8xf32>
  %r = graph.Reshape %f {graph.op_id = 1 : i64, shape = array<i64: 6, 8>} : (tensor<2x3x8xf32>) -> tensor<6x8xf32>
  %l = graph.SoftmaxCrossEntropyLoss %r, %y {graph.op_id = 2 : i64, ignore_index = -100 : i64} : (tensor<6x8xf32>, tensor<6xi64>) -> tensor<f32>
  %one = graph.Constant dense<1.0> : tensor<f32> {graph.grad_of = 2 : i64}
  %d = graph.SoftmaxCrossEntropyLossGrad %one, %r, %y {graph.grad_of = 2 : i64, ignore_index = -100 : i64} : (tensor<f32>, tensor<6x8xf32>, tensor<6xi64>) -> tensor<6x8xf32>
  %c = graph.Cast %d {graph.grad_of = 0 : i64, to = bf16} : (tensor<6x8xf32>) -> tensor<6x8xbf16>
  return %l, %c : tensor<f32>, tensor<6x8xbf16>
}

// -----

// f16 scores and class weights: the loss reads the f16 scores (weights stay
// f32); the gradient reads them and is f16.
// CHECK-LABEL: func.func @sce_f16_weights
// CHECK-SAME: (%[[X:.*]]: tensor<4x5xf16>, %[[Y:.*]]: tensor<4xi64>, %[[W:.*]]: tensor<5xf32>, %[[DL:.*]]: tensor<f32>)
// CHECK-NOT: graph.Cast
// CHECK: graph.SoftmaxCrossEntropyLoss %[[X]], %[[Y]], %[[W]] : (tensor<4x5xf16>, tensor<4xi64>, tensor<5xf32>) -> tensor<f32>
// CHECK: graph.SoftmaxCrossEntropyLossGrad %[[DL]], %[[X]], %[[Y]], %[[W]] {{.*}} -> tensor<4x5xf16>
// CHECK-NOT: graph.Cast
func.func @sce_f16_weights(%x: tensor<4x5xf16>, %y: tensor<4xi64>, %w: tensor<5xf32>, %dl: tensor<f32>) -> (tensor<f32>, tensor<4x5xf16>) {
  %f = graph.Cast %x {to = f32} : (tensor<4x5xf16>) -> tensor<4x5xf32>
  %l = graph.SoftmaxCrossEntropyLoss %f, %y, %w : (tensor<4x5xf32>, tensor<4xi64>, tensor<5xf32>) -> tensor<f32>
  %d = graph.SoftmaxCrossEntropyLossGrad %dl, %f, %y, %w : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>, tensor<5xf32>) -> tensor<4x5xf32>
  %c = graph.Cast %d {to = f16} : (tensor<4x5xf32>) -> tensor<4x5xf16>
  return %l, %c : tensor<f32>, tensor<4x5xf16>
}

// -----

// Not exact, so not rewritten: the gradient used in f32 (the f32 Add would
// read a rounded value), the gradient of bf16 scores cast to f16, and an f32
// gradient of f32 scores cast to bf16 (no widening cast to fold). Each loss
// still reads its 16-bit scores (the loss alone is always exact).
// CHECK-LABEL: func.func @sce_not_exact
// CHECK-SAME: (%[[X:.*]]: tensor<4x5xbf16>, %[[Y:.*]]: tensor<4xi64>, %[[DL:.*]]: tensor<f32>, %[[Z:.*]]: tensor<4x5xf32>)
// CHECK: %[[F:.*]] = graph.Cast %[[X]] {to = f32}
// CHECK: graph.SoftmaxCrossEntropyLoss %[[X]], %[[Y]] {{.*}} -> tensor<f32>
// CHECK: %[[D:.*]] = graph.SoftmaxCrossEntropyLossGrad %[[DL]], %[[F]], %[[Y]] {{.*}} -> tensor<4x5xf32>
// CHECK: graph.Cast %[[D]] {to = bf16}
// CHECK: graph.Add %[[D]], %[[Z]]
// CHECK: %[[D2:.*]] = graph.SoftmaxCrossEntropyLossGrad %[[DL]], %[[F]], %[[Y]] {{.*}} -> tensor<4x5xf32>
// CHECK: graph.Cast %[[D2]] {to = f16}
// CHECK: %[[D3:.*]] = graph.SoftmaxCrossEntropyLossGrad %[[DL]], %[[Z]], %[[Y]] {{.*}} -> tensor<4x5xf32>
// CHECK: graph.Cast %[[D3]] {to = bf16}
func.func @sce_not_exact(%x: tensor<4x5xbf16>, %y: tensor<4xi64>, %dl: tensor<f32>, %z: tensor<4x5xf32>) -> (tensor<f32>, tensor<4x5xbf16>, tensor<4x5xf32>, tensor<4x5xf16>, tensor<4x5xbf16>) {
  %f = graph.Cast %x {to = f32} : (tensor<4x5xbf16>) -> tensor<4x5xf32>
  %l = graph.SoftmaxCrossEntropyLoss %f, %y : (tensor<4x5xf32>, tensor<4xi64>) -> tensor<f32>
  %d = graph.SoftmaxCrossEntropyLossGrad %dl, %f, %y : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  %c = graph.Cast %d {to = bf16} : (tensor<4x5xf32>) -> tensor<4x5xbf16>
  %a = graph.Add %d, %z : (tensor<4x5xf32>, tensor<4x5xf32>) -> tensor<4x5xf32>
  %d2 = graph.SoftmaxCrossEntropyLossGrad %dl, %f, %y : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  %h = graph.Cast %d2 {to = f16} : (tensor<4x5xf32>) -> tensor<4x5xf16>
  %d3 = graph.SoftmaxCrossEntropyLossGrad %dl, %z, %y : (tensor<f32>, tensor<4x5xf32>, tensor<4xi64>) -> tensor<4x5xf32>
  %c3 = graph.Cast %d3 {to = bf16} : (tensor<4x5xf32>) -> tensor<4x5xbf16>
  return %l, %c, %a, %h, %c3 : tensor<f32>, tensor<4x5xbf16>, tensor<4x5xf32>, tensor<4x5xf16>, tensor<4x5xbf16>
}

// -----

// A transformer block's LayerNorm feeding a bf16 product, and its backward:
// the norm writes bf16 Y itself (its cast folds in), the gradient reads the
// bf16 dY (its widening cast folds in; dX, dScale, dB stay f32), and the
// weight gradient's widening cast folds into AccumulateGrad (f32 total).
// CHECK-LABEL: func.func @layer_norm_block
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[S:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>, %[[DY:.*]]: tensor<4x8xbf16>, %[[G:.*]]: tensor<8x8xbf16>)
// CHECK-NOT: graph.Cast
// CHECK: %[[Y:.*]] = graph.LayerNormalization %[[X]], %[[S]], %[[B]] {graph.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xbf16>
// CHECK: %[[DX:.*]], %{{.*}}, %{{.*}} = graph.LayerNormalizationGrad %[[DY]], %[[X]], %[[S]] {graph.grad_of = 0 : i64} : (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK: %[[T:.*]] = graph.AccumulateGrad %[[G]] for @w {micro_batches = 1 : i64} : tensor<8x8xbf16> -> tensor<8x8xf32>
// CHECK-NOT: graph.Cast
// CHECK: return %[[Y]], %[[DX]], %[[T]]
func.func @layer_norm_block(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %b: tensor<8xf32>, %dy: tensor<4x8xbf16>, %g: tensor<8x8xbf16>) -> (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<8x8xf32>) {
  %y = graph.LayerNormalization %x, %s, %b {graph.op_id = 0 : i64} : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c = graph.Cast %y {graph.op_id = 1 : i64, to = bf16} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %w = graph.Cast %dy {graph.grad_of = 1 : i64, to = f32} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %dx:3 = graph.LayerNormalizationGrad %w, %x, %s {graph.grad_of = 0 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %gf = graph.Cast %g {graph.grad_of = 1 : i64, to = f32} : (tensor<8x8xbf16>) -> tensor<8x8xf32>
  %t = graph.AccumulateGrad %gf for @w {micro_batches = 1 : i64} : tensor<8x8xf32>
  return %c, %dx#0, %t : tensor<4x8xbf16>, tensor<4x8xf32>, tensor<8x8xf32>
}

// -----

// An f16 norm read by two products (one cast per use): the duplicate casts
// merge first, then the norm writes f16.
// CHECK-LABEL: func.func @layer_norm_two_casts
// CHECK-NOT: graph.Cast
// CHECK: %[[Y:.*]] = graph.LayerNormalization {{.*}} -> tensor<4x8xf16>
// CHECK-NOT: graph.Cast
// CHECK: return %[[Y]], %[[Y]]
func.func @layer_norm_two_casts(%x: tensor<4x8xf32>, %s: tensor<8xf32>) -> (tensor<4x8xf16>, tensor<4x8xf16>) {
  %y = graph.LayerNormalization %x, %s : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %a = graph.Cast %y {to = f16} : (tensor<4x8xf32>) -> tensor<4x8xf16>
  %b = graph.Cast %y {to = f16} : (tensor<4x8xf32>) -> tensor<4x8xf16>
  return %a, %b : tensor<4x8xf16>, tensor<4x8xf16>
}

// -----

// Not rewritten: a norm whose f32 Y is also used in f32 (the Add would read
// a rounded value), a forward norm cast in the backward (phases differ), and
// an f64 gradient (only 16-bit widening casts fold). A widening cast with
// another user stays for it, while the gradient and the accumulation read
// its bf16 input.
// CHECK-LABEL: func.func @layer_norm_not_exact
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[S:.*]]: tensor<8xf32>, %[[DY:.*]]: tensor<4x8xbf16>, %[[G:.*]]: tensor<4x8xf32>)
// CHECK: %[[Y:.*]] = graph.LayerNormalization %[[X]], %[[S]] : {{.*}} -> tensor<4x8xf32>
// CHECK: graph.Cast %[[Y]] {to = bf16}
// CHECK: graph.Add %[[Y]], %[[X]]
// CHECK: %[[Y2:.*]] = graph.LayerNormalization %[[X]], %[[S]] {graph.op_id = 7 : i64} : {{.*}} -> tensor<4x8xf32>
// CHECK: graph.Cast %[[Y2]] {graph.grad_of = 7 : i64, to = bf16}
// CHECK: %[[W:.*]] = graph.Cast %[[DY]] {to = f32}
// CHECK: graph.LayerNormalizationGrad %[[DY]], %[[X]], %[[S]] : (tensor<4x8xbf16>,
// CHECK: graph.AccumulateGrad %[[DY]] for @v {micro_batches = 2 : i64} : tensor<4x8xbf16> -> tensor<4x8xf32>
// CHECK: %[[R:.*]] = graph.Cast %[[G]] {to = f64}
// CHECK: graph.AccumulateGrad %[[R]] for @u {micro_batches = 1 : i64} : tensor<4x8xf64>{{$}}
func.func @layer_norm_not_exact(%x: tensor<4x8xf32>, %s: tensor<8xf32>, %dy: tensor<4x8xbf16>, %g: tensor<4x8xf32>) -> (tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf64>) {
  %y = graph.LayerNormalization %x, %s : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c = graph.Cast %y {to = bf16} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %a = graph.Add %y, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %y2 = graph.LayerNormalization %x, %s {graph.op_id = 7 : i64} : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %c2 = graph.Cast %y2 {graph.grad_of = 7 : i64, to = bf16} : (tensor<4x8xf32>) -> tensor<4x8xbf16>
  %w = graph.Cast %dy {to = f32} : (tensor<4x8xbf16>) -> tensor<4x8xf32>
  %dx:3 = graph.LayerNormalizationGrad %w, %x, %s : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %t = graph.AccumulateGrad %w for @v {micro_batches = 2 : i64} : tensor<4x8xf32>
  %r = graph.Cast %g {to = f64} : (tensor<4x8xf32>) -> tensor<4x8xf64>
  %u = graph.AccumulateGrad %r for @u {micro_batches = 1 : i64} : tensor<4x8xf64>
  return %c, %a, %c2, %dx#0, %t, %w, %u : tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xbf16>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4x8xf64>
}

// -----

// Rule 12: LLaMA's rotation of a bf16 projection (widened by autocast) back
// to bf16 for the attention runs on the bf16 value, as does its adjoint on
// the gradient; the f32 tables stay. A rotation whose f32 result has another
// user keeps its casts.
// CHECK-LABEL: func.func @rotary
// CHECK-SAME: (%[[Q:.*]]: tensor<2x8xbf16>, %[[C:.*]]: tensor<8xf32>, %[[S:.*]]: tensor<8xf32>, %[[DQ:.*]]: tensor<2x8xbf16>)
// CHECK-NEXT: %[[W:.*]] = graph.Cast %[[Q]] {{.*}}to = f32
// CHECK-NEXT: %[[R:.*]] = graph.FusedRotaryEmbedding %[[Q]], %[[C]], %[[S]] {graph.op_id = 1 : i64} : (tensor<2x8xbf16>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xbf16>
// CHECK-NEXT: %[[G:.*]] = graph.FusedRotaryEmbedding %[[DQ]], %[[C]], %[[S]] {adjoint = 1 : i64, graph.grad_of = 1 : i64} : (tensor<2x8xbf16>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xbf16>
// CHECK-NEXT: %[[K:.*]] = graph.FusedRotaryEmbedding %[[W]], %[[C]], %[[S]] {graph.op_id = 5 : i64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
// CHECK-NEXT: %[[KN:.*]] = graph.Cast %[[K]] {{.*}}to = bf16
// CHECK-NEXT: return %[[R]], %[[G]], %[[KN]], %[[K]]
func.func @rotary(%q: tensor<2x8xbf16>, %cos: tensor<8xf32>, %sin: tensor<8xf32>, %dq: tensor<2x8xbf16>) -> (tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xf32>) {
  %w = graph.Cast %q {graph.op_id = 0 : i64, to = f32} : (tensor<2x8xbf16>) -> tensor<2x8xf32>
  %r = graph.FusedRotaryEmbedding %w, %cos, %sin {graph.op_id = 1 : i64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %n = graph.Cast %r {graph.op_id = 2 : i64, to = bf16} : (tensor<2x8xf32>) -> tensor<2x8xbf16>
  %dw = graph.Cast %dq {graph.grad_of = 2 : i64, to = f32} : (tensor<2x8xbf16>) -> tensor<2x8xf32>
  %g = graph.FusedRotaryEmbedding %dw, %cos, %sin {adjoint = 1 : i64, graph.grad_of = 1 : i64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %gn = graph.Cast %g {graph.grad_of = 0 : i64, to = bf16} : (tensor<2x8xf32>) -> tensor<2x8xbf16>
  %w2 = graph.Cast %q {graph.op_id = 4 : i64, to = f32} : (tensor<2x8xbf16>) -> tensor<2x8xf32>
  %k = graph.FusedRotaryEmbedding %w2, %cos, %sin {graph.op_id = 5 : i64} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %kn = graph.Cast %k {graph.op_id = 6 : i64, to = bf16} : (tensor<2x8xf32>) -> tensor<2x8xbf16>
  return %n, %gn, %kn, %k : tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xbf16>, tensor<2x8xf32>
}
