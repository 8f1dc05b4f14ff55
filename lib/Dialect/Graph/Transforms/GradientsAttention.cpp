//===- GradientsAttention.cpp - Rules of FusedAttention and RoPE ----------===//
//
// FusedAttention goes to one FusedAttentionGrad (dQ, dKt, dV), which
// recomputes the probabilities from Q, Kt, the bias and the saved LSE
// instead of keeping the T x T scores of the forward pass. The bias gets no
// gradient: the sweep rejects a bias that depends on a trainable variable
// (Autodiff.cpp), and graph-fuse-attention never fuses one that reads a
// variable at all.
//
//===----------------------------------------------------------------------===//

#include "GradientUtils.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::grad;

namespace {
using DX = MutableArrayRef<Value>;

/// Whether `v` is the zero tensor the sweep passes for a result whose value
/// does not reach the loss.
bool isZeros(Value v) {
  DenseElementsAttr attr;
  return matchPattern(v, m_Constant(&attr)) && attr.isSplat() &&
         isa<FloatType>(attr.getElementType()) && attr.getSplatValue<APFloat>().isZero();
}

LogicalResult fusedAttentionGrad(FusedAttentionOp op, GradBuilder &g, ValueRange dy, DX dx) {
  // LSE is a statistic saved for the backward kernel, not an output to
  // differentiate through.
  if (!isZeros(dy[1]))
    return op.emitOpError("LSE (result #1) is used on the way to the loss; "
                          "FusedAttentionGrad gives no gradient through it");
  SmallVector<Value, 7> operands{dy[0], op.getQ(), op.getKt(), op.getV(), op.getY(), op.getLSE()};
  if (Value bias = op.getBias())
    operands.push_back(bias);
  // The forward's permutations: dY arrives laid out as Y, and each
  // gradient leaves laid out as its operand.
  NamedAttrList attrs;
  attrs.append("scale", op.getScaleAttr());
  attrs.append("causal", op.getCausalAttr());
  for (StringRef name : {"q_perm", "kt_perm", "v_perm", "y_perm"})
    if (Attribute perm = op->getAttr(name))
      attrs.append(name, perm);
  auto grad = g.create<FusedAttentionGradOp>(
      TypeRange{op.getQ().getType(), op.getKt().getType(), op.getV().getType()}, operands,
      attrs.getAttrs());
  dx[0] = grad.getDQ();
  dx[1] = grad.getDKt();
  dx[2] = grad.getDV();
  return success();
}

/// The rotation is linear in X: dX is the adjoint map applied to dY (the
/// adjoint of the adjoint is the map itself). Cos and Sin get no gradient
/// (the sweep rejects ones that depend on a trainable variable).
LogicalResult rotaryGrad(FusedRotaryEmbeddingOp op, GradBuilder &g, ValueRange dy, DX dx) {
  NamedAttribute attrs[] = {
      g.b.getNamedAttr("adjoint", g.b.getI64IntegerAttr(op.getAdjoint() == 0 ? 1 : 0))};
  dx[0] = g.create<FusedRotaryEmbeddingOp>(TypeRange{op.getX().getType()},
                                           ValueRange{dy[0], op.getCos(), op.getSin()}, attrs)
              .getY();
  return success();
}

} // namespace

void grad::registerAttentionGradients(MLIRContext *ctx) {
  attachRule<FusedRotaryEmbeddingOp, rotaryGrad>(ctx);
  attachRule<FusedAttentionOp, fusedAttentionGrad>(ctx);
}
