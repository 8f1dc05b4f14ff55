// RUN: rm -rf %t && not straitc %s --cluster %inputs/dist-3cpu.yaml --num-stages 2 -o %t 2>&1 | FileCheck %s
// RUN: not ls %t/plan.pb

// Stages with unequal replica counts (1 and 2 of 3 devices) cannot talk yet:
// the exporter names the transfer and the counts, and writes no job.
// CHECK: error: stage 0 has 1 replicas but peer stage 1 has 2; only equal replica counts are exported

graph.Variable @layers.0.w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  %y = graph.MatMul %h, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
