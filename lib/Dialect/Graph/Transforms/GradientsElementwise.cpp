//===- GradientsElementwise.cpp - Rules of elementwise ops ----------------===//
//
// Unary and broadcasting binary ops. Broadcast operands get their gradient
// summed back to their shape (ReduceToShape).
//
//===----------------------------------------------------------------------===//

#include "GradientUtils.h"

#include <cmath>

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::grad;

namespace {
using DX = MutableArrayRef<Value>;

LogicalResult addGrad(AddOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.reduceTo(dy[0], op.getA());
  dx[1] = g.reduceTo(dy[0], op.getB());
  return success();
}

LogicalResult subGrad(SubOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.reduceTo(dy[0], op.getA());
  dx[1] = g.reduceTo(g.neg(dy[0]), op.getB());
  return success();
}

LogicalResult mulGrad(MulOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.reduceTo(g.mul(dy[0], op.getB()), op.getA());
  dx[1] = g.reduceTo(g.mul(dy[0], op.getA()), op.getB());
  return success();
}

/// d(A/B) = dC / B and -dC * C / B.
LogicalResult divGrad(DivOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.reduceTo(g.div(dy[0], op.getB()), op.getA());
  Value t = g.div(g.mul(dy[0], op.getC()), op.getB());
  dx[1] = g.reduceTo(g.neg(t), op.getB());
  return success();
}

/// d(A^B) = dC * B * A^(B-1) and dC * C * log(A).
/// An exponent of another element type (e.g. an integer) is cast to the
/// base's first and gets no gradient.
LogicalResult powGrad(PowOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value a = op.getA(), b = op.getB();
  Type elt = getElementTypeOrSelf(a);
  bool sameType = getElementTypeOrSelf(b) == elt;
  Value bf = sameType ? b : g.make<CastOp>(b, elt);
  Value pw = g.make<PowOp>(a, g.sub(bf, g.scalar(1.0, bf)));
  dx[0] = g.reduceTo(g.mul(dy[0], g.mul(bf, pw)), a);
  if (sameType) {
    Value logA = g.make<LogOp>(a);
    dx[1] = g.reduceTo(g.mul(dy[0], g.mul(op.getC(), logA)), b);
  }
  return success();
}

LogicalResult negGrad(NegOp, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.neg(dy[0]);
  return success();
}

LogicalResult expGrad(ExpOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.mul(dy[0], op.getY());
  return success();
}

LogicalResult logGrad(LogOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.div(dy[0], op.getX());
  return success();
}

LogicalResult sqrtGrad(SqrtOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.div(dy[0], g.mulScalar(op.getY(), 2.0));
  return success();
}

LogicalResult reciprocalGrad(ReciprocalOp op, GradBuilder &g, ValueRange dy,
                             DX dx) {
  dx[0] = g.neg(g.mul(dy[0], g.mul(op.getY(), op.getY())));
  return success();
}

LogicalResult tanhGrad(TanhOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value y = op.getY();
  dx[0] = g.mul(dy[0], g.sub(g.scalar(1.0, y), g.mul(y, y)));
  return success();
}

LogicalResult sigmoidGrad(SigmoidOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value y = op.getY();
  dx[0] = g.mul(dy[0], g.mul(y, g.sub(g.scalar(1.0, y), y)));
  return success();
}

/// Routes dY where `cond` holds, zero elsewhere.
Value select(GradBuilder &g, Value cond, Value dy) {
  return g.make<WhereOp>(cond, dy, g.scalar(0.0, dy));
}

LogicalResult reluGrad(ReluOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX();
  dx[0] = select(g, g.make<GreaterOp>(x, g.scalar(0.0, x)), dy[0]);
  return success();
}

LogicalResult leakyReluGrad(LeakyReluOp op, GradBuilder &g, ValueRange dy,
                            DX dx) {
  Value x = op.getX();
  Value pos = g.make<GreaterOp>(x, g.scalar(0.0, x));
  dx[0] = g.make<WhereOp>(pos, dy[0],
                          g.mulScalar(dy[0], op.getAlpha().convertToDouble()));
  return success();
}

LogicalResult geluGrad(GeluOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.make<GeluGradOp>(dy[0], op.getX(), op.getApproximate());
  return success();
}

/// d erf(x) = 2/sqrt(pi) exp(-x^2).
LogicalResult erfGrad(ErfOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX();
  Value e = g.make<ExpOp>(g.neg(g.mul(x, x)));
  dx[0] = g.mul(dy[0], g.mulScalar(e, 2.0 / std::sqrt(M_PI)));
  return success();
}

LogicalResult absGrad(AbsOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.mul(dy[0], g.make<SignOp>(op.getX()));
  return success();
}

LogicalResult sinGrad(SinOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.mul(dy[0], g.make<CosOp>(op.getX()));
  return success();
}

LogicalResult cosGrad(CosOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.neg(g.mul(dy[0], g.make<SinOp>(op.getX())));
  return success();
}

LogicalResult softplusGrad(SoftplusOp op, GradBuilder &g, ValueRange dy, DX dx) {
  dx[0] = g.mul(dy[0], g.make<SigmoidOp>(op.getX()));
  return success();
}

/// dx = dy * mask / (1 - p): the same Dropout applied to dy with the
/// forward's graph.dropout_key draws the same mask (docs/training.md). A
/// Dropout without a key is the identity, and so is its gradient.
LogicalResult dropoutGrad(DropoutOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Attribute key = op->getAttr("graph.dropout_key");
  if (!key) {
    dx[0] = dy[0];
    return success();
  }
  auto d = g.create<DropoutOp>(dy[0], op.getRatioAttr());
  d->setAttr("graph.dropout_key", key);
  dx[0] = d.getResult();
  return success();
}

LogicalResult clipGrad(ClipOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX(), d = dy[0];
  if (std::optional<APFloat> lo = op.getMin())
    d = select(g, g.make<GreaterOrEqualOp>(x, g.scalar(lo->convertToDouble(), x)), d);
  if (std::optional<APFloat> hi = op.getMax())
    d = select(g, g.make<LessOrEqualOp>(x, g.scalar(hi->convertToDouble(), x)), d);
  dx[0] = d;
  return success();
}

LogicalResult castGrad(CastOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Type from = cast<TensorType>(op.getInput().getType()).getElementType();
  if (isa<FloatType>(from))
    dx[0] = g.make<CastOp>(dy[0], from);
  return success();
}

LogicalResult whereGrad(WhereOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value c = op.getCondition(), zero = g.scalar(0.0, dy[0]);
  dx[1] = g.reduceTo(g.make<WhereOp>(c, dy[0], zero), op.getX());
  dx[2] = g.reduceTo(g.make<WhereOp>(c, zero, dy[0]), op.getY());
  return success();
}

LogicalResult sumGrad(SumOp op, GradBuilder &g, ValueRange dy, DX dx) {
  for (auto [i, v] : llvm::enumerate(op.getData_0()))
    dx[i] = g.reduceTo(dy[0], v);
  return success();
}

LogicalResult meanGrad(MeanOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value d = g.mulScalar(dy[0], 1.0 / op.getData_0().size());
  for (auto [i, v] : llvm::enumerate(op.getData_0()))
    dx[i] = g.reduceTo(d, v);
  return success();
}

/// HardSigmoid: alpha where 0 < alpha x + beta < 1, else 0.
LogicalResult hardSigmoidGrad(HardSigmoidOp op, GradBuilder &g, ValueRange dy,
                              DX dx) {
  Value x = op.getX();
  double alpha = op.getAlpha().convertToDouble(), beta = op.getBeta().convertToDouble();
  Value t = g.add(g.mulScalar(x, alpha), g.scalar(beta, x));
  Value inside = g.make<AndOp>(g.make<GreaterOp>(t, g.scalar(0.0, x)),
                               g.make<LessOp>(t, g.scalar(1.0, x)));
  dx[0] = select(g, inside, g.mulScalar(dy[0], alpha));
  return success();
}

/// HardSwish x * relu6(x + 3) / 6: 0 below -3, 1 above 3, (2x + 3) / 6 between.
LogicalResult hardSwishGrad(HardSwishOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX();
  Value mid = g.mul(dy[0], g.add(g.mulScalar(x, 1.0 / 3.0), g.scalar(0.5, x)));
  Value upper = g.make<WhereOp>(g.make<GreaterOp>(x, g.scalar(3.0, x)), dy[0], mid);
  dx[0] = select(g, g.make<GreaterOrEqualOp>(x, g.scalar(-3.0, x)), upper);
  return success();
}

/// Elu: dY for x > 0, dY * (y + alpha) otherwise.
LogicalResult eluGrad(EluOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX();
  Value neg = g.mul(dy[0], g.add(op.getY(), g.scalar(op.getAlpha().convertToDouble(), x)));
  dx[0] = g.make<WhereOp>(g.make<GreaterOp>(x, g.scalar(0.0, x)), dy[0], neg);
  return success();
}

/// Softsign x / (1 + |x|): 1 / (1 + |x|)^2.
LogicalResult softsignGrad(SoftsignOp op, GradBuilder &g, ValueRange dy, DX dx) {
  Value x = op.getX();
  Value d = g.add(g.make<AbsOp>(x), g.scalar(1.0, x));
  dx[0] = g.div(dy[0], g.mul(d, d));
  return success();
}

/// Max/Min of two operands: the gradient goes to the selected one (A on ties).
template <typename OpT, typename CmpT>
LogicalResult selectGrad(OpT op, GradBuilder &g, ValueRange dy, DX dx) {
  if (op.getData_0().size() != 2)
    return op.emitOpError("gradient supports two operands only");
  Value a = op.getData_0()[0], b = op.getData_0()[1];
  Value pickA = g.make<CmpT>(a, b), zero = g.scalar(0.0, dy[0]);
  dx[0] = g.reduceTo(g.make<WhereOp>(pickA, dy[0], zero), a);
  dx[1] = g.reduceTo(g.make<WhereOp>(pickA, zero, dy[0]), b);
  return success();
}

} // namespace

