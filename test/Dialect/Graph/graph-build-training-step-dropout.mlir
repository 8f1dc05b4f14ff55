// RUN: strait-opt %s --graph-build-training-step='loss=mse optimizer=sgd' 2>&1 | FileCheck %s
// RUN: strait-opt %s --graph-build-training-step='loss=mse optimizer=sgd' --graph-recompute-blocks 2>&1 | FileCheck %s --check-prefix=RECOMPUTE

// Seeded dropout (docs/training.md, "Dropout"): each Dropout of ratio > 0
// gets a graph.dropout_key (its index among the step's dropouts); its
// gradient is the same Dropout on dY with the same key (the runtime draws
// the same mask from it); a Dropout of ratio 0 stays the identity, without
// a key, and so does its gradient. No "identity" warning any more.

// CHECK-NOT: warning
// CHECK-LABEL: func.func @main
// CHECK: %[[H:.*]] = graph.MatMul
// CHECK: %[[D:.*]] = graph.Dropout %[[H]] {graph.dropout_key = 0 : i64, graph.op_id = {{[0-9]+}} : i64, ratio = 1.000000e-01 : f32}
// CHECK: %[[Z:.*]] = graph.Dropout %{{.*}} {graph.op_id = {{[0-9]+}} : i64, ratio = 0.000000e+00 : f32}
// CHECK: graph.Dropout %{{.*}} {graph.dropout_key = 1 : i64, graph.op_id = {{[0-9]+}} : i64} : tensor<2x4xf32>
// CHECK: graph.Dropout %{{.*}} {graph.dropout_key = 1 : i64, graph.grad_of = {{[0-9]+}} : i64} : tensor<2x4xf32>
// CHECK-NOT: graph.Dropout {{.*}}ratio = 0.000000e+00
// CHECK: graph.Dropout %{{.*}} {graph.dropout_key = 0 : i64, graph.grad_of = {{[0-9]+}} : i64, ratio = 1.000000e-01 : f32}

// Recomputed blocks clone their keyed Dropouts (a ratio-0 one draws nothing:
// no "not recomputed" warning either).
// RECOMPUTE-NOT: not recomputed
// RECOMPUTE: graph.Dropout {{.*}}{graph.dropout_key = 1 : i64, graph.grad_of = {{[0-9]+}} : i64, graph.recomputed}
// RECOMPUTE: graph.Dropout {{.*}}{graph.dropout_key = 0 : i64, graph.grad_of = {{[0-9]+}} : i64, graph.recomputed, ratio = 1.000000e-01 : f32}
module {
  graph.Variable @l.0.w : tensor<4x4xf32> = dense<0.5> : tensor<4x4xf32>
  graph.Variable @l.1.w : tensor<4x4xf32> = dense<0.25> : tensor<4x4xf32>
  func.func @main(%x: tensor<2x4xf32> {graph.name = "x"}) -> (tensor<2x4xf32> {graph.name = "y"}) {
    %w0 = graph.ReadVariable @l.0.w : tensor<4x4xf32>
    %h0 = graph.MatMul %x, %w0 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %d0 = graph.Dropout %h0 {ratio = 1.0e-01 : f32} : tensor<2x4xf32>
    %a0 = graph.Tanh %d0 : tensor<2x4xf32>
    %z0 = graph.Dropout %a0 {ratio = 0.0 : f32} : tensor<2x4xf32>
    %w1 = graph.ReadVariable @l.1.w : tensor<4x4xf32>
    %h1 = graph.MatMul %z0, %w1 : (tensor<2x4xf32>, tensor<4x4xf32>) -> tensor<2x4xf32>
    %d1 = graph.Dropout %h1 {ratio = 5.0e-01 : f32} : tensor<2x4xf32>
    return %d1 : tensor<2x4xf32>
  }
}
