//===- Fused.cpp - FusedElementwise on the CPU ----------------------------===//
//
// Evaluates a fused program (strait/runtime/FusedProgram.h) over tiles of
// kTile consecutive output elements: each input is loaded (broadcast) into a
// tile register, each instruction runs over whole tiles, outputs are stored
// from their registers. Tiles are spread over the thread pool; every
// intermediate stays in the thread's register file instead of memory.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include "strait/runtime/FusedProgram.h"

#include "../codec/CodecLayout.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

namespace strait {
namespace rt {
namespace cpu {
namespace {

constexpr int64_t kTile = 256;

/// How one input is read over the iteration shape.
struct InputView {
  const void *data = nullptr;
  DType dtype = program::DTYPE_F32; ///< f32, bf16, f16 or bool
  std::vector<int64_t> strides; ///< element strides per output dim (0: broadcast)
  enum { Dense, Scalar, Strided } kind = Strided;
};

/// Element loaders: a stored element as its f32 register value (exact).
struct LoadF32 {
  using T = float;
  static float get(float v) { return v; }
};
struct LoadBool {
  using T = bool;
  static float get(bool v) { return v ? 1.0f : 0.0f; }
};
struct LoadBF16 {
  using T = uint16_t;
  static float get(uint16_t v) { return codec::bfloat16ToFloat(v); }
};
struct LoadF16 {
  using T = uint16_t;
  static float get(uint16_t v) { return codec::halfToFloat(v); }
};

template <typename L>
void loadRun(float *dst, const typename L::T *src, int64_t stride, int64_t n) {
  if (stride == 0) {
    float v = L::get(src[0]);
    for (int64_t i = 0; i < n; ++i)
      dst[i] = v;
  } else if (stride == 1) {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = L::get(src[i]);
  } else {
    for (int64_t i = 0; i < n; ++i)
      dst[i] = L::get(src[i * stride]);
  }
}

/// dst[0..n) = the input at output elements [start, start+n), walking the
/// output index in runs along the innermost dimension.
template <typename L>
void loadStrided(float *dst, const typename L::T *src, const InputView &in, const Shape &shape,
                 int64_t start, int64_t n) {
  int64_t r = static_cast<int64_t>(shape.size());
  int64_t idx[kFusedMaxRank] = {};
  int64_t rem = start, off = 0;
  for (int64_t d = r - 1; d >= 0; --d) {
    idx[d] = rem % shape[d];
    rem /= shape[d];
    off += idx[d] * in.strides[d];
  }
  int64_t inner = shape[r - 1], innerStride = in.strides[r - 1];
  for (int64_t done = 0; done < n;) {
    int64_t run = std::min(n - done, inner - idx[r - 1]);
    loadRun<L>(dst + done, src + off, innerStride, run);
    done += run;
    off += run * innerStride;
    idx[r - 1] += run;
    // Carry into the outer dimensions.
    for (int64_t d = r - 1; d > 0 && idx[d] == shape[d]; --d) {
      off -= idx[d] * in.strides[d];
      idx[d] = 0;
      ++idx[d - 1];
      off += in.strides[d - 1];
    }
  }
}

template <typename L>
void loadTileAs(float *dst, const InputView &in, const Shape &shape, int64_t start, int64_t n) {
  const auto *src = static_cast<const typename L::T *>(in.data);
  switch (in.kind) {
  case InputView::Dense:
    if constexpr (std::is_same_v<L, LoadF32>)
      std::memcpy(dst, src + start, n * sizeof(float));
    else
      loadRun<L>(dst, src + start, 1, n);
    return;
  case InputView::Scalar: loadRun<L>(dst, src, 0, n); return;
  case InputView::Strided: loadStrided<L>(dst, src, in, shape, start, n); return;
  }
}

void loadTile(float *dst, const InputView &in, const Shape &shape, int64_t start, int64_t n) {
  switch (in.dtype) {
  case program::DTYPE_BOOL: return loadTileAs<LoadBool>(dst, in, shape, start, n);
  case program::DTYPE_BF16: return loadTileAs<LoadBF16>(dst, in, shape, start, n);
  case program::DTYPE_F16: return loadTileAs<LoadF16>(dst, in, shape, start, n);
  default: return loadTileAs<LoadF32>(dst, in, shape, start, n);
  }
}

/// Stores n registers into `out` from element `start`: bool as 0/1, a
/// 16-bit float rounded to nearest even (Cast's rounding).
void storeTile(Tensor &out, const float *src, int64_t start, int64_t n) {
  switch (out.dtype) {
  case program::DTYPE_BOOL: {
    bool *dst = out.as<bool>() + start;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = src[i] != 0;
    return;
  }
  case program::DTYPE_BF16: {
    uint16_t *dst = out.as<uint16_t>() + start;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = codec::floatToBFloat16(src[i]);
    return;
  }
  case program::DTYPE_F16: {
    uint16_t *dst = out.as<uint16_t>() + start;
    for (int64_t i = 0; i < n; ++i)
      dst[i] = codec::floatToHalf(src[i]);
    return;
  }
  default: std::memcpy(out.as<float>() + start, src, n * sizeof(float)); return;
  }
}

// The loops below are inlined into runTiles, which is compiled for AVX2 and
// the baseline ISA (target_clones): they vectorize 8 floats (4 doubles)
// wide where the CPU has AVX2. Neither clone contracts into FMA (the AVX2
// target does not enable FMA; an AVX-512 clone would: GCC contracts into
// its FMA instructions), so every element is computed by the same IEEE operations as
// in the unfused kernels, whatever the vector width.
#define STRAIT_INLINE inline __attribute__((always_inline))

template <typename F>
STRAIT_INLINE void unary(float *__restrict y, const float *__restrict a, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = f(a[i]);
}
template <typename F>
STRAIT_INLINE void binary(float *__restrict y, const float *__restrict a,
                          const float *__restrict b, int64_t n, F f) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = f(a[i], b[i]);
}

/// One instruction over a tile. The arithmetic is the unfused CPU kernels'
/// (Elementwise.cpp) on f32, so fused and unfused results agree.
/// (Const registers are filled once per runTiles call, not here.)
STRAIT_INLINE void runInstr(const FusedInstr &in, float *__restrict y, const float *a,
                            const float *b, const float *c, int64_t n) {
  switch (in.op) {
  case FusedOp::Identity: std::memcpy(y, a, n * sizeof(float)); return;
  case FusedOp::Neg: unary(y, a, n, [](float x) { return -x; }); return;
  case FusedOp::Abs: unary(y, a, n, [](float x) { return x < 0 ? -x : x; }); return;
  case FusedOp::Exp: unary(y, a, n, [](float x) { return std::exp(x); }); return;
  case FusedOp::Log: unary(y, a, n, [](float x) { return std::log(x); }); return;
  case FusedOp::Sqrt: unary(y, a, n, [](float x) { return std::sqrt(x); }); return;
  case FusedOp::Reciprocal: unary(y, a, n, [](float x) { return 1.0f / x; }); return;
  case FusedOp::Tanh: tanhRow(a, y, n); return;
  case FusedOp::Sigmoid: sigmoidRow(a, y, n); return;
  case FusedOp::Relu: unary(y, a, n, [](float x) { return x > 0 ? x : 0.0f; }); return;
  case FusedOp::Add: binary(y, a, b, n, [](float p, float q) { return p + q; }); return;
  case FusedOp::Sub: binary(y, a, b, n, [](float p, float q) { return p - q; }); return;
  case FusedOp::Mul: binary(y, a, b, n, [](float p, float q) { return p * q; }); return;
  case FusedOp::Div: binary(y, a, b, n, [](float p, float q) { return p / q; }); return;
  case FusedOp::Pow:
    if (in.powInt == 2) {
      unary(y, a, n, [](float x) { return static_cast<float>(double(x) * double(x)); });
      return;
    }
    if (in.powInt == 3) {
      unary(y, a, n, [](float x) {
        return static_cast<float>(double(x) * double(x) * double(x));
      });
      return;
    }
    binary(y, a, b, n, [](float p, float q) {
      return static_cast<float>(std::pow(double(p), double(q)));
    });
    return;
  case FusedOp::Where:
    for (int64_t i = 0; i < n; ++i)
      y[i] = a[i] != 0 ? b[i] : c[i];
    return;
  case FusedOp::Max:
    binary(y, a, b, n, [](float p, float q) {
      return p != p || q != q ? std::numeric_limits<float>::quiet_NaN() : p > q ? p : q;
    });
    return;
  case FusedOp::Min:
    binary(y, a, b, n, [](float p, float q) {
      return p != p || q != q ? std::numeric_limits<float>::quiet_NaN() : p < q ? p : q;
    });
    return;
  // Comparisons and logic as 1/0 (evalFusedScalar's values) in loops that
  // vectorize: ReluGrad's Greater was 4% of a digits-cnn training step
  // through the per-element switch below.
  case FusedOp::Equal: binary(y, a, b, n, [](float p, float q) { return p == q ? 1.0f : 0.0f; }); return;
  case FusedOp::Less: binary(y, a, b, n, [](float p, float q) { return p < q ? 1.0f : 0.0f; }); return;
  case FusedOp::LessOrEqual:
    binary(y, a, b, n, [](float p, float q) { return p <= q ? 1.0f : 0.0f; });
    return;
  case FusedOp::Greater: binary(y, a, b, n, [](float p, float q) { return p > q ? 1.0f : 0.0f; }); return;
  case FusedOp::GreaterOrEqual:
    binary(y, a, b, n, [](float p, float q) { return p >= q ? 1.0f : 0.0f; });
    return;
  case FusedOp::And:
    binary(y, a, b, n, [](float p, float q) { return p != 0 && q != 0 ? 1.0f : 0.0f; });
    return;
  case FusedOp::Or:
    binary(y, a, b, n, [](float p, float q) { return p != 0 || q != 0 ? 1.0f : 0.0f; });
    return;
  case FusedOp::Not: unary(y, a, n, [](float p) { return p != 0 ? 0.0f : 1.0f; }); return;
  default: // the rest, through the reference semantics
    for (int64_t i = 0; i < n; ++i)
      y[i] = evalFusedScalar(in, a ? a[i] : 0, b ? b[i] : 0, c ? c[i] : 0);
    return;
  }
}

/// Evaluates tiles [begin, end): `regs` holds kTile floats per register,
/// `reg` receives each register's tile (a dense f32 input's tile is read in
/// place: instructions only read inputs, and a tile's outputs are stored
/// after all of its instructions ran, so an output sharing an input's
/// memory is still read first).
__attribute__((target_clones("avx2", "default"))) void
runTiles(const FusedArgs &f, const std::vector<InputView> &views, const std::vector<bool> &needed,
         float *regs, const float **reg, int64_t begin, int64_t end) {
  const FusedProgram &p = f.program;
  const int64_t total = numElements(f.shape);
  for (size_t r = 0; r < p.numRegisters(); ++r)
    reg[r] = regs + r * kTile;
  // A constant's tile is the same in every tile: filled once.
  for (size_t k = 0; k < p.code.size(); ++k)
    if (p.code[k].op == FusedOp::Const)
      std::fill(regs + (p.numInputs + k) * kTile, regs + (p.numInputs + k + 1) * kTile,
                p.constants[p.code[k].a]);
  for (int64_t t = begin; t < end; ++t) {
    int64_t start = t * kTile, n = std::min(kTile, total - start);
    for (size_t i = 0; i < views.size(); ++i) {
      if (!needed[i])
        continue;
      const InputView &v = views[i];
      if (v.kind == InputView::Dense && v.dtype == program::DTYPE_F32)
        reg[i] = static_cast<const float *>(v.data) + start;
      else
        loadTile(regs + i * kTile, v, f.shape, start, n);
    }
    for (size_t k = 0; k < p.code.size(); ++k) {
      const FusedInstr &in = p.code[k];
      if (in.op == FusedOp::Const)
        continue;
      auto at = [&](int32_t r) { return r < 0 ? nullptr : reg[r]; };
      runInstr(in, regs + (p.numInputs + k) * kTile, at(in.a), at(in.b), at(in.c), n);
    }
    for (size_t j = 0; j < p.outputs.size(); ++j)
      storeTile(*f.outputs[j], reg[p.outputs[j]], start, n);
  }
}

Status fusedKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(FusedArgs f, decodeFusedKernel(ctx));
  const FusedProgram &p = f.program;
  int64_t total = numElements(f.shape);
  if (total == 0)
    return Status::ok();
  std::vector<InputView> views(f.inputs.size());
  for (size_t i = 0; i < f.inputs.size(); ++i) {
    const Tensor *t = f.inputs[i];
    InputView &v = views[i];
    v.data = t->data;
    v.dtype = t->dtype;
    v.strides = broadcastStrides(t->shape, f.shape);
    v.kind = t->numel() == total ? InputView::Dense
             : t->numel() == 1   ? InputView::Scalar
                                 : InputView::Strided;
  }
  // A register read by no instruction or output needs no load.
  std::vector<bool> needed(p.numRegisters(), false);
  for (const FusedInstr &in : p.code)
    if (in.op != FusedOp::Const)
      for (int32_t r : {in.a, in.b, in.c})
        if (r >= 0)
          needed[r] = true;
  for (int32_t r : p.outputs)
    needed[r] = true;
  int64_t tiles = (total + kTile - 1) / kTile;
  // ~16K elements per task, as the unfused kernels.
  parallelFor(tiles, 64, [&](int64_t begin, int64_t end) {
    std::vector<float> regs(p.numRegisters() * kTile);
    std::vector<const float *> reg(p.numRegisters());
    runTiles(f, views, needed, regs.data(), reg.data(), begin, end);
  });
  return Status::ok();
}

} // namespace

void addFusedKernels(KernelTable &table) { table.add("FusedElementwise", fusedKernel); }

} // namespace cpu
} // namespace rt
} // namespace strait
