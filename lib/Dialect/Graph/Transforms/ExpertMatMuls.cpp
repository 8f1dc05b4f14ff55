//===- ExpertMatMuls.cpp - graph-rewrite-expert-matmuls -------------------===//
//
// Mixture-of-experts layers exported with static shapes (transformers'
// `batched_mm` experts) read each routed token's expert weights from the
// [E, O, I] table and multiply them by batched matmuls:
//   A = GatherND(W, idx[S, 1]) | Gather(W, idx[S], axis 0)    [S, O, I]
//   Y = MatMul(A, B[S, I, N])                                  [S, O, N]
// (or, with transposed experts W [E, I, O], Y = MatMul(B[S, N, I], A)),
// A holds one copy of an expert's weights per routed token (k per token), an
// activation that autodiff keeps for the backward: S * O * I elements, which
// for any real MoE is many times the model. The pass computes the same Y from
// one product of every expert with every slot and a one-hot selection:
//   Z[c, e, o] = (Reshape(Transpose(B), [S*N, I]) @ Reshape(W, [E*O, I])^T)
//   Y[s, o, n] = sum_e mask[c, e] Z[c, e, o],  c = s * N + n,
//   mask[c, e] = (idx[s] == e)
// (a batched [1, E] x [E, O] product per slot column: no weight copies, no
// gather or scatter kernels, and a backward of plain products).
// E * S * N * O elements and E times the FLOPs of the gathered product, but
// one GEMM instead of S memory-bound matrix-vector products; it applies when
// E * N < I (the new activation is smaller). When B repeats each of T tokens
// k times (the gate/up projection: transformers' repeat_interleave), the GEMM
// runs on the T tokens and each token's [k, E] mask rows pick its k slots:
// E / k times the gathered product's FLOPs. The same sums per output element
// (plus exact zeros).
//
// The grouped form (mode=grouped, and mode=auto where the all-experts GEMM
// would do at least twice its FLOPs) computes the routed products only:
//   Y[c, :] = GroupedMatMul(B as [S*N, I], W, idx repeated N times)[c, :]
// whose kernels sort the slot rows by expert and run one GEMM per expert:
// the gathered product's 2 * S * N * I * O FLOPs without its weight copies,
// for any E. See docs/graph-dialect.md, "Expert matmuls".
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinAttributes.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHREWRITEEXPERTMATMULS
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

RankedTensorType staticType(Value v, int64_t rank) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape() || t.getRank() != rank)
    return {};
  return t;
}

/// A batched product of gathered expert weights: Y = MatMul(W[idx], B).
struct ExpertMatMul {
  Operation *gather;
  Value table;   // W [E, O, I]
  Value indices; // the slots' experts: [S] or [S, 1], integer
  Value other;   // B: [S, I, N], or [S, N, I] when `right`
  bool right = false; // Y = MatMul(B, W[idx]) with W [E, I, O] (transposed experts)
  int64_t e, o, i, s, n;
  // When B repeats each of T tokens k times (slot t * k + j reads token t:
  // transformers' repeat_interleave, an Expand or Tile of [T, 1, I] to
  // [T, k, I] seen through views) and N == 1: the tokens [T, 1, I].
  Value tokens;
  int64_t k = 1;
};

/// The [T, 1, I] tokens that `b` (the MatMul's [S, I, 1] operand) repeats k
/// times each, through row-major views, or null.
Value repeatedTokens(Value b, int64_t s, int64_t i, int64_t &k) {
  Operation *op = b.getDefiningOp();
  while (op && isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp>(op))
    op = op->getOperand(0).getDefiningOp();
  if (!op || !isa<ExpandOp, TileOp>(op))
    return {};
  Value u = op->getOperand(0);
  auto ut = staticType(u, 3), rt = staticType(op->getResult(0), 3);
  if (!ut || !rt || ut.getDimSize(1) != 1 || ut.getDimSize(2) != i ||
      rt.getDimSize(0) != ut.getDimSize(0) || rt.getDimSize(2) != i ||
      rt.getDimSize(0) * rt.getDimSize(1) != s)
    return {};
  if (auto tile = dyn_cast<TileOp>(op))
    if (tile.getRepeats() != ArrayRef<int64_t>{1, rt.getDimSize(1), 1})
      return {};
  k = rt.getDimSize(1);
  return u;
}

/// The gather of an [E, ., .] table by [S] or [S, 1] indices that defines
/// `v` (read only by the MatMul), into m.gather/table/indices.
bool matchGather(Value v, ExpertMatMul &m) {
  Operation *gather = v.getDefiningOp();
  if (!gather || !v.hasOneUse())
    return false;
  if (auto g = dyn_cast<GatherNDOp>(gather)) {
    auto it = staticType(g.getIndices(), 2);
    if (g.getBatchDims() != 0 || !it || it.getDimSize(1) != 1)
      return false;
    m.table = g.getData();
    m.indices = g.getIndices();
  } else if (auto g = dyn_cast<GatherOp>(gather)) {
    int64_t axis = static_cast<int64_t>(g.getAxis()); // the table's rank 3: -3 is 0
    if ((axis != 0 && axis != -3) || !staticType(g.getIndices(), 1))
      return false;
    m.table = g.getData();
    m.indices = g.getIndices();
  } else {
    return false;
  }
  m.gather = gather;
  return true;
}

