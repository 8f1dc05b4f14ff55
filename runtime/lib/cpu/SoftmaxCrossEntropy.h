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

namespace strait {
namespace rt {
namespace cpu {

/// The row's max and sum of exp(score - max), in double, in class order.
struct SceRowStats {
  double mx = -INFINITY, sum = 0;

  /// log(sum(exp(score))): log-softmax of a score is score - logSumExp().
  double logSumExp() const { return mx + std::log(sum); }
};

template <typename Load, typename At> SceRowStats sceRowStats(Load in, At at, int64_t c) {
  SceRowStats s;
  for (int64_t k = 0; k < c; ++k)
    s.mx = std::max<double>(s.mx, in(at(k)));
  for (int64_t k = 0; k < c; ++k)
    s.sum += std::exp(in(at(k)) - s.mx);
  return s;
}

/// dScores of the row: g * (softmax - onehot(label)) as f32, stored by
/// `out(i, v)` (g: dLoss times the row's weight and the mean's 1 / denom).
template <typename Load, typename At, typename Store>
void sceGradRow(Load in, At at, int64_t c, const SceRowStats &s, double g, int64_t label,
                Store out) {
  for (int64_t k = 0; k < c; ++k) {
    double p = std::exp(in(at(k)) - s.mx) / s.sum;
    out(at(k), static_cast<float>(g * (p - (k == label ? 1.0 : 0.0))));
  }
}

/// sceRowStats that also keeps exp(score - max) of every class in e[0..c),
/// and sceGradRow reading them back: the same exps (std::exp of the same
/// double), so the same loss and dScores, with one exp per score instead of
/// two (the fused kernel's exps were 10% of a gpt2-tiny training step).
template <typename Load, typename At>
SceRowStats sceRowStatsKeep(Load in, At at, int64_t c, double *e) {
  SceRowStats s;
  for (int64_t k = 0; k < c; ++k)
    s.mx = std::max<double>(s.mx, in(at(k)));
  for (int64_t k = 0; k < c; ++k) {
    e[k] = std::exp(in(at(k)) - s.mx);
    s.sum += e[k];
  }
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
