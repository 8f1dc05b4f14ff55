//===- KernelTest.cpp - CPU kernels against naive references --------------===//
//
// Complements the ONNX conformance run with randomized shapes the ONNX
// tests do not cover (batched broadcasting MatMul, grouped dilated Conv) and
// with error paths.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/KernelArgs.h"
#include "strait/runtime/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>
#include <memory>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {
void expectNear(const std::vector<float> &a, const std::vector<float> &b,
                float tol) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol) << "at " << i;
}
} // namespace

TEST(Kernels, AddBroadcastsNumpyStyle) {
  auto r = runKernel("Add", {Input::f({2, 1, 3}, {1, 2, 3, 4, 5, 6}),
                             Input::f({4, 1}, {10, 20, 30, 40})},
                     {{program::DTYPE_F32, {2, 4, 3}}});
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  std::vector<float> ref;
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 4; ++j)
      for (int k = 0; k < 3; ++k)
        ref.push_back((i * 3 + k + 1) + 10.0f * (j + 1));
  expectNear((*r)[0], ref, 0);
}

TEST(Kernels, IncompatibleBroadcastIsAnError) {
  auto r = runKernel("Mul", {Input::f({2, 3}, std::vector<float>(6)),
                             Input::f({4}, std::vector<float>(4))},
                     {{program::DTYPE_F32, {2, 3}}});
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.getStatus().getMessage().find("do not broadcast"), std::string::npos);
}

TEST(Kernels, BatchedMatMulBroadcastsBatchDims) {
  const int b = 3, m = 5, k = 7, n = 4;
  std::vector<float> a = pseudoRandom(b * m * k, 1), w = pseudoRandom(k * n, 2);
  auto r = runKernel("MatMul", {Input::f({b, 1, m, k}, a), Input::f({k, n}, w)},
                     {{program::DTYPE_F32, {b, 1, m, n}}});
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  std::vector<float> ref(b * m * n, 0);
  for (int bi = 0; bi < b; ++bi)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        for (int kk = 0; kk < k; ++kk)
          ref[(bi * m + i) * n + j] += a[(bi * m + i) * k + kk] * w[kk * n + j];
  expectNear((*r)[0], ref, 1e-4f);
}

// --- bf16 operands (graph-autocast's mixed precision): the CPU kernels widen
// bf16 to f32, accumulate in f32 and round results to nearest even -----------

namespace {
/// Every result equals the bf16 rounding of the double-precision reference,
/// up to one bf16 ulp where the f32 accumulation lands next to a tie.
void expectBf16(const Tensor &y, const std::vector<double> &ref) {
  ASSERT_EQ(y.dtype, program::DTYPE_BF16);
  ASSERT_EQ(static_cast<size_t>(y.numel()), ref.size());
  int exact = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    uint16_t want = bf16Bits(static_cast<float>(ref[i])), got = y.as<uint16_t>()[i];
    exact += want == got;
    ASSERT_LE(std::abs(int(want) - int(got)), 1)
        << "at " << i << ": " << bf16Value(got) << " vs " << ref[i];
  }
  EXPECT_GE(exact, static_cast<int>(ref.size() * 9 / 10));
}
} // namespace

