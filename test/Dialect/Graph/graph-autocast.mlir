// RUN: strait-opt %s -split-input-file --graph-autocast | FileCheck %s
// RUN: strait-opt %s -split-input-file --graph-autocast='precision=f16' | FileCheck %s --check-prefix=F16

// A linear layer: the input and the weight (an f32 variable, the master
// copy) are cast to bf16 for the MatMul, whose bf16 result is cast back to
// f32 for the elementwise op after it; the variable stays f32.
// CHECK-LABEL: graph.Variable @w : tensor<4x3xf32>
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<5x6x4xf32>
// CHECK: %[[W:.*]] = graph.ReadVariable @w : tensor<4x3xf32>
// CHECK: %[[XC:.*]] = graph.Cast %[[X]] {to = bf16} : (tensor<5x6x4xf32>) -> tensor<5x6x4xbf16>
// CHECK: %[[WC:.*]] = graph.Cast %[[W]] {to = bf16} : (tensor<4x3xf32>) -> tensor<4x3xbf16>
// CHECK: %[[Y:.*]] = graph.MatMul %[[XC]], %[[WC]] : (tensor<5x6x4xbf16>, tensor<4x3xbf16>) -> tensor<5x6x3xbf16>
// CHECK: %[[YF:.*]] = graph.Cast %[[Y]] {to = f32} : (tensor<5x6x3xbf16>) -> tensor<5x6x3xf32>
// CHECK: %[[T:.*]] = graph.Tanh %[[YF]] : tensor<5x6x3xf32>
// CHECK: return %[[T]]
// F16-LABEL: func.func @linear
// F16: graph.MatMul {{.*}} : (tensor<5x6x4xf16>, tensor<4x3xf16>) -> tensor<5x6x3xf16>
module {
  graph.Variable @w : tensor<4x3xf32> = dense<0.5> : tensor<4x3xf32>
  func.func @linear(%x: tensor<5x6x4xf32>) -> tensor<5x6x3xf32> {
    %w = graph.ReadVariable @w : tensor<4x3xf32>
    %y = graph.MatMul %x, %w : (tensor<5x6x4xf32>, tensor<4x3xf32>) -> tensor<5x6x3xf32>
    %t = graph.Tanh %y : tensor<5x6x3xf32>
    return %t : tensor<5x6x3xf32>
  }
}

// -----

// Gemm casts all three operands (bias included); Softmax, LayerNormalization
// and ReduceMean stay f32 and read the f32 copy of the result.
// CHECK-LABEL: func.func @gemm_softmax
// CHECK-SAME: (%[[A:.*]]: tensor<2x8xf32>, %[[B:.*]]: tensor<4x8xf32>, %[[C:.*]]: tensor<4xf32>
// CHECK-DAG: %[[AC:.*]] = graph.Cast %[[A]] {to = bf16}
// CHECK-DAG: %[[BC:.*]] = graph.Cast %[[B]] {to = bf16}
// CHECK-DAG: %[[CC:.*]] = graph.Cast %[[C]] {to = bf16}
// CHECK: %[[G:.*]] = graph.Gemm %[[AC]], %[[BC]], %[[CC]] {transB = 1 : i64} : (tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>) -> tensor<2x4xbf16>
// CHECK: %[[GF:.*]] = graph.Cast %[[G]] {to = f32}
// CHECK: graph.Softmax %[[GF]] {{.*}} -> tensor<2x4xf32>
// CHECK: graph.ReduceMean %[[GF]] {{.*}} -> tensor<f32>
// CHECK-NOT: bf16
func.func @gemm_softmax(%a: tensor<2x8xf32>, %b: tensor<4x8xf32>, %c: tensor<4xf32>) -> (tensor<2x4xf32>, tensor<f32>) {
  %g = graph.Gemm %a, %b, %c {transB = 1 : i64} : (tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32>) -> tensor<2x4xf32>
  %s = graph.Softmax %g {axis = -1 : i64} : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %m = graph.ReduceMean %g {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x4xf32>) -> tensor<f32>
  return %s, %m : tensor<2x4xf32>, tensor<f32>
}

// -----

