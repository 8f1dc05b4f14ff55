// RUN: strait-opt %s --graph-add-lora='rank=2' -o /dev/null 2>&1 | FileCheck %s --check-prefix=DEFAULT-REMARK
// RUN: strait-opt %s --graph-add-lora='rank=2' 2>/dev/null | FileCheck %s --check-prefix=DEFAULT
// RUN: strait-opt %s --graph-add-lora='rank=2 targets=w,fc' -o /dev/null 2>&1 | FileCheck %s --check-prefix=NAMED-REMARK
// RUN: strait-opt %s --graph-add-lora='rank=2 targets=w,fc' 2>/dev/null | FileCheck %s --check-prefix=NAMED

// A weight read by a product and by another op (here the Gather of a tied
// embedding). Default targets: no adapter, and a remark names it. Named in
// targets: adapted in its product only, as PEFT adapts only the Linear module;
// the Gather keeps reading the base weight, and a remark says a merge would
// change it too.

// DEFAULT-REMARK: remark: graph-add-lora: 'w' is read by 1 product(s) and by 1 other op(s) (graph.Gather at {{.*}}); it gets no adapter (--lora-targets naming it adapts its products only, as PEFT adapts a Linear module)
// DEFAULT: graph.Variable @fc.lora_A
// DEFAULT-NOT: @w.lora_A

// NAMED-REMARK: remark: graph-add-lora: 'w' is adapted in its 1 product(s) only; 1 other op(s) (graph.Gather at {{.*}}) read the base weight, so merging the adapter into it would change them too (the PEFT adapter keeps them apart)
// NAMED-LABEL: func.func @main
// NAMED: %[[W:.*]] = graph.ReadVariable @w
// NAMED: %[[E:.*]] = graph.Gather %[[W]]
// NAMED: %[[Y:.*]] = graph.MatMul %[[E]], %[[W]]
// NAMED: %[[A:.*]] = graph.ReadVariable @w.lora_A
// NAMED: graph.MatMul %[[E]], %[[A]]
module {
  graph.Variable @w : tensor<4x4xf32> = dense<0.1> : tensor<4x4xf32>
  graph.Variable @fc : tensor<4x4xf32> = dense<0.1> : tensor<4x4xf32>
  graph.Variable @head : tensor<4x5xf32> = dense<0.1> : tensor<4x5xf32>
  func.func @main(%ids: tensor<3xi64>) -> tensor<3x5xf32> {
    %w = graph.ReadVariable @w : tensor<4x4xf32>
    %e = graph.Gather %w, %ids : (tensor<4x4xf32>, tensor<3xi64>) -> tensor<3x4xf32>
    %y = graph.MatMul %e, %w : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
    %f = graph.ReadVariable @fc : tensor<4x4xf32>
    %g = graph.MatMul %y, %f : (tensor<3x4xf32>, tensor<4x4xf32>) -> tensor<3x4xf32>
    %r = graph.Relu %g : tensor<3x4xf32>
    %h = graph.ReadVariable @head : tensor<4x5xf32>
    %z = graph.MatMul %r, %h : (tensor<3x4xf32>, tensor<4x5xf32>) -> tensor<3x5xf32>
    return %z : tensor<3x5xf32>
  }
}
