//===- GroupedMatMul.cpp - Routed expert products on the CPU --------------===//
//
// The graph dialect's mixture-of-experts products (docs/runtime.md, "Grouped
// expert products"):
//
//   GroupedMatMul(X [S, I], W, idx [S]) {transB} -> Y [S, O]
//     Y[s] = X[s] @ W[idx[s]]^T  (transB 1, W [E, O, I])
//     Y[s] = X[s] @ W[idx[s]]    (transB 0, W [E, I, O])
//   GroupedMatMulGradWeight(X [S, I], dY [S, O], idx [S]) {num_experts, transB} -> dW
//     dW[e] = sum_{s: idx[s] = e} dY[s]^T X[s]  ([E, O, I], transB 1)
//     dW[e] = sum_{s: idx[s] = e} X[s]^T dY[s]  ([E, I, O], transB 0)
//
// Both count the rows per expert, order them by expert with a stable
// counting sort (rows of one expert keep their order), gather the rows into
// contiguous blocks, run one sgemm per expert over its block and, for Y,
// scatter the rows back: the FLOPs of the routed products only. Experts run
// in parallel over the pool with single-threaded OpenBLAS when their
// products are small (as batched MatMul does), else one after another with
// OpenBLAS's threads. An index outside [-E, E) is an error naming the row
// and the value. f32; bf16/f16 operands are widened by the backend's
// wrapper (CpuBackend.cpp) like MatMul's.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include <cblas.h>

#include <cstring>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace cpu {
namespace {

/// The rows of each expert, contiguous: rows[offset[e] .. offset[e + 1]) are
/// the slots routed to e in slot order.
struct Routing {
  std::vector<int64_t> offset; // E + 1
  std::vector<int64_t> rows;   // S
};

StatusOr<Routing> route(const KernelContext &ctx, const Tensor &idx, int64_t s, int64_t e) {
  if (idx.rank() != 1 || idx.shape[0] != s)
    return ctx.error("indices " + idx.typeString() + " must be [" + std::to_string(s) +
                     "], one expert per row");
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> ids, readInts(ctx, idx));
  Routing r;
  r.offset.assign(static_cast<size_t>(e) + 1, 0);
  for (int64_t k = 0; k < s; ++k) {
    int64_t v = ids[k];
    if (v < -e || v >= e)
      return ctx.error("index " + std::to_string(v) + " of row " + std::to_string(k) +
                       " is outside [-" + std::to_string(e) + ", " + std::to_string(e) +
                       ") for " + std::to_string(e) + " experts");
    ids[k] = v < 0 ? v + e : v;
    ++r.offset[ids[k] + 1];
  }
  for (int64_t x = 0; x < e; ++x)
    r.offset[x + 1] += r.offset[x];
  r.rows.resize(static_cast<size_t>(s));
  std::vector<int64_t> next(r.offset.begin(), r.offset.end() - 1);
  for (int64_t k = 0; k < s; ++k)
    r.rows[next[ids[k]]++] = k;
  return r;
}

/// dst[j] = src[rows[j]] for rows of `width` floats.
void gatherRows(const float *src, const std::vector<int64_t> &rows, int64_t width, float *dst) {
  int64_t n = static_cast<int64_t>(rows.size());
  parallelFor(n, std::max<int64_t>(1, 16384 / std::max<int64_t>(width, 1)),
              [&](int64_t b, int64_t e) {
                for (int64_t j = b; j < e; ++j)
                  std::memcpy(dst + j * width, src + rows[j] * width,
                              sizeof(float) * static_cast<size_t>(width));
              });
}

/// Runs body(e) for every expert: in parallel with single-threaded OpenBLAS
/// when the average product is small, else in order with OpenBLAS's threads.
template <typename Body> void forEachExpert(int64_t e, double flopsPerExpert, Body &&body) {
  if (e > 1 && flopsPerExpert < double(1 << 19)) {
    openblas_set_num_threads(1);
    parallelFor(e, 1, [&](int64_t b, int64_t end) {
      for (int64_t ex = b; ex < end; ++ex)
        body(ex);
    });
    openblas_set_num_threads(getNumThreads());
  } else {
    for (int64_t ex = 0; ex < e; ++ex)
      body(ex);
  }
}

