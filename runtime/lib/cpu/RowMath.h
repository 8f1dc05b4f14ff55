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

} // namespace cpu
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CPU_ROWMATH_H
