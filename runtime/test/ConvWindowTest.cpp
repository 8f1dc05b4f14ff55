//===- ConvWindowTest.cpp - The conv / pool window shared by the backends -===//
//
// rt::convWindow and rt::walkWindow (KernelArgs.h): ONNX's auto_pad,
// ceil_mode and dilation rules, the errors that name the kernel and the
// field, and the windows' edge cases, through the CPU kernels.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/KernelArgs.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

using KernelAttrs = std::function<void(program::Kernel &)>;

// The window follows ONNX's auto_pad, ceil_mode and dilation rules; errors
// name the kernel and the field.
TEST(ConvWindow, FollowsOnnxRules) {
  auto same = [](const char *mode) {
    return [mode](program::Kernel &k) {
      setString(k, "auto_pad", mode);
      setInts(k, "strides", {2, 2});
    };
  };
  // 224 with k=3, s=2: 112 outputs, one pad in all, at the end (UPPER) or start.
  StatusOr<ConvWindow> up = convWindowOf({1, 1, 224, 7}, {3, 2}, false, same("SAME_UPPER"));
  ASSERT_TRUE(up.isOk()) << up.getStatus().toString();
  EXPECT_EQ(up->nd, 2);
  EXPECT_EQ(up->out[1], 112);
  EXPECT_EQ(up->pad[1], 0);
  EXPECT_EQ(up->padEnd[1], 1);
  EXPECT_EQ(up->out[2], 4); // ceil(7 / 2), total pad (4-1)*2+2-7 = 1
  EXPECT_EQ(up->pad[2], 0);
  EXPECT_EQ(up->padEnd[2], 1);
  EXPECT_EQ(up->in[0], 1); // 2-D windows use the last two slots
  StatusOr<ConvWindow> low = convWindowOf({1, 1, 224, 7}, {3, 2}, false, same("SAME_LOWER"));
  ASSERT_TRUE(low.isOk());
  EXPECT_EQ(low->pad[1], 1);
  EXPECT_EQ(low->padEnd[1], 0);
  // ceil_mode counts a last, partial window for pooling only.
  auto ceil = [](program::Kernel &k) {
    setInts(k, "strides", {2});
    setInt(k, "ceil_mode", 1);
  };
  EXPECT_EQ(convWindowOf({1, 1, 5}, {2}, true, ceil)->out[2], 3);
  EXPECT_EQ(convWindowOf({1, 1, 5}, {2}, false, ceil)->out[2], 2);
  // ... but not one that starts in the end padding.
  auto ceilPad = [](program::Kernel &k) {
    setInts(k, "strides", {2});
    setInts(k, "pads", {0, 1});
    setInt(k, "ceil_mode", 1);
  };
  EXPECT_EQ(convWindowOf({1, 1, 4}, {2}, true, ceilPad)->out[2], 2);
  // Dilation widens the window: (10 - ((3 - 1) * 3 + 1)) + 1 = 4.
  EXPECT_EQ(convWindowOf({1, 1, 10}, {3}, false,
                         [](program::Kernel &k) { setInts(k, "dilations", {3}); })->out[2],
            4);
  // Errors name the kernel and the field.
  Status bad = convWindowOf({1, 1, 5}, {2}, true, [](program::Kernel &k) {
    setString(k, "auto_pad", "SAME_MIDDLE");
  }).getStatus();
  EXPECT_EQ(bad.getCode(), StatusCode::InvalidArgument);
  EXPECT_NE(bad.toString().find("unknown auto_pad 'SAME_MIDDLE'"), std::string::npos);
  EXPECT_NE(bad.toString().find("MaxPool 'w'"), std::string::npos) << bad.toString();
  bad = convWindowOf({1, 1, 5, 5}, {2, 2}, true,
                     [](program::Kernel &k) { setInts(k, "strides", {1}); }).getStatus();
  EXPECT_NE(bad.toString().find("strides/dilations/pads do not match"), std::string::npos);
  bad = convWindowOf({1, 1, 2}, {3}, false, [](program::Kernel &) {}).getStatus();
  EXPECT_NE(bad.toString().find("empty output along spatial dim 0"), std::string::npos);
  EXPECT_EQ(convWindowOf({1, 1}, {}, false, [](program::Kernel &) {}).getStatus().getCode(),
            StatusCode::Unimplemented);
}

