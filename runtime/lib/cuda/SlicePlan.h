//===- SlicePlan.h - Slice bounds read on the device -------------*- C++ -*-===//
//
// The per-dim start and step of a Slice whose starts/ends/axes/steps are
// tensors (launchSliceBounds): the host's sliceMap rules (negative values
// wrap, clamping, negative steps) on bounds in memory. Plain inline code
// compiled by nvcc for the device (Reduce.cu) and by the C++ compiler for
// the tests, which check it against the CPU backend's Slice without a GPU.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_SLICEPLAN_H
#define STRAIT_RUNTIME_LIB_CUDA_SLICEPLAN_H

#include "CudaLaunch.h"

#include <cstdint>

#ifdef __CUDACC__
#define STRAIT_SLICE_HD __host__ __device__
#else
#define STRAIT_SLICE_HD
#endif

namespace strait {
namespace rt {
namespace cuda {

STRAIT_SLICE_HD inline int64_t clampIndex(int64_t v, int64_t lo, int64_t hi) {
  return v < lo ? lo : (v > hi ? hi : v);
}

STRAIT_SLICE_HD inline int64_t loadIndex(const void *p, bool is64, int i) {
  return is64 ? static_cast<const int64_t *>(p)[i] : static_cast<const int32_t *>(p)[i];
}

/// Per-dim start and step of the slice (the host's sliceMap); false when the
/// bounds do not give the declared output shape.
STRAIT_SLICE_HD inline bool slicePlan(const SliceBounds &b, int64_t *start, int64_t *step) {
  unsigned sliced = 0;
  for (int d = 0; d < b.rank; ++d) {
    start[d] = 0;
    step[d] = 1;
  }
  for (int i = 0; i < b.n; ++i) {
    int64_t a = b.axes ? loadIndex(b.axes, b.axes64, i) : i;
    if (a < 0)
      a += b.rank;
    if (a < 0 || a >= b.rank)
      return false;
    int64_t dim = b.inShape[a], s = b.steps ? loadIndex(b.steps, b.steps64, i) : 1;
    if (s == 0)
      return false;
    int64_t lo = loadIndex(b.starts, b.starts64, i), hi = loadIndex(b.ends, b.ends64, i);
    if (lo < 0)
      lo += dim;
    if (hi < 0)
      hi += dim;
    int64_t extent;
    if (s > 0) {
      lo = clampIndex(lo, 0, dim);
      hi = clampIndex(hi, 0, dim);
      extent = hi > lo ? (hi - lo + s - 1) / s : 0;
    } else {
      lo = clampIndex(lo, 0, dim - 1);
      hi = clampIndex(hi, -1, dim - 1);
      extent = lo > hi ? (lo - hi - s - 1) / -s : 0;
    }
    if (extent != b.outShape[a])
      return false;
    start[a] = lo;
    step[a] = s;
    sliced |= 1u << a;
  }
  for (int d = 0; d < b.rank; ++d)
    if (!(sliced & (1u << d)) && b.outShape[d] != b.inShape[d])
      return false;
  return true;
}

/// Offset in X of output element i of the slice planned by slicePlan.
STRAIT_SLICE_HD inline int64_t sliceOffset(const SliceBounds &b, const int64_t *start,
                                           const int64_t *step, int64_t i) {
  int64_t off = 0, r = i, stride = 1;
  for (int d = b.rank - 1; d >= 0; --d) {
    int64_t c = r % b.outShape[d];
    r /= b.outShape[d];
    off += (start[d] + c * step[d]) * stride;
    stride *= b.inShape[d];
  }
  return off;
}

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_SLICEPLAN_H
