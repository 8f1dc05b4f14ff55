//===- Elementwise.cu - Elementwise, layout and indexing kernels ----------===//
//
// Broadcasting binary ops, unary ops, Where, strided copies (Transpose,
// Expand), Cast, Gather and its backward (scatter-add), ReduceToShape. One
// grid-stride loop per kernel; operand offsets come from an Index (dense
// operands skip the unravelling).
//
//===----------------------------------------------------------------------===//
#include "CopyPlan.h"
#include "CudaLaunch.h"
#include "DeviceCommon.cuh"
#include "../cpu/DropoutMask.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>

namespace strait {
namespace rt {
namespace cuda {
namespace {

__device__ inline void unravel(const Index &ix, int64_t i, int ops, int64_t *off) {
  for (int k = 0; k < ops; ++k)
    off[k] = 0;
  if (ix.small) { // 32-bit division: several times cheaper than 64-bit
    uint32_t j = static_cast<uint32_t>(i);
    for (int d = ix.rank - 1; d >= 0; --d) {
      uint32_t dim = static_cast<uint32_t>(ix.shape[d]);
      uint32_t c = j % dim;
      j /= dim;
      for (int k = 0; k < ops; ++k)
        off[k] += static_cast<int64_t>(c) * ix.stride[k][d];
    }
    return;
  }
  for (int d = ix.rank - 1; d >= 0; --d) {
    int64_t c = i % ix.shape[d];
    i /= ix.shape[d];
    for (int k = 0; k < ops; ++k)
      off[k] += c * ix.stride[k][d];
  }
}

struct BinF {
  BinaryOp op;
  template <typename T> __device__ T arith(T a, T b) const {
    switch (op) {
    case BinaryOp::Add: return a + b;
    case BinaryOp::Sub: return a - b;
    case BinaryOp::Mul: return a * b;
    case BinaryOp::Div: return b == T(0) && !std::is_floating_point<T>::value ? T(0) : a / b;
    case BinaryOp::Max: return a > b ? a : b;
    case BinaryOp::Min: return a < b ? a : b;
    case BinaryOp::Pow: return static_cast<T>(pow(static_cast<double>(a), static_cast<double>(b)));
    default: return T(0);
    }
  }
  template <typename T> __device__ uint8_t cmp(T a, T b) const {
    switch (op) {
    case BinaryOp::Equal: return a == b;
    case BinaryOp::Less: return a < b;
    case BinaryOp::LessOrEqual: return a <= b;
    case BinaryOp::Greater: return a > b;
    case BinaryOp::GreaterOrEqual: return a >= b;
    case BinaryOp::And: return a && b;
    case BinaryOp::Or: return a || b;
    default: return 0;
    }
  }
};

template <> __device__ float BinF::arith<float>(float a, float b) const {
  switch (op) {
  case BinaryOp::Add: return a + b;
  case BinaryOp::Sub: return a - b;
  case BinaryOp::Mul: return a * b;
  case BinaryOp::Div: return a / b;
  case BinaryOp::Max: return fmaxf(a, b);
  case BinaryOp::Min: return fminf(a, b);
  case BinaryOp::Pow: return b == 2.0f ? a * a : (b == 3.0f ? a * a * a : powf(a, b));
  default: return 0.0f;
  }
}

template <typename T, bool Cmp>
__global__ void binaryKernel(const T *a, const T *b, void *out, Index ix, BinF f) {
  bool dense = ix.dense[0] && ix.dense[1];
  GRID_STRIDE(i, ix.n) {
    int64_t off[2] = {i, i};
    if (!dense)
      unravel(ix, i, 2, off);
    if (Cmp)
      static_cast<uint8_t *>(out)[i] = f.cmp(a[off[0]], b[off[1]]);
    else
      static_cast<T *>(out)[i] = f.arith(a[off[0]], b[off[1]]);
  }
}

template <typename T>
bool binaryFor(BinaryOp op, const void *a, const void *b, void *out, const Index &ix,
               cudaStream_t s) {
  bool cmp = op >= BinaryOp::Equal;
  if (op == BinaryOp::Mod)
    return false;
  if (cmp)
    binaryKernel<T, true><<<blocksFor(ix.n), kBlock, 0, s>>>(
        static_cast<const T *>(a), static_cast<const T *>(b), out, ix, BinF{op});
  else
    binaryKernel<T, false><<<blocksFor(ix.n), kBlock, 0, s>>>(
        static_cast<const T *>(a), static_cast<const T *>(b), out, ix, BinF{op});
  return true;
}

struct UnF {
  UnaryOp op;
  template <typename T> __device__ T operator()(T x) const {
    double v = static_cast<double>(x);
    switch (op) {
    case UnaryOp::Neg: return -x;
    case UnaryOp::Abs: return x < T(0) ? -x : x;
    case UnaryOp::Exp: return static_cast<T>(exp(v));
    case UnaryOp::Log: return static_cast<T>(log(v));
    case UnaryOp::Sqrt: return static_cast<T>(sqrt(v));
    case UnaryOp::Reciprocal: return static_cast<T>(1.0 / v);
    case UnaryOp::Tanh: return static_cast<T>(tanh(v));
    case UnaryOp::Sigmoid: return static_cast<T>(1.0 / (1.0 + exp(-v)));
    case UnaryOp::Relu: return x > T(0) ? x : T(0);
    case UnaryOp::Erf: return static_cast<T>(erf(v));
    case UnaryOp::Sin: return static_cast<T>(sin(v));
    case UnaryOp::Cos: return static_cast<T>(cos(v));
    case UnaryOp::Floor: return static_cast<T>(floor(v));
    case UnaryOp::Ceil: return static_cast<T>(ceil(v));
    case UnaryOp::GeluErf: return static_cast<T>(0.5 * v * (1.0 + erf(v * 0.7071067811865476)));
    case UnaryOp::GeluTanh:
      return static_cast<T>(0.5 * v * (1.0 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v))));
    default: return x;
    }
  }
};

// f32 in float arithmetic (the fast path of the training step).
template <> __device__ float UnF::operator()<float>(float x) const {
  switch (op) {
  case UnaryOp::Neg: return -x;
  case UnaryOp::Abs: return fabsf(x);
  case UnaryOp::Exp: return expf(x);
  case UnaryOp::Log: return logf(x);
  case UnaryOp::Sqrt: return sqrtf(x);
  case UnaryOp::Reciprocal: return 1.0f / x;
  case UnaryOp::Tanh: return tanhf(x);
  case UnaryOp::Sigmoid: return 1.0f / (1.0f + expf(-x));
  case UnaryOp::Relu: return x > 0.0f ? x : 0.0f;
  case UnaryOp::Erf: return erff(x);
  case UnaryOp::Sin: return sinf(x);
  case UnaryOp::Cos: return cosf(x);
  case UnaryOp::Floor: return floorf(x);
  case UnaryOp::Ceil: return ceilf(x);
  case UnaryOp::GeluErf: return 0.5f * x * (1.0f + erff(x * 0.70710678f));
  case UnaryOp::GeluTanh:
    return 0.5f * x * (1.0f + tanhf(0.79788456f * (x + 0.044715f * x * x * x)));
  default: return x;
  }
}

template <typename T> __global__ void unaryKernel(const T *x, T *y, int64_t n, UnF f) {
  GRID_STRIDE(i, n) { y[i] = f(x[i]); }
}

__global__ void notKernel(const uint8_t *x, uint8_t *y, int64_t n) {
  GRID_STRIDE(i, n) { y[i] = !x[i]; }
}

template <typename T>
__global__ void whereKernel(const uint8_t *c, const T *x, const T *y, T *out, Index ix) {
  bool dense = ix.dense[0] && ix.dense[1] && ix.dense[2];
  GRID_STRIDE(i, ix.n) {
    int64_t off[3] = {i, i, i};
    if (!dense)
      unravel(ix, i, 3, off);
    out[i] = c[off[0]] ? x[off[1]] : y[off[2]];
  }
}

template <typename T> __global__ void stridedCopyKernel(const T *in, T *out, Index ix) {
  GRID_STRIDE(i, ix.n) {
    int64_t off;
    unravel(ix, i, 1, &off);
    out[i] = in[off];
  }
}

__global__ void geluGradKernel(bool tanhApprox, const float *dy, const float *x, float *dx,
                               int64_t n) {
  GRID_STRIDE(i, n) {
    float v = x[i], d;
    if (tanhApprox) {
      const float k = 0.7978845608028654f, c = 0.044715f;
      float t = tanhf(k * (v + c * v * v * v));
      d = 0.5f * (1 + t) + 0.5f * v * (1 - t * t) * k * (1 + 3 * c * v * v);
    } else {
      d = 0.5f * (1 + erff(v * 0.7071067811865476f)) + v * expf(-0.5f * v * v) * 0.3989422804014327f;
    }
    dx[i] = dy[i] * d;
  }
}

/// DropoutTraining: the CPU kernel's hash (cpu/DropoutMask.h), so both
/// backends draw the same mask; the iteration is read on the device.
__global__ void dropoutTrainingKernel(const float *x, float *y, int64_t n, const int64_t *step,
                                      uint64_t seed, int64_t key, int64_t microBatch,
                                      int64_t replica, uint64_t threshold, float scale) {
  uint64_t stream =
      rt::cpu::dropoutStream(seed, key, step ? *step : 0, microBatch, replica);
  GRID_STRIDE(i, n) {
    y[i] = rt::cpu::dropoutKeeps(stream, static_cast<uint64_t>(i), threshold) ? x[i] * scale
                                                                              : 0.0f;
  }
}

template <typename I>
__device__ inline bool loadIndex(const I *idx, int64_t j, int64_t len, int64_t &out) {
  int64_t v = static_cast<int64_t>(idx[j]);
  if (v < 0)
    v += len;
  out = v;
  return v >= 0 && v < len;
}

template <typename T, typename I>
__global__ void gatherKernel(const T *data, const I *idx, T *out, int64_t len, int64_t n,
                             int64_t inner, int64_t total, int *flag, int tag) {
  GRID_STRIDE(i, total) {
    int64_t k = i % inner, j = (i / inner) % n, o = i / (inner * n), v;
    if (!loadIndex(idx, j, len, v)) {
      raise(flag, tag, kErrIndexOutOfRange);
      out[i] = T(0);
      continue;
    }
    out[i] = data[(o * len + v) * inner + k];
  }
}

template <typename I>
__global__ void gatherGradKernel(const float *dy, const I *idx, float *dd, int64_t len,
                                 int64_t n, int64_t inner, int64_t total, int *flag, int tag) {
  GRID_STRIDE(i, total) {
    int64_t k = i % inner, j = (i / inner) % n, o = i / (inner * n), v;
    if (!loadIndex(idx, j, len, v)) {
      raise(flag, tag, kErrIndexOutOfRange);
      continue;
    }
    atomicAdd(&dd[(o * len + v) * inner + k], dy[i]);
  }
}

struct ReduceIndex {
  int keptRank = 0, redRank = 0;
  int64_t keptShape[kMaxDims], keptStride[kMaxDims];
  int64_t redShape[kMaxDims], redStride[kMaxDims];
  int64_t outN = 1, redN = 1, chunk = 1;
};

template <typename T> __device__ inline float widen(T v) { return static_cast<float>(v); }
template <> __device__ inline float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ inline float widen<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}

/// f32 sums of f32, bf16 or f16 inputs (16-bit ones read as they are: no
/// widened copy).
template <typename T> __global__ void reduceKernel(const T *in, float *out, ReduceIndex r) {
  int64_t o = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
  if (o >= r.outN)
    return;
  int64_t base = 0, t = o;
  for (int d = r.keptRank - 1; d >= 0; --d) {
    base += (t % r.keptShape[d]) * r.keptStride[d];
    t /= r.keptShape[d];
  }
  int64_t begin = blockIdx.y * r.chunk, end = min(begin + r.chunk, r.redN);
  float acc = 0.0f;
  if (r.redRank == 1) {
    for (int64_t j = begin; j < end; ++j)
      acc += widen(in[base + j * r.redStride[0]]);
  } else {
    for (int64_t j = begin; j < end; ++j) {
      int64_t off = 0, u = j;
      for (int d = r.redRank - 1; d >= 0; --d) {
        off += (u % r.redShape[d]) * r.redStride[d];
        u /= r.redShape[d];
      }
      acc += widen(in[base + off]);
    }
  }
  if (begin < end)
    atomicAdd(&out[o], acc);
}

// Cast through double (floats) or int64 (integers).
template <typename T> __device__ inline double toD(T v) { return static_cast<double>(v); }
template <> __device__ inline double toD<__half>(__half v) { return __half2float(v); }
template <> __device__ inline double toD<__nv_bfloat16>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <typename T> __device__ inline T fromD(double v) { return static_cast<T>(v); }
// Through f32, as the CPU backend's casts (castViaF32): f64 -> f16 rounds
// twice there, and so here.
template <> __device__ inline __half fromD<__half>(double v) {
  return __float2half_rn(static_cast<float>(v));
}
template <> __device__ inline __nv_bfloat16 fromD<__nv_bfloat16>(double v) {
  return __float2bfloat16_rn(static_cast<float>(v));
}
template <> __device__ inline uint8_t fromD<uint8_t>(double v) { return v != 0.0; }

/// One conversion. f32 <-> bf16/f16 directly (the same single rounding as
/// through double, without double arithmetic).
template <typename S, typename D> __device__ inline D convert(S v) {
  if (std::is_integral<S>::value && std::is_integral<D>::value && !std::is_same<D, uint8_t>::value)
    return static_cast<D>(static_cast<int64_t>(v));
  return fromD<D>(toD<S>(v));
}
template <> __device__ inline __nv_bfloat16 convert<float, __nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}
template <> __device__ inline __half convert<float, __half>(float v) { return __float2half_rn(v); }
template <> __device__ inline float convert<__nv_bfloat16, float>(__nv_bfloat16 v) {
  return __bfloat162float(v);
}
template <> __device__ inline float convert<__half, float>(__half v) { return __half2float(v); }

