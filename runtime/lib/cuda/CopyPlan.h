//===- CopyPlan.h - Index plans of the strided-copy kernels -----*- C++ -*-===//
//
// Two faster plans for launchStridedCopy (Elementwise.cu), chosen on the host
// from the merged Index. The index arithmetic is in host+device functions, so
// that the CPU tests (CudaCopyPlan.*) check every offset the kernels use
// without a GPU:
//   tile: the output's innermost dim is strided in the input (a transpose):
//         dims A (input stride 1) and B (output's last) move in 32 x 32 tiles
//         through shared memory, reads and writes coalesced;
//   row:  the innermost dim is contiguous in both: chunks of `vec` elements
//         (16, 8 or 4 bytes) move as one vector each, one unravel per chunk.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_COPYPLAN_H
#define STRAIT_RUNTIME_LIB_CUDA_COPYPLAN_H

#include "CudaLaunch.h"
#include "strait/runtime/HostDevice.h"

#include <cstdint>

namespace strait {
namespace rt {
namespace cuda {

struct TileCopy {
  int rank = 0, a = -1, b = -1;
  uint32_t shape[kMaxDims] = {};
  int64_t inStride[kMaxDims] = {}, outStride[kMaxDims] = {};
  int64_t batch = 0;
};

/// The tile plan of `ix` (operand 0 strided, the output dense), or false.
inline bool planTileCopy(const Index &ix, TileCopy &t) {
  int r = ix.rank;
  if (r < 2 || !ix.small || ix.stride[0][r - 1] == 1 || ix.shape[r - 1] < 16)
    return false;
  t = TileCopy();
  t.rank = r;
  t.b = r - 1;
  int64_t st = 1;
  for (int d = r - 1; d >= 0; --d) {
    t.shape[d] = static_cast<uint32_t>(ix.shape[d]);
    t.inStride[d] = ix.stride[0][d];
    t.outStride[d] = st;
    st *= ix.shape[d];
    if (ix.stride[0][d] == 1 && d != r - 1)
      t.a = d;
  }
  if (t.a < 0 || ix.shape[t.a] < 16)
    return false;
  t.batch = ix.n / (ix.shape[t.a] * ix.shape[t.b]);
  return true;
}

/// Input and output offsets of batch entry `bi` (the dims other than A and
/// B, row-major).
STRAIT_HD inline void tileBase(const TileCopy &t, int64_t bi, int64_t &in, int64_t &out) {
  in = 0;
  out = 0;
  uint32_t rem = static_cast<uint32_t>(bi);
  for (int d = t.rank - 1; d >= 0; --d) {
    if (d == t.a || d == t.b)
      continue;
    uint32_t c = rem % t.shape[d];
    rem /= t.shape[d];
    in += c * t.inStride[d];
    out += c * t.outStride[d];
  }
}

/// Offsets of the element (a, b) from its batch entry's base.
STRAIT_HD inline int64_t tileIn(const TileCopy &t, uint32_t a, uint32_t b) {
  return a + b * t.inStride[t.b];
}
STRAIT_HD inline int64_t tileOut(const TileCopy &t, uint32_t a, uint32_t b) {
  return a * t.outStride[t.a] + b;
}

struct RowCopy {
  int rank = 0, vec = 1;
  /// Dims of the output with the last counted in chunks of `vec`.
  uint32_t shape[kMaxDims] = {};
  /// Input element strides per dim; the last is `vec` (a chunk's step).
  int64_t inStride[kMaxDims] = {};
  int64_t chunks = 0;
};

/// The row plan of `ix` for elements of `es` bytes: the widest vector of
/// 16, 8 or 4 bytes whose element count divides the innermost dim and every
/// input stride (so each chunk starts aligned when the base pointers are),
/// or false. The launcher still checks the pointers.
inline bool planRowCopy(const Index &ix, size_t es, RowCopy &r) {
  int rank = ix.rank;
  if (rank < 1 || !ix.small || ix.stride[0][rank - 1] != 1)
    return false;
  for (size_t bytes = 16; bytes >= 4; bytes /= 2) {
    if (bytes < es || bytes % es)
      continue;
    int64_t v = static_cast<int64_t>(bytes / es);
    bool ok = ix.shape[rank - 1] % v == 0;
    for (int d = 0; d < rank - 1 && ok; ++d)
      ok = ix.stride[0][d] % v == 0;
    if (!ok)
      continue;
    r = RowCopy();
    r.rank = rank;
    r.vec = static_cast<int>(v);
    for (int d = 0; d < rank; ++d) {
      r.shape[d] = static_cast<uint32_t>(d == rank - 1 ? ix.shape[d] / v : ix.shape[d]);
      r.inStride[d] = d == rank - 1 ? v : ix.stride[0][d];
    }
    r.chunks = ix.n / v;
    return v > 1;
  }
  return false;
}

/// The input element offset of chunk `c` (its output offset is c * vec).
STRAIT_HD inline int64_t rowCopySource(const RowCopy &r, int64_t c) {
  uint32_t rem = static_cast<uint32_t>(c);
  int64_t in = 0;
  for (int d = r.rank - 1; d >= 0; --d) {
    uint32_t i = rem % r.shape[d];
    rem /= r.shape[d];
    in += i * r.inStride[d];
  }
  return in;
}

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_COPYPLAN_H
