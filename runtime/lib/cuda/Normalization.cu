//===- Normalization.cu - Softmax, layer norm and cross-entropy kernels ---===//
//
// Row kernels: one 256-thread block per row when the reduced axis is
// contiguous (inner == 1), one thread per column otherwise. Softmax and the
// cross-entropy use an online max/sum (one pass for the statistics); the
// cross-entropy and its gradient also take bf16 / f16 scores (widened on
// load, f32 math, the gradient rounded once to the scores' type; the fused
// SoftmaxCrossEntropyLossWithGrad computes both from one row pass), and so do
// LayerNormalization's and RMSNormalization's Y (bf16 / f16: the f32 value
// rounded once) and LayerNormalizationGrad's and RMSNormalizationGrad's dY
// (widened on load). The
// column sums of LayerNormalizationGrad (dScale, dBias) accumulate chunks of
// rows with atomicAdd; RMSNormalizationGrad's dScale sums per-chunk partials
// in chunk order (deterministic).
//
//===----------------------------------------------------------------------===//
#include "CudaLaunch.h"
#include "DeviceCommon.cuh"

#include <algorithm>
#include <cfloat>
#include <cmath>

namespace strait {
namespace rt {
namespace cuda {
namespace {

// Element k of row `row` in an [outer, len, inner] layout.
__device__ inline int64_t at(int64_t row, int64_t k, int64_t len, int64_t inner) {
  return (row / inner) * len * inner + row % inner + k * inner;
}

__global__ void softmaxRowKernel(bool logOut, const float *x, float *y, int64_t len,
                                 int64_t inner) {
  __shared__ float shmM[32], shmS[32];
  int64_t row = blockIdx.x;
  MaxSum ms{-INFINITY, 0.0f};
  for (int64_t k = threadIdx.x; k < len; k += kBlock)
    ms = add(ms, x[at(row, k, len, inner)]);
  ms = blockMaxSum(ms, shmM, shmS);
  float lse = ms.m + logf(ms.s), inv = 1.0f / ms.s;
  for (int64_t k = threadIdx.x; k < len; k += kBlock) {
    int64_t i = at(row, k, len, inner);
    y[i] = logOut ? x[i] - lse : expf(x[i] - ms.m) * inv;
  }
}

__global__ void softmaxGradRowKernel(bool logOut, const float *dy, const float *y, float *dx,
                                     int64_t len, int64_t inner) {
  __shared__ float shm[32];
  int64_t row = blockIdx.x;
  float part = 0.0f;
  for (int64_t k = threadIdx.x; k < len; k += kBlock) {
    int64_t i = at(row, k, len, inner);
    part += logOut ? dy[i] : dy[i] * y[i];
  }
  float sum = blockSum(part, shm);
  for (int64_t k = threadIdx.x; k < len; k += kBlock) {
    int64_t i = at(row, k, len, inner);
    dx[i] = logOut ? dy[i] - expf(y[i]) * sum : y[i] * (dy[i] - sum);
  }
}

/// Mean and 1/sqrt(variance + eps) of one row of len elements (one block
/// a row; every thread gets both).
__device__ inline void rowStats(const float *xr, int64_t len, float eps, float *shm, float &mu,
                                float &inv) {
  float part = 0.0f;
  for (int64_t k = threadIdx.x; k < len; k += kBlock)
    part += xr[k];
  mu = blockSum(part, shm) / len;
  part = 0.0f;
  for (int64_t k = threadIdx.x; k < len; k += kBlock) {
    float d = xr[k] - mu;
    part += d * d;
  }
  inv = rsqrtf(blockSum(part, shm) / len + eps);
}

/// Y of type Y: the f32 value rounded once (Cast(to Y) of the f32 kernel's).
template <typename Y>
__global__ void layerNormKernel(const float *x, const float *scale, const float *bias, Y *y,
                                float *mean, float *invStd, int64_t len, float eps) {
  __shared__ float shm[32];
  int64_t row = blockIdx.x;
  const float *xr = x + row * len;
  float mu, inv;
  rowStats(xr, len, eps, shm, mu, inv);
  Y *yr = y + row * len;
  for (int64_t k = threadIdx.x; k < len; k += kBlock) {
    float v = (xr[k] - mu) * inv * scale[k];
    yr[k] = fromF<Y>(bias ? v + bias[k] : v);
  }
  if (threadIdx.x == 0) {
    if (mean)
      mean[row] = mu;
    if (invStd)
      invStd[row] = inv;
  }
}

/// dY of type G (f32, or bf16 / f16 widened exactly on load).
template <typename G>
__global__ void layerNormGradRowKernel(const G *dy, const float *x, const float *scale,
                                       float *dx, float *stats, int64_t len, float eps) {
  __shared__ float shm[32];
  int64_t row = blockIdx.x;
  const float *xr = x + row * len;
  const G *gr = dy + row * len;
  float mu, inv;
  rowStats(xr, len, eps, shm, mu, inv);
  float pg = 0.0f, pgx = 0.0f;
  for (int64_t k = threadIdx.x; k < len; k += kBlock) {
    float gh = toF(gr[k]) * scale[k];
    pg += gh;
    pgx += gh * (xr[k] - mu) * inv;
  }
  float sumG = blockSum(pg, shm), sumGX = blockSum(pgx, shm);
  float *dr = dx + row * len;
  for (int64_t k = threadIdx.x; k < len; k += kBlock) {
    float xhat = (xr[k] - mu) * inv, gh = toF(gr[k]) * scale[k];
    dr[k] = inv / len * (len * gh - sumG - xhat * sumGX);
  }
  if (threadIdx.x == 0) {
    stats[2 * row] = mu;
    stats[2 * row + 1] = inv;
  }
}

template <typename G>
__global__ void layerNormGradColKernel(const G *dy, const float *x, const float *stats,
                                       float *dScale, float *dBias, int64_t rows, int64_t len,
                                       int64_t chunk) {
  int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (col >= len)
    return;
  int64_t begin = blockIdx.y * chunk, end = min(begin + chunk, rows);
  float ds = 0.0f, db = 0.0f;
  for (int64_t r = begin; r < end; ++r) {
    float g = toF(dy[r * len + col]);
    ds += g * (x[r * len + col] - stats[2 * r]) * stats[2 * r + 1];
    db += g;
  }
  if (begin < end) {
    atomicAdd(&dScale[col], ds);
    atomicAdd(&dBias[col], db);
  }
}

/// RMSNormalization: one block a row, y = x * rsqrt(mean(x^2) + eps) * scale,
/// of type Y: the f32 value rounded once (Cast(to Y) of the f32 kernel's).
template <typename Y>
__global__ void rmsNormKernel(const float *x, const float *scale, Y *y, int64_t len,
                              float eps) {
  __shared__ float shm[32];
  int64_t row = blockIdx.x;
  const float *xr = x + row * len;
  float part = 0.0f;
  for (int64_t k = threadIdx.x; k < len; k += kBlock)
    part += xr[k] * xr[k];
  float inv = rsqrtf(blockSum(part, shm) / len + eps);
  Y *yr = y + row * len;
  for (int64_t k = threadIdx.x; k < len; k += kBlock)
    yr[k] = fromF<Y>(xr[k] * inv * scale[k]);
}

/// dX of one row: inv * (dY * scale - xhat * sum(dY * scale * xhat) / len);
/// the row's inv goes to invOut for the dScale columns. dY of type G (f32,
/// or bf16 / f16 widened exactly on load).
template <typename G>
__global__ void rmsNormGradRowKernel(const G *dy, const float *x, const float *scale,
                                     float *dx, float *invOut, int64_t len, float eps) {
  __shared__ float shm[32];
  int64_t row = blockIdx.x;
  const float *xr = x + row * len;
  const G *gr = dy + row * len;
  float part = 0.0f;
  for (int64_t k = threadIdx.x; k < len; k += kBlock)
    part += xr[k] * xr[k];
  float inv = rsqrtf(blockSum(part, shm) / len + eps);
  float pgx = 0.0f;
  for (int64_t k = threadIdx.x; k < len; k += kBlock)
    pgx += toF(gr[k]) * scale[k] * xr[k] * inv;
  float c = blockSum(pgx, shm) / len;
  float *dr = dx + row * len;
  for (int64_t k = threadIdx.x; k < len; k += kBlock)
    dr[k] = inv * (toF(gr[k]) * scale[k] - xr[k] * inv * c);
  if (threadIdx.x == 0)
    invOut[row] = inv;
}

/// Partial dScale of one chunk of rows per column: partial[chunk][col]. No
/// atomics, so dScale does not depend on the order blocks run in.
template <typename G>
__global__ void rmsNormGradColKernel(const G *dy, const float *x, const float *inv,
                                     float *partial, int64_t rows, int64_t len, int64_t chunk) {
  int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (col >= len)
    return;
  int64_t begin = blockIdx.y * chunk, end = min(begin + chunk, rows);
  float ds = 0.0f;
  for (int64_t r = begin; r < end; ++r)
    ds += toF(dy[r * len + col]) * x[r * len + col] * inv[r];
  partial[blockIdx.y * len + col] = ds;
}

__global__ void rmsNormGradSumKernel(const float *partial, float *dScale, int64_t len,
                                     int64_t chunks) {
  int64_t col = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (col >= len)
    return;
  float s = 0.0f;
  for (int64_t c = 0; c < chunks; ++c)
    s += partial[c * len + col];
  dScale[col] = s;
}

template <typename I>
__device__ inline bool readLabel(const LossArgs &a, int64_t row, int64_t &label, float &w,
                                 int *flag, int tag) {
  label = static_cast<int64_t>(static_cast<const I *>(a.labels)[row]);
  if (a.hasIgnore && label == a.ignore) {
    w = 0.0f;
    return false;
  }
  if (label < 0 || label >= a.c) {
    if (threadIdx.x == 0)
      raise(flag, tag, kErrLabelOutOfRange);
    w = 0.0f;
    return false;
  }
  w = a.weights ? a.weights[label] : 1.0f;
  return true;
}

/// Scores of type S (f32, or bf16 / f16 widened exactly on load), log_prob
/// of type P (f32, or the scores' 16-bit type: the f32 value rounded once).
/// The math is f32 whatever S is, so 16-bit scores give bit for bit the f32
/// kernel's loss on the scores cast to f32.
template <typename I, typename S, typename P>
__global__ void sceRowKernel(const S *x, LossArgs a, float *loss, P *logProb,
                             float *scratch, int *flag, int tag) {
  __shared__ float shmM[32], shmS[32];
  int64_t row = blockIdx.x; // = n * d + j
  MaxSum ms{-INFINITY, 0.0f};
  for (int64_t k = threadIdx.x; k < a.c; k += kBlock)
    ms = add(ms, toF(x[at(row, k, a.c, a.d)]));
  ms = blockMaxSum(ms, shmM, shmS);
  float lse = ms.m + logf(ms.s);
  if (logProb)
    for (int64_t k = threadIdx.x; k < a.c; k += kBlock) {
      int64_t i = at(row, k, a.c, a.d);
      logProb[i] = fromF<P>(toF(x[i]) - lse);
    }
  if (threadIdx.x == 0) {
    int64_t label;
    float w;
    float l = readLabel<I>(a, row, label, w, flag, tag)
                  ? -(toF(x[at(row, label, a.c, a.d)]) - lse) * w
                  : 0.0f;
    int64_t rows = a.n * a.d;
    scratch[row] = l;
    scratch[rows + row] = w;
    if (a.reduction == 2)
      loss[row] = l;
  }
}

__global__ void lossReduceKernel(const float *scratch, int64_t rows, int reduction, float *loss) {
  __shared__ double shm[32];
  double l = 0.0, w = 0.0;
  for (int64_t r = threadIdx.x; r < rows; r += kBlock) {
    l += scratch[r];
    w += scratch[rows + r];
  }
  l = blockSum(l, shm);
  w = blockSum(w, shm);
  if (threadIdx.x == 0)
    loss[0] = static_cast<float>(reduction == 1 ? l : (w == 0.0 ? 0.0 : l / w));
}

template <typename I>
__global__ void weightSumKernel(LossArgs a, float *out) {
  __shared__ double shm[32];
  double w = 0.0;
  int64_t rows = a.n * a.d;
  for (int64_t r = threadIdx.x; r < rows; r += kBlock) {
    int64_t label = static_cast<int64_t>(static_cast<const I *>(a.labels)[r]);
    if ((a.hasIgnore && label == a.ignore) || label < 0 || label >= a.c)
      continue;
    w += a.weights ? a.weights[label] : 1.0f;
  }
  w = blockSum(w, shm);
  if (threadIdx.x == 0)
    out[0] = static_cast<float>(w);
}

/// dScores of type S: computed in f32 from the widened scores and rounded
/// once to S (nearest even), i.e. Cast(to S) of the f32 kernel's result.
template <typename I, typename S>
__global__ void sceGradRowKernel(const float *dLoss, const S *x, LossArgs a, S *dx,
                                 const float *weightSum, int *flag, int tag) {
  __shared__ float shmM[32], shmS[32];
  int64_t row = blockIdx.x, label;
  float w;
  bool valid = readLabel<I>(a, row, label, w, flag, tag);
  float g = (a.reduction == 2 ? dLoss[row] : dLoss[0]) * w;
  if (a.reduction == 0)
    g = weightSum[0] == 0.0f ? 0.0f : g / weightSum[0];
  MaxSum ms{-INFINITY, 0.0f};
  for (int64_t k = threadIdx.x; k < a.c; k += kBlock)
    ms = add(ms, toF(x[at(row, k, a.c, a.d)]));
  ms = blockMaxSum(ms, shmM, shmS);
  float inv = 1.0f / ms.s;
  for (int64_t k = threadIdx.x; k < a.c; k += kBlock) {
    int64_t i = at(row, k, a.c, a.d);
    float p = expf(toF(x[i]) - ms.m) * inv;
    dx[i] = fromF<S>(g * (p - (valid && k == label ? 1.0f : 0.0f)));
  }
}

/// SoftmaxCrossEntropyLossWithGrad: sceRowKernel's loss term and
/// sceGradRowKernel's dScores from one row's statistics (the same online
/// max / sum and the same f32 expressions, so both are bit for bit the two
/// kernels'); the second sweep of the row, for dScores, mostly hits the L2
/// cache. The mean's weight sum is at scratch[2 * rows].
template <typename I, typename S>
__global__ void sceWithGradRowKernel(const float *dLoss, const S *x, LossArgs a, float *loss,
                                     S *dx, float *scratch, int *flag, int tag) {
  __shared__ float shmM[32], shmS[32];
  int64_t row = blockIdx.x, rows = a.n * a.d, label;
  float w;
  bool valid = readLabel<I>(a, row, label, w, flag, tag);
  MaxSum ms{-INFINITY, 0.0f};
  for (int64_t k = threadIdx.x; k < a.c; k += kBlock)
    ms = add(ms, toF(x[at(row, k, a.c, a.d)]));
  ms = blockMaxSum(ms, shmM, shmS);
  if (threadIdx.x == 0) {
    float lse = ms.m + logf(ms.s);
    float l = valid ? -(toF(x[at(row, label, a.c, a.d)]) - lse) * w : 0.0f;
    scratch[row] = l;
    scratch[rows + row] = w;
    if (a.reduction == 2)
      loss[row] = l;
  }
  float g = (a.reduction == 2 ? dLoss[row] : dLoss[0]) * w;
  if (a.reduction == 0) {
    float weightSum = scratch[2 * rows];
    g = weightSum == 0.0f ? 0.0f : g / weightSum;
  }
  float inv = 1.0f / ms.s;
  for (int64_t k = threadIdx.x; k < a.c; k += kBlock) {
    int64_t i = at(row, k, a.c, a.d);
    float p = expf(toF(x[i]) - ms.m) * inv;
    dx[i] = fromF<S>(g * (p - (valid && k == label ? 1.0f : 0.0f)));
  }
}

template <typename S>
void sceWithGradRows(const float *dLoss, const void *x, const LossArgs &a, float *loss,
                     void *dx, float *scratch, int *flag, int tag, cudaStream_t s) {
  int64_t rows = a.n * a.d;
  auto run = [&](auto labelType) {
    using I = decltype(labelType);
    weightSumKernel<I><<<1, kBlock, 0, s>>>(a, scratch + 2 * rows);
    sceWithGradRowKernel<I, S><<<static_cast<unsigned>(rows), kBlock, 0, s>>>(
        dLoss, static_cast<const S *>(x), a, loss, static_cast<S *>(dx), scratch, flag, tag);
  };
  if (a.labels64)
    run(int64_t{});
  else
    run(int32_t{});
}

template <typename I, typename S, typename P>
void sceRows(const void *x, const LossArgs &a, float *loss, void *logProb, float *scratch,
             int *flag, int tag, cudaStream_t s) {
  sceRowKernel<I, S, P><<<static_cast<unsigned>(a.n * a.d), kBlock, 0, s>>>(
      static_cast<const S *>(x), a, loss, static_cast<P *>(logProb), scratch, flag, tag);
}

/// The row kernel for scores of type S and log_prob of type P.
template <typename S, typename P>
void sceRowsOf(const void *x, const LossArgs &a, float *loss, void *logProb, float *scratch,
               int *flag, int tag, cudaStream_t s) {
  if (a.labels64)
    sceRows<int64_t, S, P>(x, a, loss, logProb, scratch, flag, tag, s);
  else
    sceRows<int32_t, S, P>(x, a, loss, logProb, scratch, flag, tag, s);
}

template <typename S>
void sceGradRows(const float *dLoss, const void *x, const LossArgs &a, void *dx,
                 float *scratch, int *flag, int tag, cudaStream_t s) {
  unsigned rows = static_cast<unsigned>(a.n * a.d);
  if (a.labels64) {
    weightSumKernel<int64_t><<<1, kBlock, 0, s>>>(a, scratch);
    sceGradRowKernel<int64_t, S><<<rows, kBlock, 0, s>>>(
        dLoss, static_cast<const S *>(x), a, static_cast<S *>(dx), scratch, flag, tag);
  } else {
    weightSumKernel<int32_t><<<1, kBlock, 0, s>>>(a, scratch);
    sceGradRowKernel<int32_t, S><<<rows, kBlock, 0, s>>>(
        dLoss, static_cast<const S *>(x), a, static_cast<S *>(dx), scratch, flag, tag);
  }
}

} // namespace

void launchSoftmax(bool log, const float *x, float *y, int64_t outer, int64_t len,
                   int64_t inner, cudaStream_t s) {
  int64_t rows = outer * inner;
  if (rows > 0 && len > 0)
    softmaxRowKernel<<<static_cast<unsigned>(rows), kBlock, 0, s>>>(log, x, y, len, inner);
}

void launchSoftmaxGrad(bool log, const float *dy, const float *y, float *dx, int64_t outer,
                       int64_t len, int64_t inner, cudaStream_t s) {
  int64_t rows = outer * inner;
  if (rows > 0 && len > 0)
    softmaxGradRowKernel<<<static_cast<unsigned>(rows), kBlock, 0, s>>>(log, dy, y, dx, len,
                                                                        inner);
}

bool launchLayerNorm(const float *x, const float *scale, const float *bias, ET yType, void *y,
                     float *mean, float *invStd, int64_t rows, int64_t len, float eps,
                     cudaStream_t s) {
  if (yType != ET::F32 && yType != ET::BF16 && yType != ET::F16)
    return false;
  if (rows == 0 || len == 0)
    return true;
  unsigned grid = static_cast<unsigned>(rows);
  if (yType == ET::F32)
    layerNormKernel<float><<<grid, kBlock, 0, s>>>(x, scale, bias, static_cast<float *>(y),
                                                   mean, invStd, len, eps);
  else if (yType == ET::BF16)
    layerNormKernel<__nv_bfloat16><<<grid, kBlock, 0, s>>>(
        x, scale, bias, static_cast<__nv_bfloat16 *>(y), mean, invStd, len, eps);
  else
    layerNormKernel<__half><<<grid, kBlock, 0, s>>>(x, scale, bias, static_cast<__half *>(y),
                                                    mean, invStd, len, eps);
  return true;
}

namespace {
template <typename G>
void layerNormGradRows(const G *dy, const float *x, const float *scale, float *dx,
                       float *dScale, float *dBias, float *stats, int64_t rows, int64_t len,
                       float eps, cudaStream_t s) {
  layerNormGradRowKernel<G><<<static_cast<unsigned>(rows), kBlock, 0, s>>>(dy, x, scale, dx,
                                                                           stats, len, eps);
  int64_t colBlocks = (len + kBlock - 1) / kBlock;
  int64_t chunks = std::max<int64_t>(1, std::min<int64_t>((rows + 63) / 64, 1024 / colBlocks + 1));
  int64_t chunk = (rows + chunks - 1) / chunks;
  dim3 grid(static_cast<unsigned>(colBlocks), static_cast<unsigned>(chunks));
  layerNormGradColKernel<G><<<grid, kBlock, 0, s>>>(dy, x, stats, dScale, dBias, rows, len,
                                                    chunk);
}
} // namespace

bool launchLayerNormGrad(ET dyType, const void *dy, const float *x, const float *scale,
                         float *dx, float *dScale, float *dBias, float *stats, int64_t rows,
                         int64_t len, float eps, cudaStream_t s) {
  if (dyType != ET::F32 && dyType != ET::BF16 && dyType != ET::F16)
    return false;
  cudaMemsetAsync(dScale, 0, sizeof(float) * len, s);
  cudaMemsetAsync(dBias, 0, sizeof(float) * len, s);
  if (rows == 0 || len == 0)
    return true;
  if (dyType == ET::F32)
    layerNormGradRows(static_cast<const float *>(dy), x, scale, dx, dScale, dBias, stats, rows,
                      len, eps, s);
  else if (dyType == ET::BF16)
    layerNormGradRows(static_cast<const __nv_bfloat16 *>(dy), x, scale, dx, dScale, dBias,
                      stats, rows, len, eps, s);
  else
    layerNormGradRows(static_cast<const __half *>(dy), x, scale, dx, dScale, dBias, stats, rows,
                      len, eps, s);
  return true;
}

bool launchRMSNorm(const float *x, const float *scale, ET yType, void *y, int64_t rows,
                   int64_t len, float eps, cudaStream_t s) {
  if (yType != ET::F32 && yType != ET::BF16 && yType != ET::F16)
    return false;
  if (rows == 0 || len == 0)
    return true;
  unsigned grid = static_cast<unsigned>(rows);
  if (yType == ET::F32)
    rmsNormKernel<float><<<grid, kBlock, 0, s>>>(x, scale, static_cast<float *>(y), len, eps);
  else if (yType == ET::BF16)
    rmsNormKernel<__nv_bfloat16><<<grid, kBlock, 0, s>>>(
        x, scale, static_cast<__nv_bfloat16 *>(y), len, eps);
  else
    rmsNormKernel<__half><<<grid, kBlock, 0, s>>>(x, scale, static_cast<__half *>(y), len, eps);
  return true;
}

int64_t rmsNormGradChunks(int64_t rows) {
  return std::max<int64_t>(1, std::min<int64_t>((rows + 63) / 64, 256));
}

namespace {
template <typename G>
void rmsNormGradRows(const G *dy, const float *x, const float *scale, float *dx,
                     float *dScale, float *scratch, int64_t rows, int64_t len, float eps,
                     cudaStream_t s) {
  float *inv = scratch, *partial = scratch + rows;
  rmsNormGradRowKernel<G><<<static_cast<unsigned>(rows), kBlock, 0, s>>>(dy, x, scale, dx, inv,
                                                                         len, eps);
  int64_t colBlocks = (len + kBlock - 1) / kBlock;
  int64_t chunks = rmsNormGradChunks(rows), chunk = (rows + chunks - 1) / chunks;
  dim3 grid(static_cast<unsigned>(colBlocks), static_cast<unsigned>(chunks));
  rmsNormGradColKernel<G><<<grid, kBlock, 0, s>>>(dy, x, inv, partial, rows, len, chunk);
  rmsNormGradSumKernel<<<static_cast<unsigned>(colBlocks), kBlock, 0, s>>>(partial, dScale, len,
                                                                           chunks);
}
} // namespace

bool launchRMSNormGrad(ET dyType, const void *dy, const float *x, const float *scale,
                       float *dx, float *dScale, float *scratch, int64_t rows, int64_t len,
                       float eps, cudaStream_t s) {
  if (dyType != ET::F32 && dyType != ET::BF16 && dyType != ET::F16)
    return false;
  if (len == 0)
    return true;
  if (rows == 0) {
    cudaMemsetAsync(dScale, 0, sizeof(float) * len, s);
    return true;
  }
  if (dyType == ET::F32)
    rmsNormGradRows(static_cast<const float *>(dy), x, scale, dx, dScale, scratch, rows, len,
                    eps, s);
  else if (dyType == ET::BF16)
    rmsNormGradRows(static_cast<const __nv_bfloat16 *>(dy), x, scale, dx, dScale, scratch,
                    rows, len, eps, s);
  else
    rmsNormGradRows(static_cast<const __half *>(dy), x, scale, dx, dScale, scratch, rows, len,
                    eps, s);
  return true;
}

bool launchSoftmaxCrossEntropy(ET scores, const void *x, const LossArgs &a, float *loss,
                               ET logProbType, void *logProb, float *scratch, int *flag,
                               int tag, cudaStream_t s) {
  // log_prob: f32, or the scores' own type.
  if (logProb && logProbType != ET::F32 && logProbType != scores)
    return false;
  bool lowLogProb = logProb && logProbType != ET::F32;
  int64_t rows = a.n * a.d;
  if (scores != ET::F32 && scores != ET::BF16 && scores != ET::F16)
    return false;
  if (rows == 0) {
    if (a.reduction != 2)
      cudaMemsetAsync(loss, 0, sizeof(float), s);
    return true;
  }
  if (scores == ET::F32)
    sceRowsOf<float, float>(x, a, loss, logProb, scratch, flag, tag, s);
  else if (scores == ET::BF16 && lowLogProb)
    sceRowsOf<__nv_bfloat16, __nv_bfloat16>(x, a, loss, logProb, scratch, flag, tag, s);
  else if (scores == ET::BF16)
    sceRowsOf<__nv_bfloat16, float>(x, a, loss, logProb, scratch, flag, tag, s);
  else if (lowLogProb)
    sceRowsOf<__half, __half>(x, a, loss, logProb, scratch, flag, tag, s);
  else
    sceRowsOf<__half, float>(x, a, loss, logProb, scratch, flag, tag, s);
  if (a.reduction != 2)
    lossReduceKernel<<<1, kBlock, 0, s>>>(scratch, rows, a.reduction, loss);
  return true;
}

bool launchSoftmaxCrossEntropyGrad(ET scores, const float *dLoss, const void *x,
                                   const LossArgs &a, void *dx, float *scratch, int *flag,
                                   int tag, cudaStream_t s) {
  if (scores != ET::F32 && scores != ET::BF16 && scores != ET::F16)
    return false;
  if (a.n * a.d == 0)
    return true;
  if (scores == ET::F32)
    sceGradRows<float>(dLoss, x, a, dx, scratch, flag, tag, s);
  else if (scores == ET::BF16)
    sceGradRows<__nv_bfloat16>(dLoss, x, a, dx, scratch, flag, tag, s);
  else
    sceGradRows<__half>(dLoss, x, a, dx, scratch, flag, tag, s);
  return true;
}

bool launchSoftmaxCrossEntropyWithGrad(ET scores, const float *dLoss, const void *x,
                                       const LossArgs &a, float *loss, void *dx, float *scratch,
                                       int *flag, int tag, cudaStream_t s) {
  if (scores != ET::F32 && scores != ET::BF16 && scores != ET::F16)
    return false;
  int64_t rows = a.n * a.d;
  if (rows == 0) {
    if (a.reduction != 2)
      cudaMemsetAsync(loss, 0, sizeof(float), s);
    return true;
  }
  if (scores == ET::F32)
    sceWithGradRows<float>(dLoss, x, a, loss, dx, scratch, flag, tag, s);
  else if (scores == ET::BF16)
    sceWithGradRows<__nv_bfloat16>(dLoss, x, a, loss, dx, scratch, flag, tag, s);
  else
    sceWithGradRows<__half>(dLoss, x, a, loss, dx, scratch, flag, tag, s);
  if (a.reduction != 2)
    lossReduceKernel<<<1, kBlock, 0, s>>>(scratch, rows, a.reduction, loss);
  return true;
}

} // namespace cuda
} // namespace rt
} // namespace strait
