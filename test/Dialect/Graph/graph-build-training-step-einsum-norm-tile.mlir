// RUN: strait-opt %s -split-input-file --graph-build-training-step='loss=output optimizer=none return-gradients=true' | FileCheck %s

// Einsum: each operand's gradient is one Einsum of dY with the other operand
// onto the operand's term; a broadcast ellipsis is summed back with
// ReduceToShape; the implicit form gets ONNX's output term.
// CHECK-LABEL: func.func @einsum
// CHECK: %[[A:.*]] = graph.ReadVariable @a {graph.op_id = 0 : i64}
// CHECK: %[[B:.*]] = graph.ReadVariable @b {graph.op_id = 1 : i64}
// CHECK: graph.Einsum %[[A]], %[[B]] {equation = "...ij,jk", graph.op_id = 2 : i64}
// CHECK: %[[DA:.*]] = graph.Einsum %[[DY:.*]], %[[B]] {equation = "...ik,jk->...ij", graph.grad_of = 2 : i64} : (tensor<2x3x2xf32>, tensor<4x2xf32>) -> tensor<2x3x4xf32>
// CHECK: %[[DB0:.*]] = graph.Einsum %[[DY]], %[[A]] {equation = "...ik,...ij->jk", graph.grad_of = 2 : i64} : (tensor<2x3x2xf32>, tensor<2x3x4xf32>) -> tensor<4x2xf32>
// CHECK: return {{.*}}%[[DA]], %[[DB0]]
module {
  graph.Variable @a : tensor<2x3x4xf32> = dense<0.5> : tensor<2x3x4xf32>
  graph.Variable @b : tensor<4x2xf32> = dense<0.25> : tensor<4x2xf32>
  func.func @einsum() -> (tensor<f32> {graph.name = "loss"}) {
    %a = graph.ReadVariable @a : tensor<2x3x4xf32>
    %b = graph.ReadVariable @b : tensor<4x2xf32>
    %y = graph.Einsum %a, %b {equation = "...ij,jk"} : (tensor<2x3x4xf32>, tensor<4x2xf32>) -> tensor<2x3x2xf32>
    %l = graph.ReduceSum %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x3x2xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// An operand with fewer ellipsis dims gets the broadcast ones summed away.
// CHECK-LABEL: func.func @einsum_broadcast
// CHECK: %[[G:.*]] = graph.Einsum %{{.*}}, %{{.*}} {equation = "...,...j->...j", graph.grad_of = 2 : i64} : (tensor<2x3xf32>, tensor<2x3x4xf32>) -> tensor<2x3x4xf32>
// CHECK: graph.ReduceToShape %[[G]] {graph.grad_of = 2 : i64, shape = array<i64: 3, 4>}
module {
  graph.Variable @a : tensor<2x3x4xf32> = dense<0.5> : tensor<2x3x4xf32>
  graph.Variable @b : tensor<3x4xf32> = dense<0.25> : tensor<3x4xf32>
  func.func @einsum_broadcast() -> (tensor<f32> {graph.name = "loss"}) {
    %a = graph.ReadVariable @a : tensor<2x3x4xf32>
    %b = graph.ReadVariable @b : tensor<3x4xf32>
    %y = graph.Einsum %a, %b {equation = "...j,...j->..."} : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> tensor<2x3xf32>
    %l = graph.ReduceSum %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x3xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// ReduceProd: exact with zeros (products of the nonzero entries, zero counts
// per group select the case); ReduceLogSumExp: dY * exp(x - y).
// CHECK-LABEL: func.func @reductions
// CHECK: %[[X:.*]] = graph.ReadVariable @x
// CHECK: %[[P:.*]] = graph.ReduceProd %[[X]] {axes = array<i64: 1>, graph.op_id = 1 : i64
// CHECK: graph.Exp {{.*}}graph.grad_of = 2 : i64
// CHECK: %[[Z:.*]] = graph.Equal %[[X]], %{{.*}} {graph.grad_of = 1 : i64}
// CHECK: %[[NZ:.*]] = graph.Where %[[Z]], %{{.*}}, %[[X]] {graph.grad_of = 1 : i64}
// CHECK: graph.ReduceProd %[[NZ]] {axes = array<i64: 1>, graph.grad_of = 1 : i64} : (tensor<3x4xf32>) -> tensor<3x1xf32>
// CHECK: graph.Where %[[Z]], {{.*}} {graph.grad_of = 1 : i64}
module {
  graph.Variable @x : tensor<3x4xf32> = dense<0.5> : tensor<3x4xf32>
  func.func @reductions() -> (tensor<f32> {graph.name = "loss"}) {
    %x = graph.ReadVariable @x : tensor<3x4xf32>
    %p = graph.ReduceProd %x {axes = array<i64: 1>, keepdims = 0 : i64} : (tensor<3x4xf32>) -> tensor<3xf32>
    %l = graph.ReduceLogSumExp %p {axes = array<i64>, keepdims = 0 : i64} : (tensor<3xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// GroupNormalization: X viewed as [N, groups, rest] through
// LayerNormalizationGrad with unit scale; the normalized X is recomputed for
// dScale; scale and bias gradients sum over batch and spatial dims.
// CHECK-LABEL: func.func @group_norm
// CHECK: graph.GroupNormalization {{.*}}graph.op_id = 3
// CHECK: %[[U:.*]] = graph.Constant dense<1.000000e+00> : tensor<6xf32> {graph.grad_of = 3 : i64}
// CHECK: %[[XG:.*]] = graph.Reshape %{{.*}} {graph.grad_of = 3 : i64, shape = array<i64: 2, 2, 6>}
// CHECK: %[[DX:.*]], %{{.*}}, %{{.*}} = graph.LayerNormalizationGrad %{{.*}}, %[[XG]], %[[U]] {epsilon = 1.000000e-03 : f32, graph.grad_of = 3 : i64}
// CHECK: graph.LayerNormalization %[[XG]], %[[U]] {epsilon = 1.000000e-03 : f32, graph.grad_of = 3 : i64}
// CHECK: graph.ReduceSum {{.*}}axes = array<i64: 0, 2>, graph.grad_of = 3 : i64, keepdims = 0 : i64} : (tensor<2x4x3xf32>) -> tensor<4xf32>
module {
  graph.Variable @x : tensor<2x4x3xf32> = dense<0.5> : tensor<2x4x3xf32>
  graph.Variable @s : tensor<4xf32> = dense<1.5> : tensor<4xf32>
  graph.Variable @b : tensor<4xf32> = dense<0.1> : tensor<4xf32>
  func.func @group_norm() -> (tensor<f32> {graph.name = "loss"}) {
    %b = graph.ReadVariable @b : tensor<4xf32>
    %s = graph.ReadVariable @s : tensor<4xf32>
    %x = graph.ReadVariable @x : tensor<2x4x3xf32>
    %y = graph.GroupNormalization %x, %s, %b {epsilon = 1.0e-03 : f32, num_groups = 2 : i64} : (tensor<2x4x3xf32>, tensor<4xf32>, tensor<4xf32>) -> tensor<2x4x3xf32>
    %l = graph.ReduceSumSquare %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x4x3xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// InstanceNormalization: one group per channel.
// CHECK-LABEL: func.func @instance_norm
// CHECK: graph.Reshape %{{.*}} {graph.grad_of = 3 : i64, shape = array<i64: 2, 3, 4>}
// CHECK: graph.LayerNormalizationGrad
module {
  graph.Variable @x : tensor<2x3x2x2xf32> = dense<0.5> : tensor<2x3x2x2xf32>
  graph.Variable @s : tensor<3xf32> = dense<1.5> : tensor<3xf32>
  graph.Variable @b : tensor<3xf32> = dense<0.1> : tensor<3xf32>
  func.func @instance_norm() -> (tensor<f32> {graph.name = "loss"}) {
    %b = graph.ReadVariable @b : tensor<3xf32>
    %s = graph.ReadVariable @s : tensor<3xf32>
    %x = graph.ReadVariable @x : tensor<2x3x2x2xf32>
    %y = graph.InstanceNormalization %x, %s, %b {epsilon = 1.0e-05 : f32} : (tensor<2x3x2x2xf32>, tensor<3xf32>, tensor<3xf32>) -> tensor<2x3x2x2xf32>
    %l = graph.ReduceSumSquare %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x3x2x2xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Tile: dY viewed as [repeat, size] pairs, summed over the repeats.
// CHECK-LABEL: func.func @tile
// CHECK: %[[V:.*]] = graph.Reshape %{{.*}} {graph.grad_of = 1 : i64, shape = array<i64: 2, 2, 1, 3>}
// CHECK: graph.ReduceSum %[[V]] {axes = array<i64: 0, 2>, graph.grad_of = 1 : i64, keepdims = 0 : i64} : (tensor<2x2x1x3xf32>) -> tensor<2x3xf32>
module {
  graph.Variable @x : tensor<2x3xf32> = dense<0.5> : tensor<2x3xf32>
  func.func @tile() -> (tensor<f32> {graph.name = "loss"}) {
    %x = graph.ReadVariable @x : tensor<2x3xf32>
    %y = graph.Tile %x {repeats = array<i64: 2, 1>} : (tensor<2x3xf32>) -> tensor<4x3xf32>
    %l = graph.ReduceSumSquare %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<4x3xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// ConvTranspose: dX is a Conv of dY with W and the same window; dW is
// ConvGradWeight with input and output swapped; dB sums dY.
// CHECK-LABEL: func.func @conv_transpose
// CHECK: %[[W:.*]] = graph.ReadVariable @w
// CHECK: %[[X:.*]] = graph.ReadVariable @x
// CHECK: graph.ConvTranspose %[[X]], %[[W]], %{{.*}} {{.*}}graph.op_id = 3
// CHECK: %[[DX:.*]] = graph.Conv %[[DY:.*]], %[[W]] {dilations = array<i64: 1, 1>, graph.grad_of = 3 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x2x8x8xf32>, tensor<4x2x2x2xf32>) -> tensor<1x4x4x4xf32>
// CHECK: %[[DW:.*]] = graph.ConvGradWeight %[[X]], %[[DY]] {{.*}}weight_shape = array<i64: 4, 2, 2, 2>} : (tensor<1x4x4x4xf32>, tensor<1x2x8x8xf32>) -> tensor<4x2x2x2xf32>
// CHECK: %[[DB:.*]] = graph.ReduceSum %[[DY]] {axes = array<i64: 0, 2, 3>, graph.grad_of = 3 : i64, keepdims = 0 : i64}
module {
  graph.Variable @x : tensor<1x4x4x4xf32> = dense<0.5> : tensor<1x4x4x4xf32>
  graph.Variable @w : tensor<4x2x2x2xf32> = dense<0.25> : tensor<4x2x2x2xf32>
  graph.Variable @b : tensor<2xf32> = dense<0.1> : tensor<2xf32>
  func.func @conv_transpose() -> (tensor<f32> {graph.name = "loss"}) {
    %b = graph.ReadVariable @b : tensor<2xf32>
    %w = graph.ReadVariable @w : tensor<4x2x2x2xf32>
    %x = graph.ReadVariable @x : tensor<1x4x4x4xf32>
    %y = graph.ConvTranspose %x, %w, %b {dilations = array<i64: 1, 1>, group = 1 : i64, output_padding = array<i64: 0, 0>, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 2, 2>} : (tensor<1x4x4x4xf32>, tensor<4x2x2x2xf32>, tensor<2xf32>) -> tensor<1x2x8x8xf32>
    %l = graph.ReduceSumSquare %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<1x2x8x8xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// Resize (linear, align_corners): ResizeGrad with the forward op's
// interpolation attributes and the input's shape.
// CHECK-LABEL: func.func @resize
// CHECK: graph.Resize %{{.*}}graph.op_id = 1
// CHECK: graph.ResizeGrad %{{.*}} {coordinate_transformation_mode = #graph.coord_mode<align_corners>, graph.grad_of = 1 : i64, input_shape = array<i64: 1, 1, 2, 3>, mode = #graph.resize_mode<linear>} : (tensor<1x1x4x5xf32>) -> tensor<1x1x2x3xf32>
module {
  graph.Variable @x : tensor<1x1x2x3xf32> = dense<0.5> : tensor<1x1x2x3xf32>
  func.func @resize() -> (tensor<f32> {graph.name = "loss"}) {
    %x = graph.ReadVariable @x : tensor<1x1x2x3xf32>
    %y = graph.Resize %x {coordinate_transformation_mode = #graph.coord_mode<align_corners>, mode = #graph.resize_mode<linear>, scales = array<f32: 1.0, 1.0, 2.0, 1.66666663>, sizes = array<i64: 1, 1, 4, 5>} : (tensor<1x1x2x3xf32>) -> tensor<1x1x4x5xf32>
    %l = graph.ReduceSumSquare %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<1x1x4x5xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// CumSum: dX is the CumSum of dY in the other direction (same exclusivity);
// DepthToSpace (DCR): dY reshaped to the transposed 6-D view, inverse
// transpose, reshape to the input.
// CHECK-LABEL: func.func @cumsum_depth_to_space
// CHECK: %[[V:.*]] = graph.Reshape %{{.*}} {graph.grad_of = 2 : i64, shape = array<i64: 1, 2, 2, 2, 2, 2>}
// CHECK: %[[T:.*]] = graph.Transpose %[[V]] {graph.grad_of = 2 : i64, perm = array<i64: 0, 3, 5, 1, 2, 4>}
// CHECK: %[[D:.*]] = graph.Reshape %[[T]] {allowzero = 1 : i64, graph.grad_of = 2 : i64, shape = array<i64: 1, 8, 2, 2>}
// CHECK: graph.CumSum %[[D]] {axis = 1 : i64, exclusive = 1 : i64, graph.grad_of = 1 : i64, reverse = 1 : i64}
module {
  graph.Variable @x : tensor<1x8x2x2xf32> = dense<0.5> : tensor<1x8x2x2xf32>
  func.func @cumsum_depth_to_space() -> (tensor<f32> {graph.name = "loss"}) {
    %x = graph.ReadVariable @x : tensor<1x8x2x2xf32>
    %c = graph.CumSum %x {axis = 1 : i64, exclusive = 1 : i64} : (tensor<1x8x2x2xf32>) -> tensor<1x8x2x2xf32>
    %y = graph.DepthToSpace %c {blocksize = 2 : i64} : (tensor<1x8x2x2xf32>) -> tensor<1x2x4x4xf32>
    %l = graph.ReduceSumSquare %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<1x2x4x4xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}

// -----

// LRN: window sums of the forward (x^2) and of the adjoint (mirrored
// window: pads swapped, here size 4: 1 before / 2 after, then 2 / 1) as
// AveragePools with counted pads over X viewed as [N, 1, C, rest].
// CHECK-LABEL: func.func @lrn
// CHECK: graph.AveragePool {{.*}}count_include_pad = 1 : i64, {{.*}}graph.grad_of = 1 : i64, kernel_shape = array<i64: 4, 1>, pads = array<i64: 1, 0, 2, 0>, strides = array<i64: 1, 1>} : (tensor<2x1x5x6xf32>) -> tensor<2x1x5x6xf32>
// CHECK: graph.Pow {{.*}}graph.grad_of = 1 : i64
// CHECK: graph.AveragePool {{.*}}count_include_pad = 1 : i64, {{.*}}graph.grad_of = 1 : i64, kernel_shape = array<i64: 4, 1>, pads = array<i64: 2, 0, 1, 0>, strides = array<i64: 1, 1>}
module {
  graph.Variable @x : tensor<2x5x2x3xf32> = dense<0.5> : tensor<2x5x2x3xf32>
  func.func @lrn() -> (tensor<f32> {graph.name = "loss"}) {
    %x = graph.ReadVariable @x : tensor<2x5x2x3xf32>
    %y = graph.LRN %x {alpha = 1.0e-04 : f32, beta = 7.500000e-01 : f32, bias = 1.0 : f32, size = 4 : i64} : (tensor<2x5x2x3xf32>) -> tensor<2x5x2x3xf32>
    %l = graph.ReduceSumSquare %y {axes = array<i64>, keepdims = 0 : i64} : (tensor<2x5x2x3xf32>) -> tensor<f32>
    return %l : tensor<f32>
  }
}
