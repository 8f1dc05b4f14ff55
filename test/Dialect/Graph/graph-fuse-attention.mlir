// RUN: strait-opt %s --graph-fuse-attention -split-input-file | FileCheck %s

// GPT-2's form: Mul by 1/sqrt(D), Add of a [B, 1, T, T] mask that other
// blocks share. One op; the chain and the scale constant are gone, the
// mask stays (the fused op reads it).
// CHECK-LABEL: func.func @gpt2
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x16x8xf32>, %[[KT:.*]]: tensor<2x4x8x16xf32>, %[[V:.*]]: tensor<2x4x16x8xf32>, %[[M:.*]]: tensor<2x1x16x16xf32>)
// CHECK-NOT: graph.Constant
// CHECK: %[[Y:.*]], %{{.*}} = graph.FusedAttention %[[Q]], %[[KT]], %[[V]], %[[M]] {scale = 2.500000e-01 : f32} : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>, tensor<2x4x16x8xf32>, tensor<2x1x16x16xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x4x16xf32>)
// CHECK-NOT: graph.MatMul
// CHECK-NOT: graph.Softmax
// CHECK: %[[U:.*]] = graph.Add %[[M]], %[[M]]
// CHECK: return %[[Y]], %[[U]]
func.func @gpt2(%q: tensor<2x4x16x8xf32>, %kt: tensor<2x4x8x16xf32>, %v: tensor<2x4x16x8xf32>, %m: tensor<2x1x16x16xf32>) -> (tensor<2x4x16x8xf32>, tensor<2x1x16x16xf32>) {
  %c = graph.Constant dense<2.500000e-01> : tensor<f32>
  %s = graph.MatMul %q, %kt : (tensor<2x4x16x8xf32>, tensor<2x4x8x16xf32>) -> tensor<2x4x16x16xf32>
  %a = graph.Mul %s, %c : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16x16xf32>
  %b = graph.Add %a, %m : (tensor<2x4x16x16xf32>, tensor<2x1x16x16xf32>) -> tensor<2x4x16x16xf32>
  %p = graph.Softmax %b : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %y = graph.MatMul %p, %v : (tensor<2x4x16x16xf32>, tensor<2x4x16x8xf32>) -> tensor<2x4x16x8xf32>
  %u = graph.Add %m, %m : (tensor<2x1x16x16xf32>, tensor<2x1x16x16xf32>) -> tensor<2x1x16x16xf32>
  return %y, %u : tensor<2x4x16x8xf32>, tensor<2x1x16x16xf32>
}

// -----

// BERT-like: Div by sqrt(D) gives 1/8, the mask on the left of the Add,
// softmax axis spelled 3, Tq != Tk and D != Dv.
// CHECK-LABEL: func.func @bert_div
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2, %arg3 {scale = 1.250000e-01 : f32} : (tensor<2x12x5x64xf32>, tensor<2x12x64x7xf32>, tensor<2x12x7x32xf32>, tensor<2x1x1x7xf32>) -> (tensor<2x12x5x32xf32>, tensor<2x12x5xf32>)
// CHECK-NOT: graph.Div
func.func @bert_div(%q: tensor<2x12x5x64xf32>, %kt: tensor<2x12x64x7xf32>, %v: tensor<2x12x7x32xf32>, %m: tensor<2x1x1x7xf32>) -> tensor<2x12x5x32xf32> {
  %c = graph.Constant dense<8.0> : tensor<f32>
  %s = graph.MatMul %q, %kt : (tensor<2x12x5x64xf32>, tensor<2x12x64x7xf32>) -> tensor<2x12x5x7xf32>
  %a = graph.Div %s, %c : (tensor<2x12x5x7xf32>, tensor<f32>) -> tensor<2x12x5x7xf32>
  %b = graph.Add %m, %a : (tensor<2x1x1x7xf32>, tensor<2x12x5x7xf32>) -> tensor<2x12x5x7xf32>
  %p = graph.Softmax %b {axis = 3 : i64} : (tensor<2x12x5x7xf32>) -> tensor<2x12x5x7xf32>
  %y = graph.MatMul %p, %v : (tensor<2x12x5x7xf32>, tensor<2x12x7x32xf32>) -> tensor<2x12x5x32xf32>
  return %y : tensor<2x12x5x32xf32>
}

