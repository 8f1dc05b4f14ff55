//===- DetTest.cpp - Det CPU kernel ---------------------------------------===//
//
// Determinants of a batch against the Leibniz formula written here (3x3),
// a matrix needing a row swap (sign), a singular one (0) and 1x1; a
// non-square input is an error.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

double leibniz3(const float *a) {
  return double(a[0]) * (double(a[4]) * a[8] - double(a[5]) * a[7]) -
         double(a[1]) * (double(a[3]) * a[8] - double(a[5]) * a[6]) +
         double(a[2]) * (double(a[3]) * a[7] - double(a[4]) * a[6]);
}

TEST(Det, BatchMatchesLeibnizFormula) {
  std::vector<float> v = pseudoRandom(4 * 9, 7);
  // Matrix 1 needs a pivot swap (zero leading entry), matrix 2 is singular.
  v[9] = 0.0f;
  for (int k = 0; k < 3; ++k)
    v[18 + 6 + k] = v[18 + k] + v[18 + 3 + k];
  OwnedTensor x = f32Tensor({2, 2, 3, 3}, v);
  OwnedTensor y = runF32Op("Det", {&x.tensor}, {2, 2});
  for (int b = 0; b < 4; ++b) {
    double want = leibniz3(v.data() + 9 * b);
    EXPECT_NEAR(y.as<float>()[b], want, 1e-5 * std::max(1.0, std::abs(want))) << "matrix " << b;
  }
  EXPECT_NEAR(y.as<float>()[2], 0.0f, 1e-6);
  OwnedTensor one = f32Tensor({1, 1}, {-2.5f});
  EXPECT_EQ(runF32Op("Det", {&one.tensor}, {}).as<float>()[0], -2.5f);
}

TEST(Det, NonSquareIsAnError) {
  OwnedTensor x = f32Tensor({3, 2}, {1, 2, 3, 4, 5, 6}), y(program::DTYPE_F32, {});
  program::Kernel k;
  k.set_op("Det");
  Status s = runCpu(k, {&x.tensor}, {&y.tensor});
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("[..., M, M]"), std::string::npos) << s.toString();
}

} // namespace
