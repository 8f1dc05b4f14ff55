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
#include "mlir/Interfaces/SideEffectInterfaces.h"

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

constexpr int64_t kEvalLimit = 1 << 16; // elements, as GraphFolds.cpp

/// The elements of an int or float constant as doubles.
std::optional<SmallVector<double>> elementsOf(DenseElementsAttr d) {
  SmallVector<double> out;
  if (isa<FloatType>(d.getElementType())) {
    for (APFloat x : d.getValues<APFloat>())
      out.push_back(x.convertToDouble());
  } else if (d.getElementType().isSignlessInteger() && !d.getElementType().isInteger(1)) {
    for (APInt x : d.getValues<APInt>())
      out.push_back(static_cast<double>(x.getSExtValue()));
  } else {
    return std::nullopt;
  }
  return out;
}

/// LessOrEqual / GreaterOrEqual of two constants (GraphFolds.cpp folds
/// Equal, Less and Greater only; the masks of GPT-2, LLaMA and BERT exports
/// compare position ranges with these two).
Attribute foldOrderedCompare(Operation *op, ArrayRef<Attribute> operands) {
  auto a = dyn_cast_or_null<DenseElementsAttr>(operands[0]);
  auto b = dyn_cast_or_null<DenseElementsAttr>(operands[1]);
  auto type = dyn_cast<RankedTensorType>(op->getResult(0).getType());
  if (!a || !b || !type || !type.hasStaticShape() || type.getNumElements() > kEvalLimit)
    return {};
  std::optional<SmallVector<double>> x = elementsOf(a), y = elementsOf(b);
  if (!x || !y)
    return {};
  // Flat index into an operand of `shape` broadcast to the result index.
  auto flat = [&](ArrayRef<int64_t> shape, ArrayRef<int64_t> idx) {
    int64_t f = 0, stride = 1;
    size_t off = idx.size() - shape.size();
    for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
      if (shape[d] != 1)
        f += idx[off + d] * stride;
      stride *= shape[d];
    }
    return f;
  };
  bool le = isa<LessOrEqualOp>(op);
  SmallVector<bool> out;
  SmallVector<int64_t> idx(type.getRank(), 0);
  for (int64_t i = 0, n = type.getNumElements(); i < n; ++i) {
    double l = (*x)[flat(a.getType().getShape(), idx)];
    double r = (*y)[flat(b.getType().getShape(), idx)];
    out.push_back(le ? l <= r : l >= r);
    for (int64_t d = type.getRank() - 1; d >= 0; --d) {
      if (++idx[d] < type.getDimSize(d))
        break;
      idx[d] = 0;
    }
  }
  return DenseElementsAttr::get(type, ArrayRef<bool>(out));
}

/// The value of `v` when it is computed from constants only, by folding its
/// backward slice; null when an op does not fold (or the fold limits of
/// GraphFolds.cpp are hit). The IR is not changed; the folded ops go into
/// `slice`.
DenseElementsAttr evaluateConstant(Value v, SetVector<Operation *> &slice) {
  BackwardSliceOptions options;
  bool argument = false;
  options.filter = [&](Operation *op) {
    for (Value operand : op->getOperands())
      argument |= isa<BlockArgument>(operand);
    return true;
  };
  getBackwardSlice(v, &slice, options);
  Operation *def = v.getDefiningOp();
  if (!def || argument || llvm::any_of(def->getOperands(), llvm::IsaPred<BlockArgument>))
    return {};
  slice.insert(def);
  DenseMap<Value, Attribute> known;
  for (Operation *op : slice) { // topological order: definitions first
    if (op->getNumRegions() || !isMemoryEffectFree(op) || op->getNumResults() != 1)
      return {};
    SmallVector<Attribute> operands;
    for (Value operand : op->getOperands())
      operands.push_back(known.lookup(operand));
    SmallVector<OpFoldResult, 1> results;
    if (isa<LessOrEqualOp, GreaterOrEqualOp>(op))
      results.push_back(foldOrderedCompare(op, operands));
    else if (failed(op->fold(operands, results)) || results.size() != 1)
      return {};
    if (!results[0])
      return {};
    Attribute attr = dyn_cast<Attribute>(results[0]);
    if (!attr)
      attr = known.lookup(cast<Value>(results[0]));
    if (!attr)
      return {};
    known[op->getResult(0)] = attr;
  }
  return dyn_cast_or_null<DenseElementsAttr>(known.lookup(v));
}

/// What a constant bias does to the [b..., Tq, Tk] scores.
enum class BiasKind { Other, Zero, Causal };

/// Zero everywhere, or a causal mask: 0 where key j <= i + (Tk - Tq) and at
/// most -1e30 (-inf included) above, in every batch entry.
BiasKind classifyBias(DenseElementsAttr bias, int64_t tq, int64_t tk) {
  if (!isa<FloatType>(bias.getElementType()))
    return BiasKind::Other;
  ArrayRef<int64_t> shape = bias.getType().getShape();
  bool zero = true, causal = shape.size() >= 2 && shape[shape.size() - 2] == tq &&
                             shape.back() == tk;
  int64_t i = 0;
  for (APFloat x : bias.getValues<APFloat>()) {
    double d = x.convertToDouble();
    zero &= d == 0.0;
    if (causal) {
      int64_t col = i % tk, row = (i / tk) % tq;
      causal = col <= row + (tk - tq) ? d == 0.0 : d <= -1e30;
    }
    if (!zero && !causal)
      return BiasKind::Other;
    ++i;
  }
  return zero ? BiasKind::Zero : BiasKind::Causal;
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
      // A constant bias that is all zeros goes; a causal mask becomes
      // causal = 1 (the kernel skips the masked keys).
      int64_t causal = 0;
      auto yType = cast<RankedTensorType>(last->getResult(0).getType());
      if (m->bias) {
        SetVector<Operation *> slice;
        if (DenseElementsAttr value = evaluateConstant(m->bias, slice)) {
          ArrayRef<int64_t> ks = cast<RankedTensorType>(m->kt.getType()).getShape();
          BiasKind kind = classifyBias(value, yType.getShape().drop_back().back(), ks.back());
          if (kind != BiasKind::Other) {
            causal = kind == BiasKind::Causal;
            numCausal += causal;
            m->bias = Value();
            maybeDead.insert(slice.begin(), slice.end());
          }
        }
      }
      SmallVector<Value, 4> operands{m->q, m->kt, m->v};
      if (m->bias)
        operands.push_back(m->bias);
      // Y is P V's type (operandsFit and the MatMuls' shapes make it so);
      // LSE drops Dv and is f32.
      auto lseType = RankedTensorType::get(yType.getShape().drop_back(), b.getF32Type());
      NamedAttrList attrs;
      attrs.append("scale", b.getF32FloatAttr(static_cast<float>(m->scale)));
      attrs.append("causal", b.getI64IntegerAttr(causal));
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
        if (c->use_empty()) {
          maybeDead.remove(c);
          c->erase();
        }
      ++numFused;
    }
    // The mask computations no fused op reads any more (shared by all
    // blocks, so erased once all are fused), last use first.
    for (Operation &op : llvm::make_early_inc_range(
             llvm::reverse(getOperation().getBody().front())))
      if (maybeDead.contains(&op) && op.use_empty())
        op.erase();
  }

  SetVector<Operation *> maybeDead;
};

} // namespace
