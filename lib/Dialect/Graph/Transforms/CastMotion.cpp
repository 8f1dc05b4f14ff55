//===- CastMotion.cpp - graph-cast-motion ---------------------------------===//
//
// Removes the cast round trips graph-autocast leaves around layout ops in a
// mixed-precision training step. Every rewrite is exact: a layout op copies
// elements, so it commutes with any cast, and the round trip T -> f32 -> T of
// a 16-bit float T is the identity. The rewrites, applied to a fixed point:
//
//   1. Cast(f32 -> T)(L(x))      => L(Cast(f32 -> T)(x))   L: one data input
//   2. Cast(f32 -> T) of every result of a Split => the Split of one cast
//   3. L(Cast(T -> f32)(x))      => Cast(T -> f32)(L(x))
//   4. Concat of Cast(T -> f32)s => one cast of the Concat of their inputs
//   5. Cast(f32 -> T)(Cast(T -> f32)(x)) => x  (never f32 -> T -> f32)
//   6. two casts of one value to one type => one
//   7. SoftmaxCrossEntropyLoss(Cast(T -> f32)(x), y) => SoftmaxCrossEntropyLoss(x, y)
//   8. Cast(f32 -> T)(SoftmaxCrossEntropyLossGrad(dl, Cast(T -> f32)(x), y))
//        => SoftmaxCrossEntropyLossGrad(dl, x, y) : T
//   9. Cast(f32 -> T)(LayerNormalization(x, s, b)) => LayerNormalization(x, s, b) : T
//  10. LayerNormalizationGrad(Cast(T -> f32)(dy), x, s) => LayerNormalizationGrad(dy, x, s)
//  11. AccumulateGrad(Cast(T -> f32)(g)) => AccumulateGrad(g)  (total stays f32)
//  12. Cast(f32 -> T)(FusedRotaryEmbedding(Cast(T -> f32)(x), c, s))
//        => FusedRotaryEmbedding(x, c, s) : T
//  13. Cast(f32 -> T)(RMSNormalization(x, s)) => RMSNormalization(x, s) : T
//  14. RMSNormalizationGrad(Cast(T -> f32)(dy), x, s) => RMSNormalizationGrad(dy, x, s)
//
// Rules 7 and 8 are exact because the loss kernels upcast each 16-bit score
// on load and compute in f32 (the loss stays f32), and the gradient kernel
// rounds its f32 result once to T, which is what the removed cast did.
// Likewise rule 9 (the LayerNormalization kernels compute Y in f32 and round
// it once to T; only when Y has that one user; LayerNormalizationGrad reads
// X, not Y), rule 10 (the kernels widen dY on load; dX, dScale, dB stay f32)
// and rule 11 (the accumulator stays f32; each 16-bit element is widened on
// load, so it sums the same f32 values), rule 12 (the rotation widens X on
// load, computes in f32 and rounds Y once to T; only when Y has that one
// user), and rules 13 and 14, rules 9 and 10 for RMSNormalization (its
// kernels compute Y in f32 and round it once to T; only when Y has that one
// user; RMSNormalizationGrad reads X, not Y, widens dY on load, and dX and
// dScale stay f32).
// Rules 1-4 move a cast only when the value between the two ops has that one
// user, when the cast converts no more elements after the move than before
// (or meets the opposite cast), and only between ops of one phase (forward or backward), so each op
// keeps its graph.op_id / graph.grad_of. It runs after
// graph-build-training-step: before autodiff, merging casts would sum
// gradients in T instead of f32. See docs/training.md, "Mixed precision".
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseMap.h"

#include <map>

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHCASTMOTION
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

constexpr llvm::StringLiteral kOpIdAttr = "graph.op_id";
constexpr llvm::StringLiteral kGradOfAttr = "graph.grad_of";

Type elementTypeOf(Value v) {
  auto t = dyn_cast<TensorType>(v.getType());
  return t ? t.getElementType() : Type();
}

bool isLowFloat(Type t) { return t && (t.isBF16() || t.isF16()); }

/// Cast(f32 -> bf16|f16): the low type, or null.
Type narrowingTo(CastOp c) {
  Type from = elementTypeOf(c.getInput()), to = elementTypeOf(c.getOutput());
  return from && from.isF32() && isLowFloat(to) ? to : Type();
}

/// Cast(bf16|f16 -> f32): the low type, or null.
Type wideningFrom(CastOp c) {
  Type from = elementTypeOf(c.getInput()), to = elementTypeOf(c.getOutput());
  return isLowFloat(from) && to && to.isF32() ? from : Type();
}

