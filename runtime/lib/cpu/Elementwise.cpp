//===- Elementwise.cpp - Unary, binary and n-ary elementwise kernels ------===//
//
// Numpy-style broadcasting for every binary op; float unary ops on f32/f64;
// arithmetic on f32/f64/i32/i64/u8/i8; comparisons produce bool.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "RowMath.h"
#include "SoftmaxCrossEntropy.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace strait {
namespace rt {
namespace cpu {
namespace {

//===----------------------------------------------------------------------===//
// Unary
//===----------------------------------------------------------------------===//

template <typename T, typename F>
void applyUnary(const Tensor &x, Tensor &y, const F &f) {
  const T *in = x.as<T>();
  T *out = y.as<T>();
  parallelFor(x.numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      out[i] = static_cast<T>(f(in[i]));
  });
}

/// `make(ctx)` returns StatusOr<F> where F is a generic functor.
template <bool AllowInts = false, typename Make>
void addUnary(KernelTable &table, const char *op, Make make) {
  table.add(op, [make](KernelContext &ctx) -> Status {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
    STRAIT_ASSIGN_OR_RETURN(Tensor * y,
                            ctx.requireOutput(0, x->shape, x->dtype));
    STRAIT_ASSIGN_OR_RETURN(auto f, make(ctx));
    switch (x->dtype) {
    case program::DTYPE_F32:
      applyUnary<float>(*x, *y, f);
      return Status::ok();
    case program::DTYPE_F64:
      applyUnary<double>(*x, *y, f);
      return Status::ok();
    case program::DTYPE_I32:
      if constexpr (AllowInts) {
        applyUnary<int32_t>(*x, *y, f);
        return Status::ok();
      }
      break;
    case program::DTYPE_I64:
      if constexpr (AllowInts) {
        applyUnary<int64_t>(*x, *y, f);
        return Status::ok();
      }
      break;
    default:
      break;
    }
    return ctx.unsupported("dtype " + x->typeString());
  });
}

template <typename F> auto plain(F f) {
  return [f](const KernelContext &) { return StatusOr<F>(f); };
}

template <typename F> auto withAlpha(const char *name, float dflt, F f) {
  using R = decltype(f(0.0f));
  return [=](const KernelContext &ctx) -> StatusOr<R> {
    STRAIT_ASSIGN_OR_RETURN(float a, ctx.getAttrs().getFloat(name, dflt));
    return f(a);
  };
}

template <typename T> T sigmoid(T x) {
  return x >= 0 ? T(1) / (T(1) + std::exp(-x))
                : std::exp(x) / (T(1) + std::exp(x));
}

/// f32 through tanhRow (vectorized, 2-4x faster than libm's tanhf and
/// within 1e-12 of tanh before rounding), as FusedElementwise's Tanh; f64
/// through libm.
Status tanhKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  if (x->dtype == program::DTYPE_F32) {
    const float *in = x->as<float>();
    float *out = y->as<float>();
    parallelFor(x->numel(), 16384, [&](int64_t b, int64_t e) { tanhRow(in + b, out + b, e - b); });
    return Status::ok();
  }
  if (x->dtype == program::DTYPE_F64) {
    applyUnary<double>(*x, *y, [](double v) { return std::tanh(v); });
    return Status::ok();
  }
  return ctx.unsupported("dtype " + x->typeString());
}

/// f32 through sigmoidRow (sigmoidFloat, vectorized), as FusedElementwise's
/// Sigmoid; f64 through libm's exp.
Status sigmoidKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  if (x->dtype == program::DTYPE_F32) {
    const float *in = x->as<float>();
    float *out = y->as<float>();
    parallelFor(x->numel(), 16384,
                [&](int64_t b, int64_t e) { sigmoidRow(in + b, out + b, e - b); });
    return Status::ok();
  }
  if (x->dtype == program::DTYPE_F64) {
    applyUnary<double>(*x, *y, [](double v) { return sigmoid(v); });
    return Status::ok();
  }
  return ctx.unsupported("dtype " + x->typeString());
}

