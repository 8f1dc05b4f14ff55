//===- Pooling.cu - Pooling and batch normalization kernels ---------------===//
//
// Pooling: one thread per output element, the window walked by the CPU
// backend's code (rt::walkWindow: MaxPool's ties and MaxPoolGrad's routing
// pick the same element, AveragePool counts the same padding); the gradients scatter with atomicAdd into a zeroed dX. Batch
// normalization: one 256-thread block per channel, statistics in double
// (sum and sum of squares, as the CPU backend), then the affine pass.
//
//===----------------------------------------------------------------------===//
#include "CudaLaunch.h"
#include "DeviceCommon.cuh"

#include <cfloat>
#include <cmath>

namespace strait {
namespace rt {
namespace cuda {
namespace {

__global__ void poolKernel(bool max, bool includePad, const float *x, float *y,
                           int64_t *indices, int64_t planes, ConvWindow w) {
  int64_t per = w.out[0] * w.out[1] * w.out[2], inSize = w.in[0] * w.in[1] * w.in[2];
  GRID_STRIDE(i, planes * per) {
    int64_t pl = i / per, o = i % per;
    int64_t argmax;
    y[i] = poolWindow(w, x + pl * inSize, o, max, includePad, argmax);
    if (max && indices)
      indices[i] = pl * inSize + argmax;
  }
}

__global__ void poolGradKernel(bool max, bool includePad, const float *dy, const float *x,
                               float *dx, int64_t planes, ConvWindow w) {
  int64_t per = w.out[0] * w.out[1] * w.out[2], inSize = w.in[0] * w.in[1] * w.in[2];
  GRID_STRIDE(i, planes * per) {
    int64_t pl = i / per, o = i % per;
    float *out = dx + pl * inSize;
    float g = dy[i];
    if (max) {
      const float *in = x + pl * inSize;
      int64_t best = -1;
      walkWindow(w, o, [&](int64_t idx) {
        if (best < 0 || in[idx] > in[best])
          best = idx;
      });
      if (best >= 0)
        atomicAdd(out + best, g);
    } else {
      int64_t count = 0;
      int64_t padded = walkWindow(w, o, [&](int64_t) { ++count; });
      if (count == 0)
        continue;
      int64_t denom = count + (includePad ? padded : 0);
      float v = g / denom;
      walkWindow(w, o, [&](int64_t idx) { atomicAdd(out + idx, v); });
    }
  }
}

__global__ void globalPoolKernel(bool max, const float *x, float *y, int64_t size) {
  __shared__ double shm[32];
  const float *in = x + blockIdx.x * size;
  double acc = max ? -INFINITY : 0.0;
  for (int64_t i = threadIdx.x; i < size; i += blockDim.x)
    acc = max ? fmax(acc, (double)in[i]) : acc + in[i];
  if (max) {
    for (int o = 16; o > 0; o >>= 1)
      acc = fmax(acc, __shfl_xor_sync(0xffffffffu, acc, o));
    if ((threadIdx.x & 31) == 0)
      shm[threadIdx.x >> 5] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
      double r = -INFINITY;
      for (int k = 0; k < kBlock / 32; ++k)
        r = fmax(r, shm[k]);
      y[blockIdx.x] = (float)r;
    }
  } else {
    double r = blockSum(acc, shm);
    if (threadIdx.x == 0)
      y[blockIdx.x] = (float)(r / size);
  }
}

/// Element j of channel ch: j enumerates (image, spatial position).
__device__ inline int64_t chanAt(int64_t j, int64_t ch, int64_t c, int64_t spatial) {
  return ((j / spatial) * c + ch) * spatial + j % spatial;
}

__global__ void batchNormKernel(const float *x, float *y, BatchNormArgs a) {
  __shared__ double shm[32];
  int64_t ch = blockIdx.x, count = a.n * a.spatial;
  double mean, var;
  if (a.batchStats) {
    double s = 0, sq = 0;
    for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
      double v = x[chanAt(j, ch, a.c, a.spatial)];
      s += v;
      sq += v * v;
    }
    s = blockSum(s, shm);
    sq = blockSum(sq, shm);
    mean = s / count;
    var = fmax(0.0, sq / count - mean * mean);
  } else {
    mean = a.inMean[ch];
    var = a.inVar[ch];
  }
  double inv = 1.0 / sqrt(var + (double)a.eps);
  float sa = (float)(a.scale[ch] * inv);
  float sb = (float)(a.bias[ch] - mean * sa);
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    int64_t k = chanAt(j, ch, a.c, a.spatial);
    y[k] = x[k] * sa + sb;
  }
  if (threadIdx.x == 0 && a.batchStats) {
    double m = a.momentum;
    double rv = a.unbiasedVar && count > 1 ? var * count / (count - 1) : var;
    if (a.mean)
      a.mean[ch] = (float)mean;
    if (a.invStd)
      a.invStd[ch] = (float)inv;
    if (a.runMean)
      a.runMean[ch] = (float)(m * a.inMean[ch] + (1 - m) * mean);
    if (a.runVar)
      a.runVar[ch] = (float)(m * a.inVar[ch] + (1 - m) * rv);
  }
}

__global__ void batchNormGradKernel(const float *dy, const float *x, const float *scale,
                                    const float *mean, const float *invStd, float *dx,
                                    float *dScale, float *dBias, int64_t c, int64_t spatial,
                                    int64_t count) {
  __shared__ double shm[32];
  int64_t ch = blockIdx.x;
  double mu = mean[ch], is = invStd[ch], sg = 0, sgx = 0;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    int64_t k = chanAt(j, ch, c, spatial);
    double g = dy[k];
    sg += g;
    sgx += g * (x[k] - mu) * is;
  }
  sg = blockSum(sg, shm);
  sgx = blockSum(sgx, shm);
  double m = (double)count, f = scale[ch] * is / m;
  for (int64_t j = threadIdx.x; j < count; j += blockDim.x) {
    int64_t k = chanAt(j, ch, c, spatial);
    double xhat = (x[k] - mu) * is;
    dx[k] = (float)(f * (m * dy[k] - sg - xhat * sgx));
  }
  if (threadIdx.x == 0) {
    dScale[ch] = (float)sgx;
    dBias[ch] = (float)sg;
  }
}

} // namespace

