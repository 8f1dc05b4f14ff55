//===- GradientTest.cpp - Backward kernels against finite differences -----===//
//
// For a forward op F and a random cotangent R, the loss L(x) = <F(x), R>
// has dL/dx = the backward kernel applied to dY = R. Each test compares the
// backward kernel with central differences of the forward kernel.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

using Attrs = std::function<void(program::Kernel &)>;

/// <F(inputs)[output 0], r>
double lossOf(const std::string &op, const std::vector<Input> &ins, const Output &out,
              const Attrs &attrs, const std::vector<float> &r) {
  auto res = runKernel(op, ins, {out}, attrs);
  EXPECT_TRUE(res.isOk()) << res.getStatus().toString();
  if (!res.isOk())
    return NAN;
  double l = 0;
  for (size_t i = 0; i < r.size(); ++i)
    l += double((*res)[0][i]) * r[i];
  return l;
}

std::vector<float> numericGrad(const std::string &op, std::vector<Input> ins, size_t which,
                               const Output &out, const Attrs &attrs,
                               const std::vector<float> &r, float eps = 1e-2f) {
  std::vector<float> g(ins[which].f32.size());
  for (size_t i = 0; i < g.size(); ++i) {
    float saved = ins[which].f32[i];
    ins[which].f32[i] = saved + eps;
    double up = lossOf(op, ins, out, attrs, r);
    ins[which].f32[i] = saved - eps;
    double down = lossOf(op, ins, out, attrs, r);
    ins[which].f32[i] = saved;
    g[i] = static_cast<float>((up - down) / (2 * eps));
  }
  return g;
}

void expectClose(const std::vector<float> &analytic, const std::vector<float> &numeric,
                 const char *what) {
  ASSERT_EQ(analytic.size(), numeric.size()) << what;
  for (size_t i = 0; i < analytic.size(); ++i)
    EXPECT_NEAR(analytic[i], numeric[i], 2e-2 + 2e-2 * std::abs(numeric[i]))
        << what << " element " << i;
}

std::vector<float> run1(const std::string &op, const std::vector<Input> &ins,
                        const std::vector<Output> &outs, const Attrs &attrs, size_t which = 0) {
  auto res = runKernel(op, ins, outs, attrs);
  EXPECT_TRUE(res.isOk()) << op << ": " << res.getStatus().toString();
  return res.isOk() ? (*res)[which] : std::vector<float>();
}

const program::DType F32 = program::DTYPE_F32;

} // namespace

TEST(Gradients, SoftmaxAndLogSoftmax) {
  Shape s = {2, 5};
  auto x = pseudoRandom(10, 1), r = pseudoRandom(10, 2);
  Attrs axis = [](program::Kernel &k) { setInt(k, "axis", 1); };
  for (std::string op : {"Softmax", "LogSoftmax"}) {
    auto y = run1(op, {Input::f(s, x)}, {{F32, s}}, axis);
    auto dx = run1(op + "Grad", {Input::f(s, r), Input::f(s, y)}, {{F32, s}}, axis);
    expectClose(dx, numericGrad(op, {Input::f(s, x)}, 0, {F32, s}, axis, r), op.c_str());
  }
}

TEST(Gradients, GeluExactAndTanh) {
  Shape s = {7};
  auto x = pseudoRandom(7, 3), r = pseudoRandom(7, 4);
  for (std::string approx : {"none", "tanh"}) {
    Attrs a = [&](program::Kernel &k) { setString(k, "approximate", approx); };
    auto dx = run1("GeluGrad", {Input::f(s, r), Input::f(s, x)}, {{F32, s}}, a);
    expectClose(dx, numericGrad("Gelu", {Input::f(s, x)}, 0, {F32, s}, a, r), approx.c_str());
  }
}

