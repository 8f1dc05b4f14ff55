// RUN: strait-opt %s --graph-add-lora='rank=2 alpha=4' | FileCheck %s

// A Gemm with transB reads a PyTorch Linear's [out, in] weight: A is
// [in, R], B [R, out], and Gemm's alpha scales the update too (alpha/R = 2
// here, times Gemm's 0.5). A shape-only weight (no value) gets an A without
// value (the exporter's seeded init) and a zero B.

// CHECK-DAG: graph.Variable @lin.weight.lora_A : tensor<4x2xf32>{{$}}
// CHECK-DAG: graph.Variable @lin.weight.lora_B : tensor<2x6xf32> = dense<0.000000e+00>
// CHECK-LABEL: func.func @transb
// CHECK: %[[G:.*]] = graph.Gemm
// CHECK: graph.MatMul %arg0, %{{.*}} : (tensor<3x4xf32>, tensor<4x2xf32>) -> tensor<3x2xf32>
// CHECK: graph.Constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[D:.*]] = graph.MatMul %{{.*}}, %{{.*}} : (tensor<3x2xf32>, tensor<2x6xf32>) -> tensor<3x6xf32>
// CHECK: %[[Y:.*]] = graph.Add %[[G]], %[[D]]
// CHECK: graph.Relu %[[Y]]
module {
  graph.Variable @lin.weight : tensor<6x4xf32>
  func.func @transb(%x: tensor<3x4xf32> {graph.name = "x"}) -> (tensor<3x6xf32> {graph.name = "y"}) {
    %w = graph.ReadVariable @lin.weight : tensor<6x4xf32>
    %g = graph.Gemm %x, %w {transB = 1 : i64, alpha = 0.5 : f32} : (tensor<3x4xf32>, tensor<6x4xf32>) -> tensor<3x6xf32>
    %r = graph.Relu %g : tensor<3x6xf32>
    %r2 = graph.Sigmoid %r : tensor<3x6xf32>
    return %r2 : tensor<3x6xf32>
  }
}
