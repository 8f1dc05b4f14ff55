//===- GradientsConv.cpp - Rules of convolution and pooling ---------------===//

#include "GradientUtils.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::grad;

namespace {
using DX = MutableArrayRef<Value>;

/// dX by ConvGradInput, dW by ConvGradWeight, dB by summing dY over every
/// dimension but the channels.
LogicalResult convGrad(ConvOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX(), w = op.getW(), d = dy[0];
  dx[0] = g.make<ConvGradInputOp>(d, w, op.getDilationsAttr(), op.getGroupAttr(),
                                  op.getPadsAttr(), op.getStridesAttr(),
                                  g.b.getDenseI64ArrayAttr(shapeOf(x)));
  dx[1] = g.make<ConvGradWeightOp>(d, x, op.getDilationsAttr(), op.getGroupAttr(),
                                   op.getPadsAttr(), op.getStridesAttr(),
                                   g.b.getDenseI64ArrayAttr(shapeOf(w)));
  if (Value b = op.getB()) {
    SmallVector<int64_t> axes{0};
    for (int64_t i = 2, e = shapeOf(d).size(); i < e; ++i)
      axes.push_back(i);
    dx[2] = g.make<ReduceSumOp>(d, ArrayRef<int64_t>(axes), /*keepdims=*/0);
  }
  return success();
}

/// Y = ConvTranspose(X, W) is the input gradient of a Conv with weight W, so
/// dX = Conv(dY, W) with the same window, and dW is that Conv's weight
/// gradient with the roles of input and output swapped:
/// ConvGradWeight(X, dY). dB sums dY over every dimension but the channels.
LogicalResult convTransposeGrad(ConvTransposeOp op, GradBuilder &g, ValueRange dy,
                                DX dx) {
  Value x = op.getX(), w = op.getW(), d = dy[0];
  dx[0] = g.make<ConvOp>(d, w, Value(), op.getDilationsAttr(), op.getGroupAttr(),
                         op.getPadsAttr(), op.getStridesAttr());
  if (dx[0].getType() != x.getType())
    return op.emitOpError("gradient: Conv of dY gives ")
           << dx[0].getType() << ", not the input's " << x.getType();
  dx[1] = g.make<ConvGradWeightOp>(x, d, op.getDilationsAttr(), op.getGroupAttr(),
                                   op.getPadsAttr(), op.getStridesAttr(),
                                   g.b.getDenseI64ArrayAttr(shapeOf(w)));
  if (op.getB()) {
    SmallVector<int64_t> axes{0};
    for (int64_t i = 2, e = shapeOf(d).size(); i < e; ++i)
      axes.push_back(i);
    dx[2] = g.make<ReduceSumOp>(d, ArrayRef<int64_t>(axes), /*keepdims=*/0);
  }
  return success();
}

LogicalResult maxPoolGrad(MaxPoolOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.make<MaxPoolGradOp>(dy[0], op.getX(), op.getKernelShapeAttr(),
                                op.getPadsAttr(), op.getStridesAttr(),
                                op.getDilationsAttr(), op.getCeilModeAttr());
  return success();
}

LogicalResult averagePoolGrad(AveragePoolOp op, GradBuilder &g, ValueRange dy,
                              DX dx) {
  dx[0] = g.make<AveragePoolGradOp>(
      dy[0], op.getKernelShapeAttr(), op.getPadsAttr(), op.getStridesAttr(),
      op.getDilationsAttr(), op.getCeilModeAttr(), op.getCountIncludePadAttr(),
      g.b.getDenseI64ArrayAttr(shapeOf(op.getX())));
  return success();
}

/// dX = broadcast(dY) / (number of spatial positions).
LogicalResult globalAveragePoolGrad(GlobalAveragePoolOp op, GradBuilder &g,
                                    ValueRange dy, DX dx) {
  ArrayRef<int64_t> in = shapeOf(op.getX());
  int64_t count = 1;
  for (int64_t d : in.drop_front(2))
    count *= d;
  Value e = g.make<ExpandOp>(dy[0], in);
  dx[0] = g.mulScalar(e, 1.0 / static_cast<double>(count));
  return success();
}

} // namespace

void grad::registerConvGradients(MLIRContext *ctx) {
  attachRule<ConvOp, convGrad>(ctx);
  attachRule<ConvTransposeOp, convTransposeGrad>(ctx);
  attachRule<MaxPoolOp, maxPoolGrad>(ctx);
  attachRule<AveragePoolOp, averagePoolGrad>(ctx);
  attachRule<GlobalAveragePoolOp, globalAveragePoolGrad>(ctx);
}
