// RUN: rm -rf %t && strait-opt %s --graph-fuse-elementwise -o %t.mlir
// RUN: straitc %t.mlir --emit=program -o %t
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t/rank0.program.pb | FileCheck %s

// graph.FusedElementwise exports as one FusedElementwise kernel of the
// strait domain whose attributes hold the program: opcode names, three
// register operands per instruction, the inlined constants and the output
// registers (docs/program-format.md).

// CHECK: kernels {
// CHECK-NEXT: op: "FusedElementwise"
// CHECK-NEXT: domain: "strait"
// CHECK-NEXT: opset: 1
// CHECK-NEXT: inputs: 0
// CHECK-NEXT: outputs: 1
// CHECK-NEXT: outputs: 2
// CHECK: key: "args"
// CHECK: v: 0
// CHECK-NEXT: v: -1
// CHECK-NEXT: v: -1
// CHECK-NEXT: v: 0
// CHECK-NEXT: v: 1
// CHECK-NEXT: v: -1
// CHECK-NEXT: v: 2
// CHECK-NEXT: v: -1
// CHECK-NEXT: v: -1
// CHECK-NEXT: }
// CHECK: key: "constants"
// CHECK: v: 0.5
// CHECK-NEXT: }
// CHECK: key: "ops"
// CHECK: v: "Const"
// CHECK-NEXT: v: "Mul"
// CHECK-NEXT: v: "Tanh"
// CHECK-NEXT: }
// CHECK: key: "outputs"
// CHECK: v: 2
// CHECK-NEXT: v: 3
// CHECK-NEXT: }
// The Softmax reads the Mul, the fused op's first output (value 1).
// CHECK: kernels {
// CHECK-NEXT: id: 1
// CHECK-NEXT: op: "Softmax"
// CHECK-NEXT: opset: 18
// CHECK-NEXT: inputs: 1
// CHECK-NOT: kernels {
func.func @main(%x: tensor<2x3xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "y"}, tensor<2x3xf32> {graph.name = "s"}) {
  %c = graph.Constant dense<5.000000e-01> : tensor<f32>
  %a = graph.Mul %x, %c : (tensor<2x3xf32>, tensor<f32>) -> tensor<2x3xf32>
  %t = graph.Tanh %a : tensor<2x3xf32>
  %s = graph.Softmax %a {axis = -1 : i64} : (tensor<2x3xf32>) -> tensor<2x3xf32>
  return %t, %s : tensor<2x3xf32>, tensor<2x3xf32>
}
