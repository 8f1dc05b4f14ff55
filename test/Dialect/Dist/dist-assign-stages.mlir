// RUN: strait-opt %s -split-input-file --dist-assign-stages='boundaries=2' | FileCheck %s
// RUN: strait-opt %s -split-input-file --dist-assign-stages='boundaries=2 replicas=2,1 micro-batches=4' | FileCheck %s --check-prefix=REPL

// Cost nodes 0-1 (MatMul, Relu) go to stage 0, nodes 2-3 to stage 1; reads
// go with their users; the plan names one rank per stage.

// CHECK: module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, devices = ["rank0"], ranks = [0]>, #dist.placement<stage = 1, devices = ["rank1"], ranks = [1]>]>}
// REPL: module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 4, stages = [#dist.placement<stage = 0, devices = ["rank0", "rank1"], ranks = [0, 1]>, #dist.placement<stage = 1, devices = ["rank2"], ranks = [2]>]>}
graph.Variable @layers.0.w : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32>
// CHECK-LABEL: func @main
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
  // CHECK: graph.ReadVariable @layers.0.w {dist.stage = #dist.stage<0>}
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  // CHECK: graph.MatMul {{.*}} {dist.stage = #dist.stage<0>}
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // CHECK: graph.Relu {{.*}} {dist.stage = #dist.stage<0>}
  %r = graph.Relu %h : tensor<2x4xf32>
  // CHECK: graph.ReadVariable @layers.1.w {dist.stage = #dist.stage<1>}
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  // CHECK: graph.MatMul {{.*}} {dist.stage = #dist.stage<1>}
  %y = graph.MatMul %r, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  // CHECK: graph.Add {{.*}} {dist.stage = #dist.stage<1>}
  %z = graph.Add %y, %h : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %z : tensor<2x4xf32>
}

// -----

// A constant used in both stages is cloned: the original stays with the
// first stage's user, the clone serves the second.

