//===- ConvBias.cu - Per-channel bias of a convolution in any float type ---===//
//
// Y [n, m, spatial] += bias [m] for the bf16/f16 convolutions (the f32 one
// uses cudnnAddTensor): the sum in f32, rounded to Y's type (nearest even)
// once. The bias is Y's type or f32.
//
//===----------------------------------------------------------------------===//
#include "CudaLaunch.h"
#include "DeviceCommon.cuh"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace strait {
namespace rt {
namespace cuda {
namespace {

template <typename Y, typename B>
__global__ void channelBiasKernel(Y *y, const B *bias, int64_t total, int64_t m,
                                  int64_t spatial) {
  GRID_STRIDE(i, total) {
    int64_t ch = (i / spatial) % m;
    y[i] = fromF<Y>(toF(y[i]) + toF(bias[ch]));
  }
}

template <typename Y>
bool biasFor(void *y, ET biasType, const void *bias, int64_t total, int64_t m, int64_t spatial,
             cudaStream_t s) {
  Y *yy = static_cast<Y *>(y);
  switch (biasType) {
  case ET::F32:
    channelBiasKernel<<<blocksFor(total), kBlock, 0, s>>>(
        yy, static_cast<const float *>(bias), total, m, spatial);
    return true;
  case ET::F16:
    channelBiasKernel<<<blocksFor(total), kBlock, 0, s>>>(
        yy, static_cast<const __half *>(bias), total, m, spatial);
    return true;
  case ET::BF16:
    channelBiasKernel<<<blocksFor(total), kBlock, 0, s>>>(
        yy, static_cast<const __nv_bfloat16 *>(bias), total, m, spatial);
    return true;
  default: return false;
  }
}

} // namespace

bool launchChannelBias(ET yType, void *y, ET biasType, const void *bias, int64_t n, int64_t m,
                       int64_t spatial, cudaStream_t s) {
  int64_t total = n * m * spatial;
  if (total == 0)
    return true;
  switch (yType) {
  case ET::F32: return biasFor<float>(y, biasType, bias, total, m, spatial, s);
  case ET::F16: return biasFor<__half>(y, biasType, bias, total, m, spatial, s);
  case ET::BF16: return biasFor<__nv_bfloat16>(y, biasType, bias, total, m, spatial, s);
  default: return false;
  }
}

} // namespace cuda
} // namespace rt
} // namespace strait
