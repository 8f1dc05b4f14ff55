//===- CostOpInterface.h - Workload estimator interface ---------*- C++ -*-===//

#ifndef STRAIT_INTERFACES_COSTOPINTERFACE_H
#define STRAIT_INTERFACES_COSTOPINTERFACE_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"

namespace strait {

/// Classes of kernels that devices run at different fractions of peak.
enum class KernelClass { MatMul, Conv, Elementwise, Reduction, Normalization, DataMovement };

namespace detail {
/// Elements of all (static) tensor types in `types`.
double elementsOf(mlir::TypeRange types);
/// Bytes of all (static) tensor types in `types`.
double bytesOf(mlir::TypeRange types);
} // namespace detail

/// Attaches the cost models of the graph dialect's ops.
void registerGraphCostModels(mlir::DialectRegistry &registry);

} // namespace strait

#include "strait/Interfaces/CostOpInterface.h.inc"

#endif // STRAIT_INTERFACES_COSTOPINTERFACE_H
