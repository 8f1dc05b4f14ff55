//===- FusionUtils.h - Helpers of the pattern-fusion passes -----*- C++ -*-===//
//
// Shared by graph-fuse-rmsnorm and graph-fuse-attention: reading a splat
// constant operand, and erasing a matched chain together with the constants
// only it used.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_FUSIONUTILS_H
#define STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_FUSIONUTILS_H

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <optional>

namespace strait::graph::fusion {

/// The value of a splat floating-point constant of any shape and float type.
inline std::optional<double> splatValue(mlir::Value v) {
  mlir::DenseElementsAttr attr;
  if (!v || !mlir::matchPattern(v, mlir::m_Constant(&attr)) || !attr.isSplat() ||
      !llvm::isa<mlir::FloatType>(attr.getElementType()))
    return std::nullopt;
  return attr.getSplatValue<llvm::APFloat>().convertToDouble();
}

/// Erases `chain` (ops in program order whose results have no users left
/// outside it), last op first, then the ConstantOps among their operands
/// that no other op uses; `beforeErase` sees each such constant first.
inline void eraseChain(llvm::ArrayRef<mlir::Operation *> chain,
                       llvm::function_ref<void(mlir::Operation *)> beforeErase = nullptr) {
  llvm::SmallVector<mlir::Operation *> constants;
  for (mlir::Operation *op : chain)
    for (mlir::Value v : op->getOperands())
      if (auto c = v.getDefiningOp<ConstantOp>(); c && !llvm::is_contained(constants, c))
        constants.push_back(c);
  for (mlir::Operation *op : llvm::reverse(chain))
    op->erase();
  for (mlir::Operation *c : constants)
    if (c->use_empty()) {
      if (beforeErase)
        beforeErase(c);
      c->erase();
    }
}

} // namespace strait::graph::fusion

#endif // STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_FUSIONUTILS_H
