//===- ExpertMatMuls.cpp - graph-rewrite-expert-matmuls -------------------===//
//
// Mixture-of-experts layers exported with static shapes (transformers'
// `batched_mm` experts) read each routed token's expert weights from the
// [E, O, I] table and multiply them by batched matmuls:
//   A = GatherND(W, idx[S, 1]) | Gather(W, idx[S], axis 0)    [S, O, I]
//   Y = MatMul(A, B[S, I, N])                                  [S, O, N]
// A holds one copy of an expert's weights per routed token (k per token), an
// activation that autodiff keeps for the backward: S * O * I elements, which
// for any real MoE is many times the model. The pass computes the same Y from
// one product of every expert with every slot and a selection:
//   Z = MatMul(Reshape(W, [E*O, I]), Reshape(Transpose(B), [I, S*N]))
//   Y[s, o, n] = Z[idx[s] * O + o, s * N + n]   (GatherElements on [E, O, S*N])
// E * O * S * N elements and E times the FLOPs of the gathered product, but
// one GEMM instead of S memory-bound matrix-vector products, and no weight
// copies; it applies when E * N < I (the new activation is smaller). The
// same sums per output element (equal up to f32 summation order). See
// docs/graph-dialect.md, "Expert matmuls".
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHREWRITEEXPERTMATMULS
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

/// A batched product of gathered expert weights: Y = MatMul(W[idx], B).
struct ExpertMatMul {
  Operation *gather;
  Value table;   // W [E, O, I]
  Value indices; // the slots' experts: [S] or [S, 1], integer
  int64_t e, o, i, s, n;
};

RankedTensorType staticType(Value v, int64_t rank) {
  auto t = dyn_cast<RankedTensorType>(v.getType());
  if (!t || !t.hasStaticShape() || t.getRank() != rank)
    return {};
  return t;
}

std::optional<ExpertMatMul> matchExpertMatMul(MatMulOp mm) {
  Value a = mm.getA();
  Operation *gather = a.getDefiningOp();
  if (!gather || !a.hasOneUse())
    return std::nullopt;
  ExpertMatMul m{gather, {}, {}, 0, 0, 0, 0, 0};
  if (auto g = dyn_cast<GatherNDOp>(gather)) {
    auto it = staticType(g.getIndices(), 2);
    if (g.getBatchDims() != 0 || !it || it.getDimSize(1) != 1)
      return std::nullopt;
    m.table = g.getData();
    m.indices = g.getIndices();
  } else if (auto g = dyn_cast<GatherOp>(gather)) {
    if ((g.getAxis() != 0 && g.getAxis() != -3) || !staticType(g.getIndices(), 1))
      return std::nullopt;
    m.table = g.getData();
    m.indices = g.getIndices();
  } else {
    return std::nullopt;
  }
  auto wt = staticType(m.table, 3), at = staticType(a, 3), bt = staticType(mm.getB(), 3);
  if (!wt || !at || !bt || !wt.getElementType().isF32() ||
      bt.getElementType() != wt.getElementType())
    return std::nullopt;
  m.e = wt.getDimSize(0);
  m.o = wt.getDimSize(1);
  m.i = wt.getDimSize(2);
  m.s = at.getDimSize(0);
  m.n = bt.getDimSize(2);
  if (bt.getDimSize(0) != m.s || bt.getDimSize(1) != m.i)
    return std::nullopt;
  // Profitable (and only then applied): the all-experts product is smaller
  // than the gathered weights.
  if (m.e * m.n >= m.i)
    return std::nullopt;
  return m;
}

Value rewrite(OpBuilder &b, MatMulOp mm, const ExpertMatMul &m) {
  Location loc = mm.getLoc();
  auto reshape = [&](Value v, ArrayRef<int64_t> shape) -> Value {
    return b.create<ReshapeOp>(loc, v, shape, 0).getResult();
  };
  auto transpose = [&](Value v, ArrayRef<int64_t> perm) -> Value {
    return b.create<TransposeOp>(loc, v, perm).getResult();
  };
  int64_t sn = m.s * m.n;
  Value bm = reshape(transpose(mm.getB(), {1, 0, 2}), {m.i, sn});
  Value wm = reshape(m.table, {m.e * m.o, m.i});
  Value z = b.create<MatMulOp>(loc, wm, bm).getResult();
  Value z3 = reshape(z, {m.e, m.o, sn});
  // Every output element's expert: idx[s] at [0, o, s * N + n].
  Value idx = reshape(m.indices, {1, 1, m.s, 1});
  idx = b.create<ExpandOp>(loc, idx, ArrayRef<int64_t>{1, m.o, m.s, m.n}).getResult();
  idx = reshape(idx, {1, m.o, sn});
  Value picked =
      b.create<GatherElementsOp>(loc, z3, idx, b.getI64IntegerAttr(0)).getResult();
  return transpose(reshape(picked, {m.o, m.s, m.n}), {1, 0, 2});
}

struct RewriteExpertMatMulsPass
    : strait::graph::impl::GraphRewriteExpertMatMulsBase<RewriteExpertMatMulsPass> {
  void runOnOperation() override {
    SmallVector<MatMulOp> matmuls;
    getOperation().walk([&](MatMulOp mm) { matmuls.push_back(mm); });
    for (MatMulOp mm : matmuls) {
      std::optional<ExpertMatMul> m = matchExpertMatMul(mm);
      if (!m)
        continue;
      OpBuilder b(mm);
      Value y = rewrite(b, mm, *m);
      if (y.getType() != mm.getY().getType()) {
        mm.emitOpError("graph-rewrite-expert-matmuls built ")
            << y.getType() << " for " << mm.getY().getType();
        return signalPassFailure();
      }
      mm.getY().replaceAllUsesWith(y);
      mm.erase();
      m->gather->erase();
      ++numRewritten;
    }
  }
};

} // namespace