/// Ops that only move elements of their operand 0 into result 0.
bool isLayoutOp(Operation *op) {
  return isa<TransposeOp, ReshapeOp, SqueezeOp, UnsqueezeOp, FlattenOp, SliceOp, ExpandOp,
             GatherOp>(op);
}

/// Backward (autodiff's ops and the transfers that carry backward values).
bool isBackward(Operation *op) { return op->hasAttr(kGradOfAttr) || op->hasAttr("dist.backward"); }

bool samePhase(Operation *a, Operation *b) { return isBackward(a) == isBackward(b); }

int64_t numElements(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.hasStaticShape() ? t.getNumElements() : -1;
}

/// Moving a cast from `from` (the value it converts now) to `to` keeps or
/// shrinks its work (a Slice or a Gather can read fewer elements than it
/// writes, an Expand more), or it meets the opposite cast there, which
/// rule 5 then removes.
bool worthMoving(Value from, Value to, Type low, bool narrowing) {
  if (narrowing) {
    if (auto other = to.getDefiningOp<CastOp>(); other && wideningFrom(other) == low)
      return true;
  } else if (to.hasOneUse()) {
    if (auto other = dyn_cast<CastOp>(*to.getUsers().begin()); other && narrowingTo(other) == low)
      return true;
  }
  int64_t before = numElements(from), after = numElements(to);
  return before >= 0 && after >= 0 && after <= before;
}

void setElementType(Value v, Type element) {
  v.setType(cast<TensorType>(v.getType()).clone(element));
}

struct GraphCastMotionPass : strait::graph::impl::GraphCastMotionBase<GraphCastMotionPass> {
  using GraphCastMotionBase::GraphCastMotionBase;

  /// Rule 1: C(L(x)) => L(C(x)), reusing both ops.
  bool hoistNarrowing(CastOp c) {
    Type low = narrowingTo(c);
    Operation *layout = c.getInput().getDefiningOp();
    if (!low || !layout || !isLayoutOp(layout) || !layout->getResult(0).hasOneUse() ||
        !samePhase(c, layout) || !worthMoving(c.getInput(), layout->getOperand(0), low, true))
      return false;
    Value x = layout->getOperand(0), y = layout->getResult(0);
    c.getOutput().replaceAllUsesWith(y);
    c->moveBefore(layout);
    c->setOperand(0, x);
    c.getOutput().setType(cast<TensorType>(x.getType()).clone(low));
    layout->setOperand(0, c.getOutput());
    setElementType(y, low);
    ++numMoved;
    return true;
  }

  /// Rule 2: every result of a Split cast to one low type => one cast of its
  /// input (the first cast, moved; the others erased).
  bool hoistThroughSplit(SplitOp split) {
    if (!elementTypeOf(split.getInput()).isF32())
      return false;
    SmallVector<CastOp> casts;
    Type low;
    for (Value r : split.getOutputs()) {
      if (r.use_empty())
        continue;
      auto c = r.hasOneUse() ? dyn_cast<CastOp>(*r.getUsers().begin()) : CastOp();
      if (!c || !narrowingTo(c) || (low && narrowingTo(c) != low) || !samePhase(c, split))
        return false;
      low = narrowingTo(c);
      casts.push_back(c);
    }
    if (casts.empty())
      return false;
    for (CastOp c : casts)
      c.getOutput().replaceAllUsesWith(c.getInput());
    CastOp first = casts.front();
    for (CastOp c : llvm::drop_begin(casts))
      erase(c);
    first->moveBefore(split);
    first->setOperand(0, split.getInput());
    first.getOutput().setType(cast<TensorType>(split.getInput().getType()).clone(low));
    split->setOperand(0, first.getOutput());
    for (Value r : split.getOutputs())
      setElementType(r, low);
    ++numMoved;
    return true;
  }

  /// Rule 3: L(C(x)) => C(L(x)), reusing both ops.
  bool sinkWidening(CastOp c) {
    Type low = wideningFrom(c);
    if (!low || !c.getOutput().hasOneUse())
      return false;
    OpOperand &use = *c.getOutput().getUses().begin();
    Operation *layout = use.getOwner();
    if (!isLayoutOp(layout) || use.getOperandNumber() != 0 || !samePhase(c, layout) ||
        !worthMoving(c.getOutput(), layout->getResult(0), low, false))
      return false;
    Value y = layout->getResult(0);
    auto wide = cast<TensorType>(y.getType());
    y.replaceAllUsesWith(c.getOutput());
    layout->setOperand(0, c.getInput());
    setElementType(y, low);
    c->moveAfter(layout);
    c->setOperand(0, y);
    c.getOutput().setType(wide);
    ++numMoved;
    return true;
  }

