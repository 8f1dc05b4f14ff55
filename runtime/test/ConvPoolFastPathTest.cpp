//===- ConvPoolFastPathTest.cpp - Direct conv and pooling paths -----------===//
//
// The CPU backend's direct depthwise convolution, its im2col (rows copied
// between computed bounds), its pooling loops (with bounds tests, and
// without where every window lies inside X) and its pooling gradients
// against naive loops written here: every window position tested one by
// one, convolution sums in double, pooling in the kernels' order (equal bits).
// Shapes are odd on purpose (1-3 spatial dims, strides 1-3, dilations,
// asymmetric pads wider than the kernel, channel multipliers, groups).
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "WindowTestUtil.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

void checkConv(const WindowCase &c, uint32_t seed) {
  SCOPED_TRACE("X " + shapeToString(c.x) + " group " + std::to_string(c.group) + " M " +
               std::to_string(c.outChannels));
  int64_t n = c.x[0], ch = c.x[1], m = c.outChannels, cg = ch / c.group, mg = m / c.group;
  Shape ws = {m, cg};
  ws.insert(ws.end(), c.k.begin(), c.k.end());
  OwnedTensor x = f32Tensor(c.x, pseudoRandom(numElements(c.x), seed));
  OwnedTensor w = f32Tensor(ws, pseudoRandom(numElements(ws), seed + 1));
  OwnedTensor b = f32Tensor({m}, pseudoRandom(m, seed + 2));
  Shape ys = outShape(c, m);
  std::vector<const Tensor *> ins = {&x.tensor, &w.tensor};
  if (c.bias)
    ins.push_back(&b.tensor);
  OwnedTensor y = runF32Op("Conv", ins, ys, windowAttrs(c, true));
  int64_t inSize = numElements(c.x) / (n * ch), outSize = numElements(ys) / (n * m);
  int64_t kSize = numElements(ws) / (m * cg);
  std::vector<double> ref(numElements(ys), 0.0), mag(numElements(ys), 0.0);
  for (int64_t img = 0; img < n; ++img)
    for (int64_t oc = 0; oc < m; ++oc)
      for (int64_t icg = 0; icg < cg; ++icg) {
        int64_t ic = (oc / mg) * cg + icg;
        const float *plane = x.as<float>() + (img * ch + ic) * inSize;
        const float *kern = w.as<float>() + (oc * cg + icg) * kSize;
        double *dst = ref.data() + (img * m + oc) * outSize;
        double *dmag = mag.data() + (img * m + oc) * outSize;
        forEachWindow(c, [&](int64_t o, int64_t in, int64_t kp) {
          if (in >= 0) {
            dst[o] += double(plane[in]) * kern[kp];
            dmag[o] += std::abs(double(plane[in]) * kern[kp]);
          }
        });
      }
  int64_t bad = 0;
  for (int64_t i = 0; i < numElements(ys); ++i) {
    double want = ref[i] + (c.bias ? b.as<float>()[(i / outSize) % m] : 0.0);
    double tol = 1e-6 * (1 + mag[i]);
    if (std::abs(y.as<float>()[i] - want) > tol && bad++ < 5)
      ADD_FAILURE() << "element " << i << ": got " << y.as<float>()[i] << " want " << want;
  }
  EXPECT_EQ(bad, 0);
}

