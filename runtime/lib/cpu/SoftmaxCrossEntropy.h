//===- SoftmaxCrossEntropy.h - Row math of the cross-entropy kernels -*- C++ -*-===//
//
// SoftmaxCrossEntropyLoss (Training.cpp), SoftmaxCrossEntropyLossGrad
// (Gradients.cpp) and SoftmaxCrossEntropyLossWithGrad (Training.cpp) compute
// every row [n, :, d] of the scores with these functions, so the fused
// kernel's loss and dScores are bit for bit those of the two kernels. `in(i)`
// loads score i widened to the compute type (f32 for bf16 / f16, exactly),
// `at(k)` is the index of class k of the row.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CPU_SOFTMAXCROSSENTROPY_H
#define STRAIT_RUNTIME_LIB_CPU_SOFTMAXCROSSENTROPY_H

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "RowMath.h"

namespace strait {
namespace rt {
namespace cpu {

/// e^t of a score minus its row's max (t <= 0) in double, without libm:
/// expNonPositiveDouble (RowMath.h, within 1e-14 relative), 0 below -700
/// (e^-700 < 1e-304 is nothing next to the max's 1 in the row's sum), NaN
/// for NaN. A loop over it vectorizes (sceExpRow).
inline double sceExp(double t) {
  double e = expNonPositiveDouble(t < -700.0 ? -700.0 : t);
  e = t < -700.0 ? 0.0 : e;
  return t != t ? t : e;
}

/// e[k] = sceExp(e[k] - mx) for k < c (Elementwise.cpp: compiled for
/// AVX2 and the baseline, the same bits on either).
void sceExpRow(double *e, int64_t c, double mx);

/// sum_k exp(k) for k < c in four double lanes (k mod 4) combined as
/// (l0 + l1) + (l2 + l3), then the tail in order: the same order in every
/// kernel, and four independent add chains instead of one.
template <typename Exp> double sceSum(Exp exp, int64_t c) {
  double acc[4] = {0, 0, 0, 0};
  int64_t k = 0;
  for (; k + 4 <= c; k += 4)
    for (int l = 0; l < 4; ++l)
      acc[l] += exp(k + l);
  double s = (acc[0] + acc[1]) + (acc[2] + acc[3]);
  for (; k < c; ++k)
    s += exp(k);
  return s;
}

/// The row's max and sum of exp(score - max) (sceExp, sceSum), in double.
struct SceRowStats {
  double mx = -INFINITY, sum = 0;

  /// log(sum(exp(score))): log-softmax of a score is score - logSumExp().
  double logSumExp() const { return mx + std::log(sum); }
};

template <typename Load, typename At> SceRowStats sceRowStats(Load in, At at, int64_t c) {
  SceRowStats s;
  for (int64_t k = 0; k < c; ++k)
    s.mx = std::max<double>(s.mx, in(at(k)));
  s.sum = sceSum([&](int64_t k) { return sceExp(in(at(k)) - s.mx); }, c);
  return s;
}

/// dScores of the row: g * (softmax - onehot(label)) as f32, stored by
/// `out(i, v)` (g: dLoss times the row's weight and the mean's 1 / denom).
template <typename Load, typename At, typename Store>
void sceGradRow(Load in, At at, int64_t c, const SceRowStats &s, double g, int64_t label,
                Store out) {
  for (int64_t k = 0; k < c; ++k) {
    double p = sceExp(in(at(k)) - s.mx) / s.sum;
    out(at(k), static_cast<float>(g * (p - (k == label ? 1.0 : 0.0))));
  }
}

/// sceRowStats that also keeps exp(score - max) of every class in e[0..c),
/// and sceGradRow reading them back: the same exps (sceExp of the same
/// double, here over the gathered row by sceExpRow's vector loop), so the
/// same loss and dScores, with one exp per score instead of two.
template <typename Load, typename At>
SceRowStats sceRowStatsKeep(Load in, At at, int64_t c, double *e) {
  SceRowStats s;
  for (int64_t k = 0; k < c; ++k) {
    e[k] = in(at(k));
    s.mx = std::max<double>(s.mx, e[k]);
  }
  sceExpRow(e, c, s.mx);
  s.sum = sceSum([&](int64_t k) { return e[k]; }, c);
  return s;
}

template <typename At, typename Store>
void sceGradRowKept(At at, int64_t c, const SceRowStats &s, const double *e, double g,
                    int64_t label, Store out) {
  for (int64_t k = 0; k < c; ++k) {
    double p = e[k] / s.sum;
    out(at(k), static_cast<float>(g * (p - (k == label ? 1.0 : 0.0))));
  }
}

} // namespace cpu
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CPU_SOFTMAXCROSSENTROPY_H
