//===- DistDialect.h - Strait distribution dialect --------------*- C++ -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTDIALECT_H
#define STRAIT_DIALECT_DIST_DISTDIALECT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Dialect.h"

#include "strait/Dialect/Dist/DistDialect.h.inc"

#endif // STRAIT_DIALECT_DIST_DISTDIALECT_H
