//===- TanhPowFastPathTest.cpp - f32 Tanh and Pow by 2 or 3 ---------------===//
//
// The CPU backend's f32 Tanh (tanhFloat, RowMath.h, through tanhRow) against
// libm's double tanh rounded to float, and Pow by a scalar 2 or 3 (products
// in double) against libm's double pow rounded to float.
//
//===----------------------------------------------------------------------===//
#include "../lib/cpu/CpuKernels.h"
#include "../lib/cpu/RowMath.h"
#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::cpu;
using namespace strait::rt::test;

namespace {

TEST(TanhFloat, IsDoubleTanhRoundedOverASweepOfAllExponents) {
  // Every 389th float bit pattern of both signs: subnormals, the series
  // range (|x| < 2^-8), the exp range and the clamp (|x| > 20).
  int64_t checked = 0, bad = 0;
  for (uint64_t b = 0; b < 0x7f800000u; b += 389)
    for (uint32_t sign : {0u, 0x80000000u}) {
      float x = fromBits(static_cast<uint32_t>(b) | sign);
      float want = static_cast<float>(std::tanh(static_cast<double>(x)));
      ++checked;
      if (!sameFloat(tanhFloat(x), want) && bad++ < 5)
        ADD_FAILURE() << "x = " << x << ": got " << tanhFloat(x) << " want " << want;
    }
  EXPECT_EQ(bad, 0) << "of " << checked;
  EXPECT_TRUE(std::signbit(tanhFloat(-0.0f)));
  EXPECT_EQ(tanhFloat(-0.0f), 0.0f);
  EXPECT_EQ(tanhFloat(INFINITY), 1.0f);
  EXPECT_EQ(tanhFloat(-INFINITY), -1.0f);
  EXPECT_TRUE(std::isnan(tanhFloat(NAN)));
}

TEST(TanhKernel, F32EqualsTanhFloatAndF64IsLibm) {
  for (int64_t n : {1, 3, 17, 1000, 40001}) { // tails of every vector width, several tasks
    std::vector<float> v = pseudoRandom(n, static_cast<uint32_t>(n));
    for (float &x : v)
      x *= 12; // beyond the clamp at |x| = 20 for few, most in the exp range
    OwnedTensor x = f32Tensor({n}, v);
    OwnedTensor y = runF32Op("Tanh", {&x.tensor}, {n});
    for (int64_t i = 0; i < n; ++i)
      ASSERT_TRUE(sameFloat(y.as<float>()[i], tanhFloat(v[i]))) << "n " << n << " i " << i;
  }
  OwnedTensor xd(program::DTYPE_F64, {3}), yd(program::DTYPE_F64, {3});
  double in[3] = {-0.3, 0.001, 4.5};
  std::memcpy(xd.as<double>(), in, sizeof in);
  runOp("Tanh", {&xd.tensor}, {&yd.tensor});
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(yd.as<double>()[i], std::tanh(in[i]));
}

/// Pow(x, e) with e a one-element tensor of `dtype` holding `value`.
OwnedTensor powBy(const OwnedTensor &x, DType dtype, double value, const Shape &eShape) {
  OwnedTensor e(dtype, eShape);
  if (dtype == program::DTYPE_I64)
    e.as<int64_t>()[0] = static_cast<int64_t>(value);
  else
    e.as<float>()[0] = static_cast<float>(value);
  return runF32Op("Pow", {&x.tensor, &e.tensor}, x.tensor.shape);
}

TEST(PowKernel, ByTwoOrThreeEqualsLibmPowRounded) {
  Shape s = {7, 129};
  std::vector<float> v = pseudoRandom(numElements(s), 5);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] *= i % 3 == 0 ? 1e3f : i % 3 == 1 ? 1e-3f : 3.0f;
  v[0] = -0.0f;
  v[1] = INFINITY;
  v[2] = NAN;
  v[3] = 1e20f; // overflows to inf in f32
  OwnedTensor x = f32Tensor(s, v);
  struct Exp {
    DType dtype;
    double value;
    Shape shape;
  };
  for (Exp e : {Exp{program::DTYPE_F32, 2.0, {}}, Exp{program::DTYPE_F32, 3.0, {1}},
                Exp{program::DTYPE_I64, 3.0, {1, 1}}, Exp{program::DTYPE_F32, 2.5, {}}}) {
    OwnedTensor y = powBy(x, e.dtype, e.value, e.shape);
    for (size_t i = 0; i < v.size(); ++i) {
      float want = static_cast<float>(std::pow(static_cast<double>(v[i]), e.value));
      ASSERT_TRUE(sameFloat(y.as<float>()[i], want))
          << "exponent " << e.value << " x " << v[i] << ": got " << y.as<float>()[i]
          << " want " << want;
    }
  }
}

} // namespace
