//===- DistAttrs.h - Distribution dialect attributes ------------*- C++ -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTATTRS_H
#define STRAIT_DIALECT_DIST_DISTATTRS_H

#include "mlir/IR/Attributes.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/DialectImplementation.h"

#include "strait/Dialect/Dist/DistEnums.h.inc"

#define GET_ATTRDEF_CLASSES
#include "strait/Dialect/Dist/DistAttrs.h.inc"

namespace strait::dist {

/// The stage of `op` (its `dist.stage` attribute), if any.
std::optional<int64_t> getStage(mlir::Operation *op);
/// Sets the `dist.stage` attribute of `op`.
void setStage(mlir::Operation *op, int64_t stage);
/// The module's plan (its `dist.plan` attribute), or null.
PlanAttr getPlan(mlir::Operation *module);

} // namespace strait::dist

#endif // STRAIT_DIALECT_DIST_DISTATTRS_H
