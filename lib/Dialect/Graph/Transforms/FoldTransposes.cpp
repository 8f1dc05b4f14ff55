//===- FoldTransposes.cpp - graph-fold-transposes -------------------------===//
//
// Exports move data with Transposes that their readers could do without:
// GPT-2 transposes each head to [B, H, T, D] for the attention and back,
// LLaMA's linear layers multiply by Transpose(W) of the [out, in] weight and
// rotate Q and K (RoPE) after transposing them.
// Autodiff then adds a Transpose per Transpose to the backward pass. The
// pass folds them into the readers' operand layouts on the forward graph:
// FusedAttention's permutation attributes, Gemm's transposition flags; a
// Transpose before a rotary embedding moves past it to the attention. A
// Split of a packed QKV projection whose parts only the attention reads
// becomes a view that the attention reads through its select attributes.
// See docs/graph-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHFOLDTRANSPOSES
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

/// perm, or the identity of `rank` when absent.
SmallVector<int64_t> permOrIdentity(DenseI64ArrayAttr perm, int64_t rank) {
  if (perm)
    return SmallVector<int64_t>(perm.asArrayRef());
  return llvm::to_vector(llvm::seq<int64_t>(0, rank));
}

/// Sets `name` to perm, or removes it when perm is the identity.
void setPerm(Operation *op, StringRef name, ArrayRef<int64_t> perm) {
  if (llvm::equal(perm, llvm::seq<int64_t>(0, perm.size())))
    op->removeAttr(name);
  else
    op->setAttr(name, DenseI64ArrayAttr::get(op->getContext(), perm));
}

/// Folds the Transposes around `op` into its permutations: an operand Q, Kt
/// or V that a Transpose(x, p) computes becomes x (the logical operand
/// Transpose(Transpose(x, p), r) is x under p[r[i]]); a Y whose one user is
/// a Transpose(Y, t) is produced in that layout instead (the logical Y,
/// dimension j of Y's tensor y_perm[j], is dimension t^-1[y_perm[j]] of the
/// transposed tensor). Transposes left without a user go. Returns the
/// number folded.
int64_t foldAttention(FusedAttentionOp op) {
  int64_t folded = 0;
  const char *names[3] = {"q_perm", "kt_perm", "v_perm"};
  for (unsigned i = 0; i < 3; ++i) {
    while (auto t = op->getOperand(i).getDefiningOp<TransposeOp>()) {
      auto type = dyn_cast<RankedTensorType>(t.getData().getType());
      if (!type)
        break;
      SmallVector<int64_t> r =
          permOrIdentity(op->getAttrOfType<DenseI64ArrayAttr>(names[i]), type.getRank());
      ArrayRef<int64_t> p = t.getPerm();
      SmallVector<int64_t> composed;
      for (int64_t ri : r)
        composed.push_back(p[ri]);
      op->setOperand(i, t.getData());
      setPerm(op, names[i], composed);
      if (t->use_empty())
        t->erase();
      ++folded;
    }
  }
  Value y = op.getY();
  while (y.hasOneUse()) {
    auto t = dyn_cast<TransposeOp>(*y.getUsers().begin());
    if (!t)
      break;
    ArrayRef<int64_t> tp = t.getPerm();
    SmallVector<int64_t> inv(tp.size());
    for (size_t k = 0; k < tp.size(); ++k)
      inv[tp[k]] = static_cast<int64_t>(k);
    SmallVector<int64_t> composed;
    for (int64_t j : permOrIdentity(op.getYPermAttr(), tp.size()))
      composed.push_back(inv[j]);
    y.setType(t.getType());
    setPerm(op, "y_perm", composed);
    t.getTransposed().replaceAllUsesWith(y);
    t->erase();
    ++folded;
  }
  return folded;
}