template <typename S, typename D> __global__ void castKernel(const S *x, D *y, int64_t n) {
  GRID_STRIDE(i, n) { y[i] = convert<S, D>(x[i]); }
}

/// Four elements per thread with one vector load and store (16 bytes of
/// f32, 8 of bf16/f16): the scalar kernel's 2-byte stores reached about
/// 45 % of the H200's bandwidth on the casts of a bf16 GPT-2 step.
template <typename T> struct alignas(4 * sizeof(T)) Vec4 { T v[4]; };

template <typename S, typename D> __global__ void castVec4Kernel(const S *x, D *y, int64_t n4) {
  const Vec4<S> *in = reinterpret_cast<const Vec4<S> *>(x);
  Vec4<D> *out = reinterpret_cast<Vec4<D> *>(y);
  GRID_STRIDE(i, n4) {
    Vec4<S> a = in[i];
    Vec4<D> b;
#pragma unroll
    for (int k = 0; k < 4; ++k)
      b.v[k] = convert<S, D>(a.v[k]);
    out[i] = b;
  }
}

/// The vector kernel when both pointers are aligned to four elements and n
/// is a multiple of 4; false otherwise (the caller runs the scalar one).
template <typename S, typename D> bool castVec4(const S *x, D *y, int64_t n, cudaStream_t s) {
  if (n % 4 || reinterpret_cast<uintptr_t>(x) % (4 * sizeof(S)) ||
      reinterpret_cast<uintptr_t>(y) % (4 * sizeof(D)))
    return false;
  castVec4Kernel<<<blocksFor(n / 4), kBlock, 0, s>>>(x, y, n / 4);
  return true;
}