TEST(DepthwiseConv, MatchesNaiveLoopOnOddShapes) {
  // group == channels: the direct depthwise path (multiplier 1) and, with
  // multiplier 2, the im2col path.
  std::vector<WindowCase> cases = {
      {{1, 3, 7, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3, 3, true},
      {{2, 5, 11, 6}, {5, 5}, {2, 2}, {1, 1}, {2, 2, 2, 2}, 5, 5, false},
      {{1, 4, 13, 10}, {3, 2}, {3, 1}, {2, 3}, {0, 4, 3, 0}, 4, 4, true},
      {{1, 2, 5, 5}, {3, 3}, {1, 2}, {1, 1}, {4, 0, 1, 5}, 2, 2, true}, // rows all padding
      {{2, 3, 17}, {4}, {2}, {3}, {5, 1}, 3, 3, true},                   // 1-D
      {{1, 2, 4, 5, 6}, {2, 3, 3}, {1, 2, 1}, {2, 1, 1}, {1, 0, 1, 0, 2, 1}, 2, 2, true}, // 3-D
      {{1, 1, 6, 7}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, 1, false}, // one channel
      {{2, 3, 7, 8}, {3, 3}, {2, 1}, {1, 2}, {1, 2, 0, 1}, 3, 6, true},  // multiplier 2
      {{1, 6, 1, 1}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 6, 6, true},  // 1x1 input
  };
  uint32_t seed = 100;
  for (const WindowCase &c : cases)
    checkConv(c, seed += 3);
}

TEST(Im2colConv, MatchesNaiveLoopWithStridesPadsDilationsGroups) {
  std::vector<WindowCase> cases = {
      {{2, 1, 8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, 16, true}, // digits-cnn conv1
      {{1, 4, 9, 7}, {3, 3}, {2, 3}, {1, 1}, {1, 2, 2, 1}, 1, 5, true},
      {{1, 6, 10, 11}, {2, 3}, {3, 2}, {2, 2}, {3, 0, 0, 4}, 2, 4, false},
      {{2, 4, 5, 5}, {3, 3}, {1, 1}, {1, 1}, {4, 4, 4, 4}, 2, 2, true}, // pads > kernel
      {{1, 3, 19}, {5}, {3}, {2}, {6, 2}, 1, 2, true},                   // 1-D
      {{1, 2, 5, 4, 6}, {3, 2, 3}, {2, 1, 2}, {1, 2, 1}, {1, 1, 0, 0, 2, 1}, 1, 3, false},
  };
  uint32_t seed = 200;
  for (const WindowCase &c : cases)
    checkConv(c, seed += 3);
}

/// MaxPool (value and first-maximum index) or AveragePool (both padding
/// counts) against the window walk, same summation order: equal bits.
void checkPool(const WindowCase &c, uint32_t seed) {
  SCOPED_TRACE("X " + shapeToString(c.x));
  int64_t planes = c.x[0] * c.x[1];
  int64_t inSize = numElements(c.x) / planes;
  std::vector<float> data = pseudoRandom(numElements(c.x), seed);
  for (size_t i = 0; i < data.size(); i += 7)
    data[i] = data[i / 2]; // ties
  OwnedTensor x = f32Tensor(c.x, data);
  Shape ys = outShape(c, c.x[1]);
  int64_t outSize = numElements(ys) / planes;
  OwnedTensor y(program::DTYPE_F32, ys), idx(program::DTYPE_I64, ys);
  runOp("MaxPool", {&x.tensor}, {&y.tensor, &idx.tensor}, windowAttrs(c, false));
  // Without Indices (windows all inside X take a loop without argmax).
  OwnedTensor yOnly = runF32Op("MaxPool", {&x.tensor}, ys, windowAttrs(c, false));
  for (int64_t pl = 0; pl < planes; ++pl) {
    std::vector<float> best(outSize, -INFINITY);
    std::vector<int64_t> arg(outSize, 0);
    forEachWindow(c, [&](int64_t o, int64_t in, int64_t) {
      if (in >= 0 && data[pl * inSize + in] > best[o]) {
        best[o] = data[pl * inSize + in];
        arg[o] = in;
      }
    });
    for (int64_t o = 0; o < outSize; ++o) {
      ASSERT_EQ(y.as<float>()[pl * outSize + o], best[o]) << "plane " << pl << " output " << o;
      ASSERT_EQ(yOnly.as<float>()[pl * outSize + o], best[o]) << "plane " << pl << " output " << o;
      ASSERT_EQ(idx.as<int64_t>()[pl * outSize + o], pl * inSize + arg[o]);
    }
  }
  for (int includePad : {0, 1}) {
    OwnedTensor avg = runF32Op("AveragePool", {&x.tensor}, ys, [&](program::Kernel &k) {
      windowAttrs(c, false)(k);
      setInt(k, "count_include_pad", includePad);
    });
    for (int64_t pl = 0; pl < planes; ++pl) {
      std::vector<float> sum(outSize, 0.0f);
      std::vector<int64_t> count(outSize, 0);
      forEachWindow(c, [&](int64_t o, int64_t in, int64_t) {
        if (in >= 0)
          sum[o] += data[pl * inSize + in];
        count[o] += in >= 0 || includePad;
      });
      for (int64_t o = 0; o < outSize; ++o)
        ASSERT_EQ(avg.as<float>()[pl * outSize + o], count[o] ? sum[o] / count[o] : 0.0f)
            << "count_include_pad " << includePad << " plane " << pl << " output " << o;
    }
  }
}

/// MaxPoolGrad (to the first maximum of each window, the first position
/// when none is greater) and AveragePoolGrad (both padding counts) against
/// the window walk, outputs in order: equal bits.
void checkPoolGrad(const WindowCase &c, uint32_t seed) {
  SCOPED_TRACE("X " + shapeToString(c.x));
  int64_t planes = c.x[0] * c.x[1];
  int64_t inSize = numElements(c.x) / planes;
  std::vector<float> data = pseudoRandom(numElements(c.x), seed);
  for (size_t i = 0; i < data.size(); i += 5)
    data[i] = data[i / 3]; // ties
  data[0] = NAN;           // a window whose first position is NaN
  Shape ys = outShape(c, c.x[1]);
  int64_t outSize = numElements(ys) / planes;
  std::vector<float> dyv = pseudoRandom(numElements(ys), seed + 1);
  OwnedTensor x = f32Tensor(c.x, data), dy = f32Tensor(ys, dyv);
  OwnedTensor dmax = runF32Op("MaxPoolGrad", {&dy.tensor, &x.tensor}, c.x, windowAttrs(c, false));
  for (int64_t pl = 0; pl < planes; ++pl) {
    std::vector<int64_t> best(outSize, -1);
    forEachWindow(c, [&](int64_t o, int64_t in, int64_t) {
      if (in >= 0 && (best[o] < 0 || data[pl * inSize + in] > data[pl * inSize + best[o]]))
        best[o] = in;
    });
    std::vector<float> want(inSize, 0.0f);
    for (int64_t o = 0; o < outSize; ++o)
      if (best[o] >= 0)
        want[best[o]] += dyv[pl * outSize + o];
    for (int64_t i = 0; i < inSize; ++i)
      ASSERT_EQ(dmax.as<float>()[pl * inSize + i], want[i]) << "MaxPoolGrad plane " << pl;
  }
  for (int includePad : {0, 1}) {
    OwnedTensor davg = runF32Op("AveragePoolGrad", {&dy.tensor}, c.x, [&](program::Kernel &k) {
      windowAttrs(c, false)(k);
      setInt(k, "count_include_pad", includePad);
      setInts(k, "input_shape", c.x);
    });
    for (int64_t pl = 0; pl < planes; ++pl) {
      std::vector<int64_t> count(outSize, 0), inX(outSize, 0);
      forEachWindow(c, [&](int64_t o, int64_t in, int64_t) {
        count[o] += in >= 0 || includePad;
        inX[o] += in >= 0;
      });
      std::vector<float> want(inSize, 0.0f);
      forEachWindow(c, [&](int64_t o, int64_t in, int64_t) {
        if (in >= 0 && inX[o] > 0)
          want[in] += dyv[pl * outSize + o] / count[o];
      });
      for (int64_t i = 0; i < inSize; ++i)
        ASSERT_EQ(davg.as<float>()[pl * inSize + i], want[i])
            << "AveragePoolGrad count_include_pad " << includePad << " plane " << pl;
    }
  }
}

TEST(PoolPlane, MatchesWindowWalkBitForBit) {
  std::vector<WindowCase> cases = {
      {{2, 16, 8, 8}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, // digits-cnn
      {{1, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}},
      {{1, 2, 10, 11}, {3, 2}, {1, 3}, {2, 1}, {2, 0, 1, 1}},
      {{1, 3, 11, 10}, {3, 2}, {2, 3}, {2, 1}, {0, 0, 0, 0}}, // inside X, dilated
      {{2, 2, 13}, {4}, {3}, {2}, {3, 2}}, // 1-D
      {{1, 2, 14}, {3}, {2}, {1}, {0, 0}}, // 1-D inside X
      {{1, 2, 5, 6, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 2}, {1, 1, 0, 0, 1, 1}},
  };
  uint32_t seed = 300;
  for (const WindowCase &c : cases)
    checkPool(c, seed += 3);
}

TEST(PoolGrad, MatchesWindowWalkBitForBit) {
  std::vector<WindowCase> cases = {
      {{2, 4, 8, 8}, {2, 2}, {2, 2}, {1, 1}, {0, 0, 0, 0}}, // digits-cnn
      {{1, 3, 9, 7}, {3, 3}, {2, 2}, {1, 1}, {1, 1, 1, 1}}, // overlapping windows
      {{1, 2, 10, 11}, {3, 2}, {1, 3}, {2, 1}, {2, 0, 1, 1}},
      {{2, 2, 13}, {4}, {3}, {2}, {3, 2}},
      {{1, 2, 5, 6, 4}, {2, 3, 2}, {2, 1, 2}, {1, 1, 2}, {1, 1, 0, 0, 1, 1}},
  };
  uint32_t seed = 400;
  for (const WindowCase &c : cases)
    checkPoolGrad(c, seed += 3);
}

} // namespace
