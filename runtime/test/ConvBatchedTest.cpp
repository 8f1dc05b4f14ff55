//===- ConvBatchedTest.cpp - Batched im2col convolution paths -------------===//
//
// Conv, ConvGradInput and ConvGradWeight on small output planes (at most
// 256 positions) and batches of two or more images take the CPU backend's
// batched paths: one im2col (or a copy for 1x1) over a block of images and
// one GEMM per block and group, the weight gradient's sum over images
// folded into the GEMM's K. Checked here against naive loops in double
// (every window position tested one by one), over shapes that cover
// several blocks with a ragged last one, groups, strides, dilations, pads
// wider than the kernel, 1-D and 3-D windows, 1x1 kernels, the direct
// depthwise kernels, and against the per-image path (a batch of one) image
// by image.
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

Shape wShape(const WindowCase &c) {
  Shape s = {c.outChannels, c.x[1] / c.group};
  s.insert(s.end(), c.k.begin(), c.k.end());
  return s;
}

std::function<void(program::Kernel &)> attrs(const WindowCase &c, const char *shapeAttr = nullptr,
                                             Shape shape = {}) {
  return [=](program::Kernel &k) {
    windowAttrs(c, /*conv=*/true)(k);
    if (shapeAttr) {
      k.set_domain("strait");
      setInts(k, shapeAttr, shape);
    }
  };
}

/// Calls f(image, output channel, input channel, output index, input index,
/// weight index) for every product x[in] * w[wi] that y[out] sums.
template <typename F> void forEachProduct(const WindowCase &c, F f) {
  Shape ys = outShape(c, c.outChannels), ws = wShape(c);
  int64_t n = c.x[0], ch = c.x[1], cg = ch / c.group, mg = c.outChannels / c.group;
  int64_t inSize = numElements(c.x) / (n * ch), outSize = numElements(ys) / (n * c.outChannels);
  int64_t kSize = numElements(ws) / (c.outChannels * cg);
  for (int64_t img = 0; img < n; ++img)
    for (int64_t oc = 0; oc < c.outChannels; ++oc)
      for (int64_t icg = 0; icg < cg; ++icg) {
        int64_t ic = (oc / mg) * cg + icg;
        forEachWindow(c, [&](int64_t o, int64_t in, int64_t kp) {
          if (in >= 0)
            f((img * c.outChannels + oc) * outSize + o, (img * ch + ic) * inSize + in,
              (oc * cg + icg) * kSize + kp);
        });
      }
}

/// got[i] within 1e-5 * (1 + sum of |products|) of the double sum.
void expectNear(const std::string &what, const Tensor &got, const std::vector<double> &want,
                const std::vector<double> &mag) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.size())) << what;
  int64_t bad = 0;
  for (size_t i = 0; i < want.size(); ++i)
    if (!(std::abs(got.as<float>()[i] - want[i]) <= 1e-5 * (1 + mag[i])) && bad++ < 5)
      ADD_FAILURE() << what << " element " << i << ": got " << got.as<float>()[i] << " want "
                    << want[i];
  EXPECT_EQ(bad, 0) << what;
}

