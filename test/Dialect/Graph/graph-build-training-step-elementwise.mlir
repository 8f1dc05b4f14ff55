// RUN: strait-opt %s -split-input-file --graph-build-training-step='loss=mse optimizer=sgd momentum=0.9 weight-decay=0.01' | FileCheck %s

// Elementwise rules with broadcasting: the bias of shape [3] and the scale of
// shape [1,3] get their gradients summed back (ReduceToShape); @s is used
// twice (Mul and Div), so its two contributions are added. Relu routes the
// gradient with Where; SGD with momentum keeps a velocity variable.

// CHECK-DAG: graph.Variable @b.momentum {frozen, graph.optimizer_state_of = @b} : tensor<3xf32> = dense<0.000000e+00>
// CHECK-DAG: graph.Variable @s.momentum {frozen, graph.optimizer_state_of = @s} : tensor<1x3xf32>
// CHECK-LABEL: func.func @main
// CHECK: %[[S:.*]] = graph.ReadVariable @s {graph.op_id = 1 : i64}
// CHECK: %[[A:.*]] = graph.Add {{.*}}graph.op_id = 2
// CHECK: %[[T:.*]] = graph.Tanh {{.*}}graph.op_id = 4
// CHECK: %[[R:.*]] = graph.Relu {{.*}}graph.op_id = 5
// CHECK: %[[D:.*]] = graph.Div %[[R]], %[[S]] {graph.op_id = 6 : i64}
// CHECK: %[[DD:.*]] = graph.Add {{.*}}graph.grad_of = 8
// CHECK: %[[DR:.*]] = graph.Div %[[DD]], %[[S]] {graph.grad_of = 6 : i64}
// CHECK: %[[Q:.*]] = graph.Mul %[[DD]], %[[D]] {graph.grad_of = 6 : i64}
// CHECK: %[[Q2:.*]] = graph.Div %[[Q]], %[[S]] {graph.grad_of = 6 : i64}
// CHECK: %[[NQ:.*]] = graph.Neg %[[Q2]] {graph.grad_of = 6 : i64}
// CHECK: %[[DS1:.*]] = graph.ReduceToShape %[[NQ]] {graph.grad_of = 6 : i64, shape = array<i64: 1, 3>} : (tensor<4x3xf32>) -> tensor<1x3xf32>
// CHECK: %[[POS:.*]] = graph.Greater %[[T]], %{{.*}} {graph.grad_of = 5 : i64}
// CHECK: %[[DT:.*]] = graph.Where %[[POS]], %[[DR]], %{{.*}} {graph.grad_of = 5 : i64}
// CHECK: %[[TT:.*]] = graph.Mul %[[T]], %[[T]] {graph.grad_of = 4 : i64}
// CHECK: %[[DM:.*]] = graph.Mul %[[DT]], %{{.*}} {graph.grad_of = 4 : i64}
// CHECK: %[[DA:.*]] = graph.Mul %[[DM]], %[[S]] {graph.grad_of = 3 : i64}
// CHECK: %[[Q3:.*]] = graph.Mul %[[DM]], %[[A]] {graph.grad_of = 3 : i64}
// CHECK: %[[DS2:.*]] = graph.ReduceToShape %[[Q3]] {graph.grad_of = 3 : i64, shape = array<i64: 1, 3>}
// CHECK: %[[DS:.*]] = graph.Add %[[DS1]], %[[DS2]] {graph.grad_of = 3 : i64}
// CHECK: %[[DB:.*]] = graph.ReduceToShape %[[DA]] {graph.grad_of = 2 : i64, shape = array<i64: 3>} : (tensor<4x3xf32>) -> tensor<3xf32>
// CHECK: %[[GB:.*]] = graph.AccumulateGrad %[[DB]] for @b
// CHECK: %[[GS:.*]] = graph.AccumulateGrad %[[DS]] for @s
// CHECK: %[[B:.*]] = graph.ReadVariable @b :
// CHECK: %[[VB:.*]] = graph.ReadVariable @b.momentum
// CHECK: %[[NB:.*]], %[[NVB:.*]] = graph.SGD %{{.*}}, %[[B]], %[[GB]], %[[VB]] {momentum = 0.899999976 : f32, weight_decay = 0.00999999977 : f32}
// CHECK: graph.AssignVariable @b = %[[NB]]
// CHECK: graph.AssignVariable @b.momentum = %[[NVB]]
// CHECK: graph.SGD %{{.*}}, %{{.*}}, %[[GS]]
module {
  graph.Variable @b : tensor<3xf32> = dense<0.1> : tensor<3xf32>
  graph.Variable @s : tensor<1x3xf32> = dense<2.0> : tensor<1x3xf32>
  func.func @main(%x: tensor<4x3xf32> {graph.name = "x"}) -> (tensor<4x3xf32> {graph.name = "y"}) {
    %b = graph.ReadVariable @b : tensor<3xf32>
    %s = graph.ReadVariable @s : tensor<1x3xf32>
    %a = graph.Add %x, %b : (tensor<4x3xf32>, tensor<3xf32>) -> tensor<4x3xf32>
    %m = graph.Mul %a, %s : (tensor<4x3xf32>, tensor<1x3xf32>) -> tensor<4x3xf32>
    %t = graph.Tanh %m : tensor<4x3xf32>
    %r = graph.Relu %t : tensor<4x3xf32>
    %d = graph.Div %r, %s : (tensor<4x3xf32>, tensor<1x3xf32>) -> tensor<4x3xf32>
    return %d : tensor<4x3xf32>
  }
}

// -----

// Piecewise activations (MobileNetV3, ...) route dY with comparisons; a
// two-operand Max gives the gradient to the larger operand.

// CHECK-LABEL: func.func @main
// CHECK: %[[HS:.*]] = graph.HardSwish %[[X:[0-9]+]] {graph.op_id
// CHECK: %[[HG:.*]] = graph.HardSigmoid %[[HS]] {{{.*}}graph.op_id
// CHECK: %[[E:.*]] = graph.Elu %[[HG]] {{{.*}}graph.op_id
// CHECK: graph.Max %[[E]], %{{.*}} {graph.op_id
// CHECK: graph.GreaterOrEqual %[[E]], %{{.*}} {graph.grad_of = [[MAXID:[0-9]+]] : i64}
// CHECK: graph.Where {{.*}}graph.grad_of = [[MAXID]]
// CHECK: graph.Greater %[[HG]], %{{.*}} {graph.grad_of
// CHECK: graph.And {{.*}}graph.grad_of
// CHECK: graph.Greater %[[X]], %{{.*}} {graph.grad_of
// CHECK: graph.GreaterOrEqual %[[X]], %{{.*}} {graph.grad_of
// CHECK: graph.AccumulateGrad %{{.*}} for @w
module {
  graph.Variable @w : tensor<4xf32> = dense<0.5> : tensor<4xf32>
  func.func @main(%x: tensor<4xf32> {graph.name = "x"}) -> (tensor<4xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @w : tensor<4xf32>
    %a = graph.Mul %x, %w : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    %hs = graph.HardSwish %a : tensor<4xf32>
    %hg = graph.HardSigmoid %hs {alpha = 0.2 : f32, beta = 0.5 : f32} : tensor<4xf32>
    %e = graph.Elu %hg {alpha = 1.0 : f32} : tensor<4xf32>
    %m = graph.Max %e, %x : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    return %m : tensor<4xf32>
  }
}
