//===- TrainingOptimizerOps.cpp - Clipping, optimizers, assignment --------===//
//
// Constraint numbers (T1, ...) refer to docs/training.md.
//
//===----------------------------------------------------------------------===//

#include "InferHelpers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::detail;

STRAIT_INFER(ClipByGlobalNormOp) {
  if (adaptor.getGrads().empty())
    return emitOptionalError(loc, "ClipByGlobalNorm needs at least one gradient");
  types.push_back(RankedTensorType::get({}, Float32Type::get(ctx)));
  llvm::append_range(types, adaptor.getGrads().getTypes());
  return success();
}

LogicalResult ClipByGlobalNormOp::verify() {
  for (Value g : getGrads())
    if (!isa<FloatType>(tensorOf(g).getElementType()))
      return emitOpError("(T5) gradients must be float tensors, got ") << g.getType();
  if (getMaxNorm().convertToDouble() <= 0)
    return emitOpError("(T5) max_norm must be positive");
  return success();
}

STRAIT_INFER(UnscaleGradientsOp) {
  types.push_back(RankedTensorType::get({}, Float32Type::get(ctx)));
  llvm::append_range(types, adaptor.getGrads().getTypes());
  return success();
}

/// (T9) the scale and the flag an optimizer reads are f32 scalars; the
/// gradients are float tensors.
static LogicalResult checkF32Scalar(Operation *op, Value v, StringRef what) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || t.getRank() != 0 || !t.getElementType().isF32())
    return op->emitOpError("(T9) ") << what << " must be tensor<f32>, got " << v.getType();
  return success();
}

LogicalResult UnscaleGradientsOp::verify() {
  if (getGrads().empty())
    return emitOpError("(T9) needs at least one gradient");
  for (Value g : getGrads())
    if (!isa<FloatType>(tensorOf(g).getElementType()))
      return emitOpError("(T9) gradients must be float tensors, got ") << g.getType();
  return checkF32Scalar(*this, getScale(), "scale");
}

/// total has grad's type, or f32 of grad's shape for a bf16 / f16 grad (the
/// kernels widen each element on load).
LogicalResult AccumulateGradOp::verify() {
  TensorType grad = tensorOf(getGrad()), total = tensorOf(getTotal());
  Type g = grad.getElementType();
  if (grad == total || ((g.isBF16() || g.isF16()) && grad.clone(total.getElementType()) == total &&
                        total.getElementType().isF32()))
    return success();
  return emitOpError("total ") << total << " must have grad's type " << grad
                               << (g.isBF16() || g.isF16() ? " or be its f32 counterpart" : "");
}

ParseResult AccumulateGradOp::parseGradTotalTypes(OpAsmParser &parser, Type &grad,
                                                  Type &total) {
  if (parser.parseType(grad))
    return failure();
  total = grad;
  if (failed(parser.parseOptionalArrow()))
    return success();
  return parser.parseType(total);
}

void AccumulateGradOp::printGradTotalTypes(OpAsmPrinter &printer, Operation *, Type grad,
                                           Type total) {
  printer << grad;
  if (total != grad)
    printer << " -> " << total;
}

/// (T6) lr is an f32 scalar; step (when given) an integer scalar.
static LogicalResult checkScalars(Operation *op, Value lr, Value step) {
  auto isScalar = [](Value v) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.getRank() == 0;
  };
  if (!isScalar(lr) || !tensorOf(lr).getElementType().isF32())
    return op->emitOpError("(T6) lr must be tensor<f32>, got ") << lr.getType();
  if (step && (!isScalar(step) || !tensorOf(step).getElementType().isInteger(64)))
    return op->emitOpError("(T6) step must be tensor<i64>, got ") << step.getType();
  return success();
}

LogicalResult AdamWOp::verify() {
  if (getBeta1().convertToDouble() < 0 || getBeta1().convertToDouble() >= 1 ||
      getBeta2().convertToDouble() < 0 || getBeta2().convertToDouble() >= 1)
    return emitOpError("(T6) beta1 and beta2 must lie in [0, 1)");
  if (getFreezeVarianceAfterAttr().getInt() < 0)
    return emitOpError("(T6) freeze_variance_after must be >= 0 (0: never), got ")
           << getFreezeVarianceAfterAttr().getInt();
  if (getFoundInf() && failed(checkF32Scalar(*this, getFoundInf(), "found_inf")))
    return failure();
  return checkScalars(*this, getLr(), getStep());
}

LogicalResult AssignVariableOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto var = symbols.lookupNearestSymbolFrom<VariableOp>(*this, getVariableAttr());
  if (!var)
    return emitOpError("'") << getVariable() << "' is not a graph.Variable";
  if (var.getType() != getValue().getType())
    return emitOpError("(T2) value type ")
           << getValue().getType() << " differs from the variable's " << var.getType();
  return success();
}

LogicalResult SGDOp::verify() {
  if (getFoundInf() && failed(checkF32Scalar(*this, getFoundInf(), "found_inf")))
    return failure();
  return checkScalars(*this, getLr(), Value());
}
