//===- ShapeFunctions.h - Shape functions of graph ops ----------*- C++ -*-===//
//
// Free functions shared by the ops' type inference (and so their verifiers)
// and by the importer. Dimensions use ShapedType::kDynamic for unknown sizes;
// an unranked operand gives an unranked result.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_SHAPEFUNCTIONS_H
#define STRAIT_DIALECT_GRAPH_SHAPEFUNCTIONS_H

#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/Location.h"
#include "mlir/IR/OperationSupport.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/SmallVector.h"
#include <optional>

namespace strait::graph {

using Shape = llvm::SmallVector<int64_t, 6>;
using OptLoc = std::optional<mlir::Location>;

/// Multidirectional (numpy) broadcast of `shapes`; fails with a diagnostic at
/// `loc` naming the mismatching dimension.
mlir::FailureOr<Shape> broadcastShapes(OptLoc loc,
                                       llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);

/// Normalizes `axis` in [-rank, rank) to [0, rank); fails with a diagnostic.
mlir::FailureOr<int64_t> normalizeAxis(OptLoc loc, int64_t axis, int64_t rank,
                                       llvm::StringRef what = "axis");

/// The number of elements, or nullopt when a dimension is dynamic.
std::optional<int64_t> numElements(llvm::ArrayRef<int64_t> shape);

/// Output length of one pooled/convolved spatial dimension.
int64_t windowOutputSize(int64_t in, int64_t kernel, int64_t stride,
                         int64_t dilation, int64_t padBegin, int64_t padEnd,
                         bool ceilMode);

/// Result shape of ONNX Reshape given the input shape and the `shape` attr.
mlir::FailureOr<Shape> reshapeShape(OptLoc loc, llvm::ArrayRef<int64_t> in,
                                    llvm::ArrayRef<int64_t> target, bool allowZero);

/// Result shape of numpy matmul.
mlir::FailureOr<Shape> matmulShape(OptLoc loc, llvm::ArrayRef<int64_t> a,
                                   llvm::ArrayRef<int64_t> b);

/// Result shape of an Einsum equation over the operand shapes.
mlir::FailureOr<Shape> einsumShape(OptLoc loc, llvm::StringRef equation,
                                   llvm::ArrayRef<llvm::ArrayRef<int64_t>> shapes);

/// Normalized slice parameters of one axis: start, stop, step, and the length.
struct SliceDim {
  int64_t start, end, step, size;
};
/// ONNX Slice clamping rules for one dimension of extent `dim` (static).
SliceDim clampSlice(int64_t dim, int64_t start, int64_t end, int64_t step);

// Shared inference entry points named by Graph_InferVia in the .td files.
// Each takes the op's adaptor as a generic adaptor base.
template <typename Adaptor>
mlir::LogicalResult inferBroadcastSame(mlir::MLIRContext *, OptLoc loc,
                                       Adaptor adaptor,
                                       llvm::SmallVectorImpl<mlir::Type> &types);
template <typename Adaptor>
mlir::LogicalResult inferBroadcastBool(mlir::MLIRContext *, OptLoc loc,
                                       Adaptor adaptor,
                                       llvm::SmallVectorImpl<mlir::Type> &types);

/// Broadcast the operands' shapes; the element type is `elementType` or, when
/// null, the first operand's. With `checkSameElement`, all operands must share
/// an element type.
mlir::LogicalResult inferBroadcast(OptLoc loc, mlir::ValueRange operands,
                                   mlir::Type elementType,
                                   llvm::SmallVectorImpl<mlir::Type> &types,
                                   bool checkSameElement = true);

template <typename Adaptor>
mlir::LogicalResult inferBroadcastSame(mlir::MLIRContext *, OptLoc loc,
                                       Adaptor adaptor,
                                       llvm::SmallVectorImpl<mlir::Type> &types) {
  return inferBroadcast(loc, adaptor.getOperands(), nullptr, types);
}
template <typename Adaptor>
mlir::LogicalResult inferBroadcastBool(mlir::MLIRContext *ctx, OptLoc loc,
                                       Adaptor adaptor,
                                       llvm::SmallVectorImpl<mlir::Type> &types) {
  return inferBroadcast(loc, adaptor.getOperands(),
                        mlir::IntegerType::get(ctx, 1), types);
}
template <typename Adaptor>
mlir::LogicalResult inferVariadicBroadcast(mlir::MLIRContext *, OptLoc loc,
                                           Adaptor adaptor,
                                           llvm::SmallVectorImpl<mlir::Type> &types) {
  return inferBroadcast(loc, adaptor.getOperands(), nullptr, types);
}

/// The result has the first operand's type.
template <typename Adaptor>
mlir::LogicalResult inferSameAsFirst(mlir::MLIRContext *, OptLoc loc,
                                     Adaptor adaptor,
                                     llvm::SmallVectorImpl<mlir::Type> &types) {
  if (adaptor.getOperands().empty())
    return mlir::emitOptionalError(loc, "expected at least one operand");
  types.push_back(adaptor.getOperands().front().getType());
  return mlir::success();
}

mlir::LogicalResult inferReduceImpl(OptLoc loc, mlir::Type input,
                                    llvm::ArrayRef<int64_t> axes, bool keepDims,
                                    bool noopWithEmptyAxes,
                                    llvm::SmallVectorImpl<mlir::Type> &types);
template <typename Adaptor>
mlir::LogicalResult inferReduce(mlir::MLIRContext *, OptLoc loc, Adaptor adaptor,
                                llvm::SmallVectorImpl<mlir::Type> &types) {
  return inferReduceImpl(loc, adaptor.getData().getType(), adaptor.getAxes(),
                         adaptor.getKeepdims() != 0,
                         adaptor.getNoopWithEmptyAxes() != 0, types);
}

mlir::LogicalResult inferArgReduceImpl(OptLoc loc, mlir::Type input, int64_t axis,
                                       bool keepDims,
                                       llvm::SmallVectorImpl<mlir::Type> &types);
template <typename Adaptor>
mlir::LogicalResult inferArgReduce(mlir::MLIRContext *, OptLoc loc, Adaptor adaptor,
                                   llvm::SmallVectorImpl<mlir::Type> &types) {
  return inferArgReduceImpl(loc, adaptor.getData().getType(), adaptor.getAxis(),
                            adaptor.getKeepdims() != 0, types);
}

mlir::LogicalResult inferGlobalPoolImpl(OptLoc loc, mlir::Type input,
                                        llvm::SmallVectorImpl<mlir::Type> &types);
template <typename Adaptor>
mlir::LogicalResult inferGlobalPool(mlir::MLIRContext *, OptLoc loc, Adaptor adaptor,
                                    llvm::SmallVectorImpl<mlir::Type> &types) {
  return inferGlobalPoolImpl(loc, adaptor.getX().getType(), types);
}

template <typename Adaptor>
mlir::LogicalResult inferSoftmaxLike(mlir::MLIRContext *, OptLoc loc, Adaptor adaptor,
                                     llvm::SmallVectorImpl<mlir::Type> &types) {
  auto type = llvm::cast<mlir::TensorType>(adaptor.getInput().getType());
  if (type.hasRank() &&
      mlir::failed(normalizeAxis(loc, adaptor.getAxis(), type.getRank())))
    return mlir::failure();
  types.push_back(type);
  return mlir::success();
}

} // namespace strait::graph

#endif // STRAIT_DIALECT_GRAPH_SHAPEFUNCTIONS_H
