// RUN: strait-opt %s -split-input-file --graph-infer-shapes='input-shapes=x=8x128' | FileCheck %s
// RUN: not strait-opt %s -split-input-file --graph-infer-shapes='input-shapes=y=8' 2>&1 | FileCheck %s --check-prefix=NONAME

// The exporter's Shape -> Gather -> Concat -> Reshape chain folds once the
// input shape is fixed, and the function type follows.

// CHECK-LABEL: func @shape_chain
// CHECK-SAME: (%{{.*}}: tensor<8x128xf32> {graph.name = "x"}) -> tensor<1024xf32>
// CHECK-NOT: graph.Shape
// CHECK-NOT: graph.Gather
// CHECK-NOT: graph.Concat
// CHECK: graph.Reshape %{{.*}} {shape = array<i64: -1>} : (tensor<8x128xf32>) -> tensor<1024xf32>
// NONAME: no input named 'y'
func.func @shape_chain(%x: tensor<?x?xf32> {graph.name = "x"}) -> tensor<?xf32> {
  %s = graph.Shape %x : (tensor<?x?xf32>) -> tensor<2xi64>
  %i0 = graph.Constant dense<0> : tensor<1xi64>
  %i1 = graph.Constant dense<1> : tensor<1xi64>
  %d0 = graph.Gather %s, %i0 {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>) -> tensor<1xi64>
  %d1 = graph.Gather %s, %i1 {axis = 0 : i64} : (tensor<2xi64>, tensor<1xi64>) -> tensor<1xi64>
  %n = graph.Mul %d0, %d1 : (tensor<1xi64>, tensor<1xi64>) -> tensor<1xi64>
  %flat = graph.Reshape %x {shape = array<i64: -1>} : (tensor<?x?xf32>) -> tensor<?xf32>
  return %flat : tensor<?xf32>
}

// -----

// Integer arithmetic, comparison and Where fold; Cast folds constants.

// CHECK-LABEL: func @fold_arith
// CHECK-NOT: graph.Mul
// CHECK: %[[C:.*]] = graph.Constant dense<0> : tensor<2xi64>
// CHECK-NEXT: return %[[C]]
func.func @fold_arith(%x: tensor<?x?xf32> {graph.name = "x"}) -> tensor<2xi64> {
  %a = graph.Constant dense<[2, 3]> : tensor<2xi64>
  %b = graph.Constant dense<3> : tensor<i64>
  %p = graph.Mul %a, %b : (tensor<2xi64>, tensor<i64>) -> tensor<2xi64>
  %q = graph.Div %p, %a : (tensor<2xi64>, tensor<2xi64>) -> tensor<2xi64>
  %c = graph.Equal %q, %b : (tensor<2xi64>, tensor<i64>) -> tensor<2xi1>
  %z = graph.Constant dense<0> : tensor<i64>
  %w = graph.Where %c, %z, %p : (tensor<2xi1>, tensor<i64>, tensor<2xi64>) -> tensor<2xi64>
  %f = graph.Cast %w {to = f32} : (tensor<2xi64>) -> tensor<2xf32>
  %back = graph.Cast %f {to = i64} : (tensor<2xf32>) -> tensor<2xi64>
  return %back : tensor<2xi64>
}

// -----

// Refinement changes shapes, never element types: a bf16 Y that
// graph-cast-motion gave LayerNormalization (its inference says f32, X's type)
// stays bf16 while its dynamic batch dimension becomes static, and its bf16
// reader and the function's result type follow.

// CHECK-LABEL: func @keeps_chosen_element_type
// CHECK-SAME: -> tensor<8x128xbf16>
// CHECK: %[[Y:.*]] = graph.LayerNormalization %{{.*}} : (tensor<8x128xf32>, tensor<128xf32>, tensor<128xf32>) -> tensor<8x128xbf16>
// CHECK: %[[R:.*]] = graph.Relu %[[Y]] : tensor<8x128xbf16>
// CHECK: return %[[R]] : tensor<8x128xbf16>
func.func @keeps_chosen_element_type(%x: tensor<?x128xf32> {graph.name = "x"}, %s: tensor<128xf32>,
                                     %b: tensor<128xf32>) -> tensor<?x128xbf16> {
  %y = graph.LayerNormalization %x, %s, %b : (tensor<?x128xf32>, tensor<128xf32>, tensor<128xf32>) -> tensor<?x128xbf16>
  %r = graph.Relu %y : tensor<?x128xbf16>
  return %r : tensor<?x128xbf16>
}