Status groupedMatMulKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *w, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *idx, ctx.requireInput(2));
  STRAIT_ASSIGN_OR_RETURN(int64_t transB, ctx.getAttrs().getInt("transB", 1));
  if (x->rank() != 2 || w->rank() != 3)
    return ctx.error("X must be [S, I] and W [E, O, I] or [E, I, O], got " + x->typeString() +
                     " and " + w->typeString());
  int64_t s = x->shape[0], i = x->shape[1], e = w->shape[0];
  int64_t wi = transB ? w->shape[2] : w->shape[1], o = transB ? w->shape[1] : w->shape[2];
  if (wi != i)
    return ctx.error("inner dimensions differ: X " + x->typeString() + ", W " + w->typeString() +
                     " (transB " + std::to_string(transB) + ")");
  STRAIT_ASSIGN_OR_RETURN(Routing r, route(ctx, *idx, s, e));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, Shape{s, o}, program::DTYPE_F32));
  if (s == 0 || o == 0)
    return Status::ok();
  std::vector<float> xs(static_cast<size_t>(s * i)), ys(static_cast<size_t>(s * o));
  gatherRows(x->as<float>(), r.rows, i, xs.data());
  const float *pw = w->as<float>();
  forEachExpert(e, 2.0 * double(s) * double(i) * double(o) / double(e), [&](int64_t ex) {
    int64_t begin = r.offset[ex], n = r.offset[ex + 1] - begin;
    if (n == 0)
      return;
    sgemm(false, transB != 0, n, o, i, 1.0f, xs.data() + begin * i, i, pw + ex * o * i,
          transB ? i : o, 0.0f, ys.data() + begin * o, o);
  });
  float *py = y->as<float>();
  parallelFor(s, std::max<int64_t>(1, 16384 / std::max<int64_t>(o, 1)), [&](int64_t b, int64_t end) {
    for (int64_t j = b; j < end; ++j)
      std::memcpy(py + r.rows[j] * o, ys.data() + j * o, sizeof(float) * static_cast<size_t>(o));
  });
  return Status::ok();
}

Status groupedMatMulGradWeightKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *idx, ctx.requireInput(2));
  STRAIT_ASSIGN_OR_RETURN(int64_t e, ctx.getAttrs().getInt("num_experts", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t transB, ctx.getAttrs().getInt("transB", 1));
  if (e < 1)
    return ctx.error("num_experts must be at least 1, got " + std::to_string(e));
  if (x->rank() != 2 || dy->rank() != 2 || dy->shape[0] != x->shape[0])
    return ctx.error("X must be [S, I] and dY [S, O], got " + x->typeString() + " and " +
                     dy->typeString());
  int64_t s = x->shape[0], i = x->shape[1], o = dy->shape[1];
  STRAIT_ASSIGN_OR_RETURN(Routing r, route(ctx, *idx, s, e));
  Shape shape = transB ? Shape{e, o, i} : Shape{e, i, o};
  STRAIT_ASSIGN_OR_RETURN(Tensor * dw, ctx.requireOutput(0, shape, program::DTYPE_F32));
  std::vector<float> xs(static_cast<size_t>(s * i)), ds(static_cast<size_t>(s * o));
  gatherRows(x->as<float>(), r.rows, i, xs.data());
  gatherRows(dy->as<float>(), r.rows, o, ds.data());
  float *pw = dw->as<float>();
  forEachExpert(e, 2.0 * double(s) * double(i) * double(o) / double(e), [&](int64_t ex) {
    int64_t begin = r.offset[ex], n = r.offset[ex + 1] - begin;
    float *out = pw + ex * o * i;
    if (n == 0) {
      std::memset(out, 0, sizeof(float) * static_cast<size_t>(o * i));
      return;
    }
    const float *xb = xs.data() + begin * i, *db = ds.data() + begin * o;
    if (transB) // [O, I] = dY_e^T X_e
      sgemm(true, false, o, i, n, 1.0f, db, o, xb, i, 0.0f, out, i);
    else // [I, O] = X_e^T dY_e
      sgemm(true, false, i, o, n, 1.0f, xb, i, db, o, 0.0f, out, o);
  });
  return Status::ok();
}

} // namespace

void addGroupedMatMulKernels(KernelTable &table) {
  table.add("GroupedMatMul", groupedMatMulKernel);
  table.add("GroupedMatMulGradWeight", groupedMatMulGradWeightKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
