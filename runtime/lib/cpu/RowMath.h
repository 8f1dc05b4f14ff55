//===- RowMath.h - Vectorizable reductions over a contiguous row -*- C++ -*-===//
//
// Sums and maxima over a row of floats with kLanes independent float
// accumulators, so the compiler vectorizes them without reassociating
// (no -ffast-math): a single double accumulator is a dependency chain of
// one add per element (4+ cycles each), 10-30x below the memory bandwidth.
// The lanes are combined in double; each lane sums len / kLanes elements,
// so the float error stays near one ulp of the result for the row lengths
// of normalization layers (hundreds to thousands).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CPU_ROWMATH_H
#define STRAIT_RUNTIME_LIB_CPU_ROWMATH_H

#include <cmath>
#include <cstdint>
#include <cstring>

namespace strait {
namespace rt {
namespace cpu {

constexpr int kLanes = 16;

/// sum_i (p[i] - shift)
inline double rowSum(const float *p, int64_t n, float shift = 0.0f) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] += p[i + l] - shift;
  double s = 0;
  for (int l = 0; l < kLanes; ++l)
    s += acc[l];
  for (; i < n; ++i)
    s += p[i] - shift;
  return s;
}

/// sum_i (p[i] - mean)^2
inline double rowSumSquaredDeviation(const float *p, int64_t n, float mean) {
  float acc[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l) {
      float d = p[i + l] - mean;
      acc[l] += d * d;
    }
  double s = 0;
  for (int l = 0; l < kLanes; ++l)
    s += acc[l];
  for (; i < n; ++i) {
    double d = p[i] - mean;
    s += d * d;
  }
  return s;
}

/// max_i p[i] (-inf for an empty row; NaNs are not propagated).
inline float rowMax(const float *p, int64_t n) {
  float acc[kLanes];
  for (int l = 0; l < kLanes; ++l)
    acc[l] = -INFINITY;
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int l = 0; l < kLanes; ++l)
      acc[l] = p[i + l] > acc[l] ? p[i + l] : acc[l];
  float m = -INFINITY;
  for (int l = 0; l < kLanes; ++l)
    m = acc[l] > m ? acc[l] : m;
  for (; i < n; ++i)
    m = p[i] > m ? p[i] : m;
  return m;
}

/// exp(x) in float for x <= 0 (softmax's shifted logits), written so that a
/// loop over it vectorizes: x = n ln2 + r with |r| <= ln2/2 (ln2 split in two
/// constants, so n ln2 is exact to float precision), e^r by its Taylor
/// series to degree 7 (truncation r^8/8! < 6e-9, below float's 6e-8 ulp),
/// times 2^n built in the exponent bits. Below -87.3 (2^-126) it returns 0,
/// NaN stays NaN. Agrees with std::exp to within 2 ulp on [-87.3, 0].
inline float expNonPositive(float x) {
  const float log2e = 1.44269504088896341f;
  const float ln2Hi = 0.693145751953125f;    // the high bits of ln 2
  const float ln2Lo = 1.42860682030941723e-6f; // ln 2 - ln2Hi
  float xc = x < -87.3f ? -87.3f : x;
  // Round to nearest by adding and subtracting 1.5 * 2^23 (a libm call
  // such as nearbyint would not vectorize).
  const float magic = 12582912.0f;
  float n = (xc * log2e + magic) - magic;
  float r = (xc - n * ln2Hi) - n * ln2Lo;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  float e = p * scale;
  e = x < -87.3f ? 0.0f : e;
  return x != x ? x : e;
}

/// e^t in double for t in [-320, 0], written so that a loop over it
/// vectorizes (no libm call): t = n ln2 + r with |r| <= ln2/2 (ln2 split in
/// two constants), e^r by its Taylor series to degree 11 (truncation
/// < 1e-14) times 2^n from the exponent bits. Relative error below 1e-14.
inline double expNonPositiveDouble(double t) {
  const double log2e = 1.4426950408889634;
  const double ln2Hi = 0.6931471803691238;     // the high bits of ln 2
  const double ln2Lo = 1.9082149292705877e-10; // ln 2 - ln2Hi
  const double magic = 6755399441055744.0;     // 1.5 * 2^52: rounds to an integer
  double nm = t * log2e + magic, n = nm - magic;
  double r = (t - n * ln2Hi) - n * ln2Lo;
  double p = 1.0 / 39916800;
  p = p * r + 1.0 / 3628800;
  p = p * r + 1.0 / 362880;
  p = p * r + 1.0 / 40320;
  p = p * r + 1.0 / 5040;
  p = p * r + 1.0 / 720;
  p = p * r + 1.0 / 120;
  p = p * r + 1.0 / 24;
  p = p * r + 1.0 / 6;
  p = p * r + 0.5;
  p = p * r + 1.0;
  p = p * r + 1.0;
  // nm's low mantissa bits hold n (-462..0): n + 1023 shifted into the
  // exponent field is 2^n (the magic's own bits shift out).
  uint64_t bits;
  std::memcpy(&bits, &nm, sizeof bits);
  bits = (bits + 1023) << 52;
  double scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return p * scale;
}

/// tanh(x) in float through double arithmetic that a loop over it
/// vectorizes (no libm call, selects instead of branches): for |x| < 2^-8
/// the series x - x^3/3 + 2x^5/15 (relative truncation < 1e-15); above,
/// (1 - e) / (1 + e) with e = exp(-2|x|) (expNonPositiveDouble); |x| is
/// clamped at 20 (tanh rounds to 1 in float from 9.1). The double result is
/// within 1e-12 relative of tanh, so the float is the correctly rounded one
/// except within 1e-12 of a rounding boundary (libm's tanhf is within 2
/// ulp). NaN stays NaN, tanh(-0) = -0.
inline float tanhFloat(float x) {
  double xd = x, a = xd < 0 ? -xd : xd;
  double ac = a > 20.0 ? 20.0 : a;
  double e = expNonPositiveDouble(-2.0 * ac);
  double big = (1.0 - e) / (1.0 + e);
  double s = xd * xd;
  double small = xd * (1.0 + s * (-1.0 / 3 + s * (2.0 / 15)));
  double y = a < 0.00390625 ? small : (xd < 0 ? -big : big);
  return static_cast<float>(x != x ? xd : y);
}

/// The logistic sigmoid 1 / (1 + e^-x) in float through double arithmetic
/// that a loop over it vectorizes: e = exp(-|x|) (expNonPositiveDouble,
/// |x| clamped at 110, where sigmoid(-x) < 2^-150 rounds to 0 in float),
/// 1 / (1 + e) for x >= 0, e / (1 + e) below. The double result is within
/// 1e-13 relative of the sigmoid, so the float is the correctly rounded
/// one except within 1e-13 of a rounding boundary (the float formula with
/// libm's expf was within a few ulp). NaN stays NaN.
inline float sigmoidFloat(float x) {
  double xd = x, a = xd < 0 ? -xd : xd;
  double ac = a > 110.0 ? 110.0 : a;
  double e = expNonPositiveDouble(-ac);
  double inv = 1.0 / (1.0 + e);
  double y = xd >= 0 ? inv : e * inv;
  return static_cast<float>(x != x ? xd : y);
}

} // namespace cpu
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CPU_ROWMATH_H
