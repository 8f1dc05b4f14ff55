// RUN: strait-opt %s --graph-rematerialize -split-input-file | FileCheck %s --check-prefix=REMAT
// RUN: strait-opt %s --graph-rematerialize --graph-fuse-elementwise -split-input-file | FileCheck %s
// RUN: strait-opt %s --graph-fuse-elementwise -split-input-file | FileCheck %s --check-prefix=KEEP

// Rematerialization: the backward (graph.grad_of) reads the forward tanh
// (f32), which derives from the bf16 input alone. The forward chain is
// cloned in front of the backward ops, so the forward group keeps nothing
// for the backward (one result) and the backward group reads the bf16 x.
// REMAT-LABEL: func.func @recompute
// REMAT: %[[T:.*]] = graph.Tanh %{{.*}} {graph.op_id = 2 : i64}
// REMAT: graph.Cast %[[T]] {graph.op_id = 3 : i64, to = bf16}
// REMAT: %[[A2:.*]] = graph.Cast %{{.*}} {graph.grad_of = 2 : i64, to = f32}
// REMAT: %[[T2:.*]] = graph.Tanh %[[A2]] {graph.grad_of = 2 : i64}
// REMAT: graph.Mul %[[T2]], %[[T2]] {graph.grad_of = 2 : i64}
// Without graph-rematerialize the forward keeps tanh for the backward (a
// second result), and the backward group reads it.
// KEEP-LABEL: func.func @recompute
// KEEP: %[[F:.*]]:2 = graph.FusedElementwise
// KEEP: graph.FusedElementwise %[[F]]#{{.}}, %{{.*}} {{.*}}graph.grad_of = 2
// CHECK-LABEL: func.func @recompute
// CHECK-SAME: (%[[X:.*]]: tensor<8xbf16>, %[[G:.*]]: tensor<8xf32>)
// CHECK: %[[Y:.*]] = graph.FusedElementwise %[[X]] {{.*}} : (tensor<8xbf16>) -> tensor<8xbf16>
// CHECK: %[[D:.*]] = graph.FusedElementwise %[[X]], %[[G]] {{.*}}graph.grad_of = 2 : i64, ops = [#graph.fused_op<Identity>, #graph.fused_op<Tanh>, #graph.fused_op<Mul>, #graph.fused_op<Const>, #graph.fused_op<Sub>, #graph.fused_op<Mul>]{{.*}} : (tensor<8xbf16>, tensor<8xf32>) -> tensor<8xf32>
// CHECK: return %[[Y]], %[[D]]
func.func @recompute(%x: tensor<8xbf16>, %g: tensor<8xf32>) -> (tensor<8xbf16>, tensor<8xf32>) {
  %a = graph.Cast %x {graph.op_id = 1 : i64, to = f32} : (tensor<8xbf16>) -> tensor<8xf32>
  %t = graph.Tanh %a {graph.op_id = 2 : i64} : tensor<8xf32>
  %y = graph.Cast %t {graph.op_id = 3 : i64, to = bf16} : (tensor<8xf32>) -> tensor<8xbf16>
  %tt = graph.Mul %t, %t {graph.grad_of = 2 : i64} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %one = graph.Constant dense<1.0> : tensor<f32>
  %s = graph.Sub %one, %tt {graph.grad_of = 2 : i64} : (tensor<f32>, tensor<8xf32>) -> tensor<8xf32>
  %d = graph.Mul %g, %s {graph.grad_of = 2 : i64} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %y, %d : tensor<8xbf16>, tensor<8xf32>
}

// -----

// No rematerialization when recomputing reads more than it saves: tanh
// derives from two f32 tensors, so the forward keeps it (a second result).
// REMAT-LABEL: func.func @keep_when_cheaper
// REMAT-COUNT-1: graph.Tanh
// REMAT-NOT: graph.Tanh
// CHECK-LABEL: func.func @keep_when_cheaper
// CHECK-SAME: (%[[X1:.*]]: tensor<8xf32>, %[[X2:.*]]: tensor<8xf32>, %[[G:.*]]: tensor<8xf32>)
// CHECK: %[[F:.*]]:2 = graph.FusedElementwise %[[X1]], %[[X2]]
// CHECK: graph.Mul %[[G]], %[[F]]#0 {graph.grad_of = 2 : i64}
func.func @keep_when_cheaper(%x1: tensor<8xf32>, %x2: tensor<8xf32>, %g: tensor<8xf32>) -> (tensor<8xf32>, tensor<8xf32>) {
  %s = graph.Add %x1, %x2 {graph.op_id = 1 : i64} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %t = graph.Tanh %s {graph.op_id = 2 : i64} : tensor<8xf32>
  %u = graph.Mul %t, %t {graph.op_id = 3 : i64} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %d = graph.Mul %g, %t {graph.grad_of = 2 : i64} : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  return %u, %d : tensor<8xf32>, tensor<8xf32>
}
