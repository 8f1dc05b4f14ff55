// RUN: strait-opt %s -split-input-file --dist-assign-stages='boundaries=1' -verify-diagnostics

// The pass plans @main; a module without it is an error.
// expected-error@+1 {{dist-assign-stages needs a function @main with a body}}
module {
  func.func @other(%x: tensor<2xf32>) -> tensor<2xf32> {
    return %x : tensor<2xf32>
  }
}

// -----

// A backward op must name an existing forward op.
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %a = graph.Relu %x {graph.op_id = 0 : i64} : tensor<2xf32>
  // expected-error@+1 {{graph.grad_of = 7 names no op with that graph.op_id}}
  %b = graph.Relu %a {graph.grad_of = 7 : i64} : tensor<2xf32>
  return %b : tensor<2xf32>
}