  /// Rule 4: Concat(C(a), C(b), ...) => C(Concat(a, b, ...)) when every
  /// input is a widening cast from one low type used by the Concat alone.
  bool sinkThroughConcat(ConcatOp concat) {
    SmallVector<CastOp> casts;
    Type low;
    for (Value in : concat.getInputs()) {
      auto c = in.getDefiningOp<CastOp>();
      if (!c || !in.hasOneUse() || !wideningFrom(c) || (low && wideningFrom(c) != low) ||
          !samePhase(c, concat))
        return false;
      low = wideningFrom(c);
      casts.push_back(c);
    }
    if (casts.empty())
      return false;
    Value y = concat.getResult();
    auto wide = cast<TensorType>(y.getType());
    for (auto [i, c] : llvm::enumerate(casts))
      concat->setOperand(i, c.getInput());
    CastOp first = casts.front();
    for (CastOp c : llvm::drop_begin(casts))
      erase(c);
    y.replaceAllUsesWith(first.getOutput());
    setElementType(y, low);
    first->moveAfter(concat);
    first->setOperand(0, y);
    first.getOutput().setType(wide);
    ++numMoved;
    return true;
  }

  /// Rule 5: Cast(f32 -> T)(Cast(T -> f32)(x)) => x.
  bool cancelRoundTrip(CastOp c) {
    Type low = narrowingTo(c);
    auto widen = c.getInput().getDefiningOp<CastOp>();
    if (!low || !widen || wideningFrom(widen) != low)
      return false;
    c.getOutput().replaceAllUsesWith(widen.getInput());
    erase(c);
    if (widen.getOutput().use_empty())
      erase(widen);
    ++numCancelled;
    return true;
  }

  /// Rule 6: a later cast of the same value to the same type, same phase,
  /// becomes the earlier one (same block: the earlier one dominates).
  bool mergeDuplicate(CastOp c) {
    for (Operation *user : c.getInput().getUsers()) {
      auto other = dyn_cast<CastOp>(user);
      if (!other || other == c || other->getBlock() != c->getBlock() ||
          other.getOutput().getType() != c.getOutput().getType() || !samePhase(c, other) ||
          !other->isBeforeInBlock(c))
        continue;
      c.getOutput().replaceAllUsesWith(other.getOutput());
      erase(c);
      ++numMerged;
      return true;
    }
    return false;
  }

  /// Rules 7, 10, 11, 14: an op whose kernel widens the 16-bit operand on
  /// load (the loss's scores, LayerNormalizationGrad's and
  /// RMSNormalizationGrad's dY, AccumulateGrad's gradient) reads the input of
  /// a widening cast itself.
  bool readsLow(OpOperand &operand) {
    auto widen = operand.get().getDefiningOp<CastOp>();
    if (!widen || !wideningFrom(widen))
      return false;
    operand.set(widen.getInput());
    return true;
  }

  /// The input of `v` when it is a widening cast from `low`, else null.
  static Value widenedFrom(Value v, Type low) {
    auto widen = v.getDefiningOp<CastOp>();
    return widen && wideningFrom(widen) == low ? widen.getInput() : Value();
  }

  /// Rules 8, 9, 12, 13: `result`, the narrowing cast c's input, becomes of c's
  /// type `low` (its op rounds its f32 value once to T, as c did) and
  /// replaces c.
  void writeLow(CastOp c, Value result, Type low) {
    setElementType(result, low);
    c.getOutput().replaceAllUsesWith(result);
    erase(c);
  }

  /// Rule 8: C(f32 -> T)(SCEGrad(dl, C(T -> f32)(x), y)) => SCEGrad(dl, x, y)
  /// of type T, when the gradient has that one user.
  bool gradWritesLowScores(CastOp c) {
    Type low = narrowingTo(c);
    auto grad = c.getInput().getDefiningOp<SoftmaxCrossEntropyLossGradOp>();
    if (!low || !grad || !grad.getDScores().hasOneUse())
      return false;
    Value x = widenedFrom(grad.getScores(), low);
    if (!x)
      return false;
    grad.getScoresMutable().assign(x);
    writeLow(c, grad.getDScores(), low);
    ++numLossFolded;
    return true;
  }