void addMathUnary(KernelTable &t) {
  addUnary<true>(t, "Abs", plain([](auto x) { return x < 0 ? -x : x; }));
  addUnary<true>(t, "Neg", plain([](auto x) { return -x; }));
  addUnary<true>(t, "Sign", plain([](auto x) {
             return decltype(x)((x > 0) - (x < 0));
           }));
  addUnary(t, "Exp", plain([](auto x) { return std::exp(x); }));
  addUnary(t, "Log", plain([](auto x) { return std::log(x); }));
  addUnary(t, "Sqrt", plain([](auto x) { return std::sqrt(x); }));
  addUnary(t, "Reciprocal", plain([](auto x) { return decltype(x)(1) / x; }));
  addUnary(t, "Floor", plain([](auto x) { return std::floor(x); }));
  addUnary(t, "Ceil", plain([](auto x) { return std::ceil(x); }));
  addUnary(t, "Round", plain([](auto x) { return std::nearbyint(x); }));
  addUnary(t, "Erf", plain([](auto x) { return std::erf(x); }));
  addUnary(t, "Sin", plain([](auto x) { return std::sin(x); }));
  addUnary(t, "Cos", plain([](auto x) { return std::cos(x); }));
  addUnary(t, "Tan", plain([](auto x) { return std::tan(x); }));
  addUnary(t, "Asin", plain([](auto x) { return std::asin(x); }));
  addUnary(t, "Acos", plain([](auto x) { return std::acos(x); }));
  addUnary(t, "Atan", plain([](auto x) { return std::atan(x); }));
  addUnary(t, "Sinh", plain([](auto x) { return std::sinh(x); }));
  addUnary(t, "Cosh", plain([](auto x) { return std::cosh(x); }));
  addUnary(t, "Asinh", plain([](auto x) { return std::asinh(x); }));
  addUnary(t, "Acosh", plain([](auto x) { return std::acosh(x); }));
  addUnary(t, "Atanh", plain([](auto x) { return std::atanh(x); }));
  t.add("Tanh", tanhKernel);
}

void addActivations(KernelTable &t) {
  t.add("Sigmoid", sigmoidKernel);
  addUnary<true>(t, "Relu", plain([](auto x) { return x > 0 ? x : decltype(x)(0); }));
  addUnary(t, "Softplus", plain([](auto x) {
             return x > 20 ? x : std::log1p(std::exp(x));
           }));
  addUnary(t, "Softsign", plain([](auto x) { return x / (1 + std::abs(x)); }));
  addUnary(t, "Mish", plain([](auto x) {
             return x * std::tanh(std::log1p(std::exp(x)));
           }));
  addUnary(t, "HardSwish", plain([](auto x) {
             using T = decltype(x);
             return x * std::max(T(0), std::min(T(1), x / T(6) + T(0.5)));
           }));
  addUnary(t, "LeakyRelu", withAlpha("alpha", 0.01f, [](float a) {
             return [a](auto x) { return x >= 0 ? x : decltype(x)(a) * x; };
           }));
  addUnary(t, "Elu", withAlpha("alpha", 1.0f, [](float a) {
             return [a](auto x) {
               return x >= 0 ? x : decltype(x)(a) * (std::exp(x) - 1);
             };
           }));
  addUnary(t, "Celu", withAlpha("alpha", 1.0f, [](float a) {
             return [a](auto x) {
               using T = decltype(x);
               return std::max(T(0), x) +
                      std::min(T(0), T(a) * (std::exp(x / T(a)) - 1));
             };
           }));
  addUnary(t, "ThresholdedRelu", withAlpha("alpha", 1.0f, [](float a) {
             return [a](auto x) { return x > a ? x : decltype(x)(0); };
           }));
  addUnary(t, "Selu", [](const KernelContext &ctx) -> StatusOr<std::function<double(double)>> {
    STRAIT_ASSIGN_OR_RETURN(float a, ctx.getAttrs().getFloat("alpha", 1.67326319217681884765625f));
    STRAIT_ASSIGN_OR_RETURN(float g, ctx.getAttrs().getFloat("gamma", 1.05070102214813232421875f));
    return std::function<double(double)>([a, g](double x) {
      return x > 0 ? g * x : g * (a * std::exp(x) - a);
    });
  });
  addUnary(t, "HardSigmoid", [](const KernelContext &ctx) -> StatusOr<std::function<double(double)>> {
    STRAIT_ASSIGN_OR_RETURN(float a, ctx.getAttrs().getFloat("alpha", 0.2f));
    STRAIT_ASSIGN_OR_RETURN(float b, ctx.getAttrs().getFloat("beta", 0.5f));
    return std::function<double(double)>([a, b](double x) {
      return std::max(0.0, std::min(1.0, double(a) * x + double(b)));
    });
  });
  addUnary(t, "Shrink", [](const KernelContext &ctx) -> StatusOr<std::function<double(double)>> {
    STRAIT_ASSIGN_OR_RETURN(float l, ctx.getAttrs().getFloat("lambd", 0.5f));
    STRAIT_ASSIGN_OR_RETURN(float b, ctx.getAttrs().getFloat("bias", 0.0f));
    return std::function<double(double)>([l, b](double x) {
      return x < -l ? x + b : (x > l ? x - b : 0.0);
    });
  });
  addUnary(t, "Gelu", [](const KernelContext &ctx) -> StatusOr<std::function<double(double)>> {
    STRAIT_ASSIGN_OR_RETURN(std::string approx, ctx.getAttrs().getString("approximate", "none"));
    if (approx == "tanh")
      return std::function<double(double)>([](double x) {
        return 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
      });
    if (approx != "none")
      return ctx.error("approximate must be 'none' or 'tanh', got '" + approx + "'");
    return std::function<double(double)>(
        [](double x) { return 0.5 * x * (1 + std::erf(x * 0.7071067811865476)); });
  });
}

