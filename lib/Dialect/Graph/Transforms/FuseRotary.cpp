//===- FuseRotary.cpp - graph-fuse-rotary ---------------------------------===//
//
// LLaMA-style exports apply rotary position embeddings in the rotate-half
// form: Add(Mul(x, cos), Mul(Concat(Neg(Slice(x, h, D)), Slice(x, 0, h)),
// sin)) over the last axis (h = D / 2). Each Slice, the Neg, the Concat and
// the products are kernels forward, and their gradients (SliceGrad, Split,
// ...) backward. The pass replaces the chain by one
// graph.FusedRotaryEmbedding, whose gradient is the same op with
// adjoint = 1. See docs/graph-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <climits>

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHFUSEROTARY
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

/// The operand that is not `x` of a binary op whose other operand is x,
/// or null.
Value otherThan(Operation *op, Value x) {
  if (op->getOperand(0) == x)
    return op->getOperand(1);
  if (op->getOperand(1) == x)
    return op->getOperand(0);
  return Value();
}

/// Whether `v` is Slice(x, [from, to)) over x's last axis, step 1, with one
/// user; sets x.
bool isHalf(Value v, int64_t from, int64_t to, Value &x) {
  auto s = v.getDefiningOp<SliceOp>();
  if (!s || !v.hasOneUse())
    return false;
  auto t = dyn_cast<RankedTensorType>(s.getData().getType());
  if (!t || t.getRank() < 1 || s.getAxes().size() != 1 || s.getStarts().size() != 1 ||
      s.getEnds().size() != 1 || s.getSteps().size() != 1)
    return false;
  int64_t r = t.getRank(), axis = s.getAxes()[0], d = t.getShape().back();
  if (axis < 0)
    axis += r;
  int64_t end = s.getEnds()[0];
  if (end > d)
    end = d;
  if (axis != r - 1 || s.getSteps()[0] != 1 || s.getStarts()[0] != from || end != to)
    return false;
  if (x && x != s.getData())
    return false;
  x = s.getData();
  return true;
}

/// x when `rot` is Concat(Neg(Slice(x, h, D)), Slice(x, 0, h)) over the last
/// axis with single users, else null.
Value rotateHalfOf(Value rot) {
  auto c = rot.getDefiningOp<ConcatOp>();
  auto t = dyn_cast<RankedTensorType>(rot.getType());
  if (!c || !rot.hasOneUse() || !t || !t.hasStaticShape() || c.getInputs().size() != 2)
    return Value();
  int64_t r = t.getRank(), axis = c.getAxis(), d = t.getShape().back();
  if (axis < 0)
    axis += r;
  if (axis != r - 1 || d % 2 != 0)
    return Value();
  auto neg = c.getInputs()[0].getDefiningOp<NegOp>();
  if (!neg || !neg->getResult(0).hasOneUse())
    return Value();
  Value x;
  if (!isHalf(neg->getOperand(0), d / 2, d, x) || !isHalf(c.getInputs()[1], 0, d / 2, x))
    return Value();
  return x;
}

struct FuseRotaryPass : strait::graph::impl::GraphFuseRotaryBase<FuseRotaryPass> {
  void runOnOperation() override {
    SmallVector<AddOp> adds;
    getOperation().walk([&](AddOp op) { adds.push_back(op); });
    for (AddOp add : adds)
      fuse(add);
  }

  void fuse(AddOp add) {
    auto type = dyn_cast<RankedTensorType>(add.getType());
    if (!type || !type.hasStaticShape())
      return;
    Type elt = type.getElementType();
    if (!elt.isF32() && !elt.isBF16() && !elt.isF16())
      return;
    for (unsigned i = 0; i < 2; ++i) {
      auto direct = add->getOperand(i).getDefiningOp<MulOp>();
      auto rotated = add->getOperand(1 - i).getDefiningOp<MulOp>();
      if (!direct || !rotated || !direct->getResult(0).hasOneUse() ||
          !rotated->getResult(0).hasOneUse() || direct == rotated)
        continue;
      for (unsigned j = 0; j < 2; ++j) {
        Value rot = rotated->getOperand(j), sin = rotated->getOperand(1 - j);
        Value x = rotateHalfOf(rot);
        if (!x || x.getType() != type)
          continue;
        Value cos = otherThan(direct, x);
        if (!cos || direct.getType() != type || rotated.getType() != type || !fits(cos, elt) ||
            !fits(sin, elt))
          continue;
        OpBuilder b(add);
        auto fused = b.create<FusedRotaryEmbeddingOp>(
            add.getLoc(), TypeRange{type}, ValueRange{x, cos, sin}, ArrayRef<NamedAttribute>{});
        Operation *concat = rot.getDefiningOp();
        add.getResult().replaceAllUsesWith(fused.getY());
        add->erase();
        rotated->erase();
        direct->erase();
        auto c = cast<ConcatOp>(concat);
        Operation *neg = c.getInputs()[0].getDefiningOp(), *lo = c.getInputs()[1].getDefiningOp();
        Operation *hi = neg->getOperand(0).getDefiningOp();
        for (Operation *op : {concat, neg, hi, lo})
          op->erase();
        ++numFused;
        return;
      }
    }
  }

  /// Cos / Sin: f32 or X's element type, ranked and static.
  static bool fits(Value v, Type elt) {
    auto t = dyn_cast<RankedTensorType>(v.getType());
    return t && t.hasStaticShape() && (t.getElementType().isF32() || t.getElementType() == elt);
  }
};

} // namespace
