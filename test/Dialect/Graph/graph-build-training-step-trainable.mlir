// RUN: strait-opt %s --graph-build-training-step='frozen=backbone.*' | FileCheck %s --check-prefix=FROZEN
// RUN: strait-opt %s --graph-build-training-step='trainable=head.w,backbone.w frozen=backbone.*' | FileCheck %s --check-prefix=ONLYW

// Parameter-efficient training: frozen patterns win over trainable ones;
// variables left out get the `frozen` attribute, no state and no update, and
// nothing upstream of the first trainable variable is differentiated.
// Integer variables are never trainable.

// FROZEN-DAG: graph.Variable @backbone.w {frozen}
// FROZEN-DAG: graph.Variable @steps : tensor<i64>
// FROZEN-NOT: @backbone.w.adam
// FROZEN-NOT: @steps.adam
// FROZEN-LABEL: func.func @main
// FROZEN: %[[H:.*]] = graph.MatMul {{.*}}graph.op_id = 1
// FROZEN: %[[R:.*]] = graph.Relu %[[H]]
// FROZEN-NOT: graph.grad_of = 2 :
// FROZEN-NOT: graph.grad_of = 1 :
// FROZEN: graph.AccumulateGrad %{{.*}} for @head.w
// FROZEN-NEXT: graph.AccumulateGrad %{{.*}} for @head.b
// FROZEN-NOT: graph.AccumulateGrad
// FROZEN-NOT: graph.AssignVariable @backbone.w
// FROZEN: return

// ONLYW-DAG: graph.Variable @backbone.w {frozen}
// ONLYW-DAG: graph.Variable @head.b {frozen}
// ONLYW-LABEL: func.func @main
// ONLYW: graph.AccumulateGrad %{{.*}} for @head.w
// ONLYW-NOT: graph.AccumulateGrad
module {
  graph.Variable @backbone.w : tensor<3x3xf32> = dense<0.5> : tensor<3x3xf32>
  graph.Variable @head.w : tensor<3x2xf32> = dense<0.5> : tensor<3x2xf32>
  graph.Variable @head.b : tensor<2xf32> = dense<0.0> : tensor<2xf32>
  graph.Variable @steps : tensor<i64> = dense<0> : tensor<i64>
  func.func @main(%x: tensor<4x3xf32> {graph.name = "x"}) -> (tensor<4x2xf32> {graph.name = "logits"}) {
    %bw = graph.ReadVariable @backbone.w : tensor<3x3xf32>
    %h = graph.MatMul %x, %bw : (tensor<4x3xf32>, tensor<3x3xf32>) -> tensor<4x3xf32>
    %r = graph.Relu %h : tensor<4x3xf32>
    %hw = graph.ReadVariable @head.w : tensor<3x2xf32>
    %hb = graph.ReadVariable @head.b : tensor<2xf32>
    %y = graph.Gemm %r, %hw, %hb : (tensor<4x3xf32>, tensor<3x2xf32>, tensor<2xf32>) -> tensor<4x2xf32>
    return %y : tensor<4x2xf32>
  }
}