//===----------------------------------------------------------------------===//
// Binary with broadcasting
//===----------------------------------------------------------------------===//

/// y = f(a, b) with numpy broadcasting. Operands of the output's shape and
/// inner strides of 1 or 0 (a row, or one value repeated along it) get loops
/// of their own that vectorize; the values are those of the general loop.
template <typename T, typename R, typename F>
void applyBinary(const Tensor &a, const Tensor &b, Tensor &y, const F &f) {
  const T *pa = a.as<T>();
  const T *pb = b.as<T>();
  R *py = y.as<R>();
  if (a.shape == y.shape && b.shape == y.shape) {
    parallelFor(y.numel(), 16384, [&](int64_t b0, int64_t b1) {
      for (int64_t i = b0; i < b1; ++i)
        py[i] = static_cast<R>(f(pa[i], pb[i]));
    });
    return;
  }
  std::array<std::vector<int64_t>, 2> strides = {
      broadcastStrides(a.shape, y.shape), broadcastStrides(b.shape, y.shape)};
  broadcastRows<2>(y.shape, strides,
                   [&](int64_t o, std::array<int64_t, 2> off, int64_t n,
                       std::array<int64_t, 2> s) {
                     const T *ra = pa + off[0], *rb = pb + off[1];
                     R *ry = py + o;
                     if (s[0] == 1 && s[1] == 1)
                       for (int64_t i = 0; i < n; ++i)
                         ry[i] = static_cast<R>(f(ra[i], rb[i]));
                     else if (s[0] == 1 && s[1] == 0)
                       for (int64_t i = 0; i < n; ++i)
                         ry[i] = static_cast<R>(f(ra[i], rb[0]));
                     else if (s[0] == 0 && s[1] == 1)
                       for (int64_t i = 0; i < n; ++i)
                         ry[i] = static_cast<R>(f(ra[0], rb[i]));
                     else
                       for (int64_t i = 0; i < n; ++i)
                         ry[i] = static_cast<R>(f(ra[i * s[0]], rb[i * s[1]]));
                   });
}

enum class ResultKind { Same, Bool };

