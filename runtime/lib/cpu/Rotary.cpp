//===- Rotary.cpp - FusedRotaryEmbedding on the CPU -----------------------===//
//
// The graph dialect's FusedRotaryEmbedding(X, Cos, Sin) {adjoint} -> Y, the
// rotate-half rotary position embedding of LLaMA-style models (contract:
// docs/runtime.md, "Rotary embedding"; operand checks shared with the CUDA
// kernel: fusedRotaryEmbeddingArgs, KernelArgs.h). X is viewed as [rows, D]
// with h = D / 2; per row, for c < h:
//
//   adjoint 0:  y_c = x_c cos_c + (-x_{c+h}) sin_c
//               y_{c+h} = x_{c+h} cos_{c+h} + x_c sin_{c+h}
//   adjoint 1:  y_c = x_c cos_c + x_{c+h} sin_{c+h}
//               y_{c+h} = x_{c+h} cos_{c+h} + (-x_c) sin_c
//
// Every product and the sum are rounded to f32 separately, so an f32 result
// is bit-identical to the composed kernels (Mul, Slice/Neg/Concat, Mul, Add)
// and adjoint 1 to the composed backward. This file is compiled with
// -ffp-contract=off (runtime/CMakeLists.txt) so that no multiply-add is
// contracted into an FMA on targets that have one. bf16/f16 operands are
// widened exactly; the f32 result is rounded to Y's dtype once (nearest
// even), where the composed kernels in 16 bits would round after each op.
//
// Rows run in parallel. A row whose X, Cos and Sin are f32 and dense along
// D (Cos/Sin [T, D] broadcast over batch and heads, the common case) is
// computed straight from the tensors; any other row is first gathered into
// per-worker f32 scratch (widened, last-dim broadcast expanded).
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include "strait/runtime/KernelArgs.h"

#include <algorithm>
#include <vector>

namespace strait {
namespace rt {
namespace cpu {
namespace {

/// One row: y = rotary(x) with tables c, s (all dense f32 of 2h elements),
/// a pair (c, c + h) at a time: both read before either is written, so y
/// may be x.
void rotaryRow(const float *x, const float *c, const float *s, float *y, int64_t h,
               bool adjoint) {
  if (!adjoint) {
    for (int64_t i = 0; i < h; ++i) {
      float x0 = x[i], x1 = x[i + h];
      float a0 = x0 * c[i], b0 = -x1 * s[i];
      float a1 = x1 * c[i + h], b1 = x0 * s[i + h];
      y[i] = a0 + b0;
      y[i + h] = a1 + b1;
    }
  } else {
    for (int64_t i = 0; i < h; ++i) {
      float x0 = x[i], x1 = x[i + h];
      float a0 = x0 * c[i], b0 = x1 * s[i + h];
      float a1 = x1 * c[i + h], b1 = -x0 * s[i];
      y[i] = a0 + b0;
      y[i + h] = a1 + b1;
    }
  }
}

/// D elements of `t` from offset `off` with element stride `step` (0 or 1)
/// as dense f32: the tensor's own memory when it is f32 with step 1, else
/// widened (and expanded) into `scratch`.
const float *f32Run(const Tensor &t, int64_t off, int64_t step, int64_t d,
                    std::vector<float> &scratch) {
  if (t.dtype == program::DTYPE_F32 && step == 1)
    return t.as<float>() + off;
  scratch.resize(static_cast<size_t>(d));
  if (t.dtype == program::DTYPE_F32) {
    std::fill(scratch.begin(), scratch.end(), t.as<float>()[off]);
  } else {
    const uint16_t *p = t.as<uint16_t>() + off;
    for (int64_t i = 0; i < d; ++i)
      scratch[i] = lowToFloat(t.dtype, p[i * step]);
  }
  return scratch.data();
}

/// The offsets in Cos and Sin of rows row, row + 1, ... of X viewed as
/// [rows, D] (RotaryArgs::rowOffset), advanced by carrying through X's
/// outer dims instead of dividing by each of them per row (the divisions
/// were most of the kernel's time at D = 16).
struct TableRows {
  const RotaryArgs &a;
  std::vector<int64_t> idx; ///< the row's index over X's dims but the last
  int64_t cos = 0, sin = 0;

  TableRows(const RotaryArgs &args, int64_t row) : a(args), idx(a.x->shape.size()) {
    cos = a.rowOffset(a.cosStrides, row);
    sin = a.rowOffset(a.sinStrides, row);
    const Shape &shape = a.x->shape;
    for (int64_t dim = static_cast<int64_t>(shape.size()) - 2; dim >= 0; --dim) {
      idx[dim] = row % shape[dim];
      row /= shape[dim];
    }
  }
  void next() {
    const Shape &shape = a.x->shape;
    for (int64_t dim = static_cast<int64_t>(shape.size()) - 2; dim >= 0; --dim) {
      cos += a.cosStrides[dim];
      sin += a.sinStrides[dim];
      if (++idx[dim] < shape[dim])
        return;
      cos -= idx[dim] * a.cosStrides[dim];
      sin -= idx[dim] * a.sinStrides[dim];
      idx[dim] = 0;
    }
  }
};

Status fusedRotaryEmbeddingKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(RotaryArgs a, fusedRotaryEmbeddingArgs(ctx));
  if (a.rows == 0)
    return Status::ok();
  const Tensor &x = *a.x, &cosT = *a.cos, &sinT = *a.sin;
  Tensor &y = *a.y;
  const int64_t d = a.d;
  const int64_t cStep = a.cosStrides.back(), sStep = a.sinStrides.back();
  const bool f32 = x.dtype == program::DTYPE_F32;
  int64_t grain = std::max<int64_t>(1, 16384 / d);
  parallelFor(a.rows, grain, [&](int64_t r0, int64_t r1) {
    std::vector<float> xs, cs, ss, ys;
    TableRows tables(a, r0);
    for (int64_t r = r0; r < r1; ++r, tables.next()) {
      const float *c = f32Run(cosT, tables.cos, cStep, d, cs);
      const float *s = f32Run(sinT, tables.sin, sStep, d, ss);
      const float *xr = f32Run(x, r * d, 1, d, xs);
      if (f32) {
        rotaryRow(xr, c, s, y.as<float>() + r * d, a.h, a.adjoint);
        continue;
      }
      ys.resize(static_cast<size_t>(d));
      rotaryRow(xr, c, s, ys.data(), a.h, a.adjoint);
      uint16_t *out = y.as<uint16_t>() + r * d;
      for (int64_t i = 0; i < d; ++i)
        out[i] = floatToLow(y.dtype, ys[i]);
    }
  });
  return Status::ok();
}

} // namespace

void addRotaryKernels(KernelTable &table) {
  table.add("FusedRotaryEmbedding", fusedRotaryEmbeddingKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
