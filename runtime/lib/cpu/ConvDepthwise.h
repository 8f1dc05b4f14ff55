//===- ConvDepthwise.h - Window ranges and direct depthwise kernels -*- C++ -*-===//
//
// Shared by Conv.cpp (im2col / col2im) and ConvDepthwise.cpp (the direct
// depthwise convolution and its two gradients).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CPU_CONVDEPTHWISE_H
#define STRAIT_RUNTIME_LIB_CPU_CONVDEPTHWISE_H

#include "strait/runtime/KernelArgs.h"

#include <algorithm>
#include <cstdint>

namespace strait {
namespace rt {
namespace cpu {

/// The outputs o in [lo, hi) of one window dimension whose input position
/// o * stride - pad + kOff lies inside [0, in); empty when lo >= hi.
struct ValidRange {
  int64_t lo, hi;
};
inline ValidRange validOutputs(int64_t out, int64_t in, int64_t stride, int64_t pad, int64_t kOff) {
  // o * stride >= pad - kOff  and  o * stride <= in - 1 + pad - kOff.
  int64_t first = pad - kOff, last = in - 1 + pad - kOff;
  int64_t lo = std::min(out, first <= 0 ? 0 : (first + stride - 1) / stride);
  int64_t hi = last < 0 ? 0 : last / stride + 1;
  return {lo, std::max(lo, std::min(hi, out))};
}

/// A depthwise convolution: one input channel and one filter per group
/// (group == C == M), more than one window position. Conv, ConvGradInput and
/// ConvGradWeight take the direct kernels below for it.
inline bool isDepthwise(int64_t channels, int64_t outChannels, int64_t group, const ConvWindow &w) {
  return group == channels && outChannels == channels && w.kSize() > 1;
}

/// Y[n, c] = the window sums of X[n, c] with W[c] (+ bias[c]); X is n x c
/// planes of w.inSize(), Y of w.outSize().
void depthwiseConv(const float *x, const float *wt, const float *bias, float *y, int64_t n,
                   int64_t c, const ConvWindow &w);
/// dX[n, c] = the adjoint of depthwiseConv applied to dY[n, c] (dX written,
/// not accumulated).
void depthwiseGradInput(const float *dy, const float *wt, float *dx, int64_t n, int64_t c,
                        const ConvWindow &w);
/// dW[c, kpos] = sum over images and outputs of dY * the input under kpos.
void depthwiseGradWeight(const float *dy, const float *x, float *dw, int64_t n, int64_t c,
                         const ConvWindow &w);

} // namespace cpu
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CPU_CONVDEPTHWISE_H
