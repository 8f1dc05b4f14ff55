//===- GraphDialect.h - Strait graph dialect --------------------*- C++ -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHDIALECT_H
#define STRAIT_DIALECT_GRAPH_GRAPHDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "strait/Dialect/Graph/GraphDialect.h.inc"

#endif // STRAIT_DIALECT_GRAPH_GRAPHDIALECT_H