/// Split(P, last axis a, n equal parts of s) whose every part reaches only
/// FusedAttention operands (Q, Kt, V) through Reshapes to one shape
/// [P's leading dims..., tail...] (prod(tail) = s; GPT-2's [B, T, H, D]
/// heads of the [B, T, 3C] projection) -> one Reshape of P to [lead..., n,
/// tail...], a view, that the attention reads part i of with `*_select =
/// [a, i]`. The Split and the per-part Reshapes go. Anything else stays.
/// Whether it folded.
bool foldSplit(SplitOp split) {
  auto pt = dyn_cast<RankedTensorType>(split.getInput().getType());
  if (!pt || !pt.hasStaticShape() || pt.getRank() == 0 || split->getNumResults() < 2)
    return false;
  int64_t rank = pt.getRank(), a = split.getAxis() < 0 ? split.getAxis() + rank : split.getAxis();
  ArrayRef<int64_t> sizes = split.getSplit();
  if (a != rank - 1 || sizes.size() != split->getNumResults() ||
      !llvm::all_equal(sizes) || sizes[0] <= 0)
    return false;
  ArrayRef<int64_t> lead = pt.getShape().drop_back();
  std::optional<SmallVector<int64_t>> tail;
  SmallVector<std::pair<ReshapeOp, int64_t>> reshapes; // and the part they read
  for (auto [i, part] : llvm::enumerate(split.getOutputs())) {
    if (part.use_empty())
      return false;
    for (Operation *user : part.getUsers()) {
      auto r = dyn_cast<ReshapeOp>(user);
      auto rt = r ? dyn_cast<RankedTensorType>(r.getType()) : RankedTensorType();
      if (!rt || !rt.hasStaticShape() || rt.getRank() <= static_cast<int64_t>(lead.size()) ||
          rt.getShape().take_front(lead.size()) != lead)
        return false;
      ArrayRef<int64_t> t = rt.getShape().drop_front(lead.size());
      if ((tail && ArrayRef<int64_t>(*tail) != t) || r->use_empty())
        return false;
      tail = SmallVector<int64_t>(t);
      for (OpOperand &use : r->getUses())
        if (!isa<FusedAttentionOp>(use.getOwner()) || use.getOperandNumber() >= 3)
          return false;
      reshapes.push_back({r, static_cast<int64_t>(i)});
    }
  }
  if (!tail || static_cast<int64_t>(reshapes.size()) == 0)
    return false;
  SmallVector<int64_t> packedShape(lead);
  packedShape.push_back(static_cast<int64_t>(sizes.size()));
  llvm::append_range(packedShape, *tail);
  OpBuilder b(split);
  Value packed = b.create<ReshapeOp>(split.getLoc(), split.getInput(), packedShape, 0);
  const char *names[3] = {"q_select", "kt_select", "v_select"};
  for (auto [r, part] : reshapes) {
    for (OpOperand &use : llvm::make_early_inc_range(r->getUses())) {
      Operation *attention = use.getOwner();
      unsigned idx = use.getOperandNumber();
      use.set(packed);
      attention->setAttr(names[idx], b.getDenseI64ArrayAttr({a, part}));
    }
    r->erase();
  }
  split->erase();
  return true;
}

/// FusedRotaryEmbedding(Transpose(x, p), cos, sin) with p keeping the last
/// axis (the rotation's) -> Transpose(FusedRotaryEmbedding(x, cos', sin'),
/// p), cos' = Transpose(cos, p^-1) (ranked up with leading 1s), so that the
/// Transpose reaches the op that reads the rotated value (LLaMA's Q and K,
/// rotated in [B, H, T, D]: FusedAttention, which folds it). Only for a
/// Transpose the rotation alone reads. `tables` keeps the relayouts made so
/// far (every layer rotates with the same tables). Whether it moved.
using TableCache = DenseMap<std::pair<Value, Attribute>, Value>;
bool sinkThroughRotary(FusedRotaryEmbeddingOp op, TableCache &tables) {
  auto t = op.getX().getDefiningOp<TransposeOp>();
  auto xt = t ? dyn_cast<RankedTensorType>(t.getData().getType()) : RankedTensorType();
  if (!xt || !xt.hasStaticShape() || !t->hasOneUse())
    return false;
  ArrayRef<int64_t> p = t.getPerm();
  int64_t r = xt.getRank();
  if (p.back() != r - 1)
    return false;
  SmallVector<int64_t> inv(r);
  for (int64_t k = 0; k < r; ++k)
    inv[p[k]] = k;
  OpBuilder b(op);
  Location loc = op.getLoc();
  auto relayout = [&](Value v) -> Value {
    auto vt = dyn_cast<RankedTensorType>(v.getType());
    if (!vt || !vt.hasStaticShape())
      return Value();
    Value &cached = tables[{v, b.getDenseI64ArrayAttr(inv)}];
    if (cached)
      return cached;
    if (vt.getRank() < r) {
      SmallVector<int64_t> shape(r - vt.getRank(), 1);
      llvm::append_range(shape, vt.getShape());
      v = b.create<ReshapeOp>(loc, v, shape, 0);
    }
    return cached = b.create<TransposeOp>(loc, v, inv);
  };
  Value cos = relayout(op.getCos()), sin = relayout(op.getSin());
  if (!cos || !sin)
    return false;
  auto rotated = b.create<FusedRotaryEmbeddingOp>(
      loc, TypeRange{xt}, ValueRange{t.getData(), cos, sin},
      ArrayRef<NamedAttribute>{b.getNamedAttr("adjoint", op.getAdjointAttr())});
  Value back = b.create<TransposeOp>(loc, rotated.getY(), p);
  op.getY().replaceAllUsesWith(back);
  op->erase();
  t->erase();
  return true;
}

