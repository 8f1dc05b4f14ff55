// RUN: strait-opt %s --graph-fuse-attention --graph-fold-transposes -split-input-file | FileCheck %s
// RUN: strait-opt %s --graph-fuse-attention -split-input-file | FileCheck %s --check-prefix=NOFOLD

// GPT-2's attention as exported: the [B, T, 3C] projection split into Q, K,
// V, each reshaped to [B, T, H, D] heads and transposed. The Transposes fold
// into the permutations, then the Split into one Reshape (a view) to
// [B, T, 3, H, D] that the op reads Q, K and V out of with q_select,
// kt_select and v_select; the Split and the heads' Reshapes go.
// CHECK-LABEL: func.func @gpt2_packed
// CHECK-NOT: graph.Split
// CHECK: %[[P:.*]] = graph.Reshape %arg0 {{.*}}shape = array<i64: 2, 16, 3, 4, 16>{{.*}} : (tensor<2x16x192xf32>) -> tensor<2x16x3x4x16xf32>
// CHECK-NOT: graph.Reshape
// CHECK: %[[Y:.*]], %{{.*}} = graph.FusedAttention %[[P]], %[[P]], %[[P]] {kt_perm = array<i64: 0, 2, 3, 1>, kt_select = array<i64: 2, 1>, q_perm = array<i64: 0, 2, 1, 3>, q_select = array<i64: 2, 0>, scale = 2.500000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>, v_select = array<i64: 2, 2>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x3x4x16xf32>, tensor<2x16x3x4x16xf32>, tensor<2x16x3x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
// CHECK-NOT: graph.Split
// CHECK: graph.Reshape %[[Y]] {{.*}} : (tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32>
// NOFOLD-LABEL: func.func @gpt2_packed
// NOFOLD: graph.Split
// NOFOLD-NOT: _select
func.func @gpt2_packed(%qkv: tensor<2x16x192xf32>) -> tensor<2x16x64xf32> {
  %c = graph.Constant dense<2.500000e-01> : tensor<f32>
  %q0, %k0, %v0 = graph.Split %qkv {axis = 2 : i64, split = array<i64: 64, 64, 64>} : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  %qr = graph.Reshape %q0 {shape = array<i64: 2, 16, 4, 16>} : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %kr = graph.Reshape %k0 {shape = array<i64: 2, 16, 4, 16>} : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %vr = graph.Reshape %v0 {shape = array<i64: 2, 16, 4, 16>} : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %q = graph.Transpose %qr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>
  %kt = graph.Transpose %kr {perm = array<i64: 0, 2, 3, 1>} : (tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>
  %v = graph.Transpose %vr {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>) -> tensor<2x4x16x16xf32>
  %s = graph.MatMul %q, %kt : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %a = graph.Mul %s, %c : (tensor<2x4x16x16xf32>, tensor<f32>) -> tensor<2x4x16x16xf32>
  %p = graph.Softmax %a : (tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %y = graph.MatMul %p, %v : (tensor<2x4x16x16xf32>, tensor<2x4x16x16xf32>) -> tensor<2x4x16x16xf32>
  %yt = graph.Transpose %y {perm = array<i64: 0, 2, 1, 3>} : (tensor<2x4x16x16xf32>) -> tensor<2x16x4x16xf32>
  %r = graph.Reshape %yt {shape = array<i64: 2, 16, 64>} : (tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32>
  return %r : tensor<2x16x64xf32>
}

// -----

// A part another op also reads (here V returned as is) keeps the Split: the
// fold only applies when every part reaches the attention alone.
// CHECK-LABEL: func.func @shared_part
// CHECK: graph.Split %arg0
// CHECK-NOT: _select
// CHECK: return
func.func @shared_part(%qkv: tensor<2x16x192xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x16x64xf32>) {
  %q0, %k0, %v0 = graph.Split %qkv {axis = 2 : i64, split = array<i64: 64, 64, 64>} : (tensor<2x16x192xf32>) -> (tensor<2x16x64xf32>, tensor<2x16x64xf32>, tensor<2x16x64xf32>)
  %qr = graph.Reshape %q0 {shape = array<i64: 2, 16, 4, 16>} : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %kr = graph.Reshape %k0 {shape = array<i64: 2, 16, 4, 16>} : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %vr = graph.Reshape %v0 {shape = array<i64: 2, 16, 4, 16>} : (tensor<2x16x64xf32>) -> tensor<2x16x4x16xf32>
  %y, %lse = graph.FusedAttention %qr, %kr, %vr {kt_perm = array<i64: 0, 2, 3, 1>, q_perm = array<i64: 0, 2, 1, 3>, scale = 2.500000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
  return %y, %v0 : tensor<2x16x4x16xf32>, tensor<2x16x64xf32>
}

// -----

// A Split along another axis than the last, or into unequal parts, stays.
// CHECK-LABEL: func.func @unequal
// CHECK: graph.Split %arg0
// CHECK-NOT: _select
// CHECK: return
func.func @unequal(%qkv: tensor<2x16x96xf32>) -> tensor<2x16x4x16xf32> {
  %q0, %k0, %v0 = graph.Split %qkv {axis = 2 : i64, split = array<i64: 16, 16, 64>} : (tensor<2x16x96xf32>) -> (tensor<2x16x16xf32>, tensor<2x16x16xf32>, tensor<2x16x64xf32>)
  %qr = graph.Reshape %q0 {shape = array<i64: 2, 16, 1, 16>} : (tensor<2x16x16xf32>) -> tensor<2x16x1x16xf32>
  %kr = graph.Reshape %k0 {shape = array<i64: 2, 16, 1, 16>} : (tensor<2x16x16xf32>) -> tensor<2x16x1x16xf32>
  %vr = graph.Reshape %v0 {shape = array<i64: 2, 16, 1, 64>} : (tensor<2x16x64xf32>) -> tensor<2x16x1x64xf32>
  %y, %lse = graph.FusedAttention %qr, %kr, %vr {kt_perm = array<i64: 0, 2, 3, 1>, q_perm = array<i64: 0, 2, 1, 3>, scale = 2.500000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x1x16xf32>, tensor<2x16x1x16xf32>, tensor<2x16x1x64xf32>) -> (tensor<2x16x1x64xf32>, tensor<2x1x16xf32>)
  %z = graph.Reshape %y {shape = array<i64: 2, 16, 4, 16>} : (tensor<2x16x1x64xf32>) -> tensor<2x16x4x16xf32>
  return %z : tensor<2x16x4x16xf32>
}