template <typename S>
bool castFrom(ET to, const void *x, void *y, int64_t n, cudaStream_t s) {
  const S *in = static_cast<const S *>(x);
  if (std::is_same<S, float>::value) {
    if (to == ET::BF16 && castVec4(in, static_cast<__nv_bfloat16 *>(y), n, s))
      return true;
    if (to == ET::F16 && castVec4(in, static_cast<__half *>(y), n, s))
      return true;
  }
  if ((std::is_same<S, __nv_bfloat16>::value || std::is_same<S, __half>::value) &&
      to == ET::F32 && castVec4(in, static_cast<float *>(y), n, s))
    return true;
  switch (to) {
  case ET::F32: castKernel<<<blocksFor(n), kBlock, 0, s>>>(in, static_cast<float *>(y), n); return true;
  case ET::F64: castKernel<<<blocksFor(n), kBlock, 0, s>>>(in, static_cast<double *>(y), n); return true;
  case ET::F16: castKernel<<<blocksFor(n), kBlock, 0, s>>>(in, static_cast<__half *>(y), n); return true;
  case ET::BF16: castKernel<<<blocksFor(n), kBlock, 0, s>>>(in, static_cast<__nv_bfloat16 *>(y), n); return true;
  case ET::I32: castKernel<<<blocksFor(n), kBlock, 0, s>>>(in, static_cast<int32_t *>(y), n); return true;
  case ET::I64: castKernel<<<blocksFor(n), kBlock, 0, s>>>(in, static_cast<int64_t *>(y), n); return true;
  case ET::Bool: castKernel<<<blocksFor(n), kBlock, 0, s>>>(in, static_cast<uint8_t *>(y), n); return true;
  default: return false;
  }
}

} // namespace

