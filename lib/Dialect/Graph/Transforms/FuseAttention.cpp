//===- FuseAttention.cpp - graph-fuse-attention ---------------------------===//
//
// Exported transformers spell attention as
//   MatMul(Q, Kt) -> Mul(c) | Div(c) -> [Add(bias)] -> Softmax(-1) -> MatMul(.,
//   V)
// (ViT scales Q and Kt by sqrt(c) each before the first MatMul instead). The
// [b..., Tq, Tk] scores are materialized by each of those ops forward and
// again by their gradients. The matcher walks back from each Softmax and
// returns the operands, the scale and the ops it would replace; the pass
// builds one FusedAttention per match. A mask computed from constants is
// read element by element (MaskEvaluator): all zeros it goes, a causal mask
// becomes causal = 1 (graph-fold-transposes then folds the heads'
// Transposes into the op's permutations). See docs/graph-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "FusionUtils.h"

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Analysis/SliceAnalysis.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/TypeSwitch.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHFUSEATTENTION
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;
using strait::graph::fusion::splatValue;

namespace {

/// One decomposed attention: the operands, the scale, and the ops it
/// replaces in program order (the last one's result is Y).
struct AttentionMatch {
  Value q, kt, v, bias;
  double scale = 1.0;
  SmallVector<Operation *, 8> chain;
};

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

/// Reads single elements of a value computed from constants by Expand,
/// Cast and broadcasting elementwise ops (the masks of GPT-2, LLaMA and BERT
/// exports: position ranges, LessOrEqual, Expand, Where), without building
/// it: a [B, 1, T, T] mask at T = 1024 is far beyond what the folders
/// materialize. The IR is not changed.
class MaskEvaluator {
public:
  /// Whether `v` is such a value; its ops go into `ops`.
  bool supports(Value v, SetVector<Operation *> &ops) {
    SmallVector<Value> worklist{v};
    while (!worklist.empty()) {
      Value x = worklist.pop_back_val();
      auto t = dyn_cast<RankedTensorType>(x.getType());
      Operation *op = x.getDefiningOp();
      if (!t || !t.hasStaticShape() || !op)
        return false;
      if (!ops.insert(op))
        continue;
      if (auto c = dyn_cast<ConstantOp>(op)) {
        if (!load(c))
          return false;
        continue;
      }
      if (!isa<ExpandOp, CastOp, WhereOp, NotOp, AndOp, OrOp, EqualOp, LessOp, LessOrEqualOp,
               GreaterOp, GreaterOrEqualOp, AddOp, SubOp, MulOp, DivOp, NegOp>(op))
        return false;
      llvm::append_range(worklist, op->getOperands());
    }
    return true;
  }

