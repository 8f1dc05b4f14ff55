//===- DropoutTest.cpp - The seeded DropoutTraining kernel ----------------===//
//
// DropoutTraining (runtime/lib/cpu/DropoutMask.h): the keep rate, the
// scaling, the same key giving the same mask and every part of the key
// (seed, key, iteration, micro-batch, replica) changing it, the gradient
// (the same kernel on dY) against finite differences, and the executor's
// inference form (the identity).
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

constexpr DType F32 = program::DTYPE_F32;

struct Key {
  int64_t seed = 7, key = 3, replica = 0, iteration = 12;
  int microBatch = -1;
  float ratio = 0.1f;
};

std::vector<float> ramp(int64_t n) {
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i)
    x[i] = 0.25f + static_cast<float>(i % 97) * 0.125f; // never 0
  return x;
}

/// A program of one DropoutTraining on x (and the i64 input "step").
ProgramBuilder dropoutProgram(const Key &k, int64_t n, uint32_t &x, uint32_t &step,
                              uint32_t &y) {
  ProgramBuilder b;
  x = b.addValue("x", F32, {n}, program::ROLE_INPUT);
  step = b.addValue("step", program::DTYPE_I64, {1}, program::ROLE_INPUT);
  y = b.addValue("y", F32, {n}, program::ROLE_OUTPUT);
  program::Kernel &kernel = b.addKernel("DropoutTraining", {x, step}, {y});
  setFloat(kernel, "ratio", k.ratio);
  setInt(kernel, "key", k.key);
  setInt(kernel, "seed", k.seed);
  setInt(kernel, "replica", k.replica);
  b.addRunStep();
  if (k.microBatch >= 0)
    b.get().mutable_steps(0)->set_micro_batch(k.microBatch);
  return b;
}

/// y of DropoutTraining under `k` on `in`; with `inference`, its inference
/// form.
std::vector<float> dropout(const Key &k, const std::vector<float> &in, bool inference = false) {
  uint32_t x, step, y;
  ProgramBuilder b = dropoutProgram(k, in.size(), x, step, y);
  BackendRegistry reg;
  registerCpuBackend(reg);
  auto exec = Executor::create(b.get(), reg);
  EXPECT_TRUE(exec.isOk()) << exec.getStatus().toString();
  if (!exec.isOk())
    return {};
  Tensor tx = *(*exec)->getValue(x), tstep = *(*exec)->getValue(step);
  std::memcpy(tx.data, in.data(), in.size() * sizeof(float));
  tstep.as<int64_t>()[0] = k.iteration;
  EXPECT_TRUE((*exec)->setInference(inference).isOk());
  Status s = (*exec)->runStep(0);
  EXPECT_TRUE(s.isOk()) << s.toString();
  Tensor t = *(*exec)->getValue(y);
  return std::vector<float>(t.as<float>(), t.as<float>() + t.numel());
}

int64_t kept(const std::vector<float> &y) {
  int64_t n = 0;
  for (float v : y)
    n += v != 0;
  return n;
}

} // namespace

TEST(Dropout, KeepRateWithinFourSigmaOfOneMinusP) {
  const int64_t n = 100000;
  std::vector<float> x(n, 1.0f);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    Key k;
    k.ratio = p;
    double expected = n * (1.0 - p), sigma = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(static_cast<double>(kept(dropout(k, x))), expected, 4 * sigma) << "p " << p;
  }
}

TEST(Dropout, KeptElementsScaleByOneOverOneMinusP) {
  Key k;
  k.ratio = 0.25f;
  std::vector<float> x = ramp(4096), y = dropout(k, x);
  ASSERT_EQ(y.size(), x.size());
  int64_t keptCount = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    if (y[i] == 0)
      continue;
    ++keptCount;
    EXPECT_EQ(y[i], x[i] * (1.0f / 0.75f)) << i;
  }
  EXPECT_GT(keptCount, 0);
  EXPECT_LT(keptCount, static_cast<int64_t>(x.size()));
}

