// RUN: strait-opt %s -verify-diagnostics --dist-assign-stages='boundaries=2 replicas=2,1' --dist-insert-comm | FileCheck %s

// Stage-local global-norm clipping: stage 0 (two replicas) owns @w0, stage 1
// owns @w1. Each stage sums the squares of its own (all-reduced) gradients;
// only these f32 scalars cross the cut, once per step (dist.per_step); every
// stage adds them in stage order (stage 0's + stage 1's), takes the norm and
// the scale min(1, max_norm / (norm + 1e-6)) and scales its own gradients.
// No gradient tensor crosses stages and graph.ClipByGlobalNorm is gone.

graph.Variable @w0 : tensor<4x4xf32>
graph.Variable @w1 : tensor<4x2xf32>
// CHECK-LABEL: func @main
// CHECK-NOT: graph.ClipByGlobalNorm
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}, %lr: tensor<f32> {graph.name = "lr"}) -> tensor<2x2xf32> {
  %a = graph.ReadVariable @w0 : tensor<4x4xf32>
  %b = graph.ReadVariable @w1 : tensor<4x2xf32>
  %h = graph.MatMul %x, %a {graph.op_id = 0 : i64} : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %r = graph.Relu %h {graph.op_id = 1 : i64} : tensor<2x4xf32>
  %y = graph.MatMul %r, %b {graph.op_id = 2 : i64} : (tensor<2x4xf32>, tensor<4x2xf32>) -> tensor<2x2xf32>
  %rt = graph.Transpose %r {perm = array<i64: 1, 0>, graph.grad_of = 2 : i64} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %db = graph.MatMul %rt, %y {graph.grad_of = 2 : i64} : (tensor<4x2xf32>, tensor<2x2xf32>) -> tensor<4x2xf32>
  %bt = graph.Transpose %b {perm = array<i64: 1, 0>, graph.grad_of = 2 : i64} : (tensor<4x2xf32>) -> tensor<2x4xf32>
  %dr = graph.MatMul %y, %bt {graph.grad_of = 2 : i64} : (tensor<2x2xf32>, tensor<2x4xf32>) -> tensor<2x4xf32>
  %xt = graph.Transpose %x {perm = array<i64: 1, 0>, graph.grad_of = 0 : i64} : (tensor<2x4xf32>) -> tensor<4x2xf32>
  %da = graph.MatMul %xt, %dr {graph.grad_of = 0 : i64} : (tensor<4x2xf32>, tensor<2x4xf32>) -> tensor<4x4xf32>
  // CHECK: %[[G0:.*]] = graph.AccumulateGrad %{{.*}} for @w0 {dist.stage = #dist.stage<0>
  // CHECK-NEXT: %[[R0:.*]] = dist.all_reduce %[[G0]]
  %ga = graph.AccumulateGrad %da for @w0 {micro_batches = 1 : i64} : tensor<4x4xf32>
  // CHECK: %[[G1:.*]] = graph.AccumulateGrad %{{.*}} for @w1 {dist.stage = #dist.stage<1>
  %gb = graph.AccumulateGrad %db for @w1 {micro_batches = 1 : i64} : tensor<4x2xf32>
  // The sums of squares: stage 0's of the all-reduced gradient.
  // CHECK: %[[S0:.*]] = graph.ReduceSumSquare %[[R0]] {axes = array<i64: 0, 1>, dist.stage = #dist.stage<0>, keepdims = 0 : i64} : (tensor<4x4xf32>) -> tensor<f32>
  // CHECK-NEXT: dist.send %[[S0]] to stage 1 channel {{[0-9]+}} {dist.backward, dist.per_step, dist.stage = #dist.stage<0>} : tensor<f32>
  // CHECK-NEXT: %[[S0R:.*]] = dist.recv from stage 0 {{.*}}dist.per_step, dist.stage = #dist.stage<1>} : tensor<f32>
  // CHECK-NEXT: %[[S1:.*]] = graph.ReduceSumSquare %[[G1]] {axes = array<i64: 0, 1>, dist.stage = #dist.stage<1>, keepdims = 0 : i64} : (tensor<4x2xf32>) -> tensor<f32>
  // CHECK-NEXT: dist.send %[[S1]] to stage 0 channel {{[0-9]+}} {dist.backward, dist.per_step, dist.stage = #dist.stage<1>} : tensor<f32>
  // CHECK-NEXT: %[[S1R:.*]] = dist.recv from stage 1 {{.*}}dist.per_step, dist.stage = #dist.stage<0>} : tensor<f32>
  // Every stage: stage 0's sum + stage 1's, sqrt, + 1e-6, max_norm / it, min with 1.
  // CHECK-NEXT: %[[T0:.*]] = graph.Add %[[S0]], %[[S1R]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[N0:.*]] = graph.Sqrt %[[T0]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[E0:.*]] = graph.Constant dense<9.99999997E-7> : tensor<f32> {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[D0:.*]] = graph.Add %[[N0]], %[[E0]]
  // CHECK-NEXT: %[[M0:.*]] = graph.Constant dense<5.000000e-01> : tensor<f32> {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[Q0:.*]] = graph.Div %[[M0]], %[[D0]]
  // CHECK-NEXT: %[[ONE0:.*]] = graph.Constant dense<1.000000e+00>
  // CHECK-NEXT: %[[C0:.*]] = graph.Min %[[Q0]], %[[ONE0]] {dist.stage = #dist.stage<0>}
  // CHECK-NEXT: %[[T1:.*]] = graph.Add %[[S0R]], %[[S1]] {dist.stage = #dist.stage<1>}
  // CHECK-NEXT: graph.Sqrt %[[T1]] {dist.stage = #dist.stage<1>}
  // CHECK: %[[C1:.*]] = graph.Min {{.*}}dist.stage = #dist.stage<1>
  // Each stage scales its own gradients.
  // CHECK-NEXT: %[[A:.*]] = graph.Mul %[[R0]], %[[C0]] {dist.stage = #dist.stage<0>} : (tensor<4x4xf32>, tensor<f32>) -> tensor<4x4xf32>
  // CHECK-NEXT: %[[B:.*]] = graph.Mul %[[G1]], %[[C1]] {dist.stage = #dist.stage<1>} : (tensor<4x2xf32>, tensor<f32>) -> tensor<4x2xf32>
  %n, %c:2 = graph.ClipByGlobalNorm %ga, %gb {max_norm = 0.5 : f32} : (tensor<4x4xf32>, tensor<4x2xf32>) -> (tensor<f32>, tensor<4x4xf32>, tensor<4x2xf32>)
  // CHECK-NOT: dist.send
  // CHECK: graph.SGD %{{.*}}, %{{.*}}, %[[A]], %[[A]] {dist.stage = #dist.stage<0>}
  // CHECK: graph.SGD %{{.*}}, %{{.*}}, %[[B]], %[[B]] {dist.stage = #dist.stage<1>}
  %w0 = graph.ReadVariable @w0 : tensor<4x4xf32>
  %p0:2 = graph.SGD %lr, %w0, %c#0, %c#0 {momentum = 0.0 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<4x4xf32>, tensor<4x4xf32>, tensor<4x4xf32>) -> (tensor<4x4xf32>, tensor<4x4xf32>)
  graph.AssignVariable @w0 = %p0#0 : tensor<4x4xf32>
  %w1 = graph.ReadVariable @w1 : tensor<4x2xf32>
  %p1:2 = graph.SGD %lr, %w1, %c#1, %c#1 {momentum = 0.0 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<4x2xf32>, tensor<4x2xf32>, tensor<4x2xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>)
  graph.AssignVariable @w1 = %p1#0 : tensor<4x2xf32>
  // CHECK-NOT: dist.send
  // CHECK: return
  return %y : tensor<2x2xf32>
}
