// RUN: rm -rf %t && straitc %s --loss cross-entropy --optimizer adamw --lr 0.003 \
// RUN:   --warmup-steps 5 --total-steps 50 --min-lr 0.0003 \
// RUN:   --cluster %inputs/dist-2cpu.yaml --num-stages 2 -o %t
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb | FileCheck %s
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank1.program.pb | FileCheck %s
// RUN: rm -rf %t.const && straitc %s --loss cross-entropy --optimizer sgd -o %t.const
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.const/rank0.program.pb | FileCheck %s --check-prefix=CONST
// RUN: rm -rf %t.none && straitc %s --loss cross-entropy --optimizer none --return-gradients -o %t.none
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.none/rank0.program.pb | FileCheck %s --check-prefix=NONE

// The schedule graph-build-training-step records (--lr, --warmup-steps,
// --total-steps, --min-lr) is written into every rank's program, which
// strait-run evaluates at each step; a step without an optimizer has none.

// CHECK: producer: "straitc 0.1"
// CHECK-NEXT: lr_schedule {
// CHECK-NEXT:   peak_lr: 0.003
// CHECK-NEXT:   warmup_steps: 5
// CHECK-NEXT:   total_steps: 50
// CHECK-NEXT:   min_lr: 0.0003
// CHECK-NEXT: }

// The defaults: constant 0.001.
// CONST: lr_schedule {
// CONST-NEXT:   peak_lr: 0.001
// CONST-NEXT: }

// NONE-NOT: lr_schedule
graph.Variable @layers.0.w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  %y = graph.MatMul %h, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
