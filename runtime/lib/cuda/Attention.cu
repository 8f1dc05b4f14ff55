//===- Attention.cu - Row kernels of FusedAttention(+Grad) ----------------===//
//
// The GEMMs of the fused attention run in cuBLAS (CudaAttention.cpp); these
// kernels do what lies between them, on the f32 scores S = scale * Q Kt of a
// chunk of batch entries [b0, b0 + nb), rows r = (entry - b0) * Tq + i:
// - softmax: + bias, causal mask, online max/sum per row, P = exp(S - LSE)
//   in the products' dtype and LSE (f32); a row without a finite score gets
//   P = 0 and LSE = -inf;
// - probs (backward): P = exp(S + bias - LSE), 0 where masked or LSE = -inf;
// - drow: Drow[r] = sum_c dY[r, c] * Y[r, c] (f32 accumulation), dY and Y
//   read through y_perm's layout (dense Drow);
// - dscores: dS = P * (dP - Drow[r]), in place of P.
// One 256-thread block per row (grid-stride over rows), every index int64.
//
//===----------------------------------------------------------------------===//
#include "CudaLaunch.h"
#include "DeviceCommon.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

namespace strait {
namespace rt {
namespace cuda {
namespace {

/// Element k of a tensor of launcher type `t` (f32, f16 or bf16), as f32.
__device__ inline float loadAny(const void *p, ET t, int64_t k) {
  switch (t) {
  case ET::F16: return __half2float(static_cast<const __half *>(p)[k]);
  case ET::BF16: return __bfloat162float(static_cast<const __nv_bfloat16 *>(p)[k]);
  default: return static_cast<const float *>(p)[k];
  }
}


/// Where row r of the chunk reads the bias, and its last unmasked key.
struct RowInfo {
  int64_t biasBase;
  int64_t lastKey; // keys j > lastKey are masked (causal); tk - 1 otherwise
};

__device__ inline RowInfo rowInfo(const AttnRows &a, int64_t r) {
  int64_t i = r % a.tq;
  int64_t g = a.b0 + r / a.tq; // batch entry over the op's flattened batch
  RowInfo info{0, a.tk - 1};
  if (a.causal)
    info.lastKey = i + (a.tk - a.tq);
  if (a.bias.data) {
    int64_t off = i * a.bias.rowStride;
    for (int d = a.bias.batchRank - 1; d >= 0; --d) {
      int64_t ci = g % a.bias.batchShape[d];
      g /= a.bias.batchShape[d];
      off += ci * a.bias.batchStride[d];
    }
    info.biasBase = off;
  }
  return info;
}

/// Score of key j in a row: s + bias, -inf when masked.
__device__ inline float score(const float *srow, const AttnRows &a, const RowInfo &info,
                              int64_t j) {
  if (j > info.lastKey)
    return -INFINITY;
  float x = srow[j];
  if (a.bias.data)
    x += loadAny(a.bias.data, a.bias.dtype, info.biasBase + j * a.bias.colStride);
  return x;
}

unsigned rowBlocks(int64_t rows) {
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(rows, 1 << 20)));
}

template <typename T>
__global__ void attnSoftmaxKernel(const float *s, AttnRows a, T *p, float *lse) {
  __shared__ float shmM[kBlock / 32], shmS[kBlock / 32];
  int64_t rows = a.nb * a.tq;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *srow = s + r * a.tk;
    RowInfo info = rowInfo(a, r);
    MaxSum ms{-INFINITY, 0.0f};
    for (int64_t j = threadIdx.x; j < a.tk; j += blockDim.x)
      ms = merge(ms, MaxSum{score(srow, a, info, j), 1.0f});
    ms = blockMaxSum(ms, shmM, shmS);
    bool empty = ms.m == -INFINITY; // no finite score (NaN propagates)
    float l = empty ? -INFINITY : ms.m + logf(ms.s);
    if (threadIdx.x == 0)
      lse[r] = l;
    T *prow = p + r * a.tk;
    for (int64_t j = threadIdx.x; j < a.tk; j += blockDim.x) {
      float x = score(srow, a, info, j);
      prow[j] = fromF<T>(empty || x == -INFINITY ? 0.0f : expf(x - l));
    }
  }
}

template <typename T>
__global__ void attnProbsKernel(const float *s, const float *lse, AttnRows a, T *p) {
  int64_t rows = a.nb * a.tq;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float *srow = s + r * a.tk;
    RowInfo info = rowInfo(a, r);
    float l = lse[r];
    T *prow = p + r * a.tk;
    for (int64_t j = threadIdx.x; j < a.tk; j += blockDim.x) {
      float x = score(srow, a, info, j);
      prow[j] = fromF<T>(l == -INFINITY || x == -INFINITY ? 0.0f : expf(x - l));
    }
  }
}

/// Offset of row r's first element under `l` (dense: r * dv).
__device__ inline int64_t rowBase(const AttnRowLayout &l, int64_t r, int64_t dv) {
  if (l.dense)
    return r * dv;
  int64_t g = r / l.tq, off = (r % l.tq) * l.rowStride;
  for (int d = l.batchRank - 1; d >= 0; --d) {
    off += (g % l.batchShape[d]) * l.batchStride[d];
    g /= l.batchShape[d];
  }
  return off;
}

