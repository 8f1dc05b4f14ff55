//===- Attention.cpp - FusedAttention and its gradient --------------------===//
//
// The graph dialect's FusedAttention(Q, Kt, V [, Bias]) {scale, causal} ->
// (Y, LSE) and FusedAttentionGrad(dY, Q, Kt, V, Y, LSE [, Bias]) -> (dQ, dKt,
// dV) (contract: docs/runtime.md, "Fused attention"). Shapes: Q [b..., Tq,
// D], Kt [b..., D, Tk], V [b..., Tk, Dv], Bias broadcastable to [b..., Tq,
// Tk]; Y [b..., Tq, Dv], LSE [b..., Tq] (f32). The operand checks are
// shared with the CUDA kernels (fusedAttentionArgs, KernelArgs.h).
//
// Neither kernel materializes the Tq x Tk scores: the forward runs over
// (batch slice, block of kBlockRows query rows) items in parallel, each
// computing its block's scores with one sgemm (alpha = scale), adding the
// bias and the causal mask, a softmax in f32 (RowMath.h loops) that also
// gives the row's log-sum-exp, and Y_blk = P_blk V with a second sgemm. The
// backward runs over batch slices in parallel and over the query blocks of
// a slice in order, so that the block's contributions to dKt and dV add up
// without races; it recomputes P_blk from the saved LSE. Scratch per worker
// is O(kBlockRows x Tk) (plus the slices of Q, Kt, V widened to f32 when
// they are bf16/f16, or gathered when a permutation attribute (q_perm, ...)
// lays them out strided; outputs so laid out are scattered back). A select
// attribute (q_select, ...) only moves an operand's base offset: Q, K and V
// may be slices of one packed buffer, read, never written. Under a causal
// mask a block only visits the keys its last row may see.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "RowMath.h"

#include "strait/runtime/KernelArgs.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstring>

namespace strait {
namespace rt {
namespace cpu {
namespace {

constexpr int64_t kBlockRows = 64;

using AttnArgs = AttentionArgs;

/// C = alpha * op(A) op(B) + beta * C for any sizes (k = 0 included).
void gemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k, float alpha, const float *a,
          int64_t lda, const float *b, int64_t ldb, float beta, float *c, int64_t ldc) {
  if (m == 0 || n == 0)
    return;
  if (k == 0) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
    return;
  }
  sgemm(transA, transB, m, n, k, alpha, a, std::max<int64_t>(lda, 1), b, std::max<int64_t>(ldb, 1),
        beta, c, std::max<int64_t>(ldc, 1));
}

/// Whether rows [r0, r0 + rows) x `cols` columns of an operand slice under
/// layout `l` are one dense run of memory.
bool denseRows(const AttnLayout &l, int64_t rows, int64_t cols) {
  return l.col == 1 && (l.row == cols || rows <= 1);
}

/// Rows [r0, r0 + rows) of the operand slice at `base` (layout l, `cols`
/// columns) as a dense f32 [rows, cols]: the tensor's own memory when it is
/// f32 and dense there, else gathered (and widened) into `scratch`.
const float *f32Rows(const Tensor &t, const AttnLayout &l, int64_t base, int64_t r0, int64_t rows,
                     int64_t cols, std::vector<float> &scratch) {
  int64_t at = base + r0 * l.row;
  if (t.dtype == program::DTYPE_F32 && denseRows(l, rows, cols))
    return t.as<float>() + at;
  scratch.resize(static_cast<size_t>(rows * cols));
  float *d = scratch.data();
  if (t.dtype == program::DTYPE_F32) {
    const float *p = t.as<float>();
    if (l.col == 1) // rows apart (a permuted [b, T, H, D] head): a copy per row
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(d + r * cols, p + at + r * l.row, cols * sizeof(float));
    else
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c)
          d[r * cols + c] = p[at + r * l.row + c * l.col];
  } else {
    const uint16_t *p = t.as<uint16_t>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        d[r * cols + c] = lowToFloat(t.dtype, p[at + r * l.row + c * l.col]);
  }
  return d;
}

/// Where a kernel writes rows [r0, r0 + rows) of an output slice: the
/// tensor's memory when it is f32 and dense there, else `scratch`, which
/// storeRows then rounds into the tensor.
float *outRows(Tensor &t, const AttnLayout &l, int64_t base, int64_t r0, int64_t rows, int64_t cols,
               std::vector<float> &scratch) {
  if (t.dtype == program::DTYPE_F32 && denseRows(l, rows, cols))
    return t.as<float>() + base + r0 * l.row;
  scratch.resize(static_cast<size_t>(rows * cols));
  return scratch.data();
}

/// Stores the dense f32 [rows, cols] `src` from outRows into the tensor
/// (rounded to its dtype); nothing when outRows gave the tensor itself.
void storeRows(const float *src, Tensor &t, const AttnLayout &l, int64_t base, int64_t r0,
               int64_t rows, int64_t cols) {
  int64_t at = base + r0 * l.row;
  if (t.dtype == program::DTYPE_F32) {
    float *p = t.as<float>();
    if (src == p + at)
      return;
    if (l.col == 1) {
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(p + at + r * l.row, src + r * cols, cols * sizeof(float));
      return;
    }
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c)
        p[at + r * l.row + c * l.col] = src[r * cols + c];
    return;
  }
  uint16_t *p = t.as<uint16_t>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c)
      p[at + r * l.row + c * l.col] = floatToLow(t.dtype, src[r * cols + c]);
}

