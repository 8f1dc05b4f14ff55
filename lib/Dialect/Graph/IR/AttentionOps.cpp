//===- AttentionOps.cpp - FusedAttention and FusedAttentionGrad -----------===//
//
// One shape function for the attention pair: the forward op's inference,
// the gradient op's inference and its verifier check Q, Kt, V and the
// optional Bias the same way (constraint 11 of docs/graph-dialect.md).
//
//===----------------------------------------------------------------------===//

#include "InferHelpers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::detail;

static constexpr int64_t kDyn = ShapedType::kDynamic;

namespace {

/// Y and LSE of an attention over Q, Kt, V (and Bias).
struct AttentionTypes {
  Type y, lse;
};

std::string dimsStr(ArrayRef<int64_t> shape) {
  std::string s;
  llvm::raw_string_ostream os(s);
  os << "[";
  llvm::interleave(
      shape, os, [&](int64_t d) { d == kDyn ? os << "?" : os << d; }, "x");
  os << "]";
  return s;
}

bool sameDim(int64_t a, int64_t b) { return a == kDyn || b == kDyn || a == b; }

/// The first static one of `dims`, or dynamic.
int64_t mergeDims(std::initializer_list<int64_t> dims) {
  for (int64_t d : dims)
    if (d != kDyn)
      return d;
  return kDyn;
}

/// The bias is f32 or of Q's element type.
LogicalResult checkBiasType(OptLoc loc, StringRef op, Value bias, Type qElt) {
  Type elt = tensorOf(bias).getElementType();
  if (!elt.isF32() && elt != qElt)
    return emitOptionalError(loc, op, ": Bias element type ", elt, " is neither f32 nor Q's ",
                             qElt);
  return success();
}

/// The bias broadcasts to the scores' shape `scores` without widening it.
LogicalResult checkBiasShape(OptLoc loc, StringRef op, Value bias, ArrayRef<int64_t> scores) {
  TensorType bt = tensorOf(bias);
  if (!bt.hasRank())
    return success();
  ArrayRef<int64_t> b = bt.getShape();
  if (b.size() > scores.size())
    return emitOptionalError(loc, op, ": Bias rank ", b.size(), " exceeds Q's rank ",
                             scores.size());
  size_t off = scores.size() - b.size();
  for (size_t i = 0; i < b.size(); ++i)
    if (b[i] != 1 && !sameDim(b[i], scores[off + i]))
      return emitOptionalError(loc, op, ": Bias ", dimsStr(b), " does not broadcast to the scores ",
                               dimsStr(scores), " (dimension ", off + i, ")");
  return success();
}

/// The permutation attributes of the attention pair (absent: identity)
/// and the select attributes of Q, Kt and V (absent: the whole tensor).
struct AttentionPerms {
  std::optional<ArrayRef<int64_t>> q, kt, v, y;
  std::optional<ArrayRef<int64_t>> qSel, ktSel, vSel;
};

template <typename OpOrAdaptor>
AttentionPerms attentionPerms(OpOrAdaptor op) {
  return AttentionPerms{op.getQPerm(),   op.getKtPerm(),   op.getVPerm(), op.getYPerm(),
                        op.getQSelect(), op.getKtSelect(), op.getVSelect()};
}

/// The operand a tensor of type `t` stands for under `select` (named
/// `attr`), `[axis, index]`: its slice at `index` along `axis`, that
/// dimension removed (the tensor itself without a select or a rank).
FailureOr<TensorType> selectedType(OptLoc loc, StringRef op, StringRef attr, TensorType t,
                                   std::optional<ArrayRef<int64_t>> select) {
  if (!select || !t.hasRank())
    return t;
  if (select->size() != 2)
    return emitOptionalError(loc, op, ": ", attr, " ", dimsStr(*select),
                             " must be [axis, index]");
  int64_t axis = (*select)[0], index = (*select)[1], rank = t.getRank();
  if (axis < 0 || axis >= rank)
    return emitOptionalError(loc, op, ": ", attr, " axis ", axis, " is out of range for ",
                             dimsStr(t.getShape()));
  int64_t n = t.getShape()[axis];
  if (index < 0 || (n != kDyn && index >= n))
    return emitOptionalError(loc, op, ": ", attr, " index ", index,
                             " is out of range for dimension ", axis, " of ",
                             dimsStr(t.getShape()));
  SmallVector<int64_t> shape(t.getShape());
  shape.erase(shape.begin() + axis);
  return TensorType(RankedTensorType::get(shape, t.getElementType()));
}

/// The selected types of Q, Kt and V (selectedType).
FailureOr<std::array<TensorType, 3>> selectedTypes(OptLoc loc, StringRef op, Value q, Value kt,
                                                   Value v, const AttentionPerms &perms) {
  std::array<TensorType, 3> out;
  std::pair<Value, std::optional<ArrayRef<int64_t>>> in[] = {
      {q, perms.qSel}, {kt, perms.ktSel}, {v, perms.vSel}};
  const char *names[] = {"q_select", "kt_select", "v_select"};
  for (size_t i = 0; i < 3; ++i) {
    FailureOr<TensorType> t = selectedType(loc, op, names[i], tensorOf(in[i].first), in[i].second);
    if (failed(t))
      return failure();
    out[i] = *t;
  }
  return out;
}

/// `perm` (named `attr`) is a permutation of `rank` dimensions.
LogicalResult checkPerm(OptLoc loc, StringRef op, StringRef attr,
                        std::optional<ArrayRef<int64_t>> perm, int64_t rank) {
  if (!perm)
    return success();
  SmallVector<bool> seen(rank, false);
  bool ok = static_cast<int64_t>(perm->size()) == rank;
  for (int64_t p : *perm) {
    ok = ok && p >= 0 && p < rank && !seen[p];
    if (ok)
      seen[p] = true;
  }
  if (!ok)
    return emitOptionalError(loc, op, ": ", attr, " ", dimsStr(*perm),
                             " is not a permutation of the operands' ", rank, " dimensions");
  return success();
}

/// The logical operand of a tensor under `perm`: dimension i is the
/// tensor's perm[i] (the tensor itself without a permutation or rank).
TensorType logicalType(TensorType t, std::optional<ArrayRef<int64_t>> perm) {
  if (!perm || !t.hasRank())
    return t;
  SmallVector<int64_t> shape;
  for (int64_t p : *perm)
    shape.push_back(t.getShape()[p]);
  return RankedTensorType::get(shape, t.getElementType());
}

/// The tensor that holds a logical `shape` laid out by `perm`.
SmallVector<int64_t> tensorShape(ArrayRef<int64_t> shape, std::optional<ArrayRef<int64_t>> perm) {
  SmallVector<int64_t> s(shape);
  if (perm)
    for (size_t i = 0; i < shape.size(); ++i)
      s[(*perm)[i]] = shape[i];
  return s;
}

/// Constraint 11: Q [b..., Tq, D], Kt [b..., D, Tk], V [b..., Tk, Dv] of one
/// element type (f32, bf16 or f16), rank >= 2, identical batch dims; Bias
/// broadcasts to [b..., Tq, Tk]. Y is [b..., Tq, Dv] of Q's element type,
/// LSE [b..., Tq] f32. The shapes are the logical ones (under q_perm,
/// kt_perm, v_perm); Y's type is the tensor laid out by y_perm.
FailureOr<AttentionTypes> attentionTypes(OptLoc loc, StringRef op, Value q, Value kt, Value v,
                                         Value bias, const AttentionPerms &perms) {
  FailureOr<std::array<TensorType, 3>> sel = selectedTypes(loc, op, q, kt, v, perms);
  if (failed(sel))
    return failure();
  {
    int64_t rank = (*sel)[0].hasRank() ? (*sel)[0].getRank() : -1;
    std::pair<TensorType, std::optional<ArrayRef<int64_t>>> checks[] = {
        {(*sel)[0], perms.q}, {(*sel)[1], perms.kt}, {(*sel)[2], perms.v}, {(*sel)[0], perms.y}};
    const char *names[] = {"q_perm", "kt_perm", "v_perm", "y_perm"};
    for (size_t i = 0; i < 4; ++i) {
      TensorType t = checks[i].first;
      if (t.hasRank() &&
          failed(checkPerm(loc, op, names[i], checks[i].second, i == 3 ? rank : t.getRank())))
        return failure();
    }
  }
  TensorType qt = logicalType((*sel)[0], perms.q), kt2 = logicalType((*sel)[1], perms.kt),
             vt = logicalType((*sel)[2], perms.v);
  Type elt = qt.getElementType();
  if (kt2.getElementType() != elt || vt.getElementType() != elt)
    return emitOptionalError(loc, op, ": Q, Kt and V element types differ (", elt, ", ",
                             kt2.getElementType(), ", ", vt.getElementType(), ")");
  if (!elt.isF32() && !elt.isBF16() && !elt.isF16())
    return emitOptionalError(loc, op, ": element type ", elt, " is not f32, bf16 or f16");
  if (bias && failed(checkBiasType(loc, op, bias, elt)))
    return failure();
  Type f32 = Float32Type::get(elt.getContext());
  if (!qt.hasRank() || !kt2.hasRank() || !vt.hasRank())
    return AttentionTypes{UnrankedTensorType::get(elt), UnrankedTensorType::get(f32)};
  int64_t rank = qt.getRank();
  if (rank < 2)
    return emitOptionalError(loc, op, ": Q must have rank >= 2 ([b..., Tq, D]), got ",
                             dimsStr(qt.getShape()));
  if (kt2.getRank() != rank || vt.getRank() != rank)
    return emitOptionalError(loc, op, ": Q, Kt and V must have the same rank, got ",
                             dimsStr(qt.getShape()), ", ", dimsStr(kt2.getShape()), ", ",
                             dimsStr(vt.getShape()));
  ArrayRef<int64_t> qs = qt.getShape(), ks = kt2.getShape(), vs = vt.getShape();
  Shape batch;
  for (int64_t i = 0; i < rank - 2; ++i) {
    if (!sameDim(qs[i], ks[i]) || !sameDim(qs[i], vs[i]) || !sameDim(ks[i], vs[i]))
      return emitOptionalError(loc, op, ": batch dimension ", i, " differs: Q ", dimsStr(qs),
                               ", Kt ", dimsStr(ks), ", V ", dimsStr(vs));
    batch.push_back(mergeDims({qs[i], ks[i], vs[i]}));
  }
  int64_t tq = qs[rank - 2], d = qs[rank - 1];
  int64_t dk = ks[rank - 2], tk = ks[rank - 1];
  int64_t tv = vs[rank - 2], dv = vs[rank - 1];
  if (!sameDim(d, dk))
    return emitOptionalError(loc, op, ": Q ", dimsStr(qs), " and Kt ", dimsStr(ks),
                             " disagree on D (Q's last dimension, Kt's second-to-last)");
  if (!sameDim(tk, tv))
    return emitOptionalError(loc, op, ": Kt ", dimsStr(ks), " and V ", dimsStr(vs),
                             " disagree on Tk (Kt's last dimension, V's second-to-last)");
  tk = mergeDims({tk, tv});
  if (bias) {
    Shape scores = batch;
    scores.append({tq, tk});
    if (failed(checkBiasShape(loc, op, bias, scores)))
      return failure();
  }
  Shape y = batch, lse = batch;
  y.append({tq, dv});
  lse.push_back(tq);
  return AttentionTypes{RankedTensorType::get(tensorShape(y, perms.y), elt),
                        RankedTensorType::get(lse, f32)};
}

} // namespace

