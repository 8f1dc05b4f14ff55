// RUN: strait-opt %s -split-input-file -verify-diagnostics --graph-build-training-step='loss=output'

// An op without a gradient rule between a trainable variable and the loss
// is reported at the op, naming the op and the variable.
module {
  graph.Variable @w : tensor<4x3xf32> = dense<1.0> : tensor<4x3xf32>
  func.func @main(%x: tensor<4x3xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<4x3xf32>
    %a = graph.Mul %x, %w : (tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
    // expected-error@+1 {{'graph.ReduceProd' op has no gradient rule, but it lies between trainable variable @w and the loss}}
    %m = graph.ReduceProd %a {axes = array<i64>, keepdims = 0 : i64} : (tensor<4x3xf32>) -> tensor<f32>
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
