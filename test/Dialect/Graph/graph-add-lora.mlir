// RUN: strait-opt %s --graph-add-lora='rank=2 alpha=4' | FileCheck %s
// RUN: strait-opt %s --graph-add-lora='rank=2 targets=*head* freeze-base=0' | FileCheck %s --check-prefix=HEAD
// RUN: strait-opt %s --graph-add-lora='rank=2 trainable=*.bias,q.weight' | FileCheck %s --check-prefix=KEEP
// RUN: strait-opt %s --graph-add-lora='rank=2' --graph-build-training-step='loss=cross-entropy optimizer=adamw' | FileCheck %s --check-prefix=STEP

// Default targets: the three layouts of a linear layer's weight (a PyTorch
// Linear's [out, in] through Transpose, a Gemm's [in, out], a MatMul's
// [in, out]) get A [in, R] (seeded, nonzero) and B [R, out] (zeros) after W;
// the embedding (read by a Gather) and the output head (its product reaches
// the result through a Reshape) do not. Every base variable is frozen. Each
// product y becomes y + MatMul(MatMul(x, A) * alpha/R, B), with x the
// product's input (not the transposed weight).

// CHECK-DAG: graph.Variable @emb {frozen}
// CHECK-DAG: graph.Variable @q.weight {frozen} : tensor<6x4xf32>
// CHECK-DAG: graph.Variable @q.weight.lora_A : tensor<4x2xf32> = dense<{{\[\[}}
// CHECK-DAG: graph.Variable @q.weight.lora_B : tensor<2x6xf32> = dense<0.000000e+00>
// CHECK-DAG: graph.Variable @fc.weight.lora_A : tensor<6x2xf32>
// CHECK-DAG: graph.Variable @fc.weight.lora_B : tensor<2x3xf32>
// CHECK-DAG: graph.Variable @fc.bias {frozen}
// CHECK-DAG: graph.Variable @mm.weight.lora_A : tensor<3x2xf32>
// CHECK-DAG: graph.Variable @head.weight {frozen}
// CHECK-NOT: @emb.lora_A
// CHECK-NOT: @head.weight.lora_A
// CHECK-LABEL: func.func @main
// CHECK: %[[X:.*]] = graph.Gather
// CHECK: %[[QT:.*]] = graph.Transpose
// CHECK: %[[Q:.*]] = graph.MatMul %[[X]], %[[QT]]
// CHECK: %[[A:.*]] = graph.ReadVariable @q.weight.lora_A
// CHECK: %[[B:.*]] = graph.ReadVariable @q.weight.lora_B
// CHECK: %[[XA:.*]] = graph.MatMul %[[X]], %[[A]] : (tensor<2x3x4xf32>, tensor<4x2xf32>) -> tensor<2x3x2xf32>
// CHECK: %[[S:.*]] = graph.Constant dense<2.000000e+00> : tensor<f32>
// CHECK: %[[XAS:.*]] = graph.Mul %[[XA]], %[[S]]
// CHECK: %[[D:.*]] = graph.MatMul %[[XAS]], %[[B]] : (tensor<2x3x2xf32>, tensor<2x6xf32>) -> tensor<2x3x6xf32>
// CHECK: %[[QL:.*]] = graph.Add %[[Q]], %[[D]]
// CHECK: %[[H:.*]] = graph.Reshape %[[QL]]
// CHECK: %[[G:.*]] = graph.Gemm %[[H]]
// CHECK: graph.MatMul %[[H]], %{{.*}} : (tensor<6x6xf32>, tensor<6x2xf32>)
// CHECK: %[[GL:.*]] = graph.Add %[[G]]
// CHECK: graph.Relu %[[GL]]
// CHECK: graph.ReadVariable @mm.weight.lora_A
// CHECK: %[[OUT:.*]] = graph.MatMul %{{.*}}, %{{.*}} : (tensor<6x5xf32>, tensor<5x7xf32>)
// CHECK-NEXT: graph.Reshape %[[OUT]]