template <typename F>
void addBinary(KernelTable &table, const char *op, F f,
               ResultKind kind = ResultKind::Same, bool floatOnly = false) {
  table.add(op, [f, kind, floatOnly](KernelContext &ctx) -> Status {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
    STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1));
    if (a->dtype != b->dtype)
      return ctx.error("operand types differ: " + a->typeString() + " vs " +
                       b->typeString());
    STRAIT_ASSIGN_OR_RETURN(Shape shape, broadcastShapes(ctx, a->shape, b->shape));
    DType outType = kind == ResultKind::Bool ? program::DTYPE_BOOL : a->dtype;
    STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, outType));
    bool isFloat = a->dtype == program::DTYPE_F32 || a->dtype == program::DTYPE_F64;
    if (floatOnly && !isFloat)
      return ctx.unsupported("dtype " + a->typeString());
#define STRAIT_BINARY_CASE(T)                                                  \
  if (kind == ResultKind::Bool)                                                \
    applyBinary<T, bool>(*a, *b, *y, f);                                       \
  else                                                                         \
    applyBinary<T, T>(*a, *b, *y, f);                                          \
  return Status::ok();
    STRAIT_DISPATCH_NUMERIC(a->dtype, STRAIT_BINARY_CASE)
    if (a->dtype == program::DTYPE_BOOL) {
      STRAIT_BINARY_CASE(bool)
    }
#undef STRAIT_BINARY_CASE
    return ctx.unsupported("dtype " + a->typeString());
  });
}

template <typename T> T powOf(T a, T b) {
  return static_cast<T>(std::pow(static_cast<double>(a), static_cast<double>(b)));
}

/// Pow allows an exponent of another numeric type: convert it first.
Status powKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(Shape shape, broadcastShapes(ctx, a->shape, b->shape));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, a->dtype));
  OwnedTensor exponent(a->dtype, b->shape);
  int64_t n = b->numel();
  auto readExp = [&](int64_t i) -> double {
    switch (b->dtype) {
    case program::DTYPE_F32: return b->as<float>()[i];
    case program::DTYPE_F64: return b->as<double>()[i];
    case program::DTYPE_I32: return b->as<int32_t>()[i];
    case program::DTYPE_I64: return static_cast<double>(b->as<int64_t>()[i]);
    case program::DTYPE_U32: return b->as<uint32_t>()[i];
    case program::DTYPE_U64: return static_cast<double>(b->as<uint64_t>()[i]);
    case program::DTYPE_U8: return b->as<uint8_t>()[i];
    case program::DTYPE_I8: return b->as<int8_t>()[i];
    default: return std::numeric_limits<double>::quiet_NaN();
    }
  };
  // An f32 x^2 or x^3 by a scalar exponent (GPT-2's GELU): products in
  // double, as FusedElementwise's Pow (Fused.cpp). x*x is exact in double
  // and x*x*x rounds once there, then to f32: libm's double pow (within
  // 0.52 ulp) rounds to the same float unless the power lies within that of
  // a float rounding boundary. A libm pow per element was 35% of
  // gpt2-tiny's forward.
  if (a->dtype == program::DTYPE_F32 && n == 1 && y->shape == a->shape &&
      (readExp(0) == 2.0 || readExp(0) == 3.0)) {
    bool cube = readExp(0) == 3.0;
    const float *in = a->as<float>();
    float *out = y->as<float>();
    parallelFor(a->numel(), 16384, [&](int64_t b0, int64_t b1) {
      if (cube)
        for (int64_t i = b0; i < b1; ++i)
          out[i] = static_cast<float>(double(in[i]) * double(in[i]) * double(in[i]));
      else
        for (int64_t i = b0; i < b1; ++i)
          out[i] = static_cast<float>(double(in[i]) * double(in[i]));
    });
    return Status::ok();
  }
#define STRAIT_POW_CASE(T)                                                     \
  for (int64_t i = 0; i < n; ++i)                                              \
    exponent.as<T>()[i] = static_cast<T>(readExp(i));                          \
  applyBinary<T, T>(*a, exponent.tensor, *y,                                   \
                    [](T x, T e) { return powOf(x, e); });                     \
  return Status::ok();
  if (dtypeSize(b->dtype) == 0 || b->dtype == program::DTYPE_BOOL)
    return ctx.unsupported("exponent dtype " + b->typeString());
  STRAIT_DISPATCH_NUMERIC(a->dtype, STRAIT_POW_CASE)
