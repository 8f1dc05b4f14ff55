//===- RotaryTest.cpp - FusedRotaryEmbedding on CPU -----------------------===//
//
// The f32 kernel against the composed CPU kernels LLaMA's export runs
// (Mul(X, Cos) + Mul(Concat(Neg(Slice(X, h:)), Slice(X, :h)), Sin)) bit for
// bit, and adjoint 1 against the composed backward of that graph, for the
// usual broadcasts of the tables; both adjoints against the contract's
// formula in double; adjoint 1 against the adjoint identity <dY, F(X)> =
// <F*(dY), X>; bf16/f16 X as the f32 result rounded once; the operand
// errors, each naming the operand. The tables are random (not real
// cos/sin), so reading Sin at the wrong index (own vs partner) shows.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

constexpr DType F32 = program::DTYPE_F32, BF16 = program::DTYPE_BF16, F16 = program::DTYPE_F16;

uint16_t f16Bits(float f) {
  _Float16 h = static_cast<_Float16>(f); // round to nearest even
  uint16_t b;
  std::memcpy(&b, &h, 2);
  return b;
}

float f16Value(uint16_t b) {
  _Float16 h;
  std::memcpy(&h, &b, 2);
  return static_cast<float>(h);
}

/// A tensor of `dt` holding v (rounded to nearest even for bf16/f16).
OwnedTensor tensorOf(DType dt, const Shape &shape, const std::vector<float> &v) {
  OwnedTensor t(dt, shape);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dt == F32)
      t.tensor.as<float>()[i] = v[i];
    else
      t.tensor.as<uint16_t>()[i] = dt == BF16 ? bf16Bits(v[i]) : f16Bits(v[i]);
  }
  return t;
}

std::vector<float> values(const Tensor &t) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype == F32    ? t.as<float>()[i]
           : t.dtype == BF16 ? bf16Value(t.as<uint16_t>()[i])
                             : f16Value(t.as<uint16_t>()[i]);
  return v;
}

/// Bits of element i (f32: 32 bits, else 16).
uint32_t bitsAt(const Tensor &t, int64_t i) {
  if (t.dtype == F32) {
    uint32_t u;
    std::memcpy(&u, t.as<float>() + i, 4);
    return u;
  }
  return t.as<uint16_t>()[i];
}

void expectSameBits(const Tensor &got, const Tensor &want, const std::string &what) {
  ASSERT_EQ(got.shape, want.shape) << what;
  ASSERT_EQ(got.dtype, want.dtype) << what;
  int bad = 0;
  for (int64_t i = 0; i < got.numel() && bad < 5; ++i)
    if (bitsAt(got, i) != bitsAt(want, i)) {
      ADD_FAILURE() << what << ": element " << i << " is " << values(got)[i] << " (bits 0x"
                    << std::hex << bitsAt(got, i) << ") but the reference is " << std::dec
                    << values(want)[i] << " (0x" << std::hex << bitsAt(want, i) << std::dec << ")";
      ++bad;
    }
}

/// `adjoint` for the kernel without the attribute.
constexpr int64_t kNoAttr = std::numeric_limits<int64_t>::min();

program::Kernel rotaryKernel(int64_t adjoint) {
  program::Kernel k;
  k.set_op("FusedRotaryEmbedding");
  k.set_name("rope");
  if (adjoint != kNoAttr)
    setInt(k, "adjoint", adjoint);
  return k;
}

/// FusedRotaryEmbedding on the CPU; Y of X's type.
OwnedTensor runRotary(const Tensor &x, const Tensor &c, const Tensor &s, int64_t adjoint) {
  OwnedTensor y(x.dtype, x.shape);
  Status st = runCpu(rotaryKernel(adjoint), {&x, &c, &s}, {&y.tensor});
  EXPECT_TRUE(st.isOk()) << st.toString();
  return y;
}

