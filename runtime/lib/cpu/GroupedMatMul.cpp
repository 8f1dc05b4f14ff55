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

#include "strait/runtime/KernelArgs.h"

#include <cblas.h>

#include <cstring>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace cpu {
namespace {

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

/// The routing of a kernel's rows (the operand checks are KernelArgs.h's,
/// shared with the CUDA kernels); f32 only: the backend's wrapper widens
/// 16-bit operands.
StatusOr<ExpertRouting> routeRows(const KernelContext &ctx, const GroupedMatMulArgs &a) {
  if (a.x->dtype != program::DTYPE_F32)
    return ctx.unsupported("operands of dtype " + a.x->typeString() + " (f32 here)");
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> ids, readInts(ctx, *a.idx));
  return routeExperts(ctx, std::move(ids), a.e);
}

Status groupedMatMulKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(GroupedMatMulArgs a, groupedMatMulArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(ExpertRouting r, routeRows(ctx, a));
  int64_t s = a.s, i = a.i, o = a.o, e = a.e;
  if (s == 0 || o == 0)
    return Status::ok();
  std::vector<float> xs(static_cast<size_t>(s * i)), ys(static_cast<size_t>(s * o));
  gatherRows(a.x->as<float>(), r.rows, i, xs.data());
  const float *pw = a.w->as<float>();
  forEachExpert(e, 2.0 * double(s) * double(i) * double(o) / double(e), [&](int64_t ex) {
    int64_t begin = r.offset[ex], n = r.offset[ex + 1] - begin;
    if (n == 0)
      return;
    sgemm(false, a.transB, n, o, i, 1.0f, xs.data() + begin * i, i, pw + ex * o * i,
          a.transB ? i : o, 0.0f, ys.data() + begin * o, o);
  });
  float *py = a.out->as<float>();
  parallelFor(s, std::max<int64_t>(1, 16384 / std::max<int64_t>(o, 1)), [&](int64_t b, int64_t end) {
    for (int64_t j = b; j < end; ++j)
      std::memcpy(py + r.rows[j] * o, ys.data() + j * o, sizeof(float) * static_cast<size_t>(o));
  });
  return Status::ok();
}

Status groupedMatMulGradWeightKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(GroupedMatMulArgs a, groupedMatMulGradWeightArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(ExpertRouting r, routeRows(ctx, a));
  int64_t s = a.s, i = a.i, o = a.o, e = a.e;
  std::vector<float> xs(static_cast<size_t>(s * i)), ds(static_cast<size_t>(s * o));
  gatherRows(a.x->as<float>(), r.rows, i, xs.data());
  gatherRows(a.dy->as<float>(), r.rows, o, ds.data());
  float *pw = a.out->as<float>();
  forEachExpert(e, 2.0 * double(s) * double(i) * double(o) / double(e), [&](int64_t ex) {
    int64_t begin = r.offset[ex], n = r.offset[ex + 1] - begin;
    float *out = pw + ex * o * i;
    if (n == 0) {
      std::memset(out, 0, sizeof(float) * static_cast<size_t>(o * i));
      return;
    }
    const float *xb = xs.data() + begin * i, *db = ds.data() + begin * o;
    if (a.transB) // [O, I] = dY_e^T X_e
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
