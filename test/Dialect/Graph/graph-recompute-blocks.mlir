// RUN: strait-opt %s --pass-pipeline='builtin.module(func.func(graph-recompute-blocks))' -split-input-file -verify-diagnostics | FileCheck %s

// Two blocks (the layer keys l.0 and l.1 of their weights). Each block's
// forward is cloned right before its first backward op, with that op's
// graph.grad_of and graph.recomputed, and the block's backward reads the
// clones. Block 1's weight gradient reads block 0's output, block 1's input:
// that one stays the forward value (it is what a recomputing stage keeps).
// CHECK-LABEL: func.func @two_blocks
// CHECK-SAME: (%[[X:.*]]: tensor<2x4xf32>, %[[G:.*]]: tensor<2x4xf32>)
// CHECK: %[[W0:.*]] = graph.ReadVariable @l.0.w
// CHECK: %[[W1:.*]] = graph.ReadVariable @l.1.w
// CHECK: %[[H0:.*]] = graph.MatMul %[[X]], %[[W0]] {graph.op_id = 1 : i64}
// CHECK: %[[A0:.*]] = graph.Tanh %[[H0]] {graph.op_id = 2 : i64}
// CHECK: %[[H1:.*]] = graph.MatMul %[[A0]], %[[W1]] {graph.op_id = 3 : i64}
// CHECK: graph.Tanh %[[H1]] {graph.op_id = 4 : i64}
// CHECK-NEXT: %[[RH1:.*]] = graph.MatMul %[[A0]], %[[W1]] {graph.grad_of = 4 : i64, graph.recomputed}
// CHECK-NEXT: %[[RA1:.*]] = graph.Tanh %[[RH1]] {graph.grad_of = 4 : i64, graph.recomputed}
// CHECK-NEXT: %[[S1:.*]] = graph.Mul %[[RA1]], %[[RA1]] {graph.grad_of = 4 : i64}
// CHECK-NEXT: %[[D1:.*]] = graph.Mul %[[G]], %[[S1]] {graph.grad_of = 4 : i64}
// CHECK-NEXT: %[[GW1:.*]] = graph.Mul %[[D1]], %[[A0]] {graph.grad_of = 3 : i64}
// CHECK-NEXT: %[[DX1:.*]] = graph.MatMul %[[D1]], %[[W1]] {graph.grad_of = 3 : i64}
// CHECK-NEXT: %[[RH0:.*]] = graph.MatMul %[[X]], %[[W0]] {graph.grad_of = 2 : i64, graph.recomputed}
// CHECK-NEXT: %[[RA0:.*]] = graph.Tanh %[[RH0]] {graph.grad_of = 2 : i64, graph.recomputed}
// CHECK-NEXT: %[[S0:.*]] = graph.Mul %[[RA0]], %[[RA0]] {graph.grad_of = 2 : i64}
// CHECK-NEXT: graph.Mul %[[DX1]], %[[S0]] {graph.grad_of = 2 : i64}
module {
  graph.Variable @l.0.w : tensor<4x4xf32> = dense<1.0> : tensor<4x4xf32>
  graph.Variable @l.1.w : tensor<4x4xf32> = dense<1.0> : tensor<4x4xf32>
  func.func @two_blocks(%x: tensor<2x4xf32>, %g: tensor<2x4xf32>) -> (tensor<2x4xf32>, tensor<2x4xf32>) {
    %w0 = graph.ReadVariable @l.0.w : tensor<4x4xf32>
    %w1 = graph.ReadVariable @l.1.w : tensor<4x4xf32>
    %h0 = graph.MatMul %x, %w0 {graph.op_id = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a0 = graph.Tanh %h0 {graph.op_id = 2 : i64} : tensor<2x4xf32>
    %h1 = graph.MatMul %a0, %w1 {graph.op_id = 3 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a1 = graph.Tanh %h1 {graph.op_id = 4 : i64} : tensor<2x4xf32>
    %s1 = graph.Mul %a1, %a1 {graph.grad_of = 4 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %d1 = graph.Mul %g, %s1 {graph.grad_of = 4 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %gw1 = graph.Mul %d1, %a0 {graph.grad_of = 3 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %dx1 = graph.MatMul %d1, %w1 {graph.grad_of = 3 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %s0 = graph.Mul %a0, %a0 {graph.grad_of = 2 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %d0 = graph.Mul %dx1, %s0 {graph.grad_of = 2 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %gw0 = graph.Mul %d0, %x {graph.grad_of = 1 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %gw1, %gw0 : tensor<2x4xf32>, tensor<2x4xf32>
  }
}

// -----

// A block with a random op would draw other values in its recomputation:
// it is left alone (a warning); the backward reads the forward's values.
// CHECK-LABEL: func.func @random_block
// CHECK-NOT: graph.recomputed
// CHECK: return
module {
  graph.Variable @l.0.w : tensor<4x4xf32> = dense<1.0> : tensor<4x4xf32>
  func.func @random_block(%x: tensor<2x4xf32>, %g: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %w0 = graph.ReadVariable @l.0.w : tensor<4x4xf32>
    %h0 = graph.MatMul %x, %w0 {graph.op_id = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    // expected-warning @+1 {{block 0 is not recomputed: 'graph.Dropout' would draw other random values in the backward}}
    %r0 = graph.Dropout %h0 {graph.op_id = 2 : i64, ratio = 1.0e-01 : f32} : tensor<2x4xf32>
    %a0 = graph.Tanh %r0 {graph.op_id = 3 : i64} : tensor<2x4xf32>
    %s0 = graph.Mul %a0, %a0 {graph.grad_of = 3 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %d0 = graph.Mul %g, %s0 {graph.grad_of = 3 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %d0 : tensor<2x4xf32>
  }
}

// -----

// A forward-only function has no backward to recompute in.
module {
  graph.Variable @l.0.w : tensor<4x4xf32> = dense<1.0> : tensor<4x4xf32>
  // expected-error @+1 {{activation recomputation needs a training step (a backward pass: graph.grad_of ops; straitc --loss)}}
  func.func @forward_only(%x: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %w0 = graph.ReadVariable @l.0.w : tensor<4x4xf32>
    %h0 = graph.MatMul %x, %w0 {graph.op_id = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    return %h0 : tensor<2x4xf32>
  }
}

// -----

// Weights without a numeric path component name no blocks.
module {
  graph.Variable @dense.weight : tensor<4x4xf32> = dense<1.0> : tensor<4x4xf32>
  // expected-error @+1 {{activation recomputation needs blocks: no weight name has a numeric path component (as in 'model.layers.3.mlp.weight')}}
  func.func @no_blocks(%x: tensor<2x4xf32>, %g: tensor<2x4xf32>) -> tensor<2x4xf32> {
    %w0 = graph.ReadVariable @dense.weight : tensor<4x4xf32>
    %h0 = graph.MatMul %x, %w0 {graph.op_id = 1 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %a0 = graph.Tanh %h0 {graph.op_id = 2 : i64} : tensor<2x4xf32>
    %s0 = graph.Mul %a0, %a0 {graph.grad_of = 2 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    %d0 = graph.Mul %g, %s0 {graph.grad_of = 2 : i64} : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
    return %d0 : tensor<2x4xf32>
  }
}