bool launchBinary(BinaryOp op, ET dtype, const void *a, const void *b, void *out,
                  const Index &ix, cudaStream_t s) {
  if (ix.n == 0)
    return true;
  bool logical = op == BinaryOp::And || op == BinaryOp::Or;
  if (logical)
    return dtype == ET::Bool && binaryFor<uint8_t>(op, a, b, out, ix, s);
  switch (dtype) {
  case ET::F32: return binaryFor<float>(op, a, b, out, ix, s);
  case ET::F64: return binaryFor<double>(op, a, b, out, ix, s);
  case ET::I32: return op != BinaryOp::Pow && binaryFor<int32_t>(op, a, b, out, ix, s);
  case ET::I64: return op != BinaryOp::Pow && binaryFor<int64_t>(op, a, b, out, ix, s);
  default: return false;
  }
}

bool launchUnary(UnaryOp op, ET dtype, const void *x, void *y, int64_t n, cudaStream_t s) {
  if (n == 0)
    return true;
  if (op == UnaryOp::Not) {
    if (dtype != ET::Bool)
      return false;
    notKernel<<<blocksFor(n), kBlock, 0, s>>>(static_cast<const uint8_t *>(x),
                                              static_cast<uint8_t *>(y), n);
    return true;
  }
  if (dtype == ET::F32)
    unaryKernel<<<blocksFor(n), kBlock, 0, s>>>(static_cast<const float *>(x),
                                                static_cast<float *>(y), n, UnF{op});
  else if (dtype == ET::F64)
    unaryKernel<<<blocksFor(n), kBlock, 0, s>>>(static_cast<const double *>(x),
                                                static_cast<double *>(y), n, UnF{op});
  else
    return false;
  return true;
}