// -----

// No bias (ViT): the scale sits on Q and on Kt before the product, as two
// one-element constants; their product is the scale.
// CHECK-LABEL: func.func @vit_no_bias
// CHECK-SAME: (%[[Q:.*]]: tensor<2x3x10x16xf32>, %[[KT:.*]]: tensor<2x3x16x10xf32>, %[[V:.*]]: tensor<2x3x10x16xf32>)
// CHECK: %[[Y:.*]], %{{.*}} = graph.FusedAttention %[[Q]], %[[KT]], %[[V]] {scale = 2.500000e-01 : f32} : (tensor<2x3x10x16xf32>, tensor<2x3x16x10xf32>, tensor<2x3x10x16xf32>) -> (tensor<2x3x10x16xf32>, tensor<2x3x10xf32>)
// CHECK-NOT: graph.Mul
// CHECK: return %[[Y]]
func.func @vit_no_bias(%q: tensor<2x3x10x16xf32>, %kt: tensor<2x3x16x10xf32>, %v: tensor<2x3x10x16xf32>) -> tensor<2x3x10x16xf32> {
  %c = graph.Constant dense<0.5> : tensor<1xf32>
  %d = graph.Constant dense<0.5> : tensor<1xf32>
  %qs = graph.Mul %q, %c : (tensor<2x3x10x16xf32>, tensor<1xf32>) -> tensor<2x3x10x16xf32>
  %ks = graph.Mul %d, %kt : (tensor<1xf32>, tensor<2x3x16x10xf32>) -> tensor<2x3x16x10xf32>
  %s = graph.MatMul %qs, %ks : (tensor<2x3x10x16xf32>, tensor<2x3x16x10xf32>) -> tensor<2x3x10x10xf32>
  %p = graph.Softmax %s : (tensor<2x3x10x10xf32>) -> tensor<2x3x10x10xf32>
  %y = graph.MatMul %p, %v : (tensor<2x3x10x10xf32>, tensor<2x3x10x16xf32>) -> tensor<2x3x10x16xf32>
  return %y : tensor<2x3x10x16xf32>
}

// -----

// No scale at all and no batch dims; bf16 when Q, Kt and V are all bf16.
// CHECK-LABEL: func.func @bf16_rank2
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2 {scale = 1.000000e+00 : f32} : (tensor<4x8xbf16>, tensor<8x6xbf16>, tensor<6x8xbf16>) -> (tensor<4x8xbf16>, tensor<4xf32>)
func.func @bf16_rank2(%q: tensor<4x8xbf16>, %kt: tensor<8x6xbf16>, %v: tensor<6x8xbf16>) -> tensor<4x8xbf16> {
  %s = graph.MatMul %q, %kt : (tensor<4x8xbf16>, tensor<8x6xbf16>) -> tensor<4x6xbf16>
  %p = graph.Softmax %s : (tensor<4x6xbf16>) -> tensor<4x6xbf16>
  %y = graph.MatMul %p, %v : (tensor<4x6xbf16>, tensor<6x8xbf16>) -> tensor<4x8xbf16>
  return %y : tensor<4x8xbf16>
}

// -----

// An intermediate with a second user (the scores are returned) keeps the
// decomposition.
// CHECK-LABEL: func.func @extra_user
// CHECK-NOT: graph.FusedAttention
// CHECK: graph.Softmax
func.func @extra_user(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x4xf32>) {
  %c = graph.Constant dense<2.500000e-01> : tensor<f32>
  %s = graph.MatMul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %a = graph.Mul %s, %c : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  %p = graph.Softmax %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %s : tensor<4x8xf32>, tensor<4x4xf32>
}

// -----