TEST(ConvWindow, ValidAndAsymmetric3dPads) {
  StatusOr<ConvWindow> valid = convWindowOf({1, 1, 5}, {2}, false, [](program::Kernel &k) {
    setString(k, "auto_pad", "VALID");
    setInts(k, "strides", {2});
    setInts(k, "pads", {3, 3}); // ignored under VALID
  });
  ASSERT_TRUE(valid.isOk());
  EXPECT_EQ(valid->out[2], 2);
  EXPECT_EQ(valid->pad[2] + valid->padEnd[2], 0);
  // NOTSET keeps asymmetric pads; 3-D windows use all slots.
  StatusOr<ConvWindow> w3 = convWindowOf({1, 1, 4, 6, 8}, {1, 3, 2}, false, [](program::Kernel &k) {
    setInts(k, "pads", {0, 1, 0, 2, 0, 1});
    setInts(k, "dilations", {1, 1, 3});
  });
  ASSERT_TRUE(w3.isOk()) << w3.getStatus().toString();
  // 4+0+2-1+1 = 6, 6+1+0-3+1 = 5, 8+0+1-((2-1)*3+1)+1 = 6.
  EXPECT_EQ(windowOutputShape(2, 7, *w3), (Shape{2, 7, 6, 5, 6}));
  EXPECT_EQ(w3->pad[1], 1);
  EXPECT_EQ(w3->padEnd[1], 0);
  EXPECT_EQ(w3->padEnd[0], 2);
  EXPECT_EQ(w3->kSize(), 6);
}

// Before the window was shared, the CPU backend divided by a zero stride
// (SIGFPE: the process died) and ran a zero dilation or kernel size as if it
// were a window; now both backends reject them with the field's name.
TEST(ConvWindow, NonPositiveStrideDilationOrKernelIsAnError) {
  auto conv = runKernel("Conv", {Input::f({1, 1, 5, 5}, std::vector<float>(25, 1.0f)),
                                 Input::f({1, 1, 2, 2}, std::vector<float>(4, 1.0f))},
                        {{program::DTYPE_F32, {1, 1, 4, 4}}},
                        [](program::Kernel &k) { setInts(k, "strides", {0, 1}); });
  ASSERT_FALSE(conv.isOk());
  EXPECT_EQ(conv.getStatus().getCode(), StatusCode::InvalidArgument);
  EXPECT_NE(conv.getStatus().toString().find("Conv"), std::string::npos);
  EXPECT_NE(conv.getStatus().toString().find(
                "strides must be positive, got 0 along spatial dim 0"),
            std::string::npos)
      << conv.getStatus().toString();
  auto pool = runKernel("MaxPool", {Input::f({1, 1, 5, 5}, std::vector<float>(25, 1.0f))},
                        {{program::DTYPE_F32, {1, 1, 5, 5}}}, [](program::Kernel &k) {
                          setInts(k, "kernel_shape", {2, 2});
                          setString(k, "auto_pad", "SAME_UPPER");
                          setInts(k, "strides", {1, 0});
                        });
  ASSERT_FALSE(pool.isOk());
  EXPECT_NE(pool.getStatus().toString().find("strides must be positive, got 0 along spatial "
                                             "dim 1"),
            std::string::npos)
      << pool.getStatus().toString();
  auto dil = runKernel("Conv", {Input::f({1, 1, 5}, std::vector<float>(5, 1.0f)),
                                Input::f({1, 1, 2}, std::vector<float>(2, 1.0f))},
                       {{program::DTYPE_F32, {1, 1, 5}}},
                       [](program::Kernel &k) { setInts(k, "dilations", {0}); });
  ASSERT_FALSE(dil.isOk());
  EXPECT_NE(dil.getStatus().toString().find("dilations must be positive, got 0"),
            std::string::npos)
      << dil.getStatus().toString();
  // A zero kernel_shape used to give MaxPool -inf everywhere.
  auto empty = runKernel("MaxPool", {Input::f({1, 1, 5}, std::vector<float>(5, 1.0f))},
                         {{program::DTYPE_F32, {1, 1, 6}}},
                         [](program::Kernel &k) { setInts(k, "kernel_shape", {0}); });
  ASSERT_FALSE(empty.isOk());
  EXPECT_NE(empty.getStatus().toString().find("kernel_shape must be positive, got 0"),
            std::string::npos)
      << empty.getStatus().toString();
  auto grad = runKernel("ConvGradInput",
                        {Input::f({1, 1, 4}, std::vector<float>(4, 1.0f)),
                         Input::f({1, 1, 2}, std::vector<float>(2, 1.0f))},
                        {{program::DTYPE_F32, {1, 1, 5}}}, [](program::Kernel &k) {
                          k.set_domain("strait");
                          setInts(k, "input_shape", {1, 1, 5});
                          setInts(k, "strides", {-1});
                        });
  ASSERT_FALSE(grad.isOk());
  EXPECT_NE(grad.getStatus().toString().find("strides must be positive, got -1"),
            std::string::npos)
      << grad.getStatus().toString();
}

