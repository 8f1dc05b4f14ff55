//===- GraphDialect.td - Strait graph dialect ---------------*- tablegen -*-===//
//
// The graph dialect holds the imported computation: one op per ONNX operator,
// with static configuration (axes, shapes, pads, ...) as typed attributes that
// the importer resolves from constant inputs.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHDIALECT_TD
#define STRAIT_DIALECT_GRAPH_GRAPHDIALECT_TD

include "mlir/IR/OpBase.td"

def Graph_Dialect : Dialect {
  let name = "graph";
  let cppNamespace = "::strait::graph";
  let summary = "The computation of a model: one op per ONNX operator";
  let description = [{
    Ops carry the ONNX operator's name (`graph.MatMul`, `graph.LayerNormalization`)
    and its attribute names. Operands that ONNX passes as tensors but that are
    static configuration (Reshape's shape, Slice's starts, Reduce axes, ...) are
    attributes here: the importer folds them to constants. Result types are
    inferred from operands and attributes (the shape functions are shared by the
    verifiers and the importer; see docs/graph-dialect.md).

    Weights are module-level `graph.Variable` symbols read by
    `graph.ReadVariable`; the training-step builder adds `graph.AssignVariable`.
  }];
  let hasConstantMaterializer = 1;
  let usePropertiesForAttributes = 0;
  let useDefaultAttributePrinterParser = 1;
  let dependentDialects = ["::mlir::func::FuncDialect"];
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHDIALECT_TD
