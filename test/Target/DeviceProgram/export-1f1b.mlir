// RUN: rm -rf %t && straitc %s --loss cross-entropy --optimizer sgd --cluster %inputs/dist-2cpu.yaml --num-stages 2 --micro-batches 3 --pipeline-warmup classic -o %t | FileCheck %s --check-prefix=PLAN
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb | grep -E 'label:|deferred:|^schedule:' | FileCheck %s --check-prefix=RANK0
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank1.program.pb | grep -E 'label:|deferred:|^schedule:' | FileCheck %s --check-prefix=RANK1
// RUN: rm -rf %t.plan && straitc %s --loss cross-entropy --optimizer sgd --cluster %inputs/dist-2cpu.yaml --num-stages 2 --micro-batches 3 -o %t.plan | FileCheck %s --check-prefix=PLANNED
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.plan/rank0.program.pb | grep -E '^  label: "(forward|backward)' | FileCheck %s --check-prefix=RANK0-PLANNED
// RUN: rm -rf %t.bad && not straitc %s --loss cross-entropy --optimizer sgd --cluster %inputs/dist-2cpu.yaml --num-stages 2 --micro-batches 3 --schedule zigzag -o %t.bad 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: not test -e %t.bad/plan.pb

// Two stages, three micro-batches, 1F1B (the default) with the classic
// warm-up: stage 0 runs the forward of min(S-1-s, M) = 1 micro-batch ahead, then a forward and a
// backward alternately; the last stage alternates from the start. The
// backwards run in micro-batch order on both (the accumulated gradients are
// GPipe's). The ranks' orders differ, so every transfer of the micro-batch
// phases is deferred on both sides; the update's are not.

// PLAN: 3 micro-batches
// PLAN: 1f1b
// PLAN: in 1F1B order {{.*}}; warm-up forwards per stage: 1 0

// By default the planner's warm-up: on dist-2cpu's 100 Mbit/s link a
// micro-batch's round trip takes longer than stage 0's forward and backward,
// so stage 0 warms up with two forwards (its plan holds 3 micro-batches in
// flight); the last stage alternates from the start.
// PLANNED: warm-up forwards per stage: 2 0
// RANK0-PLANNED: label: "forward mb0"
// RANK0-PLANNED-NEXT: label: "forward mb1"
// RANK0-PLANNED-NEXT: label: "forward mb2"
// RANK0-PLANNED-NEXT: label: "backward mb0"
// BAD: unknown schedule 'zigzag' (auto, gpipe or 1f1b)

// RANK0: label: "forward mb0"
// RANK0-NEXT: label: "send ch[[A:[0-9]+]] mb0"
// RANK0-NEXT: deferred: true
// RANK0-NEXT: label: "forward mb1"
// RANK0-NEXT: label: "send ch[[A]] mb1"
// RANK0-NEXT: deferred: true
// RANK0-NEXT: label: "recv ch[[G:[0-9]+]] mb0"
// RANK0-NEXT: deferred: true
// RANK0-NEXT: label: "backward mb0"
// RANK0-NEXT: label: "forward mb2"
// RANK0-NEXT: label: "send ch[[A]] mb2"
// RANK0-NEXT: deferred: true
// RANK0-NEXT: label: "recv ch[[G]] mb1"
// RANK0-NEXT: deferred: true
// RANK0-NEXT: label: "backward mb1"
// RANK0-NEXT: label: "recv ch[[G]] mb2"
// RANK0-NEXT: deferred: true
// RANK0-NEXT: label: "backward mb2"
// RANK0-NEXT: label: "update"
// RANK0-NEXT: schedule: SCHEDULE_1F1B

// RANK1: label: "recv ch[[A:[0-9]+]] mb0"
// RANK1-NEXT: deferred: true
// RANK1-NEXT: label: "forward mb0"
// RANK1-NEXT: label: "backward mb0"
// RANK1-NEXT: label: "send ch[[G:[0-9]+]] mb0"
// RANK1-NEXT: deferred: true
// RANK1: label: "recv ch[[A]] mb1"
// RANK1-NEXT: deferred: true
// RANK1-NEXT: label: "forward mb1"
// RANK1-NEXT: label: "backward mb1"
// RANK1-NEXT: label: "send ch[[G]] mb1"
// RANK1-NEXT: deferred: true
// RANK1: label: "recv ch[[A]] mb2"
// RANK1-NEXT: deferred: true
// RANK1-NEXT: label: "forward mb2"
// RANK1-NEXT: label: "backward mb2"
// RANK1-NEXT: label: "send ch[[G]] mb2"
// RANK1-NEXT: deferred: true
// RANK1-NEXT: label: "backward mb2"
// RANK1-NEXT: label: "update"
// RANK1-NEXT: schedule: SCHEDULE_1F1B

graph.Variable @layers.0.w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
func.func @main(%x: tensor<6x4xf32> {graph.name = "x"}) -> (tensor<6x4xf32> {graph.name = "logits"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<6x4xf32>, tensor<4x4xf32>) -> tensor<6x4xf32>
  %r = graph.Relu %h : tensor<6x4xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  %y = graph.MatMul %r, %w1 : (tensor<6x4xf32>, tensor<4x4xf32>) -> tensor<6x4xf32>
  return %y : tensor<6x4xf32>
}
