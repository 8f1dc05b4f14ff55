//===- TrainingGradOps.cpp - Inference and verifiers of gradient ops ------===//
//
// Constraint numbers (T1, ...) refer to docs/training.md.
//
//===----------------------------------------------------------------------===//

#include "InferHelpers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::detail;

static std::string shapeStr(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleave(shape, os, "x");
  os << "]";
  return s;
}

/// Pushes a tensor of `shape` with `from`'s element type.
static LogicalResult pushShaped(SmallVectorImpl<Type> &types,
                                ArrayRef<int64_t> shape, Value from) {
  return pushTensor(types, shape, tensorOf(from).getElementType());
}

//===----------------------------------------------------------------------===//
// ReduceToShape
//===----------------------------------------------------------------------===//

STRAIT_INFER(ReduceToShapeOp) {
  return pushShaped(types, adaptor.getShape(), adaptor.getInput());
}

LogicalResult ReduceToShapeOp::verify() {
  TensorType in = tensorOf(getInput());
  if (!in.hasRank())
    return success();
  FailureOr<Shape> b = broadcastShapes(std::nullopt, {getShape(), in.getShape()});
  if (failed(b) || ArrayRef<int64_t>(*b) != in.getShape())
    return emitOpError("(T1) shape ") << shapeStr(getShape())
           << " does not broadcast to the input shape " << shapeStr(in.getShape());
  return success();
}

//===----------------------------------------------------------------------===//
// Normalization gradients
//===----------------------------------------------------------------------===//

/// LayerNormalizationGrad and RMSNormalizationGrad: dY has X's type (or,
/// with `lowDY`, for an f32 X also X's shape in bf16 / f16) and axis is in
/// range for X's rank.
static LogicalResult verifyNormGrad(Operation *op, Value dY, Value x, int64_t axis,
                                    bool lowDY = false) {
  TensorType dyt = tensorOf(dY), xt = tensorOf(x);
  Type dye = dyt.getElementType();
  bool low = lowDY && xt.getElementType().isF32() && (dye.isBF16() || dye.isF16()) &&
             xt.clone(dye) == dyt;
  if (dY.getType() != x.getType() && !low)
    return op->emitOpError("dY type ")
           << dY.getType() << " differs from X's " << x.getType()
           << (lowDY ? " (a 16-bit dY needs an f32 X of its shape)" : "");
  if (xt.hasRank() && failed(normalizeAxis(op->getLoc(), axis, xt.getRank())))
    return failure();
  return success();
}

STRAIT_INFER(LayerNormalizationGradOp) {
  types.push_back(adaptor.getX().getType());
  types.append(2, adaptor.getScale().getType());
  return success();
}

/// dY may be bf16 / f16 for an f32 X: the kernels widen it on load.
LogicalResult LayerNormalizationGradOp::verify() {
  return verifyNormGrad(*this, getDY(), getX(), getAxis(), /*lowDY=*/true);
}

STRAIT_INFER(RMSNormalizationGradOp) {
  types.push_back(adaptor.getX().getType());
  types.push_back(adaptor.getScale().getType());
  return success();
}

/// dY may be bf16 / f16 for an f32 X: the kernels widen it on load.
LogicalResult RMSNormalizationGradOp::verify() {
  return verifyNormGrad(*this, getDY(), getX(), getAxis(), /*lowDY=*/true);
}

/// BatchNormalization's channel parameters must be 1-D of X's dim 1.
static LogicalResult checkChannels(Operation *op, Value x, ValueRange params) {
  TensorType xt = tensorOf(x);
  if (!xt.hasRank())
    return success();
  if (xt.getRank() < 2)
    return op->emitOpError("X must have rank >= 2, got ") << xt;
  for (Value p : params) {
    TensorType pt = tensorOf(p);
    if (pt.hasRank() && (pt.getRank() != 1 || pt.getDimSize(0) != xt.getDimSize(1)))
      return op->emitOpError("channel operand ") << pt << " must be 1-D of size "
                                                 << xt.getDimSize(1);
  }
  return success();
}

STRAIT_INFER(BatchNormalizationTrainingOp) {
  types.push_back(adaptor.getX().getType());
  types.append(4, adaptor.getScale().getType());
  return success();
}

