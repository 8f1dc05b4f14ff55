//===- DistPasses.h - Passes of the distribution dialect --------*- C++ -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTPASSES_H
#define STRAIT_DIALECT_DIST_DISTPASSES_H

#include "strait/Dialect/Dist/DistDialect.h"
#include "strait/Dialect/Graph/GraphDialect.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/Pass.h"

namespace strait::dist {

#define GEN_PASS_DECL
#include "strait/Dialect/Dist/DistPasses.h.inc"

#define GEN_PASS_REGISTRATION
#include "strait/Dialect/Dist/DistPasses.h.inc"

} // namespace strait::dist

#endif // STRAIT_DIALECT_DIST_DISTPASSES_H
