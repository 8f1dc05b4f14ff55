// RUN: strait-opt %s -split-input-file -verify-diagnostics

// q_select is [axis, index] ...
func.func @select_arity(%p: tensor<2x5x3x4xf32>, %k: tensor<2x4x5xf32>) {
  // expected-error@+2 {{FusedAttention: q_select [2] must be [axis, index]}}
  // expected-error@+1 {{failed to infer returned types}}
  %y, %l = graph.FusedAttention %p, %k, %p {q_select = array<i64: 2>, scale = 0.5 : f32, v_select = array<i64: 2, 2>} : (tensor<2x5x3x4xf32>, tensor<2x4x5xf32>, tensor<2x5x3x4xf32>) -> (tensor<2x5x4xf32>, tensor<2x5xf32>)
  return
}

// -----

// ... with an axis of the operand's tensor ...
func.func @select_axis(%p: tensor<2x5x3x4xf32>, %k: tensor<2x4x5xf32>) {
  // expected-error@+2 {{FusedAttention: kt_select axis 4 is out of range for [2x5x3x4]}}
  // expected-error@+1 {{failed to infer returned types}}
  %y, %l = graph.FusedAttention %p, %p, %p {kt_select = array<i64: 4, 1>, q_select = array<i64: 2, 0>, scale = 0.5 : f32, v_select = array<i64: 2, 2>} : (tensor<2x5x3x4xf32>, tensor<2x5x3x4xf32>, tensor<2x5x3x4xf32>) -> (tensor<2x5x4xf32>, tensor<2x5xf32>)
  return
}

// -----

// ... and an index within that dimension.
func.func @select_index(%p: tensor<2x5x3x4xf32>, %k: tensor<2x4x5xf32>) {
  // expected-error@+2 {{FusedAttention: v_select index 3 is out of range for dimension 2 of [2x5x3x4]}}
  // expected-error@+1 {{failed to infer returned types}}
  %y, %l = graph.FusedAttention %p, %k, %p {q_select = array<i64: 2, 0>, scale = 0.5 : f32, v_select = array<i64: 2, 3>} : (tensor<2x5x3x4xf32>, tensor<2x4x5xf32>, tensor<2x5x3x4xf32>) -> (tensor<2x5x4xf32>, tensor<2x5xf32>)
  return
}

// -----

// The permutation applies to the slice: q_perm has the slice's rank.
func.func @perm_of_slice(%p: tensor<2x5x3x4xf32>, %k: tensor<2x4x5xf32>) {
  // expected-error@+2 {{FusedAttention: q_perm [0x2x1x3] is not a permutation of the operands' 3 dimensions}}
  // expected-error@+1 {{failed to infer returned types}}
  %y, %l = graph.FusedAttention %p, %k, %p {q_perm = array<i64: 0, 2, 1, 3>, q_select = array<i64: 2, 0>, scale = 0.5 : f32, v_select = array<i64: 2, 2>} : (tensor<2x5x3x4xf32>, tensor<2x4x5xf32>, tensor<2x5x3x4xf32>) -> (tensor<2x5x4xf32>, tensor<2x5xf32>)
  return
}

// -----

// FusedAttentionGrad's gradients are the slices' types, never packed.
func.func @grad_packed_result(%p: tensor<2x5x3x4xf32>, %k: tensor<2x4x5xf32>, %y: tensor<2x5x4xf32>, %lse: tensor<2x5xf32>) {
  // expected-error@+2 {{'graph.FusedAttentionGrad' op inferred type(s) 'tensor<2x5x4xf32>', 'tensor<2x4x5xf32>', 'tensor<2x5x4xf32>' are incompatible with return type(s) of operation 'tensor<2x5x3x4xf32>', 'tensor<2x4x5xf32>', 'tensor<2x5x4xf32>'}}
  // expected-error@+1 {{'graph.FusedAttentionGrad' op failed to infer returned types}}
  %dq, %dk, %dv = graph.FusedAttentionGrad %y, %p, %k, %p, %y, %lse {q_select = array<i64: 2, 0>, scale = 0.5 : f32, v_select = array<i64: 2, 2>} : (tensor<2x5x4xf32>, tensor<2x5x3x4xf32>, tensor<2x4x5xf32>, tensor<2x5x3x4xf32>, tensor<2x5x4xf32>, tensor<2x5xf32>) -> (tensor<2x5x3x4xf32>, tensor<2x4x5xf32>, tensor<2x5x4xf32>)
  return
}

// -----

// packed_grad needs Q, Kt and V to be slices 0, 1, 2 of one axis of size 3.
func.func @packed_grad_indices(%p: tensor<2x5x3x3x4xf32>, %y: tensor<2x5x3x4xf32>, %lse: tensor<2x3x5xf32>) {
  // expected-error@+2 {{FusedAttentionGrad: packed_grad needs q_select, kt_select and v_select to take indices 0, 1, 2 of one axis of size 3, each once}}
  // expected-error@+1 {{failed to infer returned types}}
  %g = graph.FusedAttentionGrad %y, %p, %p, %p, %y, %lse {kt_perm = array<i64: 0, 2, 3, 1>, kt_select = array<i64: 2, 1>, packed_grad = 1 : i64, q_perm = array<i64: 0, 2, 1, 3>, q_select = array<i64: 2, 0>, scale = 0.5 : f32, v_perm = array<i64: 0, 2, 1, 3>, v_select = array<i64: 2, 1>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x3x4xf32>, tensor<2x5x3x3x4xf32>, tensor<2x5x3x3x4xf32>, tensor<2x5x3x3x4xf32>, tensor<2x5x3x4xf32>, tensor<2x3x5xf32>) -> tensor<2x5x3x3x4xf32>
  return
}

// -----

// ... and its one result is the packed tensor's gradient, of its type.
func.func @packed_grad_result(%p: tensor<2x5x3x3x4xf32>, %y: tensor<2x5x3x4xf32>, %lse: tensor<2x3x5xf32>) {
  // expected-error@+2 {{'graph.FusedAttentionGrad' op inferred type(s) 'tensor<2x5x3x3x4xf32>' are incompatible with return type(s) of operation 'tensor<2x5x3x4xf32>', 'tensor<2x5x3x4xf32>', 'tensor<2x5x3x4xf32>'}}
  // expected-error@+1 {{'graph.FusedAttentionGrad' op failed to infer returned types}}
  %dq, %dk, %dv = graph.FusedAttentionGrad %y, %p, %p, %p, %y, %lse {kt_perm = array<i64: 0, 2, 3, 1>, kt_select = array<i64: 2, 1>, packed_grad = 1 : i64, q_perm = array<i64: 0, 2, 1, 3>, q_select = array<i64: 2, 0>, scale = 0.5 : f32, v_perm = array<i64: 0, 2, 1, 3>, v_select = array<i64: 2, 2>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x5x3x4xf32>, tensor<2x5x3x3x4xf32>, tensor<2x5x3x3x4xf32>, tensor<2x5x3x3x4xf32>, tensor<2x5x3x4xf32>, tensor<2x3x5xf32>) -> (tensor<2x5x3x4xf32>, tensor<2x5x3x4xf32>, tensor<2x5x3x4xf32>)
  return
}
