//===- GraphPasses.td - Passes on the graph dialect --------*- tablegen -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHPASSES_TD
#define STRAIT_DIALECT_GRAPH_GRAPHPASSES_TD

include "mlir/Pass/PassBase.td"

def GraphInferShapes : Pass<"graph-infer-shapes", "::mlir::ModuleOp"> {
  let summary = "Refine tensor types from the inputs and fold shape arithmetic";
  let description = [{
    Optionally sets the shapes of function arguments (`input-shapes`), then
    re-infers every op's result types in program order and folds ops whose
    operands became constant (Shape/Gather/Concat chains), as the importer
    does. Function result types follow.

    ```
    strait-opt --graph-infer-shapes='input-shapes=input_ids=8x128' model.mlir
    ```
  }];
  let options = [
    ListOption<"inputShapes", "input-shapes", "std::string",
               "NAME=DxDx... for arguments named by graph.name (or arg<N>)">
  ];
  let statistics = [
    Statistic<"numFolded", "num-folded", "Ops folded to constants">,
    Statistic<"numRefined", "num-refined", "Result types changed">
  ];
  let dependentDialects = ["::strait::graph::GraphDialect"];
}

#endif // STRAIT_DIALECT_GRAPH_GRAPHPASSES_TD