/// Y, dX and dW of case c against the naive double sums.
void checkAll(const WindowCase &c, uint32_t seed) {
  SCOPED_TRACE("X " + shapeToString(c.x) + " K " + std::to_string(c.k[0]) + " group " +
               std::to_string(c.group) + " M " + std::to_string(c.outChannels));
  Shape ys = outShape(c, c.outChannels), ws = wShape(c);
  OwnedTensor x = f32Tensor(c.x, pseudoRandom(numElements(c.x), seed));
  OwnedTensor w = f32Tensor(ws, pseudoRandom(numElements(ws), seed + 1));
  OwnedTensor b = f32Tensor({c.outChannels}, pseudoRandom(c.outChannels, seed + 2));
  OwnedTensor dy = f32Tensor(ys, pseudoRandom(numElements(ys), seed + 3));
  std::vector<const Tensor *> ins = {&x.tensor, &w.tensor};
  if (c.bias)
    ins.push_back(&b.tensor);
  OwnedTensor y = runF32Op("Conv", ins, ys, attrs(c));
  OwnedTensor dx = runF32Op("ConvGradInput", {&dy.tensor, &w.tensor}, c.x,
                            attrs(c, "input_shape", c.x));
  OwnedTensor dw = runF32Op("ConvGradWeight", {&dy.tensor, &x.tensor}, ws,
                            attrs(c, "weight_shape", ws));
  std::vector<double> yRef(numElements(ys), 0.0), yMag(yRef.size(), 0.0);
  std::vector<double> dxRef(numElements(c.x), 0.0), dxMag(dxRef.size(), 0.0);
  std::vector<double> dwRef(numElements(ws), 0.0), dwMag(dwRef.size(), 0.0);
  const float *xv = x.as<float>(), *wv = w.as<float>(), *gv = dy.as<float>();
  forEachProduct(c, [&](int64_t o, int64_t i, int64_t k) {
    yRef[o] += double(xv[i]) * wv[k];
    yMag[o] += std::abs(double(xv[i]) * wv[k]);
    dxRef[i] += double(gv[o]) * wv[k];
    dxMag[i] += std::abs(double(gv[o]) * wv[k]);
    dwRef[k] += double(gv[o]) * xv[i];
    dwMag[k] += std::abs(double(gv[o]) * xv[i]);
  });
  if (c.bias) {
    int64_t outSize = numElements(ys) / (c.x[0] * c.outChannels);
    for (size_t i = 0; i < yRef.size(); ++i)
      yRef[i] += b.as<float>()[(i / outSize) % c.outChannels];
  }
  expectNear("Y", y.tensor, yRef, yMag);
  expectNear("dX", dx.tensor, dxRef, dxMag);
  expectNear("dW", dw.tensor, dwRef, dwMag);

  // The per-image path (a batch of one) on each image: the same Y and dX
  // within the same tolerance; dW is their sum over images.
  int64_t n = c.x[0], xImage = numElements(c.x) / n, yImage = numElements(ys) / n;
  Shape x1 = c.x, y1 = ys;
  x1[0] = y1[0] = 1;
  WindowCase one = c;
  one.x = x1;
  for (int64_t img = 0; img < n; img += std::max<int64_t>(1, n / 3)) {
    OwnedTensor xi = f32Tensor(x1, std::vector<float>(xv + img * xImage, xv + (img + 1) * xImage));
    OwnedTensor gi = f32Tensor(y1, std::vector<float>(gv + img * yImage, gv + (img + 1) * yImage));
    std::vector<const Tensor *> ins1 = {&xi.tensor, &w.tensor};
    if (c.bias)
      ins1.push_back(&b.tensor);
    OwnedTensor yi = runF32Op("Conv", ins1, y1, attrs(one));
    OwnedTensor dxi = runF32Op("ConvGradInput", {&gi.tensor, &w.tensor}, x1,
                               attrs(one, "input_shape", x1));
    std::vector<double> yw(yi.as<float>(), yi.as<float>() + yImage),
        ym(yMag.begin() + img * yImage, yMag.begin() + (img + 1) * yImage);
    std::vector<double> dxw(dxi.as<float>(), dxi.as<float>() + xImage),
        dxm(dxMag.begin() + img * xImage, dxMag.begin() + (img + 1) * xImage);
    OwnedTensor ySlice = f32Tensor(y1, std::vector<float>(y.as<float>() + img * yImage,
                                                          y.as<float>() + (img + 1) * yImage));
    OwnedTensor dxSlice = f32Tensor(x1, std::vector<float>(dx.as<float>() + img * xImage,
                                                           dx.as<float>() + (img + 1) * xImage));
    expectNear("Y of image " + std::to_string(img) + " vs batch of one", ySlice.tensor, yw, ym);
    expectNear("dX of image " + std::to_string(img) + " vs batch of one", dxSlice.tensor, dxw, dxm);
  }
}