TEST(Gradients, LayerNormalizationAllThreeOutputs) {
  Shape s = {3, 6}, p = {6};
  auto x = pseudoRandom(18, 5), sc = pseudoRandom(6, 6), b = pseudoRandom(6, 7),
       r = pseudoRandom(18, 8);
  std::vector<Input> fwd = {Input::f(s, x), Input::f(p, sc), Input::f(p, b)};
  Attrs none = [](program::Kernel &) {};
  auto res = runKernel("LayerNormalizationGrad",
                       {Input::f(s, r), Input::f(s, x), Input::f(p, sc)},
                       {{F32, s}, {F32, p}, {F32, p}});
  ASSERT_TRUE(res.isOk()) << res.getStatus().toString();
  for (size_t i = 0; i < 3; ++i)
    expectClose((*res)[i], numericGrad("LayerNormalization", fwd, i, {F32, s}, none, r),
                i == 0 ? "dX" : i == 1 ? "dScale" : "dB");
}

TEST(Gradients, ConvInputAndWeightWithGroupsStridesPads) {
  Shape xs = {2, 4, 6, 5}, ws = {6, 2, 3, 2}, ys = {2, 6, 3, 4};
  Attrs a = [](program::Kernel &k) {
    setInt(k, "group", 2);
    setInts(k, "strides", {2, 1});
    setInts(k, "pads", {1, 1, 1, 0});
    setInts(k, "dilations", {1, 2});
  };
  auto x = pseudoRandom(numElements(xs), 9), w = pseudoRandom(numElements(ws), 10);
  auto y = runKernel("Conv", {Input::f(xs, x), Input::f(ws, w)}, {{F32, ys}}, a);
  ASSERT_TRUE(y.isOk()) << y.getStatus().toString();
  auto r = pseudoRandom(numElements(ys), 11);
  std::vector<Input> fwd = {Input::f(xs, x), Input::f(ws, w)};
  auto dx = run1("ConvGradInput", {Input::f(ys, r), Input::f(ws, w)}, {{F32, xs}},
                 [&](program::Kernel &k) { a(k); setInts(k, "input_shape", xs); });
  expectClose(dx, numericGrad("Conv", fwd, 0, {F32, ys}, a, r), "dX");
  auto dw = run1("ConvGradWeight", {Input::f(ys, r), Input::f(xs, x)}, {{F32, ws}},
                 [&](program::Kernel &k) { a(k); setInts(k, "weight_shape", ws); });
  expectClose(dw, numericGrad("Conv", fwd, 1, {F32, ys}, a, r), "dW");
}

TEST(Gradients, MaxAndAveragePool) {
  Shape xs = {1, 2, 5, 5}, ys = {1, 2, 3, 3};
  Attrs a = [](program::Kernel &k) {
    setInts(k, "kernel_shape", {3, 3});
    setInts(k, "strides", {2, 2});
    setInts(k, "pads", {1, 1, 1, 1});
    setInt(k, "count_include_pad", 1);
  };
  auto x = pseudoRandom(50, 12), r = pseudoRandom(18, 13);
  auto dmax = run1("MaxPoolGrad", {Input::f(ys, r), Input::f(xs, x)}, {{F32, xs}}, a);
  expectClose(dmax, numericGrad("MaxPool", {Input::f(xs, x)}, 0, {F32, ys}, a, r, 1e-3f),
              "MaxPool");
  auto davg = run1("AveragePoolGrad", {Input::f(ys, r)}, {{F32, xs}},
                   [&](program::Kernel &k) { a(k); setInts(k, "input_shape", xs); });
  expectClose(davg, numericGrad("AveragePool", {Input::f(xs, x)}, 0, {F32, ys}, a, r),
              "AveragePool");
}

