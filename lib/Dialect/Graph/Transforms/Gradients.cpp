//===- Gradients.cpp - Shared gradient helpers and registration -----------===//

#include "GradientUtils.h"

#include "mlir/IR/BuiltinAttributes.h"

using namespace mlir;
using namespace strait;
using namespace strait::graph;
using namespace strait::graph::grad;

ArrayRef<int64_t> grad::shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}

static Attribute floatOrIntAttr(Type elt, double v) {
  if (auto f = dyn_cast<FloatType>(elt))
    return FloatAttr::get(f, v);
  return IntegerAttr::get(elt, static_cast<int64_t>(v));
}

Value GradBuilder::scalar(double v, Value like) {
  Type elt = cast<TensorType>(like.getType()).getElementType();
  auto type = RankedTensorType::get({}, elt);
  return make<ConstantOp>(
      cast<ElementsAttr>(DenseElementsAttr::get(type, floatOrIntAttr(elt, v))));
}

Value GradBuilder::zeros(Type type) {
  auto t = cast<RankedTensorType>(type);
  return make<ConstantOp>(cast<ElementsAttr>(
      DenseElementsAttr::get(t, floatOrIntAttr(t.getElementType(), 0.0))));
}

// Arithmetic on constants folds as it is built: a rule's constant
// subexpression (Pow's exponent - 1) becomes a constant, which
// graph-fuse-elementwise inlines (a Pow by 2 or 3 is then products) instead
// of a kernel per step feeding a runtime exponent.
Value GradBuilder::add(Value a, Value c) { return b.createOrFold<AddOp>(loc, a, c); }
Value GradBuilder::sub(Value a, Value c) { return b.createOrFold<SubOp>(loc, a, c); }
Value GradBuilder::mul(Value a, Value c) { return b.createOrFold<MulOp>(loc, a, c); }
Value GradBuilder::div(Value a, Value c) { return b.createOrFold<DivOp>(loc, a, c); }
Value GradBuilder::neg(Value a) { return b.createOrFold<NegOp>(loc, a); }

Value GradBuilder::reduceTo(Value grad, Value target) {
  if (grad.getType() == target.getType())
    return grad;
  return make<ReduceToShapeOp>(grad, shapeOf(target));
}

Value GradBuilder::reshapeTo(Value grad, Value target) {
  if (grad.getType() == target.getType())
    return grad;
  return make<ReshapeOp>(grad, shapeOf(target), /*allowzero=*/1);
}

Value GradBuilder::transposeLast2(Value a) {
  int64_t rank = shapeOf(a).size();
  SmallVector<int64_t> perm = llvm::to_vector(llvm::seq<int64_t>(0, rank));
  std::swap(perm[rank - 1], perm[rank - 2]);
  return make<TransposeOp>(a, perm);
}

void strait::registerGraphGradientModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, GraphDialect *) {
    registerAttentionGradients(ctx);
    registerElementwiseGradients(ctx);
    registerLinalgGradients(ctx);
    registerNormalizationGradients(ctx);
    registerReductionGradients(ctx);
    registerConvGradients(ctx);
    registerTensorGradients(ctx);
  });
}