/// The halves [0, h) and [h, D) of t along the last axis.
std::pair<OwnedTensor, OwnedTensor> halves(const Tensor &t) {
  int64_t d = t.shape.back(), h = d / 2, axis = static_cast<int64_t>(t.rank()) - 1;
  Shape hs = t.shape;
  hs.back() = h;
  auto slice = [&](int64_t b, int64_t e) {
    return [=](program::Kernel &k) {
      setInts(k, "starts", {b});
      setInts(k, "ends", {e});
      setInts(k, "axes", {axis});
    };
  };
  return {runF32Op("Slice", {&t}, hs, slice(0, h)), runF32Op("Slice", {&t}, hs, slice(h, d))};
}

OwnedTensor concatLast(const Tensor &a, const Tensor &b) {
  Shape s = a.shape;
  s.back() *= 2;
  return runF32Op("Concat", {&a, &b}, s, [](program::Kernel &k) { setInt(k, "axis", -1); });
}

/// LLaMA's exported RoPE: X * Cos + rotate_half(X) * Sin, rotate_half(X) =
/// Concat(-X[..., h:], X[..., :h]).
OwnedTensor composedForward(const Tensor &x, const Tensor &c, const Tensor &s) {
  auto [lo, hi] = halves(x);
  OwnedTensor negHi = runF32Op("Neg", {&hi.tensor}, hi.tensor.shape);
  OwnedTensor rot = concatLast(negHi.tensor, lo.tensor);
  OwnedTensor a = runF32Op("Mul", {&x, &c}, x.shape);
  OwnedTensor b = runF32Op("Mul", {&rot.tensor, &s}, x.shape);
  return runF32Op("Add", {&a.tensor, &b.tensor}, x.shape);
}

/// Its backward for X as autodiff writes it: dY * Cos + rotate_half^T(dY *
/// Sin), rotate_half^T(v) = Concat(v[..., h:], -v[..., :h]).
OwnedTensor composedBackward(const Tensor &dy, const Tensor &c, const Tensor &s) {
  OwnedTensor v = runF32Op("Mul", {&dy, &s}, dy.shape);
  auto [lo, hi] = halves(v.tensor);
  OwnedTensor negLo = runF32Op("Neg", {&lo.tensor}, lo.tensor.shape);
  OwnedTensor rot = concatLast(hi.tensor, negLo.tensor);
  OwnedTensor a = runF32Op("Mul", {&dy, &c}, dy.shape);
  return runF32Op("Add", {&a.tensor, &rot.tensor}, dy.shape);
}

/// Element `e` of X's row-major shape `x` mapped into a table of shape `t`
/// broadcast to it (numpy rules, written out here independently of the
/// runtime's strides).
int64_t tableIndex(const Shape &x, const Shape &t, int64_t e) {
  std::vector<int64_t> idx(x.size());
  for (int64_t dim = static_cast<int64_t>(x.size()) - 1; dim >= 0; --dim) {
    idx[dim] = e % x[dim];
    e /= x[dim];
  }
  int64_t off = 0, shift = static_cast<int64_t>(x.size() - t.size());
  for (size_t dim = 0; dim < t.size(); ++dim)
    off = off * t[dim] + (t[dim] == 1 ? 0 : idx[dim + shift]);
  return off;
}

/// The contract's formula in double. `sinAtPartner` false gives adjoint 1
/// with Sin read at the element's own index: a wrong variant, to show the
/// adjoint identity tells them apart.
std::vector<double> reference(const Shape &xs, const std::vector<float> &x, const Shape &cs,
                              const std::vector<float> &c, const Shape &ss,
                              const std::vector<float> &s, bool adjoint, bool sinAtPartner = true) {
  int64_t d = xs.back(), h = d / 2, n = numElements(xs);
  std::vector<double> y(n);
  for (int64_t e = 0; e < n; ++e) {
    int64_t i = e % d, p = i < h ? e + h : e - h;
    double r = i < h ? -1 : 1;
    double ce = c[tableIndex(xs, cs, e)];
    double se = s[tableIndex(xs, ss, adjoint && sinAtPartner ? p : e)];
    y[e] = double(x[e]) * ce + (adjoint ? -r : r) * double(x[p]) * se;
  }
  return y;
}