std::optional<ExpertMatMul> matchExpertMatMul(MatMulOp mm) {
  ExpertMatMul m{};
  if (matchGather(mm.getA(), m)) {
    m.other = mm.getB();
  } else if (matchGather(mm.getB(), m)) {
    m.other = mm.getA();
    m.right = true;
  } else {
    return std::nullopt;
  }
  auto wt = staticType(m.table, 3), bt = staticType(m.other, 3);
  auto at = staticType(m.gather->getResult(0), 3);
  if (!wt || !at || !bt || !wt.getElementType().isF32() ||
      bt.getElementType() != wt.getElementType())
    return std::nullopt;
  m.e = wt.getDimSize(0);
  m.o = wt.getDimSize(m.right ? 2 : 1);
  m.i = wt.getDimSize(m.right ? 1 : 2);
  m.s = at.getDimSize(0);
  m.n = bt.getDimSize(m.right ? 1 : 2);
  if (bt.getDimSize(0) != m.s || bt.getDimSize(m.right ? 2 : 1) != m.i)
    return std::nullopt;
  if (m.n == 1)
    m.tokens = repeatedTokens(m.other, m.s, m.i, m.k);
  return m;
}

/// The all-experts form applies where its product is smaller than the
/// gathered weights.
bool denseApplies(const ExpertMatMul &m) { return m.e * m.n < m.i; }

/// Rows of the all-experts GEMM against the routed slot rows: the FLOPs of
/// the dense form over the grouped form's.
double denseOverGrouped(const ExpertMatMul &m) {
  double rows = m.tokens ? double(m.s / m.k) : double(m.s * m.n);
  return double(m.e) * rows / double(m.s * m.n);
}

enum class Form { Gathered, Dense, Grouped };

/// The form `mode` gives this product (Gathered: left as it is).
Form chooseForm(StringRef mode, const ExpertMatMul &m) {
  if (mode == "grouped")
    return Form::Grouped;
  if (mode == "dense")
    return denseApplies(m) ? Form::Dense : Form::Gathered;
  // auto: the grouped kernel's gather and scatter of the rows and its E
  // small GEMMs cost about as much as a product of twice its FLOPs.
  if (!denseApplies(m) || denseOverGrouped(m) >= 2.0)
    return Form::Grouped;
  return Form::Dense;
}

/// A constant [1, 1, E] of `type`'s integer element type holding e + shift.
Value expertIds(OpBuilder &b, Location loc, IntegerType type, int64_t e, int64_t shift) {
  SmallVector<APInt> ids;
  for (int64_t k = 0; k < e; ++k)
    ids.push_back(APInt(type.getWidth(), k + shift, /*isSigned=*/true));
  auto t = RankedTensorType::get({1, 1, e}, type);
  return b.create<ConstantOp>(loc, cast<ElementsAttr>(DenseElementsAttr::get(t, ids)))
      .getResult();
}

Value rewrite(OpBuilder &b, MatMulOp mm, const ExpertMatMul &m) {
  Location loc = mm.getLoc();
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) -> Value {
    if (cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    return b.create<ReshapeOp>(loc, v, shape, 0).getResult();
  };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) -> Value {
    return b.create<TransposeOp>(loc, v, perm).getResult();
  };
  Type f = cast<RankedTensorType>(m.table.getType()).getElementType();
  int64_t sn = m.s * m.n;
  // Z[c, e * O + o] = sum_i B[s, i, n] W[e, o, i] for every slot column
  // c = s * N + n and every expert: one GEMM (graph-fold-transposes makes the
  // weight's Transpose a transB flag).
  // With repeated tokens, each token's products serve its k slots: T = S / k
  // rows, and each row of the selection below picks k experts.
  int64_t rows = m.tokens ? m.s / m.k : sn, picks = m.tokens ? m.k : 1;
  Value bsn = m.tokens  ? reshape(m.tokens, {rows, m.i})
              : m.right ? reshape(m.other, {sn, m.i})
                        : reshape(transpose(m.other, {0, 2, 1}), {sn, m.i});
  Value wt = m.right ? reshape(transpose(m.table, {1, 0, 2}), {m.i, m.e * m.o})
                     : transpose(reshape(m.table, {m.e * m.o, m.i}), {1, 0});
  Value z = reshape(b.create<MatMulOp>(loc, bsn, wt).getResult(), {rows, m.e, m.o});
  // mask[c, 0, e] = 1 where slot s routes to expert e (idx[s] == e, or e - E
  // for a negative index), else 0: small, and built from integers only.
  auto it = cast<IntegerType>(cast<RankedTensorType>(m.indices.getType()).getElementType());
  Value idx = reshape(m.indices, {m.s, 1, 1});
  auto hits = [&](int64_t shift) -> Value {
    Value eq = b.create<EqualOp>(loc, idx, expertIds(b, loc, it, m.e, shift)).getResult();
    return b.create<CastOp>(loc, eq, f).getResult();
  };
  Value direct = hits(0);
  Value wrapped = hits(-m.e);
  Value mask = b.create<AddOp>(loc, direct, wrapped).getResult(); // [S, 1, E]
  if (m.n != 1)
    mask = b.create<ExpandOp>(loc, mask, ArrayRef<int64_t>{m.s, m.n, m.e}).getResult();
  mask = reshape(mask, {rows, picks, m.e});
  // Y[c, j, :] = mask[c, j, :] @ Z[c]: each slot's row of its expert.
  Value y = b.create<MatMulOp>(loc, mask, z).getResult(); // [rows, picks, O]
  if (m.right)
    return reshape(y, {m.s, m.n, m.o});
  return transpose(reshape(y, {m.s, m.n, m.o}), {0, 2, 1});
}

