//===- ExpertOps.cpp - GroupedMatMul and its weight gradient --------------===//
//
// Shape inference and checks of the routed expert products. Constraints X1,
// X2: docs/graph-dialect.md, "Expert matmuls".
//
//===----------------------------------------------------------------------===//

#include "InferHelpers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::detail;

namespace {

constexpr int64_t kDyn = ShapedType::kDynamic;

bool isGemmFloat(Type t) { return t.isF32() || t.isBF16() || t.isF16(); }

/// The rows S of X [S, I] and idx [S] agree (unknown dims agree with
/// anything); both ranked and of the required ranks; idx integer.
LogicalResult checkRows(std::optional<Location> loc, StringRef op, TensorType x,
                        StringRef otherName, TensorType other, TensorType idx) {
  if (!isGemmFloat(x.getElementType()) || x.getElementType() != other.getElementType())
    return emitOptionalError(loc, op, ": X and ", otherName, " must be f32, bf16 or f16 of one type, got ",
                             x.getElementType(), " and ", other.getElementType());
  auto it = dyn_cast<IntegerType>(idx.getElementType());
  if (!it || (it.getWidth() != 32 && it.getWidth() != 64))
    return emitOptionalError(loc, op, ": indices must be i32 or i64, got ", idx.getElementType());
  if (!x.hasRank() || !idx.hasRank())
    return success();
  if (x.getRank() != 2 || idx.getRank() != 1)
    return emitOptionalError(loc, op, ": X must be [S, I] and indices [S], got ", x, " and ", idx);
  int64_t s = x.getDimSize(0), si = idx.getDimSize(0);
  if (s != kDyn && si != kDyn && s != si)
    return emitOptionalError(loc, op, ": X ", x, " and indices ", idx, " have different row counts");
  return success();
}

bool differ(int64_t a, int64_t b) { return a != kDyn && b != kDyn && a != b; }

} // namespace

/// (X1) X [S, I], W [E, O, I] (transB 1) or [E, I, O] (transB 0), idx [S]
/// i32/i64; X and W one float type; Y [S, O] of that type.
STRAIT_INFER(GroupedMatMulOp) {
  TensorType x = tensorOf(adaptor.getX()), w = tensorOf(adaptor.getW());
  TensorType idx = tensorOf(adaptor.getIndices());
  if (failed(checkRows(loc, "GroupedMatMul (X1)", x, "W", w, idx)))
    return failure();
  bool transB = adaptor.getTransB() != 0;
  if (!x.hasRank() || !w.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  if (w.getRank() != 3)
    return emitOptionalError(loc, "GroupedMatMul (X1): W must be [E, O, I] or [E, I, O], got ", w);
  int64_t i = w.getDimSize(transB ? 2 : 1), o = w.getDimSize(transB ? 1 : 2);
  if (differ(x.getDimSize(1), i))
    return emitOptionalError(loc, "GroupedMatMul (X1): X ", x, " and W ", w, " (transB = ",
                             transB ? 1 : 0, ") have different inner dimensions");
  return pushTensor(types, ArrayRef<int64_t>{x.getDimSize(0), o}, x.getElementType());
}

/// (X2) X [S, I], dY [S, O], idx [S]; dW [E, O, I] (transB 1) or [E, I, O].
STRAIT_INFER(GroupedMatMulGradWeightOp) {
  TensorType x = tensorOf(adaptor.getX()), dy = tensorOf(adaptor.getDY());
  TensorType idx = tensorOf(adaptor.getIndices());
  if (failed(checkRows(loc, "GroupedMatMulGradWeight (X2)", x, "dY", dy, idx)))
    return failure();
  if (!x.hasRank() || !dy.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  if (dy.getRank() != 2 || differ(dy.getDimSize(0), x.getDimSize(0)))
    return emitOptionalError(loc, "GroupedMatMulGradWeight (X2): dY must be [S, O] with X's S, got ",
                             dy, " for X ", x);
  int64_t e = static_cast<int64_t>(adaptor.getNumExperts());
  int64_t i = x.getDimSize(1), o = dy.getDimSize(1);
  SmallVector<int64_t> shape = adaptor.getTransB() != 0 ? SmallVector<int64_t>{e, o, i}
                                                        : SmallVector<int64_t>{e, i, o};
  return pushTensor(types, ArrayRef<int64_t>(shape), x.getElementType());
}
