//===- Optimizers.cu - Optimizer, accumulation and clipping kernels -------===//
//
// AdamW and SGD read the learning rate and the step count from device memory
// (program inputs), so an optimizer update never waits for the host.
// ClipByGlobalNorm accumulates the squared norm in a double on the device.
//
//===----------------------------------------------------------------------===//
#include "CudaLaunch.h"
#include "DeviceCommon.cuh"

#include <algorithm>
#include <cmath>

namespace strait {
namespace rt {
namespace cuda {
namespace {

/// Four consecutive gradient values from chunk q (16-byte aligned f32 or
/// 8-byte aligned 16-bit data), widened to f32 exactly.
__device__ inline float4 load4(const float *g, int64_t q) {
  return reinterpret_cast<const float4 *>(g)[q];
}
template <typename H> __device__ inline float4 load4(const H *g, int64_t q) {
  uint2 raw = reinterpret_cast<const uint2 *>(g)[q];
  const H *h = reinterpret_cast<const H *>(&raw);
  return make_float4(toF(h[0]), toF(h[1]), toF(h[2]), toF(h[3]));
}

/// The gradient g is f32, or bf16 / f16 widened exactly on load (a
/// one-micro-batch step hands it over without AccumulateGrad).
template <typename G>
__global__ void adamWKernel(const float *lr, const void *stepPtr, bool step64, const float *x,
                            const G *g, const float *m, const float *v, float *xo, float *mo,
                            float *vo, int64_t n, float b1, float b2, float eps, float wd,
                            int *flag, int tag) {
  int64_t step = step64 ? static_cast<const int64_t *>(stepPtr)[0]
                        : static_cast<const int32_t *>(stepPtr)[0];
  if (step < 1) {
    if (blockIdx.x == 0 && threadIdx.x == 0 && atomicCAS(flag, 0, tag) == 0)
      flag[1] = kErrBadStep;
    return;
  }
  // The bias corrections once per block: two double pow() per thread cost
  // more than the update itself.
  __shared__ float corr[2];
  if (threadIdx.x == 0) {
    corr[0] = 1.0f - static_cast<float>(pow(static_cast<double>(b1), static_cast<double>(step)));
    corr[1] = 1.0f - static_cast<float>(pow(static_cast<double>(b2), static_cast<double>(step)));
  }
  __syncthreads();
  float c1 = corr[0], c2 = corr[1];
  float rate = lr[0];
  // Four elements per thread through 16-byte loads (8-byte for a 16-bit
  // gradient) where every pointer is aligned (parameters, gradients and
  // their state are 256-byte aligned buffers).
  bool vec = ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(g) |
               reinterpret_cast<uintptr_t>(m) | reinterpret_cast<uintptr_t>(v) |
               reinterpret_cast<uintptr_t>(xo) | reinterpret_cast<uintptr_t>(mo) |
               reinterpret_cast<uintptr_t>(vo)) % 16) == 0;
  int64_t head = vec ? n / 4 : 0;
  GRID_STRIDE(q, head) {
    float4 gq = load4(g, q), xq = reinterpret_cast<const float4 *>(x)[q];
    float4 mq = reinterpret_cast<const float4 *>(m)[q], vq = reinterpret_cast<const float4 *>(v)[q];
    float *gs = &gq.x, *xs = &xq.x, *ms = &mq.x, *vs = &vq.x;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      float mn = b1 * ms[j] + (1 - b1) * gs[j];
      float vn = b2 * vs[j] + (1 - b2) * gs[j] * gs[j];
      float update = (mn / c1) / (sqrtf(vn / c2) + eps);
      xs[j] = xs[j] - rate * (update + wd * xs[j]);
      ms[j] = mn;
      vs[j] = vn;
    }
    reinterpret_cast<float4 *>(xo)[q] = xq;
    reinterpret_cast<float4 *>(mo)[q] = mq;
    reinterpret_cast<float4 *>(vo)[q] = vq;
  }
  for (int64_t k = head * 4 + blockIdx.x * (int64_t)blockDim.x + threadIdx.x; k < n;
       k += (int64_t)gridDim.x * blockDim.x) {
    float gk = toF(g[k]), xk = x[k];
    float mn = b1 * m[k] + (1 - b1) * gk;
    float vn = b2 * v[k] + (1 - b2) * gk * gk;
    float update = (mn / c1) / (sqrtf(vn / c2) + eps);
    xo[k] = xk - rate * (update + wd * xk);
    mo[k] = mn;
    vo[k] = vn;
  }
}

template <typename G>
__global__ void sgdKernel(const float *lr, const float *p, const G *g, const float *v,
                          float *po, float *vo, int64_t n, float mom, float wd, bool nesterov) {
  float rate = lr[0];
  GRID_STRIDE(i, n) {
    float gr = toF(g[i]) + wd * p[i];
    float vn = mom * v[i] + gr;
    po[i] = p[i] - rate * (nesterov ? gr + mom * vn : vn);
    vo[i] = vn;
  }
}

/// g of type G: f32, or bf16 / f16 widened exactly on load.
template <typename G>
__global__ void accumulateKernel(const G *g, float *total, int64_t n, float f, bool first) {
  GRID_STRIDE(i, n) { total[i] = (first ? 0.0f : total[i]) + toF(g[i]) * f; }
}

__global__ void sumSquaresKernel(const float *g, int64_t n, double *sumSq) {
  __shared__ double shm[kBlock / 32];
  double part = 0.0;
  GRID_STRIDE(i, n) { part += static_cast<double>(g[i]) * g[i]; }
  for (int o = 16; o > 0; o >>= 1)
    part += __shfl_xor_sync(0xffffffffu, part, o);
  if ((threadIdx.x & 31) == 0)
    shm[threadIdx.x >> 5] = part;
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int w = 0; w < kBlock / 32; ++w)
      total += shm[w];
    atomicAdd(sumSq, total);
  }
}

