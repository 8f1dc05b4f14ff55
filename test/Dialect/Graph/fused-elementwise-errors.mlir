// RUN: strait-opt %s -split-input-file -verify-diagnostics
// graph.FusedElementwise verifier: constraints F1-F6 of docs/graph-dialect.md.

// A well-formed program (two results, a boolean input) round-trips.
func.func @ok(%x: tensor<2x3xf32>, %m: tensor<3xi1>) -> (tensor<2x3xf32>, tensor<2x3xi1>) {
  %y:2 = graph.FusedElementwise %x, %m {ops = [#graph.fused_op<Const>, #graph.fused_op<Less>, #graph.fused_op<And>, #graph.fused_op<Where>], args = array<i32: 0, -1, -1, 0, 2, -1, 3, 1, -1, 4, 0, 2>, constants = array<f32: 0.5>, outputs = array<i32: 5, 4>} : (tensor<2x3xf32>, tensor<3xi1>) -> (tensor<2x3xf32>, tensor<2x3xi1>)
  return %y#0, %y#1 : tensor<2x3xf32>, tensor<2x3xi1>
}

// -----

// F1: three operands per instruction.
func.func @args_size(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{args has 2 entries; expected 3 per instruction (3)}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Neg>], args = array<i32: 0, -1>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F2: results share one static shape.
func.func @result_shapes(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<1x4xf32>) {
  // expected-error @+1 {{results have different shapes}}
  %y:2 = graph.FusedElementwise %x {ops = [#graph.fused_op<Neg>], args = array<i32: 0, -1, -1>, constants = array<f32>, outputs = array<i32: 1, 1>} : (tensor<4xf32>) -> (tensor<4xf32>, tensor<1x4xf32>)
  return %y#0, %y#1 : tensor<4xf32>, tensor<1x4xf32>
}

// -----

// F3: inputs broadcast to the iteration shape.
func.func @no_broadcast(%x: tensor<3xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{input 0 of type 'tensor<3xf32>' does not broadcast to 4}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Neg>], args = array<i32: 0, -1, -1>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<3xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F3: inputs are f32, bf16, f16 or i1.
func.func @int_input(%x: tensor<4xi64>) -> tensor<4xf32> {
  // expected-error @+1 {{input 0 must be a static f32, bf16, f16 or i1 tensor}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Identity>], args = array<i32: 0, -1, -1>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<4xi64>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F6: a float register is not stored as f64.
func.func @f64_result(%x: tensor<4xbf16>) -> tensor<4xf64> {
  // expected-error @+1 {{result 0 has element type 'f64' but register 1 holds a float (f32, bf16, f16)}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<RoundF16>], args = array<i32: 0, -1, -1>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<4xbf16>) -> tensor<4xf64>
  return %y : tensor<4xf64>
}

// -----

// F4: registers are read after they are written.
func.func @later_register(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0 (Add) reads register 1 before it is written}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Add>], args = array<i32: 0, 1, -1>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F4: Const reads a constant that exists.
func.func @const_index(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0 (Const) reads constant 1 of 1}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Const>], args = array<i32: 1, -1, -1>, constants = array<f32: 2.0>, outputs = array<i32: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F4: unused operands are -1.
func.func @unused_operand(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0 (Neg) has operand 1 = 0; unused operands are -1}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Neg>], args = array<i32: 0, 0, -1>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F4: Where's condition is a boolean register.
func.func @where_condition(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{instruction 0 (Where) operand 0 reads a float register}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Where>], args = array<i32: 0, 0, 0>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F5: outputs name registers.
func.func @output_register(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{output 0 names register 5 of 2}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Neg>], args = array<i32: 0, -1, -1>, constants = array<f32>, outputs = array<i32: 5>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F6: a boolean register is an i1 result.
func.func @bool_result(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{result 0 has element type 'f32' but register 1 holds a boolean (i1)}}
  %y = graph.FusedElementwise %x {ops = [#graph.fused_op<Less>], args = array<i32: 0, 0, -1>, constants = array<f32>, outputs = array<i32: 1>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}

// -----

// F1: at least one instruction.
func.func @empty(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{needs 1 to 64 instructions, has 0}}
  %y = graph.FusedElementwise %x {ops = [], args = array<i32>, constants = array<f32>, outputs = array<i32: 0>} : (tensor<4xf32>) -> tensor<4xf32>
  return %y : tensor<4xf32>
}
