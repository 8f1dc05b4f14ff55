// RUN: strait-opt %s -split-input-file -verify-diagnostics

// X1: X and W of one float type.
func.func @mixed_types(%x: tensor<6x7xf32>, %w: tensor<3x4x7xbf16>, %i: tensor<6xi64>) {
  // expected-error@+2 {{GroupedMatMul (X1): X and W must be f32, bf16 or f16 of one type, got 'f32' and 'bf16'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.GroupedMatMul %x, %w, %i {transB = 1 : i64} : (tensor<6x7xf32>, tensor<3x4x7xbf16>, tensor<6xi64>) -> tensor<6x4xf32>
  return
}

// -----

// X1: integer indices of 32 or 64 bits.
func.func @float_indices(%x: tensor<6x7xf32>, %w: tensor<3x4x7xf32>, %i: tensor<6xf32>) {
  // expected-error@+2 {{GroupedMatMul (X1): indices must be i32 or i64, got 'f32'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.GroupedMatMul %x, %w, %i {transB = 1 : i64} : (tensor<6x7xf32>, tensor<3x4x7xf32>, tensor<6xf32>) -> tensor<6x4xf32>
  return
}

// -----

// X1: one index per row of X.
func.func @row_count(%x: tensor<6x7xf32>, %w: tensor<3x4x7xf32>, %i: tensor<5xi64>) {
  // expected-error@+2 {{have different row counts}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.GroupedMatMul %x, %w, %i {transB = 1 : i64} : (tensor<6x7xf32>, tensor<3x4x7xf32>, tensor<5xi64>) -> tensor<6x4xf32>
  return
}

// -----

// X1: X's inner dimension is W's I in the layout transB names ([E, I, O]
// for transB = 0: here I would be 4).
func.func @inner_dimension(%x: tensor<6x7xf32>, %w: tensor<3x4x7xf32>, %i: tensor<6xi64>) {
  // expected-error@+2 {{(transB = 0) have different inner dimensions}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.GroupedMatMul %x, %w, %i {transB = 0 : i64} : (tensor<6x7xf32>, tensor<3x4x7xf32>, tensor<6xi64>) -> tensor<6x7xf32>
  return
}

// -----

// X1: W is a rank-3 table of experts.
func.func @w_rank(%x: tensor<6x7xf32>, %w: tensor<4x7xf32>, %i: tensor<6xi64>) {
  // expected-error@+2 {{GroupedMatMul (X1): W must be [E, O, I] or [E, I, O]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.GroupedMatMul %x, %w, %i {transB = 1 : i64} : (tensor<6x7xf32>, tensor<4x7xf32>, tensor<6xi64>) -> tensor<6x4xf32>
  return
}

// -----

// transB is 0 or 1.
func.func @trans_b(%x: tensor<6x7xf32>, %w: tensor<3x4x7xf32>, %i: tensor<6xi64>) {
  // expected-error@+1 {{attribute 'transB' failed to satisfy constraint}}
  %0 = graph.GroupedMatMul %x, %w, %i {transB = 2 : i64} : (tensor<6x7xf32>, tensor<3x4x7xf32>, tensor<6xi64>) -> tensor<6x4xf32>
  return
}

// -----

// X2: dY [S, O] with X's S.
func.func @grad_rows(%x: tensor<6x7xf32>, %dy: tensor<5x4xf32>, %i: tensor<6xi64>) {
  // expected-error@+2 {{GroupedMatMulGradWeight (X2): dY must be [S, O] with X's S}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.GroupedMatMulGradWeight %x, %dy, %i {num_experts = 3 : i64, transB = 1 : i64} : (tensor<6x7xf32>, tensor<5x4xf32>, tensor<6xi64>) -> tensor<3x4x7xf32>
  return
}

// -----

// X2: at least one expert.
func.func @grad_no_experts(%x: tensor<6x7xf32>, %dy: tensor<6x4xf32>, %i: tensor<6xi64>) {
  // expected-error@+1 {{attribute 'num_experts' failed to satisfy constraint}}
  %0 = graph.GroupedMatMulGradWeight %x, %dy, %i {num_experts = 0 : i64, transB = 1 : i64} : (tensor<6x7xf32>, tensor<6x4xf32>, tensor<6xi64>) -> tensor<0x4x7xf32>
  return
}
