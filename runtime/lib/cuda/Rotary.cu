//===- Rotary.cu - FusedRotaryEmbedding on the GPU -------------------------===//
//
// The rotate-half rotary embedding (docs/runtime.md "Rotary embedding"):
// one thread per (row, c < h) pair writes y_c and y_{c+h}. The offsets of
// the row in Cos and Sin come from their broadcast strides over X's leading
// dims (RotaryPlan). The arithmetic is the CPU kernel's (lib/cpu/Rotary.cpp)
// with explicitly rounded operations (__fmul_rn, __fadd_rn: nvcc would
// otherwise contract a * b + c into an FMA), so f32 results equal the CPU's
// and the composed kernels' bit for bit; bf16/f16 loads are widened exactly
// and the f32 result rounded once to nearest even. No allocation, no
// synchronization: safe inside a CUDA-graph capture.
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

template <typename X, typename C, typename S>
__global__ void rotaryKernel(const X *x, const C *cosT, const S *sinT, X *y, RotaryPlan p) {
  const int64_t pairs = p.rows * p.h;
  GRID_STRIDE(k, pairs) {
    int64_t row = k / p.h, c = k - row * p.h;
    int64_t co = 0, so = 0, rem = row;
    for (int dim = p.rank - 1; dim >= 0; --dim) {
      int64_t idx = rem % p.shape[dim];
      rem /= p.shape[dim];
      co += idx * p.cosStride[dim];
      so += idx * p.sinStride[dim];
    }
    const int64_t lo = row * 2 * p.h + c, hi = lo + p.h;
    float x0 = toF(x[lo]), x1 = toF(x[hi]);
    float c0 = toF(cosT[co + c * p.cosStep]), c1 = toF(cosT[co + (c + p.h) * p.cosStep]);
    float s0 = toF(sinT[so + c * p.sinStep]), s1 = toF(sinT[so + (c + p.h) * p.sinStep]);
    float y0, y1;
    if (!p.adjoint) {
      y0 = __fadd_rn(__fmul_rn(x0, c0), __fmul_rn(-x1, s0));
      y1 = __fadd_rn(__fmul_rn(x1, c1), __fmul_rn(x0, s1));
    } else {
      y0 = __fadd_rn(__fmul_rn(x0, c0), __fmul_rn(x1, s1));
      y1 = __fadd_rn(__fmul_rn(x1, c1), __fmul_rn(-x0, s0));
    }
    y[lo] = fromF<X>(y0);
    y[hi] = fromF<X>(y1);
  }
}

/// Cos and Sin are each f32 or X's type (checked by launchRotary): four
/// instantiations per X (one for f32 X).
template <typename X, typename C>
void withSin(const void *x, const C *cosT, ET sinType, const void *sinT, void *y,
             const RotaryPlan &p, cudaStream_t s) {
  unsigned grid = blocksFor(p.rows * p.h);
  const X *xx = static_cast<const X *>(x);
  X *yy = static_cast<X *>(y);
  if (sinType == ET::F32)
    rotaryKernel<<<grid, kBlock, 0, s>>>(xx, cosT, static_cast<const float *>(sinT), yy, p);
  else
    rotaryKernel<<<grid, kBlock, 0, s>>>(xx, cosT, static_cast<const X *>(sinT), yy, p);
}

template <typename X>
void withCos(const void *x, ET cosType, const void *cosT, ET sinType, const void *sinT, void *y,
             const RotaryPlan &p, cudaStream_t s) {
  if (cosType == ET::F32)
    withSin<X>(x, static_cast<const float *>(cosT), sinType, sinT, y, p, s);
  else
    withSin<X>(x, static_cast<const X *>(cosT), sinType, sinT, y, p, s);
}

bool tableTypeOk(ET xType, ET t) { return t == ET::F32 || t == xType; }

} // namespace

bool launchRotary(ET xType, const void *x, ET cosType, const void *cos, ET sinType,
                  const void *sin, void *y, const RotaryPlan &p, cudaStream_t s) {
  if (!tableTypeOk(xType, cosType) || !tableTypeOk(xType, sinType))
    return false;
  if (xType != ET::F32 && xType != ET::F16 && xType != ET::BF16)
    return false;
  if (p.rows == 0 || p.h == 0)
    return true;
  if (xType == ET::F32)
    withCos<float>(x, cosType, cos, sinType, sin, y, p, s);
  else if (xType == ET::F16)
    withCos<__half>(x, cosType, cos, sinType, sin, y, p, s);
  else
    withCos<__nv_bfloat16>(x, cosType, cos, sinType, sin, y, p, s);
  return true;
}

} // namespace cuda
} // namespace rt
} // namespace strait