/// x when `v` is a 2-D Transpose(x, [1, 0]) of a static x, else null.
Value transposed2d(Value v) {
  auto t = v.getDefiningOp<TransposeOp>();
  auto type = t ? dyn_cast<RankedTensorType>(t.getData().getType()) : RankedTensorType();
  if (!type || !type.hasStaticShape() || type.getRank() != 2 ||
      !llvm::equal(t.getPerm(), ArrayRef<int64_t>{1, 0}))
    return Value();
  return t.getData();
}

/// MatMul(A [..., K], Transpose(W [N, K])) -> Reshape(Gemm(A as [rows, K],
/// W, transB)), and MatMul(Transpose(X [K, M]), B [K, N]) -> Gemm(X, B,
/// transA). The Transposes go when nothing else reads them. Whether it
/// folded.
bool foldMatMul(MatMulOp op) {
  auto at = dyn_cast<RankedTensorType>(op.getA().getType());
  auto bt = dyn_cast<RankedTensorType>(op.getB().getType());
  auto yt = dyn_cast<RankedTensorType>(op.getResult().getType());
  if (!at || !bt || !yt || !at.hasStaticShape() || !bt.hasStaticShape() || bt.getRank() != 2 ||
      at.getRank() < 2)
    return false;
  Value w = transposed2d(op.getB());
  Value x = at.getRank() == 2 ? transposed2d(op.getA()) : Value();
  if (!w && !x)
    return false;
  OpBuilder b(op);
  Location loc = op.getLoc();
  Value a = x ? x : op.getA(), rhs = w ? w : op.getB();
  if (at.getRank() > 2)
    a = b.create<ReshapeOp>(
        loc, a, ArrayRef<int64_t>{at.getNumElements() / at.getShape().back(), at.getShape().back()},
        0);
  APFloat one(1.0f), zero(0.0f);
  Value y = b.create<GemmOp>(loc, a, rhs, Value(), one, zero, bool(x), bool(w))->getResult(0);
  if (yt.getRank() != 2)
    y = b.create<ReshapeOp>(loc, y, yt.getShape(), 0);
  Operation *ta = op.getA().getDefiningOp(), *tb = op.getB().getDefiningOp();
  op.getResult().replaceAllUsesWith(y);
  op->erase();
  for (Operation *t : {ta, tb})
    if (t && isa<TransposeOp>(t) && t->use_empty())
      t->erase();
  return true;
}

struct FoldTransposesPass : strait::graph::impl::GraphFoldTransposesBase<FoldTransposesPass> {
  void runOnOperation() override {
    SmallVector<FusedRotaryEmbeddingOp> rotary;
    getOperation().walk([&](FusedRotaryEmbeddingOp op) { rotary.push_back(op); });
    // First, so that the Transposes they move reach the attention.
    TableCache tables;
    for (FusedRotaryEmbeddingOp op : rotary)
      numRotary += sinkThroughRotary(op, tables);
    SmallVector<FusedAttentionOp> attention;
    SmallVector<MatMulOp> matmuls;
    getOperation().walk([&](Operation *op) {
      if (auto a = dyn_cast<FusedAttentionOp>(op))
        attention.push_back(a);
      else if (auto m = dyn_cast<MatMulOp>(op))
        matmuls.push_back(m);
    });
    for (FusedAttentionOp op : attention)
      numAttention += foldAttention(op);
    // After the Transposes: the heads' Reshapes now feed the attention.
    SmallVector<SplitOp> splits;
    getOperation().walk([&](SplitOp op) { splits.push_back(op); });
    for (SplitOp op : splits)
      numSplit += foldSplit(op);
    for (MatMulOp op : matmuls)
      numMatMul += foldMatMul(op);
  }
};

} // namespace
