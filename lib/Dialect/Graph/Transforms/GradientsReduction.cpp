//===- GradientsReduction.cpp - Rules of reductions, softmax and losses ---===//

#include "GradientUtils.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::grad;

namespace {
using DX = MutableArrayRef<Value>;

/// The reduced axes of a Reduce op over `rank` dims (empty axes: all,
/// unless noop_with_empty_axes).
SmallVector<int64_t> reducedAxes(ArrayRef<int64_t> axes, bool noop, int64_t rank) {
  if (axes.empty() && !noop)
    return llvm::to_vector(llvm::seq<int64_t>(0, rank));
  SmallVector<int64_t> out;
  for (int64_t a : axes)
    out.push_back(a < 0 ? a + rank : a);
  return out;
}

/// Broadcasts the gradient of a reduction back over the input: reshape to
/// the keepdims shape, then Expand. Returns it and the reduced count.
template <typename OpT>
std::pair<Value, int64_t> expandReduced(OpT op, GradBuilder &g, Value d) {
  ArrayRef<int64_t> in = shapeOf(op.getData());
  SmallVector<int64_t> kept(in);
  int64_t count = 1;
  for (int64_t a : reducedAxes(op.getAxes(), op.getNoopWithEmptyAxes() != 0,
                               in.size())) {
    count *= in[a];
    kept[a] = 1;
  }
  Value r = g.make<ReshapeOp>(d, ArrayRef<int64_t>(kept), 0);
  return {g.make<ExpandOp>(r, in), count};
}

LogicalResult reduceSumGrad(ReduceSumOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = expandReduced(op, g, dy[0]).first;
  return success();
}

LogicalResult reduceMeanGrad(ReduceMeanOp op, GradBuilder &g, ValueRange dy,
                             DX dx) {
  auto [e, count] = expandReduced(op, g, dy[0]);
  dx[0] = g.mulScalar(e, 1.0 / static_cast<double>(count));
  return success();
}

LogicalResult reduceSumSquareGrad(ReduceSumSquareOp op, GradBuilder &g,
                                  ValueRange dy, DX dx) {
  Value e = expandReduced(op, g, dy[0]).first;
  dx[0] = g.mul(e, g.mulScalar(op.getData(), 2.0));
  return success();
}

/// ReduceMax/ReduceMin: dY goes to the extremal entries, split evenly between
/// ties (as PyTorch's amax/amin).
template <typename OpT>
LogicalResult extremumGrad(OpT op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getData();
  Value y = expandReduced(op, g, op.getReduced()).first;
  Type elt = getElementTypeOrSelf(x);
  Value mask = g.make<CastOp>(g.make<EqualOp>(x, y), elt);
  SmallVector<int64_t> axes = reducedAxes(op.getAxes(), op.getNoopWithEmptyAxes() != 0,
                                          shapeOf(x).size());
  Value ties = g.make<ReduceSumOp>(mask, ArrayRef<int64_t>(axes), /*keepdims=*/1);
  Value share = g.div(mask, g.make<ExpandOp>(ties, shapeOf(x)));
  dx[0] = g.mul(expandReduced(op, g, dy[0]).first, share);
  return success();
}

/// ReduceProd: d/dx_i = prod of the other entries, exact with zeros (as
/// PyTorch): with no zero in the group y/x_i; with one zero, the product of
/// the nonzero entries at the zero and 0 elsewhere; with more, 0.
LogicalResult reduceProdGrad(ReduceProdOp op, GradBuilder &g, ValueRange dy,
                             DX dx) {
  Value x = op.getData();
  Type elt = getElementTypeOrSelf(x);
  SmallVector<int64_t> axes = reducedAxes(op.getAxes(), op.getNoopWithEmptyAxes() != 0,
                                          shapeOf(x).size());
  Value zero = g.scalar(0.0, x), one = g.scalar(1.0, x);
  Value isZero = g.make<EqualOp>(x, zero);
  Value nonzero = g.make<WhereOp>(isZero, one, x);
  auto groupOf = [&](Value v) { // reduce with keepdims, then broadcast back
    return g.make<ExpandOp>(v, shapeOf(x));
  };
  Value prodNonzero =
      groupOf(g.make<ReduceProdOp>(nonzero, ArrayRef<int64_t>(axes), /*keepdims=*/1));
  Value zeros = groupOf(g.make<ReduceSumOp>(g.make<CastOp>(isZero, elt),
                                            ArrayRef<int64_t>(axes), /*keepdims=*/1));
  Value noZero = g.make<CastOp>(g.make<EqualOp>(zeros, zero), elt);
  Value oneZero = g.make<CastOp>(g.make<EqualOp>(zeros, one), elt);
  Value atZero = g.mul(prodNonzero, oneZero);
  Value elsewhere = g.mul(g.div(prodNonzero, nonzero), noZero);
  Value factor = g.make<WhereOp>(isZero, atZero, elsewhere);
  dx[0] = g.mul(expandReduced(op, g, dy[0]).first, factor);
  return success();
}

/// ReduceL1: dY * sign(x).
LogicalResult reduceL1Grad(ReduceL1Op op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.mul(expandReduced(op, g, dy[0]).first, g.make<SignOp>(op.getData()));
  return success();
}

/// ReduceL2: dY * x / y, 0 where y = 0 (PyTorch's subgradient of the norm).
LogicalResult reduceL2Grad(ReduceL2Op op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getData();
  Value y = expandReduced(op, g, op.getReduced()).first;
  Value zero = g.scalar(0.0, x);
  Value isZero = g.make<EqualOp>(y, zero);
  Value safe = g.make<WhereOp>(isZero, g.scalar(1.0, x), y);
  Value ratio = g.make<WhereOp>(isZero, g.zeros(x.getType()), g.div(x, safe));
  dx[0] = g.mul(expandReduced(op, g, dy[0]).first, ratio);
  return success();
}

/// ReduceLogSumExp: dY * exp(x - y) (the softmax over the reduced axes).
LogicalResult reduceLogSumExpGrad(ReduceLogSumExpOp op, GradBuilder &g,
                                  ValueRange dy, DX dx) {
  Value y = expandReduced(op, g, op.getReduced()).first;
  dx[0] = g.mul(expandReduced(op, g, dy[0]).first,
                g.make<ExpOp>(g.sub(op.getData(), y)));
  return success();
}

/// ReduceLogSum: dY / sum(x) = dY / exp(y).
LogicalResult reduceLogSumGrad(ReduceLogSumOp op, GradBuilder &g, ValueRange dy,
                               DX dx) {
  Value y = expandReduced(op, g, op.getReduced()).first;
  dx[0] = g.div(expandReduced(op, g, dy[0]).first, g.make<ExpOp>(y));
  return success();
}

LogicalResult softmaxGrad(SoftmaxOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.make<SoftmaxGradOp>(dy[0], op.getOutput(), op.getAxisAttr());
  return success();
}

LogicalResult logSoftmaxGrad(LogSoftmaxOp op, GradBuilder &g, ValueRange dy,
                             DX dx) {
  dx[0] = g.make<LogSoftmaxGradOp>(dy[0], op.getOutput(), op.getAxisAttr());
  return success();
}

/// Scores only; labels and class weights get no gradient.
LogicalResult sceGrad(SoftmaxCrossEntropyLossOp op, GradBuilder &g,
                      ValueRange dy, DX dx) {
  dx[0] = g.make<SoftmaxCrossEntropyLossGradOp>(
      dy[0], op.getScores(), op.getLabels(), op.getWeights(),
      op.getReductionAttr(), op.getIgnoreIndexAttr());
  return success();
}

} // namespace

void grad::registerReductionGradients(MLIRContext *ctx) {
  attachRule<ReduceSumOp, reduceSumGrad>(ctx);
  attachRule<ReduceMeanOp, reduceMeanGrad>(ctx);
  attachRule<ReduceSumSquareOp, reduceSumSquareGrad>(ctx);
  attachRule<ReduceMaxOp, extremumGrad<ReduceMaxOp>>(ctx);
  attachRule<ReduceMinOp, extremumGrad<ReduceMinOp>>(ctx);
  attachRule<ReduceProdOp, reduceProdGrad>(ctx);
  attachRule<ReduceL1Op, reduceL1Grad>(ctx);
  attachRule<ReduceL2Op, reduceL2Grad>(ctx);
  attachRule<ReduceLogSumExpOp, reduceLogSumExpGrad>(ctx);
  attachRule<ReduceLogSumOp, reduceLogSumGrad>(ctx);
  attachRule<SoftmaxOp, softmaxGrad>(ctx);
  attachRule<LogSoftmaxOp, logSoftmaxGrad>(ctx);
  attachRule<SoftmaxCrossEntropyLossOp, sceGrad>(ctx);
}
