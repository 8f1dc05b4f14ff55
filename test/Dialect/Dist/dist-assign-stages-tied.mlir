// RUN: strait-opt %s -split-input-file -verify-diagnostics --dist-assign-stages='boundaries=2' --dist-insert-comm | FileCheck %s

// A tied embedding (@wte: the Gather of stage 0 and, transposed, the LM-head
// MatMul of stage 1) is read in each stage instead of being sent every
// micro-batch. Each stage sums and accumulates its own gradient terms; once
// per step (dist.per_step) the partials cross in both directions and each
// copy adds them in stage order (stage 0's + stage 1's) before its own SGD.

graph.Variable @wte : tensor<8x4xf32>
graph.Variable @wte.momentum {frozen, graph.optimizer_state_of = @wte} : tensor<8x4xf32>
// CHECK-LABEL: func @main
func.func @main(%ids: tensor<2xi64> {graph.name = "ids"}, %lr: tensor<f32> {graph.name = "lr"}) -> tensor<2x8xf32> {
  // CHECK: %[[E1:.*]] = graph.ReadVariable @wte {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[E0:.*]] = graph.ReadVariable @wte {dist.stage = #dist.stage<0>}
  // CHECK-NOT: dist.send
  %e = graph.ReadVariable @wte : tensor<8x4xf32>
  // CHECK: graph.Gather %[[E0]], {{.*}}dist.stage = #dist.stage<0>
  %h = graph.Gather %e, %ids {axis = 0 : i64, graph.op_id = 0 : i64} : (tensor<8x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  %r = graph.Relu %h {graph.op_id = 1 : i64} : tensor<2x4xf32>
  // CHECK: dist.send %{{.*}} to stage 1 channel {{.*}} : tensor<2x4xf32>
  // CHECK: graph.Transpose %[[E1]] {dist.stage = #dist.stage<1>
  %t = graph.Transpose %e {perm = array<i64: 1, 0>, graph.op_id = 2 : i64} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %y = graph.MatMul %r, %t {graph.op_id = 3 : i64} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  // Backward: the LM head's terms in stage 1, the embedding's in stage 0.
  %rt = graph.Transpose %r {perm = array<i64: 1, 0>, graph.grad_of = 3 : i64} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dt = graph.MatMul %rt, %y {graph.grad_of = 3 : i64} : (tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  // CHECK: %[[D1:.*]] = graph.Transpose {{.*}}dist.stage = #dist.stage<1>, graph.grad_of = 2
  %de1 = graph.Transpose %dt {perm = array<i64: 1, 0>, graph.grad_of = 2 : i64} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  // CHECK: graph.MatMul %{{.*}}, %[[E1]] {dist.stage = #dist.stage<1>, graph.grad_of = 3
  %dh = graph.MatMul %y, %e {graph.grad_of = 3 : i64} : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  // CHECK: dist.send %{{.*}} to stage 0 channel {{.*}}dist.backward{{.*}} : tensor<2x4xf32>
  // CHECK: %[[D0:.*]] = graph.GatherGrad {{.*}}dist.stage = #dist.stage<0>
  %de0 = graph.GatherGrad %dh, %ids {data_shape = array<i64: 8, 4>, graph.grad_of = 0 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<8x4xf32>
  %gsum = graph.Add %de0, %de1 {graph.grad_of = 0 : i64} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // CHECK: %[[A0:.*]] = graph.AccumulateGrad %[[D0]] for @wte {dist.stage = #dist.stage<0>
  // CHECK-NEXT: dist.send %[[A0]] to stage 1 channel [[C0:[0-9]+]] {dist.backward, dist.per_step, dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[R0:.*]] = dist.recv from stage 0 channel [[C0]] {dist.backward, dist.per_step, dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[A1:.*]] = graph.AccumulateGrad %[[D1]] for @wte {dist.stage = #dist.stage<1>
  // CHECK-NEXT: dist.send %[[A1]] to stage 0 channel [[C1:[0-9]+]] {dist.backward, dist.per_step, dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[R1:.*]] = dist.recv from stage 1 channel [[C1]] {dist.backward, dist.per_step, dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[S0:.*]] = graph.Add %[[A0]], %[[R1]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[S1:.*]] = graph.Add %[[R0]], %[[A1]] {dist.stage = #dist.stage<1>}
  %g = graph.AccumulateGrad %gsum for @wte {micro_batches = 1 : i64} : tensor<8x4xf32>
  // CHECK-NEXT: graph.ReadVariable @wte {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: graph.ReadVariable @wte.momentum {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[P0:.*]], %{{.*}} = graph.SGD %{{.*}}, %{{.*}}, %[[S0]], %{{.*}} {dist.stage = #dist.stage<0>
  // CHECK-NEXT: graph.ReadVariable @wte {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: graph.ReadVariable @wte.momentum {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[P1:.*]], %{{.*}} = graph.SGD %{{.*}}, %{{.*}}, %[[S1]], %{{.*}} {dist.stage = #dist.stage<1>
  %v = graph.ReadVariable @wte.momentum : tensor<8x4xf32>
  %w = graph.ReadVariable @wte : tensor<8x4xf32>
  %p:2 = graph.SGD %lr, %w, %g, %v {momentum = 0.9 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>)
  // CHECK-NEXT: graph.AssignVariable @wte = %[[P0]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: graph.AssignVariable @wte = %[[P1]] {dist.stage = #dist.stage<1>}
  graph.AssignVariable @wte = %p#0 : tensor<8x4xf32>
  // CHECK-NEXT: graph.AssignVariable @wte.momentum = {{.*}}dist.stage = #dist.stage<0>
  // CHECK-NEXT: graph.AssignVariable @wte.momentum = {{.*}}dist.stage = #dist.stage<1>
  // CHECK-NOT: dist.send
  graph.AssignVariable @wte.momentum = %p#1 : tensor<8x4xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Global-norm clipping mixes every gradient: the tied variable cannot have a
// copy per stage (each copy would need all other stages' gradients). It
// keeps one owner, which sends it every micro-batch, and a warning says so.

graph.Variable @wte : tensor<8x4xf32>
graph.Variable @b : tensor<4xf32>
// CHECK-LABEL: func @main
func.func @main(%ids: tensor<2xi64> {graph.name = "ids"}, %lr: tensor<f32> {graph.name = "lr"}) -> tensor<2x8xf32> {
  // CHECK: %[[E:.*]] = graph.ReadVariable @wte {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: dist.send %[[E]] to stage 1
  %e = graph.ReadVariable @wte : tensor<8x4xf32>
  %bias = graph.ReadVariable @b : tensor<4xf32>
  %h = graph.Gather %e, %ids {axis = 0 : i64, graph.op_id = 0 : i64} : (tensor<8x4xf32>, tensor<2xi64>) -> tensor<2x4xf32>
  %r = graph.Add %h, %bias {graph.op_id = 1 : i64} : (tensor<2x4xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %t = graph.Transpose %e {perm = array<i64: 1, 0>, graph.op_id = 2 : i64} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %y = graph.MatMul %r, %t {graph.op_id = 3 : i64} : (tensor<2x4xf32>, tensor<4x8xf32>) -> tensor<2x8xf32>
  %rt = graph.Transpose %r {perm = array<i64: 1, 0>, graph.grad_of = 3 : i64} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %dt = graph.MatMul %rt, %y {graph.grad_of = 3 : i64} : (tensor<4x2xf32>, tensor<2x8xf32>) -> tensor<4x8xf32>
  %de1 = graph.Transpose %dt {perm = array<i64: 1, 0>, graph.grad_of = 2 : i64} : (tensor<4x8xf32>) -> tensor<8x4xf32>
  %dh = graph.MatMul %y, %e {graph.grad_of = 3 : i64} : (tensor<2x8xf32>, tensor<8x4xf32>) -> tensor<2x4xf32>
  %db = graph.ReduceToShape %dh {shape = array<i64: 4>, graph.grad_of = 1 : i64} : (tensor<2x4xf32>) -> tensor<4xf32>
  %de0 = graph.GatherGrad %dh, %ids {data_shape = array<i64: 8, 4>, graph.grad_of = 0 : i64} : (tensor<2x4xf32>, tensor<2xi64>) -> tensor<8x4xf32>
  %gsum = graph.Add %de0, %de1 {graph.grad_of = 0 : i64} : (tensor<8x4xf32>, tensor<8x4xf32>) -> tensor<8x4xf32>
  // expected-warning @below {{variable @wte is read in 2 pipeline stages but cannot have a copy in each: its update 'graph.ClipByGlobalNorm' also reads a value of 'graph.AccumulateGrad' (e.g. global-norm clipping); its owner stage sends it every micro-batch instead}}
  %g = graph.AccumulateGrad %gsum for @wte {micro_batches = 1 : i64} : tensor<8x4xf32>
  %gb = graph.AccumulateGrad %db for @b {micro_batches = 1 : i64} : tensor<4xf32>
  %n, %c:2 = graph.ClipByGlobalNorm %g, %gb {max_norm = 1.0 : f32} : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<8x4xf32>, tensor<4xf32>)
  %w = graph.ReadVariable @wte : tensor<8x4xf32>
  %p:2 = graph.SGD %lr, %w, %c#0, %c#0 {momentum = 0.0 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>)
  graph.AssignVariable @wte = %p#0 : tensor<8x4xf32>
  return %y : tensor<2x8xf32>
}