TEST(Gradients, BatchNormalizationTrainingAndGrad) {
  Shape xs = {3, 2, 2, 2}, cs = {2};
  auto x = pseudoRandom(24, 14), sc = pseudoRandom(2, 15), b = pseudoRandom(2, 16),
       r = pseudoRandom(24, 17);
  std::vector<float> rm = {0.5f, -0.5f}, rv = {1.0f, 2.0f};
  std::vector<Input> fwd = {Input::f(xs, x), Input::f(cs, sc), Input::f(cs, b),
                            Input::f(cs, rm), Input::f(cs, rv)};
  std::vector<Output> outs = {{F32, xs}, {F32, cs}, {F32, cs}, {F32, cs}, {F32, cs}};
  auto t = runKernel("BatchNormalizationTraining", fwd, outs);
  ASSERT_TRUE(t.isOk()) << t.getStatus().toString();
  // Running mean follows momentum 0.9 from the batch mean.
  double mean0 = 0;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 4; ++j)
      mean0 += x[i * 8 + j];
  mean0 /= 12;
  EXPECT_NEAR((*t)[1][0], mean0, 1e-5);
  EXPECT_NEAR((*t)[3][0], 0.9 * 0.5 + 0.1 * mean0, 1e-5);
  auto g = runKernel("BatchNormalizationGrad",
                     {Input::f(xs, r), Input::f(xs, x), Input::f(cs, sc),
                      Input::f(cs, (*t)[1]), Input::f(cs, (*t)[2])},
                     {{F32, xs}, {F32, cs}, {F32, cs}});
  ASSERT_TRUE(g.isOk()) << g.getStatus().toString();
  Attrs none = [](program::Kernel &) {};
  for (size_t i = 0; i < 3; ++i)
    expectClose((*g)[i], numericGrad("BatchNormalizationTraining", fwd, i, {F32, xs}, none, r),
                i == 0 ? "dX" : i == 1 ? "dScale" : "dB");
}

TEST(Gradients, SoftmaxCrossEntropyWeightedMeanWithIgnore) {
  Shape xs = {4, 3};
  auto x = pseudoRandom(12, 18);
  std::vector<int64_t> labels = {0, 2, 1, 2};
  std::vector<float> w = {0.5f, 1.0f, 2.0f};
  Attrs a = [](program::Kernel &k) { setInt(k, "ignore_index", 1); };
  std::vector<Input> fwd = {Input::f(xs, x), Input::i({4}, labels), Input::f({3}, w)};
  auto dx = run1("SoftmaxCrossEntropyLossGrad",
                 {Input::f({}, {1.5f}), Input::f(xs, x), Input::i({4}, labels), Input::f({3}, w)},
                 {{F32, xs}}, a);
  expectClose(dx, numericGrad("SoftmaxCrossEntropyLoss", fwd, 0, {F32, {}}, a, {1.5f}), "dScores");
}

TEST(Gradients, GatherSliceAndReduceToShape) {
  Shape ds = {5, 3};
  auto data = pseudoRandom(15, 19), r = pseudoRandom(12, 20);
  std::vector<int64_t> idx = {4, 0, 4, -1};
  auto dd = run1("GatherGrad", {Input::f({4, 3}, r), Input::i({4}, idx)}, {{F32, ds}},
                 [&](program::Kernel &k) { setInts(k, "data_shape", ds); });
  expectClose(dd, numericGrad("Gather", {Input::f(ds, data), Input::i({4}, idx)}, 0,
                              {F32, {4, 3}}, nullptr, r), "GatherGrad");
  // Slice rows 3..0 step -2 and columns 1..: dY lands in those cells only.
  auto rs = pseudoRandom(4, 21);
  Attrs sliceAttrs = [](program::Kernel &k) {
    setInts(k, "starts", {3, 1});
    setInts(k, "ends", {-10, 3});
    setInts(k, "axes", {0, 1});
    setInts(k, "steps", {-2, 1});
  };
  auto dx = run1("SliceGrad", {Input::f({2, 2}, rs)}, {{F32, ds}}, [&](program::Kernel &k) {
    sliceAttrs(k);
    setInts(k, "input_shape", ds);
  });
  ASSERT_EQ(dx.size(), 15u);
  EXPECT_EQ(dx[3 * 3 + 1], rs[0]);
  EXPECT_EQ(dx[1 * 3 + 2], rs[3]);
  EXPECT_EQ(dx[0], 0.0f);
  // A negative step along the last axis (element by element) under a
  // positive one along the first: every dY element at its cell, zeros elsewhere.
  Shape xs3 = {3, 4, 6};
  auto r3 = pseudoRandom(2 * 4 * 3, 23);
  auto dx3 = run1("SliceGrad", {Input::f({2, 4, 3}, r3)}, {{F32, xs3}}, [&](program::Kernel &k) {
    setInts(k, "starts", {1, 5});
    setInts(k, "ends", {3, -7});
    setInts(k, "axes", {0, 2});
    setInts(k, "steps", {1, -2});
    setInts(k, "input_shape", xs3);
  });
  std::vector<float> want3(numElements(xs3), 0.0f);
  for (int64_t a = 0; a < 2; ++a)
    for (int64_t b = 0; b < 4; ++b)
      for (int64_t c = 0; c < 3; ++c)
        want3[((1 + a) * 4 + b) * 6 + (5 - 2 * c)] = r3[(a * 4 + b) * 3 + c];
  EXPECT_EQ(dx3, want3);
  auto red = run1("ReduceToShape", {Input::f({2, 3, 2}, pseudoRandom(12, 22))}, {{F32, {3, 1}}},
                  [](program::Kernel &k) { setInts(k, "shape", {3, 1}); });
  auto in = pseudoRandom(12, 22);
  ASSERT_EQ(red.size(), 3u);
  EXPECT_NEAR(red[1], in[2] + in[3] + in[8] + in[9], 1e-5);
}

