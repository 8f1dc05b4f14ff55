//===- GradientsAttention.cpp - Rules of FusedAttention and RoPE ----------===//
//
// FusedAttention goes to one FusedAttentionGrad (dQ, dKt, dV; or, when Q,
// Kt and V are the slices of one packed QKV, that tensor's gradient), which
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

/// The gradients of the operands that read slices of packed tensors
/// (q_select, kt_select, v_select): each packed tensor gets one gradient,
/// the Concat along the select axis of the slices' gradients (reshaped to
/// keep the axis; zeros for a slice no operand reads; summed for one read
/// twice), at its first operand. The sweep sums the gradients a value gets
/// at repeated operands (Autodiff.cpp, addOperandGrad), so the operands
/// that repeat it get none (null) instead of three packed-size
/// contributions. `grads` holds dQ, dKt, dV (the slices' types).
///
/// Operands that are Casts of one value to one type (graph-autocast casts
/// each use of the packed projection apart) count as the same packed
/// tensor: the Cast is linear, so its source's gradient is the same when the
/// whole packed gradient goes through the first Cast and none through the
/// others.
Value packedSource(Value v) {
  if (auto c = v.getDefiningOp<CastOp>())
    return c.getInput();
  return v;
}
bool samePacked(Value a, Value b) {
  return a == b || (a.getType() == b.getType() && packedSource(a) == packedSource(b));
}

LogicalResult packedGrads(FusedAttentionOp op, GradBuilder &g, ArrayRef<Value> grads, DX dx) {
  std::optional<ArrayRef<int64_t>> sel[3] = {op.getQSelect(), op.getKtSelect(), op.getVSelect()};
  for (unsigned i = 0; i < 3; ++i) {
    if (!sel[i])
      continue;
    Value packed = op->getOperand(i);
    bool first = llvm::none_of(llvm::seq<unsigned>(0, i), [&](unsigned j) {
      return sel[j] && samePacked(op->getOperand(j), packed);
    });
    if (!first)
      continue;
    auto pt = cast<RankedTensorType>(packed.getType());
    int64_t axis = (*sel[i])[0];
    SmallVector<Value> slices(pt.getShape()[axis]);
    for (unsigned j = i; j < 3; ++j) {
      if (!samePacked(op->getOperand(j), packed))
        continue;
      if (!sel[j] || (*sel[j])[0] != axis)
        return op.emitOpError("reads one packed tensor with other selects than [")
               << axis << ", i] on every operand; no gradient rule for that";
      Value &slot = slices[(*sel[j])[1]];
      slot = slot ? g.add(slot, grads[j]) : grads[j];
    }
    SmallVector<int64_t> sliceShape(pt.getShape());
    sliceShape[axis] = 1;
    auto sliceType = RankedTensorType::get(sliceShape, pt.getElementType());
    SmallVector<Value> parts;
    for (Value s : slices)
      parts.push_back(s ? g.make<ReshapeOp>(s, sliceShape, 0) : g.zeros(sliceType));
    dx[i] = parts.size() == 1 ? parts[0]
                              : g.make<ConcatOp>(parts, g.b.getI64IntegerAttr(axis));
  }
  return success();
}

/// Whether Q, Kt and V are slices 0, 1, 2 (each once) along one axis of
/// size 3 of one packed tensor (samePacked, one type): the gradient op then
/// writes the packed gradient itself (packed_grad).
bool isWholePack(FusedAttentionOp op) {
  std::optional<ArrayRef<int64_t>> sel[3] = {op.getQSelect(), op.getKtSelect(), op.getVSelect()};
  auto t = dyn_cast<RankedTensorType>(op.getQ().getType());
  if (!t || !sel[0])
    return false;
  int64_t axis = (*sel[0])[0];
  if (axis < 0 || axis >= t.getRank() || t.getShape()[axis] != 3)
    return false;
  bool seen[3] = {false, false, false};
  for (unsigned i = 0; i < 3; ++i) {
    if (!sel[i] || (*sel[i])[0] != axis || (*sel[i])[1] < 0 || (*sel[i])[1] > 2 ||
        seen[(*sel[i])[1]] || op->getOperand(i).getType() != t ||
        !samePacked(op->getOperand(i), op.getQ()))
      return false;
    seen[(*sel[i])[1]] = true;
  }
  return true;
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
  for (StringRef name :
       {"q_perm", "kt_perm", "v_perm", "y_perm", "q_select", "kt_select", "v_select"})
    if (Attribute attr = op->getAttr(name))
      attrs.append(name, attr);
  std::optional<ArrayRef<int64_t>> sel[3] = {op.getQSelect(), op.getKtSelect(), op.getVSelect()};
  // Q, Kt and V slices 0, 1, 2 of one packed tensor: one gradient op
  // result, the packed gradient, at the first operand (none at the others).
  if (isWholePack(op)) {
    attrs.append("packed_grad", g.b.getI64IntegerAttr(1));
    auto grad = g.create<FusedAttentionGradOp>(TypeRange{op.getQ().getType()}, operands,
                                               attrs.getAttrs());
    dx[0] = grad->getResult(0);
    return success();
  }
  // The gradients have the (selected) operands' types.
  SmallVector<Type> types;
  for (unsigned i = 0; i < 3; ++i) {
    auto t = cast<RankedTensorType>(op->getOperand(i).getType()); // static (the sweep checks)
    SmallVector<int64_t> shape(t.getShape());
    if (sel[i])
      shape.erase(shape.begin() + (*sel[i])[0]);
    types.push_back(RankedTensorType::get(shape, t.getElementType()));
  }
  auto grad = g.create<FusedAttentionGradOp>(TypeRange(types), operands, attrs.getAttrs());
  Value grads[3] = {grad->getResult(0), grad->getResult(1), grad->getResult(2)};
  if (!op.getQSelect() && !op.getKtSelect() && !op.getVSelect()) {
    llvm::copy(grads, dx.begin());
    return success();
  }
  for (unsigned i = 0; i < 3; ++i)
    if (!sel[i])
      dx[i] = grads[i];
  return packedGrads(op, g, grads, dx);
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