// With targets, only the named weights get adapters (the head too); with
// freeze-base=0 nothing is frozen.
// HEAD-NOT: frozen
// HEAD-NOT: @q.weight.lora_A
// HEAD: graph.Variable @head.weight.lora_A : tensor<5x2xf32>
// HEAD-NOT: frozen

// trainable keeps base variables unfrozen besides the adapters.
// KEEP-DAG: graph.Variable @emb {frozen}
// KEEP-DAG: graph.Variable @q.weight : tensor<6x4xf32>
// KEEP-DAG: graph.Variable @fc.bias : tensor<3xf32>
// KEEP-DAG: graph.Variable @fc.weight {frozen}

// The training step differentiates and updates only the adapters.
// STEP-LABEL: func.func @main
// STEP-DAG: graph.AccumulateGrad %{{.*}} for @q.weight.lora_A
// STEP-DAG: graph.AccumulateGrad %{{.*}} for @q.weight.lora_B
// STEP-DAG: graph.AccumulateGrad %{{.*}} for @fc.weight.lora_A
// STEP-DAG: graph.AccumulateGrad %{{.*}} for @fc.weight.lora_B
// STEP-DAG: graph.AccumulateGrad %{{.*}} for @mm.weight.lora_A
// STEP-DAG: graph.AccumulateGrad %{{.*}} for @mm.weight.lora_B
// STEP-NOT: graph.AccumulateGrad %{{.*}} for @{{[a-z.]*}}weight{{ }}
// STEP-NOT: graph.AssignVariable @q.weight,
module {
  graph.Variable @emb : tensor<10x4xf32> = dense<0.1> : tensor<10x4xf32>
  graph.Variable @q.weight : tensor<6x4xf32> = dense<0.5> : tensor<6x4xf32>
  graph.Variable @fc.weight : tensor<6x3xf32> = dense<0.5> : tensor<6x3xf32>
  graph.Variable @fc.bias : tensor<3xf32> = dense<0.0> : tensor<3xf32>
  graph.Variable @mm.weight : tensor<3x5xf32> = dense<0.25> : tensor<3x5xf32>
  graph.Variable @head.weight : tensor<5x7xf32> = dense<0.25> : tensor<5x7xf32>
  func.func @main(%ids: tensor<2x3xi64> {graph.name = "ids"}) -> (tensor<2x3x7xf32> {graph.name = "logits"}) {
    %e = graph.ReadVariable @emb : tensor<10x4xf32>
    %x = graph.Gather %e, %ids : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
    %qw = graph.ReadVariable @q.weight : tensor<6x4xf32>
    %qt = graph.Transpose %qw {perm = array<i64: 1, 0>} : (tensor<6x4xf32>) -> tensor<4x6xf32>
    %h = graph.MatMul %x, %qt : (tensor<2x3x4xf32>, tensor<4x6xf32>) -> tensor<2x3x6xf32>
    %h2 = graph.Reshape %h {shape = array<i64: 6, 6>} : (tensor<2x3x6xf32>) -> tensor<6x6xf32>
    %fw = graph.ReadVariable @fc.weight : tensor<6x3xf32>
    %fb = graph.ReadVariable @fc.bias : tensor<3xf32>
    %g = graph.Gemm %h2, %fw, %fb : (tensor<6x6xf32>, tensor<6x3xf32>, tensor<3xf32>) -> tensor<6x3xf32>
    %r = graph.Relu %g : tensor<6x3xf32>
    %mw = graph.ReadVariable @mm.weight : tensor<3x5xf32>
    %m = graph.MatMul %r, %mw : (tensor<6x3xf32>, tensor<3x5xf32>) -> tensor<6x5xf32>
    %hw = graph.ReadVariable @head.weight : tensor<5x7xf32>
    %o = graph.MatMul %m, %hw : (tensor<6x5xf32>, tensor<5x7xf32>) -> tensor<6x7xf32>
    %y = graph.Reshape %o {shape = array<i64: 2, 3, 7>} : (tensor<6x7xf32>) -> tensor<2x3x7xf32>
    return %y : tensor<2x3x7xf32>
  }
}
