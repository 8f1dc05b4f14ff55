//===- Reduce.cu - Reductions, Slice, Gather/ScatterElements, TopK, ... ===//
//
// Reduce*: each output is reduced by one warp when the reduced elements are
// contiguous (the innermost dim is reduced: the lanes read consecutive
// addresses), else by one thread (neighbouring outputs read neighbouring
// addresses). Accumulation in double, as the CPU backend; LogSumExp takes
// the maximum first.
//
//===----------------------------------------------------------------------===//
#include "CudaLaunch.h"
#include "DeviceCommon.cuh"
#include "SlicePlan.h"

#include <cfloat>
#include <cmath>

namespace strait {
namespace rt {
namespace cuda {
namespace {

__device__ inline int64_t offsetOf(int64_t i, int nd, const int64_t *dims, const int64_t *st) {
  int64_t off = 0;
  for (int d = nd - 1; d >= 0; --d) {
    off += (i % dims[d]) * st[d];
    i /= dims[d];
  }
  return off;
}

__device__ inline double reduceInit(ReduceOp op) {
  switch (op) {
  case ReduceOp::Prod: return 1.0;
  case ReduceOp::Max: return -INFINITY;
  case ReduceOp::Min: return INFINITY;
  default: return 0.0;
  }
}

__device__ inline double reduceStep(ReduceOp op, double acc, double v, double mx) {
  switch (op) {
  case ReduceOp::Max: return fmax(acc, v);
  case ReduceOp::Min: return fmin(acc, v);
  case ReduceOp::Prod: return acc * v;
  case ReduceOp::L1: return acc + fabs(v);
  case ReduceOp::L2: case ReduceOp::SumSquare: return acc + v * v;
  case ReduceOp::LogSumExp: return acc + exp(v - mx);
  default: return acc + v;
  }
}

__device__ inline double combine(ReduceOp op, double a, double b) {
  switch (op) {
  case ReduceOp::Max: return fmax(a, b);
  case ReduceOp::Min: return fmin(a, b);
  case ReduceOp::Prod: return a * b;
  default: return a + b;
  }
}

__device__ inline double warpCombine(ReduceOp op, double v, int lanes) {
  for (int o = lanes / 2; o > 0; o >>= 1)
    v = combine(op, v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

/// `lanes` threads (32 or 1) per output.
template <typename T>
__global__ void reduceKernel(ReduceOp op, const T *x, T *y, ReducePlan p, int lanes) {
  int64_t tid = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  int64_t o = tid / lanes;
  int lane = static_cast<int>(tid % lanes);
  // With 32 lanes a whole warp shares o, so the shuffles below are uniform.
  bool active = o < p.outCount;
  int64_t base = active ? offsetOf(o, p.kept, p.keptDims, p.keptStrides) : 0;
  double mx = -INFINITY;
  if (op == ReduceOp::LogSumExp) {
    if (active)
      for (int64_t j = lane; j < p.redCount; j += lanes)
        mx = fmax(mx, (double)x[base + offsetOf(j, p.red, p.redDims, p.redStrides)]);
    if (lanes > 1)
      mx = warpCombine(ReduceOp::Max, mx, lanes);
  }
  double acc = reduceInit(op);
  if (active)
    for (int64_t j = lane; j < p.redCount; j += lanes)
      acc = reduceStep(op, acc, (double)x[base + offsetOf(j, p.red, p.redDims, p.redStrides)],
                       mx);
  if (lanes > 1)
    acc = warpCombine(op == ReduceOp::LogSumExp ? ReduceOp::Sum : op, acc, lanes);
  if (!active || lane != 0)
    return;
  if (op == ReduceOp::Mean)
    acc /= (double)p.redCount;
  if (op == ReduceOp::L2)
    acc = sqrt(acc);
  if (op == ReduceOp::LogSum)
    acc = log(acc);
  if (op == ReduceOp::LogSumExp)
    acc = log(acc) + mx;
  y[o] = (T)acc;
}

template <typename T> __global__ void stridedScatterKernel(const T *in, T *out, Index ix) {
  GRID_STRIDE(i, ix.n) {
    int64_t off = 0, r = i;
    for (int d = ix.rank - 1; d >= 0; --d) {
      off += (r % ix.shape[d]) * ix.stride[0][d];
      r /= ix.shape[d];
    }
    out[off] = in[i];
  }
}

template <typename T>
__global__ void sliceBoundsKernel(const T *x, T *y, SliceBounds b, int *flag, int tag) {
  int64_t start[kMaxDims], step[kMaxDims];
  if (!slicePlan(b, start, step)) {
    if (blockIdx.x == 0 && threadIdx.x == 0)
      raise(flag, tag, kErrSliceBounds);
    return;
  }
  GRID_STRIDE(i, b.nOut) { y[i] = x[sliceOffset(b, start, step, i)]; }
}

/// The data offset that element i of the indices names (its coordinates,
/// the axis one replaced by its index; negative indices wrap), or -1 with
/// the error flag raised when the index is out of range.
__device__ inline int64_t elementOffset(int64_t i, const void *indices, bool idx64,
                                        const ElementsIndex &ix, int *flag, int tag) {
  int64_t idx = idx64 ? static_cast<const int64_t *>(indices)[i]
                      : static_cast<const int32_t *>(indices)[i];
  if (idx < 0)
    idx += ix.len;
  if (idx < 0 || idx >= ix.len) {
    raise(flag, tag, kErrIndexOutOfRange);
    return -1;
  }
  int64_t off = 0, r = i;
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t c = r % ix.shape[d];
    r /= ix.shape[d];
    off += (d == ix.axis ? idx : c) * ix.stride[d];
  }
  return off;
}

template <typename T>
__global__ void gatherElementsKernel(const T *data, const void *indices, bool idx64, T *out,
                                     ElementsIndex ix, int *flag, int tag) {
  GRID_STRIDE(i, ix.n) {
    int64_t off = elementOffset(i, indices, idx64, ix, flag, tag);
    out[i] = off < 0 ? T(0) : data[off];
  }
}

/// ScatterElements: out[offset of updates[i] with its axis coordinate
/// replaced by indices[i]] = updates[i], or += with `Add` (f32, atomic).
template <typename T, bool Add>
__global__ void scatterElementsKernel(const T *upd, const void *indices, bool idx64, T *out,
                                      ElementsIndex ix, int *flag, int tag) {
  GRID_STRIDE(i, ix.n) {
    int64_t off = elementOffset(i, indices, idx64, ix, flag, tag);
    if (off < 0)
      continue;
    if constexpr (Add)
      atomicAdd(out + off, upd[i]);
    else
      out[off] = upd[i];
  }
}

/// TopK's order of two elements (values widened to compare f16/bf16): the
/// larger (with `largest`, else the smaller) first, NaN larger than every
/// number, ties by the lower index; a total order, the CPU kernel's
/// comparator.
__device__ inline double topKey(float x) { return x; }
__device__ inline double topKey(double x) { return x; }
__device__ inline double topKey(__half x) { return __half2float(x); }
__device__ inline double topKey(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ inline int64_t topKey(int32_t x) { return x; }
__device__ inline int64_t topKey(int64_t x) { return x; }
__device__ inline bool topNaN(double x) { return isnan(x); }
__device__ inline bool topNaN(int64_t) { return false; }
template <typename K>
__device__ inline bool topKBefore(K va, int64_t a, K vb, int64_t b, bool largest) {
  bool na = topNaN(va), nb = topNaN(vb);
  if (na || nb)
    return na && nb ? a < b : largest ? na : nb;
  if (va != vb)
    return largest ? va > vb : va < vb;
  return a < b;
}

/// One thread per (outer, inner) line of `len` elements: k passes, each
/// taking the first element in TopK's order after the previous pass's (k *
/// len comparisons: the small k and lines of a router's experts).
template <typename T>
__global__ void topKKernel(const T *x, T *vals, int64_t *inds, int64_t outer, int64_t len,
                           int64_t inner, int64_t k, bool largest) {
  GRID_STRIDE(t, outer * inner) {
    int64_t o = t / inner, i = t % inner;
    const T *in = x + o * len * inner + i;
    int64_t prev = -1;
    for (int64_t j = 0; j < k; ++j) {
      int64_t best = -1;
      for (int64_t c = 0; c < len; ++c) {
        auto vc = topKey(in[c * inner]);
        if (prev >= 0 && !topKBefore(topKey(in[prev * inner]), prev, vc, c, largest))
          continue;
        if (best < 0 || topKBefore(vc, c, topKey(in[best * inner]), best, largest))
          best = c;
      }
      if (best < 0) // not reached: the order is total and k <= len
        best = 0;
      int64_t off = (o * k + j) * inner + i;
      vals[off] = in[best * inner];
      inds[off] = best;
      prev = best;
    }
  }
}

__global__ void hardSigmoidKernel(bool swish, float alpha, float beta, const float *x, float *y,
                                  int64_t n) {
  GRID_STRIDE(i, n) {
    float v = x[i];
    // The CPU backend's formulas: HardSwish in float, HardSigmoid in double.
    y[i] = swish ? v * fmaxf(0.0f, fminf(1.0f, v / 6.0f + 0.5f))
                 : (float)fmax(0.0, fmin(1.0, (double)alpha * v + (double)beta));
  }
}

template <typename T>
void reduceAs(ReduceOp op, const void *x, void *y, const ReducePlan &p, cudaStream_t s) {
  // Contiguous reduced elements (innermost dim reduced): a warp per output.
  bool innerReduced = p.red > 0 && p.redStrides[p.red - 1] == 1;
  int lanes = innerReduced && p.redCount >= 32 ? 32 : 1;
  int64_t threads = p.outCount * lanes;
  unsigned blocks = static_cast<unsigned>((threads + kBlock - 1) / kBlock);
  reduceKernel<T><<<blocks, kBlock, 0, s>>>(op, static_cast<const T *>(x), static_cast<T *>(y),
                                            p, lanes);
}

} // namespace

bool launchReduce(ReduceOp op, ET dtype, const void *x, void *y, const ReducePlan &p,
                  cudaStream_t s) {
  if (p.outCount == 0)
    return true;
  switch (dtype) {
  case ET::F32: reduceAs<float>(op, x, y, p, s); return true;
  case ET::F64: reduceAs<double>(op, x, y, p, s); return true;
  case ET::I32: reduceAs<int32_t>(op, x, y, p, s); return true;
  case ET::I64: reduceAs<int64_t>(op, x, y, p, s); return true;
  default: return false;
  }
}

bool launchStridedScatter(size_t elemSize, const void *in, void *out, const Index &ix,
                          cudaStream_t s) {
  if (ix.n == 0)
    return true;
  unsigned blocks = blocksFor(ix.n);
#define STRAIT_SCATTER(T)                                                                \
  stridedScatterKernel<T><<<blocks, kBlock, 0, s>>>(static_cast<const T *>(in),          \
                                                    static_cast<T *>(out), ix);          \
  return true;
  switch (elemSize) {
  case 1: STRAIT_SCATTER(uint8_t)
  case 2: STRAIT_SCATTER(uint16_t)
  case 4: STRAIT_SCATTER(uint32_t)
  case 8: STRAIT_SCATTER(uint64_t)
  default: return false;
  }
#undef STRAIT_SCATTER
}

bool launchGatherElements(size_t elemSize, const void *data, const void *indices, bool idx64,
                          void *out, const ElementsIndex &ix, int *errorFlag, int tag,
                          cudaStream_t s) {
  if (ix.n == 0)
    return true;
  unsigned blocks = blocksFor(ix.n);
#define STRAIT_GATHER(T)                                                                 \
  gatherElementsKernel<T><<<blocks, kBlock, 0, s>>>(static_cast<const T *>(data), indices, \
                                                    idx64, static_cast<T *>(out), ix,     \
                                                    errorFlag, tag);                      \
  return true;
  switch (elemSize) {
  case 1: STRAIT_GATHER(uint8_t)
  case 2: STRAIT_GATHER(uint16_t)
  case 4: STRAIT_GATHER(uint32_t)
  case 8: STRAIT_GATHER(uint64_t)
  default: return false;
  }
#undef STRAIT_GATHER
}

bool launchScatterElements(size_t elemSize, bool addF32, const void *updates,
                           const void *indices, bool idx64, void *out, const ElementsIndex &ix,
                           int *errorFlag, int tag, cudaStream_t s) {
  if (ix.n == 0)
    return true;
  unsigned blocks = blocksFor(ix.n);
  if (addF32) {
    scatterElementsKernel<float, true><<<blocks, kBlock, 0, s>>>(
        static_cast<const float *>(updates), indices, idx64, static_cast<float *>(out), ix,
        errorFlag, tag);
    return true;
  }
#define STRAIT_SCATTER_ELEMENTS(T)                                                       \
  scatterElementsKernel<T, false><<<blocks, kBlock, 0, s>>>(                             \
      static_cast<const T *>(updates), indices, idx64, static_cast<T *>(out), ix,        \
      errorFlag, tag);                                                                   \
  return true;
  switch (elemSize) {
  case 1: STRAIT_SCATTER_ELEMENTS(uint8_t)
  case 2: STRAIT_SCATTER_ELEMENTS(uint16_t)
  case 4: STRAIT_SCATTER_ELEMENTS(uint32_t)
  case 8: STRAIT_SCATTER_ELEMENTS(uint64_t)
  default: return false;
  }
#undef STRAIT_SCATTER_ELEMENTS
}

bool launchTopK(ET dtype, const void *x, void *vals, int64_t *inds, int64_t outer, int64_t len,
                int64_t inner, int64_t k, bool largest, cudaStream_t s) {
  int64_t n = outer * inner;
  if (n == 0 || k == 0)
    return true;
  unsigned blocks = blocksFor(n);
#define STRAIT_TOPK(T)                                                                   \
  topKKernel<T><<<blocks, kBlock, 0, s>>>(static_cast<const T *>(x), static_cast<T *>(vals), \
                                          inds, outer, len, inner, k, largest);          \
  return true;
  switch (dtype) {
  case ET::F32: STRAIT_TOPK(float)
  case ET::F64: STRAIT_TOPK(double)
  case ET::F16: STRAIT_TOPK(__half)
  case ET::BF16: STRAIT_TOPK(__nv_bfloat16)
  case ET::I32: STRAIT_TOPK(int32_t)
  case ET::I64: STRAIT_TOPK(int64_t)
  default: return false;
  }
#undef STRAIT_TOPK
}

bool launchSliceBounds(size_t elemSize, const void *x, void *y, const SliceBounds &b,
                       int *errorFlag, int tag, cudaStream_t s) {
  // Launched even for an empty output: the bounds are still checked.
  unsigned blocks = blocksFor(b.nOut);
#define STRAIT_SLICE(T)                                                                  \
  sliceBoundsKernel<T><<<blocks, kBlock, 0, s>>>(static_cast<const T *>(x),              \
                                                 static_cast<T *>(y), b, errorFlag, tag); \
  return true;
  switch (elemSize) {
  case 1: STRAIT_SLICE(uint8_t)
  case 2: STRAIT_SLICE(uint16_t)
  case 4: STRAIT_SLICE(uint32_t)
  case 8: STRAIT_SLICE(uint64_t)
  default: return false;
  }
#undef STRAIT_SLICE
}

void launchHardSigmoid(bool swish, float alpha, float beta, const float *x, float *y, int64_t n,
                       cudaStream_t s) {
  if (n == 0)
    return;
  hardSigmoidKernel<<<blocksFor(n), kBlock, 0, s>>>(swish, alpha, beta, x, y, n);
}

} // namespace cuda
} // namespace rt
} // namespace strait
