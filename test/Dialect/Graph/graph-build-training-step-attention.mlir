// RUN: strait-opt %s -split-input-file --graph-fuse-attention --graph-fold-transposes --graph-build-training-step='loss=output' | FileCheck %s --implicit-check-not='tensor<2x4x4xf32>'
// RUN: strait-opt %s -split-input-file --graph-build-training-step='loss=output' | FileCheck %s --check-prefix=UNFUSED
// RUN: strait-opt %s -split-input-file --graph-fuse-attention --graph-fold-transposes --graph-autocast --graph-build-training-step='loss=output' | FileCheck %s --check-prefix=BF16

// One self-attention block (Q, K, V projections of x, a [4, 4] mask). After
// graph-fuse-attention, autodiff builds one FusedAttentionGrad from dY, the
// forward operands, Y and LSE; its dQ, dKt and dV flow back through the
// projections. graph-fold-transposes folds K's Transpose into the op (kt_perm: the logical
// Kt [2, 8, 4] is K [2, 4, 8] under [0, 2, 1]), so the gradient op reads K
// and writes dK [2, 4, 8] directly: no Transpose forward or backward. No
// [2, 4, 4] scores or probabilities exist forward or backward (the implicit
// check), and the mask gets no gradient.
// CHECK-LABEL: func.func @main
// CHECK-DAG: %[[M:.*]] = graph.Constant {{.*}} : tensor<4x4xf32>
// CHECK-DAG: %[[Q:.*]] = graph.MatMul %{{.*}} {graph.op_id = [[QID:[0-9]+]] : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK-DAG: %[[K:.*]] = graph.MatMul %{{.*}} {graph.op_id = [[KID:[0-9]+]] : i64} : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
// CHECK-NOT: graph.Transpose
// CHECK: %[[Y:.*]], %[[LSE:.*]] = graph.FusedAttention %[[Q]], %[[K]], %[[V:.*]], %[[M]] {graph.op_id = [[ID:[0-9]+]] : i64, kt_perm = array<i64: 0, 2, 1>, scale = 0.353553385 : f32}
// CHECK-NOT: graph.Softmax
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = graph.FusedAttentionGrad %{{.*}}, %[[Q]], %[[K]], %[[V]], %[[Y]], %[[LSE]], %[[M]] {graph.grad_of = [[ID]] : i64, kt_perm = array<i64: 0, 2, 1>, scale = 0.353553385 : f32} : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>, tensor<4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NOT: graph.FusedAttentionGrad
// CHECK-NOT: graph.Softmax
// CHECK-NOT: graph.Transpose %[[DK]]
// CHECK: graph.AccumulateGrad %{{.*}} for @wq
// CHECK: return
// Without the pass the Softmax gradient works on [2, 4, 4] tensors.
// UNFUSED-LABEL: func.func @main
// UNFUSED: graph.Softmax {{.*}} -> tensor<2x4x4xf32>
// UNFUSED: graph.SoftmaxGrad {{.*}} -> tensor<2x4x4xf32>
// UNFUSED-NOT: graph.FusedAttention
// Under bf16 autocast the gradient op runs on the bf16 Q, Kt, V, Y and dY
// (the cast of Y's f32 gradient) with the f32 LSE and mask; dQ, dKt, dV are
// cast back to f32 by the Casts' rules.
// BF16-LABEL: func.func @main
// BF16: %[[Y:.*]], %[[LSE:.*]] = graph.FusedAttention %[[Q:.*]], %[[KT:.*]], %[[V:.*]], %[[M:.*]] {{{.*}}} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<4x4xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4xf32>)
// BF16: %[[DY:.*]] = graph.Cast %{{.*}} {{{.*}}to = bf16} : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// BF16: %[[DQ:.*]], %[[DKT:.*]], %[[DV:.*]] = graph.FusedAttentionGrad %[[DY]], %[[Q]], %[[KT]], %[[V]], %[[Y]], %[[LSE]], %[[M]] {{{.*}}} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<4x4xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4x8xbf16>)
// BF16-DAG: graph.Cast %[[DV]] {{{.*}}to = f32}
// BF16-DAG: graph.Cast %[[DKT]] {{{.*}}to = f32}
// BF16-DAG: graph.Cast %[[DQ]] {{{.*}}to = f32}
module {
  graph.Variable @wq : tensor<8x8xf32> = dense<0.1> : tensor<8x8xf32>
  graph.Variable @wk : tensor<8x8xf32> = dense<0.2> : tensor<8x8xf32>
  graph.Variable @wv : tensor<8x8xf32> = dense<0.3> : tensor<8x8xf32>
  func.func @main(%x: tensor<2x4x8xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %wq = graph.ReadVariable @wq : tensor<8x8xf32>
    %wk = graph.ReadVariable @wk : tensor<8x8xf32>
    %wv = graph.ReadVariable @wv : tensor<8x8xf32>
    %m = graph.Constant dense<[[0.0, -1.0e9, -1.0e9, -1.0e9], [0.0, 0.0, -1.0e9, -1.0e9], [0.0, 0.0, 0.0, -1.0e9], [0.0, 0.0, 0.0, 0.0]]> : tensor<4x4xf32>
    %c = graph.Constant dense<0.353553385> : tensor<f32>
    %q = graph.MatMul %x, %wq : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %k = graph.MatMul %x, %wk : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %v = graph.MatMul %x, %wv : (tensor<2x4x8xf32>, tensor<8x8xf32>) -> tensor<2x4x8xf32>
    %kt = graph.Transpose %k {perm = array<i64: 0, 2, 1>} : (tensor<2x4x8xf32>) -> tensor<2x8x4xf32>
    %s = graph.MatMul %q, %kt : (tensor<2x4x8xf32>, tensor<2x8x4xf32>) -> tensor<2x4x4xf32>
    %a = graph.Mul %s, %c : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
    %b = graph.Add %a, %m : (tensor<2x4x4xf32>, tensor<4x4xf32>) -> tensor<2x4x4xf32>
    %p = graph.Softmax %b : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
    %y = graph.MatMul %p, %v : (tensor<2x4x4xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
    %t = graph.Tanh %y : tensor<2x4x8xf32>
    %l = graph.ReduceSum %t {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x4x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
