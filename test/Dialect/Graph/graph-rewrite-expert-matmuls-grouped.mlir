// RUN: strait-opt %s --graph-rewrite-expert-matmuls=mode=grouped -split-input-file | FileCheck %s
// RUN: strait-opt %s --graph-rewrite-expert-matmuls -split-input-file | FileCheck %s --check-prefix=AUTO
// RUN: strait-opt %s --graph-rewrite-expert-matmuls=mode=gathered -split-input-file | FileCheck %s --check-prefix=GATHERED
// RUN: not strait-opt %s --graph-rewrite-expert-matmuls=mode=sparse -split-input-file 2>&1 | FileCheck %s --check-prefix=BAD

// BAD: graph-rewrite-expert-matmuls: mode 'sparse' is not auto, grouped, dense or gathered
// GATHERED-NOT: graph.GroupedMatMul

// The dynamo export's GatherND of [O, I] = [4, 7] expert weights per slot:
// one GroupedMatMul of the 6 slot rows with the table as it is (transB), no
// weight copy, no all-experts product. auto takes it too: the all-experts
// GEMM would do E = 3 times its FLOPs.
// CHECK-LABEL: func.func @gathernd
// CHECK-SAME: (%[[W:.*]]: tensor<3x4x7xf32>, %[[IDX:.*]]: tensor<6x1xi64>, %[[B:.*]]: tensor<6x7x1xf32>)
// CHECK: %[[X:.*]] = graph.Reshape %[[B]] {shape = array<i64: 6, 7>} : (tensor<6x7x1xf32>) -> tensor<6x7xf32>
// CHECK: %[[I:.*]] = graph.Reshape %[[IDX]] {shape = array<i64: 6>} : (tensor<6x1xi64>) -> tensor<6xi64>
// CHECK: %[[Y:.*]] = graph.GroupedMatMul %[[X]], %[[W]], %[[I]] {transB = 1 : i64} : (tensor<6x7xf32>, tensor<3x4x7xf32>, tensor<6xi64>) -> tensor<6x4xf32>
// CHECK: %[[R:.*]] = graph.Reshape %[[Y]] {shape = array<i64: 6, 4, 1>} : (tensor<6x4xf32>) -> tensor<6x4x1xf32>
// CHECK-NOT: graph.
// CHECK: return %[[R]]
// AUTO-LABEL: func.func @gathernd
// AUTO: graph.GroupedMatMul
// AUTO-NOT: graph.Equal
// GATHERED-LABEL: func.func @gathernd
// GATHERED: graph.GatherND
func.func @gathernd(%w: tensor<3x4x7xf32>, %idx: tensor<6x1xi64>, %b: tensor<6x7x1xf32>) -> tensor<6x4x1xf32> {
  %a = graph.GatherND %w, %idx : (tensor<3x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y : tensor<6x4x1xf32>
}

// -----

// N = 2 columns per slot (TorchScript's Gather with [S] i32 indices): the
// columns become rows [S*N, I] and each slot's index repeats N times.
// CHECK-LABEL: func.func @gather_columns
// CHECK: %[[BT:.*]] = graph.Transpose %{{.*}} {perm = array<i64: 0, 2, 1>} : (tensor<6x7x2xf32>) -> tensor<6x2x7xf32>
// CHECK: %[[X:.*]] = graph.Reshape %[[BT]] {shape = array<i64: 12, 7>}
// CHECK: %[[I2:.*]] = graph.Reshape %{{.*}} {shape = array<i64: 6, 1>} : (tensor<6xi32>) -> tensor<6x1xi32>
// CHECK: %[[IE:.*]] = graph.Expand %[[I2]] {shape = array<i64: 6, 2>} : (tensor<6x1xi32>) -> tensor<6x2xi32>
// CHECK: %[[I:.*]] = graph.Reshape %[[IE]] {shape = array<i64: 12>}
// CHECK: %[[Y:.*]] = graph.GroupedMatMul %[[X]], %{{.*}}, %[[I]] {transB = 1 : i64} : (tensor<12x7xf32>, tensor<3x4x7xf32>, tensor<12xi32>) -> tensor<12x4xf32>
// CHECK: %[[Y3:.*]] = graph.Reshape %[[Y]] {shape = array<i64: 6, 2, 4>}
// CHECK: graph.Transpose %[[Y3]] {perm = array<i64: 0, 2, 1>} : (tensor<6x2x4xf32>) -> tensor<6x4x2xf32>
func.func @gather_columns(%w: tensor<3x4x7xf32>, %idx: tensor<6xi32>, %b: tensor<6x7x2xf32>) -> tensor<6x4x2xf32> {
  %a = graph.Gather %w, %idx : (tensor<3x4x7xf32>, tensor<6xi32>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x2xf32>) -> tensor<6x4x2xf32>
  return %y : tensor<6x4x2xf32>
}

// -----

// E * N >= I: the all-experts form does not apply (dense mode leaves it),
// the grouped form does, at any E.
// CHECK-LABEL: func.func @wide
// CHECK-NOT: graph.GatherND
// CHECK: graph.GroupedMatMul {{.*}} : (tensor<12x7xf32>, tensor<4x4x7xf32>, tensor<12xi64>) -> tensor<12x4xf32>
// AUTO-LABEL: func.func @wide
// AUTO: graph.GroupedMatMul
func.func @wide(%w: tensor<4x4x7xf32>, %idx: tensor<6x1xi64>, %b: tensor<6x7x2xf32>) -> tensor<6x4x2xf32> {
  %a = graph.GatherND %w, %idx : (tensor<4x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x2xf32>) -> tensor<6x4x2xf32>
  return %y : tensor<6x4x2xf32>
}

// -----

// The gathered weights have another reader: unchanged in every mode.
// CHECK-LABEL: func.func @shared
// CHECK: graph.GatherND
// CHECK-NOT: graph.GroupedMatMul
// AUTO-LABEL: func.func @shared
// AUTO-NOT: graph.GroupedMatMul
func.func @shared(%w: tensor<3x4x7xf32>, %idx: tensor<6x1xi64>, %b: tensor<6x7x1xf32>) -> (tensor<6x4x1xf32>, tensor<6x4x7xf32>) {
  %a = graph.GatherND %w, %idx : (tensor<3x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y, %a : tensor<6x4x1xf32>, tensor<6x4x7xf32>
}

// -----

// Transposed experts W [E, I, O] on the right: transB = 0, the slot rows
// [S, I] as they are.
// CHECK-LABEL: func.func @transposed
// CHECK-SAME: (%[[W:.*]]: tensor<3x7x4xf32>, %[[IDX:.*]]: tensor<6xi64>, %[[B:.*]]: tensor<6x1x7xf32>)
// CHECK: %[[X:.*]] = graph.Reshape %[[B]] {shape = array<i64: 6, 7>}
// CHECK: %[[Y:.*]] = graph.GroupedMatMul %[[X]], %[[W]], %[[IDX]] {transB = 0 : i64} : (tensor<6x7xf32>, tensor<3x7x4xf32>, tensor<6xi64>) -> tensor<6x4xf32>
// CHECK: graph.Reshape %[[Y]] {shape = array<i64: 6, 1, 4>}
// CHECK-NOT: graph.Transpose
// AUTO-LABEL: func.func @transposed
// AUTO: graph.GroupedMatMul {{.*}} {transB = 0 : i64}
func.func @transposed(%w: tensor<3x7x4xf32>, %idx: tensor<6xi64>, %b: tensor<6x1x7xf32>) -> tensor<6x1x4xf32> {
  %a = graph.Gather %w, %idx : (tensor<3x7x4xf32>, tensor<6xi64>) -> tensor<6x7x4xf32>
  %y = graph.MatMul %b, %a : (tensor<6x1x7xf32>, tensor<6x7x4xf32>) -> tensor<6x1x4xf32>
  return %y : tensor<6x1x4xf32>
}

// -----

// 3 tokens repeated twice over 2 experts: the all-experts GEMM over the
// tokens does E * T = 6 rows for the S = 6 slot rows, no more FLOPs than the
// grouped form, so auto keeps the one-hot form there; grouped mode takes the
// repeated rows (the Expand stays: it builds the slot rows).
// CHECK-LABEL: func.func @repeated_two_experts
// CHECK: graph.Expand
// CHECK: graph.GroupedMatMul {{.*}} : (tensor<6x7xf32>, tensor<2x4x7xf32>, tensor<6xi64>) -> tensor<6x4xf32>
// AUTO-LABEL: func.func @repeated_two_experts
// AUTO-NOT: graph.GroupedMatMul
// AUTO: graph.MatMul {{.*}} : (tensor<3x2x2xf32>, tensor<3x2x4xf32>) -> tensor<3x2x4xf32>
func.func @repeated_two_experts(%w: tensor<2x4x7xf32>, %idx: tensor<6x1xi64>, %x: tensor<3x7xf32>) -> tensor<6x4x1xf32> {
  %u = graph.Unsqueeze %x {axes = array<i64: 1>} : (tensor<3x7xf32>) -> tensor<3x1x7xf32>
  %e = graph.Expand %u {shape = array<i64: 1, 2, 1>} : (tensor<3x1x7xf32>) -> tensor<3x2x7xf32>
  %r = graph.Reshape %e {shape = array<i64: -1, 7>} : (tensor<3x2x7xf32>) -> tensor<6x7xf32>
  %b = graph.Unsqueeze %r {axes = array<i64: -1>} : (tensor<6x7xf32>) -> tensor<6x7x1xf32>
  %a = graph.GatherND %w, %idx : (tensor<2x4x7xf32>, tensor<6x1xi64>) -> tensor<6x4x7xf32>
  %y = graph.MatMul %a, %b : (tensor<6x4x7xf32>, tensor<6x7x1xf32>) -> tensor<6x4x1xf32>
  return %y : tensor<6x4x1xf32>
}