// A value used by two products gets one cast per use (so that its two
// gradients are summed in f32 after the backward casts); Conv casts X, W
// and B. An Einsum and an f64 MatMul are left alone.
// CHECK-LABEL: func.func @shared_conv_einsum
// CHECK-SAME: (%[[X:.*]]: tensor<3x3xf32>
// CHECK: %[[C1:.*]] = graph.Cast %[[X]] {to = bf16}
// CHECK: %[[C2:.*]] = graph.Cast %[[X]] {to = bf16}
// CHECK: graph.MatMul %[[C1]], %[[C2]] : (tensor<3x3xbf16>, tensor<3x3xbf16>) -> tensor<3x3xbf16>
// CHECK: graph.Conv {{.*}} : (tensor<1x2x4x4xbf16>, tensor<3x2x3x3xbf16>, tensor<3xbf16>) -> tensor<1x3x2x2xbf16>
// CHECK: graph.Einsum {{.*}} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
// CHECK: graph.MatMul {{.*}} : (tensor<3x3xf64>, tensor<3x3xf64>) -> tensor<3x3xf64>
func.func @shared_conv_einsum(%x: tensor<3x3xf32>, %i: tensor<1x2x4x4xf32>, %k: tensor<3x2x3x3xf32>, %kb: tensor<3xf32>, %d: tensor<3x3xf64>) -> (tensor<3x3xf32>, tensor<1x3x2x2xf32>, tensor<3x3xf32>, tensor<3x3xf64>) {
  %m = graph.MatMul %x, %x : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %c = graph.Conv %i, %k, %kb {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x2x4x4xf32>, tensor<3x2x3x3xf32>, tensor<3xf32>) -> tensor<1x3x2x2xf32>
  %e = graph.Einsum %x, %x {equation = "ij,jk->ik"} : (tensor<3x3xf32>, tensor<3x3xf32>) -> tensor<3x3xf32>
  %f = graph.MatMul %d, %d : (tensor<3x3xf64>, tensor<3x3xf64>) -> tensor<3x3xf64>
  return %m, %c, %e, %f : tensor<3x3xf32>, tensor<1x3x2x2xf32>, tensor<3x3xf32>, tensor<3x3xf64>
}

// -----

// FusedAttention runs like a MatMul: Q, Kt and V are cast, Y comes out in
// the low type and is cast back; LSE (its f32 statistic) and the additive
// bias stay f32.
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x8xf32>, %[[KT:.*]]: tensor<2x8x4xf32>, %[[V:.*]]: tensor<2x4x8xf32>, %[[M:.*]]: tensor<4x4xf32>)
// CHECK: %[[QC:.*]] = graph.Cast %[[Q]] {to = bf16} : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[KC:.*]] = graph.Cast %[[KT]] {to = bf16} : (tensor<2x8x4xf32>) -> tensor<2x8x4xbf16>
// CHECK: %[[VC:.*]] = graph.Cast %[[V]] {to = bf16} : (tensor<2x4x8xf32>) -> tensor<2x4x8xbf16>
// CHECK: %[[Y:.*]], %[[LSE:.*]] = graph.FusedAttention %[[QC]], %[[KC]], %[[VC]], %[[M]] {scale = 5.000000e-01 : f32} : (tensor<2x4x8xbf16>, tensor<2x8x4xbf16>, tensor<2x4x8xbf16>, tensor<4x4xf32>) -> (tensor<2x4x8xbf16>, tensor<2x4xf32>)
// CHECK: %[[YF:.*]] = graph.Cast %[[Y]] {to = f32} : (tensor<2x4x8xbf16>) -> tensor<2x4x8xf32>
// CHECK: return %[[YF]], %[[LSE]] : tensor<2x4x8xf32>, tensor<2x4xf32>
// F16-LABEL: func.func @attention
// F16: graph.FusedAttention {{.*}} -> (tensor<2x4x8xf16>, tensor<2x4xf32>)
func.func @attention(%q: tensor<2x4x8xf32>, %kt: tensor<2x8x4xf32>, %v: tensor<2x4x8xf32>, %m: tensor<4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>) {
  %y:2 = graph.FusedAttention %q, %kt, %v, %m {scale = 0.5 : f32} : (tensor<2x4x8xf32>, tensor<2x8x4xf32>, tensor<2x4x8xf32>, tensor<4x4xf32>) -> (tensor<2x4x8xf32>, tensor<2x4xf32>)
  return %y#0, %y#1 : tensor<2x4x8xf32>, tensor<2x4xf32>
}