  /// The element of `v` (a value `supports` accepted) at `idx`.
  double at(Value v, ArrayRef<int64_t> idx) {
    Operation *op = v.getDefiningOp();
    if (auto c = dyn_cast<ConstantOp>(op)) {
      const SmallVector<double> &values = constants[c];
      return values.size() == 1 ? values[0] : values[flatIndex(v, idx)];
    }
    auto arg = [&](unsigned i) {
      Value x = op->getOperand(i);
      ArrayRef<int64_t> shape = cast<RankedTensorType>(x.getType()).getShape();
      SmallVector<int64_t, 6> sub(idx.drop_front(idx.size() - shape.size()));
      for (auto [d, n] : llvm::enumerate(shape))
        if (n == 1)
          sub[d] = 0;
      return at(x, sub);
    };
    return llvm::TypeSwitch<Operation *, double>(op)
        .Case<ExpandOp>([&](auto) { return arg(0); })
        .Case<CastOp>([&](CastOp c) {
          double x = arg(0);
          Type to = getElementTypeOrSelf(c.getType());
          if (to.isInteger(1))
            return x != 0 ? 1.0 : 0.0;
          return isa<IntegerType>(to) ? std::trunc(x) : x;
        })
        .Case<WhereOp>([&](auto) { return arg(0) != 0 ? arg(1) : arg(2); })
        .Case<NotOp>([&](auto) { return arg(0) == 0 ? 1.0 : 0.0; })
        .Case<NegOp>([&](auto) { return -arg(0); })
        .Case<AndOp>([&](auto) { return arg(0) != 0 && arg(1) != 0 ? 1.0 : 0.0; })
        .Case<OrOp>([&](auto) { return arg(0) != 0 || arg(1) != 0 ? 1.0 : 0.0; })
        .Case<EqualOp>([&](auto) { return arg(0) == arg(1) ? 1.0 : 0.0; })
        .Case<LessOp>([&](auto) { return arg(0) < arg(1) ? 1.0 : 0.0; })
        .Case<LessOrEqualOp>([&](auto) { return arg(0) <= arg(1) ? 1.0 : 0.0; })
        .Case<GreaterOp>([&](auto) { return arg(0) > arg(1) ? 1.0 : 0.0; })
        .Case<GreaterOrEqualOp>([&](auto) { return arg(0) >= arg(1) ? 1.0 : 0.0; })
        .Case<AddOp>([&](auto) { return arg(0) + arg(1); })
        .Case<SubOp>([&](auto) { return arg(0) - arg(1); })
        .Case<MulOp>([&](auto) { return arg(0) * arg(1); })
        .Case<DivOp>([&](auto) { return arg(0) / arg(1); })
        .Default([](Operation *) { return std::nan(""); });
  }

  /// Whether `v` (a value `supports` accepted) is the same along its
  /// dimension `back` places from the last: every constant it comes from
  /// lacks that dimension or has it of size 1.
  bool invariant(Value v, int64_t back) {
    ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
    if (back >= static_cast<int64_t>(shape.size()))
      return true;
    Operation *op = v.getDefiningOp();
    if (isa<ConstantOp>(op))
      return shape[shape.size() - 1 - back] == 1;
    return llvm::all_of(op->getOperands(), [&](Value x) { return invariant(x, back); });
  }

private:
  /// Caches a constant's elements as doubles; false for other element types.
  bool load(ConstantOp c) {
    auto d = dyn_cast<DenseElementsAttr>(c.getValue());
    if (!d)
      return false;
    SmallVector<double> &out = constants[c];
    Type elt = d.getElementType();
    if (d.isSplat()) {
      if (isa<FloatType>(elt))
        out.push_back(d.getSplatValue<APFloat>().convertToDouble());
      else if (elt.isInteger(1))
        out.push_back(d.getSplatValue<bool>() ? 1.0 : 0.0);
      else if (elt.isSignlessInteger())
        out.push_back(static_cast<double>(d.getSplatValue<APInt>().getSExtValue()));
      return !out.empty();
    }
    if (isa<FloatType>(elt)) {
      for (APFloat x : d.getValues<APFloat>())
        out.push_back(x.convertToDouble());
    } else if (elt.isInteger(1)) {
      for (bool x : d.getValues<bool>())
        out.push_back(x ? 1.0 : 0.0);
    } else if (elt.isSignlessInteger()) {
      for (APInt x : d.getValues<APInt>())
        out.push_back(static_cast<double>(x.getSExtValue()));
    }
    return !out.empty();
  }

  static int64_t flatIndex(Value v, ArrayRef<int64_t> idx) {
    ArrayRef<int64_t> shape = cast<RankedTensorType>(v.getType()).getShape();
    int64_t flat = 0;
    for (auto [i, n] : llvm::zip(idx, shape))
      flat = flat * n + i;
    return flat;
  }

