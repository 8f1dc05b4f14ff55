// RUN: strait-opt %s -split-input-file -verify-diagnostics

// Q, Kt and V share one element type ...
func.func @dtype_mix(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x4xbf16>, %v: tensor<2x4x8xf32>) {
  // expected-error@+2 {{FusedAttention: Q, Kt and V element types differ ('f32', 'bf16', 'f32')}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x8x4xbf16>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

// ... which is a float type the kernels have.
func.func @dtype_int(%q: tensor<4x8xi32>, %kt: tensor<8x4xi32>, %v: tensor<4x8xi32>) {
  // expected-error@+2 {{FusedAttention: element type 'i32' is not f32, bf16 or f16}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<4x8xi32>, tensor<8x4xi32>, tensor<4x8xi32>) -> (tensor<4x8xi32>, tensor<4xf32>)
  return
}

// -----

// Q is at least [Tq, D].
func.func @rank_one(%q: tensor<8xf32>, %kt: tensor<8xf32>, %v: tensor<8xf32>) {
  // expected-error@+2 {{FusedAttention: Q must have rank >= 2 ([b..., Tq, D]), got [8]}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<8xf32>, tensor<f32>)
  return
}

// -----

// Q, Kt and V have one rank (no broadcasting of batch dims).
func.func @rank_mismatch(%q: tensor<2x4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error@+2 {{FusedAttention: Q, Kt and V must have the same rank, got [2x4x8], [8x4], [2x4x8]}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<8x4xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

// The batch dims are identical.
func.func @batch_mismatch(%q: tensor<2x3x4x8xf32>, %kt: tensor<2x1x8x4xf32>, %v: tensor<2x3x4x8xf32>) {
  // expected-error@+2 {{FusedAttention: batch dimension 1 differs: Q [2x3x4x8], Kt [2x1x8x4], V [2x3x4x8]}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x3x4x8xf32>, tensor<2x1x8x4xf32>, tensor<2x3x4x8xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>)
  return
}

// -----

// Q's last dim and Kt's second-to-last are D.
func.func @d_mismatch(%q: tensor<2x4x8xf32>, %kt: tensor<2x6x4xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error@+2 {{FusedAttention: Q [2x4x8] and Kt [2x6x4] disagree on D (Q's last dimension, Kt's second-to-last)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x6x4xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

// Kt's last dim and V's second-to-last are Tk.
func.func @tk_mismatch(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x5xf32>, %v: tensor<2x4x8xf32>) {
  // expected-error@+2 {{FusedAttention: Kt [2x8x5] and V [2x4x8] disagree on Tk (Kt's last dimension, V's second-to-last)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x8x5xf32>, tensor<2x4x8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

// The bias broadcasts to the scores [b..., Tq, Tk] ...
func.func @bias_not_broadcastable(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x6xf32>, %v: tensor<2x6x8xf32>, %m: tensor<4x4xf32>) {
  // expected-error@+2 {{FusedAttention: Bias [4x4] does not broadcast to the scores [2x4x6] (dimension 2)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v, %m {scale = 1.0 : f32} : (tensor<2x4x8xf32>, tensor<2x8x6xf32>, tensor<2x6x8xf32>, tensor<4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return
}

// -----

// ... without adding dims to them ...
func.func @bias_rank(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>, %m: tensor<2x4x4xf32>) {
  // expected-error@+2 {{FusedAttention: Bias rank 3 exceeds Q's rank 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v, %m {scale = 1.0 : f32} : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<2x4x4xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  return
}

// -----

// ... and is f32 or of Q's element type.
func.func @bias_dtype(%q: tensor<4x8xbf16>, %kt: tensor<8x4xbf16>, %v: tensor<4x8xbf16>, %m: tensor<4x4xf16>) {
  // expected-error@+2 {{FusedAttention: Bias element type 'f16' is neither f32 nor Q's 'bf16'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v, %m {scale = 1.0 : f32} : (tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<4x8xbf16>, tensor<4x4xf16>) -> (tensor<4x8xbf16>, tensor<4xf32>)
  return
}

// -----

// Y has Q's element type and LSE is f32 [b..., Tq].
func.func @lse_type(%q: tensor<4x8xbf16>, %kt: tensor<8x4xbf16>, %v: tensor<4x8xbf16>) {
  // expected-error@+2 {{'graph.FusedAttention' op inferred type(s) 'tensor<4x8xbf16>', 'tensor<4xf32>' are incompatible with return type(s) of operation 'tensor<4x8xbf16>', 'tensor<4xbf16>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<4x8xbf16>) -> (tensor<4x8xbf16>, tensor<4xbf16>)
  return
}

// -----

// causal is 0 or 1.
func.func @causal_range(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) {
  // expected-error@+1 {{'graph.FusedAttention' op attribute 'causal' failed to satisfy constraint: 64-bit signless integer attribute whose minimum value is 0 whose maximum value is 1}}
  %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32, causal = 2 : i64} : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  return
}

// -----

// scale is required.
func.func @scale_missing(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) {
  // expected-error@+1 {{'graph.FusedAttention' op requires attribute 'scale'}}
  %y:2 = graph.FusedAttention %q, %kt, %v : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
  return
}

// -----

// FusedAttentionGrad checks its operands as the forward op does ...
func.func @grad_d_mismatch(%dy: tensor<4x8xf32>, %q: tensor<4x8xf32>, %kt: tensor<6x4xf32>, %v: tensor<4x8xf32>, %y: tensor<4x8xf32>, %lse: tensor<4xf32>) {
  // expected-error@+1 {{FusedAttentionGrad: Q [4x8] and Kt [6x4] disagree on D (Q's last dimension, Kt's second-to-last)}}
  %d:3 = graph.FusedAttentionGrad %dy, %q, %kt, %v, %y, %lse {scale = 1.0 : f32} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<6x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> (tensor<4x8xf32>, tensor<6x4xf32>, tensor<4x8xf32>)
  return
}

// -----

// ... and dY has the forward Y's type ...
func.func @grad_dy_type(%dy: tensor<4x6xf32>, %q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>, %y: tensor<4x8xf32>, %lse: tensor<4xf32>) {
  // expected-error@+1 {{'graph.FusedAttentionGrad' op dY type 'tensor<4x6xf32>' differs from the forward Y's 'tensor<4x8xf32>'}}
  %d:3 = graph.FusedAttentionGrad %dy, %q, %kt, %v, %y, %lse {scale = 1.0 : f32} : (tensor<4x6xf32>, tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>)
  return
}

// -----

// ... and LSE the forward op's f32 statistic.
func.func @grad_lse_type(%dy: tensor<4x8xbf16>, %q: tensor<4x8xbf16>, %kt: tensor<8x4xbf16>, %v: tensor<4x8xbf16>, %y: tensor<4x8xbf16>, %lse: tensor<4xbf16>) {
  // expected-error@+1 {{'graph.FusedAttentionGrad' op LSE type 'tensor<4xbf16>' differs from the forward LSE's 'tensor<4xf32>'}}
  %d:3 = graph.FusedAttentionGrad %dy, %q, %kt, %v, %y, %lse {scale = 1.0 : f32} : (tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<4x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>) -> (tensor<4x8xbf16>, tensor<8x4xbf16>, tensor<4x8xbf16>)
  return
}

// -----

// A permutation attribute permutes all of its operand's dimensions ...
func.func @perm_not_a_permutation(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>) {
  // expected-error@+2 {{FusedAttention: kt_perm [0x2x2x1] is not a permutation of the operands' 4 dimensions}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %k, %v {kt_perm = array<i64: 0, 2, 2, 1>, q_perm = array<i64: 0, 2, 1, 3>, scale = 1.0 : f32, v_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>)
  return
}

// -----

// ... and the shapes are checked under it: K [2, 4, 3, 8] read as Kt
// through [0, 2, 1, 3] is [2, 3, 4, 8], whose D (4) is not Q's 8.
func.func @perm_wrong_layout(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>) {
  // expected-error@+2 {{FusedAttention: Q [2x3x4x8] and Kt [2x3x4x8] disagree on D}}
  // expected-error@+1 {{failed to infer returned types}}
  %y:2 = graph.FusedAttention %q, %k, %v {kt_perm = array<i64: 0, 2, 1, 3>, q_perm = array<i64: 0, 2, 1, 3>, scale = 1.0 : f32, v_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>)
  return
}

// -----

// The gradient's dY is laid out by y_perm, like Y.
func.func @perm_grad_dy(%dy: tensor<2x3x4x8xf32>, %q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>, %y: tensor<2x4x3x8xf32>, %lse: tensor<2x3x4xf32>) {
  // expected-error@+1 {{dY type 'tensor<2x3x4x8xf32>' differs from the forward Y's 'tensor<2x4x3x8xf32>'}}
  %g:3 = graph.FusedAttentionGrad %dy, %q, %k, %v, %y, %lse {kt_perm = array<i64: 0, 2, 3, 1>, q_perm = array<i64: 0, 2, 1, 3>, scale = 1.0 : f32, v_perm = array<i64: 0, 2, 1, 3>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x3x4x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x3x4xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>)
  return
}

// -----

// FusedRotaryEmbedding rotates halves of an even last dimension ...
func.func @rotary_odd(%x: tensor<2x5xf32>, %c: tensor<5xf32>) {
  // expected-error@+2 {{FusedRotaryEmbedding: X's last dimension must be static, even and positive, got 'tensor<2x5xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = graph.FusedRotaryEmbedding %x, %c, %c : (tensor<2x5xf32>, tensor<5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  return
}

// -----

// ... with tables that broadcast to X.
func.func @rotary_table(%x: tensor<2x4xf32>, %c: tensor<4xf32>, %s: tensor<3x4xf32>) {
  // expected-error@+2 {{FusedRotaryEmbedding: Sin 'tensor<3x4xf32>' does not broadcast to X 'tensor<2x4xf32>' (dimension 0)}}
  // expected-error@+1 {{failed to infer returned types}}
  %y = graph.FusedRotaryEmbedding %x, %c, %s : (tensor<2x4xf32>, tensor<4xf32>, tensor<3x4xf32>) -> tensor<2x4xf32>
  return
}
