//===- DeviceCommon.cuh - Launch geometry shared by the .cu files -*- CUDA -*-===//
//
// Included by device code only (nvcc): the block size every kernel uses, the
// grid for n elements (capped; kernels loop with GRID_STRIDE), the
// grid-stride loop, and the block-wide sum.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_DEVICECOMMON_CUH
#define STRAIT_RUNTIME_LIB_CUDA_DEVICECOMMON_CUH

#include <algorithm>
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

} // namespace cuda
} // namespace rt
} // namespace strait

#define GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);     \
       i += (int64_t)gridDim.x * blockDim.x)

#endif // STRAIT_RUNTIME_LIB_CUDA_DEVICECOMMON_CUH
