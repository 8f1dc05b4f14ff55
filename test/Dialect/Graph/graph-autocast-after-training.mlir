// RUN: strait-opt %s -verify-diagnostics --graph-build-training-step='loss=mse optimizer=sgd' --graph-autocast

// Autocast after the training step would cast the backward products and
// the optimizer: it must run on the forward graph.
// (The AccumulateGrad that reports it carries the variable's location.)
module {
  // expected-error @below {{graph-autocast runs on the forward graph, before graph-build-training-step}}
  graph.Variable @w : tensor<2x2xf32> = dense<0.5> : tensor<2x2xf32>
  func.func @main(%x: tensor<2x2xf32> {graph.name = "x"}) -> (tensor<2x2xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @w : tensor<2x2xf32>
    %y = graph.MatMul %x, %w : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %y : tensor<2x2xf32>
  }
}