__global__ void clipScaleKernel(const float *g, float *out, int64_t n, const double *sumSq,
                                float maxNorm) {
  double norm = sqrt(*sumSq);
  float f = static_cast<float>(fmin(1.0, maxNorm / (norm + 1e-6)));
  GRID_STRIDE(i, n) { out[i] = g[i] * f; }
}

__global__ void writeNormKernel(const double *sumSq, float *norm) {
  norm[0] = static_cast<float>(sqrt(*sumSq));
}

/// Calls launch(g as const G *) with G the element type `gType` names (f32,
/// bf16 or f16); false (nothing called) for another type.
template <typename Launch> bool withGradType(ET gType, const void *g, Launch &&launch) {
  switch (gType) {
  case ET::F32:
    launch(static_cast<const float *>(g));
    return true;
  case ET::BF16:
    launch(static_cast<const __nv_bfloat16 *>(g));
    return true;
  case ET::F16:
    launch(static_cast<const __half *>(g));
    return true;
  default:
    return false;
  }
}

} // namespace

bool launchAdamW(const float *lr, const void *step, bool step64, const float *x, ET gType,
                 const void *g, const float *m, const float *v, float *xo, float *mo, float *vo,
                 int64_t n, float b1, float b2, float eps, float wd, int *flag, int tag,
                 cudaStream_t s) {
  return withGradType(gType, g, [&](auto *gt) {
    adamWKernel<<<blocksFor(n), kBlock, 0, s>>>(lr, step, step64, x, gt, m, v, xo, mo, vo, n, b1,
                                                b2, eps, wd, flag, tag);
  });
}

bool launchSgd(const float *lr, const float *p, ET gType, const void *g, const float *v,
               float *po, float *vo, int64_t n, float momentum, float wd, bool nesterov,
               cudaStream_t s) {
  return withGradType(gType, g, [&](auto *gt) {
    if (n)
      sgdKernel<<<blocksFor(n), kBlock, 0, s>>>(lr, p, gt, v, po, vo, n, momentum, wd, nesterov);
  });
}

void launchAccumulate(const float *g, float *total, int64_t n, float f, bool first,
                      cudaStream_t s) {
  launchAccumulate(ET::F32, g, total, n, f, first, s);
}

bool launchAccumulate(ET gType, const void *g, float *total, int64_t n, float f, bool first,
                      cudaStream_t s) {
  return withGradType(gType, g, [&](auto *gt) {
    if (n)
      accumulateKernel<<<blocksFor(n), kBlock, 0, s>>>(gt, total, n, f, first);
  });
}

void launchSumSquares(const float *g, int64_t n, double *sumSq, cudaStream_t s) {
  if (n)
    sumSquaresKernel<<<std::min<unsigned>(blocksFor(n), 1024), kBlock, 0, s>>>(g, n, sumSq);
}

void launchClipScale(const float *g, float *out, int64_t n, const double *sumSq, float maxNorm,
                     cudaStream_t s) {
  if (n)
    clipScaleKernel<<<blocksFor(n), kBlock, 0, s>>>(g, out, n, sumSq, maxNorm);
}

void launchWriteNorm(const double *sumSq, float *norm, cudaStream_t s) {
  writeNormKernel<<<1, 1, 0, s>>>(sumSq, norm);
}

} // namespace cuda
} // namespace rt
} // namespace strait
