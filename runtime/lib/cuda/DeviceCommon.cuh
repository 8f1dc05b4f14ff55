//===- DeviceCommon.cuh - Launch geometry shared by the .cu files -*- CUDA -*-===//
//
// Included by device code only (nvcc): the block size every kernel uses, the
// grid for n elements (capped; kernels loop with GRID_STRIDE), and the
// grid-stride loop.
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

} // namespace cuda
} // namespace rt
} // namespace strait

#define GRID_STRIDE(i, n)                                                        \
  for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n);     \
       i += (int64_t)gridDim.x * blockDim.x)

#endif // STRAIT_RUNTIME_LIB_CUDA_DEVICECOMMON_CUH
