// RUN: strait-opt %s -split-input-file -verify-diagnostics

// Incompatible contraction dimensions.
func.func @matmul_mismatch(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error@+2 {{matmul contraction mismatch: [2,3] x [4,5]}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.MatMul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

// Shapes that do not broadcast.
func.func @broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{do not broadcast: dimension 1 is 3 and 4}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.Add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// A result type that disagrees with inference.
func.func @wrong_result(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error@+2 {{inferred type(s) 'tensor<2x3xf32>' are incompatible with return type(s) of operation 'tensor<3x2xf32>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.Transpose %a {perm = array<i64: 0, 1>} : (tensor<2x3xf32>) -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

// perm must be a permutation.
func.func @bad_perm(%a: tensor<2x3xf32>) -> tensor<2x2xf32> {
  // expected-error@+2 {{Transpose: perm is not a permutation}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.Transpose %a {perm = array<i64: 0, 0>} : (tensor<2x3xf32>) -> tensor<2x2xf32>
  return %0 : tensor<2x2xf32>
}

// -----

// Reshape must preserve the element count.
func.func @reshape(%a: tensor<2x3xf32>) -> tensor<7xf32> {
  // expected-error@+2 {{reshape: [2,3] (6 elements) cannot become [7] (7 elements)}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.Reshape %a {shape = array<i64: 7>} : (tensor<2x3xf32>) -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

// Axis out of range.
func.func @axis(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  // expected-error@+2 {{axis 2 is out of range for rank 2}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.Softmax %a {axis = 2 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

// Conv channel count must match W times group.
func.func @conv(%x: tensor<1x3x8x8xf32>, %w: tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32> {
  // expected-error@+2 {{Conv: input has 3 channels but W expects 2 x group 1}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.Conv %x, %w {dilations = array<i64: 1, 1>, group = 1 : i64, pads = array<i64: 0, 0, 0, 0>, strides = array<i64: 1, 1>} : (tensor<1x3x8x8xf32>, tensor<4x2x3x3xf32>) -> tensor<1x4x6x6xf32>
  return %0 : tensor<1x4x6x6xf32>
}

// -----

// Variables need static shapes.
// expected-error@+1 {{variable type must be a statically shaped tensor}}
graph.Variable @v : tensor<?x3xf32>

// -----

// A read must name a variable of the same type.
graph.Variable @v : tensor<3xf32>
func.func @read() -> tensor<4xf32> {
  // expected-error@+1 {{result type 'tensor<4xf32>' differs from the variable's 'tensor<3xf32>'}}
  %0 = graph.ReadVariable @v : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @read_missing() -> tensor<4xf32> {
  // expected-error@+1 {{'nope' is not a graph.Variable}}
  %0 = graph.ReadVariable @nope : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// Losses need integer labels.
func.func @loss(%s: tensor<4x10xf32>, %l: tensor<4xf32>) -> tensor<f32> {
  // expected-error@+2 {{SoftmaxCrossEntropyLoss: labels must be integers}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.SoftmaxCrossEntropyLoss %s, %l : (tensor<4x10xf32>, tensor<4xf32>) -> tensor<f32>
  return %0 : tensor<f32>
}

// -----

// Scores must be floats.
func.func @loss_int_scores(%s: tensor<4x10xi32>, %l: tensor<4xi64>) -> tensor<i32> {
  // expected-error@+2 {{SoftmaxCrossEntropyLoss: scores must be floats, got 'i32'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.SoftmaxCrossEntropyLoss %s, %l : (tensor<4x10xi32>, tensor<4xi64>) -> tensor<i32>
  return %0 : tensor<i32>
}

// -----

// The loss of bf16 scores is f32 (the kernels compute in f32), not bf16.
func.func @loss_bf16_scores(%s: tensor<4x10xbf16>, %l: tensor<4xi64>) -> tensor<bf16> {
  // expected-error@+2 {{inferred type(s) 'tensor<f32>' are incompatible with return type(s) of operation 'tensor<bf16>'}}
  // expected-error@+1 {{failed to infer returned types}}
  %0 = graph.SoftmaxCrossEntropyLoss %s, %l : (tensor<4x10xbf16>, tensor<4xi64>) -> tensor<bf16>
  return %0 : tensor<bf16>
}

// -----

// Split sizes must cover the axis.
func.func @split(%x: tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>) {
  // expected-error@+2 {{Split: sizes sum to 4 but the axis has 6}}
  // expected-error@+1 {{failed to infer returned types}}
  %a:2 = graph.Split %x {axis = 1 : i64, split = array<i64: 2, 2>} : (tensor<4x6xf32>) -> (tensor<4x2xf32>, tensor<4x2xf32>)
  return %a#0, %a#1 : tensor<4x2xf32>, tensor<4x2xf32>
}
