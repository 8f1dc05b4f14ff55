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

/// One AdamW update (bias corrections c1, c2 already applied to the rates).
struct AdamWScalars {
  float rate, c1, c2, b1, b2, eps, wd;
  bool updateV; // false once V is frozen (freeze_variance_after)
};
__device__ inline void adamWElement(const AdamWScalars &p, float g, float &x, float &m,
                                    float &v) {
  float mn = p.b1 * m + (1 - p.b1) * g;
  float vn = p.updateV ? p.b2 * v + (1 - p.b2) * g * g : v;
  float update = (mn / p.c1) / (sqrtf(vn / p.c2) + p.eps);
  x = x - p.rate * (update + p.wd * x);
  m = mn;
  v = vn;
}

/// Element k of t's 16-bit copy of the parameter (if t has one): x rounded
/// to nearest even, as the Cast kernel rounds.
__device__ inline void storeCopy(const AdamWTensor &t, int64_t k, float x) {
  if (t.lowType == ET::BF16)
    static_cast<__nv_bfloat16 *>(t.low)[k] = fromF<__nv_bfloat16>(x);
  else
    static_cast<__half *>(t.low)[k] = fromF<__half>(x);
}

/// Elements [begin, end) of tensor `t`, whose gradient is G: f32, or bf16 /
/// f16 widened exactly on load (a one-micro-batch step hands it over without
/// AccumulateGrad). `begin` is a multiple of 4: four elements per thread
/// through 16-byte loads (8-byte for a 16-bit gradient) where every pointer
/// is aligned (parameters, gradients and their state are 256-byte aligned
/// buffers), then the rest one by one.
template <typename G>
__device__ void adamWRange(const AdamWTensor &t, int64_t begin, int64_t end,
                           const AdamWScalars &p) {
  const G *g = static_cast<const G *>(t.g);
  bool vec = ((reinterpret_cast<uintptr_t>(t.x) | reinterpret_cast<uintptr_t>(g) |
               reinterpret_cast<uintptr_t>(t.m) | reinterpret_cast<uintptr_t>(t.v) |
               reinterpret_cast<uintptr_t>(t.xo) | reinterpret_cast<uintptr_t>(t.mo) |
               reinterpret_cast<uintptr_t>(t.vo)) % 16) == 0;
  int64_t vecEnd = vec ? begin + (end - begin) / 4 * 4 : begin;
  for (int64_t q = begin / 4 + threadIdx.x; q < vecEnd / 4; q += blockDim.x) {
    float4 gq = load4(g, q), xq = reinterpret_cast<const float4 *>(t.x)[q];
    float4 mq = reinterpret_cast<const float4 *>(t.m)[q];
    float4 vq = reinterpret_cast<const float4 *>(t.v)[q];
    adamWElement(p, gq.x, xq.x, mq.x, vq.x);
    adamWElement(p, gq.y, xq.y, mq.y, vq.y);
    adamWElement(p, gq.z, xq.z, mq.z, vq.z);
    adamWElement(p, gq.w, xq.w, mq.w, vq.w);
    reinterpret_cast<float4 *>(t.xo)[q] = xq;
    reinterpret_cast<float4 *>(t.mo)[q] = mq;
    reinterpret_cast<float4 *>(t.vo)[q] = vq;
    if (t.low) {
      storeCopy(t, 4 * q, xq.x);
      storeCopy(t, 4 * q + 1, xq.y);
      storeCopy(t, 4 * q + 2, xq.z);
      storeCopy(t, 4 * q + 3, xq.w);
    }
  }
  for (int64_t k = vecEnd + threadIdx.x; k < end; k += blockDim.x) {
    float x = t.x[k], m = t.m[k], v = t.v[k];
    adamWElement(p, toF(g[k]), x, m, v);
    t.xo[k] = x;
    t.mo[k] = m;
    t.vo[k] = v;
    if (t.low)
      storeCopy(t, k, x);
  }
}

/// Elements per block of a multi-tensor AdamW launch.
constexpr int64_t kAdamWChunk = 4 * 4 * kBlock;
/// Tensors per launch: the batch travels as the kernel's parameter (under
/// the 4 KiB every CUDA version takes).
constexpr int kAdamWBatch = 24;
struct AdamWBatch {
  AdamWTensor t[kAdamWBatch];
  /// Blocks before tensor i; chunkStart[count] is the grid size.
  int64_t chunkStart[kAdamWBatch + 1];
  int count;
};
static_assert(sizeof(AdamWBatch) < 4000, "AdamW batch exceeds the kernel parameter limit");

