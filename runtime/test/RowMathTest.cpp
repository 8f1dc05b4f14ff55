//===- RowMathTest.cpp - The CPU backend's vectorizable row helpers -------===//
#include "../lib/cpu/RowMath.h"
#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

using namespace strait::rt;
using namespace strait::rt::cpu;
using strait::rt::test::pseudoRandom;

namespace {
/// Distance in units in the last place between two positive floats.
int64_t ulps(float a, float b) {
  int32_t ia, ib;
  std::memcpy(&ia, &a, 4);
  std::memcpy(&ib, &b, 4);
  return std::abs(static_cast<int64_t>(ia) - ib);
}
} // namespace

TEST(RowMath, ExpNonPositiveIsWithinTwoUlpOfStdExp) {
  int64_t worst = 0;
  float at = 0;
  for (int i = 0; i <= 2000000; ++i) {
    float x = -87.3f * i / 2000000.0f;
    float want = std::exp(x);
    int64_t d = ulps(expNonPositive(x), want);
    if (d > worst) {
      worst = d;
      at = x;
    }
  }
  EXPECT_LE(worst, 2) << "at x = " << at;
  EXPECT_EQ(expNonPositive(0.0f), 1.0f);
  EXPECT_EQ(expNonPositive(-100.0f), 0.0f);
  EXPECT_EQ(expNonPositive(-INFINITY), 0.0f);
  EXPECT_TRUE(std::isnan(expNonPositive(NAN)));
}

TEST(RowMath, SumsAndMaxMatchADoubleReference) {
  for (int64_t n : {0, 1, 15, 16, 17, 255, 768, 1000, 4099}) {
    std::vector<float> v = pseudoRandom(n, static_cast<uint32_t>(n + 7));
    double sum = 0, sq = 0;
    float mx = -INFINITY;
    for (float x : v) {
      sum += x - 0.25f;
      mx = std::max(mx, x);
    }
    float mean = n ? static_cast<float>(sum / n) : 0.0f;
    for (float x : v)
      sq += (double(x) - mean) * (double(x) - mean);
    EXPECT_NEAR(rowSum(v.data(), n, 0.25f), sum, 1e-5 * (1 + std::abs(sum))) << n;
    EXPECT_NEAR(rowSumSquaredDeviation(v.data(), n, mean), sq, 1e-5 * (1 + sq)) << n;
    EXPECT_EQ(rowMax(v.data(), n), mx) << n;
  }
}