// The probabilities with a second user (attention weights returned) too.
// CHECK-LABEL: func.func @probs_returned
// CHECK-NOT: graph.FusedAttention
func.func @probs_returned(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x4xf32>) {
  %s = graph.MatMul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %p = graph.Softmax %s : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y, %p : tensor<4x8xf32>, tensor<4x4xf32>
}

// -----

// A softmax over another axis than the last is not attention.
// CHECK-LABEL: func.func @softmax_axis
// CHECK-NOT: graph.FusedAttention
func.func @softmax_axis(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x4xf32>, %v: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = graph.MatMul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
  %p = graph.Softmax %s {axis = 1 : i64} : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// A scale that is not one splat value (a per-column scaling) is not fused.
// CHECK-LABEL: func.func @non_splat_scale
// CHECK-NOT: graph.FusedAttention
func.func @non_splat_scale(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %c = graph.Constant dense<[1.0, 2.0, 3.0, 4.0]> : tensor<4xf32>
  %s = graph.MatMul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %a = graph.Mul %s, %c : (tensor<4x4xf32>, tensor<4xf32>) -> tensor<4x4xf32>
  %p = graph.Softmax %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A scale by a computed value is not fused either.
// CHECK-LABEL: func.func @computed_scale
// CHECK-NOT: graph.FusedAttention
func.func @computed_scale(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>, %c: tensor<f32>) -> tensor<4x8xf32> {
  %s = graph.MatMul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %a = graph.Mul %s, %c : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  %p = graph.Softmax %a : (tensor<4x4xf32>) -> tensor<4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// Q and Kt in bf16 but V in f32 (after a cast) do not share a type.
// CHECK-LABEL: func.func @mixed_dtypes
// CHECK-NOT: graph.FusedAttention
func.func @mixed_dtypes(%q: tensor<4x8xbf16>, %kt: tensor<8x4xbf16>, %v: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %s = graph.MatMul %q, %kt : (tensor<4x8xbf16>, tensor<8x4xbf16>) -> tensor<4x4xbf16>
  %p = graph.Softmax %s : (tensor<4x4xbf16>) -> tensor<4x4xbf16>
  %pf = graph.Cast %p {to = f32} : (tensor<4x4xbf16>) -> tensor<4x4xf32>
  %y = graph.MatMul %pf, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %y : tensor<4x8xf32>
}

// -----

// A bias that widens the scores (a batch dim the MatMul lacks) is not a
// bias of the contract.
// CHECK-LABEL: func.func @widening_bias
// CHECK-NOT: graph.FusedAttention
func.func @widening_bias(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>, %m: tensor<3x4x4xf32>) -> tensor<3x4x8xf32> {
  %s = graph.MatMul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
  %b = graph.Add %s, %m : (tensor<4x4xf32>, tensor<3x4x4xf32>) -> tensor<3x4x4xf32>
  %p = graph.Softmax %b : (tensor<3x4x4xf32>) -> tensor<3x4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<3x4x4xf32>, tensor<4x8xf32>) -> tensor<3x4x8xf32>
  return %y : tensor<3x4x8xf32>
}

// -----

// K/V shared across heads (batch dims broadcast by the MatMuls) do not fit
// the op's identical batch dims.
// CHECK-LABEL: func.func @broadcast_batch
// CHECK-NOT: graph.FusedAttention
func.func @broadcast_batch(%q: tensor<2x4x8xf32>, %kt: tensor<1x8x4xf32>, %v: tensor<1x4x8xf32>) -> tensor<2x4x8xf32> {
  %s = graph.MatMul %q, %kt : (tensor<2x4x8xf32>, tensor<1x8x4xf32>) -> tensor<2x4x4xf32>
  %p = graph.Softmax %s : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<2x4x4xf32>, tensor<1x4x8xf32>) -> tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// A bias read from a variable (a learned position bias) would need a
// gradient the fused op does not give: not fused.
// CHECK-LABEL: func.func @variable_bias
// CHECK-NOT: graph.FusedAttention
module {
  graph.Variable @pos_bias : tensor<4x4xf32> = dense<0.0> : tensor<4x4xf32>
  func.func @variable_bias(%q: tensor<4x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) -> tensor<4x8xf32> {
    %m = graph.ReadVariable @pos_bias : tensor<4x4xf32>
    %t = graph.Tanh %m : tensor<4x4xf32>
    %s = graph.MatMul %q, %kt : (tensor<4x8xf32>, tensor<8x4xf32>) -> tensor<4x4xf32>
    %b = graph.Add %s, %t : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
    %p = graph.Softmax %b : (tensor<4x4xf32>) -> tensor<4x4xf32>
    %y = graph.MatMul %p, %v : (tensor<4x4xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
    return %y : tensor<4x8xf32>
  }
}

// -----

// The GPT-2 / LLaMA causal mask, computed from constants (position ranges,
// LessOrEqual, Expand, Where of 0 and the lowest float): causal = 1 and no
// bias; the mask computation, now unused, is gone.
// CHECK-LABEL: func.func @causal_mask
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x4x8xf32>, %[[KT:.*]]: tensor<2x4x8x4xf32>, %[[V:.*]]: tensor<2x4x4x8xf32>)
// CHECK-NOT: graph.Constant
// CHECK-NOT: graph.LessOrEqual
// CHECK-NOT: graph.Where
// CHECK: %[[Y:.*]], %{{.*}} = graph.FusedAttention %[[Q]], %[[KT]], %[[V]] {causal = 1 : i64, scale = 5.000000e-01 : f32} : (tensor<2x4x4x8xf32>, tensor<2x4x8x4xf32>, tensor<2x4x4x8xf32>) -> (tensor<2x4x4x8xf32>, tensor<2x4x4xf32>)
// CHECK-NEXT: return %[[Y]]
func.func @causal_mask(%q: tensor<2x4x4x8xf32>, %kt: tensor<2x4x8x4xf32>, %v: tensor<2x4x4x8xf32>) -> tensor<2x4x4x8xf32> {
  %lowest = graph.Constant dense<-3.40282347E+38> : tensor<f32>
  %zero = graph.Constant dense<0.0> : tensor<f32>
  %rows = graph.Constant dense<[[[[0], [1], [2], [3]]]]> : tensor<1x1x4x1xi64>
  %cols = graph.Constant dense<[[[[0, 1, 2, 3]]]]> : tensor<1x1x1x4xi64>
  %le = graph.LessOrEqual %cols, %rows : (tensor<1x1x1x4xi64>, tensor<1x1x4x1xi64>) -> tensor<1x1x4x4xi1>
  %ex = graph.Expand %le {shape = array<i64: 2, 1, 4, 4>} : (tensor<1x1x4x4xi1>) -> tensor<2x1x4x4xi1>
  %m = graph.Where %ex, %zero, %lowest : (tensor<2x1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x4x4xf32>
  %c = graph.Constant dense<5.000000e-01> : tensor<f32>
  %s = graph.MatMul %q, %kt : (tensor<2x4x4x8xf32>, tensor<2x4x8x4xf32>) -> tensor<2x4x4x4xf32>
  %a = graph.Mul %s, %c : (tensor<2x4x4x4xf32>, tensor<f32>) -> tensor<2x4x4x4xf32>
  %b = graph.Add %a, %m : (tensor<2x4x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x4x4x4xf32>
  %p = graph.Softmax %b : (tensor<2x4x4x4xf32>) -> tensor<2x4x4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<2x4x4x4xf32>, tensor<2x4x4x8xf32>) -> tensor<2x4x4x8xf32>
  return %y : tensor<2x4x4x8xf32>
}

// -----

// Fewer queries than keys (decoding with a cache): the diagonal shifts by
// Tk - Tq = 2; -inf counts as masked.
// CHECK-LABEL: func.func @causal_offset
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2 {causal = 1 : i64, scale = 1.000000e+00 : f32}
func.func @causal_offset(%q: tensor<2x8xf32>, %kt: tensor<8x4xf32>, %v: tensor<4x8xf32>) -> tensor<2x8xf32> {
  %m = graph.Constant dense<[[0.0, 0.0, 0.0, 0xFF800000], [0.0, 0.0, 0.0, 0.0]]> : tensor<2x4xf32>
  %s = graph.MatMul %q, %kt : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %b = graph.Add %m, %s : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %p = graph.Softmax %b : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %y = graph.MatMul %p, %v : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}

// -----

// BERT without an attention_mask input: the mask folds to zeros and is
// dropped (causal stays 0).
// CHECK-LABEL: func.func @zero_mask
// CHECK-NOT: graph.GreaterOrEqual
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2 {scale = 1.250000e-01 : f32} : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>, tensor<2x3x4x8xf32>) -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>)
func.func @zero_mask(%q: tensor<2x3x4x8xf32>, %kt: tensor<2x3x8x4xf32>, %v: tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %lowest = graph.Constant dense<-3.40282347E+38> : tensor<f32>
  %zero = graph.Constant dense<0.0> : tensor<f32>
  %izero = graph.Constant dense<0> : tensor<i64>
  %rows = graph.Constant dense<[[[[0], [1], [2], [3]]]]> : tensor<1x1x4x1xi64>
  %ge = graph.GreaterOrEqual %rows, %izero : (tensor<1x1x4x1xi64>, tensor<i64>) -> tensor<1x1x4x1xi1>
  %ex = graph.Expand %ge {shape = array<i64: 2, 1, 4, 4>} : (tensor<1x1x4x1xi1>) -> tensor<2x1x4x4xi1>
  %m = graph.Where %ex, %zero, %lowest : (tensor<2x1x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<2x1x4x4xf32>
  %c = graph.Constant dense<1.250000e-01> : tensor<f32>
  %s = graph.MatMul %q, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %a = graph.Mul %s, %c : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %b = graph.Add %a, %m : (tensor<2x3x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x3x4x4xf32>
  %p = graph.Softmax %b : (tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %y : tensor<2x3x4x8xf32>
}

// -----

// A constant mask that is not causal (it masks below the diagonal) or masks
// with a finite -1e9 (not at most -1e30) stays a bias.
// CHECK-LABEL: func.func @not_causal
// CHECK: %[[M:.*]] = graph.Constant
// CHECK: %[[N:.*]] = graph.Constant
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2, %[[M]] {scale = 1.000000e+00 : f32}
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2, %[[N]] {scale = 1.000000e+00 : f32}
func.func @not_causal(%q: tensor<2x8xf32>, %kt: tensor<8x2xf32>, %v: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %m = graph.Constant dense<[[0.0, 0.0], [0xFF800000, 0.0]]> : tensor<2x2xf32>
  %n = graph.Constant dense<[[0.0, -1.0e9], [0.0, 0.0]]> : tensor<2x2xf32>
  %s = graph.MatMul %q, %kt : (tensor<2x8xf32>, tensor<8x2xf32>) -> tensor<2x2xf32>
  %b = graph.Add %s, %m : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %p = graph.Softmax %b : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %y = graph.MatMul %p, %v : (tensor<2x2xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %s2 = graph.MatMul %q, %kt : (tensor<2x8xf32>, tensor<8x2xf32>) -> tensor<2x2xf32>
  %b2 = graph.Add %s2, %n : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
  %p2 = graph.Softmax %b2 : (tensor<2x2xf32>) -> tensor<2x2xf32>
  %y2 = graph.MatMul %p2, %v : (tensor<2x2xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %y, %y2 : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// A mask beyond the folders' 65,536 elements ([64, 1, 64, 64]: a 64 x 64
// causal mask expanded along a batch of 64) is still recognized: the pass
// reads its elements without building it.
// CHECK-LABEL: func.func @large_causal_mask
// CHECK-NOT: graph.Where
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2 {causal = 1 : i64, scale = 1.000000e+00 : f32}
func.func @large_causal_mask(%q: tensor<64x2x64x8xf32>, %kt: tensor<64x2x8x64xf32>, %v: tensor<64x2x64x8xf32>) -> tensor<64x2x64x8xf32> {
  %lowest = graph.Constant dense<0xFF800000> : tensor<f32>
  %zero = graph.Constant dense<0.0> : tensor<f32>
  %rows = graph.Constant dense<[[[[0], [1], [2], [3], [4], [5], [6], [7], [8], [9], [10], [11], [12], [13], [14], [15], [16], [17], [18], [19], [20], [21], [22], [23], [24], [25], [26], [27], [28], [29], [30], [31], [32], [33], [34], [35], [36], [37], [38], [39], [40], [41], [42], [43], [44], [45], [46], [47], [48], [49], [50], [51], [52], [53], [54], [55], [56], [57], [58], [59], [60], [61], [62], [63]]]]> : tensor<1x1x64x1xi64>
  %cols = graph.Constant dense<[[[[0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63]]]]> : tensor<1x1x1x64xi64>
  %le = graph.LessOrEqual %cols, %rows : (tensor<1x1x1x64xi64>, tensor<1x1x64x1xi64>) -> tensor<1x1x64x64xi1>
  %ex = graph.Expand %le {shape = array<i64: 64, 1, 64, 64>} : (tensor<1x1x64x64xi1>) -> tensor<64x1x64x64xi1>
  %m = graph.Where %ex, %zero, %lowest : (tensor<64x1x64x64xi1>, tensor<f32>, tensor<f32>) -> tensor<64x1x64x64xf32>
  %s = graph.MatMul %q, %kt : (tensor<64x2x64x8xf32>, tensor<64x2x8x64xf32>) -> tensor<64x2x64x64xf32>
  %b = graph.Add %s, %m : (tensor<64x2x64x64xf32>, tensor<64x1x64x64xf32>) -> tensor<64x2x64x64xf32>
  %p = graph.Softmax %b : (tensor<64x2x64x64xf32>) -> tensor<64x2x64x64xf32>
  %y = graph.MatMul %p, %v : (tensor<64x2x64x64xf32>, tensor<64x2x64x8xf32>) -> tensor<64x2x64x8xf32>
  return %y : tensor<64x2x64x8xf32>
}

// -----

// One masked entry on the diagonal of the last batch entry makes the same
// mask not causal: it stays a bias.
// CHECK-LABEL: func.func @almost_causal
// CHECK: %[[M:.*]] = graph.Where
// CHECK: graph.FusedAttention %arg0, %arg1, %arg2, %[[M]] {scale = 1.000000e+00 : f32}
func.func @almost_causal(%q: tensor<3x4x8xf32>, %kt: tensor<3x8x4xf32>, %v: tensor<3x4x8xf32>, %c: tensor<3x4x4xi1>) -> tensor<3x4x8xf32> {
  %lowest = graph.Constant dense<0xFF800000> : tensor<f32>
  %zero = graph.Constant dense<0.0> : tensor<f32>
  %keep = graph.Constant dense<[[[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]], [[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, true]], [[true, false, false, false], [true, true, false, false], [true, true, true, false], [true, true, true, false]]]> : tensor<3x4x4xi1>
  %m = graph.Where %keep, %zero, %lowest : (tensor<3x4x4xi1>, tensor<f32>, tensor<f32>) -> tensor<3x4x4xf32>
  %s = graph.MatMul %q, %kt : (tensor<3x4x8xf32>, tensor<3x8x4xf32>) -> tensor<3x4x4xf32>
  %b = graph.Add %s, %m : (tensor<3x4x4xf32>, tensor<3x4x4xf32>) -> tensor<3x4x4xf32>
  %p = graph.Softmax %b : (tensor<3x4x4xf32>) -> tensor<3x4x4xf32>
  %y = graph.MatMul %p, %v : (tensor<3x4x4xf32>, tensor<3x4x8xf32>) -> tensor<3x4x8xf32>
  return %y : tensor<3x4x8xf32>
}

