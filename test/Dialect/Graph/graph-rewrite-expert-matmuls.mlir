// RUN: strait-opt %s --graph-rewrite-expert-matmuls=mode=dense -split-input-file | FileCheck %s

// transformers' batched_mm experts, dynamo export: each of 6 slots reads its
// expert's [O, I] = [4, 7] weights by GatherND and multiplies them by its
// [7, 1] column. One product of every slot with all 3 experts, then each
// slot's row of its expert picked by a batched [1, E] x [E, O] product with a
// one-hot mask (idx == e, or e - E for a negative index).
// CHECK-LABEL: func.func @gathernd
// CHECK-SAME: (%[[W:.*]]: tensor<3x4x7xf32>, %[[IDX:.*]]: tensor<6x1xi64>, %[[B:.*]]: tensor<6x7x1xf32>)
// CHECK-NOT: graph.GatherND
// CHECK: %[[BT:.*]] = graph.Transpose %[[B]] {perm = array<i64: 0, 2, 1>} : (tensor<6x7x1xf32>) -> tensor<6x1x7xf32>
// CHECK: %[[BM:.*]] = graph.Reshape %[[BT]] {shape = array<i64: 6, 7>} : (tensor<6x1x7xf32>) -> tensor<6x7xf32>
// CHECK: %[[WM:.*]] = graph.Reshape %[[W]] {shape = array<i64: 12, 7>} : (tensor<3x4x7xf32>) -> tensor<12x7xf32>
// CHECK: %[[WT:.*]] = graph.Transpose %[[WM]] {perm = array<i64: 1, 0>} : (tensor<12x7xf32>) -> tensor<7x12xf32>
// CHECK: %[[Z:.*]] = graph.MatMul %[[BM]], %[[WT]] : (tensor<6x7xf32>, tensor<7x12xf32>) -> tensor<6x12xf32>
// CHECK: %[[Z3:.*]] = graph.Reshape %[[Z]] {shape = array<i64: 6, 3, 4>} : (tensor<6x12xf32>) -> tensor<6x3x4xf32>
// CHECK: %[[I3:.*]] = graph.Reshape %[[IDX]] {shape = array<i64: 6, 1, 1>} : (tensor<6x1xi64>) -> tensor<6x1x1xi64>
// CHECK: %[[E:.*]] = graph.Constant dense<{{\[\[\[}}0, 1, 2]]]> : tensor<1x1x3xi64>
// CHECK: %[[EQ:.*]] = graph.Equal %[[I3]], %[[E]] : (tensor<6x1x1xi64>, tensor<1x1x3xi64>) -> tensor<6x1x3xi1>
// CHECK: %[[M0:.*]] = graph.Cast %[[EQ]] {to = f32}
// CHECK: %[[EN:.*]] = graph.Constant dense<{{\[\[\[}}-3, -2, -1]]]> : tensor<1x1x3xi64>
// CHECK: %[[EQN:.*]] = graph.Equal %[[I3]], %[[EN]]
// CHECK: %[[M1:.*]] = graph.Cast %[[EQN]] {to = f32}
// CHECK: %[[M:.*]] = graph.Add %[[M0]], %[[M1]] : (tensor<6x1x3xf32>, tensor<6x1x3xf32>) -> tensor<6x1x3xf32>
// CHECK: %[[P:.*]] = graph.MatMul %[[M]], %[[Z3]] : (tensor<6x1x3xf32>, tensor<6x3x4xf32>) -> tensor<6x1x4xf32>
// CHECK: %[[Y:.*]] = graph.Transpose %[[P]] {perm = array<i64: 0, 2, 1>} : (tensor<6x1x4xf32>) -> tensor<6x4x1xf32>
// CHECK-NOT: graph.
// CHECK: return %[[Y]]
func.func @gathernd(%w: tensor<3x4x7xf32>, %idx: tensor<6x1xi64>, %b: tensor<6x7x1xf32>) -> tensor<6x4x1xf32> {
  %a = graph.GatherND %w, %idx : (tensor<3x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y : tensor<6x4x1xf32>
}

// -----

// The TorchScript export's form: Gather along axis 0 with [S] indices, and N = 2
// columns per slot (E * N = 6 < I = 7).
// CHECK-LABEL: func.func @gather
// CHECK-NOT: graph.Gather %
// CHECK: graph.MatMul {{.*}} : (tensor<12x7xf32>, tensor<7x12xf32>) -> tensor<12x12xf32>
// CHECK: graph.Reshape {{.*}} {shape = array<i64: 6, 1, 1>} : (tensor<6xi32>) -> tensor<6x1x1xi32>
// CHECK: graph.Equal {{.*}} : (tensor<6x1x1xi32>, tensor<1x1x3xi32>) -> tensor<6x1x3xi1>
// CHECK: %[[M:.*]] = graph.Add
// CHECK: %[[MN:.*]] = graph.Expand %[[M]] {shape = array<i64: 6, 2, 3>} : (tensor<6x1x3xf32>) -> tensor<6x2x3xf32>
// CHECK: graph.Reshape %[[MN]] {shape = array<i64: 12, 1, 3>}
// CHECK: graph.MatMul {{.*}} : (tensor<12x1x3xf32>, tensor<12x3x4xf32>) -> tensor<12x1x4xf32>
// CHECK: graph.Reshape {{.*}} -> tensor<6x2x4xf32>
// CHECK: graph.Transpose {{.*}} -> tensor<6x4x2xf32>
func.func @gather(%w: tensor<3x4x7xf32>, %idx: tensor<6xi32>, %b: tensor<6x7x2xf32>) -> tensor<6x4x2xf32> {
  %a = graph.Gather %w, %idx : (tensor<3x4x7xf32>, tensor<6xi32>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x2xf32>) -> tensor<6x4x2xf32>
  return %y : tensor<6x4x2xf32>
}

// -----

// Not profitable: E * N = 8 >= I = 7 (the all-experts product would be larger
// than the gathered weights); unchanged.
// CHECK-LABEL: func.func @wide
// CHECK: graph.GatherND
// CHECK: graph.MatMul {{.*}} : (tensor<6x4x7xf32>, tensor<6x7x2xf32>)
// CHECK-NOT: graph.Equal
func.func @wide(%w: tensor<4x4x7xf32>, %idx: tensor<6x1xi64>, %b: tensor<6x7x2xf32>) -> tensor<6x4x2xf32> {
  %a = graph.GatherND %w, %idx : (tensor<4x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x2xf32>) -> tensor<6x4x2xf32>
  return %y : tensor<6x4x2xf32>
}

// -----

// The gathered weights have another reader: they are held anyway; unchanged.
// CHECK-LABEL: func.func @shared
// CHECK: graph.GatherND
// CHECK: graph.MatMul {{.*}} : (tensor<6x4x7xf32>, tensor<6x7x1xf32>)
// CHECK-NOT: graph.Equal
func.func @shared(%w: tensor<3x4x7xf32>, %idx: tensor<6x1xi64>, %b: tensor<6x7x1xf32>) -> (tensor<6x4x1xf32>, tensor<6x4x7xf32>) {
  %a = graph.GatherND %w, %idx : (tensor<3x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y, %a : tensor<6x4x1xf32>, tensor<6x4x7xf32>
}

// -----

// A Gather along another axis (not the experts' table layout); unchanged.
// CHECK-LABEL: func.func @other_axis
// CHECK: graph.Gather
// CHECK-NOT: graph.Equal
func.func @other_axis(%w: tensor<6x3x7xf32>, %idx: tensor<4xi64>, %b: tensor<6x7x1xf32>) -> tensor<6x4x1xf32> {
  %a = graph.Gather %w, %idx {axis = 1 : i64} : (tensor<6x3x7xf32>, tensor<4xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y : tensor<6x4x1xf32>
}

// -----

// The slots are 3 tokens repeated twice each (transformers' repeat_interleave,
// dynamo export: Unsqueeze, Expand, Reshape, Unsqueeze): one product per
// token with all experts serves its 2 slots, each picking its expert with a
// row of a [T, k, E] one-hot mask; the repetition goes.
// CHECK-LABEL: func.func @repeated_expand
// CHECK-SAME: (%[[W:.*]]: tensor<3x4x7xf32>, %[[IDX:.*]]: tensor<6x1xi64>, %[[X:.*]]: tensor<3x7xf32>)
// CHECK-NOT: graph.Expand
// CHECK: %[[U:.*]] = graph.Unsqueeze %[[X]]
// CHECK: %[[XT:.*]] = graph.Reshape %[[U]] {shape = array<i64: 3, 7>} : (tensor<3x1x7xf32>) -> tensor<3x7xf32>
// CHECK: %[[Z:.*]] = graph.MatMul %[[XT]], {{.*}} : (tensor<3x7xf32>, tensor<7x12xf32>) -> tensor<3x12xf32>
// CHECK: %[[Z3:.*]] = graph.Reshape %[[Z]] {shape = array<i64: 3, 3, 4>}
// CHECK: %[[M:.*]] = graph.Reshape {{.*}} {shape = array<i64: 3, 2, 3>} : (tensor<6x1x3xf32>) -> tensor<3x2x3xf32>
// CHECK: %[[P:.*]] = graph.MatMul %[[M]], %[[Z3]] : (tensor<3x2x3xf32>, tensor<3x3x4xf32>) -> tensor<3x2x4xf32>
// CHECK: graph.Reshape %[[P]] {shape = array<i64: 6, 1, 4>}
// CHECK: graph.Transpose {{.*}} -> tensor<6x4x1xf32>
// CHECK-NOT: graph.Expand
func.func @repeated_expand(%w: tensor<3x4x7xf32>, %idx: tensor<6x1xi64>, %x: tensor<3x7xf32>) -> tensor<6x4x1xf32> {
  %u = graph.Unsqueeze %x {axes = array<i64: 1>} : (tensor<3x7xf32>) -> tensor<3x1x7xf32>
  %e = graph.Expand %u {shape = array<i64: 1, 2, 1>} : (tensor<3x1x7xf32>) -> tensor<3x2x7xf32>
  %r = graph.Reshape %e {shape = array<i64: -1, 7>} : (tensor<3x2x7xf32>) -> tensor<6x7xf32>
  %b = graph.Unsqueeze %r {axes = array<i64: -1>} : (tensor<6x7xf32>) -> tensor<6x7x1xf32>
  %a = graph.GatherND %w, %idx : (tensor<3x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y : tensor<6x4x1xf32>
}

// -----

// The TorchScript export's repetition (Tile, Flatten); a Tile that repeats
// along another axis is no per-token repetition and stays.
// CHECK-LABEL: func.func @repeated_tile
// CHECK-NOT: graph.Tile
// CHECK: graph.MatMul {{.*}} : (tensor<3x2x3xf32>, tensor<3x3x4xf32>) -> tensor<3x2x4xf32>
// CHECK-LABEL: func.func @tiled_rows
// CHECK: graph.Tile
// CHECK: graph.MatMul {{.*}} : (tensor<6x1x3xf32>, tensor<6x3x4xf32>) -> tensor<6x1x4xf32>
func.func @repeated_tile(%w: tensor<3x4x7xf32>, %idx: tensor<6xi64>, %x: tensor<3x7xf32>) -> tensor<6x4x1xf32> {
  %u = graph.Unsqueeze %x {axes = array<i64: 1>} : (tensor<3x7xf32>) -> tensor<3x1x7xf32>
  %t = graph.Tile %u {repeats = array<i64: 1, 2, 1>} : (tensor<3x1x7xf32>) -> tensor<3x2x7xf32>
  %f = graph.Flatten %t {axis = 2 : i64} : (tensor<3x2x7xf32>) -> tensor<6x7xf32>
  %b = graph.Unsqueeze %f {axes = array<i64: -1>} : (tensor<6x7xf32>) -> tensor<6x7x1xf32>
  %a = graph.Gather %w, %idx : (tensor<3x4x7xf32>, tensor<6xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y : tensor<6x4x1xf32>
}
func.func @tiled_rows(%w: tensor<3x4x7xf32>, %idx: tensor<6xi64>, %x: tensor<3x7xf32>) -> tensor<6x4x1xf32> {
  %t = graph.Tile %x {repeats = array<i64: 2, 1>} : (tensor<3x7xf32>) -> tensor<6x7xf32>
  %b = graph.Unsqueeze %t {axes = array<i64: -1>} : (tensor<6x7xf32>) -> tensor<6x7x1xf32>
  %a = graph.Gather %w, %idx : (tensor<3x4x7xf32>, tensor<6xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y : tensor<6x4x1xf32>
}

// -----

// Transposed experts (W [E, I, O], the slot's row on the left: transformers'
// is_transposed experts, e.g. GPT-OSS): the weights go to [I, E*O] once, the
// slot rows [S*N, I] multiply them, and the one-hot rows pick each slot's O.
// CHECK-LABEL: func.func @transposed
// CHECK-SAME: (%[[W:.*]]: tensor<3x7x4xf32>, %[[IDX:.*]]: tensor<6xi64>, %[[B:.*]]: tensor<6x1x7xf32>)
// CHECK-NOT: graph.Gather
// CHECK: %[[BM:.*]] = graph.Reshape %[[B]] {shape = array<i64: 6, 7>}
// CHECK: %[[WT:.*]] = graph.Transpose %[[W]] {perm = array<i64: 1, 0, 2>} : (tensor<3x7x4xf32>) -> tensor<7x3x4xf32>
// CHECK: %[[WM:.*]] = graph.Reshape %[[WT]] {shape = array<i64: 7, 12>}
// CHECK: %[[Z:.*]] = graph.MatMul %[[BM]], %[[WM]] : (tensor<6x7xf32>, tensor<7x12xf32>) -> tensor<6x12xf32>
// CHECK: graph.MatMul {{.*}} : (tensor<6x1x3xf32>, tensor<6x3x4xf32>) -> tensor<6x1x4xf32>
// CHECK-NOT: graph.Transpose
// CHECK: return
func.func @transposed(%w: tensor<3x7x4xf32>, %idx: tensor<6xi64>, %b: tensor<6x1x7xf32>) -> tensor<6x1x4xf32> {
  %a = graph.Gather %w, %idx : (tensor<3x7x4xf32>, tensor<6xi64>) -> tensor<6x7x4xf32>
  %y = graph.MatMul %b, %a : (tensor<6x1x7xf32>, tensor<6x7x4xf32>) -> tensor<6x1x4xf32>
  return %y : tensor<6x1x4xf32>
}

// -----

// Transposed experts on repeated tokens: one row per token, k picks.
// CHECK-LABEL: func.func @transposed_repeated
// CHECK-NOT: graph.Expand
// CHECK: graph.MatMul {{.*}} : (tensor<3x7xf32>, tensor<7x12xf32>) -> tensor<3x12xf32>
// CHECK: graph.MatMul {{.*}} : (tensor<3x2x3xf32>, tensor<3x3x4xf32>) -> tensor<3x2x4xf32>
// CHECK: graph.Reshape {{.*}} -> tensor<6x1x4xf32>
func.func @transposed_repeated(%w: tensor<3x7x4xf32>, %idx: tensor<6x1xi64>, %x: tensor<3x7xf32>) -> tensor<6x1x4xf32> {
  %u = graph.Unsqueeze %x {axes = array<i64: 1>} : (tensor<3x7xf32>) -> tensor<3x1x7xf32>
  %e = graph.Expand %u {shape = array<i64: 1, 2, 1>} : (tensor<3x1x7xf32>) -> tensor<3x2x7xf32>
  %r = graph.Reshape %e {shape = array<i64: -1, 7>} : (tensor<3x2x7xf32>) -> tensor<6x7xf32>
  %b = graph.Unsqueeze %r {axes = array<i64: 1>} : (tensor<6x7xf32>) -> tensor<6x1x7xf32>
  %a = graph.GatherND %w, %idx : (tensor<3x7x4xf32>, tensor<6x1xi64>) -> tensor<6x7x4xf32>
  %y = graph.MatMul %b, %a : (tensor<6x1x7xf32>, tensor<6x7x4xf32>) -> tensor<6x1x4xf32>
  return %y : tensor<6x1x4xf32>
}