TEST(Gradients, AccumulateGradIsTheMeanOverMicroBatches) {
  ProgramBuilder b;
  uint32_t g = b.addValue("g", F32, {2}, program::ROLE_INPUT);
  uint32_t total = b.addValue("total", F32, {2}, program::ROLE_GRADIENT);
  program::Kernel &k = b.addKernel("AccumulateGrad", {g}, {total});
  setInt(k, "micro_batches", 2);
  for (int mb = 0; mb < 2; ++mb) {
    b.addRunStep({0});
    b.get().mutable_steps(mb)->set_micro_batch(mb);
  }
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(b.get(), reg);
  ASSERT_TRUE(exec.isOk());
  Tensor gt = *(*exec)->getValue(g), tt = *(*exec)->getValue(total);
  tt.as<float>()[0] = 100; // stale value from a previous iteration
  gt.as<float>()[0] = 2;
  ASSERT_TRUE((*exec)->runStep(0).isOk());
  gt.as<float>()[0] = 4;
  ASSERT_TRUE((*exec)->runStep(1).isOk());
  EXPECT_EQ(tt.as<float>()[0], 3.0f);
  b.get().mutable_steps(0)->clear_micro_batch();
  auto exec2 = Executor::create(b.get(), reg);
  ASSERT_TRUE(exec2.isOk());
  EXPECT_NE((*exec2)->runStep(0).getMessage().find("micro_batch set"), std::string::npos);
}

// The CPU backend folds a weight gradient's Gemm into its AccumulateGrad
// (fuseGemmAccumulation): the product is accumulated in place, beta 0 on
// the first micro-batch, alpha / M; the result equals the two kernels',
// bit for bit here (M = 4, a power of two, one K block). A product read by
// another kernel too is left alone.
TEST(Gradients, GemmFoldsIntoItsAccumulateGrad) {
  auto build = [](bool extraReader) {
    ProgramBuilder b;
    uint32_t a = b.addValue("a", F32, {5, 3}, program::ROLE_INPUT);
    uint32_t w = b.addValue("w", F32, {5, 4}, program::ROLE_INPUT);
    uint32_t g = b.addValue("g", F32, {3, 4}, program::ROLE_ACTIVATION);
    uint32_t total = b.addValue("total", F32, {3, 4}, program::ROLE_GRADIENT);
    uint32_t other = b.addValue("other", F32, {3, 4}, program::ROLE_OUTPUT);
    setInt(b.addKernel("Gemm", {a, w}, {g}), "transA", 1);
    setInt(b.addKernel("AccumulateGrad", {g}, {total}), "micro_batches", 4);
    std::vector<uint32_t> kernels = {0, 1};
    if (extraReader) {
      b.addKernel("Neg", {g}, {other});
      kernels.push_back(2);
    }
    for (int mb = 0; mb < 4; ++mb) {
      b.addRunStep(kernels);
      b.get().mutable_steps(mb)->set_micro_batch(mb);
    }
    return b.get();
  };
  BackendRegistry reg;
  registerCpuBackend(reg);
  std::vector<float> want(12, 0.0f), got;
  for (bool extra : {false, true}) {
    auto exec = Executor::create(build(extra), reg);
    ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
    const auto &steps = (*exec)->getProgram().steps();
    EXPECT_EQ(steps[0].run().kernel_ids_size(), extra ? 3 : 1) << "AccumulateGrad folded";
    Tensor tt = *(*exec)->getValueByName("total");
    std::fill(tt.as<float>(), tt.as<float>() + 12, 100.0f); // stale
    for (int mb = 0; mb < 4; ++mb) {
      std::vector<float> av = pseudoRandom(15, 10 + mb), wv = pseudoRandom(20, 20 + mb);
      std::copy(av.begin(), av.end(), (*exec)->getValue(0)->as<float>());
      std::copy(wv.begin(), wv.end(), (*exec)->getValue(1)->as<float>());
      ASSERT_TRUE((*exec)->runStep(mb).isOk());
      if (!extra) // the reference: (first ? 0 : total) + (a^T w) / 4
        for (int i = 0; i < 3; ++i)
          for (int j = 0; j < 4; ++j) {
            float dot = 0;
            for (int k = 0; k < 5; ++k)
              dot += av[k * 3 + i] * wv[k * 4 + j];
            want[i * 4 + j] = (mb ? want[i * 4 + j] : 0.0f) + dot * 0.25f;
          }
    }
    std::vector<float> result(tt.as<float>(), tt.as<float>() + 12);
    for (int i = 0; i < 12; ++i)
      EXPECT_NEAR(result[i], want[i], 1e-5) << i;
    if (!extra)
      got = result;
    else
      EXPECT_EQ(result, got) << "folded and unfused agree bit for bit";
  }
}

