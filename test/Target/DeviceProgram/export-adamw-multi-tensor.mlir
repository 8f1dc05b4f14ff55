// RUN: rm -rf %t && straitc %s --loss cross-entropy --optimizer adamw -o %t
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb > %t/rank0.txt
// RUN: awk '/^values {/{v=1} /^(kernels|steps) {/{v=0} v && /^  id:/{id=$2} v && /^  name:/{print "value", $2, id}' %t/rank0.txt > %t/ids.txt
// RUN: cat %t/ids.txt %t/rank0.txt | FileCheck %s
// RUN: grep -c 'op: "AdamW"' %t/rank0.txt | FileCheck %s --check-prefix=ONE
// RUN: rm -rf %t.wd && straitc %s --loss cross-entropy --optimizer adamw --weight-decay 0.1 --frozen l2.b -o %t.wd
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.wd/rank0.program.pb | grep -c 'op: "AdamW"' | FileCheck %s --check-prefix=ONE

// The optimizer's updates of one step are one multi-tensor AdamW kernel:
// the exporter appends each variable's update to the one before it when
// nothing but variable reads and writes came between them and they share
// the learning rate, step and attributes. Groups keep their order: lr,
// step, then the parameters, the gradients, the first and the second
// moments, each in the block's order (l1.w, l1.b, l2.w, l2.b); the outputs
// are the parameters and moments again, written in place. With one
// micro-batch the gradients are the backward's values (no AccumulateGrad).

// CHECK: value "lr" [[LR:[0-9]+]]
// CHECK: value "step" [[STEP:[0-9]+]]
// CHECK: value "l1.w" [[W1:[0-9]+]]
// CHECK: value "l1.b" [[B1:[0-9]+]]
// CHECK: value "l2.w" [[W2:[0-9]+]]
// CHECK: value "l2.b" [[B2:[0-9]+]]
// CHECK-NOT: op: "AccumulateGrad"
// CHECK: op: "AdamW"
// CHECK-NEXT: opset: {{[0-9]+}}
// CHECK-NEXT: inputs: [[LR]]
// CHECK-NEXT: inputs: [[STEP]]
// CHECK-NEXT: inputs: [[W1]]
// CHECK-NEXT: inputs: [[B1]]
// CHECK-NEXT: inputs: [[W2]]
// CHECK-NEXT: inputs: [[B2]]
// CHECK-COUNT-12: inputs: {{[0-9]+}}
// CHECK-NEXT: outputs: [[W1]]
// CHECK-NEXT: outputs: [[B1]]
// CHECK-NEXT: outputs: [[W2]]
// CHECK-NEXT: outputs: [[B2]]
// CHECK-COUNT-8: outputs: {{[0-9]+}}
// CHECK-NOT: outputs:
// CHECK: steps

// ONE: {{^}}1{{$}}

// With --precision bf16 the products read bf16 weights: the four weight
// casts are the program's first step, run once when the parameters are
// loaded (`once: true`) into persistent ROLE_PARAMETER_COPY values, and
// AdamW writes the copies of the new parameters (a fourth output group,
// in the parameters' order). No weight cast is left in the iteration;
// --parameter-copies=false keeps them there.
// RUN: rm -rf %t.bf && straitc %s --loss cross-entropy --optimizer adamw --precision bf16 -o %t.bf
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.bf/rank0.program.pb > %t/bf.txt
// RUN: awk '/^values {/{v=1} /^(kernels|steps) {/{v=0} v && /^  id:/{id=$2} v && /^  name:/{print "value", $2, id}' %t/bf.txt > %t/bf-ids.txt
// RUN: cat %t/bf-ids.txt %t/bf.txt | FileCheck %s --check-prefix=BF
// RUN: grep -c 'op: "Cast"' %t/bf.txt | FileCheck %s --check-prefix=FIVE
// RUN: rm -rf %t.nc && straitc %s --loss cross-entropy --optimizer adamw --precision bf16 --parameter-copies=false -o %t.nc
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.nc/rank0.program.pb > %t/nc.txt
// RUN: not grep -q 'once: true' %t/nc.txt
// RUN: not grep -q ROLE_PARAMETER_COPY %t/nc.txt
// RUN: grep -c 'op: "Cast"' %t/nc.txt | FileCheck %s --check-prefix=FIVE
// FIVE: {{^}}5{{$}}
// BF: value "l1.w.bf16" [[CW1:[0-9]+]]
// BF: value "l1.b.bf16" [[CB1:[0-9]+]]
// BF: value "l2.w.bf16" [[CW2:[0-9]+]]
// BF: value "l2.b.bf16" [[CB2:[0-9]+]]
// BF: name: "l1.w.bf16"
// BF: role: ROLE_PARAMETER_COPY
// BF: op: "AdamW"
// BF-COUNT-12: outputs: {{[0-9]+}}
// BF-NEXT: outputs: [[CW1]]
// BF-NEXT: outputs: [[CB1]]
// BF-NEXT: outputs: [[CW2]]
// BF-NEXT: outputs: [[CB2]]
// BF: steps {
// BF-NEXT: label: "init"
// BF-NEXT: micro_batch: -1
// BF-NEXT: run {
// BF-COUNT-4: kernel_ids: {{[0-9]+}}
// BF-NEXT: }
// BF-NEXT: once: true
// BF: steps {
// BF-NOT: once: true

graph.Variable @l1.w : tensor<4x8xf32> = dense<0.25> : tensor<4x8xf32>
graph.Variable @l1.b : tensor<8xf32> = dense<0.0> : tensor<8xf32>
graph.Variable @l2.w : tensor<8x3xf32> = dense<-0.5> : tensor<8x3xf32>
graph.Variable @l2.b : tensor<3xf32> = dense<0.1> : tensor<3xf32>
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "logits"}) {
  %w1 = graph.ReadVariable @l1.w : tensor<4x8xf32>
  %b1 = graph.ReadVariable @l1.b : tensor<8xf32>
  %w2 = graph.ReadVariable @l2.w : tensor<8x3xf32>
  %b2 = graph.ReadVariable @l2.b : tensor<3xf32>
  %h = graph.Gemm %x, %w1, %b1 : (tensor<2x4xf32>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %r = graph.Relu %h : tensor<2x8xf32>
  %y = graph.Gemm %r, %w2, %b2 : (tensor<2x8xf32>, tensor<8x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
