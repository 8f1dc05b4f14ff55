// RUN: strait-opt %s -split-input-file -verify-diagnostics --graph-autocast='precision=f8'

// An unknown precision is rejected.
// expected-error @below {{graph-autocast: precision must be bf16 or f16 (f32: no autocast), got 'f8'}}
module {
  func.func @f(%x: tensor<2x2xf32>) -> tensor<2x2xf32> {
    %y = graph.MatMul %x, %x : (tensor<2x2xf32>, tensor<2x2xf32>) -> tensor<2x2xf32>
    return %y : tensor<2x2xf32>
  }
}