#undef STRAIT_POW_CASE
  return ctx.unsupported("dtype " + a->typeString());
}

template <typename T> T modOf(T a, T b, bool fmod) {
  if constexpr (std::is_floating_point<T>::value) {
    T r = std::fmod(a, b);
    if (!fmod && r != 0 && ((r < 0) != (b < 0)))
      r += b;
    return r;
  } else {
    if (b == 0)
      return 0;
    T r = a % b;
    if (!fmod && r != 0 && ((r < 0) != (b < 0)))
      r += b;
    return r;
  }
}

Status bitShiftKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1, a->dtype));
  STRAIT_ASSIGN_OR_RETURN(std::string dir, ctx.getAttrs().getString("direction", ""));
  if (dir != "LEFT" && dir != "RIGHT")
    return ctx.error("direction must be LEFT or RIGHT, got '" + dir + "'");
  STRAIT_ASSIGN_OR_RETURN(Shape shape, broadcastShapes(ctx, a->shape, b->shape));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, a->dtype));
  bool left = dir == "LEFT";
#define STRAIT_SHIFT_CASE(T)                                                   \
  applyBinary<T, T>(*a, *b, *y, [left](T x, T s) {                             \
    return s >= sizeof(T) * 8 ? T(0) : T(left ? x << s : x >> s);              \
  });                                                                          \
  return Status::ok();
  switch (a->dtype) {
  case program::DTYPE_U8: STRAIT_SHIFT_CASE(uint8_t)
  case program::DTYPE_U16: STRAIT_SHIFT_CASE(uint16_t)
  case program::DTYPE_U32: STRAIT_SHIFT_CASE(uint32_t)
  case program::DTYPE_U64: STRAIT_SHIFT_CASE(uint64_t)
  default: break;
  }
#undef STRAIT_SHIFT_CASE
  return ctx.unsupported("dtype " + a->typeString());
}

/// BitwiseAnd/Or/Xor (binary, broadcast) and BitwiseNot (unary) on the
/// integer types and bool (where they are the logical ops).
template <typename Op> KernelFn bitwiseKernel(bool unary, Op op) {
  return [unary, op](KernelContext &ctx) -> Status {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
    const Tensor *b = a;
    if (!unary) {
      STRAIT_ASSIGN_OR_RETURN(b, ctx.requireInput(1, a->dtype));
    }
    STRAIT_ASSIGN_OR_RETURN(Shape shape, broadcastShapes(ctx, a->shape, b->shape));
    STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, a->dtype));
#define STRAIT_BITWISE_CASE(T)                                                 \
  applyBinary<T, T>(*a, *b, *y, [op](T x, T z) { return T(op(x, z)); });       \
  return Status::ok();
    switch (a->dtype) {
    case program::DTYPE_U8: STRAIT_BITWISE_CASE(uint8_t)
    case program::DTYPE_I8: STRAIT_BITWISE_CASE(int8_t)
    case program::DTYPE_U16: STRAIT_BITWISE_CASE(uint16_t)
    case program::DTYPE_I16: STRAIT_BITWISE_CASE(int16_t)
    case program::DTYPE_U32: STRAIT_BITWISE_CASE(uint32_t)
    case program::DTYPE_I32: STRAIT_BITWISE_CASE(int32_t)
    case program::DTYPE_U64: STRAIT_BITWISE_CASE(uint64_t)
    case program::DTYPE_I64: STRAIT_BITWISE_CASE(int64_t)
    case program::DTYPE_BOOL:
      applyBinary<bool, bool>(*a, *b, *y, [op](bool x, bool z) { return bool(op(x, z) & 1); });
      return Status::ok();
    default: break;
    }
#undef STRAIT_BITWISE_CASE
    return ctx.unsupported("dtype " + a->typeString());
  };
}

