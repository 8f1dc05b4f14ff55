// RUN: strait-opt %s --split-input-file --verify-diagnostics --graph-add-lora='rank=4'
// RUN: not strait-opt %s --split-input-file --graph-add-lora='rank=0' 2>&1 | FileCheck %s --check-prefix=RANK
// RUN: not strait-opt %s --split-input-file --graph-add-lora='rank=4 alpha=-1' 2>&1 | FileCheck %s --check-prefix=ALPHA

// RANK: graph-add-lora: invalid rank=0 (straitc --lora): expected an adapter rank >= 1
// ALPHA: graph-add-lora: invalid alpha (straitc --lora-alpha)

// Only an embedding (read by a Gather) and an output head: nothing to adapt.
// expected-error @+1 {{graph-add-lora: no weight to adapt (no 2-D float variable is only the weight operand of MatMul/Gemm products below the output head)}}
module {
  graph.Variable @emb : tensor<10x4xf32> = dense<0.1> : tensor<10x4xf32>
  graph.Variable @head : tensor<4x10xf32> = dense<0.1> : tensor<4x10xf32>
  func.func @main(%ids: tensor<3xi64>) -> tensor<3x10xf32> {
    %e = graph.ReadVariable @emb : tensor<10x4xf32>
    %x = graph.Gather %e, %ids : (tensor<10x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
    %h = graph.ReadVariable @head : tensor<4x10xf32>
    %y = graph.MatMul %x, %h : (tensor<3x4xf32>, tensor<4x10xf32>) -> tensor<3x10xf32>
    return %y : tensor<3x10xf32>
  }
}

// -----

// Adapters added twice: the names are taken.
module {
  // expected-error @+1 {{graph-add-lora: the module already has a symbol 'w.lora_A' (adapters added twice?)}}
  graph.Variable @w : tensor<4x4xf32> = dense<0.1> : tensor<4x4xf32>
  graph.Variable @w.lora_A : tensor<4x4xf32> = dense<0.1> : tensor<4x4xf32>
  func.func @main(%x: tensor<3x4xf32>) -> tensor<3x4xf32> {
    %w = graph.ReadVariable @w : tensor<4x4xf32>
    %y = graph.MatMul %x, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
    %r = graph.Relu %y : tensor<3x4xf32>
    %s = graph.Sigmoid %r : tensor<3x4xf32>
    return %s : tensor<3x4xf32>
  }
}
