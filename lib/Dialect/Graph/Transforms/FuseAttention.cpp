//===- FuseAttention.cpp - graph-fuse-attention ---------------------------===//
//
// Exported transformers spell attention as
//   MatMul(Q, Kt) -> Mul(c) | Div(c) -> [Add(bias)] -> Softmax(-1) -> MatMul(., V)
// (ViT scales Q and Kt by sqrt(c) each before the first MatMul instead). The
// [b..., Tq, Tk] scores are materialized by each of those ops forward and
// again by their gradients. The matcher walks back from each Softmax and
// returns the operands, the scale and the ops it would replace; the pass
// builds one FusedAttention per match. See docs/graph-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHFUSEATTENTION
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

/// One decomposed attention: the operands, the scale, and the ops it
/// replaces in program order (the last one's result is Y).
struct AttentionMatch {
  Value q, kt, v, bias;
  double scale = 1.0;
  SmallVector<Operation *, 8> chain;
};

/// The value of a splat float constant of any shape.
std::optional<double> splatValue(Value v) {
  DenseElementsAttr attr;
  if (!v || !matchPattern(v, m_Constant(&attr)) || !attr.isSplat() ||
      !isa<FloatType>(attr.getElementType()))
    return std::nullopt;
  return attr.getSplatValue<APFloat>().convertToDouble();
}

bool isAttentionElement(Type t) {
  Type e = getElementTypeOrSelf(t);
  return isa<RankedTensorType>(t) && (e.isF32() || e.isBF16() || e.isF16());
}

/// When `v` is `Mul(x, c)`, `Mul(c, x)` or `Div(x, c)` with a splat constant
/// c, one user and x's type, returns x and multiplies `scale` by c (1/c).
Value peelScale(Value v, double &scale) {
  Operation *op = v.getDefiningOp();
  if (!op || !v.hasOneUse() || !isa<MulOp, DivOp>(op))
    return Value();
  for (unsigned i = 0; i < 2; ++i) {
    Value x = op->getOperand(i);
    std::optional<double> c = splatValue(op->getOperand(1 - i));
    if (!c || x.getType() != v.getType() || (isa<DivOp>(op) && i != 0))
      continue;
    if (isa<DivOp>(op) && *c == 0.0)
      return Value();
    scale *= isa<DivOp>(op) ? 1.0 / *c : *c;
    return x;
  }
  return Value();
}

/// Strips every scaling off `v`, recording the ops in `peeled`.
Value peelScales(Value v, double &scale, SmallVectorImpl<Operation *> &peeled) {
  while (Value x = peelScale(v, scale)) {
    peeled.push_back(v.getDefiningOp());
    v = x;
  }
  return v;
}

/// Whether `v` is computed from a variable (a trainable bias would need a
/// gradient FusedAttentionGrad does not give).
bool readsVariable(Value v) {
  SetVector<Operation *> slice;
  BackwardSliceOptions options;
  options.omitBlockArguments = true;
  getBackwardSlice(v, &slice, options);
  if (Operation *def = v.getDefiningOp())
    slice.insert(def);
  return llvm::any_of(slice, [](Operation *op) { return isa<ReadVariableOp>(op); });
}

/// The scores' operands: Q and Kt after any scaling of their own, and the
/// scaled MatMul's ops, when `s` is such a product.
bool matchScores(Value s, AttentionMatch &m, SmallVectorImpl<Operation *> &ops) {
  SmallVector<Operation *> peeled;
  Value prod = peelScales(s, m.scale, peeled);
  auto qk = prod.getDefiningOp<MatMulOp>();
  if (!qk || !prod.hasOneUse())
    return false;
  SmallVector<Operation *> qPeeled, kPeeled;
  m.q = peelScales(qk.getA(), m.scale, qPeeled);
  m.kt = peelScales(qk.getB(), m.scale, kPeeled);
  // Program order: the operand scalings, the product, the score scalings.
  ops.append(qPeeled.rbegin(), qPeeled.rend());
  ops.append(kPeeled.rbegin(), kPeeled.rend());
  ops.push_back(qk);
  ops.append(peeled.rbegin(), peeled.rend());
  return true;
}

