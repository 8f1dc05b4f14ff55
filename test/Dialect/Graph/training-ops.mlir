// RUN: strait-opt %s | strait-opt | FileCheck %s

// The ops of a training step parse, verify, infer their result types and
// print back.

graph.Variable @w : tensor<4xf32>

// CHECK-LABEL: func @grads
func.func @grads(%dy: tensor<2x3xf32>, %y: tensor<2x3xf32>, %s: tensor<3xf32>,
                 %l: tensor<f32>, %lab: tensor<2xi64>) {
  // CHECK: graph.ReduceToShape %{{.*}} {shape = array<i64: 3>} : (tensor<2x3xf32>) -> tensor<3xf32>
  %0 = graph.ReduceToShape %dy {shape = array<i64: 3>} : (tensor<2x3xf32>) -> tensor<3xf32>
  // CHECK: graph.SoftmaxGrad
  %1 = graph.SoftmaxGrad %dy, %y {axis = -1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.LogSoftmaxGrad
  %2 = graph.LogSoftmaxGrad %dy, %y {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.GeluGrad %{{.*}} {approximate = #graph.gelu_approx<tanh>}
  %3 = graph.GeluGrad %dy, %y {approximate = #graph.gelu_approx<tanh>} : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  // CHECK: graph.LayerNormalizationGrad {{.*}} -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
  %4:3 = graph.LayerNormalizationGrad %dy, %y, %s {axis = -1 : i64, epsilon = 1.0e-05 : f32} : (tensor<2x3xf32>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
  // CHECK: graph.SoftmaxCrossEntropyLossGrad {{.*}} -> tensor<2x3xf32>
  %5 = graph.SoftmaxCrossEntropyLossGrad %l, %y, %lab {ignore_index = -100 : i64, reduction = #graph.loss_reduction<mean>} : (tensor<f32>, tensor<2x3xf32>, tensor<2xi64>) -> tensor<2x3xf32>
  // CHECK: graph.SliceGrad {{.*}} -> tensor<2x5xf32>
  %6 = graph.SliceGrad %dy {axes = array<i64: 1>, ends = array<i64: 4>, input_shape = array<i64: 2, 5>, starts = array<i64: 1>, steps = array<i64: 1>} : (tensor<2x3xf32>) -> tensor<2x5xf32>
  // CHECK: graph.ResizeGrad %{{.*}} {coordinate_transformation_mode = #graph.coord_mode<align_corners>, input_shape = array<i64: 2, 2>, mode = #graph.resize_mode<linear>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  %7 = graph.ResizeGrad %dy {coordinate_transformation_mode = #graph.coord_mode<align_corners>, input_shape = array<i64: 2, 2>, mode = #graph.resize_mode<linear>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return
}

// CHECK-LABEL: func @conv_pool_gather
func.func @conv_pool_gather(%dy: tensor<1x4x8x8xf32>, %x: tensor<1x3x8x8xf32>,
                            %w: tensor<4x3x3x3xf32>, %dp: tensor<1x4x4x4xf32>,
                            %xp: tensor<1x4x8x8xf32>, %de: tensor<2x8x16xf32>,
                            %ids: tensor<2x8xi64>) {
  // CHECK: graph.ConvGradInput {{.*}} -> tensor<1x3x8x8xf32>
  %0 = graph.ConvGradInput %dy, %w {dilations = array<i64: 1, 1>, group = 1 : i64, input_shape = array<i64: 1, 3, 8, 8>, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>} : (tensor<1x4x8x8xf32>, tensor<4x3x3x3xf32>) -> tensor<1x3x8x8xf32>
  // CHECK: graph.ConvGradWeight {{.*}} -> tensor<4x3x3x3xf32>
  %1 = graph.ConvGradWeight %dy, %x {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 1, 1, 1, 1>, strides = array<i64: 1, 1>, weight_shape = array<i64: 4, 3, 3, 3>} : (tensor<1x4x8x8xf32>, tensor<1x3x8x8xf32>) -> tensor<4x3x3x3xf32>
  // CHECK: graph.MaxPoolGrad {{.*}} -> tensor<1x4x8x8xf32>
  %2 = graph.MaxPoolGrad %dp, %xp {ceil_mode = 0 : i64, dilations = array<i64: 1, 1>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x4x4xf32>, tensor<1x4x8x8xf32>) -> tensor<1x4x8x8xf32>
  // CHECK: graph.AveragePoolGrad {{.*}} -> tensor<1x4x8x8xf32>
  %3 = graph.AveragePoolGrad %dp {ceil_mode = 0 : i64, count_include_pad = 0 : i64, dilations = array<i64: 1, 1>, input_shape = array<i64: 1, 4, 8, 8>, kernel_shape = array<i64: 2, 2>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x4x4xf32>) -> tensor<1x4x8x8xf32>
  // CHECK: graph.GatherGrad {{.*}} -> tensor<100x16xf32>
  %4 = graph.GatherGrad %de, %ids {axis = 0 : i64, data_shape = array<i64: 100, 16>} : (tensor<2x8x16xf32>, tensor<2x8xi64>) -> tensor<100x16xf32>
  return
}

// CHECK-LABEL: func @batch_norm
func.func @batch_norm(%x: tensor<2x4x3x3xf32>, %c: tensor<4xf32>) {
  // CHECK: graph.BatchNormalizationTraining {{.*}} -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %y:5 = graph.BatchNormalizationTraining %x, %c, %c, %c, %c {epsilon = 1.0e-05 : f32, momentum = 0.9 : f32} : (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  // CHECK: graph.BatchNormalizationGrad {{.*}} -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  %g:3 = graph.BatchNormalizationGrad %x, %x, %c, %y#1, %y#2 : (tensor<2x4x3x3xf32>, tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x4x3x3xf32>, tensor<4xf32>, tensor<4xf32>)
  return
}

// CHECK-LABEL: func @update
func.func @update(%g: tensor<4xf32>, %g2: tensor<2x2xf32>, %lr: tensor<f32>, %step: tensor<i64>) {
  // CHECK: %[[T:.*]] = graph.AccumulateGrad %{{.*}} for @w {micro_batches = 4 : i64} : tensor<4xf32>
  %t = graph.AccumulateGrad %g for @w {micro_batches = 4 : i64} : tensor<4xf32>
  // CHECK: graph.ClipByGlobalNorm {{.*}} -> (tensor<f32>, tensor<4xf32>, tensor<2x2xf32>)
  %n, %c:2 = graph.ClipByGlobalNorm %t, %g2 {max_norm = 1.0 : f32} : (tensor<4xf32>, tensor<2x2xf32>) -> (tensor<f32>, tensor<4xf32>, tensor<2x2xf32>)
  %w = graph.ReadVariable @w : tensor<4xf32>
  // CHECK: graph.SGD {{.*}} -> (tensor<4xf32>, tensor<4xf32>)
  %p:2 = graph.SGD %lr, %w, %c#0, %g {momentum = 0.9 : f32, nesterov = 0 : i64, weight_decay = 0.0 : f32} : (tensor<f32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>)
  // CHECK: graph.AdamW {{.*}} -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  %q:3 = graph.AdamW %lr, %step, %w, %c#0, %g, %g {beta1 = 0.9 : f32, beta2 = 0.999 : f32, epsilon = 1.0e-08 : f32, weight_decay = 0.01 : f32} : (tensor<f32>, tensor<i64>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>, tensor<4xf32>)
  // CHECK: graph.AssignVariable @w = %{{.*}} : tensor<4xf32>
  graph.AssignVariable @w = %q#0 : tensor<4xf32>
  return
}

// FusedAttentionGrad: dQ, dKt, dV have the types of Q, Kt, V (bf16 here;
// LSE stays f32, the bias may be f32).
// CHECK-LABEL: func @attention_grad
func.func @attention_grad(%dy: tensor<2x4x8xbf16>, %q: tensor<2x4x8xbf16>, %kt: tensor<2x8x5xbf16>,
                          %v: tensor<2x5x8xbf16>, %y: tensor<2x4x8xbf16>, %lse: tensor<2x4xf32>,
                          %m: tensor<4x5xf32>) {
  // CHECK: graph.FusedAttentionGrad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} {causal = 1 : i64, scale = 5.000000e-01 : f32} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x8x5xbf16>, tensor<2x5x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<4x5xf32>) -> (tensor<2x4x8xbf16>, tensor<2x8x5xbf16>, tensor<2x5x8xbf16>)
  %d:3 = graph.FusedAttentionGrad %dy, %q, %kt, %v, %y, %lse, %m {scale = 0.5 : f32, causal = 1 : i64} : (tensor<2x4x8xbf16>, tensor<2x4x8xbf16>, tensor<2x8x5xbf16>, tensor<2x5x8xbf16>, tensor<2x4x8xbf16>, tensor<2x4xf32>, tensor<4x5xf32>) -> (tensor<2x4x8xbf16>, tensor<2x8x5xbf16>, tensor<2x5x8xbf16>)
  return
}

// bf16 / f16 scores: the loss is f32, the gradient takes the f32 loss's
// gradient and has the scores' type.
// CHECK-LABEL: func @sce_low_scores
// CHECK: graph.SoftmaxCrossEntropyLoss {{.*}} : (tensor<2x3xbf16>, tensor<2xi64>) -> tensor<f32>
// CHECK: graph.SoftmaxCrossEntropyLossGrad {{.*}} : (tensor<f32>, tensor<2x3xbf16>, tensor<2xi64>) -> tensor<2x3xbf16>
// CHECK: graph.SoftmaxCrossEntropyLoss {{.*}} : (tensor<2x3xf16>, tensor<2xi64>) -> tensor<2xf32>
func.func @sce_low_scores(%s: tensor<2x3xbf16>, %h: tensor<2x3xf16>, %lab: tensor<2xi64>) {
  %l = graph.SoftmaxCrossEntropyLoss %s, %lab : (tensor<2x3xbf16>, tensor<2xi64>) -> tensor<f32>
  %d = graph.SoftmaxCrossEntropyLossGrad %l, %s, %lab : (tensor<f32>, tensor<2x3xbf16>, tensor<2xi64>) -> tensor<2x3xbf16>
  %n = graph.SoftmaxCrossEntropyLoss %h, %lab {reduction = #graph.loss_reduction<none>} : (tensor<2x3xf16>, tensor<2xi64>) -> tensor<2xf32>
  return
}

// 16-bit operands the kernels convert themselves: a bf16 Y of an f32
// LayerNormalization, a bf16 dY of its gradient, an f16 grad accumulated
// into an f32 total (printed with `->`); the total of an f32 grad prints
// without it.
// CHECK-LABEL: func @low_precision_io
func.func @low_precision_io(%x: tensor<2x3xf32>, %s: tensor<3xf32>, %dy: tensor<2x3xbf16>, %g: tensor<3xf16>, %h: tensor<3xf32>) {
  // CHECK: graph.LayerNormalization {{.*}} : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xbf16>
  %y = graph.LayerNormalization %x, %s : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xbf16>
  // CHECK: graph.LayerNormalizationGrad {{.*}} : (tensor<2x3xbf16>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
  %d:3 = graph.LayerNormalizationGrad %dy, %x, %s : (tensor<2x3xbf16>, tensor<2x3xf32>, tensor<3xf32>) -> (tensor<2x3xf32>, tensor<3xf32>, tensor<3xf32>)
  // CHECK: graph.AccumulateGrad %{{.*}} for @w {micro_batches = 2 : i64} : tensor<3xf16> -> tensor<3xf32>
  %t = graph.AccumulateGrad %g for @w {micro_batches = 2 : i64} : tensor<3xf16> -> tensor<3xf32>
  // CHECK: graph.AccumulateGrad %{{.*}} for @v {micro_batches = 2 : i64} : tensor<3xf32>{{$}}
  %u = graph.AccumulateGrad %h for @v {micro_batches = 2 : i64} : tensor<3xf32> -> tensor<3xf32>
  return
}