STRAIT_INFER(FusedAttentionOp) {
  AttentionPerms perms = attentionPerms(adaptor);
  FailureOr<AttentionTypes> t =
      attentionTypes(loc, "FusedAttention", adaptor.getQ(), adaptor.getKt(), adaptor.getV(),
                     adaptor.getBias(), perms);
  if (failed(t))
    return failure();
  types.push_back(t->y);
  types.push_back(t->lse);
  return success();
}

/// With packed_grad = 1: Q, Kt and V are tensors of one type whose selects
/// take indices 0, 1, 2 of one axis of size 3 (or dynamic), each once.
static LogicalResult checkPackedGrad(OptLoc loc, Value q, Value kt, Value v,
                                     const AttentionPerms &perms) {
  StringRef op = "FusedAttentionGrad";
  if (q.getType() != kt.getType() || q.getType() != v.getType())
    return emitOptionalError(loc, op, ": packed_grad needs Q, Kt and V of one type, got ",
                             q.getType(), ", ", kt.getType(), ", ", v.getType());
  std::optional<ArrayRef<int64_t>> sel[3] = {perms.qSel, perms.ktSel, perms.vSel};
  bool seen[3] = {false, false, false};
  bool ok = sel[0].has_value() && sel[0]->size() == 2;
  for (auto &s : sel) {
    ok = ok && s && s->size() == 2 && (*s)[0] == (*sel[0])[0] && (*s)[1] >= 0 && (*s)[1] < 3 &&
         !seen[(*s)[1]];
    if (ok)
      seen[(*s)[1]] = true;
  }
  auto t = dyn_cast<RankedTensorType>(q.getType());
  if (ok && t) {
    int64_t axis = (*sel[0])[0];
    ok = axis >= 0 && axis < t.getRank() &&
         (t.getShape()[axis] == 3 || t.getShape()[axis] == kDyn);
  }
  if (!ok)
    return emitOptionalError(loc, op,
                             ": packed_grad needs q_select, kt_select and v_select to take "
                             "indices 0, 1, 2 of one axis of size 3, each once");
  return success();
}

