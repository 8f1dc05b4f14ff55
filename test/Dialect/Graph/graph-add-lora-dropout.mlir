// RUN: strait-opt %s --split-input-file --verify-diagnostics --graph-add-lora='rank=2 dropout=0.25' | FileCheck %s
// RUN: strait-opt %s --split-input-file --verify-diagnostics --graph-add-lora='rank=2 dropout=0.25' --graph-build-training-step='loss=cross-entropy optimizer=sgd' | FileCheck %s --check-prefix=STEP
// RUN: not strait-opt %s --split-input-file --graph-add-lora='rank=2 dropout=1' 2>&1 | FileCheck %s --check-prefix=RATIO

// RATIO: graph-add-lora: invalid dropout=1.000000e+00 (straitc --lora-dropout): expected a ratio in [0, 1)

// dropout=0.25 (PEFT's lora_dropout): the adapter reads Dropout(x), the base
// product still reads x; the training step keys it like a model's Dropout.

// CHECK-LABEL: func.func @main
// CHECK: %[[Y:.*]] = graph.MatMul %[[X:.*]], %{{.*}} : (tensor<3x4xf32>, tensor<4x4xf32>)
// CHECK: %[[A:.*]] = graph.ReadVariable @fc.lora_A
// CHECK: %[[DX:.*]] = graph.Dropout %[[X]] {ratio = 2.500000e-01 : f32}
// CHECK: graph.MatMul %[[DX]], %[[A]]
// STEP: graph.Dropout %{{.*}} {graph.dropout_key = 0 : i64, {{.*}}ratio = 2.500000e-01 : f32}
module {
  graph.Variable @fc : tensor<4x4xf32> = dense<0.1> : tensor<4x4xf32>
  graph.Variable @head : tensor<4x5xf32> = dense<0.1> : tensor<4x5xf32>
  func.func @main(%x: tensor<3x4xf32>) -> tensor<3x5xf32> {
    %w = graph.ReadVariable @fc : tensor<4x4xf32>
    %y = graph.MatMul %x, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
    %r = graph.Relu %y : tensor<3x4xf32>
    %h = graph.ReadVariable @head : tensor<4x5xf32>
    %z = graph.MatMul %r, %h : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
    return %z : tensor<3x5xf32>
  }
}
