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
