// RUN: strait-opt %s -split-input-file -verify-diagnostics --graph-build-training-step='loss=output'

// An op without a gradient rule between a trainable variable and the loss
// is reported at the op, naming the op and the variable.
module {
  graph.Variable @w : tensor<4x3xf32> = dense<1.0> : tensor<4x3xf32>
  func.func @main(%x: tensor<4x3xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<4x3xf32>
    %a = graph.Mul %x, %w : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    // expected-error@+1 {{'graph.Round' op has no gradient rule, but it lies between trainable variable @w and the loss}}
    %n = graph.Round %a : tensor<4x3xf32>
    %m = graph.ReduceSum %n {axes = array<i64>, keepdims = 0 : i64} : (tensor<4x3xf32>) -> tensor<f32>
    return %m : tensor<f32>
  }
}

// -----

// Dynamic shapes cannot be differentiated (the last op on the path reports).
module {
  graph.Variable @w : tensor<3xf32> = dense<1.0> : tensor<3xf32>
  func.func @main(%x: tensor<?x3xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<3xf32>
    %a = graph.Mul %x, %w : (tensor<?x3xf32>, tensor<3xf32>) -> tensor<?x3xf32>
    // expected-error@+1 {{'graph.ReduceSum' op needs static shapes to be differentiated, got 'tensor<?x3xf32>'}}
    %m = graph.ReduceSum %a {axes = array<i64>, keepdims = 0 : i64} : (tensor<?x3xf32>) -> tensor<f32>
    return %m : tensor<f32>
  }
}

// -----

// loss=output needs a one-element output.
module {
  graph.Variable @w : tensor<3xf32> = dense<1.0> : tensor<3xf32>
  // expected-error@+1 {{loss=output needs a one-element output, got 'tensor<3xf32>'}}
  func.func @main(%x: tensor<3xf32> {graph.name = "x"}) -> (tensor<3xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @w : tensor<3xf32>
    %a = graph.Mul %x, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    return %a : tensor<3xf32>
  }
}

// -----

// A trainable variable that does not reach the loss is not updated.
module {
  graph.Variable @w : tensor<3xf32> = dense<1.0> : tensor<3xf32>
  // expected-warning@+1 {{variable does not affect the loss; it is not updated}}
  graph.Variable @unused : tensor<3xf32> = dense<1.0> : tensor<3xf32>
  func.func @main(%x: tensor<3xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<3xf32>
    %a = graph.Mul %x, %w : (tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
    %m = graph.ReduceSum %a {axes = array<i64>, keepdims = 0 : i64} : (tensor<3xf32>) -> tensor<f32>
    return %m : tensor<f32>
  }
}

// -----

// Einsum: an index summed within one operand has no rule (the diagnostic
// names the equation, the index and the operand).
module {
  graph.Variable @w : tensor<4x3xf32> = dense<1.0> : tensor<4x3xf32>
  func.func @main(%x: tensor<3xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<4x3xf32>
    // expected-error@+1 {{'graph.Einsum' op gradient of Einsum 'ij,j->': index 'i' of operand 0 is summed within that operand, which is not supported}}
    %y = graph.Einsum %w, %x {equation = "ij,j->"} : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<f32>
    return %y : tensor<f32>
  }
}

// -----

// Einsum: a repeated index (a diagonal) has no rule.
module {
  graph.Variable @w : tensor<3x3xf32> = dense<1.0> : tensor<3x3xf32>
  func.func @main() -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<3x3xf32>
    // expected-error@+1 {{'graph.Einsum' op gradient of an Einsum term with a repeated index (a diagonal) is not supported: 'ii->'}}
    %y = graph.Einsum %w {equation = "ii->"} : (tensor<3x3xf32>) -> tensor<f32>
    return %y : tensor<f32>
  }
}

// -----

// Cubic Resize has no gradient rule (nearest and linear have).
module {
  graph.Variable @w : tensor<1x1x2x2xf32> = dense<1.0> : tensor<1x1x2x2xf32>
  func.func @main() -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<1x1x2x2xf32>
    // expected-error@+1 {{'graph.Resize' op gradient of cubic Resize is not supported (nearest, linear)}}
    %y = graph.Resize %w {mode = #graph.resize_mode<cubic>, scales = array<f32: 1.0, 1.0, 2.0, 2.0>, sizes = array<i64: 1, 1, 4, 4>} : (tensor<1x1x2x2xf32>) -> tensor<1x1x4x4xf32>
    %l = graph.ReduceSum %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<1x1x4x4xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// FusedAttentionGrad gives no gradient for the bias: a bias computed from a
// trainable variable is reported (graph-fuse-attention never fuses one).
module {
  graph.Variable @pos : tensor<4x4xf32> = dense<0.0> : tensor<4x4xf32>
  func.func @main(%q: tensor<4x8xf32> {graph.name = "q"}, %kt: tensor<8x4xf32> {graph.name = "kt"}, %v: tensor<4x8xf32> {graph.name = "v"}) -> (tensor<f32> {graph.name = "loss"}) {
    %b = graph.ReadVariable @pos : tensor<4x4xf32>
    // expected-error@+1 {{'graph.FusedAttention' op bias depends on trainable variable @pos, but FusedAttentionGrad gives no gradient for the bias; keep the decomposed attention (--fuse-attention=false)}}
    %y:2 = graph.FusedAttention %q, %kt, %v, %b {scale = 1.0 : f32} : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>, tensor<4x4xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
    %m = graph.ReduceSum %y#0 {axes = array<i64>, keepdims = 0 : i64} : (tensor<4x8xf32>) -> tensor<f32>
    return %m : tensor<f32>
  }
}

// -----

// LSE is a statistic for the backward kernel: a loss that uses it cannot be
// differentiated through the fused op.
module {
  graph.Variable @wq : tensor<4x8xf32> = dense<0.5> : tensor<4x8xf32>
  func.func @main(%kt: tensor<8x4xf32> {graph.name = "kt"}, %v: tensor<4x8xf32> {graph.name = "v"}) -> (tensor<f32> {graph.name = "loss"}) {
    %q = graph.ReadVariable @wq : tensor<4x8xf32>
    // expected-error@+1 {{'graph.FusedAttention' op LSE (result #1) is used on the way to the loss; FusedAttentionGrad gives no gradient through it}}
    %y:2 = graph.FusedAttention %q, %kt, %v {scale = 1.0 : f32} : (tensor<4x8xf32>, tensor<8x4xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4xf32>)
    %m = graph.ReduceSum %y#1 {axes = array<i64>, keepdims = 0 : i64} : (tensor<4xf32>) -> tensor<f32>
    return %m : tensor<f32>
  }
}