LogicalResult BatchNormalizationTrainingOp::verify() {
  return checkChannels(*this, getX(),
                       {getScale(), getB(), getInputMean(), getInputVar()});
}

STRAIT_INFER(BatchNormalizationGradOp) {
  types.push_back(adaptor.getX().getType());
  types.append(2, adaptor.getScale().getType());
  return success();
}

LogicalResult BatchNormalizationGradOp::verify() {
  if (getDY().getType() != getX().getType())
    return emitOpError("dY type ") << getDY().getType() << " differs from X's "
                                   << getX().getType();
  return checkChannels(*this, getX(),
                       {getScale(), getSavedMean(), getSavedInvStd()});
}

/// dLoss has the loss's element type: the scores', or f32 for bf16 / f16
/// scores (SoftmaxCrossEntropyLoss's inference).
LogicalResult SoftmaxCrossEntropyLossGradOp::verify() {
  Type scores = cast<TensorType>(getScores().getType()).getElementType();
  if (!isa<FloatType>(scores))
    return emitOpError("scores must be floats, got ") << getScores().getType();
  Type loss = scores.isBF16() || scores.isF16() ? Float32Type::get(getContext()) : scores;
  Type dLoss = cast<TensorType>(getDLoss().getType()).getElementType();
  if (dLoss != loss)
    return emitOpError("dLoss ") << getDLoss().getType() << " must have the loss's element type "
                                 << loss << " (scores " << getScores().getType() << ")";
  return success();
}

/// (T8) The loss and dScores of SoftmaxCrossEntropyLossWithGrad: the types
/// SoftmaxCrossEntropyLoss and SoftmaxCrossEntropyLossGrad infer. Scores
/// N x C x D... of floats, labels N x D... of integers; the loss has the
/// scores' element type (f32 for bf16 / f16) and is a scalar unless the
/// reduction is none (then the labels' shape); dScores has the scores' type.
STRAIT_INFER(SoftmaxCrossEntropyLossWithGradOp) {
  if (failed(inferLoss(loc, "SoftmaxCrossEntropyLossWithGrad", adaptor.getScores(),
                       adaptor.getLabels(), adaptor.getReduction(), types,
                       /*f32For16Bit=*/true)))
    return failure();
  types.push_back(adaptor.getScores().getType());
  return success();
}

/// (T8) dLoss has the loss's type: its element type, and one element
/// (reduction mean / sum) or the labels' shape (none) where known.
LogicalResult SoftmaxCrossEntropyLossWithGradOp::verify() {
  TensorType dl = tensorOf(getDLoss()), loss = tensorOf(getLoss());
  if (dl.getElementType() != loss.getElementType())
    return emitOpError("(T8) dLoss ") << dl << " must have the loss's element type "
                                      << loss.getElementType() << " (scores "
                                      << getScores().getType() << ")";
  if (!dl.hasStaticShape() || !loss.hasStaticShape())
    return success();
  if (getReduction() != LossReduction::none ? dl.getNumElements() != 1
                                            : dl.getShape() != loss.getShape())
    return emitOpError("(T8) dLoss ") << dl << " must have the loss's shape " << loss;
  return success();
}

//===----------------------------------------------------------------------===//
// Convolution and pooling gradients
//===----------------------------------------------------------------------===//

/// (T3) dY must have the shape Conv gives for input `x` and weight `w`.
static LogicalResult checkConvShapes(Operation *op, ArrayRef<int64_t> x,
                                     ArrayRef<int64_t> w, TensorType dy,
                                     ArrayRef<int64_t> pads, ArrayRef<int64_t> strides,
                                     ArrayRef<int64_t> dilations, int64_t group) {
  int64_t spatial = (int64_t)x.size() - 2;
  if (spatial < 1 || w.size() != x.size())
    return op->emitOpError("(T3) input ") << shapeStr(x) << " and weight "
                                          << shapeStr(w) << " must have equal rank >= 3";
  if ((int64_t)pads.size() != 2 * spatial || (int64_t)strides.size() != spatial ||
      (int64_t)dilations.size() != spatial)
    return op->emitOpError("(T3) expected ") << spatial << " strides/dilations and "
                                             << 2 * spatial << " pads";
  if (group < 1 || x[1] != w[1] * group || w[0] % group != 0)
    return op->emitOpError("(T3) channels of input ")
           << shapeStr(x) << " and weight " << shapeStr(w) << " disagree with group "
           << group;
  Shape out{x[0], w[0]};
  for (int64_t i = 0; i < spatial; ++i)
    out.push_back(windowOutputSize(x[i + 2], w[i + 2], strides[i], dilations[i],
                                   pads[i], pads[i + spatial], false));
  if (dy.hasRank() && dy.getShape() != ArrayRef<int64_t>(out))
    return op->emitOpError("(T3) dY ") << dy << " should have shape " << shapeStr(out);
  return success();
}

