//===- InferHelpers.h - Private helpers of the ops' inference ---*- C++ -*-===//

#ifndef STRAIT_LIB_DIALECT_GRAPH_IR_INFERHELPERS_H
#define STRAIT_LIB_DIALECT_GRAPH_IR_INFERHELPERS_H

#include "strait/Dialect/Graph/GraphOps.h"

namespace strait::graph::detail {

/// Defines `Op::inferReturnTypes(ctx, loc, adaptor, types)`.
#define STRAIT_INFER(OpName)                                                   \
  ::llvm::LogicalResult OpName::inferReturnTypes(                              \
      ::mlir::MLIRContext *ctx, std::optional<::mlir::Location> loc,           \
      Adaptor adaptor, ::llvm::SmallVectorImpl<::mlir::Type> &types)

inline mlir::TensorType tensorOf(mlir::Value v) {
  return llvm::cast<mlir::TensorType>(v.getType());
}

/// Pushes a ranked result, or an unranked one when `shape` is nullopt.
inline mlir::LogicalResult pushTensor(llvm::SmallVectorImpl<mlir::Type> &types,
                                      std::optional<llvm::ArrayRef<int64_t>> shape,
                                      mlir::Type elt) {
  if (shape)
    types.push_back(mlir::RankedTensorType::get(*shape, elt));
  else
    types.push_back(mlir::UnrankedTensorType::get(elt));
  return mlir::success();
}

/// Loss over scores N x C x D... and labels N x D... (SoftmaxCrossEntropyLoss,
/// NegativeLogLikelihoodLoss, the loss of SoftmaxCrossEntropyLossWithGrad):
/// of the scores' type, or f32 for 16-bit float scores when `f32For16Bit`;
/// a scalar unless `reduction` is none (then the labels' shape).
mlir::LogicalResult inferLoss(std::optional<mlir::Location> loc, llvm::StringRef op,
                              mlir::Value scores, mlir::Value labels, LossReduction reduction,
                              llvm::SmallVectorImpl<mlir::Type> &types, bool f32For16Bit = false);

} // namespace strait::graph::detail

#endif // STRAIT_LIB_DIALECT_GRAPH_IR_INFERHELPERS_H
