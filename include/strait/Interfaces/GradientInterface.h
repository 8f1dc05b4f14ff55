//===- GradientInterface.h - Reverse-mode gradient rules --------*- C++ -*-===//

#ifndef STRAIT_INTERFACES_GRADIENTINTERFACE_H
#define STRAIT_INTERFACES_GRADIENTINTERFACE_H

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/DialectRegistry.h"
#include "mlir/IR/OpDefinition.h"

namespace strait {
namespace detail {
/// True for a tensor whose element type is a float type.
bool isFloatTensor(mlir::Type type);
} // namespace detail

/// Attaches the gradient rules of the graph dialect's ops (defined in
/// lib/Dialect/Graph/Transforms/Gradients*.cpp).
void registerGraphGradientModels(mlir::DialectRegistry &registry);

} // namespace strait

#include "strait/Interfaces/GradientInterface.h.inc"

#endif // STRAIT_INTERFACES_GRADIENTINTERFACE_H