template <typename T>
__global__ void attnDrowKernel(const T *dy, const T *y, AttnRowLayout l, float *drow,
                               int64_t rows, int64_t dv) {
  __shared__ float shm[kBlock / 32];
  const int64_t cs = l.dense ? 1 : l.colStride;
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    float acc = 0.0f;
    int64_t base = rowBase(l, r, dv);
    for (int64_t c = threadIdx.x; c < dv; c += blockDim.x)
      acc += toF(dy[base + c * cs]) * toF(y[base + c * cs]);
    acc = blockSum(acc, shm);
    if (threadIdx.x == 0)
      drow[r] = acc;
  }
}

template <typename T>
__global__ void attnDscoresKernel(const float *dp, const float *drow, T *p, int64_t rows,
                                  int64_t tk) {
  int64_t n = rows * tk;
  GRID_STRIDE(e, n) {
    float pe = toF(p[e]);
    p[e] = fromF<T>(pe == 0.0f ? 0.0f : pe * (dp[e] - drow[e / tk]));
  }
}

} // namespace

bool launchAttentionSoftmax(const float *s, const AttnRows &a, ET pType, void *p, float *lse,
                            cudaStream_t st) {
  int64_t rows = a.nb * a.tq;
  if (rows == 0)
    return pType == ET::F32 || pType == ET::F16 || pType == ET::BF16;
  unsigned g = rowBlocks(rows);
  switch (pType) {
  case ET::F32:
    attnSoftmaxKernel<float><<<g, kBlock, 0, st>>>(s, a, static_cast<float *>(p), lse);
    return true;
  case ET::F16:
    attnSoftmaxKernel<__half><<<g, kBlock, 0, st>>>(s, a, static_cast<__half *>(p), lse);
    return true;
  case ET::BF16:
    attnSoftmaxKernel<__nv_bfloat16>
        <<<g, kBlock, 0, st>>>(s, a, static_cast<__nv_bfloat16 *>(p), lse);
    return true;
  default: return false;
  }
}

bool launchAttentionProbs(const float *s, const float *lse, const AttnRows &a, ET pType, void *p,
                          cudaStream_t st) {
  int64_t rows = a.nb * a.tq;
  if (rows == 0)
    return pType == ET::F32 || pType == ET::F16 || pType == ET::BF16;
  unsigned g = rowBlocks(rows);
  switch (pType) {
  case ET::F32:
    attnProbsKernel<float><<<g, kBlock, 0, st>>>(s, lse, a, static_cast<float *>(p));
    return true;
  case ET::F16:
    attnProbsKernel<__half><<<g, kBlock, 0, st>>>(s, lse, a, static_cast<__half *>(p));
    return true;
  case ET::BF16:
    attnProbsKernel<__nv_bfloat16>
        <<<g, kBlock, 0, st>>>(s, lse, a, static_cast<__nv_bfloat16 *>(p));
    return true;
  default: return false;
  }
}

bool launchAttentionDrow(ET type, const void *dy, const void *y, const AttnRowLayout &l,
                         float *drow, int64_t rows, int64_t dv, cudaStream_t st) {
  if (rows == 0)
    return type == ET::F32 || type == ET::F16 || type == ET::BF16;
  if (!l.dense && (l.tq <= 0 || l.batchRank < 0 || l.batchRank > kMaxDims))
    return false;
  unsigned g = rowBlocks(rows);
  switch (type) {
  case ET::F32:
    attnDrowKernel<float><<<g, kBlock, 0, st>>>(static_cast<const float *>(dy),
                                                static_cast<const float *>(y), l, drow, rows, dv);
    return true;
  case ET::F16:
    attnDrowKernel<__half><<<g, kBlock, 0, st>>>(
        static_cast<const __half *>(dy), static_cast<const __half *>(y), l, drow, rows, dv);
    return true;
  case ET::BF16:
    attnDrowKernel<__nv_bfloat16><<<g, kBlock, 0, st>>>(
        static_cast<const __nv_bfloat16 *>(dy), static_cast<const __nv_bfloat16 *>(y), l, drow,
        rows, dv);
    return true;
  default: return false;
  }
}

bool launchAttentionDscores(const float *dp, const float *drow, ET pType, void *p, int64_t rows,
                            int64_t tk, cudaStream_t st) {
  int64_t n = rows * tk;
  if (n == 0)
    return pType == ET::F32 || pType == ET::F16 || pType == ET::BF16;
  unsigned g = blocksFor(n);
  switch (pType) {
  case ET::F32:
    attnDscoresKernel<float><<<g, kBlock, 0, st>>>(dp, drow, static_cast<float *>(p), rows, tk);
    return true;
  case ET::F16:
    attnDscoresKernel<__half><<<g, kBlock, 0, st>>>(dp, drow, static_cast<__half *>(p), rows, tk);
    return true;
  case ET::BF16:
    attnDscoresKernel<__nv_bfloat16>
        <<<g, kBlock, 0, st>>>(dp, drow, static_cast<__nv_bfloat16 *>(p), rows, tk);
    return true;
  default: return false;
  }
}

} // namespace cuda
} // namespace rt
} // namespace strait