  /// Rules 9 and 13: C(f32 -> T)(LayerNormalization(x, s, b)) and
  /// C(f32 -> T)(RMSNormalization(x, s)) => the normalization with a T
  /// result, when Y has that one user.
  bool normWritesLow(CastOp c) {
    Type low = narrowingTo(c);
    Operation *norm = c.getInput().getDefiningOp();
    if (!low || !isa_and_nonnull<LayerNormalizationOp, RMSNormalizationOp>(norm) ||
        !c.getInput().hasOneUse() || !samePhase(c, norm))
      return false;
    writeLow(c, c.getInput(), low);
    ++numNormFolded;
    return true;
  }

  /// Rule 12: C(f32 -> T)(FusedRotaryEmbedding(C(T -> f32)(x), c, s)) =>
  /// FusedRotaryEmbedding(x, c, s) with a T result, when Y has that one user.
  bool rotaryInLow(CastOp c) {
    Type low = narrowingTo(c);
    auto rope = c.getInput().getDefiningOp<FusedRotaryEmbeddingOp>();
    if (!low || !rope || !rope.getY().hasOneUse() || !samePhase(c, rope))
      return false;
    Value x = widenedFrom(rope.getX(), low);
    if (!x)
      return false;
    rope.getXMutable().assign(x);
    writeLow(c, rope.getY(), low);
    ++numRotaryFolded;
    return true;
  }

  void erase(Operation *op) {
    erased.insert(op);
    op->erase();
  }

  /// One sweep over the block; true if anything changed.
  bool sweep(Block &block) {
    bool changed = false;
    erased.clear();
    SmallVector<Operation *> ops;
    for (Operation &op : block)
      ops.push_back(&op);
    for (Operation *op : ops) {
      if (erased.contains(op))
        continue;
      if (auto split = dyn_cast<SplitOp>(op)) {
        changed |= hoistThroughSplit(split);
      } else if (auto concat = dyn_cast<ConcatOp>(op)) {
        changed |= sinkThroughConcat(concat);
      } else if (auto loss = dyn_cast<SoftmaxCrossEntropyLossOp>(op)) {
        bool folded = readsLow(loss.getScoresMutable());
        numLossFolded += folded;
        changed |= folded;
      } else if (auto grad = dyn_cast<LayerNormalizationGradOp>(op)) {
        bool folded = readsLow(grad.getDYMutable());
        numNormFolded += folded;
        changed |= folded;
      } else if (auto grad = dyn_cast<RMSNormalizationGradOp>(op)) {
        bool folded = readsLow(grad.getDYMutable());
        numNormFolded += folded;
        changed |= folded;
      } else if (auto acc = dyn_cast<AccumulateGradOp>(op)) {
        bool folded = readsLow(acc.getGradMutable());
        numAccumulateFolded += folded;
        changed |= folded;
      } else if (auto c = dyn_cast<CastOp>(op)) {
        // A cast with no users left (its round trip cancelled) goes.
        if (c.getOutput().use_empty()) {
          erase(c);
          changed = true;
          continue;
        }
        changed |= cancelRoundTrip(c) || gradWritesLowScores(c) || normWritesLow(c) ||
                   rotaryInLow(c) || mergeDuplicate(c) || hoistNarrowing(c) || sinkWidening(c);
      }
    }
    return changed;
  }

  /// Backward ops of an erased forward cast name the nearest earlier forward
  /// op that is left (ids follow program order), so every graph.grad_of still
  /// names an op.
  void retargetGradOf(func::FuncOp func) {
    std::map<int64_t, int64_t> ids;
    func.walk([&](Operation *op) {
      if (auto id = op->getAttrOfType<IntegerAttr>(kOpIdAttr))
        ids[id.getInt()] = id.getInt();
    });
    if (ids.empty())
      return;
    func.walk([&](Operation *op) {
      auto gradOf = op->getAttrOfType<IntegerAttr>(kGradOfAttr);
      if (!gradOf || ids.count(gradOf.getInt()))
        return;
      auto it = ids.upper_bound(gradOf.getInt());
      int64_t heir = it == ids.begin() ? it->first : std::prev(it)->first;
      op->setAttr(kGradOfAttr, IntegerAttr::get(gradOf.getType(), heir));
    });
  }

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    for (Block &block : func.getBody())
      while (sweep(block)) {
      }
    retargetGradOf(func);
  }

  llvm::SmallPtrSet<Operation *, 16> erased;
};

} // namespace
