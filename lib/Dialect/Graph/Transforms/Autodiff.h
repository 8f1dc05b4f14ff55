//===- Autodiff.h - Reverse-mode differentiation of a function --*- C++ -*-===//

#ifndef STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_AUTODIFF_H
#define STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_AUTODIFF_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

namespace strait::graph {

/// Discardable attributes linking backward ops to forward ops
/// (docs/training.md, "Co-location").
inline constexpr llvm::StringLiteral kOpIdAttr = "graph.op_id";
inline constexpr llvm::StringLiteral kGradOfAttr = "graph.grad_of";

struct GradientResult {
  /// Gradient of the loss with respect to each `wrt` value that reaches it.
  llvm::DenseMap<mlir::Value, mlir::Value> grads;
  int64_t numBackwardOps = 0;
};

/// Differentiates scalar `loss` with respect to `wrt` in the single block of
/// `func` by reverse-mode sweep over the ops between them. Backward ops are
/// appended before the terminator and tagged with `graph.grad_of`. Fails with
/// a diagnostic at an op without a gradient rule (naming the variable it
/// depends on) or with dynamic shapes. With `seedScale` (an f32 scalar:
/// dynamic loss scaling's S) the sweep is seeded with 1 * S instead of 1.
mlir::FailureOr<GradientResult> differentiate(mlir::func::FuncOp func,
                                              mlir::Value loss,
                                              llvm::ArrayRef<mlir::Value> wrt,
                                              mlir::Value seedScale = {});

} // namespace strait::graph

#endif // STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_AUTODIFF_H