bool launchWhere(size_t es, const uint8_t *c, const void *x, const void *y, void *out,
                 const Index &ix, cudaStream_t s) {
  if (ix.n == 0)
    return true;
#define WHERE_CASE(T)                                                            \
  whereKernel<<<blocksFor(ix.n), kBlock, 0, s>>>(c, static_cast<const T *>(x),   \
                                                 static_cast<const T *>(y),      \
                                                 static_cast<T *>(out), ix);     \
  return true;
  switch (es) {
  case 1: WHERE_CASE(uint8_t)
  case 2: WHERE_CASE(uint16_t)
  case 4: WHERE_CASE(uint32_t)
  case 8: WHERE_CASE(uint64_t)
  default: return false;
  }
#undef WHERE_CASE
}

// The tile and row plans of launchStridedCopy (CopyPlan.h): a Transpose's
// reads were 32 rows apart per warp (about 1 TB/s on an H200), and a copy
// of contiguous rows unravelled every 2-byte element (Transposes of
// attention heads in bf16 at 0.3 TB/s).
template <typename T> __global__ void tileCopyKernel(const T *in, T *out, TileCopy t) {
  __shared__ T tile[32][33];
  uint32_t lenA = t.shape[t.a], lenB = t.shape[t.b];
  uint32_t tilesA = (lenA + 31) / 32;
  uint32_t a0 = (blockIdx.x % tilesA) * 32, b0 = (blockIdx.x / tilesA) * 32;
  for (int64_t bi = blockIdx.y; bi < t.batch; bi += gridDim.y) {
    int64_t inBase, outBase;
    tileBase(t, bi, inBase, outBase);
    for (uint32_t j = threadIdx.y; j < 32; j += blockDim.y) {
      uint32_t a = a0 + threadIdx.x, b = b0 + j;
      if (a < lenA && b < lenB)
        tile[j][threadIdx.x] = in[inBase + tileIn(t, a, b)];
    }
    __syncthreads();
    for (uint32_t j = threadIdx.y; j < 32; j += blockDim.y) {
      uint32_t a = a0 + j, b = b0 + threadIdx.x;
      if (a < lenA && b < lenB)
        out[outBase + tileOut(t, a, b)] = tile[threadIdx.x][j];
    }
    __syncthreads();
  }
}