void addBinaryKernels(KernelTable &t) {
  t.add("BitShift", bitShiftKernel);
  t.add("BitwiseAnd", bitwiseKernel(false, [](auto x, auto z) { return x & z; }));
  t.add("BitwiseOr", bitwiseKernel(false, [](auto x, auto z) { return x | z; }));
  t.add("BitwiseXor", bitwiseKernel(false, [](auto x, auto z) { return x ^ z; }));
  t.add("BitwiseNot", bitwiseKernel(true, [](auto x, auto) { return ~x; }));
  addBinary(t, "Add", [](auto a, auto b) { return a + b; });
  addBinary(t, "Sub", [](auto a, auto b) { return a - b; });
  addBinary(t, "Mul", [](auto a, auto b) { return a * b; });
  addBinary(t, "Div", [](auto a, auto b) { return a / b; });
  t.add("Pow", powKernel);
  t.add("Mod", [](KernelContext &ctx) -> Status {
    STRAIT_ASSIGN_OR_RETURN(int64_t fmod, ctx.getAttrs().getInt("fmod", 0));
    KernelTable local;
    addBinary(local, "Mod",
              [fmod](auto a, auto b) { return modOf(a, b, fmod != 0); });
    return (*local.lookup("Mod"))(ctx);
  });
  addBinary(t, "PRelu", [](auto x, auto s) { return x < 0 ? s * x : x; });
  addBinary(t, "Equal", [](auto a, auto b) { return a == b; }, ResultKind::Bool);
  addBinary(t, "Less", [](auto a, auto b) { return a < b; }, ResultKind::Bool);
  addBinary(t, "LessOrEqual", [](auto a, auto b) { return a <= b; },
            ResultKind::Bool);
  addBinary(t, "Greater", [](auto a, auto b) { return a > b; }, ResultKind::Bool);
  addBinary(t, "GreaterOrEqual", [](auto a, auto b) { return a >= b; },
            ResultKind::Bool);
  addBinary(t, "And", [](auto a, auto b) { return a && b; }, ResultKind::Bool);
  addBinary(t, "Or", [](auto a, auto b) { return a || b; }, ResultKind::Bool);
  addBinary(t, "Xor", [](auto a, auto b) { return bool(a) != bool(b); },
            ResultKind::Bool);
}

//===----------------------------------------------------------------------===//
// Variadic (Sum, Mean, Max, Min), Not, IsNaN, IsInf, Where
//===----------------------------------------------------------------------===//

template <typename T, typename F>
Status foldVariadic(KernelContext &ctx, Tensor &y, const F &f, bool mean) {
  const Tensor *first = ctx.input(0);
  applyBinary<T, T>(*first, *first, y, [](T a, T) { return a; });
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    applyBinary<T, T>(y, *ctx.input(i), y, f);
  if (mean) {
    T *p = y.as<T>();
    for (int64_t i = 0; i < y.numel(); ++i)
      p[i] = p[i] / static_cast<T>(ctx.numInputs());
  }
  return Status::ok();
}

template <typename F>
void addVariadic(KernelTable &table, const char *op, F f, bool mean = false) {
  table.add(op, [f, mean](KernelContext &ctx) -> Status {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
    Shape shape = a->shape;
    for (size_t i = 1; i < ctx.numInputs(); ++i) {
      STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(i, a->dtype));
      STRAIT_ASSIGN_OR_RETURN(shape, broadcastShapes(ctx, shape, b->shape));
    }
    STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, a->dtype));
#define STRAIT_VARIADIC_CASE(T) return foldVariadic<T>(ctx, *y, f, mean);
    STRAIT_DISPATCH_NUMERIC(a->dtype, STRAIT_VARIADIC_CASE)
#undef STRAIT_VARIADIC_CASE
    return ctx.unsupported("dtype " + a->typeString());
  });
}

template <typename T> T maxOf(T a, T b) {
  if constexpr (std::is_floating_point<T>::value)
    if (std::isnan(a) || std::isnan(b))
      return std::numeric_limits<T>::quiet_NaN();
  return a > b ? a : b;
}
template <typename T> T minOf(T a, T b) {
  if constexpr (std::is_floating_point<T>::value)
    if (std::isnan(a) || std::isnan(b))
      return std::numeric_limits<T>::quiet_NaN();
  return a < b ? a : b;
}

