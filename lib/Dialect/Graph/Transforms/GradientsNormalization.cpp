//===- GradientsNormalization.cpp - Rules of normalization ops ------------===//
//
// LayerNormalization and the training form of BatchNormalization go to fused
// gradient ops that recompute (LayerNorm) or reuse (BatchNorm) statistics.
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

} // namespace

void grad::registerNormalizationGradients(MLIRContext *ctx) {
  attachRule<LayerNormalizationOp, layerNormGrad>(ctx);
  attachRule<BatchNormalizationTrainingOp, batchNormTrainingGrad>(ctx);
  attachRule<BatchNormalizationOp, batchNormInferenceGrad>(ctx);
}
