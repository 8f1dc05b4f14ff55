// RUN: strait-opt %s -split-input-file --graph-build-training-step='optimizer=sgd pad-classes=8 pad-classes-min-work=0' | FileCheck %s
// RUN: strait-opt %s -split-input-file --graph-build-training-step='optimizer=sgd pad-classes=8 pad-classes-min-work=1000000' | FileCheck %s --check-prefix=SMALL
// RUN: strait-opt %s -split-input-file --graph-build-training-step='optimizer=sgd pad-classes=0 pad-classes-min-work=0' | FileCheck %s --check-prefix=SMALL
// RUN: strait-opt %s -split-input-file --graph-build-training-step='optimizer=sgd pad-classes=8 pad-classes-min-work=0 step-outputs=all' | FileCheck %s --check-prefix=SMALL
// RUN: not strait-opt %s -split-input-file --graph-build-training-step='pad-classes=-1' 2>&1 | FileCheck %s --check-prefix=BAD

// pad-classes: the cross-entropy over a product's 10 classes is computed over
// 16 (the next multiple of 8): the weights get 6 zero columns, a bias of 0
// for the 10 classes and -inf for the 6 others, and the loss reads the [2x3,
// 16] product directly (bf16 here, widened as autocast left it). The
// gradient of the padded weights loses its 6 columns in Concat's Split.
// CHECK-LABEL: func.func @lm_head
// CHECK: %[[W:.*]] = graph.ReadVariable @w
// CHECK: %[[A:.*]] = graph.Reshape %{{.*}} {{.*}}shape = array<i64: 6, 4>} : (tensor<2x3x4xbf16>) -> tensor<6x4xbf16>
// CHECK: %[[Z:.*]] = graph.Constant dense<0.000000e+00> {{.*}}: tensor<4x6xbf16>
// CHECK: %[[P:.*]] = graph.Concat %[[W]], %[[Z]] {axis = 1 : i64{{.*}}} : (tensor<4x10xbf16>, tensor<4x6xbf16>) -> tensor<4x16xbf16>
// CHECK: %[[B:.*]] = graph.Constant dense<[0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0.000000e+00, 0xFF80, 0xFF80, 0xFF80, 0xFF80, 0xFF80, 0xFF80]> {{.*}}: tensor<16xbf16>
// CHECK: %[[G:.*]] = graph.Gemm %[[A]], %[[P]], %[[B]] {{.*}} : (tensor<6x4xbf16>, tensor<4x16xbf16>, tensor<16xbf16>) -> tensor<6x16xbf16>
// CHECK: %[[S:.*]] = graph.Cast %[[G]] {{.*}}to = f32} : (tensor<6x16xbf16>) -> tensor<6x16xf32>
// CHECK: graph.SoftmaxCrossEntropyLoss %[[S]], %{{.*}} : (tensor<6x16xf32>, tensor<6xi64>) -> tensor<f32>
// CHECK: %[[DW:.*]] = graph.Gemm %[[A]], %{{.*}} {{.*}}transA = 1 : i64} : (tensor<6x4xbf16>, tensor<6x16xbf16>) -> tensor<4x16xbf16>
// CHECK: graph.Split %[[DW]] {{.*}}split = array<i64: 10, 6>} : (tensor<4x16xbf16>) -> (tensor<4x10xbf16>, tensor<4x6xbf16>)
// CHECK-NOT: graph.MatMul
// Not applied: a product below pad-classes-min-work, pad-classes=0, or the
// logits kept as an output (step-outputs=all).
// SMALL-LABEL: func.func @lm_head
// SMALL: graph.MatMul {{.*}} -> tensor<2x3x10xbf16>
// SMALL-NOT: graph.Concat
// BAD: invalid pad-classes=-1 (straitc --pad-classes): expected 0 (never) or a multiple in [1, 2^20]
module {
  graph.Variable @w : tensor<4x10xbf16> = dense<0.5> : tensor<4x10xbf16>
  func.func @lm_head(%x: tensor<2x3x4xbf16> {graph.name = "x"}) -> (tensor<2x3x10xf32> {graph.name = "logits"}) {
    %w = graph.ReadVariable @w : tensor<4x10xbf16>
    %m = graph.MatMul %x, %w : (tensor<2x3x4xbf16>, tensor<4x10xbf16>) -> tensor<2x3x10xbf16>
    %l = graph.Cast %m {to = f32} : (tensor<2x3x10xbf16>) -> tensor<2x3x10xf32>
    return %l : tensor<2x3x10xf32>
  }
}

// -----

// A masked-LM head with an output bias (BERT: Add(MatMul, bias [V]), the
// bias added in f32 after autocast's cast): the bias is padded with zeros
// and added to the padded scores (-inf + b = -inf); its gradient loses the
// padding in Concat's Split.
// CHECK-LABEL: func.func @lm_head_bias
// CHECK: %[[BIAS:.*]] = graph.ReadVariable @b
// CHECK: %[[G:.*]] = graph.Gemm {{.*}} -> tensor<6x16xbf16>
// CHECK: %[[S:.*]] = graph.Cast %[[G]] {{.*}}to = f32}
// CHECK: %[[Z:.*]] = graph.Constant dense<0.000000e+00> {{.*}}: tensor<6xf32>
// CHECK: %[[PB:.*]] = graph.Concat %[[BIAS]], %[[Z]] {axis = 0 : i64{{.*}}} : (tensor<10xf32>, tensor<6xf32>) -> tensor<16xf32>
// CHECK: %[[L:.*]] = graph.Add %[[S]], %[[PB]] {{.*}} -> tensor<6x16xf32>
// CHECK: graph.SoftmaxCrossEntropyLoss %[[L]], %{{.*}} : (tensor<6x16xf32>, tensor<6xi64>) -> tensor<f32>
// CHECK: %[[DB:.*]] = graph.ReduceToShape %{{.*}} {{.*}}shape = array<i64: 16>}
// CHECK: graph.Split %[[DB]] {{.*}}split = array<i64: 10, 6>} : (tensor<16xf32>) -> (tensor<10xf32>, tensor<6xf32>)
// SMALL-LABEL: func.func @lm_head_bias
// SMALL: graph.MatMul {{.*}} -> tensor<2x3x10xbf16>
// SMALL-NOT: graph.Concat
module {
  graph.Variable @w : tensor<4x10xbf16> = dense<0.5> : tensor<4x10xbf16>
  graph.Variable @b : tensor<10xf32> = dense<0.25> : tensor<10xf32>
  func.func @lm_head_bias(%x: tensor<2x3x4xbf16> {graph.name = "x"}) -> (tensor<2x3x10xf32> {graph.name = "logits"}) {
    %w = graph.ReadVariable @w : tensor<4x10xbf16>
    %b = graph.ReadVariable @b : tensor<10xf32>
    %m = graph.MatMul %x, %w : (tensor<2x3x4xbf16>, tensor<4x10xbf16>) -> tensor<2x3x10xbf16>
    %l = graph.Cast %m {to = f32} : (tensor<2x3x10xbf16>) -> tensor<2x3x10xf32>
    %y = graph.Add %l, %b : (tensor<2x3x10xf32>, tensor<10xf32>) -> tensor<2x3x10xf32>
    return %y : tensor<2x3x10xf32>
  }
}
