// Compressed AdamW: straitc --compressed-adam N reaches graph-build-training-step as
// freeze-variance-after=N (strait-opt --strait-pipeline takes the same option), and every
// AdamW freezes its second moment after step N (docs/training.md, "Compressed AdamW").
// RUN: straitc %s --loss cross-entropy --optimizer adamw --compressed-adam 5 --emit=mlir \
// RUN:   -o %t.straitc.mlir
// RUN: strait-opt %s --strait-pipeline='loss=cross-entropy optimizer=adamw compressed-adam=5' \
// RUN:   -o %t.opt.mlir
// RUN: diff %t.straitc.mlir %t.opt.mlir
// RUN: FileCheck %s < %t.opt.mlir
//
// Without it the attribute keeps its default (0: never frozen) and is not printed:
// RUN: strait-opt %s --graph-build-training-step='loss=cross-entropy optimizer=adamw' \
// RUN:   | FileCheck %s --check-prefix=PLAIN
//
// Bad options: another optimizer, a negative count; straitc's own checks.
// RUN: not strait-opt %s --graph-build-training-step='loss=cross-entropy optimizer=sgd freeze-variance-after=3' 2>&1 | FileCheck %s --check-prefix=SGD
// RUN: not strait-opt %s --graph-build-training-step='loss=cross-entropy optimizer=adamw freeze-variance-after=-1' 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not straitc %s --loss cross-entropy --optimizer sgd --compressed-adam 5 --emit=mlir 2>&1 | FileCheck %s --check-prefix=FLAG-SGD
// RUN: not straitc %s --compressed-adam 5 --emit=mlir 2>&1 | FileCheck %s --check-prefix=FLAG-SGD
// RUN: not straitc %s --loss cross-entropy --optimizer adamw --compressed-adam 0 --emit=mlir 2>&1 | FileCheck %s --check-prefix=FLAG-ZERO

// CHECK-COUNT-2: graph.AdamW {{.*}}freeze_variance_after = 5 : i64
// CHECK-NOT: graph.AdamW
// PLAIN: graph.AdamW
// PLAIN-NOT: freeze_variance_after
// SGD: error: graph-build-training-step: freeze-variance-after (straitc --compressed-adam) needs optimizer=adamw, not 'sgd'
// NEG: error: graph-build-training-step: invalid freeze-variance-after=-1 (straitc --compressed-adam): expected 0 (never) or a step count >= 1
// FLAG-SGD: straitc: --compressed-adam 5: it needs --loss and --optimizer adamw
// FLAG-ZERO: straitc: --compressed-adam 0: N must be at least 1

graph.Variable @body.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
graph.Variable @head.w : tensor<4x3xf32> = dense<0.5> : tensor<4x3xf32>

func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x3xf32> {graph.name = "y"}) {
  %w0 = graph.ReadVariable @body.w : tensor<4x4xf32>
  %h = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
  %w1 = graph.ReadVariable @head.w : tensor<4x3xf32>
  %y = graph.MatMul %h, %w1 : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  return %y : tensor<2x3xf32>
}
