// RUN: strait-opt %s --graph-fuse-attention --graph-fold-transposes -split-input-file | FileCheck %s
// RUN: strait-opt %s --graph-fuse-attention -split-input-file | FileCheck %s --check-prefix=NOFOLD

// GPT-2's heads: Reshape [B, T, H, D], Transposes to [B, H, T, D] (K to
// [B, H, D, T]) and Y back. The Transposes fold into the permutations: the
// op reads the [B, T, H, D] reshapes and produces Y as [B, T, H, D], which
// the Reshape to [B, T, C] reads.
// CHECK-LABEL: func.func @gpt2_heads
// CHECK: %[[Q:.*]] = graph.Reshape %arg0
// CHECK: %[[K:.*]] = graph.Reshape %arg1
// CHECK: %[[V:.*]] = graph.Reshape %arg2
// CHECK-NOT: graph.Transpose
// CHECK: %[[Y:.*]], %{{.*}} = graph.FusedAttention %[[Q]], %[[K]], %[[V]] {kt_perm = array<i64: 0, 2, 3, 1>, q_perm = array<i64: 0, 2, 1, 3>, scale = 2.500000e-01 : f32, v_perm = array<i64: 0, 2, 1, 3>, y_perm = array<i64: 0, 2, 1, 3>} : (tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>, tensor<2x16x4x16xf32>) -> (tensor<2x16x4x16xf32>, tensor<2x4x16xf32>)
// CHECK-NOT: graph.Transpose
// CHECK: graph.Reshape %[[Y]] {{.*}} : (tensor<2x16x4x16xf32>) -> tensor<2x16x64xf32>
// NOFOLD-LABEL: func.func @gpt2_heads
// NOFOLD-COUNT-4: graph.Transpose
// NOFOLD-NOT: _perm
func.func @gpt2_heads(%q0: tensor<2x16x64xf32>, %k0: tensor<2x16x64xf32>, %v0: tensor<2x16x64xf32>) -> tensor<2x16x64xf32> {
  %c = graph.Constant dense<2.500000e-01> : tensor<f32>
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

// A Transpose another op also reads stays (for that op); a Y with a second
// user keeps its layout (Y cannot be in two). Folding composes with a
// permutation the op already has: Kt = Transpose(Transpose(x, [1, 0, 2]),
// [0, 2, 1]) is x under [1, 2, 0].
// CHECK-LABEL: func.func @partial
// CHECK: %[[QT:.*]] = graph.Transpose %arg0
// CHECK: %[[Y:.*]], %{{.*}} = graph.FusedAttention %arg0, %arg1, %arg2 {kt_perm = array<i64: 1, 2, 0>, q_perm = array<i64: 1, 0, 2>, scale = 5.000000e-01 : f32} : (tensor<5x2x8xf32>, tensor<5x2x8xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5xf32>)
// CHECK: graph.Transpose %[[Y]]
// CHECK: return %[[Y]], %{{.*}}, %[[QT]]
func.func @partial(%x: tensor<5x2x8xf32>, %k: tensor<5x2x8xf32>, %v: tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<5x2x8xf32>, tensor<2x5x8xf32>) {
  %q = graph.Transpose %x {perm = array<i64: 1, 0, 2>} : (tensor<5x2x8xf32>) -> tensor<2x5x8xf32>
  %k1 = graph.Transpose %k {perm = array<i64: 1, 0, 2>} : (tensor<5x2x8xf32>) -> tensor<2x5x8xf32>
  %kt = graph.Transpose %k1 {perm = array<i64: 0, 2, 1>} : (tensor<2x5x8xf32>) -> tensor<2x8x5xf32>
  %y, %lse = graph.FusedAttention %q, %kt, %v {scale = 0.5 : f32} : (tensor<2x5x8xf32>, tensor<2x8x5xf32>, tensor<2x5x8xf32>) -> (tensor<2x5x8xf32>, tensor<2x5xf32>)
  %yt = graph.Transpose %y {perm = array<i64: 1, 0, 2>} : (tensor<2x5x8xf32>) -> tensor<5x2x8xf32>
  return %y, %yt, %q : tensor<2x5x8xf32>, tensor<5x2x8xf32>, tensor<2x5x8xf32>
}

// -----

// LLaMA's linear layers as exported: MatMul(x, Transpose(W [out, in])).
// The product becomes a Gemm with transB over x flattened to 2-D, reshaped
// back; the Transpose goes. A 2-D MatMul(Transpose(X), B) becomes a Gemm
// with transA; a Transpose with another reader stays for it.
// CHECK-LABEL: func.func @linear
// CHECK-NOT: graph.Transpose
// CHECK: %[[X2:.*]] = graph.Reshape %arg0 {{.*}} : (tensor<2x16x64xf32>) -> tensor<32x64xf32>
// CHECK: %[[G:.*]] = graph.Gemm %[[X2]], %arg1 {beta = 0.000000e+00 : f32, transB = 1 : i64} : (tensor<32x64xf32>, tensor<176x64xf32>) -> tensor<32x176xf32>
// CHECK: %[[Y:.*]] = graph.Reshape %[[G]] {{.*}} : (tensor<32x176xf32>) -> tensor<2x16x176xf32>
// CHECK: %[[XT:.*]] = graph.Transpose %arg2
// CHECK: %[[H:.*]] = graph.Gemm %arg2, %arg3 {beta = 0.000000e+00 : f32, transA = 1 : i64} : (tensor<8x4xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
// CHECK: return %[[Y]], %[[H]], %[[XT]]
// NOFOLD-LABEL: func.func @linear
// NOFOLD-COUNT-2: graph.Transpose
// NOFOLD-NOT: graph.Gemm
func.func @linear(%x: tensor<2x16x64xf32>, %w: tensor<176x64xf32>, %a: tensor<8x4xf32>, %b: tensor<8x5xf32>) -> (tensor<2x16x176xf32>, tensor<4x5xf32>, tensor<4x8xf32>) {
  %wt = graph.Transpose %w {perm = array<i64: 1, 0>} : (tensor<176x64xf32>) -> tensor<64x176xf32>
  %y = graph.MatMul %x, %wt : (tensor<2x16x64xf32>, tensor<64x176xf32>) -> tensor<2x16x176xf32>
  %at = graph.Transpose %a {perm = array<i64: 1, 0>} : (tensor<8x4xf32>) -> tensor<4x8xf32>
  %h = graph.MatMul %at, %b : (tensor<4x8xf32>, tensor<8x5xf32>) -> tensor<4x5xf32>
  return %y, %h, %at : tensor<2x16x176xf32>, tensor<4x5xf32>, tensor<4x8xf32>
}

// -----

// A batched MatMul (both operands 3-D) and a Transpose that is not a 2-D
// [1, 0] stay: Gemm is 2-D.
// CHECK-LABEL: func.func @batched
// CHECK: graph.Transpose
// CHECK: graph.MatMul
// CHECK-NOT: graph.Gemm
func.func @batched(%x: tensor<2x4x8xf32>, %w: tensor<2x5x8xf32>) -> tensor<2x4x5xf32> {
  %wt = graph.Transpose %w {perm = array<i64: 0, 2, 1>} : (tensor<2x5x8xf32>) -> tensor<2x8x5xf32>
  %y = graph.MatMul %x, %wt : (tensor<2x4x8xf32>, tensor<2x8x5xf32>) -> tensor<2x4x5xf32>
  return %y : tensor<2x4x5xf32>
}
