//===- GraphBase.td - Base classes of graph ops ------------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHBASE_TD
#define STRAIT_DIALECT_GRAPH_GRAPHBASE_TD

include "strait/Dialect/Graph/GraphDialect.td"
include "strait/Dialect/Graph/GraphAttrs.td"
include "mlir/IR/BuiltinAttributeInterfaces.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/Interfaces/InferTypeOpInterface.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Graph_Op<string mnemonic, list<Trait> traits = []>
    : Op<Graph_Dialect, mnemonic, traits>;

// Defines inferReturnTypes through a shared shape function in ShapeFunctions.h.
class Graph_InferVia<string fn> {
  code inferDef = [{
    ::llvm::LogicalResult $cppClass::inferReturnTypes(::mlir::MLIRContext *ctx,
        std::optional<::mlir::Location> loc, Adaptor adaptor,
        ::llvm::SmallVectorImpl<::mlir::Type> &types) {
      return ::strait::graph::}] # fn # [{(ctx, loc, adaptor, types);
    }
  }];
}

// Elementwise op whose result has the operand's type.
class Graph_UnaryOp<string mnemonic, string summaryText, list<Trait> traits = []>
    : Graph_Op<mnemonic, traits # [Pure, SameOperandsAndResultType,
                                   InferTypeOpInterface]> {
  let summary = summaryText;
  let description = [{
    Elementwise ONNX `}] # mnemonic # [{`; the result has the operand's type.

    ```mlir
    %y = graph.}] # mnemonic # [{ %x : tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$X);
  let results = (outs AnyTensor:$Y);
  let assemblyFormat = "$X attr-dict `:` type($X)";
}

// Elementwise op over operands broadcast numpy-style; the result element type
// is the first operand's (arithmetic) or i1 (comparison).
class Graph_BroadcastOp<string mnemonic, string summaryText, string fn,
                        list<Trait> traits = []>
    : Graph_Op<mnemonic, traits # [Pure, InferTypeOpAdaptor]> {
  let summary = summaryText;
  let description = [{
    Elementwise ONNX `}] # mnemonic # [{` with multidirectional (numpy)
    broadcasting of its operands.

    ```mlir
    %c = graph.}] # mnemonic # [{ %a, %b : (tensor<2x3xf32>, tensor<3xf32>) -> tensor<2x3xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$A, AnyTensor:$B);
  let results = (outs AnyTensor:$C);
  let assemblyFormat = "$A `,` $B attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = Graph_InferVia<fn>.inferDef;
}

// Reduction over `axes` (empty: all axes unless noop_with_empty_axes).
class Graph_ReduceOp<string mnemonic, string summaryText>
    : Graph_Op<mnemonic, [Pure, InferTypeOpAdaptor]> {
  let summary = summaryText;
  let description = [{
    ONNX `}] # mnemonic # [{`. The axes are an attribute (opset 13/18 pass them
    as an input; the importer folds it), non-negative and sorted.

    ```mlir
    %r = graph.}] # mnemonic # [{ %x {axes = array<i64: 1>, keepdims = 1} : (tensor<2x3xf32>) -> tensor<2x1xf32>
    ```
  }];
  let arguments = (ins AnyTensor:$data, DenseI64ArrayAttr:$axes,
                   DefaultValuedAttr<I64Attr, "1">:$keepdims,
                   DefaultValuedAttr<I64Attr, "0">:$noop_with_empty_axes);
  let results = (outs AnyTensor:$reduced);
  let assemblyFormat = "$data attr-dict `:` functional-type(operands, results)";
  let extraClassDefinition = Graph_InferVia<"inferReduce">.inferDef;
}

// Ops with several operands and attributes use this generic format.
class Graph_GenericOp<string mnemonic, list<Trait> traits = []>
    : Graph_Op<mnemonic, traits # [InferTypeOpAdaptor]> {
  let assemblyFormat = "operands attr-dict `:` functional-type(operands, results)";
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHBASE_TD
