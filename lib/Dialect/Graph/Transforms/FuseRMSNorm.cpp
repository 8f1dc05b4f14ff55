//===- FuseRMSNorm.cpp - graph-fuse-rmsnorm -------------------------------===//
//
// LLaMA-style exports spell RMSNorm as
//   Pow(x, 2) -> ReduceMean(trailing axes, keepdims) -> Add(eps) -> Sqrt
//   -> Reciprocal | Div(1, .) -> Mul(x, .) -> Mul(weight, .)
// (six or seven kernels forward, more backward, and the reduction cuts the
// elementwise fusion groups). The matcher walks the chain from each Pow and
// returns the ops it would replace; the pass builds one RMSNormalization per
// match. See docs/graph-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "FusionUtils.h"

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"
#include "strait/Dialect/Graph/ShapeFunctions.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Matchers.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHFUSERMSNORM
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;
using strait::graph::fusion::splatValue;

namespace {

/// One decomposed RMSNorm: x, weight, the attributes and the chain's ops in
/// program order (the last one's result is Y).
struct RMSNormMatch {
  Value x, weight;
  int64_t axis = -1;
  float epsilon = 0;
  SmallVector<Operation *, 8> chain;
};

/// The only user of `v`, when it has exactly one use.
Operation *soleUser(Value v) {
  return v.hasOneUse() ? *v.getUsers().begin() : nullptr;
}

/// For a binary op `op` with `v` as one operand, the other operand.
Value otherOperand(Operation *op, Value v) {
  if (op->getNumOperands() != 2)
    return Value();
  if (op->getOperand(0) == v)
    return op->getOperand(1);
  return op->getOperand(1) == v ? op->getOperand(0) : Value();
}

bool isF32Tensor(Value v) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  return t && t.getElementType().isF32();
}

/// Matches the chain that starts at `pow`; nullopt when any step differs.
std::optional<RMSNormMatch> matchRMSNorm(PowOp pow) {
  RMSNormMatch m;
  m.x = pow.getOperand(0);
  if (!isF32Tensor(m.x) || splatValue(pow.getOperand(1)) != 2.0 ||
      pow.getType() != m.x.getType())
    return std::nullopt;
  auto xt = cast<RankedTensorType>(m.x.getType());
  int64_t rank = xt.getRank();
  m.chain.push_back(pow);

  // ReduceMean over trailing axes a..rank-1, keeping them as 1.
  auto mean = dyn_cast_or_null<ReduceMeanOp>(soleUser(pow.getResult()));
  if (!mean || mean.getKeepdims() != 1 || mean.getAxes().empty())
    return std::nullopt;
  ArrayRef<int64_t> axes = mean.getAxes();
  for (size_t i = 0; i < axes.size(); ++i)
    if (axes[i] != rank - static_cast<int64_t>(axes.size()) + static_cast<int64_t>(i))
      return std::nullopt;
  m.axis = axes.front();
  m.chain.push_back(mean);

  // + eps (a scalar constant, either side, not widening the statistics).
  auto add = dyn_cast_or_null<AddOp>(soleUser(mean.getResult()));
  if (!add || add.getType() != mean.getType())
    return std::nullopt;
  std::optional<double> eps = splatValue(otherOperand(add, mean.getResult()));
  if (!eps || cast<ShapedType>(otherOperand(add, mean.getResult()).getType()).getNumElements() != 1)
    return std::nullopt;
  m.epsilon = static_cast<float>(*eps);
  m.chain.push_back(add);

  auto sqrt = dyn_cast_or_null<SqrtOp>(soleUser(add.getResult()));
  if (!sqrt)
    return std::nullopt;
  m.chain.push_back(sqrt);

  // x * (1 / sqrt): Reciprocal or Div(1, sqrt) then Mul with x; or Div(x, sqrt).
  Operation *next = soleUser(sqrt.getResult());
  Value normed;
  if (auto div = dyn_cast_or_null<DivOp>(next);
      div && div.getOperand(1) == sqrt.getResult() && div.getOperand(0) == m.x) {
    m.chain.push_back(div);
    normed = div.getResult();
  } else {
    Value inv;
    if (auto rcp = dyn_cast_or_null<ReciprocalOp>(next)) {
      inv = rcp.getResult();
    } else if (auto d = dyn_cast_or_null<DivOp>(next);
               d && d.getOperand(1) == sqrt.getResult() && splatValue(d.getOperand(0)) == 1.0 &&
               d.getType() == sqrt.getType()) {
      inv = d.getResult();
    }
    if (!inv)
      return std::nullopt;
    m.chain.push_back(next);
    auto mul = dyn_cast_or_null<MulOp>(soleUser(inv));
    if (!mul || otherOperand(mul, inv) != m.x)
      return std::nullopt;
    m.chain.push_back(mul);
    normed = mul.getResult();
  }
  if (normed.getType() != m.x.getType())
    return std::nullopt;

  // * weight (either side): broadcasts to the normalized dims, leaves x's type.
  auto scale = dyn_cast_or_null<MulOp>(soleUser(normed));
  if (!scale || scale.getType() != m.x.getType())
    return std::nullopt;
  m.weight = otherOperand(scale, normed);
  auto wt = dyn_cast<RankedTensorType>(m.weight.getType());
  if (!wt || !wt.getElementType().isF32())
    return std::nullopt;
  ArrayRef<int64_t> norm = xt.getShape().drop_front(m.axis);
  FailureOr<Shape> b = broadcastShapes(std::nullopt, {norm, wt.getShape()});
  if (failed(b) || ArrayRef<int64_t>(*b) != norm)
    return std::nullopt;
  m.chain.push_back(scale);
  return m;
}

struct FuseRMSNormPass : strait::graph::impl::GraphFuseRMSNormBase<FuseRMSNormPass> {
  void runOnOperation() override {
    SmallVector<PowOp> pows;
    getOperation().walk([&](PowOp p) { pows.push_back(p); });
    for (PowOp pow : pows) {
      std::optional<RMSNormMatch> m = matchRMSNorm(pow);
      if (!m)
        continue;
      Operation *last = m->chain.back();
      OpBuilder b(last);
      auto fused = b.create<RMSNormalizationOp>(
          last->getLoc(), m->x.getType(), m->x, m->weight,
          b.getI64IntegerAttr(m->axis), b.getF32FloatAttr(m->epsilon),
          b.getI64IntegerAttr(1));
      last->getResult(0).replaceAllUsesWith(fused.getY());
      // The exponent, epsilon and numerator constants go too when the chain
      // was their only user.
      fusion::eraseChain(m->chain);
      ++numFused;
    }
  }
};

} // namespace