STRAIT_INFER(ConvGradInputOp) {
  return pushShaped(types, adaptor.getInputShape(), adaptor.getDY());
}

LogicalResult ConvGradInputOp::verify() {
  TensorType w = tensorOf(getW());
  if (!w.hasStaticShape())
    return success();
  return checkConvShapes(*this, getInputShape(), w.getShape(), tensorOf(getDY()),
                         getPads(), getStrides(), getDilations(), getGroup());
}

STRAIT_INFER(ConvGradWeightOp) {
  return pushShaped(types, adaptor.getWeightShape(), adaptor.getDY());
}

LogicalResult ConvGradWeightOp::verify() {
  TensorType x = tensorOf(getX());
  if (!x.hasStaticShape())
    return success();
  return checkConvShapes(*this, x.getShape(), getWeightShape(), tensorOf(getDY()),
                         getPads(), getStrides(), getDilations(), getGroup());
}

STRAIT_INFER(AveragePoolGradOp) {
  return pushShaped(types, adaptor.getInputShape(), adaptor.getDY());
}

//===----------------------------------------------------------------------===//
// Data movement gradients
//===----------------------------------------------------------------------===//

STRAIT_INFER(GatherGradOp) {
  return pushShaped(types, adaptor.getDataShape(), adaptor.getDY());
}

LogicalResult GatherGradOp::verify() {
  ArrayRef<int64_t> data = getDataShape();
  TensorType dy = tensorOf(getDY()), idx = tensorOf(getIndices());
  FailureOr<int64_t> axis = normalizeAxis(getLoc(), getAxis(), data.size());
  if (failed(axis))
    return failure();
  if (!dy.hasRank() || !idx.hasRank())
    return success();
  Shape expect(data.begin(), data.begin() + *axis);
  llvm::append_range(expect, idx.getShape());
  expect.append(data.begin() + *axis + 1, data.end());
  if (dy.getShape() != ArrayRef<int64_t>(expect))
    return emitOpError("(T4) dY ") << dy << " should have shape " << shapeStr(expect);
  return success();
}

STRAIT_INFER(ResizeGradOp) {
  return pushShaped(types, adaptor.getInputShape(), adaptor.getDY());
}

LogicalResult ResizeGradOp::verify() {
  if (getMode() == ResizeMode::cubic)
    return emitOpError("(T7) mode must be nearest or linear");
  TensorType dy = tensorOf(getDY());
  if (dy.hasRank() && dy.getRank() != static_cast<int64_t>(getInputShape().size()))
    return emitOpError("(T7) input_shape ")
           << shapeStr(getInputShape()) << " should have dY's rank " << dy.getRank();
  return success();
}

STRAIT_INFER(SliceGradOp) {
  return pushShaped(types, adaptor.getInputShape(), adaptor.getDY());
}

LogicalResult SliceGradOp::verify() {
  size_t n = getAxes().size();
  if (getStarts().size() != n || getEnds().size() != n || getSteps().size() != n)
    return emitOpError("starts, ends, axes and steps must have equal lengths");
  Shape out(getInputShape());
  for (size_t i = 0; i < n; ++i) {
    FailureOr<int64_t> a = normalizeAxis(getLoc(), getAxes()[i], out.size());
    if (failed(a))
      return failure();
    if (getSteps()[i] == 0)
      return emitOpError("steps must be non-zero");
    out[*a] = clampSlice(out[*a], getStarts()[i], getEnds()[i], getSteps()[i]).size;
  }
  TensorType dy = tensorOf(getDY());
  if (dy.hasRank() && dy.getShape() != ArrayRef<int64_t>(out))
    return emitOpError("(T4) dY ") << dy << " should have shape " << shapeStr(out);
  return success();
}
