//===- GradientsNormalization.cpp - Rules of normalization ops ------------===//
//
// LayerNormalization, RMSNormalization and the training form of
// BatchNormalization go to fused gradient ops that recompute (LayerNorm) or reuse (BatchNorm) statistics;
// Group- and InstanceNormalization reuse LayerNormalizationGrad on X viewed
// as [N, groups, rest].
//
//===----------------------------------------------------------------------===//

#include "GradientUtils.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::grad;

namespace {
using DX = MutableArrayRef<Value>;

LogicalResult layerNormGrad(LayerNormalizationOp op, GradBuilder &g,
                            ValueRange dy, DX dx) {
  auto grad = g.create<LayerNormalizationGradOp>(
      dy[0], op.getX(), op.getScale(), op.getAxisAttr(), op.getEpsilonAttr());
  dx[0] = grad.getDX();
  dx[1] = grad.getDScale();
  if (Value b = op.getB()) {
    if (b.getType() != grad.getDB().getType())
      return op.emitOpError("gradient needs B of Scale's type, got ") << b.getType();
    dx[2] = grad.getDB();
  }
  return success();
}

LogicalResult rmsNormGrad(RMSNormalizationOp op, GradBuilder &g, ValueRange dy,
                          DX dx) {
  auto grad = g.create<RMSNormalizationGradOp>(
      dy[0], op.getX(), op.getScale(), op.getAxisAttr(), op.getEpsilonAttr());
  dx[0] = grad.getDX();
  dx[1] = grad.getDScale();
  return success();
}

/// Only Y carries a gradient; the statistics feed running averages and the
/// backward op itself. The running statistics get no gradient.
LogicalResult batchNormTrainingGrad(BatchNormalizationTrainingOp op,
                                    GradBuilder &g, ValueRange dy, DX dx) {
  auto grad = g.create<BatchNormalizationGradOp>(
      dy[0], op.getX(), op.getScale(), op.getSavedMean(), op.getSavedInvStd());
  dx[0] = grad.getDX();
  dx[1] = grad.getDScale();
  dx[2] = grad.getDB();
  return success();
}

/// The inference form differentiates with its running statistics as
/// constants (used when a frozen backbone keeps BatchNormalization in
/// inference mode; the builder otherwise rewrites it to the training form).
LogicalResult batchNormInferenceGrad(BatchNormalizationOp op, GradBuilder &g,
                                     ValueRange dy, DX dx) {
  Value x = op.getX();
  int64_t rank = shapeOf(x).size();
  SmallVector<int64_t> chan(rank, 1);
  chan[1] = shapeOf(x)[1];
  auto perChannel = [&](Value v) {
    return g.make<ReshapeOp>(v, ArrayRef<int64_t>(chan), 0);
  };
  Value var = g.add(op.getInputVar(), g.scalar(op.getEpsilon().convertToDouble(),
                                               op.getInputVar()));
  Value invStd = g.make<ReciprocalOp>(g.make<SqrtOp>(var));
  Value xhat = g.mul(g.sub(x, perChannel(op.getInputMean())), perChannel(invStd));
  dx[0] = g.mul(dy[0], perChannel(g.mul(op.getScale(), invStd)));
  Value dScale = g.make<ReduceToShapeOp>(g.mul(dy[0], xhat), ArrayRef<int64_t>(chan));
  dx[1] = g.reshapeTo(dScale, op.getScale());
  Value dB = g.make<ReduceToShapeOp>(dy[0], ArrayRef<int64_t>(chan));
  dx[2] = g.reshapeTo(dB, op.getB());
  return success();
}

/// GroupNormalization (InstanceNormalization: one group per channel) over
/// X [N, C, ...]: X viewed as [N, G, C/G * spatial] is a LayerNormalization
/// over the last axis without affine parameters, followed by the per-channel
/// scale and bias. dX is LayerNormalizationGrad of dY * scale (unit scale);
/// the normalized X is recomputed for dScale.
LogicalResult groupNormGrad(Operation *op, GradBuilder &g, Value dy, Value x,
                            Value scale, Value bias, int64_t groups,
                            APFloat epsilon, DX dx) {
  ArrayRef<int64_t> shape = shapeOf(x);
  if (shape.size() < 2 || shape[1] % groups != 0)
    return op->emitOpError("gradient needs X of rank >= 2 whose channels divide "
                           "into ")
           << groups << " groups";
  int64_t per = cast<RankedTensorType>(x.getType()).getNumElements() /
                (shape[0] * groups);
  auto floatType = cast<RankedTensorType>(x.getType()).getElementType();
  auto unitType = RankedTensorType::get({per}, floatType);
  Value unit = g.make<ConstantOp>(cast<ElementsAttr>(
      DenseElementsAttr::get(unitType, FloatAttr::get(floatType, 1.0))));
  SmallVector<int64_t> grouped{shape[0], groups, per};
  SmallVector<int64_t> chan(shape.size(), 1);
  chan[1] = shape[1];
  auto perChannel = [&](Value v) { return g.make<ReshapeOp>(v, ArrayRef<int64_t>(chan), 0); };
  auto epsAttr = g.b.getF32FloatAttr(epsilon.convertToFloat());
  auto axisAttr = g.b.getI64IntegerAttr(-1);
  Value xg = g.make<ReshapeOp>(x, ArrayRef<int64_t>(grouped), 0);
  Value dxhat = g.make<ReshapeOp>(g.mul(dy, perChannel(scale)), ArrayRef<int64_t>(grouped), 0);
  auto lnGrad = g.create<LayerNormalizationGradOp>(dxhat, xg, unit, axisAttr, epsAttr);
  dx[0] = g.reshapeTo(lnGrad.getDX(), x);
  Value xhat = g.reshapeTo(
      g.make<LayerNormalizationOp>(xg, unit, Value(), axisAttr, epsAttr), x);
  SmallVector<int64_t> axes{0};
  for (int64_t i = 2, e = shape.size(); i < e; ++i)
    axes.push_back(i);
  dx[1] = g.reshapeTo(g.make<ReduceSumOp>(g.mul(dy, xhat), ArrayRef<int64_t>(axes), 0),
                      scale);
  dx[2] = g.reshapeTo(g.make<ReduceSumOp>(dy, ArrayRef<int64_t>(axes), 0), bias);
  return success();
}

LogicalResult instanceNormGrad(InstanceNormalizationOp op, GradBuilder &g,
                               ValueRange dy, DX dx) {
  Value x = op.getInput();
  if (shapeOf(x).size() < 2)
    return op.emitOpError("gradient needs an input of rank >= 2");
  return groupNormGrad(op, g, dy[0], x, op.getScale(), op.getB(), shapeOf(x)[1],
                       op.getEpsilon(), dx);
}

LogicalResult groupNormalizationGrad(GroupNormalizationOp op, GradBuilder &g,
                                     ValueRange dy, DX dx) {
  return groupNormGrad(op, g, dy[0], op.getX(), op.getScale(), op.getBias(),
                       op.getNumGroups(), op.getEpsilon(), dx);
}

/// LRN over X [N, C, ...]: y = x d^-beta, d = bias + alpha/size * S, S the
/// sum of x^2 over the channel window [c - floor((size-1)/2), c +
/// ceil((size-1)/2)]. dX = dY d^-beta - 2 alpha beta / size * x * S'(dY x
/// d^(-beta-1)), with S' the sum over the mirrored window. Window sums are
/// AveragePools (counted pads) over X viewed as [N, 1, C, rest], times size.
LogicalResult lrnGrad(LRNOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX(), d0 = dy[0];
  ArrayRef<int64_t> shape = shapeOf(x);
  if (shape.size() < 3)
    return op.emitOpError("gradient needs X of rank >= 3");
  int64_t size = op.getSize();
  double alpha = op.getAlpha().convertToDouble(), beta = op.getBeta().convertToDouble();
  int64_t lo = (size - 1) / 2, hi = size - 1 - lo;
  int64_t rest = cast<RankedTensorType>(x.getType()).getNumElements() / (shape[0] * shape[1]);
  SmallVector<int64_t> view{shape[0], 1, shape[1], rest};
  auto windowSum = [&](Value v, int64_t before, int64_t after) {
    Value r = g.make<ReshapeOp>(v, ArrayRef<int64_t>(view), 0);
    Value avg = g.make<AveragePoolOp>(
        r, g.b.getDenseI64ArrayAttr({size, 1}), g.b.getDenseI64ArrayAttr({before, 0, after, 0}),
        g.b.getDenseI64ArrayAttr({1, 1}), g.b.getDenseI64ArrayAttr({1, 1}),
        g.b.getI64IntegerAttr(0), g.b.getI64IntegerAttr(1));
    return g.reshapeTo(g.mulScalar(avg, static_cast<double>(size)), x);
  };
  Value d = g.add(g.mulScalar(windowSum(g.mul(x, x), lo, hi), alpha / size),
                  g.scalar(op.getBias().convertToDouble(), x));
  Value dPow = g.make<PowOp>(d, g.scalar(-beta, x));
  Value back = windowSum(g.mul(g.mul(d0, x), g.div(dPow, d)), hi, lo);
  dx[0] = g.sub(g.mul(d0, dPow), g.mulScalar(g.mul(x, back), 2.0 * alpha * beta / size));
  return success();
}

} // namespace

void grad::registerNormalizationGradients(MLIRContext *ctx) {
  attachRule<LayerNormalizationOp, layerNormGrad>(ctx);
  attachRule<RMSNormalizationOp, rmsNormGrad>(ctx);
  attachRule<BatchNormalizationTrainingOp, batchNormTrainingGrad>(ctx);
  attachRule<BatchNormalizationOp, batchNormInferenceGrad>(ctx);
  attachRule<InstanceNormalizationOp, instanceNormGrad>(ctx);
  attachRule<GroupNormalizationOp, groupNormalizationGrad>(ctx);
  attachRule<LRNOp, lrnGrad>(ctx);
}