TEST(Gradients, ClipByGlobalNormAndSgd) {
  auto r = runKernel("ClipByGlobalNorm", {Input::f({2}, {3, 0}), Input::f({1}, {4})},
                     {{F32, {}}, {F32, {2}}, {F32, {1}}},
                     [](program::Kernel &k) { setFloat(k, "max_norm", 1.0f); });
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  EXPECT_NEAR((*r)[0][0], 5.0f, 1e-6);
  EXPECT_NEAR((*r)[1][0], 0.6f, 1e-5);
  EXPECT_NEAR((*r)[2][0], 0.8f, 1e-5);
  auto s = runKernel("SGD",
                     {Input::f({}, {0.1f}), Input::f({2}, {1, 2}), Input::f({2}, {0.5f, -1}),
                      Input::f({2}, {1, 1})},
                     {{F32, {2}}, {F32, {2}}}, [](program::Kernel &k) {
                       setFloat(k, "momentum", 0.9f);
                       setFloat(k, "weight_decay", 0.1f);
                     });
  ASSERT_TRUE(s.isOk()) << s.getStatus().toString();
  // g' = 0.5 + 0.1 = 0.6, v' = 0.9 + 0.6 = 1.5, p' = 1 - 0.15
  EXPECT_NEAR((*s)[1][0], 1.5f, 1e-6);
  EXPECT_NEAR((*s)[0][0], 0.85f, 1e-6);
}

// ResizeGrad: dX of <Resize(x), r> for nearest and linear modes, up- and
// downsampling (Resize is linear in x, so the differences are exact up to
// rounding).
TEST(Gradients, ResizeNearestAndLinear) {
  struct Config {
    const char *mode, *coord, *nearest;
    Shape ys;
  };
  Shape xs = {1, 2, 3, 4};
  for (const Config &c : {Config{"nearest", "asymmetric", "floor", {1, 2, 6, 7}},
                          Config{"nearest", "half_pixel", "round_prefer_ceil", {1, 2, 2, 3}},
                          Config{"linear", "half_pixel", "", {1, 2, 7, 5}},
                          Config{"linear", "align_corners", "", {1, 2, 5, 3}},
                          Config{"linear", "pytorch_half_pixel", "", {1, 2, 1, 6}}}) {
    Attrs a = [&](program::Kernel &k) {
      setString(k, "mode", c.mode);
      setString(k, "coordinate_transformation_mode", c.coord);
      if (*c.nearest)
        setString(k, "nearest_mode", c.nearest);
    };
    auto x = pseudoRandom(numElements(xs), 30), r = pseudoRandom(numElements(c.ys), 31);
    auto dx = run1("ResizeGrad", {Input::f(c.ys, r)}, {{F32, xs}}, a);
    std::string what = std::string(c.mode) + " " + c.coord;
    expectClose(dx, numericGrad("Resize", {Input::f(xs, x)}, 0, {F32, c.ys}, a, r),
                what.c_str());
  }
}
