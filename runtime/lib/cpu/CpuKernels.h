//===- CpuKernels.h - Internal interface of the CPU backend -----*- C++ -*-===//
//
// Each kernel family registers itself into the backend's KernelTable through
// an explicit add*Kernels function. Shared helpers: axis normalization,
// broadcasting strides and dtype dispatch.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CPU_CPUKERNELS_H
#define STRAIT_RUNTIME_LIB_CPU_CPUKERNELS_H

#include "strait/runtime/Backend.h"
#include "strait/runtime/KernelArgs.h"
#include "strait/runtime/ThreadPool.h"

#include "../codec/CodecLayout.h"

#include <array>
#include <cstdint>
#include <vector>

namespace strait {
namespace rt {
namespace cpu {

void addElementwiseKernels(KernelTable &table);
void addMatMulKernels(KernelTable &table);
void addConvKernels(KernelTable &table);
void addNormalizationKernels(KernelTable &table);
void addReduceKernels(KernelTable &table);
void addDataMovementKernels(KernelTable &table);
void addIndexingKernels(KernelTable &table);
void addGeneratorKernels(KernelTable &table);
void addTrainingKernels(KernelTable &table);
void addMiscKernels(KernelTable &table);
void addGradientKernels(KernelTable &table);
/// FusedElementwise: Fused.cpp.
void addFusedKernels(KernelTable &table);
/// FusedAttention, FusedAttentionGrad: Attention.cpp.
void addAttentionKernels(KernelTable &table);
/// FusedRotaryEmbedding: Rotary.cpp.
void addRotaryKernels(KernelTable &table);
/// GroupedMatMul, GroupedMatMulGradWeight (mixture-of-experts products):
/// GroupedMatMul.cpp.
void addGroupedMatMulKernels(KernelTable &table);

/// C[m,n] = A[m,k] * B[k,n] (+ C when accumulate), row-major, f32.
void sgemmRowMajor(int64_t m, int64_t n, int64_t k, const float *a,
                   const float *b, float *c, bool accumulate);

/// Layout kernels (Slice, Expand, Tile, Pad, Cast, Clip, ...): Layout.cpp.
void addLayoutKernels(KernelTable &table);
/// Resize: Resize.cpp.
void addResizeKernels(KernelTable &table);

/// dst[i] = src[base + sum(idx_d * strides_d)] over the row-major `out`
/// shape, element size `es` bytes.
void stridedCopyBytes(const char *src, int64_t base,
                      const std::vector<int64_t> &strides, const Shape &out,
                      char *dst, size_t es);

/// y[i] = tanhFloat(x[i]) (RowMath.h) for i < n: the f32 Tanh of the Tanh
/// kernel and of FusedElementwise, compiled for AVX2 and for the baseline
/// (the same IEEE operations, no FMA, so the same bits on either; not
/// AVX-512, whose clone GCC contracts into its FMA instructions).
void tanhRow(const float *x, float *y, int64_t n);
/// y[i] = sigmoidFloat(x[i]) (RowMath.h), as tanhRow: the f32 Sigmoid of
/// the Sigmoid kernel and of FusedElementwise.
void sigmoidRow(const float *x, float *y, int64_t n);

/// A weight gradient's product accumulated in place: every f32 Gemm (no C)
/// whose one reader is an AccumulateGrad that follows it in the same run
/// steps, with no kernel between them touching the accumulator, writes the
/// accumulator itself (attribute accumulate_micro_batches = M: beta 0 on the
/// first micro-batch and 1 after, alpha / M), and the AccumulateGrad goes
/// from the steps. The number of Gemms folded.
int fuseGemmAccumulation(program::Program &program);

/// General row-major sgemm: C = alpha * op(A) * op(B) + beta * C.
void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc);

/// bf16 or f16.
inline bool isLowFloat(DType t) {
  return t == program::DTYPE_BF16 || t == program::DTYPE_F16;
}
/// A bf16/f16 value (bits `v` of dtype t) widened to float (exact).
inline float lowToFloat(DType t, uint16_t v) {
  return t == program::DTYPE_F16 ? codec::halfToFloat(v) : codec::bfloat16ToFloat(v);
}
/// Calls `body(load)` where load(k) is element k of `t` as a float: f32 as
/// it is, bf16 / f16 widened exactly (gradients that AccumulateGrad and the
/// optimizers widen on load).
template <typename Body> void withFloatLoader(const Tensor &t, Body &&body) {
  if (isLowFloat(t.dtype)) {
    const uint16_t *p = t.as<uint16_t>();
    DType d = t.dtype;
    body([p, d](int64_t k) { return lowToFloat(d, p[k]); });
  } else {
    const float *p = t.as<float>();
    body([p](int64_t k) { return p[k]; });
  }
}
/// Row r (of `len` elements) of an f32 or bf16/f16 tensor as floats: a
/// pointer into the tensor, or into `wide` (len floats) filled by widening
/// (the 16-bit dY the normalization gradients read).
inline const float *rowAsFloat(const Tensor &t, int64_t r, int64_t len,
                               std::vector<float> &wide) {
  if (!isLowFloat(t.dtype))
    return t.as<float>() + r * len;
  wide.resize(len);
  const uint16_t *p = t.as<uint16_t>() + r * len;
  for (int64_t i = 0; i < len; ++i)
    wide[i] = lowToFloat(t.dtype, p[i]);
  return wide.data();
}
/// f to bf16/f16 bits, rounded to nearest even (NaN stays NaN). The runtime's
/// one converter (codec/CodecLayout.h), shared with the codecs and CUDA.
inline uint16_t floatToLow(DType t, float f) {
  return t == program::DTYPE_F16 ? codec::floatToHalf(f) : codec::floatToBFloat16(f);
}

/// Numpy broadcast of two shapes, or an error naming both.
StatusOr<Shape> broadcastShapes(const KernelContext &ctx, const Shape &a,
                                const Shape &b);

/// Element strides of `in` when broadcast to `out` (0 on broadcast dims).
std::vector<int64_t> broadcastStrides(const Shape &in, const Shape &out);

/// Row-major strides of a shape.
std::vector<int64_t> rowMajorStrides(const Shape &shape);

/// Reads an integer tensor (i32 or i64) into a vector.
StatusOr<std::vector<int64_t>> readInts(const KernelContext &ctx,
                                        const Tensor &t);

/// Calls body(outIndex, offsets, count, innerStrides) for every innermost
/// row of `out`, in parallel over rows; offsets index the N inputs.
template <size_t N, typename F>
void broadcastRows(const Shape &out,
                   const std::array<std::vector<int64_t>, N> &strides,
                   const F &body) {
  int64_t r = static_cast<int64_t>(out.size());
  int64_t inner = r ? out[r - 1] : 1;
  int64_t total = numElements(out);
  if (total == 0)
    return;
  std::array<int64_t, N> innerStride{};
  for (size_t k = 0; k < N; ++k)
    innerStride[k] = r ? strides[k][r - 1] : 0;
  int64_t rows = total / inner;
  int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(inner, 1));
  parallelFor(rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      std::array<int64_t, N> off{};
      int64_t rem = row;
      for (int64_t d = r - 2; d >= 0; --d) {
        int64_t idx = rem % out[d];
        rem /= out[d];
        for (size_t k = 0; k < N; ++k)
          off[k] += idx * strides[k][d];
      }
      body(row * inner, off, inner, innerStride);
    }
  });
}

} // namespace cpu
} // namespace rt
} // namespace strait