Status whereKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *c, ctx.requireInput(0, program::DTYPE_BOOL));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *y, ctx.requireInput(2, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Shape s, broadcastShapes(ctx, c->shape, x->shape));
  STRAIT_ASSIGN_OR_RETURN(s, broadcastShapes(ctx, s, y->shape));
  STRAIT_ASSIGN_OR_RETURN(Tensor * out, ctx.requireOutput(0, s, x->dtype));
  std::array<std::vector<int64_t>, 3> strides = {
      broadcastStrides(c->shape, s), broadcastStrides(x->shape, s),
      broadcastStrides(y->shape, s)};
  size_t es = dtypeSize(x->dtype);
  const bool *pc = c->as<bool>();
  const char *px = x->as<char>(), *py = y->as<char>();
  char *po = out->as<char>();
  broadcastRows<3>(s, strides,
                   [&](int64_t o, std::array<int64_t, 3> off, int64_t n,
                       std::array<int64_t, 3> st) {
                     for (int64_t i = 0; i < n; ++i) {
                       bool take = pc[off[0] + i * st[0]];
                       const char *src = take ? px + (off[1] + i * st[1]) * es
                                              : py + (off[2] + i * st[2]) * es;
                       std::memcpy(po + (o + i) * es, src, es);
                     }
                   });
  return Status::ok();
}

template <typename F> void addPredicate(KernelTable &t, const char *op, F f) {
  t.add(op, [f](KernelContext &ctx) -> Status {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
    STRAIT_ASSIGN_OR_RETURN(Tensor * y,
                            ctx.requireOutput(0, x->shape, program::DTYPE_BOOL));
#define STRAIT_PRED_CASE(T)                                                    \
  for (int64_t i = 0; i < x->numel(); ++i)                                     \
    y->as<bool>()[i] = f(ctx, x->as<T>()[i]);                                  \
  return Status::ok();
    STRAIT_DISPATCH_FLOAT(x->dtype, STRAIT_PRED_CASE)
    if (x->dtype == program::DTYPE_BOOL) {
      STRAIT_PRED_CASE(bool)
    }
#undef STRAIT_PRED_CASE
    return ctx.unsupported("dtype " + x->typeString());
  });
}

void addVariadicAndPredicates(KernelTable &t) {
  addVariadic(t, "Sum", [](auto a, auto b) { return a + b; });
  addVariadic(t, "Mean", [](auto a, auto b) { return a + b; }, true);
  addVariadic(t, "Max", [](auto a, auto b) { return maxOf(a, b); });
  addVariadic(t, "Min", [](auto a, auto b) { return minOf(a, b); });
  t.add("Where", whereKernel);
  addPredicate(t, "Not", [](const KernelContext &, auto x) { return !x; });
  addPredicate(t, "IsNaN", [](const KernelContext &, auto x) {
    return std::isnan(static_cast<double>(x));
  });
  addPredicate(t, "IsInf", [](const KernelContext &ctx, auto x) {
    int64_t pos = 1, neg = 1;
    auto p = ctx.getAttrs().getInt("detect_positive", 1);
    auto n = ctx.getAttrs().getInt("detect_negative", 1);
    if (p.isOk())
      pos = *p;
    if (n.isOk())
      neg = *n;
    double v = static_cast<double>(x);
    return std::isinf(v) && ((v > 0 && pos) || (v < 0 && neg));
  });
}

} // namespace

__attribute__((target_clones("avx2", "default"))) void
tanhRow(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = tanhFloat(x[i]);
}

__attribute__((target_clones("avx2", "default"))) void
sceExpRow(double *e, int64_t c, double mx) {
  for (int64_t k = 0; k < c; ++k)
    e[k] = sceExp(e[k] - mx);
}

__attribute__((target_clones("avx2", "default"))) void
sigmoidRow(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; ++i)
    y[i] = sigmoidFloat(x[i]);
}

void addElementwiseKernels(KernelTable &table) {
  addMathUnary(table);
  addActivations(table);
  addBinaryKernels(table);
  addVariadicAndPredicates(table);
}

} // namespace cpu
} // namespace rt
} // namespace strait
