// RUN: strait-opt %s | strait-opt | FileCheck %s

// 16-bit operands the RMSNorm kernels convert themselves (graph-cast-motion
// rules 13 and 14): a bf16 / f16 Y of an f32 RMSNormalization, a bf16 dY of
// its gradient (dX and dScale stay f32); the f32 forms are unchanged.
// CHECK-LABEL: func @rms_norm_low_precision_io
func.func @rms_norm_low_precision_io(%x: tensor<2x3xf32>, %s: tensor<3xf32>, %dy: tensor<2x3xbf16>, %h: tensor<2x3xf16>) {
  // CHECK: graph.RMSNormalization {{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xbf16>
  %y = graph.RMSNormalization %x, %s : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xbf16>
  // CHECK: graph.RMSNormalization {{.*}} {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf16>
  %z = graph.RMSNormalization %x, %s {axis = 1 : i64} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf16>
  // CHECK: graph.RMSNormalization {{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  %f = graph.RMSNormalization %x, %s : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.RMSNormalizationGrad {{.*}} : (tensor<2x3xbf16>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>)
  %d:2 = graph.RMSNormalizationGrad %dy, %x, %s : (tensor<2x3xbf16>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>)
  // CHECK: graph.RMSNormalizationGrad {{.*}} : (tensor<2x3xf16>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>)
  %e:2 = graph.RMSNormalizationGrad %h, %x, %s : (tensor<2x3xf16>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>)
  return
}
