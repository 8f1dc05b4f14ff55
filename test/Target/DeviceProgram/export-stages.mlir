// RUN: rm -rf %t && straitc %s --cluster %inputs/dist-2cpu.yaml --num-stages 2 -o %t | FileCheck %s --check-prefix=PLAN
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb | FileCheck %s --check-prefix=RANK0
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank1.program.pb | FileCheck %s --check-prefix=RANK1
// RUN: protoc --decode=strait.program.PlanManifest -I %models/../runtime/proto strait_program.proto < %t/plan.pb | FileCheck %s --check-prefix=MANIFEST
// RUN: FileCheck %s --check-prefix=JSON < %t/plan.json

// Two forced stages on two CPUs: rank 0 runs layer 0 and sends its output to
// rank 1, which receives it on the same channel and runs layer 1. Each rank
// holds only its own weight.

// PLAN: straitc: wrote {{.*}}plan.pb (2 ranks, 2 stages)

// RANK0: world_size: 2
// RANK0: name: "x"
// RANK0: role: ROLE_INPUT
// RANK0: parameter_name: "layers.0.w"
// RANK0-NOT: layers.1.w
// RANK0: steps {
// RANK0: run {
// RANK0: steps {
// RANK0-NEXT: id: 1
// RANK0-NEXT: label: "send ch0"
// RANK0: send {
// RANK0: peer: 1
// RANK0-NOT: steps {

// RANK1: rank: 1
// RANK1-NOT: layers.0.w
// RANK1: parameter_name: "layers.1.w"
// RANK1: name: "y"
// RANK1-NEXT: dtype: DTYPE_F32
// RANK1: role: ROLE_OUTPUT
// RANK1: steps {
// RANK1-NEXT: label: "recv ch0"
// RANK1: recv {
// RANK1: steps {
// RANK1: run {

// MANIFEST: world_size: 2
// MANIFEST: ranks {
// MANIFEST: program_file: "rank0.program.pb"
// MANIFEST: ranks {
// MANIFEST-NEXT: rank: 1
// MANIFEST: stage: 1

// JSON: "stages": [
// JSON: "cpu0"
// JSON: "cpu1"

graph.Variable @layers.0.w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
graph.Variable @layers.1.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
  %w0 = graph.ReadVariable @layers.0.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %r = graph.Relu %h : tensor<2x4xf32>
  %w1 = graph.ReadVariable @layers.1.w : tensor<4x4xf32>
  %y = graph.MatMul %r, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  return %y : tensor<2x4xf32>
}