// count_include_pad counts the pads at both ends (the end pad used to be
// taken as the begin pad), not ceil-mode overhang. Expected values from
// onnxruntime 1.32 (AveragePool, opset 19) on x = 1..5.
TEST(ConvWindow, AveragePoolCountsTheEndPaddingAsOnnxruntime) {
  std::vector<float> x = {1, 2, 3, 4, 5};
  /// Kernel size k, stride 2, pads or an auto_pad, ceil_mode.
  auto pool = [](int64_t k, std::vector<int64_t> pads, const char *autoPad, int64_t ceil) {
    return [=](program::Kernel &kk) {
      setInts(kk, "kernel_shape", {k});
      setInts(kk, "strides", {2});
      setInts(kk, "pads", pads);
      setString(kk, "auto_pad", autoPad);
      setInt(kk, "ceil_mode", ceil);
    };
  };
  struct Case {
    const char *what;
    KernelAttrs attrs;
    std::vector<float> expect;
  };
  std::vector<Case> cases = {
      {"pads 0 1", pool(2, {0, 1}, "NOTSET", 0), {1.5f, 3.5f, 2.5f}},
      {"SAME_UPPER", pool(2, {0, 0}, "SAME_UPPER", 0), {1.5f, 3.5f, 2.5f}},
      {"SAME_LOWER", pool(2, {0, 0}, "SAME_LOWER", 0), {0.5f, 2.5f, 4.5f}},
      {"pads 1 0 ceil", pool(3, {1, 0}, "NOTSET", 1), {1.0f, 3.0f, 4.5f}},
      {"pads 1 1 ceil", pool(3, {1, 1}, "NOTSET", 1), {1.0f, 3.0f, 3.0f}},
  };
  for (const Case &c : cases) {
    auto r = runKernel("AveragePool", {Input::f({1, 1, 5}, x)}, {{program::DTYPE_F32, {1, 1, 3}}},
                       [&](program::Kernel &k) {
                         c.attrs(k);
                         setInt(k, "count_include_pad", 1);
                       });
    ASSERT_TRUE(r.isOk()) << c.what << ": " << r.getStatus().toString();
    EXPECT_EQ((*r)[0], c.expect) << c.what;
  }
  // The gradient divides by the same counts: dX of dY = 1 for "pads 0 1"
  // is 1/2 per covered element.
  auto g = runKernel("AveragePoolGrad", {Input::f({1, 1, 3}, {1, 1, 1})},
                     {{program::DTYPE_F32, {1, 1, 5}}}, [](program::Kernel &k) {
                       k.set_domain("strait");
                       setInts(k, "kernel_shape", {2});
                       setInts(k, "strides", {2});
                       setInts(k, "pads", {0, 1});
                       setInt(k, "count_include_pad", 1);
                       setInts(k, "input_shape", {1, 1, 5});
                     });
  ASSERT_TRUE(g.isOk()) << g.getStatus().toString();
  EXPECT_EQ((*g)[0], (std::vector<float>{0.5f, 0.5f, 0.5f, 0.5f, 0.5f}));
}

// The operand checks that both backends share (rt::convGradInputArgs,
// convGradWeightArgs) reject shapes below rank 3 before indexing a channel
// dim (each backend's copy used to read input_shape[1] / weight_shape[1]
// past the end of a 1-entry attribute).
TEST(ConvWindow, ConvGradientsOfRankOneAreErrors) {
  auto in = runKernel("ConvGradInput",
                      {Input::f({4}, std::vector<float>(4, 1.0f)),
                       Input::f({4}, std::vector<float>(4, 1.0f))},
                      {{program::DTYPE_F32, {4}}},
                      [](program::Kernel &k) { setInts(k, "input_shape", {4}); });
  ASSERT_FALSE(in.isOk());
  EXPECT_EQ(in.getStatus().getCode(), StatusCode::InvalidArgument);
  EXPECT_NE(in.getStatus().toString().find("and input_shape [4] do not fit"), std::string::npos)
      << in.getStatus().toString();
  auto wt = runKernel("ConvGradWeight",
                      {Input::f({4}, std::vector<float>(4, 1.0f)),
                       Input::f({4}, std::vector<float>(4, 1.0f))},
                      {{program::DTYPE_F32, {4}}},
                      [](program::Kernel &k) { setInts(k, "weight_shape", {4}); });
  ASSERT_FALSE(wt.isOk());
  EXPECT_NE(wt.getStatus().toString().find("and weight_shape [4] do not fit"), std::string::npos)
      << wt.getStatus().toString();
}
