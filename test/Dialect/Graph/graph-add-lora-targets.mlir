// RUN: strait-opt %s --verify-diagnostics --graph-add-lora='rank=2 targets=*.weight' | FileCheck %s

// A --lora-targets pattern that names a weight read otherwise than as a
// product's weight operand (here an embedding's Gather) is a warning; the
// weights it names that are product weights get adapters.

// CHECK: graph.Variable @fc.weight.lora_A : tensor<4x2xf32>
// CHECK-NOT: @emb.weight.lora_A
module {
  // expected-warning @+1 {{graph-add-lora: 'emb.weight' matches --lora-targets but is the weight operand of no MatMul/Gemm product (y = x W), or of products in both layouts; it gets no adapter}}
  graph.Variable @emb.weight : tensor<10x4xf32> = dense<0.1> : tensor<10x4xf32>
  graph.Variable @fc.weight : tensor<4x4xf32> = dense<0.1> : tensor<4x4xf32>
  func.func @main(%ids: tensor<3xi64>) -> tensor<3x4xf32> {
    %e = graph.ReadVariable @emb.weight : tensor<10x4xf32>
    %x = graph.Gather %e, %ids : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
    %w = graph.ReadVariable @fc.weight : tensor<4x4xf32>
    %y = graph.MatMul %x, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
    return %y : tensor<3x4xf32>
  }
}
