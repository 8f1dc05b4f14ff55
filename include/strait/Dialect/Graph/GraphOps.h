//===- GraphOps.h - Strait graph dialect ops --------------------*- C++ -*-===//

#ifndef STRAIT_DIALECT_GRAPH_GRAPHOPS_H
#define STRAIT_DIALECT_GRAPH_GRAPHOPS_H

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/IR/SymbolTable.h"
#include "mlir/Interfaces/InferTypeOpInterface.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#include "strait/Dialect/Graph/GraphDialect.h"
#include "strait/Dialect/Graph/GraphEnums.h.inc"
#define GET_ATTRDEF_CLASSES
#include "strait/Dialect/Graph/GraphAttrs.h.inc"
#include "strait/Dialect/Graph/ShapeFunctions.h"

#define GET_OP_CLASSES
#include "strait/Dialect/Graph/GraphOps.h.inc"

#endif // STRAIT_DIALECT_GRAPH_GRAPHOPS_H