TEST(Kernels, Bf16BatchedMatMulAccumulatesInF32AndRoundsToNearestEven) {
  const int b = 3, m = 5, k = 64, n = 4;
  std::vector<float> a = pseudoRandom(b * m * k, 11), w = pseudoRandom(k * n, 12);
  OwnedTensor ta = bf16Tensor({b, m, k}, a), tw = bf16Tensor({k, n}, w);
  OwnedTensor y(program::DTYPE_BF16, {b, m, n});
  program::Kernel kernel;
  kernel.set_op("MatMul");
  Status st = runCpu(kernel, {&ta.tensor, &tw.tensor}, {&y.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  // The reference multiplies the bf16 operands exactly (double) and rounds
  // once: what f32 accumulation gives, not a bf16-accumulated sum.
  std::vector<double> ref(b * m * n, 0);
  for (int bi = 0; bi < b; ++bi)
    for (int i = 0; i < m; ++i)
      for (int j = 0; j < n; ++j)
        for (int kk = 0; kk < k; ++kk)
          ref[(bi * m + i) * n + j] +=
              double(bf16Value(ta.tensor.as<uint16_t>()[(bi * m + i) * k + kk])) *
              bf16Value(tw.tensor.as<uint16_t>()[kk * n + j]);
  expectBf16(y.tensor, ref);
}

TEST(Kernels, Bf16GemmWithBiasAndTransB) {
  const int m = 6, k = 32, n = 5;
  std::vector<float> a = pseudoRandom(m * k, 13), w = pseudoRandom(n * k, 14),
                     c = pseudoRandom(n, 15);
  OwnedTensor ta = bf16Tensor({m, k}, a), tw = bf16Tensor({n, k}, w), tc = bf16Tensor({n}, c);
  OwnedTensor y(program::DTYPE_BF16, {m, n});
  program::Kernel kernel;
  kernel.set_op("Gemm");
  setInt(kernel, "transB", 1);
  setFloat(kernel, "alpha", 0.5f);
  Status st = runCpu(kernel, {&ta.tensor, &tw.tensor, &tc.tensor}, {&y.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  auto at = [](const OwnedTensor &t, int i) { return double(bf16Value(t.tensor.as<uint16_t>()[i])); };
  std::vector<double> ref(m * n);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j) {
      double s = 0;
      for (int kk = 0; kk < k; ++kk)
        s += at(ta, i * k + kk) * at(tw, j * k + kk);
      ref[i * n + j] = 0.5 * s + at(tc, j);
    }
  expectBf16(y.tensor, ref);
}

TEST(Kernels, Bf16ReduceToShapeSumsInF32) {
  // 512 rows: column 1 holds ones, whose bf16-accumulated sum would stall at
  // 256 (the bf16 spacing there is 2: 256 + 1 ties to even); f32
  // accumulation gives 512. Column 0 holds bf16(1.01) = 1.0078125.
  const int rows = 512, cols = 3;
  std::vector<float> x(rows * cols);
  for (int i = 0; i < rows * cols; ++i)
    x[i] = 1.0f + (i % cols == 0 ? 0.01f : 0.0f);
  OwnedTensor tx = bf16Tensor({rows, cols}, x);
  OwnedTensor y(program::DTYPE_BF16, {cols});
  program::Kernel kernel;
  kernel.set_op("ReduceToShape");
  setInts(kernel, "shape", {cols});
  Status st = runCpu(kernel, {&tx.tensor}, {&y.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  std::vector<double> ref(cols, 0);
  for (int i = 0; i < rows * cols; ++i)
    ref[i % cols] += bf16Value(tx.tensor.as<uint16_t>()[i]);
  expectBf16(y.tensor, ref);
  EXPECT_EQ(bf16Value(y.tensor.as<uint16_t>()[1]), 512.0f);
}

TEST(Kernels, Bf16MatMulKeepsShapeErrors) {
  OwnedTensor a = bf16Tensor({2, 3}, std::vector<float>(6, 1)),
              b = bf16Tensor({4, 2}, std::vector<float>(8, 1));
  OwnedTensor y(program::DTYPE_BF16, {2, 2});
  program::Kernel kernel;
  kernel.set_op("MatMul");
  Status st = runCpu(kernel, {&a.tensor, &b.tensor}, {&y.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("inner dimensions differ"), std::string::npos) << st.toString();
  EXPECT_NE(st.toString().find("MatMul"), std::string::npos) << st.toString();
}

TEST(Kernels, GroupedStridedDilatedConvMatchesNaive) {
  const int n = 2, c = 4, h = 9, w = 8, m = 6, g = 2, kh = 3, kw = 2;
  const int sh = 2, sw = 1, dh = 2, dw = 1, ph = 1, pw = 1;
  int oh = (h + 2 * ph - (dh * (kh - 1) + 1)) / sh + 1;
  int ow = (w + 2 * pw - (dw * (kw - 1) + 1)) / sw + 1;
  std::vector<float> x = pseudoRandom(n * c * h * w, 5);
  std::vector<float> wt = pseudoRandom(m * (c / g) * kh * kw, 6);
  std::vector<float> bias = pseudoRandom(m, 7);
  auto r = runKernel("Conv",
                     {Input::f({n, c, h, w}, x), Input::f({m, c / g, kh, kw}, wt),
                      Input::f({m}, bias)},
                     {{program::DTYPE_F32, {n, m, oh, ow}}},
                     [&](program::Kernel &k) {
                       setInt(k, "group", g);
                       setInts(k, "strides", {sh, sw});
                       setInts(k, "dilations", {dh, dw});
                       setInts(k, "pads", {ph, pw, ph, pw});
                     });
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  std::vector<float> ref;
  for (int in = 0; in < n; ++in)
    for (int oc = 0; oc < m; ++oc)
      for (int y = 0; y < oh; ++y)
        for (int xo = 0; xo < ow; ++xo) {
          float acc = bias[oc];
          int grp = oc / (m / g);
          for (int ic = 0; ic < c / g; ++ic)
            for (int ky = 0; ky < kh; ++ky)
              for (int kx = 0; kx < kw; ++kx) {
                int iy = y * sh - ph + ky * dh, ix = xo * sw - pw + kx * dw;
                if (iy < 0 || iy >= h || ix < 0 || ix >= w)
                  continue;
                int chan = grp * (c / g) + ic;
                acc += x[((in * c + chan) * h + iy) * w + ix] *
                       wt[((oc * (c / g) + ic) * kh + ky) * kw + kx];
              }
          ref.push_back(acc);
        }
  expectNear((*r)[0], ref, 1e-4f);
}

TEST(Kernels, SoftmaxRowsSumToOneAndAreStable) {
  std::vector<float> x = {1000, 1001, 1002, -5, 0, 5};
  auto r = runKernel("Softmax", {Input::f({2, 3}, x)}, {{program::DTYPE_F32, {2, 3}}});
  ASSERT_TRUE(r.isOk());
  for (int row = 0; row < 2; ++row) {
    float s = 0;
    for (int j = 0; j < 3; ++j) {
      ASSERT_TRUE(std::isfinite((*r)[0][row * 3 + j]));
      s += (*r)[0][row * 3 + j];
    }
    EXPECT_NEAR(s, 1.0f, 1e-6f);
  }
  EXPECT_NEAR((*r)[0][2], 1.0f / (1 + std::exp(-1.0f) + std::exp(-2.0f)), 1e-6f);
}

TEST(Kernels, LayerNormalizationOverLastAxis) {
  std::vector<float> x = {1, 2, 3, 4, -1, 0, 1, 2};
  auto r = runKernel("LayerNormalization",
                     {Input::f({2, 4}, x), Input::f({4}, {1, 1, 2, 2}),
                      Input::f({4}, {0, 0, 0, 1})},
                     {{program::DTYPE_F32, {2, 4}}},
                     [](program::Kernel &k) { setFloat(k, "epsilon", 0.0f); });
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  float inv = 1.0f / std::sqrt(1.25f);
  std::vector<float> row = {-1.5f * inv, -0.5f * inv, 2 * 0.5f * inv, 2 * 1.5f * inv + 1};
  expectNear((*r)[0], {row[0], row[1], row[2], row[3], row[0], row[1], row[2], row[3]},
             1e-5f);
}

TEST(Kernels, GatherNegativeIndicesAndRangeCheck) {
  auto r = runKernel("Gather", {Input::f({3, 2}, {1, 2, 3, 4, 5, 6}), Input::i({2}, {-1, 0})},
                     {{program::DTYPE_F32, {2, 2}}});
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  expectNear((*r)[0], {5, 6, 1, 2}, 0);
  auto bad = runKernel("Gather", {Input::f({3, 2}, {1, 2, 3, 4, 5, 6}), Input::i({1}, {3})},
                       {{program::DTYPE_F32, {1, 2}}});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.getStatus().getMessage().find("index 3 out of range"), std::string::npos);
}

TEST(Kernels, TransposeAndReshapeCheckDeclaredShapes) {
  auto r = runKernel("Transpose", {Input::f({2, 3}, {1, 2, 3, 4, 5, 6})},
                     {{program::DTYPE_F32, {3, 2}}});
  ASSERT_TRUE(r.isOk());
  expectNear((*r)[0], {1, 4, 2, 5, 3, 6}, 0);
  auto bad = runKernel("Reshape", {Input::f({2, 3}, std::vector<float>(6)), Input::i({2}, {-1, 2})},
                       {{program::DTYPE_F32, {2, 3}}});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.getStatus().getMessage().find("declared f32[2x3] but the op computes f32[3x2]"),
            std::string::npos) << bad.getStatus().getMessage();
}

// A shape constant from a hostile program: entries whose product overflows
// (UB, found by the program fuzzer's UBSan build) or below -1 are errors.
TEST(Kernels, ReshapeRejectsOverflowingAndNegativeShapes) {
  auto wrap = runKernel("Reshape",
                        {Input::f({0}, {}), Input::i({3}, {int64_t(1) << 62, 256, 0})},
                        {{program::DTYPE_F32, {0}}});
  ASSERT_FALSE(wrap.isOk());
  EXPECT_NE(wrap.getStatus().getMessage().find("shape entry 256 at 1 overflows the element count"),
            std::string::npos) << wrap.getStatus().getMessage();
  auto negative = runKernel("Reshape", {Input::f({6}, std::vector<float>(6)), Input::i({2}, {-2, -3})},
                            {{program::DTYPE_F32, {2, 3}}});
  ASSERT_FALSE(negative.isOk());
  EXPECT_NE(negative.getStatus().getMessage().find("shape entry -2 at 0 is negative"),
            std::string::npos) << negative.getStatus().getMessage();
}

TEST(Kernels, LargeElementwiseRunsInParallelCorrectly) {
  const int n = 1 << 20;
  std::vector<float> x = pseudoRandom(n, 11);
  auto r = runKernel("Gelu", {Input::f({n}, x)}, {{program::DTYPE_F32, {n}}});
  ASSERT_TRUE(r.isOk());
  for (int i = 0; i < n; i += 4099)
    ASSERT_NEAR((*r)[0][i], 0.5f * x[i] * (1 + std::erf(x[i] / std::sqrt(2.0f))), 1e-6f);
}

namespace {

/// The tensors of a one-kernel program: AdamW in place over n parameters
/// (lr a constant, the step an input), on the CPU backend.
struct AdamWProgram {
  ProgramBuilder b;
  BackendRegistry reg;
  std::unique_ptr<Executor> exec;
  Tensor step, x, g, m, v;
};

std::unique_ptr<AdamWProgram> adamWProgram(int64_t n, float lr, float weightDecay) {
  auto p = std::make_unique<AdamWProgram>();
  ProgramBuilder &b = p->b;
  uint32_t lrId = b.addConstant("lr", {lr}, {});
  uint32_t step = b.addValue("step", program::DTYPE_I64, {}, program::ROLE_INPUT);
  uint32_t x = b.addParameter("x", {n});
  uint32_t g = b.addValue("g", program::DTYPE_F32, {n}, program::ROLE_INPUT); // filled by the test
  uint32_t m = b.addValue("m", program::DTYPE_F32, {n}, program::ROLE_OPTIMIZER_STATE);
  uint32_t v = b.addValue("v", program::DTYPE_F32, {n}, program::ROLE_OPTIMIZER_STATE);
  program::Kernel &k = b.addKernel("AdamW", {lrId, step, x, g, m, v}, {x, m, v});
  k.set_domain("strait");
  setFloat(k, "weight_decay", weightDecay);
  b.addRunStep();
  registerCpuBackend(p->reg);
  auto exec = Executor::create(b.get(), p->reg);
  EXPECT_TRUE(exec.isOk()) << exec.getStatus().toString();
  if (!exec.isOk())
    return nullptr;
  p->exec = exec.takeValue();
  p->step = *p->exec->getValue(step);
  p->x = *p->exec->getValue(x);
  p->g = *p->exec->getValue(g);
  p->m = *p->exec->getValue(m);
  p->v = *p->exec->getValue(v);
  return p;
}

} // namespace

TEST(Kernels, AdamWUpdatesInPlaceLikeTheReference) {
  auto p = adamWProgram(3, 0.01f, 0.1f);
  ASSERT_TRUE(p);
  Tensor xt = p->x, gt = p->g, st = p->step;
  auto &exec = p->exec;
  double rx[3] = {1, -2, 0.5}, rm[3] = {0, 0, 0}, rv[3] = {0, 0, 0};
  for (int i = 0; i < 3; ++i)
    xt.as<float>()[i] = static_cast<float>(rx[i]);
  for (int t = 1; t <= 3; ++t) {
    st.as<int64_t>()[0] = t;
    for (int i = 0; i < 3; ++i) {
      double grad = 0.3 * (i + 1) * t - 0.5;
      gt.as<float>()[i] = static_cast<float>(grad);
      rm[i] = 0.9 * rm[i] + 0.1 * grad;
      rv[i] = 0.999 * rv[i] + 0.001 * grad * grad;
      double mh = rm[i] / (1 - std::pow(0.9, t)), vh = rv[i] / (1 - std::pow(0.999, t));
      rx[i] -= 0.01 * (mh / (std::sqrt(vh) + 1e-8) + 0.1 * rx[i]);
    }
    Status s = exec->run();
    ASSERT_TRUE(s.isOk()) << s.toString();
  }
  for (int i = 0; i < 3; ++i)
    EXPECT_NEAR(xt.as<float>()[i], rx[i], 1e-5) << i;
  st.as<int64_t>()[0] = 0;
  EXPECT_NE(exec->run().getMessage().find("step count must start at 1"), std::string::npos);
}

// The vectorized update (AVX2 clone where the CPU has it) in place over
// more elements than one parallel chunk, with a tail that is no multiple of
// the vector width: the bits of the scalar float formula, at every element.
TEST(Kernels, AdamWInPlaceEqualsTheScalarFormulaBitForBit) {
  constexpr int64_t n = 40003;
  auto p = adamWProgram(n, 0.003f, 0.01f);
  ASSERT_TRUE(p);
  Tensor xt = p->x, gt = p->g, mt = p->m, vt = p->v;
  p->step.as<int64_t>()[0] = 3;
  std::vector<float> rx = pseudoRandom(n, 31), rg = pseudoRandom(n, 32), rm = pseudoRandom(n, 33),
                     rv = pseudoRandom(n, 34);
  for (float &e : rv)
    e = e * e; // a second moment is not negative
  std::copy(rx.begin(), rx.end(), xt.as<float>());
  std::copy(rg.begin(), rg.end(), gt.as<float>());
  std::copy(rm.begin(), rm.end(), mt.as<float>());
  std::copy(rv.begin(), rv.end(), vt.as<float>());
  ASSERT_TRUE(p->exec->run().isOk());
  const float b1 = 0.9f, b2 = 0.999f, eps = 1e-8f, wd = 0.01f, rate = 0.003f;
  const float c1 = 1 - static_cast<float>(std::pow(double(b1), 3.0));
  const float c2 = 1 - static_cast<float>(std::pow(double(b2), 3.0));
  int bad = 0;
  for (int64_t i = 0; i < n && bad < 5; ++i) {
    float mn = b1 * rm[i] + (1 - b1) * rg[i];
    float vn = b2 * rv[i] + (1 - b2) * rg[i] * rg[i];
    float update = (mn / c1) / (std::sqrt(vn / c2) + eps);
    float xn = rx[i] - rate * (update + wd * rx[i]);
    if (xt.as<float>()[i] != xn || mt.as<float>()[i] != mn || vt.as<float>()[i] != vn) {
      ADD_FAILURE() << "element " << i << ": x " << xt.as<float>()[i] << " vs " << xn;
      ++bad;
    }
  }
}

TEST(Kernels, SoftmaxCrossEntropyMeanWithIgnoredLabel) {
  std::vector<float> x = {2, 1, 0, 0, 0, 3, 1, 1, 1};
  auto r = runKernel("SoftmaxCrossEntropyLoss",
                     {Input::f({3, 3}, x), Input::i({3}, {0, 2, -1})},
                     {{program::DTYPE_F32, {}}, {program::DTYPE_F32, {3, 3}}},
                     [](program::Kernel &k) { setInt(k, "ignore_index", -1); });
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  double l0 = -(2 - std::log(std::exp(2.0) + std::exp(1.0) + 1));
  double l1 = -(3 - std::log(2 + std::exp(3.0)));
  EXPECT_NEAR((*r)[0][0], (l0 + l1) / 2, 1e-5);
  EXPECT_NEAR((*r)[1][8], -std::log(3.0), 1e-5); // log_prob of the uniform row
  auto bad = runKernel("SoftmaxCrossEntropyLoss",
                       {Input::f({3, 3}, x), Input::i({3}, {0, 3, 1})},
                       {{program::DTYPE_F32, {}}});
  ASSERT_FALSE(bad.isOk());
  EXPECT_NE(bad.getStatus().getMessage().find("target 3 outside [0, 3)"), std::string::npos);
}

// --- SoftmaxCrossEntropyLoss(Grad) on bf16 / f16 scores (graph-cast-motion
// folds the casts around them): bit for bit the f32 kernels on the scores
// cast to f32, the gradient then cast back by the Cast kernel -------------

namespace {

struct SceCase {
  const char *name;
  Shape scores;           // [N, C] or [N, C, D]
  std::vector<int64_t> labels;
  bool weighted;
  const char *reduction;  // mean (ignore_index 1), sum or none
};

/// Scores of magnitude up to 8 (wide softmax) that 16-bit types round.
std::vector<float> sceScores(const Shape &shape, uint32_t seed) {
  std::vector<float> v = pseudoRandom(numElements(shape), seed);
  for (float &x : v)
    x = x * 8.0f + 0.013f;
  return v;
}

} // namespace

TEST(Kernels, LowPrecisionSoftmaxCrossEntropyEqualsF32OfCast) {
  const SceCase cases[] = {
      {"mean_ignore", {6, 37}, {0, 1, 36, 5, 1, 20}, false, "mean"},
      {"sum_weighted_3d", {3, 5, 4}, {0, 4, 2, 1, 3, 3, 0, 1, 2, 4, 4, 0}, true, "sum"},
      {"none", {4, 9}, {8, 0, 3, 1}, true, "none"}};
  for (DType low : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (const SceCase &c : cases) {
      SCOPED_TRACE(std::string(c.name) + (low == program::DTYPE_BF16 ? " bf16" : " f16"));
      Shape ls = c.labels.size() == static_cast<size_t>(c.scores[0])
                     ? Shape{c.scores[0]}
                     : Shape{c.scores[0], c.scores[2]};
      int64_t classes = c.scores[1];
      OwnedTensor f32(program::DTYPE_F32, c.scores);
      std::vector<float> v = sceScores(c.scores, 61);
      std::copy(v.begin(), v.end(), f32.tensor.as<float>());
      OwnedTensor x = castTo(f32.tensor, low);   // the 16-bit scores
      OwnedTensor xw = castTo(x.tensor, program::DTYPE_F32); // Cast(T -> f32)
      if (low == program::DTYPE_BF16) // the Cast agrees with an independent rounding
        for (int64_t i = 0; i < x.tensor.numel(); ++i)
          ASSERT_EQ(x.tensor.as<uint16_t>()[i], bf16Bits(v[i])) << i;
      OwnedTensor labels(program::DTYPE_I64, ls);
      std::copy(c.labels.begin(), c.labels.end(), labels.tensor.as<int64_t>());
      OwnedTensor w(program::DTYPE_F32, {classes});
      for (int64_t k = 0; k < classes; ++k)
        w.tensor.as<float>()[k] = 0.25f + 0.5f * static_cast<float>(k % 3);
      bool none = std::string(c.reduction) == "none";
      Shape lossShape = none ? ls : Shape{};
      auto attrs = [&](program::Kernel &k) {
        setString(k, "reduction", c.reduction);
        if (std::string(c.reduction) == "mean")
          setInt(k, "ignore_index", 1);
      };
      std::vector<const Tensor *> refIns = {&xw.tensor, &labels.tensor},
                                  lowIns = {&x.tensor, &labels.tensor};
      if (c.weighted) {
        refIns.push_back(&w.tensor);
        lowIns.push_back(&w.tensor);
      }
      // Forward: the f32 loss (and an f32 log_prob) of both kernels.
      OwnedTensor refLoss(program::DTYPE_F32, lossShape), refLogp(program::DTYPE_F32, c.scores);
      OwnedTensor lowLoss(program::DTYPE_F32, lossShape), lowLogp32(program::DTYPE_F32, c.scores),
          lowLogp(low, c.scores);
      runOp("SoftmaxCrossEntropyLoss", refIns, {&refLoss.tensor, &refLogp.tensor}, attrs);
      runOp("SoftmaxCrossEntropyLoss", lowIns, {&lowLoss.tensor, &lowLogp32.tensor}, attrs);
      EXPECT_TRUE(sameBytes(lowLoss.tensor, refLoss.tensor));
      EXPECT_TRUE(sameBytes(lowLogp32.tensor, refLogp.tensor));
      // A log_prob of the scores' type: the f32 one rounded by the Cast kernel.
      OwnedTensor lowLoss2(program::DTYPE_F32, lossShape);
      runOp("SoftmaxCrossEntropyLoss", lowIns, {&lowLoss2.tensor, &lowLogp.tensor}, attrs);
      EXPECT_TRUE(sameBytes(lowLoss2.tensor, refLoss.tensor));
      EXPECT_TRUE(sameBytes(lowLogp.tensor, castTo(refLogp.tensor, low).tensor));
      // Backward: Cast(f32 -> T) of the f32 gradient of the f32 scores.
      OwnedTensor dl(program::DTYPE_F32, lossShape);
      std::vector<float> dv = pseudoRandom(std::max<int64_t>(dl.tensor.numel(), 1), 62);
      for (int64_t i = 0; i < dl.tensor.numel(); ++i)
        dl.tensor.as<float>()[i] = none ? dv[i] : 1.7f;
      refIns.insert(refIns.begin(), &dl.tensor);
      lowIns.insert(lowIns.begin(), &dl.tensor);
      OwnedTensor refGrad(program::DTYPE_F32, c.scores), lowGrad(low, c.scores);
      runOp("SoftmaxCrossEntropyLossGrad", refIns, {&refGrad.tensor}, attrs);
      runOp("SoftmaxCrossEntropyLossGrad", lowIns, {&lowGrad.tensor}, attrs);
      OwnedTensor expected = castTo(refGrad.tensor, low);
      EXPECT_TRUE(sameBytes(lowGrad.tensor, expected.tensor));
      // Not a vacuous comparison: the gradient has nonzero entries that the
      // rounding changed.
      int64_t rounded = 0;
      OwnedTensor back = castTo(expected.tensor, program::DTYPE_F32);
      for (int64_t i = 0; i < back.tensor.numel(); ++i)
        rounded += back.tensor.as<float>()[i] != refGrad.tensor.as<float>()[i];
      EXPECT_GT(rounded, 0);
    }
  }
}

TEST(Kernels, LowPrecisionSoftmaxCrossEntropyDtypeErrors) {
  OwnedTensor x = bf16Tensor({2, 3}, {1, 2, 3, 4, 5, 6});
  OwnedTensor labels(program::DTYPE_I64, {2});
  labels.tensor.as<int64_t>()[0] = 0;
  labels.tensor.as<int64_t>()[1] = 2;
  program::Kernel k;
  k.set_op("SoftmaxCrossEntropyLoss");
  // The loss of bf16 scores is f32.
  OwnedTensor bfLoss(program::DTYPE_BF16, {});
  Status st = runCpu(k, {&x.tensor, &labels.tensor}, {&bfLoss.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("output 0 must be f32 for scores bf16[2x3]"), std::string::npos)
      << st.toString();
  // Integer scores are not supported, by either kernel.
  OwnedTensor ix(program::DTYPE_I32, {2, 3}), loss(program::DTYPE_I32, {});
  st = runCpu(k, {&ix.tensor, &labels.tensor}, {&loss.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("scores of dtype"), std::string::npos) << st.toString();
  program::Kernel g;
  g.set_op("SoftmaxCrossEntropyLossGrad");
  OwnedTensor one(program::DTYPE_F32, {}), dx(program::DTYPE_I32, {2, 3});
  one.tensor.as<float>()[0] = 1;
  st = runCpu(g, {&one.tensor, &ix.tensor, &labels.tensor}, {&dx.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("scores of dtype"), std::string::npos) << st.toString();
}

// --- LayerNormalization's 16-bit Y, LayerNormalizationGrad's 16-bit dY and
// AccumulateGrad's 16-bit grad (graph-cast-motion rules 9-11): bit for bit
// the f32 kernels with the Cast kernel before (dY, grad) or after (Y) -----

namespace {

struct NormCase {
  const char *name;
  Shape x, scale;
  int64_t axis;
  bool bias;
};

/// Rows offset by 3 with spread 2: Y has values every 16-bit type rounds.
std::vector<float> normInput(const Shape &shape, uint32_t seed) {
  std::vector<float> v = pseudoRandom(numElements(shape), seed);
  for (float &x : v)
    x = 3.0f + 2.0f * x;
  return v;
}

} // namespace

TEST(Kernels, LowPrecisionLayerNormEqualsCastOfF32) {
  const NormCase cases[] = {{"rows_bias", {5, 37}, {37}, -1, true},
                            {"two_dims_no_bias", {3, 2, 8}, {2, 8}, 1, false},
                            {"broadcast_scale", {3, 2, 8}, {8}, -2, true}};
  for (DType low : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (const NormCase &c : cases) {
      SCOPED_TRACE(std::string(c.name) + (low == program::DTYPE_BF16 ? " bf16" : " f16"));
      OwnedTensor x = f32Tensor(c.x, normInput(c.x, 71));
      std::vector<float> sv = pseudoRandom(numElements(c.scale), 72), bv = pseudoRandom(numElements(c.scale), 73);
      for (float &v : sv)
        v += 1.5f;
      OwnedTensor scale = f32Tensor(c.scale, sv), bias = f32Tensor(c.scale, bv);
      std::vector<const Tensor *> ins = {&x.tensor, &scale.tensor};
      if (c.bias)
        ins.push_back(&bias.tensor);
      auto attrs = [&](program::Kernel &k) {
        setInt(k, "axis", c.axis);
        setFloat(k, "epsilon", 1e-3f);
      };
      Shape stats = c.x;
      int64_t rank = static_cast<int64_t>(c.x.size());
      for (int64_t d = c.axis < 0 ? c.axis + rank : c.axis; d < rank; ++d)
        stats[d] = 1;
      OwnedTensor ref(program::DTYPE_F32, c.x), refMean(program::DTYPE_F32, stats),
          refInv(program::DTYPE_F32, stats);
      runOp("LayerNormalization", ins, {&ref.tensor, &refMean.tensor, &refInv.tensor}, attrs);
      OwnedTensor y(low, c.x), mean(program::DTYPE_F32, stats), inv(program::DTYPE_F32, stats);
      runOp("LayerNormalization", ins, {&y.tensor, &mean.tensor, &inv.tensor}, attrs);
      OwnedTensor expected = castTo(ref.tensor, low);
      EXPECT_TRUE(sameBytes(y.tensor, expected.tensor));
      // The statistics stay f32 and are the f32 kernel's.
      EXPECT_TRUE(sameBytes(mean.tensor, refMean.tensor));
      EXPECT_TRUE(sameBytes(inv.tensor, refInv.tensor));
      // Y alone (no statistics), and a comparison that is not vacuous.
      OwnedTensor yOnly(low, c.x);
      runOp("LayerNormalization", ins, {&yOnly.tensor}, attrs);
      EXPECT_TRUE(sameBytes(yOnly.tensor, expected.tensor));
      EXPECT_GT(roundedCount(ref.tensor, expected.tensor), ref.tensor.numel() / 2);
    }
  }
}

TEST(Kernels, LowPrecisionLayerNormGradEqualsF32OfCast) {
  for (DType low : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (Shape shape : {Shape{6, 37}, Shape{2, 3, 16}}) {
      SCOPED_TRACE(shapeToString(shape) + (low == program::DTYPE_BF16 ? " bf16" : " f16"));
      int64_t len = shape.back();
      OwnedTensor x = f32Tensor(shape, normInput(shape, 81));
      std::vector<float> sv = pseudoRandom(len, 82);
      for (float &v : sv)
        v += 1.5f;
      OwnedTensor scale = f32Tensor({len}, sv);
      OwnedTensor dy32 = f32Tensor(shape, pseudoRandom(numElements(shape), 83));
      OwnedTensor dy = castTo(dy32.tensor, low);                    // the 16-bit dY
      OwnedTensor dyw = castTo(dy.tensor, program::DTYPE_F32);      // Cast(T -> f32)
      ASSERT_GT(roundedCount(dy32.tensor, dy.tensor), 0);
      auto attrs = [](program::Kernel &k) { setFloat(k, "epsilon", 1e-3f); };
      OwnedTensor rdx(program::DTYPE_F32, shape), rds(program::DTYPE_F32, {len}),
          rdb(program::DTYPE_F32, {len});
      runOp("LayerNormalizationGrad", {&dyw.tensor, &x.tensor, &scale.tensor},
            {&rdx.tensor, &rds.tensor, &rdb.tensor}, attrs);
      OwnedTensor dx(program::DTYPE_F32, shape), ds(program::DTYPE_F32, {len}),
          db(program::DTYPE_F32, {len});
      runOp("LayerNormalizationGrad", {&dy.tensor, &x.tensor, &scale.tensor},
            {&dx.tensor, &ds.tensor, &db.tensor}, attrs);
      EXPECT_TRUE(sameBytes(dx.tensor, rdx.tensor));
      EXPECT_TRUE(sameBytes(ds.tensor, rds.tensor));
      EXPECT_TRUE(sameBytes(db.tensor, rdb.tensor));
      // The rounding of dY shows in dX: the f32 dY's gradient differs.
      OwnedTensor fdx(program::DTYPE_F32, shape), fds(program::DTYPE_F32, {len}),
          fdb(program::DTYPE_F32, {len});
      runOp("LayerNormalizationGrad", {&dy32.tensor, &x.tensor, &scale.tensor},
            {&fdx.tensor, &fds.tensor, &fdb.tensor}, attrs);
      EXPECT_FALSE(sameBytes(fdx.tensor, rdx.tensor));
    }
  }
}

TEST(Kernels, LowPrecisionAccumulateGradEqualsF32OfCast) {
  for (DType low : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(low == program::DTYPE_BF16 ? "bf16" : "f16");
    program::Kernel k;
    k.set_op("AccumulateGrad");
    setInt(k, "micro_batches", 3);
    Shape shape{7, 5};
    // A stale accumulator that micro-batch 0 overwrites.
    OwnedTensor ref(program::DTYPE_F32, shape), total(program::DTYPE_F32, shape);
    std::fill(ref.tensor.as<float>(), ref.tensor.as<float>() + 35, 100.0f);
    std::fill(total.tensor.as<float>(), total.tensor.as<float>() + 35, -7.0f);
    for (int mb = 0; mb < 3; ++mb) {
      SCOPED_TRACE("micro-batch " + std::to_string(mb));
      std::vector<float> gv = pseudoRandom(35, 91 + mb);
      for (float &v : gv)
        v *= 3.0f + mb;
      OwnedTensor g32 = f32Tensor(shape, gv);
      OwnedTensor g = castTo(g32.tensor, low);
      OwnedTensor gw = castTo(g.tensor, program::DTYPE_F32);
      ASSERT_GT(roundedCount(g32.tensor, g.tensor), 0);
      Status st = runCpuInMicroBatch(k, {&gw.tensor}, {&ref.tensor}, mb);
      ASSERT_TRUE(st.isOk()) << st.toString();
      st = runCpuInMicroBatch(k, {&g.tensor}, {&total.tensor}, mb);
      ASSERT_TRUE(st.isOk()) << st.toString();
      EXPECT_TRUE(sameBytes(total.tensor, ref.tensor));
    }
    // Micro-batch checks as for an f32 grad.
    OwnedTensor g(low, shape);
    Status st = runCpuInMicroBatch(k, {&g.tensor}, {&total.tensor}, -1);
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.getMessage().find("micro_batch set"), std::string::npos) << st.toString();
    st = runCpuInMicroBatch(k, {&g.tensor}, {&total.tensor}, 3);
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.getMessage().find("micro_batch 3 >= micro_batches 3"), std::string::npos)
        << st.toString();
  }
}

// A one-micro-batch step hands a 16-bit gradient straight to the optimizer
// (the exporter drops AccumulateGrad): AdamW and SGD on it are bit for bit
// the optimizers on AccumulateGrad's f32 total of it.
TEST(Kernels, OptimizersReadLowGradientLikeAccumulateGrad) {
  Shape shape{9, 7};
  int64_t n = numElements(shape);
  auto scaled = [&](uint32_t seed, float f, float add) {
    std::vector<float> v = pseudoRandom(n, seed);
    for (float &x : v)
      x = x * f + add;
    return f32Tensor(shape, v);
  };
  OwnedTensor lr = f32Tensor({}, {0.01f});
  OwnedTensor step(program::DTYPE_I64, {});
  step.tensor.as<int64_t>()[0] = 3;
  for (DType low : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(low == program::DTYPE_BF16 ? "bf16" : "f16");
    OwnedTensor g32 = scaled(101, 2.0f, 0.0f);
    OwnedTensor g = castTo(g32.tensor, low);
    ASSERT_GT(roundedCount(g32.tensor, g.tensor), 0);
    // AccumulateGrad over one micro-batch: the f32 total the optimizer read.
    program::Kernel acc;
    acc.set_op("AccumulateGrad");
    setInt(acc, "micro_batches", 1);
    OwnedTensor total(program::DTYPE_F32, shape);
    Status st = runCpuInMicroBatch(acc, {&g.tensor}, {&total.tensor}, 0);
    ASSERT_TRUE(st.isOk()) << st.toString();
    OwnedTensor x = scaled(102, 1.0f, 0.5f), m = scaled(103, 0.1f, 0.0f),
                v = scaled(104, 0.01f, 0.02f);
    // AdamW (weight decay on) and SGD (momentum, decay, nesterov).
    OwnedTensor rx(program::DTYPE_F32, shape), rm(program::DTYPE_F32, shape),
        rv(program::DTYPE_F32, shape), ox(program::DTYPE_F32, shape),
        om(program::DTYPE_F32, shape), ov(program::DTYPE_F32, shape);
    auto adamAttrs = [](program::Kernel &k) { setFloat(k, "weight_decay", 0.1f); };
    runOp("AdamW", {&lr.tensor, &step.tensor, &x.tensor, &total.tensor, &m.tensor, &v.tensor},
          {&rx.tensor, &rm.tensor, &rv.tensor}, adamAttrs);
    runOp("AdamW", {&lr.tensor, &step.tensor, &x.tensor, &g.tensor, &m.tensor, &v.tensor},
          {&ox.tensor, &om.tensor, &ov.tensor}, adamAttrs);
    EXPECT_TRUE(sameBytes(ox.tensor, rx.tensor));
    EXPECT_TRUE(sameBytes(om.tensor, rm.tensor));
    EXPECT_TRUE(sameBytes(ov.tensor, rv.tensor));
    // Not vacuous: the unrounded f32 gradient moves the moments elsewhere.
    OwnedTensor fx(program::DTYPE_F32, shape), fm(program::DTYPE_F32, shape),
        fv(program::DTYPE_F32, shape);
    runOp("AdamW", {&lr.tensor, &step.tensor, &x.tensor, &g32.tensor, &m.tensor, &v.tensor},
          {&fx.tensor, &fm.tensor, &fv.tensor}, adamAttrs);
    EXPECT_FALSE(sameBytes(fm.tensor, rm.tensor));
    auto sgdAttrs = [](program::Kernel &k) {
      setFloat(k, "momentum", 0.9f);
      setFloat(k, "weight_decay", 0.01f);
      setInt(k, "nesterov", 1);
    };
    OwnedTensor sx(program::DTYPE_F32, shape), sv(program::DTYPE_F32, shape),
        tx(program::DTYPE_F32, shape), tv(program::DTYPE_F32, shape);
    runOp("SGD", {&lr.tensor, &x.tensor, &total.tensor, &m.tensor}, {&sx.tensor, &sv.tensor},
          sgdAttrs);
    runOp("SGD", {&lr.tensor, &x.tensor, &g.tensor, &m.tensor}, {&tx.tensor, &tv.tensor},
          sgdAttrs);
    EXPECT_TRUE(sameBytes(tx.tensor, sx.tensor));
    EXPECT_TRUE(sameBytes(tv.tensor, sv.tensor));
  }
  // Only the gradients may be 16-bit: a bf16 moment or parameter is an
  // error naming the input, and so is an i32 gradient.
  OwnedTensor x(program::DTYPE_F32, shape), g(program::DTYPE_BF16, shape),
      m(program::DTYPE_F32, shape), v16(program::DTYPE_BF16, shape),
      gi(program::DTYPE_I32, shape);
  OwnedTensor ox(program::DTYPE_F32, shape), om(program::DTYPE_F32, shape),
      ov(program::DTYPE_F32, shape);
  program::Kernel adam;
  adam.set_op("AdamW");
  Status st = runCpu(adam, {&lr.tensor, &step.tensor, &x.tensor, &g.tensor, &m.tensor, &v16.tensor},
                     {&ox.tensor, &om.tensor, &ov.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("input 5 is bf16[9x7]"), std::string::npos) << st.toString();
  st = runCpu(adam, {&lr.tensor, &step.tensor, &x.tensor, &gi.tensor, &m.tensor, &m.tensor},
              {&ox.tensor, &om.tensor, &ov.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("input 3 is i32[9x7]"), std::string::npos) << st.toString();
  program::Kernel sgd;
  sgd.set_op("SGD");
  st = runCpu(sgd, {&lr.tensor, &x.tensor, &gi.tensor, &m.tensor}, {&ox.tensor, &om.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("grad i32[9x7]"), std::string::npos) << st.toString();
}

// AdamW's optional fourth output group: a 16-bit copy of each new parameter
// (the products' weights of the next iteration), bit for bit the Cast
// kernel of the new f32 parameter; an absent entry writes nothing; a wrong
// copy type is an error naming the output.
TEST(Kernels, AdamWWritesTheParametersLowCopies) {
  Shape a{5, 3}, c{7};
  OwnedTensor lr = f32Tensor({}, {0.01f});
  OwnedTensor step(program::DTYPE_I64, {});
  step.tensor.as<int64_t>()[0] = 2;
  auto rnd = [](const Shape &s, uint32_t seed, float f) {
    std::vector<float> v = pseudoRandom(numElements(s), seed);
    for (float &x : v)
      x *= f;
    return f32Tensor(s, v);
  };
  OwnedTensor xa = rnd(a, 111, 3.0f), ga = rnd(a, 112, 1.0f), ma = rnd(a, 113, 0.1f),
              va = rnd(a, 114, 0.01f), xc = rnd(c, 115, 3.0f), gc = rnd(c, 116, 1.0f),
              mc = rnd(c, 117, 0.1f), vc = rnd(c, 118, 0.01f);
  for (OwnedTensor *v : {&va, &vc})
    for (int64_t k = 0; k < v->tensor.numel(); ++k)
      v->tensor.as<float>()[k] = std::abs(v->tensor.as<float>()[k]);
  auto attrs = [](program::Kernel &k) { setFloat(k, "weight_decay", 0.1f); };
  std::vector<const Tensor *> ins = {&lr.tensor, &step.tensor, &xa.tensor, &xc.tensor,
                                     &ga.tensor, &gc.tensor,  &ma.tensor, &mc.tensor,
                                     &va.tensor, &vc.tensor};
  auto outs = [&](std::vector<OwnedTensor> &o) {
    std::vector<Tensor *> p;
    for (OwnedTensor &t : o)
      p.push_back(&t.tensor);
    return p;
  };
  auto fresh = [&] {
    std::vector<OwnedTensor> o;
    for (const Shape *s : {&a, &c, &a, &c, &a, &c})
      o.emplace_back(program::DTYPE_F32, *s);
    return o;
  };
  std::vector<OwnedTensor> ref = fresh(), got = fresh();
  runOp("AdamW", ins, outs(ref), attrs);
  for (DType low : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(low == program::DTYPE_BF16 ? "bf16" : "f16");
    OwnedTensor copyA(low, a);
    std::vector<Tensor *> o = outs(got);
    o.push_back(&copyA.tensor);
    o.push_back(nullptr); // the second tensor has no copy
    runOp("AdamW", ins, o, attrs);
    for (size_t i = 0; i < ref.size(); ++i)
      EXPECT_TRUE(sameBytes(got[i].tensor, ref[i].tensor)) << "output " << i;
    OwnedTensor expected = castTo(ref[0].tensor, low);
    EXPECT_TRUE(sameBytes(copyA.tensor, expected.tensor));
    EXPECT_GT(roundedCount(ref[0].tensor, copyA.tensor), 0);
  }
  // An f32 "copy" and a copy of another shape are errors naming the output.
  OwnedTensor wrong(program::DTYPE_F32, a), shaped(program::DTYPE_BF16, c);
  program::Kernel k;
  k.set_op("AdamW");
  for (Tensor *bad : {&wrong.tensor, &shaped.tensor}) {
    std::vector<Tensor *> o = outs(got);
    o.push_back(bad);
    o.push_back(nullptr);
    Status st = runCpu(k, ins, o);
    ASSERT_FALSE(st.isOk());
    EXPECT_NE(st.getMessage().find("output 6, the 16-bit copy of input 2 f32[5x3], is " +
                                   bad->typeString()),
              std::string::npos)
        << st.toString();
  }
  // Neither 3n nor 4n outputs.
  std::vector<Tensor *> o = outs(got);
  o.push_back(nullptr);
  Status st = runCpu(k, ins, o);
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("expected 6 outputs (or 8 with the parameters' 16-bit copies), "
                                 "got 7"),
            std::string::npos)
      << st.toString();
}

TEST(Kernels, LowPrecisionNormAndAccumulateDtypeErrors) {
  OwnedTensor x(program::DTYPE_F32, {2, 3}), s(program::DTYPE_F32, {3});
  std::fill(s.tensor.as<float>(), s.tensor.as<float>() + 3, 1.0f);
  OwnedTensor dx(program::DTYPE_F32, {2, 3}), ds(program::DTYPE_F32, {3}), db(program::DTYPE_F32, {3});
  program::Kernel grad;
  grad.set_op("LayerNormalizationGrad");
  OwnedTensor idy(program::DTYPE_I32, {2, 3});
  Status st = runCpu(grad, {&idy.tensor, &x.tensor, &s.tensor},
                     {&dx.tensor, &ds.tensor, &db.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("dY of dtype i32[2x3]"), std::string::npos) << st.toString();
  // A 16-bit Y needs an f32 X: an i32 Y is not a rounding of it.
  program::Kernel norm;
  norm.set_op("LayerNormalization");
  OwnedTensor iy(program::DTYPE_I32, {2, 3});
  st = runCpu(norm, {&x.tensor, &s.tensor}, {&iy.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("output 0 is declared i32[2x3]"), std::string::npos)
      << st.toString();
  // AccumulateGrad: an f64 grad is unsupported; a bf16 grad's total is f32.
  program::Kernel acc;
  acc.set_op("AccumulateGrad");
  OwnedTensor g64(program::DTYPE_F64, {3}), t64(program::DTYPE_F64, {3});
  st = runCpu(acc, {&g64.tensor}, {&t64.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("grad of dtype f64[3]"), std::string::npos) << st.toString();
  OwnedTensor g16(program::DTYPE_BF16, {3}), t16(program::DTYPE_BF16, {3});
  st = runCpu(acc, {&g16.tensor}, {&t16.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("output 0 is declared bf16[3] but the op computes f32[3]"),
            std::string::npos)
      << st.toString();
}

// RMSNormalization (opset 23) and RMSNormalizationGrad against a double
// precision reference written from the definitions.
namespace {
struct RmsRef {
  std::vector<double> y, dx, dScale;
};
RmsRef rmsReference(const std::vector<float> &x, const std::vector<float> &scale,
                    const std::vector<float> &dy, int64_t rows, int64_t len, double eps) {
  RmsRef r;
  r.y.resize(x.size());
  r.dx.resize(x.size());
  r.dScale.assign(len, 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    double ss = 0;
    for (int64_t j = 0; j < len; ++j)
      ss += double(x[i * len + j]) * x[i * len + j];
    double inv = 1.0 / std::sqrt(ss / len + eps);
    // dX_j = sum_k dY_k s_k dY_k/dX_j: inv * (g_j - inv^2 x_j sum_k g_k x_k / len).
    double gx = 0;
    for (int64_t k = 0; k < len; ++k)
      gx += double(dy[i * len + k]) * scale[k] * x[i * len + k];
    for (int64_t j = 0; j < len; ++j) {
      double xj = x[i * len + j];
      r.y[i * len + j] = xj * inv * scale[j];
      r.dx[i * len + j] = inv * (double(dy[i * len + j]) * scale[j] - inv * inv * xj * gx / len);
      r.dScale[j] += double(dy[i * len + j]) * xj * inv;
    }
  }
  return r;
}

void expectRelClose(const std::vector<float> &got, const std::vector<double> &ref,
                    double rel, const char *what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double scale = 0;
  for (double v : ref)
    scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], rel * scale) << what << " at " << i;
}
} // namespace

TEST(Kernels, RMSNormalizationMatchesDoubleReference) {
  // 37 rows of 300 (lanes plus a tail), mean far from zero in some rows.
  const int64_t rows = 37, len = 300;
  std::vector<float> x = pseudoRandom(rows * len, 71), s = pseudoRandom(len, 72);
  for (int64_t j = 0; j < len; ++j)
    x[5 * len + j] += 40.0f;
  auto r = runKernel("RMSNormalization", {Input::f({rows, len}, x), Input::f({len}, s)},
                     {{program::DTYPE_F32, {rows, len}}},
                     [](program::Kernel &k) { setFloat(k, "epsilon", 1e-6f); });
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  RmsRef ref = rmsReference(x, s, std::vector<float>(x.size()), rows, len, 1e-6);
  expectRelClose((*r)[0], ref.y, 2e-6, "Y");
}

TEST(Kernels, RMSNormalizationOverTrailingDimsWithBroadcastScale) {
  // axis = 1 of [3, 4, 5]: rows of 20; scale [5] broadcasts over [4, 5].
  std::vector<float> x = pseudoRandom(60, 73), s = pseudoRandom(5, 74);
  auto r = runKernel("RMSNormalization", {Input::f({3, 4, 5}, x), Input::f({5}, s)},
                     {{program::DTYPE_F32, {3, 4, 5}}},
                     [](program::Kernel &k) { setInt(k, "axis", 1); });
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  std::vector<float> dense(20);
  for (int j = 0; j < 20; ++j)
    dense[j] = s[j % 5];
  RmsRef ref = rmsReference(x, dense, std::vector<float>(60), 3, 20, 1e-5);
  expectRelClose((*r)[0], ref.y, 2e-6, "Y");
}

TEST(Kernels, RMSNormalizationRejectsAScaleThatDoesNotBroadcast) {
  auto r = runKernel("RMSNormalization",
                     {Input::f({2, 4}, std::vector<float>(8, 1)), Input::f({3}, {1, 1, 1})},
                     {{program::DTYPE_F32, {2, 4}}});
  ASSERT_FALSE(r.isOk());
  EXPECT_NE(r.getStatus().toString().find("RMSNormalization"), std::string::npos)
      << r.getStatus().toString();
  auto g = runKernel("RMSNormalizationGrad",
                     {Input::f({2, 4}, std::vector<float>(8, 1)),
                      Input::f({2, 3}, std::vector<float>(6, 1)), Input::f({4}, {1, 1, 1, 1})},
                     {{program::DTYPE_F32, {2, 4}}, {program::DTYPE_F32, {4}}});
  ASSERT_FALSE(g.isOk());
  EXPECT_NE(g.getStatus().toString().find("RMSNormalizationGrad"), std::string::npos)
      << g.getStatus().toString();
}

TEST(Kernels, RMSNormalizationGradMatchesDoubleReferenceForAnyThreadCount) {
  const int64_t rows = 150, len = 130;
  std::vector<float> x = pseudoRandom(rows * len, 75), s = pseudoRandom(len, 76),
                     dy = pseudoRandom(rows * len, 77);
  auto run = [&] {
    return runKernel("RMSNormalizationGrad",
                     {Input::f({rows, len}, dy), Input::f({rows, len}, x), Input::f({len}, s)},
                     {{program::DTYPE_F32, {rows, len}}, {program::DTYPE_F32, {len}}});
  };
  int threads = getNumThreads();
  setNumThreads(1);
  auto one = run();
  setNumThreads(4);
  auto four = run();
  setNumThreads(threads);
  ASSERT_TRUE(one.isOk()) << one.getStatus().toString();
  ASSERT_TRUE(four.isOk()) << four.getStatus().toString();
  RmsRef ref = rmsReference(x, s, dy, rows, len, 1e-5);
  expectRelClose((*one)[0], ref.dx, 1e-5, "dX");
  expectRelClose((*one)[1], ref.dScale, 1e-5, "dScale");
  // dScale's row blocks do not depend on the thread count: bit-equal.
  EXPECT_EQ((*one)[0], (*four)[0]);
  EXPECT_EQ((*one)[1], (*four)[1]);
}

// TopK orders NaN above every number (as PyTorch and NumPy do), NaNs among
// themselves by index: first with `largest`, last without; each index once.
TEST(Kernels, TopKPlacesNaNAboveEveryNumber) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  OwnedTensor x(program::DTYPE_F32, {2, 6}), k(program::DTYPE_I64, {1});
  std::vector<float> xs = {1, nan, 3, nan, -inf, 2, nan, nan, nan, nan, nan, nan};
  std::copy(xs.begin(), xs.end(), x.as<float>());
  k.as<int64_t>()[0] = 6;
  for (int64_t largest : {1, 0}) {
    OwnedTensor v(program::DTYPE_F32, {2, 6}), i(program::DTYPE_I64, {2, 6});
    runOp("TopK", {&x.tensor, &k.tensor}, {&v.tensor, &i.tensor},
          [&](program::Kernel &kernel) { setInt(kernel, "largest", largest); });
    std::vector<int64_t> want =
        largest ? std::vector<int64_t>{1, 3, 2, 5, 0, 4} : std::vector<int64_t>{4, 0, 5, 2, 1, 3};
    for (int j = 0; j < 6; ++j) {
      EXPECT_EQ(i.as<int64_t>()[j], want[j]) << "largest " << largest << " position " << j;
      EXPECT_EQ(i.as<int64_t>()[6 + j], j) << "all NaN, largest " << largest;
      float got = v.as<float>()[j], w = xs[want[j]];
      EXPECT_TRUE(got == w || (std::isnan(got) && std::isnan(w)));
    }
  }
}

// TopK of bf16 values (a bf16 router's logits): the values widened to f32
// (exact), selected, and rounded back (exact: they are the input's), so the
// result is the f32 TopK's on the widened values.
TEST(Kernels, TopKOfBf16EqualsTopKOfItsWidenedValues) {
  std::vector<float> x = pseudoRandom(10, 31);
  OwnedTensor xb(program::DTYPE_BF16, {2, 5}), xf(program::DTYPE_F32, {2, 5}),
      k(program::DTYPE_I64, {1});
  for (int i = 0; i < 10; ++i) {
    uint16_t bits = floatToBFloat16(x[i]);
    xb.as<uint16_t>()[i] = bits;
    xf.as<float>()[i] = bfloat16ToFloat(bits);
  }
  k.as<int64_t>()[0] = 3;
  OwnedTensor vb(program::DTYPE_BF16, {2, 3}), ib(program::DTYPE_I64, {2, 3}),
      vf(program::DTYPE_F32, {2, 3}), iff(program::DTYPE_I64, {2, 3});
  runOp("TopK", {&xb.tensor, &k.tensor}, {&vb.tensor, &ib.tensor});
  runOp("TopK", {&xf.tensor, &k.tensor}, {&vf.tensor, &iff.tensor});
  for (int i = 0; i < 6; ++i) {
    EXPECT_EQ(ib.as<int64_t>()[i], iff.as<int64_t>()[i]);
    EXPECT_EQ(bfloat16ToFloat(vb.as<uint16_t>()[i]), vf.as<float>()[i]);
  }
}