/// Q [b..., Tq, D], Kt [b..., D, Tk], V [b..., Tk, Dv]: one element type,
/// one rank, identical batch dims (the MatMuls alone would broadcast them).
bool operandsFit(const AttentionMatch &m) {
  if (!isAttentionElement(m.q.getType()))
    return false;
  auto q = cast<RankedTensorType>(m.q.getType());
  for (Value x : {m.kt, m.v}) {
    auto t = dyn_cast<RankedTensorType>(x.getType());
    if (!t || t.getElementType() != q.getElementType() || t.getRank() != q.getRank())
      return false;
    if (t.getShape().drop_back(2) != q.getShape().drop_back(2) ||
        llvm::any_of(t.getShape().drop_back(2), ShapedType::isDynamic))
      return false;
  }
  return q.getRank() >= 2;
}

/// Matches the attention whose probabilities `softmax` computes.
std::optional<AttentionMatch> matchAttention(SoftmaxOp softmax) {
  AttentionMatch m;
  Value s = softmax.getInput();
  auto st = dyn_cast<RankedTensorType>(s.getType());
  if (!st || st.getRank() < 2)
    return std::nullopt;
  // Over the last axis (graph.Softmax has opset-13 semantics).
  int64_t axis = static_cast<int64_t>(softmax.getAxis());
  if (axis != -1 && axis != st.getRank() - 1)
    return std::nullopt;
  // Y = P V, P the left operand.
  Value p = softmax.getOutput();
  auto pv = dyn_cast_or_null<MatMulOp>(p.hasOneUse() ? *p.getUsers().begin() : nullptr);
  if (!pv || pv.getA() != p || pv.getB() == p || !s.hasOneUse())
    return std::nullopt;
  m.v = pv.getB();
  // [Add(scores, bias)] in either order.
  SmallVector<Operation *, 8> ops;
  if (auto add = s.getDefiningOp<AddOp>()) {
    bool matched = false;
    for (unsigned i = 0; i < 2 && !matched; ++i) {
      Value scores = add->getOperand(i), bias = add->getOperand(1 - i);
      AttentionMatch trial = m;
      SmallVector<Operation *, 8> trialOps;
      if (scores.getType() != s.getType() || scores == bias ||
          !matchScores(scores, trial, trialOps))
        continue;
      trial.bias = bias;
      m = trial;
      ops = trialOps;
      ops.push_back(add);
      matched = true;
    }
    if (!matched)
      return std::nullopt;
  } else if (!matchScores(s, m, ops)) {
    return std::nullopt;
  }
  if (!operandsFit(m) || (m.bias && readsVariable(m.bias)))
    return std::nullopt;
  m.chain = std::move(ops);
  m.chain.push_back(softmax);
  m.chain.push_back(pv);
  return m;
}

struct FuseAttentionPass
    : strait::graph::impl::GraphFuseAttentionBase<FuseAttentionPass> {
  void runOnOperation() override {
    SmallVector<SoftmaxOp> softmaxes;
    getOperation().walk([&](SoftmaxOp op) { softmaxes.push_back(op); });
    for (SoftmaxOp softmax : softmaxes) {
      std::optional<AttentionMatch> m = matchAttention(softmax);
      if (!m)
        continue;
      Operation *last = m->chain.back();
      OpBuilder b(last);
      SmallVector<Value, 4> operands{m->q, m->kt, m->v};
      if (m->bias)
        operands.push_back(m->bias);
      // Y is P V's type (operandsFit and the MatMuls' shapes make it so);
      // LSE drops Dv and is f32.
      auto yType = cast<RankedTensorType>(last->getResult(0).getType());
      auto lseType = RankedTensorType::get(yType.getShape().drop_back(), b.getF32Type());
      NamedAttrList attrs;
      attrs.append("scale", b.getF32FloatAttr(static_cast<float>(m->scale)));
      attrs.append("causal", b.getI64IntegerAttr(0));
      auto fused = b.create<FusedAttentionOp>(last->getLoc(), TypeRange{yType, lseType},
                                              operands, attrs.getAttrs());
      last->getResult(0).replaceAllUsesWith(fused.getY());
      // The scale constants go too when the chain was their only user.
      SmallVector<Operation *> constants;
      for (Operation *op : m->chain)
        for (Value v : op->getOperands())
          if (auto c = v.getDefiningOp<ConstantOp>(); c && !llvm::is_contained(constants, c))
            constants.push_back(c);
      for (Operation *op : llvm::reverse(m->chain))
        op->erase();
      for (Operation *c : constants)
        if (c->use_empty())
          c->erase();
      ++numFused;
    }
  }
};

} // namespace
