// RUN: strait-opt %s --graph-build-training-step='loss=output' | FileCheck %s

// BatchNormalization switches to batch statistics; its running statistics
// are stored back with AssignVariable in the forward part and are not
// trained (no optimizer state, no gradient). The backward ops take the saved
// batch statistics and LayerNorm's input as explicit values. The output is
// the loss (loss=output): no extra result.

// CHECK-NOT: @bn.running_mean.adam_m
// CHECK-NOT: @bn.running_var.adam_m
// CHECK-LABEL: func.func @main
// CHECK-SAME: -> (tensor<f32> {graph.name = "loss"})
// CHECK: %[[G:.*]] = graph.ReadVariable @bn.weight
// CHECK: %[[Y:.*]], %[[MEAN:.*]], %[[ISTD:.*]], %[[RM:.*]], %[[RV:.*]] = graph.BatchNormalizationTraining %[[X:[a-z0-9]+]], %[[G]], {{.*}}graph.op_id = 4
// CHECK-NEXT: graph.AssignVariable @bn.running_mean = %[[RM]] {graph.op_id = 5 : i64}
// CHECK-NEXT: graph.AssignVariable @bn.running_var = %[[RV]] {graph.op_id = 6 : i64}
// CHECK: %[[F:.*]] = graph.Reshape %[[Y]]
// CHECK: %[[LW:.*]] = graph.ReadVariable @ln.weight
// CHECK: graph.LayerNormalization %[[F]], %[[LW]], {{.*}}graph.op_id = 10
// CHECK: %[[DX:.*]], %[[DSC:.*]], %[[DB:.*]] = graph.LayerNormalizationGrad %{{.*}}, %[[F]], %[[LW]] {graph.grad_of = 10 : i64}
// CHECK: %[[DY:.*]] = graph.Reshape %[[DX]] {{.*}}graph.grad_of = 7
// CHECK: %{{.*}}, %[[DG:.*]], %[[DBB:.*]] = graph.BatchNormalizationGrad %[[DY]], %[[X]], %[[G]], %[[MEAN]], %[[ISTD]] {graph.grad_of = 4 : i64}
// CHECK-DAG: graph.AccumulateGrad %[[DSC]] for @ln.weight
// CHECK-DAG: graph.AccumulateGrad %[[DB]] for @ln.bias
// CHECK-DAG: graph.AccumulateGrad %[[DG]] for @bn.weight
// CHECK-DAG: graph.AccumulateGrad %[[DBB]] for @bn.bias
// CHECK-NOT: graph.AccumulateGrad {{.*}} for @bn.running
// CHECK: return
module {
  graph.Variable @ln.weight : tensor<8xf32> = dense<1.0> : tensor<8xf32>
  graph.Variable @ln.bias : tensor<8xf32> = dense<0.0> : tensor<8xf32>
  graph.Variable @bn.weight : tensor<2xf32> = dense<1.0> : tensor<2xf32>
  graph.Variable @bn.bias : tensor<2xf32> = dense<0.0> : tensor<2xf32>
  graph.Variable @bn.running_mean : tensor<2xf32> = dense<0.0> : tensor<2xf32>
  graph.Variable @bn.running_var : tensor<2xf32> = dense<1.0> : tensor<2xf32>
  func.func @main(%x: tensor<2x2x2x2xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %g = graph.ReadVariable @bn.weight : tensor<2xf32>
    %c = graph.ReadVariable @bn.bias : tensor<2xf32>
    %m = graph.ReadVariable @bn.running_mean : tensor<2xf32>
    %v = graph.ReadVariable @bn.running_var : tensor<2xf32>
    %y = graph.BatchNormalization %x, %g, %c, %m, %v {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x2x2x2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>, tensor<2xf32>) -> tensor<2x2x2x2xf32>
    %f = graph.Reshape %y {shape = array<i64: 2, 8>} : (tensor<2x2x2x2xf32>) -> tensor<2x8xf32>
    %lw = graph.ReadVariable @ln.weight : tensor<8xf32>
    %lb = graph.ReadVariable @ln.bias : tensor<8xf32>
    %n = graph.LayerNormalization %f, %lw, %lb {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x8xf32>, tensor<8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
    %l = graph.ReduceSum %n {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