TEST(ConvBatched, DigitsCnnLayers) {
  // digits-cnn at a batch spanning several blocks with a ragged last one.
  checkAll({{37, 1, 8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, 16, true}, 11);
  checkAll({{70, 16, 4, 4}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, 32, true}, 21);
}

TEST(ConvBatched, StridesDilationsPadsGroupsAndRanks) {
  std::vector<WindowCase> cases = {
      {{9, 4, 9, 7}, {3, 3}, {2, 3}, {1, 1}, {1, 2, 2, 1}, 1, 5, true},
      {{6, 6, 10, 11}, {2, 3}, {3, 2}, {2, 2}, {3, 0, 0, 4}, 2, 4, false},
      {{5, 4, 5, 5}, {3, 3}, {1, 1}, {1, 1}, {4, 4, 4, 4}, 2, 2, true}, // pads > kernel
      {{7, 3, 19}, {5}, {3}, {2}, {6, 2}, 1, 2, true},                   // 1-D
      {{3, 2, 5, 4, 6}, {3, 2, 3}, {2, 1, 2}, {1, 2, 1}, {1, 1, 0, 0, 2, 1}, 1, 3, false}, // 3-D
      {{11, 8, 7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 1, 12, true}, // 1x1 (a copy)
      {{4, 6, 7, 7}, {1, 1}, {1, 1}, {1, 1}, {0, 0, 0, 0}, 3, 9, false},  // grouped 1x1
      {{5, 4, 9, 9}, {1, 1}, {2, 2}, {1, 1}, {0, 0, 0, 0}, 1, 3, true},   // strided 1x1
      {{3, 3, 6, 6}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3, 6, true},   // multiplier 2
      {{2, 1, 1, 1}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, 4, false},  // 1x1 plane
  };
  uint32_t seed = 500;
  for (const WindowCase &c : cases)
    checkAll(c, seed += 5);
}

TEST(ConvBatched, DepthwiseDirectKernels) {
  // group == C == M: Conv, ConvGradInput and ConvGradWeight all take the
  // direct depthwise kernels (ConvDepthwise.cpp), on small and large planes.
  std::vector<WindowCase> cases = {
      {{3, 8, 9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 8, 8, true},      // MobileNet's 3x3
      {{2, 6, 11, 10}, {5, 5}, {2, 2}, {1, 1}, {2, 2, 2, 2}, 6, 6, false},   // 5x5 stride 2
      {{2, 4, 8, 9}, {3, 3}, {1, 2}, {2, 1}, {2, 0, 1, 3}, 4, 4, true},      // dilated, uneven pads
      {{2, 3, 20, 20}, {3, 3}, {2, 1}, {1, 1}, {1, 1, 1, 1}, 3, 3, true},    // 10x20 = 200 outputs
      {{2, 3, 23, 21}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 3, 3, false},   // > 256 outputs
      {{2, 2, 3, 3}, {3, 3}, {1, 1}, {1, 1}, {4, 4, 4, 4}, 2, 2, true},      // pads > kernel
      {{3, 5, 17}, {3}, {2}, {1}, {1, 1}, 5, 5, true},                       // 1-D
      {{2, 3, 4, 5, 6}, {3, 2, 3}, {1, 2, 1}, {1, 1, 2}, {1, 0, 1, 1, 1, 0}, 3, 3, false}, // 3-D
  };
  uint32_t seed = 700;
  for (const WindowCase &c : cases)
    checkAll(c, seed += 5);
}

TEST(ConvBatched, LargePlanesKeepThePerImagePath) {
  // 18x18 = 324 output positions: one GEMM per image, as before.
  checkAll({{3, 2, 18, 18}, {3, 3}, {1, 1}, {1, 1}, {1, 1, 1, 1}, 1, 4, true}, 900);
}

} // namespace