/// |got - want| within the f32 rounding of the three operations.
void expectNearReference(const std::vector<float> &got, const std::vector<double> &want,
                         const std::string &what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 3e-7 * (1 + std::abs(want[i])) * 4) << what << " at " << i;
}

struct Case {
  Shape x, cos, sin;
};

std::string describe(const Case &c) {
  return "X " + shapeToString(c.x) + " Cos " + shapeToString(c.cos) + " Sin " +
         shapeToString(c.sin);
}

/// X [B, H, T, D] = [2, 3, 5, 8] and [B, T, H, D], with the tables' usual
/// shapes, a last dim of 1, mixed shapes, rank 1, and a LLaMA-sized head
/// (D = 128) over enough rows to run on several threads.
std::vector<Case> cases() {
  return {{{2, 3, 5, 8}, {5, 8}, {5, 8}},
          {{2, 5, 3, 8}, {1, 5, 1, 8}, {1, 5, 1, 8}},
          {{2, 3, 5, 8}, {2, 1, 5, 8}, {2, 1, 5, 8}},
          {{2, 3, 5, 8}, {5, 1}, {5, 1}},
          {{2, 3, 5, 8}, {5, 8}, {2, 1, 5, 1}},
          {{6}, {6}, {1}},
          {{2, 4, 64, 128}, {64, 128}, {1, 1, 64, 128}}};
}

} // namespace

// The fused f32 kernel rounds x*c, (±x_p)*s and their sum separately, as
// the composed Mul, Neg/Concat, Mul, Add kernels do: the same bits, forward
// (against LLaMA's exported graph) and adjoint 1 (against that graph's
// backward). An FMA anywhere in the kernel breaks this.
TEST(FusedRotaryEmbedding, F32EqualsComposedKernelsBitForBit) {
  uint32_t seed = 1;
  for (const Case &c : cases()) {
    SCOPED_TRACE(describe(c));
    std::vector<float> xv = gaussian(numElements(c.x), seed++);
    std::vector<float> cv = pseudoRandom(numElements(c.cos), seed++);
    std::vector<float> sv = pseudoRandom(numElements(c.sin), seed++);
    OwnedTensor x = tensorOf(F32, c.x, xv), cos = tensorOf(F32, c.cos, cv),
                sin = tensorOf(F32, c.sin, sv);
    OwnedTensor fwd = runRotary(x.tensor, cos.tensor, sin.tensor, 0);
    expectSameBits(fwd.tensor, composedForward(x.tensor, cos.tensor, sin.tensor).tensor,
                   "adjoint 0 vs the composed forward");
    OwnedTensor bwd = runRotary(x.tensor, cos.tensor, sin.tensor, 1);
    expectSameBits(bwd.tensor, composedBackward(x.tensor, cos.tensor, sin.tensor).tensor,
                   "adjoint 1 vs the composed backward");
    // Without the attribute: adjoint 0.
    expectSameBits(runRotary(x.tensor, cos.tensor, sin.tensor, kNoAttr).tensor, fwd.tensor,
                   "no adjoint attribute");
    expectNearReference(values(fwd.tensor), reference(c.x, xv, c.cos, cv, c.sin, sv, false),
                        "adjoint 0 vs double");
    expectNearReference(values(bwd.tensor), reference(c.x, xv, c.cos, cv, c.sin, sv, true),
                        "adjoint 1 vs double");
  }
}

