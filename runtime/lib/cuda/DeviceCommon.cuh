//===- DeviceCommon.cuh - Launch geometry shared by the .cu files -*- CUDA -*-===//
//
// Included by device code only (nvcc): the block size every kernel uses, the
// grid for n elements (capped; kernels loop with GRID_STRIDE), the
// grid-stride loop, the block-wide sum, the block-wide online softmax
// statistics (max and sum of exponentials), and f32 <-> f16/bf16 element
// conversions (round to nearest even).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_DEVICECOMMON_CUH
#define STRAIT_RUNTIME_LIB_CUDA_DEVICECOMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace strait {
namespace rt {
namespace cuda {

constexpr int kBlock = 256;

inline unsigned blocksFor(int64_t n) {
  int64_t b = (n + kBlock - 1) / kBlock;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min<int64_t>(b, 1 << 20)));
}

/// Sum of v over the block (blockDim.x == kBlock); every thread gets the
/// result. `shm`: kBlock / 32 values of shared memory. The barrier before the
/// write orders it after the reads of a previous call, so consecutive calls
/// may share `shm`; any other write to it needs a __syncthreads() first.
template <typename T> __device__ inline T blockSum(T v, T *shm) {
  for (int o = 16; o > 0; o >>= 1)
    v += __shfl_xor_sync(0xffffffffu, v, o);
  __syncthreads();
  if ((threadIdx.x & 31) == 0)
    shm[threadIdx.x >> 5] = v;
  __syncthreads();
  T r = T(0);
  for (int w = 0; w < kBlock / 32; ++w)
    r += shm[w];
  return r;
}

/// Raises the backend's error flag (CudaContext::errorFlag): the first
/// kernel to fail keeps its tag in flag[0] and its DeviceError in flag[1].
__device__ inline void raise(int *flag, int tag, int code) {
  if (atomicCAS(flag, 0, tag) == 0)
    flag[1] = code;
}

/// An element of f32, f16 or bf16 as f32, and back (round to nearest even).
__device__ inline float toF(float x) { return x; }
__device__ inline float toF(__half x) { return __half2float(x); }
__device__ inline float toF(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ inline T fromF(float x);
template <> __device__ inline float fromF<float>(float x) { return x; }
template <> __device__ inline __half fromF<__half>(float x) { return __float2half_rn(x); }
template <> __device__ inline __nv_bfloat16 fromF<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

/// Online softmax statistics: running max m and sum s of exp(x - m); -inf
/// entries (m = -inf) leave the other side unchanged.
struct MaxSum {
  float m, s;
};
__device__ inline MaxSum merge(MaxSum a, MaxSum b) {
  if (a.m == -INFINITY)
    return b;
  if (b.m == -INFINITY)
    return a;
  float m = fmaxf(a.m, b.m);
  return {m, a.s * expf(a.m - m) + b.s * expf(b.m - m)};
}
__device__ inline MaxSum add(MaxSum a, float x) { return merge(a, MaxSum{x, 1.0f}); }

/// MaxSum over the block (blockDim.x == kBlock), every thread gets the
/// result; `shmM`, `shmS`: kBlock / 32 floats of shared memory each (same
/// barrier rule as blockSum).
__device__ inline MaxSum blockMaxSum(MaxSum v, float *shmM, float *shmS) {
  for (int o = 16; o > 0; o >>= 1) {
    MaxSum other{__shfl_xor_sync(0xffffffffu, v.m, o), __shfl_xor_sync(0xffffffffu, v.s, o)};
    v = merge(v, other);
  }
  __syncthreads();
  if ((threadIdx.x & 31) == 0) {
    shmM[threadIdx.x >> 5] = v.m;
    shmS[threadIdx.x >> 5] = v.s;
  }
  __syncthreads();
  MaxSum r{-INFINITY, 0.0f};
  for (int w = 0; w < kBlock / 32; ++w)
    r = merge(r, MaxSum{shmM[w], shmS[w]});
  return r;
}

} // namespace cuda
} // namespace rt
} // namespace strait

#define GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);     \
       i += (int64_t)gridDim.x * blockDim.x)

#endif // STRAIT_RUNTIME_LIB_CUDA_DEVICECOMMON_CUH
