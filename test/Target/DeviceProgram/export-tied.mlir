// RUN: rm -rf %t && straitc %s --loss cross-entropy --optimizer sgd --cluster %inputs/dist-2cpu.yaml --num-stages 2 --micro-batches 2 --schedule gpipe -o %t | FileCheck %s --check-prefix=PLAN
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb | grep -E 'label:|peer:' | FileCheck %s --check-prefix=RANK0
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank1.program.pb | grep -E 'label:|peer:' | FileCheck %s --check-prefix=RANK1
// RUN: protoc --decode=strait.program.ParameterShardFile -I %models/../runtime/proto strait_program.proto < %t/rank0.params.pb | FileCheck %s --check-prefix=PARAMS
// RUN: protoc --decode=strait.program.ParameterShardFile -I %models/../runtime/proto strait_program.proto < %t/rank1.params.pb | FileCheck %s --check-prefix=PARAMS

// A weight both stages read (@w: the first and the last MatMul) is a copy in
// each rank's parameter file, never sent per micro-batch: only the
// activation (channel A) and its gradient (G) cross per micro-batch. After
// both micro-batches' backwards, each rank sends its accumulated partial
// gradient and receives the other's once (per-step steps: no "mbN"), in the
// same order on both ranks, then updates its copy. (Rank 1's peer is rank 0,
// which the text format omits.)

// PLAN: 2 micro-batches

// RANK0: label: "forward mb0"
// RANK0-NEXT: label: "send ch[[A:[0-9]+]] mb0"
// RANK0-NEXT: peer: 1
// RANK0-NEXT: label: "forward mb1"
// RANK0-NEXT: label: "send ch[[A]] mb1"
// RANK0-NEXT: peer: 1
// RANK0-NEXT: label: "recv ch[[G:[0-9]+]] mb0"
// RANK0: label: "recv ch[[G]] mb1"
// RANK0: label: "backward mb1"
// RANK0-NEXT: label: "send ch[[P0:[0-9]+]]"
// RANK0-NEXT: peer: 1
// RANK0-NEXT: label: "recv ch[[P1:[0-9]+]]"
// RANK0-NEXT: peer: 1
// RANK0-NEXT: label: "update"

// RANK1: label: "recv ch[[A:[0-9]+]] mb0"
// RANK1: label: "recv ch[[A]] mb1"
// RANK1: label: "send ch[[G:[0-9]+]] mb0"
// RANK1: label: "send ch[[G]] mb1"
// RANK1: label: "backward mb1"
// RANK1-NEXT: label: "recv ch[[P0:[0-9]+]]"
// RANK1-NEXT: label: "send ch[[P1:[0-9]+]]"
// RANK1-NEXT: label: "update"

// PARAMS: name: "w"

graph.Variable @w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "logits"}) {
  %w = graph.ReadVariable @w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %r = graph.Relu %h : tensor<2x4xf32>
  %s = graph.Sigmoid %r : tensor<2x4xf32>
  %t = graph.Tanh %s : tensor<2x4xf32>
  %y = graph.MatMul %t, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
