//===- WindowTestUtil.h - Sliding-window cases for the conv and pool tests -===//
//
// A convolution or pooling case and the naive walk over its windows that the
// CPU kernels' tests check against (ConvPoolFastPathTest, ConvBatchedTest).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TEST_WINDOWTESTUTIL_H
#define STRAIT_RUNTIME_TEST_WINDOWTESTUTIL_H

#include "TestUtil.h"

#include <functional>
#include <vector>

namespace strait {
namespace rt {
namespace test {

/// A convolution or pooling case: X [n, c, spatial...], kernel extents,
/// per-dim strides, dilations and pads (begin..., end...).
struct WindowCase {
  Shape x;
  std::vector<int64_t> k, strides, dils, pads;
  int64_t group = 1, outChannels = 0; ///< conv only
  bool bias = false;
};

inline int64_t nd(const WindowCase &c) { return static_cast<int64_t>(c.k.size()); }

inline std::vector<int64_t> outDims(const WindowCase &c) {
  std::vector<int64_t> out;
  for (int64_t d = 0; d < nd(c); ++d) {
    int64_t eff = (c.k[d] - 1) * c.dils[d] + 1;
    out.push_back((c.x[2 + d] + c.pads[d] + c.pads[d + nd(c)] - eff) / c.strides[d] + 1);
  }
  return out;
}

/// Calls f(flat output index within the plane, flat input index or -1 for
/// padding, kernel position) for every window position of every output.
template <typename F> void forEachWindow(const WindowCase &c, F f) {
  std::vector<int64_t> out = outDims(c);
  int64_t r = nd(c), outSize = 1, kSize = 1;
  for (int64_t d = 0; d < r; ++d) {
    outSize *= out[d];
    kSize *= c.k[d];
  }
  for (int64_t o = 0; o < outSize; ++o)
    for (int64_t kp = 0; kp < kSize; ++kp) {
      int64_t orem = o, krem = kp, in = 0;
      bool inside = true;
      std::vector<int64_t> oi(r), ki(r);
      for (int64_t d = r - 1; d >= 0; --d) {
        oi[d] = orem % out[d];
        orem /= out[d];
        ki[d] = krem % c.k[d];
        krem /= c.k[d];
      }
      for (int64_t d = 0; d < r; ++d) {
        int64_t i = oi[d] * c.strides[d] - c.pads[d] + ki[d] * c.dils[d];
        inside = inside && i >= 0 && i < c.x[2 + d];
        in = in * c.x[2 + d] + i;
      }
      f(o, inside ? in : -1, kp);
    }
}

inline std::function<void(program::Kernel &)> windowAttrs(const WindowCase &c, bool conv) {
  return [c, conv](program::Kernel &k) {
    setInts(k, "kernel_shape", c.k);
    setInts(k, "strides", c.strides);
    setInts(k, "dilations", c.dils);
    setInts(k, "pads", c.pads);
    if (conv)
      setInt(k, "group", c.group);
  };
}

inline Shape outShape(const WindowCase &c, int64_t channels) {
  Shape s = {c.x[0], channels};
  for (int64_t d : outDims(c))
    s.push_back(d);
  return s;
}

} // namespace test
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TEST_WINDOWTESTUTIL_H