template <int Bytes> struct alignas(Bytes) Chunk {
  unsigned char b[Bytes];
};

template <int Bytes>
__global__ void rowCopyKernel(const char *in, char *out, RowCopy r, int es) {
  GRID_STRIDE(c, r.chunks) {
    reinterpret_cast<Chunk<Bytes> *>(out)[c] =
        *reinterpret_cast<const Chunk<Bytes> *>(in + rowCopySource(r, c) * es);
  }
}

bool launchStridedCopy(size_t es, const void *in, void *out, const Index &ix, cudaStream_t s) {
  if (ix.n == 0)
    return true;
  RowCopy rc;
  int bytes = 0;
  if (planRowCopy(ix, es, rc)) {
    bytes = rc.vec * static_cast<int>(es);
    if (reinterpret_cast<uintptr_t>(in) % bytes || reinterpret_cast<uintptr_t>(out) % bytes)
      bytes = 0;
  }
  if (bytes) {
    const char *src = static_cast<const char *>(in);
    char *dst = static_cast<char *>(out);
    int e = static_cast<int>(es);
    switch (bytes) {
    case 16: rowCopyKernel<16><<<blocksFor(rc.chunks), kBlock, 0, s>>>(src, dst, rc, e); return true;
    case 8: rowCopyKernel<8><<<blocksFor(rc.chunks), kBlock, 0, s>>>(src, dst, rc, e); return true;
    case 4: rowCopyKernel<4><<<blocksFor(rc.chunks), kBlock, 0, s>>>(src, dst, rc, e); return true;
    default: break;
    }
  }
  TileCopy t;
  if (planTileCopy(ix, t)) {
    uint32_t tiles = ((t.shape[t.a] + 31) / 32) * ((t.shape[t.b] + 31) / 32);
    dim3 grid(tiles, static_cast<unsigned>(std::min<int64_t>(t.batch, 65535)));
    dim3 block(32, 8);
#define TILE_CASE(T)                                                                        \
  tileCopyKernel<<<grid, block, 0, s>>>(static_cast<const T *>(in), static_cast<T *>(out), t); \
  return true;
    switch (es) {
    case 1: TILE_CASE(uint8_t)
    case 2: TILE_CASE(uint16_t)
    case 4: TILE_CASE(uint32_t)
    case 8: TILE_CASE(uint64_t)
    default: break;
    }
#undef TILE_CASE
  }
#define COPY_CASE(T)                                                             \
  stridedCopyKernel<<<blocksFor(ix.n), kBlock, 0, s>>>(static_cast<const T *>(in), \
                                                       static_cast<T *>(out), ix); \
  return true;
  switch (es) {
  case 1: COPY_CASE(uint8_t)
  case 2: COPY_CASE(uint16_t)
  case 4: COPY_CASE(uint32_t)
  case 8: COPY_CASE(uint64_t)
  default: return false;
  }
#undef COPY_CASE
}

