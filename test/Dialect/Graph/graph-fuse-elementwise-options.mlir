// RUN: strait-opt %s --graph-fuse-elementwise='max-instructions=3' | FileCheck %s
// RUN: not strait-opt %s --graph-fuse-elementwise='max-instructions=1' 2>&1 | FileCheck %s --check-prefix=BAD

// max-instructions caps a program, its Const instructions included: the
// constant and the first two ops fill the first group; the last two ops form
// a second one.
// CHECK-LABEL: func.func @capped
// CHECK: %[[A:.*]] = graph.FusedElementwise %{{.*}} {{.*}}ops = [#graph.fused_op<Const>, #graph.fused_op<Mul>, #graph.fused_op<Exp>]
// CHECK: graph.FusedElementwise %[[A]] {{.*}}ops = [#graph.fused_op<Neg>, #graph.fused_op<Tanh>]
// BAD: graph-fuse-elementwise: max-instructions must be in [2, 64], got 1
func.func @capped(%x: tensor<8xf32>) -> tensor<8xf32> {
  %c = graph.Constant dense<2.0> : tensor<f32>
  %a = graph.Mul %x, %c : (tensor<8xf32>, tensor<f32>) -> tensor<8xf32>
  %b = graph.Exp %a : tensor<8xf32>
  %d = graph.Neg %b : tensor<8xf32>
  %e = graph.Tanh %d : tensor<8xf32>
  return %e : tensor<8xf32>
}