/// dQ, dKt and dV have the types of the (selected) operands: never packed.
/// With packed_grad = 1, one result: the packed tensor's gradient, of its type.
STRAIT_INFER(FusedAttentionGradOp) {
  AttentionPerms perms = attentionPerms(adaptor);
  if (failed(attentionTypes(loc, "FusedAttentionGrad", adaptor.getQ(), adaptor.getKt(),
                            adaptor.getV(), adaptor.getBias(), perms)))
    return failure();
  if (adaptor.getPackedGrad() == 1) {
    if (failed(checkPackedGrad(loc, adaptor.getQ(), adaptor.getKt(), adaptor.getV(), perms)))
      return failure();
    types.push_back(adaptor.getQ().getType());
    return success();
  }
  FailureOr<std::array<TensorType, 3>> sel = selectedTypes(
      loc, "FusedAttentionGrad", adaptor.getQ(), adaptor.getKt(), adaptor.getV(), perms);
  if (failed(sel))
    return failure();
  for (TensorType t : *sel)
    types.push_back(t);
  return success();
}

/// dQ, dKt, dV; or dQKV (packed_grad).
void FusedAttentionGradOp::getAsmResultNames(OpAsmSetValueNameFn setNameFn) {
  if (getNumResults() == 1) {
    setNameFn(getResult(0), "dQKV");
    return;
  }
  const char *names[] = {"dQ", "dKt", "dV"};
  for (auto [r, name] : llvm::zip(getResults(), names))
    setNameFn(r, name);
}

/// dY and Y have the forward op's Y type (laid out by y_perm), LSE its f32
/// statistic type.
LogicalResult FusedAttentionGradOp::verify() {
  AttentionPerms perms = attentionPerms(*this);
  FailureOr<AttentionTypes> t =
      attentionTypes(getLoc(), "FusedAttentionGrad", getQ(), getKt(), getV(), getBias(), perms);
  if (failed(t))
    return failure();
  auto check = [&](Value v, StringRef name, Type expected, StringRef what) -> LogicalResult {
    if (failed(verifyCompatibleShape(v.getType(), expected)) ||
        getElementTypeOrSelf(v) != getElementTypeOrSelf(expected))
      return emitOpError(name) << " type " << v.getType() << " differs from " << what << " "
                               << expected;
    return success();
  };
  if (failed(check(getDY(), "dY", t->y, "the forward Y's")) ||
      failed(check(getY(), "Y", t->y, "the forward Y's")) ||
      failed(check(getLSE(), "LSE", t->lse, "the forward LSE's")))
    return failure();
  return success();
}