// Adjoint 1 is the transpose of adjoint 0 (the gradient with respect to X):
// sum(dY * F(X)) == sum(F*(dY) * X) in double, for broadcast tables. Reading
// Sin at the element's own index instead of its partner's breaks the
// identity by far more than the tolerance.
TEST(FusedRotaryEmbedding, AdjointIdentity) {
  for (const Case &c : {Case{{2, 3, 5, 8}, {5, 8}, {2, 1, 5, 8}},
                        Case{{3, 7, 16}, {7, 16}, {7, 16}}, Case{{4, 2, 6}, {2, 1}, {4, 2, 6}}}) {
    SCOPED_TRACE(describe(c));
    std::vector<float> xv = gaussian(numElements(c.x), 11), dyv = gaussian(numElements(c.x), 12);
    std::vector<float> cv = pseudoRandom(numElements(c.cos), 13);
    std::vector<float> sv = pseudoRandom(numElements(c.sin), 14);
    OwnedTensor x = tensorOf(F32, c.x, xv), dy = tensorOf(F32, c.x, dyv),
                cos = tensorOf(F32, c.cos, cv), sin = tensorOf(F32, c.sin, sv);
    std::vector<float> fx = values(runRotary(x.tensor, cos.tensor, sin.tensor, 0).tensor);
    std::vector<float> fdy = values(runRotary(dy.tensor, cos.tensor, sin.tensor, 1).tensor);
    double lhs = 0, rhs = 0, scale = 0;
    for (size_t i = 0; i < xv.size(); ++i) {
      lhs += double(dyv[i]) * fx[i];
      rhs += double(fdy[i]) * xv[i];
      scale += std::abs(double(dyv[i]) * fx[i]);
    }
    EXPECT_NEAR(lhs, rhs, 1e-6 * scale) << "lhs " << lhs << " rhs " << rhs;
    // The explicit formula in double, and its wrong variant.
    expectNearReference(fdy, reference(c.x, dyv, c.cos, cv, c.sin, sv, true), "adjoint 1");
    std::vector<double> wrong = reference(c.x, dyv, c.cos, cv, c.sin, sv, true, false);
    double rhsWrong = 0;
    for (size_t i = 0; i < xv.size(); ++i)
      rhsWrong += wrong[i] * xv[i];
    EXPECT_GT(std::abs(lhs - rhsWrong), 1e-3 * scale) << "the identity does not discriminate";
  }
}

// bf16/f16 X (and tables of X's type or f32, mixed): Y is exactly the f32
// kernel's result on the widened values, rounded once to nearest even.
TEST(FusedRotaryEmbedding, LowPrecisionIsTheF32ResultRoundedOnce) {
  Case c{{2, 3, 5, 8}, {5, 8}, {2, 1, 5, 1}};
  for (DType dt : {BF16, F16})
    for (auto [cosType, sinType] : {std::pair<DType, DType>{F32, F32}, {dt, dt}, {F32, dt}})
      for (int64_t adjoint : {0, 1}) {
        SCOPED_TRACE(std::string(dtypeName(dt)) + " Cos " + dtypeName(cosType) + " Sin " +
                     dtypeName(sinType) + " adjoint " + std::to_string(adjoint));
        OwnedTensor x = tensorOf(dt, c.x, gaussian(numElements(c.x), 21));
        OwnedTensor cos = tensorOf(cosType, c.cos, pseudoRandom(numElements(c.cos), 22));
        OwnedTensor sin = tensorOf(sinType, c.sin, pseudoRandom(numElements(c.sin), 23));
        OwnedTensor y = runRotary(x.tensor, cos.tensor, sin.tensor, adjoint);
        // The f32 kernel on the exactly widened operands.
        OwnedTensor x32 = tensorOf(F32, c.x, values(x.tensor)),
                    cos32 = tensorOf(F32, c.cos, values(cos.tensor)),
                    sin32 = tensorOf(F32, c.sin, values(sin.tensor));
        OwnedTensor y32 = runRotary(x32.tensor, cos32.tensor, sin32.tensor, adjoint);
        OwnedTensor want = tensorOf(dt, c.x, values(y32.tensor));
        expectSameBits(y.tensor, want.tensor, "16-bit Y vs the rounded f32 result");
      }
}

// --- Errors -----------------------------------------------------------------