/// Dispatches `MACRO(T)` over numeric dtypes; falls through on others.
#define STRAIT_DISPATCH_NUMERIC(dtype, MACRO)                                  \
  switch (dtype) {                                                             \
  case ::strait::program::DTYPE_F32:                                           \
    MACRO(float);                                                              \
  case ::strait::program::DTYPE_F64:                                           \
    MACRO(double);                                                             \
  case ::strait::program::DTYPE_I32:                                           \
    MACRO(int32_t);                                                            \
  case ::strait::program::DTYPE_I64:                                           \
    MACRO(int64_t);                                                            \
  case ::strait::program::DTYPE_U8:                                            \
    MACRO(uint8_t);                                                            \
  case ::strait::program::DTYPE_I8:                                            \
    MACRO(int8_t);                                                             \
  case ::strait::program::DTYPE_I16:                                           \
    MACRO(int16_t);                                                            \
  case ::strait::program::DTYPE_U16:                                           \
    MACRO(uint16_t);                                                           \
  case ::strait::program::DTYPE_U32:                                           \
    MACRO(uint32_t);                                                           \
  case ::strait::program::DTYPE_U64:                                           \
    MACRO(uint64_t);                                                           \
  default:                                                                     \
    break;                                                                     \
  }

#define STRAIT_DISPATCH_FLOAT(dtype, MACRO)                                    \
  switch (dtype) {                                                             \
  case ::strait::program::DTYPE_F32:                                           \
    MACRO(float);                                                              \
  case ::strait::program::DTYPE_F64:                                           \
    MACRO(double);                                                             \
  default:                                                                     \
    break;                                                                     \
  }

#endif // STRAIT_RUNTIME_LIB_CPU_CPUKERNELS_H