// CHECK-LABEL: func @main
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> tensor<2x4xf32> {
  // CHECK: %[[C1:.*]] = graph.Constant {{.*}}dist.stage = #dist.stage<1>
  // CHECK-NEXT: %[[C0:.*]] = graph.Constant {{.*}}dist.stage = #dist.stage<0>
  %c = graph.Constant dense<2.0> : tensor<2x4xf32>
  // CHECK: graph.Mul %{{.*}}, %[[C0]] {dist.stage = #dist.stage<0>}
  %a = graph.Mul %x, %c : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  // CHECK: graph.Relu {{.*}} {dist.stage = #dist.stage<0>}
  %b = graph.Relu %a : tensor<2x4xf32>
  // CHECK: graph.Add %{{.*}}, %[[C1]] {dist.stage = #dist.stage<1>}
  %d = graph.Add %b, %c : (tensor<2x4xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  return %d : tensor<2x4xf32>
}

// -----

// Backward ops follow their forward op (graph.grad_of) even where the
// boundaries put them elsewhere (node 2 -> stage 1), and gradient
// accumulation follows its variable (node 3 -> stage 1).

graph.Variable @layers.0.w : tensor<4x4xf32>
// CHECK-LABEL: func @main
func.func @main(%x: tensor<4x4xf32> {graph.name = "x"}) -> (tensor<4x4xf32>, tensor<4x4xf32>) {
  %w = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  // CHECK: graph.MatMul {{.*}}dist.stage = #dist.stage<0>
  %h = graph.MatMul %x, %w {graph.op_id = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  // CHECK: graph.Relu {{.*}}dist.stage = #dist.stage<0>
  %r = graph.Relu %h {graph.op_id = 1 : i64} : tensor<4x4xf32>
  // CHECK: graph.MatMul {{.*}}dist.stage = #dist.stage<0>{{.*}}graph.grad_of = 0
  %dw = graph.MatMul %x, %r {graph.grad_of = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  // CHECK: graph.AccumulateGrad {{.*}} for @layers.0.w {dist.stage = #dist.stage<0>
  %g = graph.AccumulateGrad %dw for @layers.0.w {micro_batches = 1 : i64} : tensor<4x4xf32>
  return %r, %g : tensor<4x4xf32>, tensor<4x4xf32>
}

// -----

// A variable the step updates that both stages read (a tied weight) gets a
// copy in each: a read per stage, the accumulation in the stage computing
// the gradient (stage 1 only here), and the update (SGD, both assignments,
// the optimizer state's read) once per copy stage, on the same accumulated
// gradient. Nothing is read once and sent.

graph.Variable @layers.0.w : tensor<4x4xf32>
graph.Variable @layers.0.w.momentum {frozen, graph.optimizer_state_of = @layers.0.w} : tensor<4x4xf32>
// CHECK-LABEL: func @main
func.func @main(%x: tensor<4x4xf32> {graph.name = "x"}, %lr: tensor<f32> {graph.name = "lr"}) -> tensor<4x4xf32> {
  // CHECK: %[[W1:.*]] = graph.ReadVariable @layers.0.w {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[W0:.*]] = graph.ReadVariable @layers.0.w {dist.stage = #dist.stage<0>}
  %w = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  // CHECK-NEXT: graph.MatMul %{{.*}}, %[[W0]] {dist.stage = #dist.stage<0>
  %h = graph.MatMul %x, %w {graph.op_id = 0 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  // CHECK: graph.Relu {{.*}}dist.stage = #dist.stage<0>
  %r = graph.Relu %h {graph.op_id = 1 : i64} : tensor<4x4xf32>
  // CHECK: %[[Y:.*]] = graph.MatMul %{{.*}}, %[[W1]] {dist.stage = #dist.stage<1>
  %y = graph.MatMul %r, %w {graph.op_id = 2 : i64} : (tensor<4x4xf32>, tensor<4x4xf32>) -> tensor<4x4xf32>
  // CHECK-NEXT: %[[G:.*]] = graph.AccumulateGrad %[[Y]] for @layers.0.w {dist.stage = #dist.stage<1>
  %g = graph.AccumulateGrad %y for @layers.0.w {micro_batches = 1 : i64} : tensor<4x4xf32>
  // CHECK-NEXT: %[[U0:.*]] = graph.ReadVariable @layers.0.w {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[V0:.*]] = graph.ReadVariable @layers.0.w.momentum {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[P0:.*]], %[[M0:.*]] = graph.SGD %{{.*}}, %[[U0]], %[[G]], %[[V0]] {dist.stage = #dist.stage<0>
  // CHECK-NEXT: %[[U1:.*]] = graph.ReadVariable @layers.0.w {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[V1:.*]] = graph.ReadVariable @layers.0.w.momentum {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[P1:.*]], %[[M1:.*]] = graph.SGD %{{.*}}, %[[U1]], %[[G]], %[[V1]] {dist.stage = #dist.stage<1>
  %v = graph.ReadVariable @layers.0.w.momentum : tensor<4x4xf32>
  %p:2 = graph.SGD %lr, %w, %g, %v {momentum = 0.9 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  // CHECK-NEXT: graph.AssignVariable @layers.0.w = %[[P0]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: graph.AssignVariable @layers.0.w = %[[P1]] {dist.stage = #dist.stage<1>}
  graph.AssignVariable @layers.0.w = %p#0 : tensor<4x4xf32>
  // CHECK-NEXT: graph.AssignVariable @layers.0.w.momentum = %[[M0]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: graph.AssignVariable @layers.0.w.momentum = %[[M1]] {dist.stage = #dist.stage<1>}
  graph.AssignVariable @layers.0.w.momentum = %p#1 : tensor<4x4xf32>
  return %y : tensor<4x4xf32>
}

// -----

// A forward op computed from a weight only (the transposed tied embedding,
// node 0, planned in stage 0) goes with its user in stage 1, where the read
// is cloned: no transfer of the transposed weight.

graph.Variable @emb : tensor<8x4xf32>
// CHECK-LABEL: func @main
func.func @main(%ids: tensor<2xi64> {graph.name = "ids"}) -> tensor<2x8xf32> {
  // CHECK: %[[E1:.*]] = graph.ReadVariable @emb {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[E0:.*]] = graph.ReadVariable @emb {dist.stage = #dist.stage<0>}
  %e = graph.ReadVariable @emb : tensor<8x4xf32>
  // CHECK-NEXT: graph.Transpose %[[E1]] {dist.stage = #dist.stage<1>
  %t = graph.Transpose %e {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  // CHECK-NEXT: graph.Gather %[[E0]], {{.*}}dist.stage = #dist.stage<0>
  %h = graph.Gather %e, %ids {axis = 0 : i64} : (tensor<8x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  // CHECK-NEXT: graph.Relu {{.*}}dist.stage = #dist.stage<1>
  %r = graph.Relu %h : tensor<2x4xf32>
  // CHECK-NEXT: graph.MatMul {{.*}}dist.stage = #dist.stage<1>
  %y = graph.MatMul %r, %t : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  return %y : tensor<2x8xf32>
}
