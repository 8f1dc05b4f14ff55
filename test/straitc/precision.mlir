// straitc --precision bf16 runs graph-autocast before the training step;
// strait-opt --strait-pipeline with precision=bf16 runs the same passes.
// RUN: straitc %s --loss mse --optimizer adamw --precision bf16 --emit=mlir -o %t.straitc.mlir
// RUN: FileCheck %s < %t.straitc.mlir
// RUN: strait-opt %s --strait-pipeline='loss=mse optimizer=adamw precision=bf16' -o %t.opt.mlir
// RUN: diff %t.straitc.mlir %t.opt.mlir
// The default (f32) inserts no cast.
// RUN: straitc %s --loss mse --optimizer adamw --emit=mlir | FileCheck %s --check-prefix=F32
// An unknown precision names the pass and the value.
// RUN: not straitc %s --loss mse --precision fp8 --emit=mlir 2>&1 | FileCheck %s --check-prefix=BAD
// The exported program carries bf16 tensors.
// RUN: rm -rf %t.job && straitc %s --loss mse --optimizer adamw --precision bf16 -o %t.job
// RUN: protoc --decode=strait.program.Program -I %models/../runtime/proto strait_program.proto < %t.job/rank0.program.pb | FileCheck %s --check-prefix=PROGRAM

// CHECK: graph.Variable @w : tensor<4x3xf32>
// CHECK: graph.MatMul {{.*}} : (tensor<5x4xbf16>, tensor<4x3xbf16>) -> tensor<5x3xbf16>
// CHECK: graph.AdamW {{.*}} -> (tensor<4x3xf32>, tensor<4x3xf32>, tensor<4x3xf32>)
// F32-NOT: bf16
// BAD: graph-autocast: precision must be bf16 or f16 (f32: no autocast), got 'fp8'
// PROGRAM: DTYPE_BF16
module {
  graph.Variable @w : tensor<4x3xf32> = dense<0.5> : tensor<4x3xf32>
  func.func @main(%x: tensor<5x4xf32> {graph.name = "x"}) -> (tensor<5x3xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @w : tensor<4x3xf32>
    %y = graph.MatMul %x, %w : (tensor<5x4xf32>, tensor<4x3xf32>) -> tensor<5x3xf32>
    return %y : tensor<5x3xf32>
  }
}