/// The scores of query rows [i0, i0 + rows) of slice b (qBlk: those rows
/// of Q) against keys [0, n) (leading dimension n): scale * Q_blk Kt +
/// Bias, -inf where the causal mask hides a key.
void blockScores(const AttnArgs &a, int64_t b, int64_t i0, int64_t rows, int64_t n,
                 const float *qBlk, const float *kt, float *s) {
  gemm(false, false, rows, n, a.d, a.scale, qBlk, a.d, kt, a.tk, 0.0f, s, n);
  if (a.bias) {
    int64_t rank = static_cast<int64_t>(a.biasStrides.size());
    int64_t sq = a.biasStrides[rank - 2], sk = a.biasStrides[rank - 1];
    int64_t base = a.biasOffset(b);
    for (int64_t r = 0; r < rows; ++r) {
      float *row = s + r * n;
      int64_t off = base + (i0 + r) * sq;
      if (a.bias->dtype == program::DTYPE_F32) {
        const float *p = a.bias->as<float>() + off;
        if (sk == 1)
          for (int64_t j = 0; j < n; ++j)
            row[j] += p[j];
        else
          for (int64_t j = 0; j < n; ++j)
            row[j] += p[j * sk];
      } else {
        const uint16_t *p = a.bias->as<uint16_t>() + off;
        for (int64_t j = 0; j < n; ++j)
          row[j] += lowToFloat(a.bias->dtype, p[j * sk]);
      }
    }
  }
  if (a.causal)
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = a.keyEnd(i0 + r); j < n; ++j)
        s[r * n + j] = -INFINITY;
}

// The row loops below (exp, softmax, dS) are compiled for AVX2 and the
// baseline ISA (target_clones), so they run 8 floats wide where the CPU has
// AVX2 (the baseline build is SSE2: 4). Neither clone contracts into FMA, so
// the results are the same bits on every CPU. Under a causal mask a
// row's hidden keys are set to 0 without evaluating exp (exp(-inf) is 0).

/// Softmax of each of `rows` rows of s (length n) in place, and its
/// log-sum-exp; a row without a finite score becomes 0 with LSE -inf.
/// Row r's keys from visible[r] on are hidden (-inf in s).
__attribute__((target_clones("avx2", "default"))) void
softmaxRows(float *s, int64_t rows, int64_t n, const int64_t *visible, float *lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float *row = s + r * n;
    int64_t k = visible[r];
    float mx = rowMax(row, k);
    if (mx == -INFINITY) {
      std::fill(row, row + n, 0.0f);
      lse[r] = -INFINITY;
      continue;
    }
    for (int64_t j = 0; j < k; ++j)
      row[j] = expNonPositive(row[j] - mx);
    std::fill(row + k, row + n, 0.0f);
    // Over all n (the hidden keys add 0) so that each key's lane of rowSum
    // does not depend on the mask.
    double sum = rowSum(row, n);
    lse[r] = static_cast<float>(mx + std::log(sum));
    float inv = static_cast<float>(1.0 / sum);
    for (int64_t j = 0; j < k; ++j)
      row[j] *= inv;
  }
}

/// P = exp(S - LSE) for each of `rows` rows of s (length n) in place: 0
/// where the key is hidden (from visible[r] on) or the row's LSE is -inf.
__attribute__((target_clones("avx2", "default"))) void
expRows(float *s, int64_t rows, int64_t n, const int64_t *visible, const float *lse) {
  for (int64_t r = 0; r < rows; ++r) {
    float l = lse[r];
    float *row = s + r * n;
    int64_t k = l == -INFINITY ? 0 : visible[r];
    for (int64_t j = 0; j < k; ++j)
      row[j] = expNonPositive(row[j] - l);
    std::fill(row + k, row + n, 0.0f);
  }
}

