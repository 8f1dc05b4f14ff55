//===- GraphElementwiseOps.cpp - Inference of elementwise ops -------------===//

#include "InferHelpers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::detail;

static LogicalResult sameShapeAs(Value v, Type elt, SmallVectorImpl<Type> &types) {
  TensorType t = tensorOf(v);
  return pushTensor(types, t.hasRank() ? std::optional(t.getShape()) : std::nullopt,
                    elt);
}

STRAIT_INFER(IsNaNOp) {
  return sameShapeAs(adaptor.getX(), IntegerType::get(ctx, 1), types);
}

STRAIT_INFER(IsInfOp) {
  return sameShapeAs(adaptor.getX(), IntegerType::get(ctx, 1), types);
}

STRAIT_INFER(CastOp) {
  Type to = adaptor.getTo();
  if (!to.isIntOrFloat())
    return emitOptionalError(loc, "Cast: target ", to, " is not a scalar type");
  return sameShapeAs(adaptor.getInput(), to, types);
}

STRAIT_INFER(WhereOp) {
  auto x = tensorOf(adaptor.getX()), y = tensorOf(adaptor.getY());
  if (x.getElementType() != y.getElementType())
    return emitOptionalError(loc, "Where: X and Y element types differ (",
                             x.getElementType(), " vs ", y.getElementType(), ")");
  return inferBroadcast(loc, adaptor.getOperands(), x.getElementType(), types,
                        /*checkSameElement=*/false);
}

/// Per-tensor scale (scalar or 1 element) or per-axis (1-D along `axis`).
static LogicalResult checkQuantParams(OptLoc loc, StringRef op, TensorType x,
                                      Value scale, Value zeroPoint, int64_t axis) {
  TensorType s = tensorOf(scale);
  if (zeroPoint) {
    TensorType z = tensorOf(zeroPoint);
    if (s.hasRank() && z.hasRank() && s.getShape() != z.getShape())
      return emitOptionalError(loc, op, ": scale ", s, " and zero point ", z,
                               " differ in shape");
  }
  if (!s.hasRank() || !x.hasRank() || s.getRank() == 0 ||
      (s.getRank() == 1 && s.getDimSize(0) == 1))
    return success();
  FailureOr<int64_t> a = normalizeAxis(loc, axis, x.getRank());
  if (failed(a))
    return failure();
  if (s.getRank() == 1 && (s.isDynamicDim(0) || x.isDynamicDim(*a) ||
                           s.getDimSize(0) == x.getDimSize(*a)))
    return success();
  if (s.getRank() == x.getRank())
    return success(); // blocked quantization (opset 21)
  return emitOptionalError(loc, op, ": scale ", s, " does not match axis ", *a,
                           " of ", x);
}

STRAIT_INFER(QuantizeLinearOp) {
  TensorType x = tensorOf(adaptor.getX());
  Type to = adaptor.getTo();
  if (!isa<IntegerType>(to))
    return emitOptionalError(loc, "QuantizeLinear: target ", to, " is not an integer type");
  if (Value z = adaptor.getYZeroPoint(); z && tensorOf(z).getElementType() != to)
    return emitOptionalError(loc, "QuantizeLinear: zero point type ",
                             tensorOf(z).getElementType(), " differs from target ", to);
  if (failed(checkQuantParams(loc, "QuantizeLinear", x, adaptor.getYScale(),
                              adaptor.getYZeroPoint(), adaptor.getAxis())))
    return failure();
  return sameShapeAs(adaptor.getX(), to, types);
}

STRAIT_INFER(DequantizeLinearOp) {
  TensorType x = tensorOf(adaptor.getX());
  Type elt = tensorOf(adaptor.getXScale()).getElementType();
  if (!isa<FloatType>(elt))
    return emitOptionalError(loc, "DequantizeLinear: scale must be a float, got ", elt);
  if (failed(checkQuantParams(loc, "DequantizeLinear", x, adaptor.getXScale(),
                              adaptor.getXZeroPoint(), adaptor.getAxis())))
    return failure();
  return sameShapeAs(adaptor.getX(), elt, types);
}

/// Random ops: the input's shape with element type `dtype` (a float).
static LogicalResult inferRandom(OptLoc loc, StringRef op, Value input, Type dtype,
                                 SmallVectorImpl<Type> &types) {
  if (!isa<FloatType>(dtype))
    return emitOptionalError(loc, op, ": dtype ", dtype, " is not a float type");
  return sameShapeAs(input, dtype, types);
}

STRAIT_INFER(RandomUniformLikeOp) {
  return inferRandom(loc, "RandomUniformLike", adaptor.getInput(), adaptor.getDtype(), types);
}

STRAIT_INFER(RandomNormalLikeOp) {
  return inferRandom(loc, "RandomNormalLike", adaptor.getInput(), adaptor.getDtype(), types);
}

STRAIT_INFER(BernoulliOp) {
  Type dtype = adaptor.getDtype();
  if (!dtype.isIntOrFloat())
    return emitOptionalError(loc, "Bernoulli: dtype ", dtype, " is not a scalar type");
  return sameShapeAs(adaptor.getInput(), dtype, types);
}
