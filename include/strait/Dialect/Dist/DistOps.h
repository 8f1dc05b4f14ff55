//===- DistOps.h - Distribution dialect ops ---------------------*- C++ -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTOPS_H
#define STRAIT_DIALECT_DIST_DISTOPS_H

#include "strait/Dialect/Dist/DistAttrs.h"
#include "strait/Dialect/Dist/DistDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "strait/Dialect/Dist/DistOps.h.inc"

#endif // STRAIT_DIALECT_DIST_DISTOPS_H