/// dS = P * (dP - Drow) in place of dP, Drow = rowsum(dY * Y) (in double),
/// for `rows` rows of length n (P is 0 from visible[r] on).
__attribute__((target_clones("avx2", "default"))) void
dsRows(const float *p, float *dp, int64_t rows, int64_t n, const int64_t *visible,
       const float *dy, const float *y, int64_t dv) {
  for (int64_t r = 0; r < rows; ++r) {
    const float *dyr = dy + r * dv, *yr = y + r * dv;
    double drow = 0;
    for (int64_t c = 0; c < dv; ++c)
      drow += double(dyr[c]) * yr[c];
    float dr = static_cast<float>(drow);
    const float *pr = p + r * n;
    float *dpr = dp + r * n;
    int64_t k = visible[r];
    for (int64_t j = 0; j < k; ++j)
      dpr[j] = pr[j] * (dpr[j] - dr);
    std::fill(dpr + k, dpr + n, 0.0f);
  }
}

/// visible[r] = the keys of [0, n) that query row i0 + r sees.
void visibleKeys(const AttnArgs &a, int64_t i0, int64_t rows, int64_t n, int64_t *visible) {
  for (int64_t r = 0; r < rows; ++r)
    visible[r] = std::min(n, a.keyEnd(i0 + r));
}

/// Runs `body` over [0, n) in parallel with single-threaded BLAS calls
/// inside (OpenBLAS's own threads would oversubscribe the pool).
void parallelBlocks(int64_t n, const std::function<void(int64_t, int64_t)> &body) {
  if (n <= 1) {
    body(0, n);
    return;
  }
  openblas_set_num_threads(1);
  parallelFor(n, 1, body);
  openblas_set_num_threads(getNumThreads());
}

Status fusedAttentionKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(AttnArgs a, fusedAttentionArgs(ctx));
  Tensor *y = a.out[0], *lse = a.out[1];
  if (a.nBatch == 0 || a.tq == 0)
    return Status::ok();
  const int64_t blocks = (a.tq + kBlockRows - 1) / kBlockRows;
  parallelBlocks(a.nBatch * blocks, [&](int64_t w0, int64_t w1) {
    std::vector<float> s, qs, ks, vs, ys;
    for (int64_t w = w0; w < w1; ++w) {
      int64_t b = w / blocks, i0 = (w % blocks) * kBlockRows;
      int64_t rows = std::min(kBlockRows, a.tq - i0);
      int64_t n = a.keyEnd(i0 + rows - 1); // keys any row of the block sees
      int64_t yBase = a.yL.offset(b, a.batch);
      const float *q = f32Rows(*a.q, a.qL, a.qL.offset(b, a.batch), i0, rows, a.d, qs);
      const float *kt = f32Rows(*a.kt, a.ktL, a.ktL.offset(b, a.batch), 0, a.d, a.tk, ks);
      const float *v = f32Rows(*a.v, a.vL, a.vL.offset(b, a.batch), 0, n, a.dv, vs);
      float *yb = outRows(*y, a.yL, yBase, i0, rows, a.dv, ys);
      float *l = lse->as<float>() + b * a.tq + i0;
      s.resize(static_cast<size_t>(rows * std::max<int64_t>(n, 1)));
      if (n > 0) {
        int64_t visible[kBlockRows];
        visibleKeys(a, i0, rows, n, visible);
        blockScores(a, b, i0, rows, n, q, kt, s.data());
        softmaxRows(s.data(), rows, n, visible, l);
      } else {
        std::fill(l, l + rows, -INFINITY);
      }
      gemm(false, false, rows, a.dv, n, 1.0f, s.data(), n, v, a.dv, 0.0f, yb, a.dv);
      storeRows(yb, *y, a.yL, yBase, i0, rows, a.dv);
    }
  });
  return Status::ok();
}

/// Per-slice f32 views and accumulators of the backward.
struct GradSlice {
  std::vector<float> qs, ks, vs, dys, ys, dqs, dks, dvs, s, dp;
};

