//===- GraphPasses.h - Passes on the graph dialect --------------*- C++ -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHPASSES_H
#define STRAIT_DIALECT_GRAPH_GRAPHPASSES_H

#include "strait/Dialect/Graph/GraphDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace strait::graph {

#define GEN_PASS_DECL
#include "strait/Dialect/Graph/GraphPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "strait/Dialect/Graph/GraphPasses.h.inc"

/// Re-infers the result shapes of the ops of `func` in program order and folds
/// what became constant; updates the function type. A result keeps its element
/// type when the inferred one differs (cast motion's bf16 LayerNormalization Y,
/// an f32 AccumulateGrad total of a bf16 gradient). Used by the importer and by
/// graph-infer-shapes.
mlir::LogicalResult refineFunction(mlir::func::FuncOp func, int64_t *numFolded = nullptr,
                                   int64_t *numRefined = nullptr);

} // namespace strait::graph

#endif // STRAIT_DIALECT_GRAPH_GRAPHPASSES_H