/// Y = GroupedMatMul(B as slot rows [S*N, I], W, idx per row): the routed
/// products only, W read in place ([E, O, I] with transB, or [E, I, O]).
Value rewriteGrouped(OpBuilder &b, MatMulOp mm, const ExpertMatMul &m) {
  Location loc = mm.getLoc();
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) -> Value {
    if (cast<RankedTensorType>(v.getType()).getShape() == shape)
      return v;
    return b.create<ReshapeOp>(loc, v, shape, 0).getResult();
  };
  int64_t sn = m.s * m.n;
  Value x = (m.right || m.n == 1)
                ? reshape(m.other, {sn, m.i})
                : reshape(b.create<TransposeOp>(loc, m.other, ArrayRef<int64_t>{0, 2, 1}).getResult(),
                          {sn, m.i});
  Value idx = m.indices;
  if (m.n != 1)
    idx = b.create<ExpandOp>(loc, reshape(idx, {m.s, 1}), ArrayRef<int64_t>{m.s, m.n}).getResult();
  idx = reshape(idx, {sn});
  Value y = b.create<GroupedMatMulOp>(loc, x, m.table, idx, m.right ? 0 : 1).getResult();
  if (m.right || m.n == 1)
    return reshape(y, m.right ? ArrayRef<int64_t>{m.s, m.n, m.o} : ArrayRef<int64_t>{m.s, m.o, 1});
  return b.create<TransposeOp>(loc, reshape(y, {m.s, m.n, m.o}), ArrayRef<int64_t>{0, 2, 1})
      .getResult();
}

struct RewriteExpertMatMulsPass
    : strait::graph::impl::GraphRewriteExpertMatMulsBase<RewriteExpertMatMulsPass> {
  using Base::Base;
  void runOnOperation() override {
    if (mode != "auto" && mode != "grouped" && mode != "dense" && mode != "gathered") {
      getOperation().emitError("graph-rewrite-expert-matmuls: mode '")
          << mode << "' is not auto, grouped, dense or gathered";
      return signalPassFailure();
    }
    if (mode == "gathered")
      return;
    SmallVector<MatMulOp> matmuls;
    getOperation().walk([&](MatMulOp mm) { matmuls.push_back(mm); });
    for (MatMulOp mm : matmuls) {
      std::optional<ExpertMatMul> m = matchExpertMatMul(mm);
      if (!m)
        continue;
      Form form = chooseForm(mode, *m);
      if (form == Form::Gathered)
        continue;
      OpBuilder b(mm);
      Value y = form == Form::Grouped ? rewriteGrouped(b, mm, *m) : rewrite(b, mm, *m);
      if (y.getType() != mm.getY().getType()) {
        mm.emitOpError("graph-rewrite-expert-matmuls built ")
            << y.getType() << " for " << mm.getY().getType();
        return signalPassFailure();
      }
      Value repeated = m->other;
      mm.getY().replaceAllUsesWith(y);
      mm.erase();
      m->gather->erase();
      // The repetition of the tokens, when nothing else reads it.
      while (m->tokens && repeated && repeated.use_empty()) {
        Operation *op = repeated.getDefiningOp();
        if (!op || !isa<ReshapeOp, UnsqueezeOp, SqueezeOp, FlattenOp, ExpandOp, TileOp>(op))
          break;
        repeated = op->getOperand(0);
        op->erase();
      }
      ++numRewritten;
      if (form == Form::Grouped)
        ++numGrouped;
    }
  }
};

} // namespace