void grad::registerElementwiseGradients(MLIRContext *ctx) {
  attachRule<AddOp, addGrad>(ctx);
  attachRule<SubOp, subGrad>(ctx);
  attachRule<MulOp, mulGrad>(ctx);
  attachRule<DivOp, divGrad>(ctx);
  attachRule<PowOp, powGrad>(ctx);
  attachRule<NegOp, negGrad>(ctx);
  attachRule<ExpOp, expGrad>(ctx);
  attachRule<LogOp, logGrad>(ctx);
  attachRule<SqrtOp, sqrtGrad>(ctx);
  attachRule<ReciprocalOp, reciprocalGrad>(ctx);
  attachRule<TanhOp, tanhGrad>(ctx);
  attachRule<SigmoidOp, sigmoidGrad>(ctx);
  attachRule<ReluOp, reluGrad>(ctx);
  attachRule<LeakyReluOp, leakyReluGrad>(ctx);
  attachRule<GeluOp, geluGrad>(ctx);
  attachRule<ErfOp, erfGrad>(ctx);
  attachRule<AbsOp, absGrad>(ctx);
  attachRule<SinOp, sinGrad>(ctx);
  attachRule<CosOp, cosGrad>(ctx);
  attachRule<SoftplusOp, softplusGrad>(ctx);
  attachRule<DropoutOp, dropoutGrad>(ctx);
  attachRule<ClipOp, clipGrad>(ctx);
  attachRule<CastOp, castGrad>(ctx);
  attachRule<WhereOp, whereGrad>(ctx);
  attachRule<SumOp, sumGrad>(ctx);
  attachRule<MeanOp, meanGrad>(ctx);
  attachRule<HardSigmoidOp, hardSigmoidGrad>(ctx);
  attachRule<HardSwishOp, hardSwishGrad>(ctx);
  attachRule<EluOp, eluGrad>(ctx);
  attachRule<SoftsignOp, softsignGrad>(ctx);
  attachRule<MaxOp, selectGrad<MaxOp, GreaterOrEqualOp>>(ctx);
  attachRule<MinOp, selectGrad<MinOp, LessOrEqualOp>>(ctx);
}