  DenseMap<Operation *, SmallVector<double>> constants;
};

int64_t product(ArrayRef<int64_t> shape) {
  int64_t p = 1;
  for (int64_t d : shape)
    p *= d;
  return p;
}

/// What a constant bias does to the [b..., Tq, Tk] scores.
enum class BiasKind { Other, Zero, Causal };

/// Bias elements the pass reads at most to classify one, batch dims it is
/// only expanded along not counted (a 4096 x 4096 mask; larger ones stay a
/// bias).
constexpr int64_t kMaxBiasElements = int64_t(1) << 24;

/// Zero everywhere, or a causal mask: 0 where key j <= i + (Tk - Tq) and at
/// most -1e30 (-inf included) above, in every batch entry.
BiasKind classifyBias(MaskEvaluator &eval, Value bias, int64_t tq, int64_t tk) {
  auto t = cast<RankedTensorType>(bias.getType());
  if (!isa<FloatType>(t.getElementType()))
    return BiasKind::Other;
  int64_t rank = t.getRank();
  bool zero = true,
       causal = rank >= 2 && t.getDimSize(rank - 2) == tq && t.getDimSize(rank - 1) == tk;
  // Batch dims the mask is only expanded along are read at index 0.
  SmallVector<int64_t, 6> shape(t.getShape());
  for (int64_t d = 0; d + 2 < rank; ++d)
    if (eval.invariant(bias, rank - 1 - d))
      shape[d] = 1;
  if (product(shape) > kMaxBiasElements)
    return BiasKind::Other;
  SmallVector<int64_t, 6> idx(rank, 0);
  for (int64_t n = product(shape), e = 0; e < n; ++e) {
    double d = eval.at(bias, idx);
    zero &= d == 0.0;
    if (causal) {
      int64_t row = idx[rank - 2], col = idx[rank - 1];
      causal = col <= row + (tk - tq) ? d == 0.0 : d <= -1e30;
    }
    if (!zero && !causal)
      return BiasKind::Other;
    for (int64_t k = rank - 1; k >= 0; --k) {
      if (++idx[k] < shape[k])
        break;
      idx[k] = 0;
    }
  }
  return zero ? BiasKind::Zero : BiasKind::Causal;
}

struct FuseAttentionPass : strait::graph::impl::GraphFuseAttentionBase<FuseAttentionPass> {

  void runOnOperation() override {
    // The caches hold ops of one function.
    evaluator = MaskEvaluator();
    biasKinds.clear();
    maybeDead.clear();
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
        BiasKind kind = classify(m->bias, yType.getShape().drop_back().back(),
                                 cast<RankedTensorType>(m->kt.getType()).getShape().back());
        if (kind != BiasKind::Other) {
          causal = kind == BiasKind::Causal;
          numCausal += causal;
          m->bias = Value();
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
      auto fused = b.create<FusedAttentionOp>(last->getLoc(), TypeRange{yType, lseType}, operands,
                                              attrs.getAttrs());
      last->getResult(0).replaceAllUsesWith(fused.getY());
      // The scale constants go too when the chain was their only user.
      fusion::eraseChain(m->chain, [&](Operation *c) { maybeDead.remove(c); });
      ++numFused;
    }
    // The mask computations no fused op reads any more (shared by all
    // blocks, so erased once all are fused), last use first.
    for (Operation &op :
         llvm::make_early_inc_range(llvm::reverse(getOperation().getBody().front())))
      if (maybeDead.contains(&op) && op.use_empty())
        op.erase();
  }

  /// What `bias` is, once per value (blocks share their mask); the ops of a
  /// constant one may become dead.
  BiasKind classify(Value bias, int64_t tq, int64_t tk) {
    auto [it, inserted] = biasKinds.try_emplace(bias, BiasKind::Other);
    if (!inserted)
      return it->second;
    SetVector<Operation *> ops;
    if (!evaluator.supports(bias, ops))
      return BiasKind::Other;
    BiasKind kind = classifyBias(evaluator, bias, tq, tk);
    if (kind != BiasKind::Other)
      maybeDead.insert(ops.begin(), ops.end());
    return biasKinds[bias] = kind;
  }

  MaskEvaluator evaluator;
  DenseMap<Value, BiasKind> biasKinds;
  SetVector<Operation *> maybeDead;
};

} // namespace
