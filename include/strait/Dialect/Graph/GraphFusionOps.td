//===- GraphFusionOps.td - Fused elementwise op ------------*- tablegen -*-===//
//
// graph.FusedElementwise: a group of elementwise ops evaluated in one pass
// over the elements, built by graph-fuse-elementwise (docs/graph-dialect.md,
// "Fused elementwise programs").
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHFUSIONOPS_TD
#define STRAIT_DIALECT_GRAPH_GRAPHFUSIONOPS_TD

include "strait/Dialect/Graph/GraphBase.td"

// Instruction set of a fused program. The names are the runtime's (the
// exporter writes them as strings; the runtime decodes them once per kernel).
def Graph_FusedOpcode : Graph_I32Enum<"FusedOpcode", "instruction of a fused elementwise program", [
  I32EnumAttrCase<"Const", 0>,
  I32EnumAttrCase<"Identity", 1>, I32EnumAttrCase<"Neg", 2>, I32EnumAttrCase<"Abs", 3>,
  I32EnumAttrCase<"Exp", 4>, I32EnumAttrCase<"Log", 5>, I32EnumAttrCase<"Sqrt", 6>,
  I32EnumAttrCase<"Reciprocal", 7>, I32EnumAttrCase<"Tanh", 8>, I32EnumAttrCase<"Sigmoid", 9>,
  I32EnumAttrCase<"Relu", 10>, I32EnumAttrCase<"Erf", 11>, I32EnumAttrCase<"Sin", 12>,
  I32EnumAttrCase<"Cos", 13>, I32EnumAttrCase<"Floor", 14>, I32EnumAttrCase<"Ceil", 15>,
  I32EnumAttrCase<"Not", 16>,
  I32EnumAttrCase<"Add", 17>, I32EnumAttrCase<"Sub", 18>, I32EnumAttrCase<"Mul", 19>,
  I32EnumAttrCase<"Div", 20>, I32EnumAttrCase<"Pow", 21>, I32EnumAttrCase<"Max", 22>,
  I32EnumAttrCase<"Min", 23>, I32EnumAttrCase<"Equal", 24>, I32EnumAttrCase<"Less", 25>,
  I32EnumAttrCase<"LessOrEqual", 26>, I32EnumAttrCase<"Greater", 27>,
  I32EnumAttrCase<"GreaterOrEqual", 28>, I32EnumAttrCase<"And", 29>, I32EnumAttrCase<"Or", 30>,
  I32EnumAttrCase<"Where", 31>, I32EnumAttrCase<"RoundBF16", 32>,
  I32EnumAttrCase<"RoundF16", 33>]>;
def Graph_FusedOpcodeAttr : Graph_EnumAttr<Graph_FusedOpcode, "fused_op">;
def Graph_FusedOpcodeArrayAttr
    : TypedArrayAttrBase<Graph_FusedOpcodeAttr, "array of fused elementwise opcodes">;

def Graph_FusedElementwiseOp : Graph_Op<"FusedElementwise", [Pure]> {
  let summary = "elementwise ops evaluated together in one pass over the elements";
  let description = [{
    A small SSA program over registers. Registers `0 .. N-1` hold the N
    inputs, each broadcast (numpy) to the iteration shape, the common static
    shape of every result. Instruction `i` (`ops[i]` with the three register
    operands `args[3i .. 3i+2]`, -1 where unused) writes register `N + i`;
    `Const` reads `constants[args[3i]]` instead of registers. Result `j` is
    register `outputs[j]`. Registers hold f32 values; a boolean register
    (an i1 input, a comparison, Not, And, Or) holds 0 or 1. Float inputs
    and results are f32, bf16 or f16: a 16-bit input loads exactly, a 16-bit
    result is its register rounded to nearest even (as graph.Cast);
    `RoundBF16`/`RoundF16` round a register inside the program. The
    constraints the verifier checks are numbered in docs/graph-dialect.md
    (F1-F6).

    ```mlir
    // y = 0.5 * x * (1 + tanh(x))
    %y = graph.FusedElementwise %x {
        ops = [#graph.fused_op<Const>, #graph.fused_op<Mul>, #graph.fused_op<Tanh>,
               #graph.fused_op<Const>, #graph.fused_op<Add>, #graph.fused_op<Mul>],
        args = array<i32: 0, -1, -1, 0, 1, -1, 0, -1, -1, 1, -1, -1, 3, 4, -1, 2, 5, -1>,
        constants = array<f32: 0.5, 1.0>, outputs = array<i32: 6>}
        : (tensor<2x8xf32>) -> tensor<2x8xf32>
    ```
  }];
  let arguments = (ins Variadic<AnyRankedTensor>:$inputs,
                   Graph_FusedOpcodeArrayAttr:$ops, DenseI32ArrayAttr:$args,
                   DenseF32ArrayAttr:$constants, DenseI32ArrayAttr:$outputs);
  let results = (outs Variadic<AnyRankedTensor>:$Y);
  let assemblyFormat = "$inputs attr-dict `:` functional-type($inputs, results)";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// Limits every backend supports (the CUDA kernel keeps the program in
    /// kernel parameters): inputs, outputs, instructions, constants, rank.
    static constexpr unsigned kMaxInputs = 16, kMaxOutputs = 8, kMaxInstructions = 64,
                              kMaxConstants = 64, kMaxRank = 8;
  }];
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHFUSIONOPS_TD
