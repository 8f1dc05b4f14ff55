// RUN: not strait-opt %s --graph-build-training-step='loss=hinge' 2>&1 | FileCheck %s --check-prefix=LOSS
// RUN: not strait-opt %s --graph-build-training-step='optimizer=lamb' 2>&1 | FileCheck %s --check-prefix=OPT
// RUN: not strait-opt %s --graph-build-training-step='loss=mse output=nope' 2>&1 | FileCheck %s --check-prefix=OUT
// RUN: not strait-opt %s --graph-build-training-step='micro-batches=0' 2>&1 | FileCheck %s --check-prefix=MB

// Invalid options are diagnostics naming the option value.
// LOSS: unknown loss 'hinge' (expected cross-entropy, mse or output)
// OPT: unknown optimizer 'lamb' (expected sgd, adamw or none)
// OUT: has no output named 'nope'
// MB: micro-batches must be >= 1
module {
  graph.Variable @w : tensor<3xf32> = dense<1.0> : tensor<3xf32>
  func.func @main(%x: tensor<2x3xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @w : tensor<3xf32>
    %a = graph.Mul %x, %w : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    return %a : tensor<2x3xf32>
  }
}