void launchGeluGrad(bool tanhApprox, const float *dy, const float *x, float *dx, int64_t n,
                    cudaStream_t s) {
  if (n)
    geluGradKernel<<<blocksFor(n), kBlock, 0, s>>>(tanhApprox, dy, x, dx, n);
}

void launchDropoutTraining(const float *x, float *y, int64_t n, const int64_t *step,
                           uint64_t seed, int64_t key, int64_t microBatch, int64_t replica,
                           uint64_t threshold, float scale, cudaStream_t s) {
  if (n)
    dropoutTrainingKernel<<<blocksFor(n), kBlock, 0, s>>>(x, y, n, step, seed, key, microBatch,
                                                          replica, threshold, scale);
}

void launchGather(size_t es, const void *data, const void *indices, bool idx64, void *out,
                  int64_t outer, int64_t len, int64_t n, int64_t inner, int *flag, int tag,
                  cudaStream_t s) {
  int64_t total = outer * n * inner;
  if (total == 0)
    return;
#define GATHER_CASE(T)                                                           \
  if (idx64)                                                                     \
    gatherKernel<<<blocksFor(total), kBlock, 0, s>>>(                            \
        static_cast<const T *>(data), static_cast<const int64_t *>(indices),     \
        static_cast<T *>(out), len, n, inner, total, flag, tag);                 \
  else                                                                           \
    gatherKernel<<<blocksFor(total), kBlock, 0, s>>>(                            \
        static_cast<const T *>(data), static_cast<const int32_t *>(indices),     \
        static_cast<T *>(out), len, n, inner, total, flag, tag);                 \
  return;
  switch (es) {
  case 1: GATHER_CASE(uint8_t)
  case 2: GATHER_CASE(uint16_t)
  case 4: GATHER_CASE(uint32_t)
  default: GATHER_CASE(uint64_t)
  }
#undef GATHER_CASE
}

void launchGatherGrad(const float *dy, const void *indices, bool idx64, float *dd,
                      int64_t outer, int64_t len, int64_t n, int64_t inner, int *flag, int tag,
                      cudaStream_t s) {
  cudaMemsetAsync(dd, 0, sizeof(float) * outer * len * inner, s);
  int64_t total = outer * n * inner;
  if (total == 0)
    return;
  if (idx64)
    gatherGradKernel<<<blocksFor(total), kBlock, 0, s>>>(
        dy, static_cast<const int64_t *>(indices), dd, len, n, inner, total, flag, tag);
  else
    gatherGradKernel<<<blocksFor(total), kBlock, 0, s>>>(
        dy, static_cast<const int32_t *>(indices), dd, len, n, inner, total, flag, tag);
}