void launchPool(bool max, bool countIncludePad, const float *x, float *y, int64_t *indices,
                int64_t planes, const ConvWindow &w, cudaStream_t s) {
  int64_t n = planes * w.outSize();
  if (n == 0)
    return;
  poolKernel<<<blocksFor(n), kBlock, 0, s>>>(max, countIncludePad, x, y, indices, planes, w);
}

void launchPoolGrad(bool max, bool countIncludePad, const float *dy, const float *x, float *dx,
                    int64_t planes, const ConvWindow &w, cudaStream_t s) {
  cudaMemsetAsync(dx, 0, planes * w.inSize() * sizeof(float), s);
  int64_t n = planes * w.outSize();
  if (n == 0)
    return;
  poolGradKernel<<<blocksFor(n), kBlock, 0, s>>>(max, countIncludePad, dy, x, dx, planes, w);
}

void launchGlobalPool(bool max, const float *x, float *y, int64_t planes, int64_t size,
                      cudaStream_t s) {
  if (planes == 0)
    return;
  globalPoolKernel<<<static_cast<unsigned>(planes), kBlock, 0, s>>>(max, x, y, size);
}

void launchBatchNorm(const float *x, float *y, const BatchNormArgs &a, cudaStream_t s) {
  if (a.c == 0)
    return;
  batchNormKernel<<<static_cast<unsigned>(a.c), kBlock, 0, s>>>(x, y, a);
}

void launchBatchNormGrad(const float *dy, const float *x, const float *scale, const float *mean,
                         const float *invStd, float *dx, float *dScale, float *dBias, int64_t n,
                         int64_t c, int64_t spatial, cudaStream_t s) {
  if (c == 0)
    return;
  batchNormGradKernel<<<static_cast<unsigned>(c), kBlock, 0, s>>>(
      dy, x, scale, mean, invStd, dx, dScale, dBias, c, spatial, n * spatial);
}

} // namespace cuda
} // namespace rt
} // namespace strait
