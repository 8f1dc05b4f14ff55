// RUN: strait-opt %s --graph-build-training-step='optimizer=none return-gradients=true step-outputs=all' | FileCheck %s

// Gradients only (gradient checks, external optimizers): no lr/step
// arguments, no accumulation, no update and no state change (BatchNorm's
// running statistics are not stored); each gradient is a named result after
// the loss.

// CHECK-NOT: adam
// CHECK-LABEL: func.func @main
// CHECK-SAME: (%{{.*}}: tensor<2x2x3x3xf32> {graph.name = "pixels"}, %{{.*}}: tensor<2xi64> {graph.name = "labels"})
// CHECK-SAME: -> (tensor<2x4xf32> {graph.name = "logits"}, tensor<f32> {graph.name = "loss"}, tensor<2xf32> {graph.name = "grad.bn.weight"}, tensor<2xf32> {graph.name = "grad.bn.bias"}, tensor<4x2xf32> {graph.name = "grad.fc.weight"})
// CHECK: graph.BatchNormalizationTraining
// CHECK-NOT: graph.AssignVariable
// CHECK-NOT: graph.AccumulateGrad
// CHECK: %[[DX:.*]], %[[DS:.*]], %[[DB:.*]] = graph.BatchNormalizationGrad
// CHECK: return %{{.*}}, %{{.*}}, %[[DS]], %[[DB]], %{{.*}} :
module {
  graph.Variable @bn.weight : tensor<2xf32> = dense<1.0> : tensor<2xf32>
  graph.Variable @bn.bias : tensor<2xf32> = dense<0.0> : tensor<2xf32>
  graph.Variable @bn.running_mean : tensor<2xf32> = dense<0.0> : tensor<2xf32>
  graph.Variable @bn.running_var : tensor<2xf32> = dense<1.0> : tensor<2xf32>
  graph.Variable @fc.weight : tensor<4x2xf32> = dense<0.5> : tensor<4x2xf32>
  func.func @main(%x: tensor<2x2x3x3xf32> {graph.name = "pixels"}) -> (tensor<2x4xf32> {graph.name = "logits"}) {
    %g = graph.ReadVariable @bn.weight : tensor<2xf32>
    %c = graph.ReadVariable @bn.bias : tensor<2xf32>
    %m = graph.ReadVariable @bn.running_mean : tensor<2xf32>
    %v = graph.ReadVariable @bn.running_var : tensor<2xf32>
    %y = graph.BatchNormalization %x, %g, %c, %m, %v : (tensor<2x2x3x3xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2x2x3x3xf32>
    %p = graph.GlobalAveragePool %y : (tensor<2x2x3x3xf32>) -> tensor<2x2x1x1xf32>
    %f = graph.Flatten %p {axis = 1 : i64} : (tensor<2x2x1x1xf32>) -> tensor<2x2xf32>
    %w = graph.ReadVariable @fc.weight : tensor<4x2xf32>
    %l = graph.Gemm %f, %w {transB = 1 : i64} : (tensor<2x2xf32>, tensor<4x2xf32>) -> tensor<2x4xf32>
    return %l : tensor<2x4xf32>
  }
}
