//===- ConvWindow.h - The window of a convolution or pooling ----*- C++ -*-===//
//
// The per-dimension geometry of Conv, MaxPool, AveragePool and their
// gradients, computed once from the ONNX attributes by rt::convWindow
// (KernelArgs.h) and used by every backend; and the walk over one output's
// window and the pooling of one output, shared by the CPU and CUDA pooling
// kernels (host and device functions). Plain data with no dependency (no
// protobuf, no Status), trivially copyable: CUDA device code includes this
// header and takes the window by value as a kernel argument.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_CONVWINDOW_H
#define STRAIT_RUNTIME_CONVWINDOW_H

#include <cmath>
#include <cstdint>

#ifndef STRAIT_HD
#ifdef __CUDACC__
#define STRAIT_HD __host__ __device__
#else
#define STRAIT_HD
#endif
#endif

namespace strait {
namespace rt {

/// A window over 3 spatial slots; 1-D and 2-D windows use the last slots
/// (the leading ones have size 1, stride 1, no padding). `pad` is the
/// padding at the start of each dim, `padEnd` at its end (it only decides
/// `out`; cuDNN needs it to tell symmetric from asymmetric padding).
struct ConvWindow {
  int nd = 0; ///< spatial dims of the op (1-3)
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t stride[3] = {1, 1, 1}, dil[3] = {1, 1, 1}, pad[3] = {0, 0, 0},
          padEnd[3] = {0, 0, 0};
  STRAIT_HD int64_t inSize() const { return in[0] * in[1] * in[2]; }
  STRAIT_HD int64_t outSize() const { return out[0] * out[1] * out[2]; }
  STRAIT_HD int64_t kSize() const { return k[0] * k[1] * k[2]; }
};

/// Walks the window of output `o` (row-major over out[]) of one plane in
/// (z, y, x) kernel order: f(index into the plane of X) for each position
/// inside X. Returns the number of positions in the padding (before X up to
/// `pad`, after it up to `padEnd`), not counting ceil-mode overhang past the
/// end padding: what AveragePool's count_include_pad counts, as onnxruntime.
template <typename F>
STRAIT_HD inline int64_t walkWindow(const ConvWindow &w, int64_t o, F &&f) {
  int64_t ox = o % w.out[2], oy = (o / w.out[2]) % w.out[1], oz = o / (w.out[2] * w.out[1]);
  int64_t padded = 0;
  for (int64_t kz = 0; kz < w.k[0]; ++kz)
    for (int64_t ky = 0; ky < w.k[1]; ++ky)
      for (int64_t kx = 0; kx < w.k[2]; ++kx) {
        int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
        int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
        int64_t ix = ox * w.stride[2] - w.pad[2] + kx * w.dil[2];
        if (iz >= 0 && iz < w.in[0] && iy >= 0 && iy < w.in[1] && ix >= 0 && ix < w.in[2])
          f((iz * w.in[1] + iy) * w.in[2] + ix);
        else
          padded += iz < w.in[0] + w.padEnd[0] && iy < w.in[1] + w.padEnd[1] &&
                    ix < w.in[2] + w.padEnd[2];
      }
  return padded;
}

/// MaxPool (`max`) or AveragePool of output `o` over the plane `in`: the
/// maximum (its index into the plane in `argmax`, the first among equal
/// maxima; -inf for a window without an element of X) or the mean over the
/// positions inside X plus, with `countIncludePad`, those in the padding
/// (0 for a window with neither).
STRAIT_HD inline float poolWindow(const ConvWindow &w, const float *in, int64_t o, bool max,
                                  bool countIncludePad, int64_t &argmax) {
  float best = -INFINITY, sum = 0;
  int64_t count = 0;
  argmax = 0;
  int64_t padded = walkWindow(w, o, [&](int64_t idx) {
    float v = in[idx];
    sum += v;
    ++count;
    if (v > best) {
      best = v;
      argmax = idx;
    }
  });
  if (max)
    return best;
  int64_t denom = countIncludePad ? count + padded : count;
  return denom ? sum / denom : 0.0f;
}

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_CONVWINDOW_H
