// RUN: strait-opt %s --strait-pipeline='boundaries=1' | FileCheck %s
// straitc runs exactly the pipeline strait-opt runs, training step included:
// RUN: straitc %s --cluster %inputs/dist-2cpu.yaml --num-stages 2 --loss cross-entropy --emit=mlir -o %t.straitc.mlir
// RUN: strait-opt %s --strait-pipeline='cluster=%inputs/dist-2cpu.yaml num-stages=2 loss=cross-entropy optimizer=sgd' -o %t.opt.mlir
// RUN: diff %t.straitc.mlir %t.opt.mlir
// RUN: FileCheck %s --check-prefix=TRAIN < %t.opt.mlir

// The pipeline straitc runs: stages assigned, the cut value sent once,
// one function per stage.
graph.Variable @layers.0.w : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32>
// CHECK: module attributes {dist.plan = #dist.plan<schedule = one_f_one_b, micro_batches = 1, stages = [#dist.placement<stage = 0, {{.*}}>, #dist.placement<stage = 1, {{.*}}>]>}
// CHECK-LABEL: func.func @stage0
// CHECK: %[[H:.*]] = graph.MatMul
// CHECK-NEXT: dist.send %[[H]] to stage 1 channel 0
// CHECK-NEXT: return
// CHECK-LABEL: func.func @stage1
// CHECK: %[[R:.*]] = dist.recv from stage 0 channel 0
// CHECK: graph.MatMul %[[R]]
// CHECK-NOT: func.func @main
// The training step is split too: the update of layers.1.w and its
// accumulated gradient stay in stage 1, the gradient of the cut flows back.
// TRAIN-LABEL: func.func @stage0
// TRAIN: dist.send
// TRAIN: dist.recv from stage 1
// TRAIN: graph.AssignVariable @layers.0.w
// TRAIN-LABEL: func.func @stage1
// TRAIN: graph.SoftmaxCrossEntropyLoss
// TRAIN: dist.send {{.*}} to stage 0
// TRAIN: graph.AssignVariable @layers.1.w
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  %y = graph.MatMul %h, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
