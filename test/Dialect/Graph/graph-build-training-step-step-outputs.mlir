// step-outputs: what a training step returns. `loss` (the default) returns
// the loss alone, and the ops only the dropped model outputs needed are
// erased; `all` also returns the model's outputs; `loss=output` keeps the
// output that is the loss, under its name (-loss-output.mlir); a bad value is
// an error naming straitc's flag.
// RUN: strait-opt %s --graph-build-training-step='optimizer=sgd momentum=0' | FileCheck %s --check-prefix=LOSS
// RUN: strait-opt %s --graph-build-training-step='optimizer=sgd momentum=0 step-outputs=all' | FileCheck %s --check-prefix=ALL
// RUN: strait-opt %s --graph-build-training-step='optimizer=none return-gradients=true' | FileCheck %s --check-prefix=GRADS
// RUN: straitc %s --loss cross-entropy --emit=mlir | FileCheck %s --check-prefix=LOSS
// RUN: straitc %s --loss cross-entropy --step-outputs=all --emit=mlir | FileCheck %s --check-prefix=ALL
// RUN: strait-opt %s --strait-pipeline='loss=cross-entropy step-outputs=all' | FileCheck %s --check-prefix=ALL
// RUN: not straitc %s --loss cross-entropy --step-outputs=logits --emit=mlir 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not straitc %s --step-outputs=all --emit=mlir 2>&1 | FileCheck %s --check-prefix=NOLOSS

// A classifier with a second output (the logits' tanh) the loss does not use.
// LOSS-LABEL: func.func @{{main|stage0}}
// LOSS-SAME: -> (tensor<f32> {graph.name = "loss"})
// LOSS-NOT: graph.Tanh
// LOSS: %[[L:[a-z0-9_]+]]{{.*}} = graph.SoftmaxCrossEntropyLoss
// LOSS-NOT: graph.Tanh
// LOSS: return %[[L]] : tensor<f32>
// ALL-LABEL: func.func @{{main|stage0}}
// ALL-SAME: -> (tensor<4x5xf32> {graph.name = "logits"}, tensor<4x5xf32> {graph.name = "aux"}, tensor<f32> {graph.name = "loss"})
// ALL: %[[Z:.*]] = graph.MatMul
// ALL: %[[T:.*]] = graph.Tanh %[[Z]]
// ALL: %[[L:[a-z0-9_]+]]{{.*}} = graph.SoftmaxCrossEntropyLoss{{(WithGrad %[^,]*,)?}} %[[Z]]
// ALL: return %[[Z]], %[[T]], %[[L]]
// GRADS-LABEL: func.func @{{main|stage0}}
// GRADS-SAME: -> (tensor<f32> {graph.name = "loss"}, tensor<3x5xf32> {graph.name = "grad.w"})
// GRADS-NOT: graph.Tanh
// BAD: graph-build-training-step: unknown step-outputs 'logits' (straitc --step-outputs): expected loss or all
// NOLOSS: straitc: --step-outputs configures the training step; it needs --loss
module {
  graph.Variable @w : tensor<3x5xf32> = dense<0.5> : tensor<3x5xf32>
  func.func @main(%x: tensor<4x3xf32> {graph.name = "x"}) -> (tensor<4x5xf32> {graph.name = "logits"}, tensor<4x5xf32> {graph.name = "aux"}) {
    %w = graph.ReadVariable @w : tensor<3x5xf32>
    %z = graph.MatMul %x, %w : (tensor<4x3xf32>, tensor<3x5xf32>) -> tensor<4x5xf32>
    %t = graph.Tanh %z : tensor<4x5xf32>
    return %z, %t : tensor<4x5xf32>, tensor<4x5xf32>
  }
}