namespace {

/// The message of running FusedRotaryEmbedding on tensors of these types
/// ("" on success).
std::string rotaryError(DType xt, const Shape &x, DType ct, const Shape &c, DType st,
                        const Shape &s, DType yt, const Shape &y, int64_t adjoint = 0,
                        bool withSin = true) {
  OwnedTensor tx(xt, x), tc(ct, c), ts(st, s), ty(yt, y);
  std::vector<const Tensor *> ins = {&tx.tensor, &tc.tensor};
  if (withSin)
    ins.push_back(&ts.tensor);
  Status status = runCpu(rotaryKernel(adjoint), ins, {&ty.tensor});
  return status.isOk() ? "" : status.toString();
}

} // namespace

TEST(FusedRotaryEmbedding, OperandErrorsNameTheOperand) {
  Shape x = {2, 3, 5, 8}, t = {5, 8};
  auto run = [&](Shape xs, Shape cs, Shape ss, Shape ys) {
    return rotaryError(F32, xs, F32, cs, F32, ss, F32, ys);
  };
  ASSERT_EQ(run(x, t, t, x), "");
  EXPECT_EQ(run({2, 0, 5, 8}, t, t, {2, 0, 5, 8}), ""); // no rows
  EXPECT_EQ(rotaryError(BF16, x, F32, t, BF16, t, BF16, x), "");
  // Dtypes.
  expectErrorNames(rotaryError(program::DTYPE_F64, x, F32, t, F32, t, program::DTYPE_F64, x),
                   "FusedRotaryEmbedding", {"X f64", "f32, bf16 or f16"});
  expectErrorNames(rotaryError(program::DTYPE_I64, x, F32, t, F32, t, program::DTYPE_I64, x),
                   "FusedRotaryEmbedding", {"X i64"});
  expectErrorNames(rotaryError(F32, x, BF16, t, F32, t, F32, x), "FusedRotaryEmbedding",
                   {"Cos bf16", "f32 or f32"});
  expectErrorNames(rotaryError(BF16, x, BF16, t, F16, t, BF16, x), "FusedRotaryEmbedding",
                   {"Sin f16", "f32 or bf16"});
  // D odd or zero, rank 0.
  expectErrorNames(run({2, 3, 5, 7}, {5, 7}, {5, 7}, {2, 3, 5, 7}), "FusedRotaryEmbedding",
                   {"X", "D=7", "even"});
  expectErrorNames(run({2, 0}, {1}, {1}, {2, 0}), "FusedRotaryEmbedding", {"X", "D=0"});
  expectErrorNames(run({}, {}, {}, {}), "FusedRotaryEmbedding", {"X", "rank >= 1"});
  // Tables that do not broadcast, would widen X, or have a higher rank.
  expectErrorNames(run(x, {5, 10}, t, x), "FusedRotaryEmbedding",
                   {"Cos", "does not broadcast", "X f32[2x3x5x8]"});
  expectErrorNames(run(x, t, {4, 8}, x), "FusedRotaryEmbedding", {"Sin", "does not broadcast"});
  expectErrorNames(run({1, 5, 8}, {2, 5, 8}, t, {1, 5, 8}), "FusedRotaryEmbedding",
                   {"Cos f32[2x5x8]", "broadcast"});
  expectErrorNames(run(x, {1, 2, 3, 5, 8}, t, x), "FusedRotaryEmbedding", {"Cos", "rank"});
  // Output shape and dtype.
  expectErrorNames(run(x, t, t, {2, 3, 5, 4}), "FusedRotaryEmbedding",
                   {"output Y", "f32[2x3x5x8]"});
  expectErrorNames(rotaryError(F32, x, F32, t, F32, t, BF16, x), "FusedRotaryEmbedding",
                   {"output Y", "bf16"});
  // Attribute and arity.
  expectErrorNames(rotaryError(F32, x, F32, t, F32, t, F32, x, 2), "FusedRotaryEmbedding",
                   {"adjoint", "got 2"});
  expectErrorNames(rotaryError(F32, x, F32, t, F32, t, F32, x, -3), "FusedRotaryEmbedding",
                   {"adjoint"});
  expectErrorNames(rotaryError(F32, x, F32, t, F32, t, F32, x, 0, false), "FusedRotaryEmbedding",
                   {"missing operand Sin"});
}
