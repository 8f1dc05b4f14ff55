// RUN: strait-opt %s --graph-fuse-attention --graph-fold-transposes --graph-build-training-step='loss=output' | FileCheck %s
// RUN: strait-opt %s --graph-fuse-attention --graph-fold-transposes --graph-build-training-step='loss=output' > %t.mlir
// RUN: not grep -q 'graph.Split' %t.mlir
// RUN: not grep -q 'graph.Concat' %t.mlir
// RUN: not grep -q 'graph.Add {{.*}}tensor<2x4x3x2x4xf32>' %t.mlir
// RUN: strait-opt %s --graph-fuse-attention --graph-fold-transposes --graph-autocast --graph-build-training-step='loss=output' | FileCheck %s --check-prefix=BF16

// GPT-2's attention block over one packed QKV projection [B, T, 3C]. After
// graph-fold-transposes the op reads Q, K and V out of one [B, T, 3, H, D]
// view; autodiff's FusedAttentionGrad inherits the selects and, as Q, Kt, V
// are the view's slices 0, 1, 2, writes its one gradient dQKV itself
// (packed_grad = 1): no Split forward, no Concat of dQ, dK, dV backward,
// no three packed-size gradients summed.
// CHECK-LABEL: func.func @main
// CHECK: %[[P:.*]] = graph.Reshape %[[QKV:.*]] {{.*}} : (tensor<2x4x24xf32>) -> tensor<2x4x3x2x4xf32>
// CHECK: %[[Y:.*]], %[[LSE:.*]] = graph.FusedAttention %[[P]], %[[P]], %[[P]] {{.*}}kt_select = array<i64: 2, 1>{{.*}}q_select = array<i64: 2, 0>{{.*}}v_select = array<i64: 2, 2>
// CHECK: %[[DP:.*]] = graph.FusedAttentionGrad %{{.*}}, %[[P]], %[[P]], %[[P]], %[[Y]], %[[LSE]] {{.*}}kt_select = array<i64: 2, 1>, packed_grad = 1 : i64{{.*}}q_select = array<i64: 2, 0>{{.*}}v_select = array<i64: 2, 2>{{.*}} -> tensor<2x4x3x2x4xf32>
// CHECK-NOT: graph.FusedAttentionGrad
// CHECK: graph.Reshape %[[DP]] {{.*}} -> tensor<2x4x24xf32>
// CHECK: graph.AccumulateGrad %{{.*}} for @w
// Under bf16 autocast each operand reads its own Cast of the packed view;
// Casts of one value to one type count as one packed tensor: dQKV goes
// through the first Cast, the other two get no gradient.
// BF16-LABEL: func.func @main
// BF16: %[[P:.*]] = graph.Reshape {{.*}} -> tensor<2x4x3x2x4xf32>
// BF16: %[[C0:.*]] = graph.Cast %[[P]] {{.*}} -> tensor<2x4x3x2x4xbf16>
// BF16: %[[C1:.*]] = graph.Cast %[[P]]
// BF16: %[[C2:.*]] = graph.Cast %[[P]]
// BF16: graph.FusedAttention %[[C0]], %[[C1]], %[[C2]]
// BF16: %[[DP:.*]] = graph.FusedAttentionGrad %{{.*}}, %[[C0]], %[[C1]], %[[C2]], {{.*}}packed_grad = 1 : i64{{.*}} -> tensor<2x4x3x2x4xbf16>
// BF16-NOT: graph.Add
// BF16: graph.Cast %[[DP]] {{.*}} -> tensor<2x4x3x2x4xf32>
// BF16: graph.AccumulateGrad %{{.*}} for @w
module {
  graph.Variable @w : tensor<8x24xf32> = dense<0.1> : tensor<8x24xf32>
  func.func @main(%x: tensor<2x4x8xf32> {graph.name = "x"}) -> (tensor<f32> {graph.name = "loss"}) {
    %w = graph.ReadVariable @w : tensor<8x24xf32>
    %c = graph.Constant dense<0.5> : tensor<f32>
    %qkv = graph.MatMul %x, %w : (tensor<2x4x8xf32>, tensor<8x24xf32>) -> tensor<2x4x24xf32>
    %q0, %k0, %v0 = graph.Split %qkv {axis = 2 : i64, split = array<i64: 8, 8, 8>} : (tensor<2x4x24xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>)
    %qr = graph.Reshape %q0 {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
    %kr = graph.Reshape %k0 {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
    %vr = graph.Reshape %v0 {shape = array<i64: 2, 4, 2, 4>} : (tensor<2x4x8xf32>) -> tensor<2x4x2x4xf32>
    %q = graph.Transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
    %kt = graph.Transpose %kr {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
    %v = graph.Transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x2x4xf32>) -> tensor<2x2x4x4xf32>
    %s = graph.MatMul %q, %kt : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
    %a = graph.Mul %s, %c : (tensor<2x2x4x4xf32>, tensor<f32>) -> tensor<2x2x4x4xf32>
    %p = graph.Softmax %a : (tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
    %y = graph.MatMul %p, %v : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x4xf32>
    %t = graph.Tanh %y : tensor<2x2x4x4xf32>
    %l = graph.ReduceSum %t {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x2x4x4xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
