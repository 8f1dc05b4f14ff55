// loss=output: the step returns the output that is the loss, under its name.
// RUN: strait-opt %s --graph-build-training-step='loss=output output=total optimizer=sgd' | FileCheck %s --check-prefix=OUT
// OUT-LABEL: func.func @main
// OUT-SAME: -> (tensor<f32> {graph.name = "total"})
// OUT-NOT: graph.Neg
// OUT: %[[S:.*]] = graph.ReduceSum
// OUT: return %[[S]] : tensor<f32>
module {
  graph.Variable @v : tensor<3xf32> = dense<1.0> : tensor<3xf32>
  func.func @main() -> (tensor<3xf32> {graph.name = "neg"}, tensor<f32> {graph.name = "total"}) {
    %v = graph.ReadVariable @v : tensor<3xf32>
    %n = graph.Neg %v : tensor<3xf32>
    %s = graph.ReduceSum %v {axes = array<i64: 0>, keepdims = 0 : i64} : (tensor<3xf32>) -> tensor<f32>
    return %n, %s : tensor<3xf32>, tensor<f32>
  }
}
