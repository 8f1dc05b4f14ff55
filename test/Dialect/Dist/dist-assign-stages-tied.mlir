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

// Global-norm clipping with a tied variable: clipping is stage-local (each
// stage's sum of squares of its own gradients, the scalars exchanged once per
// step), so @wte still has a copy per stage. The partial gradients are
// exchanged first; the summed tied gradient enters the norm once, in stage 0
// (its original accumulation's stage), and each copy scales its own sum by
// its own stage's scale.

graph.Variable @wte : tensor<8x4xf32>
graph.Variable @b : tensor<4xf32>
// CHECK-LABEL: func @main
// CHECK-NOT: graph.ClipByGlobalNorm
func.func @main(%ids: tensor<2xi64> {graph.name = "ids"}, %lr: tensor<f32> {graph.name = "lr"}) -> tensor<2x8xf32> {
  // CHECK: graph.ReadVariable @wte {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: graph.ReadVariable @wte {dist.stage = #dist.stage<0>}
  // CHECK-NOT: dist.send {{.*}} : tensor<8x4xf32>
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
  // CHECK: %[[P0:.*]] = graph.AccumulateGrad %{{.*}} for @wte {dist.stage = #dist.stage<0>
  // CHECK-NEXT: dist.send %[[P0]] to stage 1 {{.*}}dist.per_step
  // CHECK-NEXT: %[[P0R:.*]] = dist.recv from stage 0 {{.*}}dist.per_step
  // CHECK-NEXT: %[[P1:.*]] = graph.AccumulateGrad %{{.*}} for @wte {dist.stage = #dist.stage<1>
  // CHECK-NEXT: dist.send %[[P1]] to stage 0 {{.*}}dist.per_step
  // CHECK-NEXT: %[[P1R:.*]] = dist.recv from stage 1 {{.*}}dist.per_step
  // CHECK-NEXT: %[[W0:.*]] = graph.Add %[[P0]], %[[P1R]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[W1:.*]] = graph.Add %[[P0R]], %[[P1]] {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: %[[GB:.*]] = graph.AccumulateGrad %{{.*}} for @b {dist.stage = #dist.stage<0>
  // The tied gradient's square sum, once (stage 0); stage 1 has no other
  // gradient: it only receives stage 0's sum.
  // CHECK-NEXT: %[[SW:.*]] = graph.ReduceSumSquare %[[W0]] {{.*}}dist.stage = #dist.stage<0>
  // CHECK-NEXT: %[[SB:.*]] = graph.ReduceSumSquare %[[GB]] {{.*}}dist.stage = #dist.stage<0>
  // CHECK-NEXT: %[[S:.*]] = graph.Add %[[SW]], %[[SB]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: dist.send %[[S]] to stage 1 {{.*}}dist.per_step{{.*}} : tensor<f32>
  // CHECK-NEXT: %[[SR:.*]] = dist.recv from stage 0 {{.*}}dist.per_step{{.*}} : tensor<f32>
  // CHECK-NEXT: graph.Sqrt %[[S]] {dist.stage = #dist.stage<0>}
  // CHECK: %[[C0:.*]] = graph.Min {{.*}}dist.stage = #dist.stage<0>
  // CHECK-NEXT: graph.Sqrt %[[SR]] {dist.stage = #dist.stage<1>}
  // CHECK: %[[C1:.*]] = graph.Min {{.*}}dist.stage = #dist.stage<1>
  // CHECK-NEXT: %[[U0:.*]] = graph.Mul %[[W0]], %[[C0]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[U1:.*]] = graph.Mul %[[W1]], %[[C1]] {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: graph.Mul %[[GB]], %[[C0]] {dist.stage = #dist.stage<0>}
  // CHECK-NOT: dist.send
  // CHECK: graph.SGD %{{.*}}, %{{.*}}, %[[U0]], %[[U0]] {dist.stage = #dist.stage<0>}
  // CHECK: graph.SGD %{{.*}}, %{{.*}}, %[[U1]], %[[U1]] {dist.stage = #dist.stage<1>}
  // CHECK: graph.AssignVariable @wte = {{.*}}dist.stage = #dist.stage<0>
  // CHECK-NEXT: graph.AssignVariable @wte = {{.*}}dist.stage = #dist.stage<1>
  %g = graph.AccumulateGrad %gsum for @wte {micro_batches = 1 : i64} : tensor<8x4xf32>
  %gb = graph.AccumulateGrad %db for @b {micro_batches = 1 : i64} : tensor<4xf32>
  %n, %c:2 = graph.ClipByGlobalNorm %g, %gb {max_norm = 1.0 : f32} : (tensor<8x4xf32>, tensor<4xf32>) -> (tensor<f32>, tensor<8x4xf32>, tensor<4xf32>)
  %w = graph.ReadVariable @wte : tensor<8x4xf32>
  %p:2 = graph.SGD %lr, %w, %c#0, %c#0 {momentum = 0.0 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<8x4xf32>, tensor<8x4xf32>, tensor<8x4xf32>) -> (tensor<8x4xf32>, tensor<8x4xf32>)
  graph.AssignVariable @wte = %p#0 : tensor<8x4xf32>
  return %y : tensor<2x8xf32>
}