TEST(Dropout, SameKeySameMaskAnyPartChangesIt) {
  std::vector<float> x = ramp(20000);
  Key base;
  std::vector<float> y = dropout(base, x);
  EXPECT_EQ(y, dropout(base, x)); // bit-identical
  auto differs = [&](Key k, const char *what) {
    std::vector<float> other = dropout(k, x);
    ASSERT_EQ(other.size(), y.size());
    // Independent masks of p = 0.1 disagree on 2 p (1 - p) = 18% of the
    // elements; a shared mask on none.
    int64_t disagree = 0;
    for (size_t i = 0; i < y.size(); ++i)
      disagree += (y[i] == 0) != (other[i] == 0);
    EXPECT_NEAR(static_cast<double>(disagree) / y.size(), 0.18, 0.02) << what;
  };
  Key k = base;
  k.seed = 8;
  differs(k, "seed");
  k = base;
  k.key = 4;
  differs(k, "key");
  k = base;
  k.iteration = 13;
  differs(k, "iteration");
  k = base;
  k.replica = 1;
  differs(k, "replica");
  k = base;
  k.microBatch = 0;
  Key k1 = k;
  k1.microBatch = 1;
  std::vector<float> mb0 = dropout(k, x);
  EXPECT_EQ(mb0, dropout(k, x));
  differs(k1, "micro-batch 1 against no micro-batch");
  EXPECT_NE(mb0, dropout(k1, x)) << "micro-batches 0 and 1";
}

TEST(Dropout, GradientIsTheSameKernelOnDyAndMatchesFiniteDifferences) {
  Key k;
  k.ratio = 0.3f;
  const int64_t n = 512;
  std::vector<float> x = ramp(n), dy(n);
  for (int64_t i = 0; i < n; ++i)
    dy[i] = std::sin(0.37f * static_cast<float>(i)) + 0.1f;
  std::vector<float> y = dropout(k, x), dx = dropout(k, dy);
  // dx == dy * y / x (x != 0): the mask of the forward.
  for (int64_t i = 0; i < n; ++i)
    EXPECT_NEAR(dx[i], dy[i] * y[i] / x[i], 1e-5f) << i;
  // L(x) = sum(dy * y(x)); central differences of L at a few elements,
  // with the mask fixed by the key.
  auto loss = [&](const std::vector<float> &in) {
    std::vector<float> out = dropout(k, in);
    double l = 0;
    for (int64_t i = 0; i < n; ++i)
      l += static_cast<double>(dy[i]) * out[i];
    return l;
  };
  for (int64_t j : {0, 1, 2, 3, 100, 255, 511}) {
    const float eps = 1e-2f;
    std::vector<float> hi = x, lo = x;
    hi[j] += eps;
    lo[j] -= eps;
    double numeric = (loss(hi) - loss(lo)) / (2.0 * eps);
    EXPECT_NEAR(dx[j], numeric, 2e-3 * (1 + std::fabs(numeric))) << j;
  }
}

TEST(Dropout, InferenceFormIsTheIdentity) {
  std::vector<float> x = ramp(1000);
  Key k;
  EXPECT_NE(dropout(k, x), x);
  EXPECT_EQ(dropout(k, x, /*inference=*/true), x);
}

TEST(Dropout, BadRatioAndStepNameTheKernel) {
  auto r = runKernel("DropoutTraining", {Input::f({2}, {1, 2})}, {{F32, {2}}},
                     [](program::Kernel &k) { setFloat(k, "ratio", 1.0f); });
  ASSERT_FALSE(r.isOk());
  expectErrorNames(r.getStatus().toString(), "DropoutTraining", {"ratio"});
  r = runKernel("DropoutTraining", {Input::f({2}, {1, 2}), Input::f({1}, {3})}, {{F32, {2}}},
                [](program::Kernel &k) { setFloat(k, "ratio", 0.5f); });
  ASSERT_FALSE(r.isOk());
  expectErrorNames(r.getStatus().toString(), "DropoutTraining", {"step", "i64"});
  // Without a step input the iteration is 0; the kernel still drops.
  r = runKernel("DropoutTraining", {Input::f({64}, std::vector<float>(64, 1.0f))}, {{F32, {64}}},
                [](program::Kernel &k) { setFloat(k, "ratio", 0.5f); });
  ASSERT_TRUE(r.isOk()) << r.getStatus().toString();
  EXPECT_GT(kept((*r)[0]), 8);
  EXPECT_LT(kept((*r)[0]), 56);
}