/// Every block updates one chunk of one tensor of the batch.
__global__ void adamWKernel(const float *lr, const void *stepPtr, bool step64, AdamWBatch batch,
                            float b1, float b2, float eps, float wd, int64_t freezeAfter,
                            const float *skip, int *flag, int tag) {
  int64_t step =
      step64 ? static_cast<const int64_t *>(stepPtr)[0] : static_cast<const int32_t *>(stepPtr)[0];
  int i = 0;
  while (i + 1 < batch.count && batch.chunkStart[i + 1] <= blockIdx.x)
    ++i;
  const AdamWTensor &t = batch.t[i];
  int64_t begin = (blockIdx.x - batch.chunkStart[i]) * kAdamWChunk;
  int64_t end = t.n < begin + kAdamWChunk ? t.n : begin + kAdamWChunk;
  // Loss scaling found inf/nan (on the device: no host round trip, and a
  // CUDA graph replays it): the update is skipped, the outputs keep the
  // inputs (aliased by the exporter: nothing to copy). Before the step's
  // check, as the CPU kernel (keepInputs) does.
  if (skip && skip[0] != 0.0f) {
    for (int64_t k = begin + threadIdx.x; k < end; k += blockDim.x) {
      if (t.xo != t.x)
        t.xo[k] = t.x[k];
      if (t.mo != t.m)
        t.mo[k] = t.m[k];
      if (t.vo != t.v)
        t.vo[k] = t.v[k];
    }
    return;
  }
  if (step < 1) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
      raise(flag, tag, kErrBadStep);
    return;
  }
  // The bias corrections once per block: two double pow() per thread cost
  // more than the update itself.
  // A frozen V (step past freezeAfter > 0) keeps the correction of its last
  // update.
  bool updateV = freezeAfter <= 0 || step <= freezeAfter;
  int64_t vStep = updateV ? step : freezeAfter;
  __shared__ float corr[2];
  if (threadIdx.x == 0) {
    corr[0] = 1.0f - static_cast<float>(pow(static_cast<double>(b1), static_cast<double>(step)));
    corr[1] = 1.0f - static_cast<float>(pow(static_cast<double>(b2), static_cast<double>(vStep)));
  }
  __syncthreads();
  AdamWScalars p{lr[0], corr[0], corr[1], b1, b2, eps, wd, updateV};
  switch (t.gType) {
  case ET::BF16:
    adamWRange<__nv_bfloat16>(t, begin, end, p);
    break;
  case ET::F16:
    adamWRange<__half>(t, begin, end, p);
    break;
  default:
    adamWRange<float>(t, begin, end, p);
    break;
  }
}

template <typename G>
__global__ void sgdKernel(const float *lr, const float *p, const G *g, const float *v,
                          float *po, float *vo, int64_t n, float mom, float wd, bool nesterov,
                          const float *skip) {
  float rate = lr[0];
  if (skip && skip[0] != 0.0f) { // loss scaling found inf/nan: no update
    GRID_STRIDE(i, n) {
      po[i] = p[i];
      vo[i] = v[i];
    }
    return;
  }
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

bool launchAdamW(const float *lr, const void *step, bool step64, const AdamWTensor *tensors,
                 size_t count, float b1, float b2, float eps, float wd, int64_t freezeAfter,
                 const float *skip, int *flag, int tag, cudaStream_t s) {
  for (size_t i = 0; i < count; ++i)
    if (tensors[i].gType != ET::F32 && tensors[i].gType != ET::BF16 &&
        tensors[i].gType != ET::F16)
      return false;
  AdamWBatch batch{};
  auto flush = [&] {
    if (batch.count && batch.chunkStart[batch.count])
      adamWKernel<<<static_cast<unsigned>(batch.chunkStart[batch.count]), kBlock, 0, s>>>(
          lr, step, step64, batch, b1, b2, eps, wd, freezeAfter, skip, flag, tag);
    batch.count = 0;
  };
  for (size_t i = 0; i < count; ++i) {
    int c = batch.count;
    batch.t[c] = tensors[i];
    batch.chunkStart[c + 1] = batch.chunkStart[c] + (tensors[i].n + kAdamWChunk - 1) / kAdamWChunk;
    batch.count = c + 1;
    if (batch.count == kAdamWBatch)
      flush();
  }
  flush();
  return true;
}

bool launchSgd(const float *lr, const float *p, ET gType, const void *g, const float *v,
               float *po, float *vo, int64_t n, float momentum, float wd, bool nesterov,
               const float *skip, cudaStream_t s) {
  return withGradType(gType, g, [&](auto *gt) {
    if (n)
      sgdKernel<<<blocksFor(n), kBlock, 0, s>>>(lr, p, gt, v, po, vo, n, momentum, wd, nesterov,
                                                skip);
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

/// Loss scaling: out = g * (1/S) (GradScaler's f32 reciprocal); any
/// non-finite element sets *found to 1 (every writer writes the same value).
__global__ void unscaleKernel(const float *g, float *out, int64_t n, const float *scale,
                              float *found) {
  float inv = static_cast<float>(1.0 / static_cast<double>(scale[0]));
  GRID_STRIDE(i, n) {
    float v = g[i];
    if (!isfinite(v))
      found[0] = 1.0f;
    out[i] = v * inv;
  }
}

void launchUnscale(const float *g, float *out, int64_t n, const float *scale, float *found,
                   cudaStream_t s) {
  if (n)
    unscaleKernel<<<blocksFor(n), kBlock, 0, s>>>(g, out, n, scale, found);
}

void launchWriteNorm(const double *sumSq, float *norm, cudaStream_t s) {
  writeNormKernel<<<1, 1, 0, s>>>(sumSq, norm);
}

} // namespace cuda
} // namespace rt
} // namespace strait