bool launchReduceToShape(ET inType, const void *in, const std::vector<int64_t> &inShape, float *out,
                         const std::vector<int64_t> &outShape, cudaStream_t s) {
  if (inShape.size() != outShape.size())
    return false;
  int rank = static_cast<int>(inShape.size());
  std::vector<int64_t> st(rank, 1);
  for (int d = rank - 2; d >= 0; --d)
    st[d] = st[d + 1] * inShape[d + 1];
  ReduceIndex r;
  for (int d = 0; d < rank; ++d) {
    if (inShape[d] == 1)
      continue;
    bool reduced = outShape[d] == 1;
    int &cnt = reduced ? r.redRank : r.keptRank;
    int64_t *shp = reduced ? r.redShape : r.keptShape, *str = reduced ? r.redStride : r.keptStride;
    // Merge with the previous dim of the same kind when contiguous with it.
    if (cnt > 0 && str[cnt - 1] == st[d] * inShape[d]) {
      shp[cnt - 1] *= inShape[d];
      str[cnt - 1] = st[d];
      continue;
    }
    if (cnt == kMaxDims)
      return false;
    shp[cnt] = inShape[d];
    str[cnt] = st[d];
    ++cnt;
  }
  for (int d = 0; d < r.keptRank; ++d)
    r.outN *= r.keptShape[d];
  for (int d = 0; d < r.redRank; ++d)
    r.redN *= r.redShape[d];
  cudaMemsetAsync(out, 0, sizeof(float) * r.outN, s);
  if (r.outN == 0 || r.redN == 0)
    return true;
  int64_t chunks = std::min<int64_t>((r.redN + 63) / 64, 65535);
  // Aim for ~256K threads in all: fewer, longer chunks for many outputs.
  chunks = std::max<int64_t>(1, std::min<int64_t>(chunks, (262144 + r.outN - 1) / r.outN));
  r.chunk = (r.redN + chunks - 1) / chunks;
  int block = static_cast<int>(std::min<int64_t>(256, (r.outN + 31) / 32 * 32));
  dim3 grid(static_cast<unsigned>((r.outN + block - 1) / block), static_cast<unsigned>(chunks));
  switch (inType) {
  case ET::F32: reduceKernel<<<grid, block, 0, s>>>(static_cast<const float *>(in), out, r); break;
  case ET::BF16:
    reduceKernel<<<grid, block, 0, s>>>(static_cast<const __nv_bfloat16 *>(in), out, r);
    break;
  case ET::F16: reduceKernel<<<grid, block, 0, s>>>(static_cast<const __half *>(in), out, r); break;
  default: return false;
  }
  return true;
}

template <typename T>
__global__ void pitchedCopyKernel(const T *src, int64_t srcLd, T *dst, int64_t dstLd,
                                  int64_t cols, int64_t rows) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; c < cols;
         c += int64_t(gridDim.x) * blockDim.x)
      dst[r * dstLd + c] = src[r * srcLd + c];
}

bool launchPitchedCopy(size_t es, const void *src, int64_t srcLd, void *dst, int64_t dstLd,
                       int64_t cols, int64_t rows, cudaStream_t s) {
  if (rows == 0 || cols == 0)
    return true;
  dim3 grid(static_cast<unsigned>(std::min<int64_t>((cols + kBlock - 1) / kBlock, 1024)),
            static_cast<unsigned>(std::min<int64_t>(rows, 65535)));
#define PITCHED_CASE(T)                                                                   \
  pitchedCopyKernel<<<grid, kBlock, 0, s>>>(static_cast<const T *>(src), srcLd,           \
                                            static_cast<T *>(dst), dstLd, cols, rows);    \
  return true;
  switch (es) {
  case 1: PITCHED_CASE(uint8_t)
  case 2: PITCHED_CASE(uint16_t)
  case 4: PITCHED_CASE(uint32_t)
  case 8: PITCHED_CASE(uint64_t)
  default: return false;
  }
#undef PITCHED_CASE
}

bool launchCast(ET from, ET to, const void *x, void *y, int64_t n, cudaStream_t s) {
  if (n == 0)
    return true;
  switch (from) {
  case ET::F32: return castFrom<float>(to, x, y, n, s);
  case ET::F64: return castFrom<double>(to, x, y, n, s);
  case ET::F16: return castFrom<__half>(to, x, y, n, s);
  case ET::BF16: return castFrom<__nv_bfloat16>(to, x, y, n, s);
  case ET::I32: return castFrom<int32_t>(to, x, y, n, s);
  case ET::I64: return castFrom<int64_t>(to, x, y, n, s);
  case ET::Bool: return castFrom<uint8_t>(to, x, y, n, s);
  default: return false;
  }
}

} // namespace cuda
} // namespace rt
} // namespace strait
