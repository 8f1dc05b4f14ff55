// RUN: rm -rf %t && straitc %s --loss cross-entropy --optimizer sgd --cluster %inputs/dist-2cpu.yaml --num-stages 2 --micro-batches 2 --schedule gpipe -o %t | FileCheck %s --check-prefix=PLAN
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb | grep -E 'label:|peer:' | FileCheck %s --check-prefix=RANK0
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank1.program.pb | grep -E 'label:|peer:' | FileCheck %s --check-prefix=RANK1
// RUN: straitc %s --loss cross-entropy --optimizer sgd --cluster %inputs/dist-2cpu.yaml --num-stages 2 --micro-batches 2 --schedule gpipe --emit=mlir | FileCheck %s --check-prefix=IR

// Two stages, two micro-batches, a training step: every rank runs the
// forwards of both micro-batches, then both backwards, then the update
// (GPipe order). The activation goes forward on one channel, its gradient
// comes back on another, marked dist.backward on both sides, so both ranks
// put it in their backward phase and their transfers follow the same order.

// PLAN: 2 micro-batches
// PLAN: gpipe

// IR: dist.send {{.*}} channel [[FWD:[0-9]+]] {dist.stage = #dist.stage<0>}
// IR: dist.send {{.*}} channel [[BWD:[0-9]+]] {dist.backward, dist.stage = #dist.stage<1>}

// RANK0: label: "forward mb0"
// RANK0-NEXT: label: "send ch[[A:[0-9]+]] mb0"
// RANK0: label: "forward mb1"
// RANK0-NEXT: label: "send ch[[A]] mb1"
// RANK0: label: "recv ch[[G:[0-9]+]] mb0"
// RANK0-NEXT: peer: 1
// RANK0-NEXT: label: "backward mb0"
// RANK0: label: "recv ch[[G]] mb1"
// RANK0: label: "backward mb1"
// RANK0: label: "update"

// RANK1: label: "recv ch[[A:[0-9]+]] mb0"
// RANK1: label: "forward mb0"
// RANK1: label: "recv ch[[A]] mb1"
// RANK1: label: "forward mb1"
// RANK1: label: "backward mb0"
// RANK1-NEXT: label: "send ch[[G:[0-9]+]] mb0"
// RANK1: label: "backward mb1"
// RANK1-NEXT: label: "send ch[[G]] mb1"
// RANK1: label: "update"

graph.Variable @layers.0.w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "logits"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %r = graph.Relu %h : tensor<2x4xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  %y = graph.MatMul %r, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