/// The backward of slice b: query blocks in order, dKt and dV summed over
/// them in f32 (in the outputs when they are f32).
void attentionGradSlice(const AttnArgs &a, int64_t b, const Tensor &dyT, const Tensor &yT,
                        const float *lse, Tensor &dqT, Tensor &dktT, Tensor &dvT, GradSlice &g) {
  const int64_t qBase = a.qL.offset(b, a.batch), ktBase = a.ktL.offset(b, a.batch),
                vBase = a.vL.offset(b, a.batch), yBase = a.yL.offset(b, a.batch);
  const int64_t dqBase = a.dqL.offset(b, a.batch), dktBase = a.dktL.offset(b, a.batch),
                dvBase = a.dvL.offset(b, a.batch);
  const float *q = f32Rows(*a.q, a.qL, qBase, 0, a.tq, a.d, g.qs);
  const float *kt = f32Rows(*a.kt, a.ktL, ktBase, 0, a.d, a.tk, g.ks);
  const float *v = f32Rows(*a.v, a.vL, vBase, 0, a.tk, a.dv, g.vs);
  const float *dy = f32Rows(dyT, a.yL, yBase, 0, a.tq, a.dv, g.dys);
  const float *y = f32Rows(yT, a.yL, yBase, 0, a.tq, a.dv, g.ys);
  // The gradients take their operand's layout (without its select).
  float *dq = outRows(dqT, a.dqL, dqBase, 0, a.tq, a.d, g.dqs);
  float *dkt = outRows(dktT, a.dktL, dktBase, 0, a.d, a.tk, g.dks);
  float *dv = outRows(dvT, a.dvL, dvBase, 0, a.tk, a.dv, g.dvs);
  std::fill(dkt, dkt + a.d * a.tk, 0.0f);
  std::fill(dv, dv + a.tk * a.dv, 0.0f);
  for (int64_t i0 = 0; i0 < a.tq; i0 += kBlockRows) {
    int64_t rows = std::min(kBlockRows, a.tq - i0);
    int64_t n = a.keyEnd(i0 + rows - 1);
    const float *qb = q + i0 * a.d, *dyb = dy + i0 * a.dv, *yb = y + i0 * a.dv;
    float *dqb = dq + i0 * a.d;
    if (n == 0) { // every key hidden: P = 0, no gradient
      std::fill(dqb, dqb + rows * a.d, 0.0f);
      continue;
    }
    g.s.resize(static_cast<size_t>(rows * n));
    g.dp.resize(static_cast<size_t>(rows * n));
    float *s = g.s.data(), *dp = g.dp.data();
    blockScores(a, b, i0, rows, n, qb, kt, s);
    int64_t visible[kBlockRows];
    visibleKeys(a, i0, rows, n, visible);
    // P = exp(S - LSE) (0 where masked or LSE = -inf).
    expRows(s, rows, n, visible, lse + b * a.tq + i0);
    gemm(true, false, n, a.dv, rows, 1.0f, s, n, dyb, a.dv, 1.0f, dv, a.dv);
    gemm(false, true, rows, n, a.dv, 1.0f, dyb, a.dv, v, a.dv, 0.0f, dp, n);
    // dS = P * (dP - Drow), Drow = rowsum(dY * Y).
    dsRows(s, dp, rows, n, visible, dyb, yb, a.dv);
    gemm(false, true, rows, a.d, n, a.scale, dp, n, kt, a.tk, 0.0f, dqb, a.d);
    gemm(true, false, a.d, n, rows, a.scale, qb, a.d, dp, n, 1.0f, dkt, a.tk);
  }
  storeRows(dq, dqT, a.dqL, dqBase, 0, a.tq, a.d);
  storeRows(dkt, dktT, a.dktL, dktBase, 0, a.d, a.tk);
  storeRows(dv, dvT, a.dvL, dvBase, 0, a.tk, a.dv);
}

Status fusedAttentionGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(AttnArgs a, fusedAttentionGradArgs(ctx));
  const Tensor *dy = a.dy, *y = a.y, *lse = a.lse;
  Tensor *dq = a.out[0], *dkt = a.out[1], *dv = a.out[2];
  if (a.nBatch == 0)
    return Status::ok();
  parallelBlocks(a.nBatch, [&](int64_t b0, int64_t b1) {
    GradSlice g;
    for (int64_t b = b0; b < b1; ++b)
      attentionGradSlice(a, b, *dy, *y, lse->as<float>(), *dq, *dkt, *dv, g);
  });
  return Status::ok();
}

} // namespace

void addAttentionKernels(KernelTable &table) {
  table.add("FusedAttention", fusedAttentionKernel);
  table.add("FusedAttentionGrad", fusedAttentionGradKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
