// RUN: rm -rf %t && straitc %s --loss cross-entropy --optimizer sgd --fuse-loss-grad=false -o %t | FileCheck %s --check-prefix=PLAN
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb > %t/rank0.txt
// RUN: FileCheck %s < %t/rank0.txt
// RUN: grep -c 'parameter_name: "layers.0.w"$' %t/rank0.txt | FileCheck %s --check-prefix=ONCE
// RUN: rm -rf %t.mb && straitc %s --loss cross-entropy --optimizer sgd --micro-batches 2 -o %t.mb
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.mb/rank0.program.pb | FileCheck %s --check-prefix=MB

// A training step on one rank (straitc --loss runs graph-build-training-step
// in the pipeline): one value per variable shared by its reads and written in
// place by the update, optimizer state, backward kernels pointing at their
// forward kernel, the loss as an output. With one micro-batch the optimizer
// reads the weight gradient the backward computed (dW, the Gemm's output):
// no AccumulateGrad copies it into a persistent gradient value.
// (--fuse-loss-grad=false keeps SoftmaxCrossEntropyLossGrad a backward kernel
// of its own; test/straitc/fuse-loss-grad.test exports the fused one.)

// PLAN: straitc: wrote {{.*}} (1 ranks, 1 stages)

// CHECK: name: "lr"
// CHECK: role: ROLE_INPUT
// CHECK: id: [[W:[0-9]+]]
// CHECK-NEXT: name: "layers.0.w"
// CHECK: role: ROLE_PARAMETER
// CHECK: id: [[M:[0-9]+]]
// CHECK-NEXT: name: "layers.0.w.momentum"
// CHECK: role: ROLE_OPTIMIZER_STATE
// CHECK: name: "loss"
// CHECK: role: ROLE_OUTPUT
// CHECK-NOT: ROLE_GRADIENT
// CHECK: op: "Gemm"
// CHECK-NEXT: opset: 18
// CHECK-NEXT: inputs: 0
// CHECK-NEXT: inputs: {{[0-9]+}}
// CHECK-NEXT: outputs: [[DW:[0-9]+]]
// CHECK: forward_kernel: 1
// CHECK-NOT: op: "AccumulateGrad"
// CHECK: op: "SGD"
// CHECK-NEXT: opset: 18
// CHECK-NEXT: inputs: {{[0-9]+}}
// CHECK-NEXT: inputs: [[W]]
// CHECK-NEXT: inputs: [[DW]]
// CHECK-NEXT: inputs: [[M]]
// CHECK-NEXT: outputs: [[W]]
// CHECK-NEXT: outputs: [[M]]

// Two micro-batches: the batch input holds both (4 rows), each micro-batch
// slices its 2 rows; one stage in 1F1B order: each micro-batch's forward,
// then its backward, accumulating over 2 into the persistent gradient; the
// update runs once, unmarked.
// MB: name: "x"
// MB-NEXT: dtype: DTYPE_F32
// MB-NEXT: shape: 4
// MB: role: ROLE_GRADIENT
// MB: op: "Slice"
// MB: op: "MatMul"
// MB: op: "AccumulateGrad"
// MB: key: "micro_batches"
// MB-NEXT: value {
// MB-NEXT: i: 2
// MB: op: "Slice"
// MB: op: "MatMul"
// MB: op: "AccumulateGrad"
// MB: op: "SGD"
// One stage in 1F1B order: each micro-batch's backward follows its forward.
// MB: label: "forward mb0"
// MB-NEXT: micro_batch: 0
// MB: label: "backward mb0"
// MB-NEXT: micro_batch: 0
// MB: label: "forward mb1"
// MB-NEXT: micro_batch: 1
// MB: label: "backward mb1"
// MB-NEXT: micro_batch: 1
// MB: label: "update"
// MB-NEXT: micro_batch: -1

// The variable is one value: the forward MatMul reads it and SGD writes it.
// ONCE: 1

graph.Variable @layers.0.w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "logits"}) {
  %w = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %h : tensor<2x4xf32>
}
