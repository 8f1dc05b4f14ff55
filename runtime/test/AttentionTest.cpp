//===- AttentionTest.cpp - FusedAttention and FusedAttentionGrad on CPU ---===//
//
// The forward against the composed CPU kernels (MatMul, Mul, Add, Softmax,
// MatMul) and against a double-precision loop; the gradient against central
// finite differences of that loop on small sizes and against the analytic
// gradient in double on larger ones; bf16 against f32; and the operand
// errors, each naming the operand.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/ThreadPool.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <limits>
#include <map>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

const float kFinfoMin = -std::numeric_limits<float>::max(); // GPT-2's mask value

/// A problem: batch dims, sizes, data (dense bias over [b..., Tq, Tk] for
/// the reference, and the bias as given to the kernel with its shape).
struct Problem {
  Shape batch;
  int64_t tq, tk, d, dv;
  float scale;
  bool causal = false;
  std::vector<float> q, kt, v;
  Shape biasShape;
  std::vector<float> bias; // empty: no bias
  int64_t nBatch() const { return numElements(batch); }
  Shape shape(std::initializer_list<int64_t> tail) const {
    Shape s = batch;
    s.insert(s.end(), tail);
    return s;
  }
  /// The bias at (slice b, i, j) with numpy broadcasting.
  double biasAt(int64_t b, int64_t i, int64_t j) const {
    if (bias.empty())
      return 0;
    Shape full = shape({tq, tk});
    std::vector<int64_t> idx(full.size());
    int64_t rem = b;
    idx[full.size() - 1] = j;
    idx[full.size() - 2] = i;
    for (int64_t dim = static_cast<int64_t>(batch.size()) - 1; dim >= 0; --dim) {
      idx[dim] = rem % batch[dim];
      rem /= batch[dim];
    }
    int64_t off = 0, stride = 1, shift = full.size() - biasShape.size();
    for (int64_t dim = static_cast<int64_t>(biasShape.size()) - 1; dim >= 0; --dim) {
      if (biasShape[dim] != 1)
        off += idx[dim + shift] * stride;
      stride *= biasShape[dim];
    }
    return bias[off];
  }
};

Problem makeProblem(Shape batch, int64_t tq, int64_t tk, int64_t d, int64_t dv, uint32_t seed) {
  Problem p;
  p.batch = std::move(batch);
  p.tq = tq;
  p.tk = tk;
  p.d = d;
  p.dv = dv;
  p.scale = 1.0f / std::sqrt(static_cast<float>(d));
  int64_t nb = p.nBatch();
  p.q = gaussian(nb * tq * d, seed);
  p.kt = gaussian(nb * d * tk, seed + 1);
  p.v = gaussian(nb * tk * dv, seed + 2);
  return p;
}

/// Double-precision forward: Y [nb, tq, dv], LSE [nb, tq], P [nb, tq, tk].
struct Reference {
  std::vector<double> y, lse, p;
};

Reference reference(const Problem &pr, const std::vector<double> &q, const std::vector<double> &kt,
                    const std::vector<double> &v) {
  Reference r;
  int64_t nb = pr.nBatch(), tq = pr.tq, tk = pr.tk, d = pr.d, dv = pr.dv;
  r.y.assign(nb * tq * dv, 0);
  r.lse.assign(nb * tq, 0);
  r.p.assign(nb * tq * tk, 0);
  std::vector<double> s(tk);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < tq; ++i) {
      double mx = -INFINITY;
      for (int64_t j = 0; j < tk; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < d; ++k)
          acc += q[(b * tq + i) * d + k] * kt[(b * d + k) * tk + j];
        s[j] = double(float(pr.scale)) * acc + pr.biasAt(b, i, j);
        if (pr.causal && j > i + (tk - tq))
          s[j] = -INFINITY;
        mx = std::max(mx, s[j]);
      }
      if (mx == -INFINITY) {
        r.lse[b * tq + i] = -INFINITY;
        continue;
      }
      double sum = 0;
      for (int64_t j = 0; j < tk; ++j)
        sum += std::exp(s[j] - mx);
      r.lse[b * tq + i] = mx + std::log(sum);
      for (int64_t j = 0; j < tk; ++j) {
        double pj = std::exp(s[j] - mx) / sum;
        r.p[(b * tq + i) * tk + j] = pj;
        for (int64_t c = 0; c < dv; ++c)
          r.y[(b * tq + i) * dv + c] += pj * v[(b * tk + j) * dv + c];
      }
    }
  return r;
}

std::vector<double> toDouble(const std::vector<float> &v) {
  return std::vector<double>(v.begin(), v.end());
}

Reference reference(const Problem &pr) {
  return reference(pr, toDouble(pr.q), toDouble(pr.kt), toDouble(pr.v));
}

/// Analytic gradient in double of sum(dY * Y): dQ, dKt, dV.
struct RefGrad {
  std::vector<double> dq, dkt, dv;
};

RefGrad referenceGrad(const Problem &pr, const std::vector<float> &dyF) {
  Reference r = reference(pr);
  int64_t nb = pr.nBatch(), tq = pr.tq, tk = pr.tk, d = pr.d, dv = pr.dv;
  RefGrad g;
  g.dq.assign(nb * tq * d, 0);
  g.dkt.assign(nb * d * tk, 0);
  g.dv.assign(nb * tk * dv, 0);
  double scale = float(pr.scale);
  for (int64_t b = 0; b < nb; ++b)
    for (int64_t i = 0; i < tq; ++i) {
      const float *dy = dyF.data() + (b * tq + i) * dv;
      double drow = 0;
      for (int64_t c = 0; c < dv; ++c)
        drow += dy[c] * r.y[(b * tq + i) * dv + c];
      for (int64_t j = 0; j < tk; ++j) {
        double p = r.p[(b * tq + i) * tk + j], dp = 0;
        for (int64_t c = 0; c < dv; ++c) {
          dp += dy[c] * pr.v[(b * tk + j) * dv + c];
          g.dv[(b * tk + j) * dv + c] += p * dy[c];
        }
        double ds = p * (dp - drow) * scale;
        for (int64_t k = 0; k < d; ++k) {
          g.dq[(b * tq + i) * d + k] += ds * pr.kt[(b * d + k) * tk + j];
          g.dkt[(b * d + k) * tk + j] += ds * pr.q[(b * tq + i) * d + k];
        }
      }
    }
  return g;
}

std::vector<float> values(const Tensor &t) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = t.dtype == program::DTYPE_F32 ? t.as<float>()[i] : bf16Value(t.as<uint16_t>()[i]);
  return v;
}

program::Kernel attentionKernel(const std::string &op, float scale, bool causal) {
  program::Kernel k;
  k.set_op(op);
  k.set_name("attn");
  setFloat(k, "scale", scale);
  if (causal)
    setInt(k, "causal", 1);
  return k;
}

/// The forward's outputs, f32 inputs.
struct Forward {
  OwnedTensor y, lse;
};

StatusOr<Forward> runForward(const Problem &pr, DType dtype = program::DTYPE_F32) {
  auto make = [&](const Shape &s, const std::vector<float> &v) {
    return dtype == program::DTYPE_F32 ? f32Tensor(s, v) : bf16Tensor(s, v);
  };
  OwnedTensor q = make(pr.shape({pr.tq, pr.d}), pr.q);
  OwnedTensor kt = make(pr.shape({pr.d, pr.tk}), pr.kt);
  OwnedTensor v = make(pr.shape({pr.tk, pr.dv}), pr.v);
  OwnedTensor bias = f32Tensor(pr.biasShape, pr.bias);
  Forward f{OwnedTensor(dtype, pr.shape({pr.tq, pr.dv})),
            OwnedTensor(program::DTYPE_F32, pr.shape({pr.tq}))};
  std::vector<const Tensor *> ins = {&q.tensor, &kt.tensor, &v.tensor};
  if (!pr.bias.empty())
    ins.push_back(&bias.tensor);
  STRAIT_RETURN_IF_ERROR(runCpu(attentionKernel("FusedAttention", pr.scale, pr.causal), ins,
                                {&f.y.tensor, &f.lse.tensor}));
  return f;
}

/// Y within atol + rtol * |ref|, LSE likewise (or both -inf), no NaN.
void expectForward(const Forward &f, const Reference &r, double tol) {
  std::vector<float> y = values(f.y.tensor);
  ASSERT_EQ(y.size(), r.y.size());
  for (size_t i = 0; i < y.size(); ++i) {
    ASSERT_FALSE(std::isnan(y[i])) << "Y at " << i;
    ASSERT_NEAR(y[i], r.y[i], tol * (1 + std::abs(r.y[i]))) << "Y at " << i;
  }
  const float *lse = f.lse.tensor.as<float>();
  for (size_t i = 0; i < r.lse.size(); ++i) {
    if (r.lse[i] == -INFINITY) {
      ASSERT_EQ(lse[i], -INFINITY) << "LSE at " << i;
      continue;
    }
    ASSERT_NEAR(lse[i], r.lse[i], tol * (1 + std::abs(r.lse[i]))) << "LSE at " << i;
  }
}

void expectNear(const std::vector<float> &got, const std::vector<double> &want, double tol,
                const char *what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " at " << i;
}

} // namespace

// --- Forward ----------------------------------------------------------------

// GPT-2's exported attention: Softmax(MatMul(Q, Kt) * scale + mask) V with a
// [B, 1, T, T] mask; the fused kernel equals the composed CPU kernels.
TEST(FusedAttention, ForwardEqualsComposedKernelsWithBroadcastBias) {
  Problem pr = makeProblem({2, 3}, 70, 70, 16, 16, 1);
  pr.biasShape = {2, 1, 70, 70};
  pr.bias = gaussian(2 * 70 * 70, 9);
  auto f = runForward(pr);
  ASSERT_TRUE(f.isOk()) << f.getStatus().toString();
  OwnedTensor q = f32Tensor(pr.shape({70, 16}), pr.q), kt = f32Tensor(pr.shape({16, 70}), pr.kt),
              v = f32Tensor(pr.shape({70, 16}), pr.v), bias = f32Tensor(pr.biasShape, pr.bias),
              sc = f32Tensor({}, {pr.scale});
  Shape ss = pr.shape({70, 70});
  OwnedTensor s = runF32Op("MatMul", {&q.tensor, &kt.tensor}, ss);
  OwnedTensor s2 = runF32Op("Mul", {&s.tensor, &sc.tensor}, ss);
  OwnedTensor s3 = runF32Op("Add", {&s2.tensor, &bias.tensor}, ss);
  OwnedTensor p = runF32Op("Softmax", {&s3.tensor}, ss);
  OwnedTensor y = runF32Op("MatMul", {&p.tensor, &v.tensor}, pr.shape({70, 16}));
  std::vector<float> got = values(f->y.tensor), want = values(y.tensor);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], 2e-5f * (1 + std::abs(want[i]))) << "at " << i;
  expectForward(*f, reference(pr), 2e-5);
}

// Odd sizes (Tq=37, Tk=53, D=24, Dv=40) without bias, batch rank 0, 1, 2.
TEST(FusedAttention, ForwardOddSizesBatchRanks) {
  for (Shape batch : {Shape{}, Shape{3}, Shape{2, 3}}) {
    SCOPED_TRACE("batch " + shapeToString(batch));
    Problem pr = makeProblem(batch, 37, 53, 24, 40, 2);
    auto f = runForward(pr);
    ASSERT_TRUE(f.isOk()) << f.getStatus().toString();
    expectForward(*f, reference(pr), 2e-5);
  }
}

// Causal with Tq == Tk (130 rows: three query blocks) and Tq < Tk (the
// queries are the last Tq positions), with a [Tq, Tk] bias.
TEST(FusedAttention, ForwardCausal) {
  for (auto [tq, tk] : {std::pair<int64_t, int64_t>{130, 130}, {37, 53}}) {
    SCOPED_TRACE("Tq " + std::to_string(tq) + " Tk " + std::to_string(tk));
    Problem pr = makeProblem({2}, tq, tk, 24, 40, 3);
    pr.causal = true;
    pr.biasShape = {tq, tk};
    pr.bias = gaussian(tq * tk, 10);
    auto f = runForward(pr);
    ASSERT_TRUE(f.isOk()) << f.getStatus().toString();
    Reference r = reference(pr);
    expectForward(*f, r, 2e-5);
    // The first query sees Tk - Tq + 1 keys: changing a later key's V leaves
    // its output unchanged.
    pr.v[(tk - tq + 1) * 40] += 100;
    auto g = runForward(pr);
    ASSERT_TRUE(g.isOk());
    EXPECT_EQ(f->y.tensor.as<float>()[0], g->y.tensor.as<float>()[0]);
  }
}

// GPT-2 masks with finfo.min (-3.4e38) added to the scores; a fully masked
// row then has a uniform softmax (as the composed graph computes). A row of
// -inf has no finite score: Y = 0 and LSE = -inf, without NaN. Causal with
// Tq > Tk leaves the first queries without any key.
TEST(FusedAttention, ForwardLargeNegativeMasksAndInfRows) {
  Problem pr = makeProblem({2, 2}, 9, 11, 8, 5, 4);
  pr.biasShape = {2, 1, 9, 11};
  pr.bias.assign(2 * 9 * 11, 0.0f);
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t i = 0; i < 9; ++i)
      for (int64_t j = 0; j < 11; ++j) {
        float &m = pr.bias[(b * 9 + i) * 11 + j];
        if (j > i + 2)
          m = kFinfoMin;
        if (i == 4)
          m = kFinfoMin; // all masked by finfo.min: uniform
        if (i == 6)
          m = -INFINITY; // no finite score
      }
  auto f = runForward(pr);
  ASSERT_TRUE(f.isOk()) << f.getStatus().toString();
  Reference r = reference(pr);
  expectForward(*f, r, 2e-5);
  for (int64_t b = 0; b < 4; ++b) {
    EXPECT_EQ(f->lse.tensor.as<float>()[b * 9 + 6], -INFINITY);
    for (int64_t c = 0; c < 5; ++c)
      EXPECT_EQ(f->y.tensor.as<float>()[(b * 9 + 6) * 5 + c], 0.0f);
  }

  Problem wide = makeProblem({2}, 12, 5, 8, 5, 5);
  wide.causal = true; // query i sees keys j <= i - 7
  auto g = runForward(wide);
  ASSERT_TRUE(g.isOk()) << g.getStatus().toString();
  Reference rw = reference(wide);
  expectForward(*g, rw, 2e-5);
  EXPECT_EQ(g->lse.tensor.as<float>()[0], -INFINITY);
  EXPECT_NE(g->lse.tensor.as<float>()[7], -INFINITY);
}

// --- Gradient ---------------------------------------------------------------

namespace {

struct Backward {
  OwnedTensor dq, dkt, dv;
};

/// Forward then FusedAttentionGrad with upstream gradient dY (f32 values,
/// given to the kernels in `dtype`).
StatusOr<Backward> runBackward(const Problem &pr, const std::vector<float> &dy,
                               DType dtype = program::DTYPE_F32) {
  STRAIT_ASSIGN_OR_RETURN(Forward f, runForward(pr, dtype));
  auto make = [&](const Shape &s, const std::vector<float> &v) {
    return dtype == program::DTYPE_F32 ? f32Tensor(s, v) : bf16Tensor(s, v);
  };
  OwnedTensor q = make(pr.shape({pr.tq, pr.d}), pr.q);
  OwnedTensor kt = make(pr.shape({pr.d, pr.tk}), pr.kt);
  OwnedTensor v = make(pr.shape({pr.tk, pr.dv}), pr.v);
  OwnedTensor tdy = make(pr.shape({pr.tq, pr.dv}), dy);
  OwnedTensor bias = f32Tensor(pr.biasShape, pr.bias);
  Backward g{OwnedTensor(dtype, q.tensor.shape), OwnedTensor(dtype, kt.tensor.shape),
             OwnedTensor(dtype, v.tensor.shape)};
  std::vector<const Tensor *> ins = {&tdy.tensor, &q.tensor,   &kt.tensor,
                                     &v.tensor,   &f.y.tensor, &f.lse.tensor};
  if (!pr.bias.empty())
    ins.push_back(&bias.tensor);
  STRAIT_RETURN_IF_ERROR(runCpu(attentionKernel("FusedAttentionGrad", pr.scale, pr.causal), ins,
                                {&g.dq.tensor, &g.dkt.tensor, &g.dv.tensor}));
  return g;
}

/// sum(dY * Y) of the double reference.
double loss(const Problem &pr, const std::vector<double> &q, const std::vector<double> &kt,
            const std::vector<double> &v, const std::vector<float> &dy) {
  Reference r = reference(pr, q, kt, v);
  double l = 0;
  for (size_t i = 0; i < r.y.size(); ++i)
    l += dy[i] * r.y[i];
  return l;
}

/// Central differences of loss() in double for every element of Q, Kt, V.
RefGrad finiteDifferences(const Problem &pr, const std::vector<float> &dy) {
  std::vector<double> x[3] = {toDouble(pr.q), toDouble(pr.kt), toDouble(pr.v)};
  std::vector<double> *out[3];
  RefGrad g;
  out[0] = &g.dq;
  out[1] = &g.dkt;
  out[2] = &g.dv;
  const double h = 1e-5;
  for (int t = 0; t < 3; ++t) {
    out[t]->resize(x[t].size());
    for (size_t i = 0; i < x[t].size(); ++i) {
      double saved = x[t][i];
      x[t][i] = saved + h;
      double up = loss(pr, x[0], x[1], x[2], dy);
      x[t][i] = saved - h;
      double down = loss(pr, x[0], x[1], x[2], dy);
      x[t][i] = saved;
      (*out[t])[i] = (up - down) / (2 * h);
    }
  }
  return g;
}

void expectGrad(const Backward &g, const RefGrad &r, double tol) {
  expectNear(values(g.dq.tensor), r.dq, tol, "dQ");
  expectNear(values(g.dkt.tensor), r.dkt, tol, "dKt");
  expectNear(values(g.dv.tensor), r.dv, tol, "dV");
}

} // namespace

// Small sizes against central differences of the double forward: plain,
// with a broadcast bias, causal with Tq < Tk, and a fully masked row.
TEST(FusedAttention, GradientMatchesFiniteDifferences) {
  for (int variant = 0; variant < 4; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    Problem pr = makeProblem({2}, 5, 7, 3, 4, 20 + variant);
    if (variant == 1 || variant == 3) {
      pr.biasShape = {1, 5, 7};
      pr.bias = gaussian(5 * 7, 30);
    }
    if (variant == 2)
      pr.causal = true;
    if (variant == 3)
      for (int64_t j = 0; j < 7; ++j)
        pr.bias[2 * 7 + j] = -INFINITY; // row 2 without keys: no gradient through it
    std::vector<float> dy = gaussian(2 * 5 * 4, 40 + variant);
    auto g = runBackward(pr, dy);
    ASSERT_TRUE(g.isOk()) << g.getStatus().toString();
    expectGrad(*g, finiteDifferences(pr, dy), 1e-4);
  }
}

// Larger and odd sizes (three query blocks, batch [2, 3]) against the
// analytic gradient in double, with and without causal and bias.
TEST(FusedAttention, GradientMatchesAnalyticReference) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    Problem pr =
        makeProblem({2, 3}, variant == 0 ? 37 : 150, variant == 0 ? 53 : 170, 24, 40, 50 + variant);
    if (variant >= 1)
      pr.causal = true;
    if (variant == 2) {
      pr.biasShape = {2, 1, pr.tq, pr.tk};
      pr.bias = gaussian(2 * pr.tq * pr.tk, 60);
      for (float &b : pr.bias)
        b = b > 1.5f ? kFinfoMin : b;
    }
    std::vector<float> dy = gaussian(6 * pr.tq * pr.dv, 70 + variant);
    auto g = runBackward(pr, dy);
    ASSERT_TRUE(g.isOk()) << g.getStatus().toString();
    expectGrad(*g, referenceGrad(pr, dy), 1e-4);
  }
}

// Rank-0 batch (plain [T, D] matrices), one slice.
TEST(FusedAttention, GradientWithoutBatchDims) {
  Problem pr = makeProblem({}, 65, 65, 8, 8, 80);
  pr.causal = true;
  std::vector<float> dy = gaussian(65 * 8, 81);
  auto g = runBackward(pr, dy);
  ASSERT_TRUE(g.isOk()) << g.getStatus().toString();
  expectGrad(*g, referenceGrad(pr, dy), 1e-4);
}

// Each query block and each slice's backward is computed the same way
// whatever the worker count: the same bits with 1 and 4 threads.
TEST(FusedAttention, SameBitsForAnyThreadCount) {
  Problem pr = makeProblem({2, 3}, 150, 150, 32, 32, 85);
  pr.causal = true;
  pr.biasShape = {150, 150};
  pr.bias = gaussian(150 * 150, 86);
  std::vector<float> dy = gaussian(6 * 150 * 32, 87);
  int threads = getNumThreads();
  std::vector<std::vector<float>> runs[2];
  for (int k = 0; k < 2; ++k) {
    setNumThreads(k == 0 ? 1 : 4);
    auto f = runForward(pr);
    auto g = runBackward(pr, dy);
    ASSERT_TRUE(f.isOk() && g.isOk());
    runs[k] = {values(f->y.tensor), values(f->lse.tensor), values(g->dq.tensor),
               values(g->dkt.tensor), values(g->dv.tensor)};
  }
  setNumThreads(threads);
  for (size_t i = 0; i < runs[0].size(); ++i)
    EXPECT_EQ(std::memcmp(runs[0][i].data(), runs[1][i].data(), runs[0][i].size() * 4), 0)
        << "output " << i;
}

// --- bf16 -------------------------------------------------------------------

// bf16 Q, Kt, V: f32 accumulation, outputs rounded to bf16. Against the
// double reference on the bf16-rounded inputs: within a few bf16 ulps
// (2^-8 relative) of the largest magnitude.
TEST(FusedAttention, Bf16ForwardAndGradientFollowF32) {
  Problem pr = makeProblem({2, 2}, 37, 53, 24, 40, 90);
  pr.causal = true;
  pr.biasShape = {37, 53};
  pr.bias = gaussian(37 * 53, 91);
  for (auto *vec : {&pr.q, &pr.kt, &pr.v})
    for (float &x : *vec)
      x = bf16Value(bf16Bits(x)); // the reference sees the bf16 inputs
  std::vector<float> dy = gaussian(4 * 37 * 40, 92);
  for (float &x : dy)
    x = bf16Value(bf16Bits(x));
  auto f = runForward(pr, program::DTYPE_BF16);
  ASSERT_TRUE(f.isOk()) << f.getStatus().toString();
  ASSERT_EQ(f->y.tensor.dtype, program::DTYPE_BF16);
  Reference r = reference(pr);
  std::vector<float> y = values(f->y.tensor);
  for (size_t i = 0; i < y.size(); ++i)
    ASSERT_NEAR(y[i], r.y[i], 1.0 / 256 * (std::abs(r.y[i]) + 0.05)) << "Y at " << i;
  // LSE stays f32: as accurate as the f32 kernel on these inputs.
  for (size_t i = 0; i < r.lse.size(); ++i)
    ASSERT_NEAR(f->lse.tensor.as<float>()[i], r.lse[i], 1e-4 * (1 + std::abs(r.lse[i])));
  auto g = runBackward(pr, dy, program::DTYPE_BF16);
  ASSERT_TRUE(g.isOk()) << g.getStatus().toString();
  ASSERT_EQ(g->dq.tensor.dtype, program::DTYPE_BF16);
  RefGrad rg = referenceGrad(pr, dy);
  auto check = [](const Tensor &t, const std::vector<double> &ref, const char *what) {
    double mx = 0;
    for (double x : ref)
      mx = std::max(mx, std::abs(x));
    std::vector<float> got = values(t);
    for (size_t i = 0; i < got.size(); ++i)
      ASSERT_NEAR(got[i], ref[i], 4.0 / 256 * std::abs(ref[i]) + 0.01 * mx) << what << " at " << i;
  };
  check(g->dq.tensor, rg.dq, "dQ");
  check(g->dkt.tensor, rg.dkt, "dKt");
  check(g->dv.tensor, rg.dv, "dV");
}

namespace {
/// f16 bits of a value exactly representable in f16 (normal or 0, +-inf).
uint16_t exactHalf(float f) {
  if (std::isinf(f))
    return f < 0 ? 0xFC00 : 0x7C00;
  if (f == 0)
    return 0;
  int e;
  float m = std::frexp(std::abs(f), &e); // f = m 2^e, m in [0.5, 1)
  uint16_t mant = static_cast<uint16_t>(std::lround((m * 2 - 1) * 1024));
  return static_cast<uint16_t>((f < 0 ? 0x8000 : 0) | ((e - 1 + 15) << 10) | mant);
}
float halfValue(uint16_t h) {
  int e = (h >> 10) & 0x1F, mant = h & 0x3FF;
  float v = e == 0    ? std::ldexp(float(mant), -24)
            : e == 31 ? INFINITY
                      : std::ldexp(1.0f + mant / 1024.0f, e - 15);
  return h & 0x8000 ? -v : v;
}
/// Values on the f16 grid: multiples of 2^-10 in (-2, 2).
std::vector<float> halfGrid(size_t n, uint32_t seed) {
  std::vector<float> v = gaussian(n, seed);
  for (float &x : v)
    x = std::round(std::clamp(x, -1.99f, 1.99f) * 1024) / 1024;
  return v;
}
OwnedTensor halfTensor(const Shape &shape, const std::vector<float> &v) {
  OwnedTensor t(program::DTYPE_F16, shape);
  for (size_t i = 0; i < v.size(); ++i)
    t.tensor.as<uint16_t>()[i] = exactHalf(v[i]);
  return t;
}
std::vector<float> halfValues(const Tensor &t) {
  std::vector<float> v(t.numel());
  for (int64_t i = 0; i < t.numel(); ++i)
    v[i] = halfValue(t.as<uint16_t>()[i]);
  return v;
}
} // namespace

// f16 Q, Kt, V with an f16 bias (the dtype of Q; -inf entries mask keys):
// forward and gradient within f16 rounding of the double reference.
TEST(FusedAttention, F16WithF16Bias) {
  Problem pr = makeProblem({3}, 37, 53, 24, 40, 95);
  pr.q = halfGrid(pr.q.size(), 95);
  pr.kt = halfGrid(pr.kt.size(), 96);
  pr.v = halfGrid(pr.v.size(), 97);
  pr.biasShape = {1, 37, 53};
  pr.bias = halfGrid(37 * 53, 98);
  for (size_t i = 0; i < pr.bias.size(); i += 7)
    pr.bias[i] = -INFINITY;
  std::vector<float> dy = halfGrid(3 * 37 * 40, 99);
  OwnedTensor q = halfTensor(pr.shape({37, 24}), pr.q), kt = halfTensor(pr.shape({24, 53}), pr.kt),
              v = halfTensor(pr.shape({53, 40}), pr.v), bias = halfTensor(pr.biasShape, pr.bias),
              tdy = halfTensor(pr.shape({37, 40}), dy);
  OwnedTensor y(program::DTYPE_F16, pr.shape({37, 40})), lse(program::DTYPE_F32, pr.shape({37}));
  Status st = runCpu(attentionKernel("FusedAttention", pr.scale, false),
                     {&q.tensor, &kt.tensor, &v.tensor, &bias.tensor}, {&y.tensor, &lse.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  Reference r = reference(pr);
  std::vector<float> got = halfValues(y.tensor);
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], r.y[i], 1.0 / 1024 * (std::abs(r.y[i]) + 0.05)) << "Y at " << i;
  for (size_t i = 0; i < r.lse.size(); ++i)
    ASSERT_NEAR(lse.tensor.as<float>()[i], r.lse[i], 1e-4 * (1 + std::abs(r.lse[i])));
  OwnedTensor dq(program::DTYPE_F16, q.tensor.shape), dkt(program::DTYPE_F16, kt.tensor.shape),
      dv(program::DTYPE_F16, v.tensor.shape);
  st = runCpu(attentionKernel("FusedAttentionGrad", pr.scale, false),
              {&tdy.tensor, &q.tensor, &kt.tensor, &v.tensor, &y.tensor, &lse.tensor, &bias.tensor},
              {&dq.tensor, &dkt.tensor, &dv.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  RefGrad rg = referenceGrad(pr, dy);
  auto check = [](const Tensor &t, const std::vector<double> &ref, const char *what) {
    double mx = 0;
    for (double x : ref)
      mx = std::max(mx, std::abs(x));
    std::vector<float> g = halfValues(t);
    for (size_t i = 0; i < g.size(); ++i)
      ASSERT_NEAR(g[i], ref[i], 2.0 / 1024 * std::abs(ref[i]) + 0.003 * mx) << what << " at " << i;
  };
  check(dq.tensor, rg.dq, "dQ");
  check(dkt.tensor, rg.dkt, "dKt");
  check(dv.tensor, rg.dv, "dV");
}

// --- Errors -----------------------------------------------------------------

namespace {

/// The message of running FusedAttention on tensors of these shapes
/// (f32 unless given), "" on success.
std::string forwardError(const Shape &q, const Shape &kt, const Shape &v, const Shape *bias,
                         const Shape &y, const Shape &lse, DType ktType = program::DTYPE_F32,
                         bool withScale = true) {
  OwnedTensor tq(program::DTYPE_F32, q), tkt(ktType, kt), tv(program::DTYPE_F32, v);
  OwnedTensor tb(program::DTYPE_F32, bias ? *bias : Shape{});
  OwnedTensor ty(program::DTYPE_F32, y), tl(program::DTYPE_F32, lse);
  std::vector<const Tensor *> ins = {&tq.tensor, &tkt.tensor, &tv.tensor};
  if (bias)
    ins.push_back(&tb.tensor);
  program::Kernel k = attentionKernel("FusedAttention", 0.5f, false);
  if (!withScale)
    k.mutable_attrs()->erase("scale");
  Status st = runCpu(k, ins, {&ty.tensor, &tl.tensor});
  return st.isOk() ? "" : st.toString();
}

} // namespace

TEST(FusedAttention, ForwardOperandErrorsNameTheOperand) {
  Shape q = {2, 5, 4}, kt = {2, 4, 6}, v = {2, 6, 3}, y = {2, 5, 3}, l = {2, 5};
  ASSERT_EQ(forwardError(q, kt, v, nullptr, y, l), "");
  expectErrorNames(forwardError({5}, {4}, {6}, nullptr, {5}, {}), "FusedAttention",
                   {"Q", "rank >= 2"});
  expectErrorNames(forwardError(q, {4, 6}, v, nullptr, y, l), "FusedAttention", {"Kt", "rank"});
  expectErrorNames(forwardError(q, {3, 4, 6}, {3, 6, 3}, nullptr, y, l), "FusedAttention",
                   {"Kt", "batch dims"});
  expectErrorNames(forwardError(q, {2, 5, 6}, v, nullptr, y, l), "FusedAttention",
                   {"Kt", "D=5", "D=4"});
  expectErrorNames(forwardError(q, kt, {2, 7, 3}, nullptr, y, l), "FusedAttention", {"V", "Tk=6"});
  Shape badBias = {2, 5, 5};
  expectErrorNames(forwardError(q, kt, v, &badBias, y, l), "FusedAttention", {"Bias", "broadcast"});
  Shape highBias = {1, 2, 5, 6};
  expectErrorNames(forwardError(q, kt, v, &highBias, y, l), "FusedAttention",
                   {"Bias", "broadcast"});
  Shape okBias = {1, 6};
  EXPECT_EQ(forwardError(q, kt, v, &okBias, y, l), "");
  expectErrorNames(forwardError(q, kt, v, nullptr, y, l, program::DTYPE_BF16), "FusedAttention",
                   {"dtype mix", "Kt", "bf16"});
  expectErrorNames(forwardError(q, kt, v, nullptr, {2, 5, 4}, l), "FusedAttention", {"output Y"});
  expectErrorNames(forwardError(q, kt, v, nullptr, y, {2, 5, 1}), "FusedAttention", {"output LSE"});
  expectErrorNames(forwardError(q, kt, v, nullptr, y, l, program::DTYPE_F32, false),
                   "FusedAttention", {"scale"});
}

TEST(FusedAttention, GradientOperandErrorsNameTheOperand) {
  Shape q = {2, 5, 4}, kt = {2, 4, 6}, v = {2, 6, 3}, y = {2, 5, 3}, l = {2, 5};
  auto run = [&](Shape dy, Shape yy, Shape lse, DType lseType, Shape dq) {
    OwnedTensor tdy(program::DTYPE_F32, dy), tq(program::DTYPE_F32, q), tkt(program::DTYPE_F32, kt),
        tv(program::DTYPE_F32, v), ty(program::DTYPE_F32, yy), tl(lseType, lse),
        odq(program::DTYPE_F32, dq), odk(program::DTYPE_F32, kt), odv(program::DTYPE_F32, v);
    std::memset(tl.tensor.data, 0, tl.tensor.byteSize());
    Status st = runCpu(attentionKernel("FusedAttentionGrad", 0.5f, true),
                       {&tdy.tensor, &tq.tensor, &tkt.tensor, &tv.tensor, &ty.tensor, &tl.tensor},
                       {&odq.tensor, &odk.tensor, &odv.tensor});
    return st.isOk() ? std::string() : st.toString();
  };
  ASSERT_EQ(run(y, y, l, program::DTYPE_F32, q), "");
  expectErrorNames(run({2, 5, 4}, y, l, program::DTYPE_F32, q), "FusedAttention", {"dY"});
  expectErrorNames(run(y, {2, 4, 3}, l, program::DTYPE_F32, q), "FusedAttention", {"Y f32[2x4x3]"});
  expectErrorNames(run(y, y, {2, 6}, program::DTYPE_F32, q), "FusedAttention", {"LSE"});
  expectErrorNames(run(y, y, l, program::DTYPE_BF16, q), "FusedAttention", {"LSE", "f32"});
  expectErrorNames(run(y, y, l, program::DTYPE_F32, {2, 5, 3}), "FusedAttention", {"output dQ"});
}

// --- Permuted operands -------------------------------------------------------

namespace {

/// The tensor holding a logical operand `l` (dense, shape `shape`) under
/// `perm` (logical dim i is tensor dim perm[i]): the inverse of the
/// kernel's view, written with plain index loops.
std::vector<float> permuted(const std::vector<float> &l, const Shape &shape,
                            const std::vector<int64_t> &perm, Shape &tensorShape) {
  size_t r = shape.size();
  tensorShape.assign(r, 0);
  for (size_t i = 0; i < r; ++i)
    tensorShape[perm[i]] = shape[i];
  std::vector<int64_t> tStride(r, 1);
  for (size_t k = r - 1; k > 0; --k)
    tStride[k - 1] = tStride[k] * tensorShape[k];
  std::vector<float> out(l.size());
  std::vector<int64_t> idx(r, 0);
  for (size_t n = 0; n < l.size(); ++n) {
    int64_t rem = static_cast<int64_t>(n), off = 0;
    for (size_t i = r; i-- > 0;) {
      idx[i] = rem % shape[i];
      rem /= shape[i];
    }
    for (size_t i = 0; i < r; ++i)
      off += idx[i] * tStride[perm[i]];
    out[off] = l[n];
  }
  return out;
}

/// The raw bits of a tensor, for exact comparisons.
std::vector<uint8_t> bits(const Tensor &t) {
  const uint8_t *p = static_cast<const uint8_t *>(t.data);
  return std::vector<uint8_t>(p, p + t.byteSize());
}

} // namespace

namespace {

/// Q, K and V [B, T, H, D] packed into one [B, T, 3, H, D] tensor (GPT-2's
/// QKV projection, as graph-fold-transposes reads it).
std::vector<float> packed3(const std::vector<float> &q, const std::vector<float> &k,
                           const std::vector<float> &v, int64_t rows, int64_t hd) {
  std::vector<float> p(size_t(3 * rows * hd));
  const std::vector<float> *parts[3] = {&q, &k, &v};
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t i = 0; i < 3; ++i)
      std::copy_n(parts[i]->begin() + r * hd, hd, p.begin() + (r * 3 + i) * hd);
  return p;
}

/// GPT-2's heads as exported, against the dense kernels: Q, K, V
/// [B, T, H, D] (K not transposed) and Y written as [B, T, H, D] through
/// q_perm, kt_perm, v_perm and y_perm; with `packed`, Q, K and V are moreover
/// slices 0, 1, 2 (q_select, kt_select, v_select = [2, i]) of one [B, T, 3,
/// H, D] buffer, and packed_grad's one dQKV output is checked too. Forward
/// and gradient equal the dense kernels on the transposed (sliced) operands
/// bit for bit (causal with a bias); dQ, dKt, dV come out laid out as Q, Kt,
/// V, unpacked.
void checkGpt2Heads(DType dt, bool packed, uint32_t seed) {
  const std::vector<int64_t> heads = {0, 2, 1, 3}, keys = {0, 2, 3, 1};
  Problem pr = makeProblem({2, 3}, 37, 37, 16, 16, seed);
  pr.causal = true;
  pr.biasShape = {37, 37};
  pr.bias = gaussian(37 * 37, seed + 1);
  std::vector<float> dy = gaussian(6 * 37 * 16, seed + 2);
  auto dense = runBackward(pr, dy, dt);
  auto denseF = runForward(pr, dt);
  ASSERT_TRUE(dense.isOk() && denseF.isOk());

  auto make = [&](const Shape &s, const std::vector<float> &v) {
    return dt == program::DTYPE_F32 ? f32Tensor(s, v) : bf16Tensor(s, v);
  };
  Shape qs, ks, vs, ys;
  std::vector<float> qv = permuted(pr.q, pr.shape({pr.tq, pr.d}), heads, qs);
  std::vector<float> kv = permuted(pr.kt, pr.shape({pr.d, pr.tk}), keys, ks);
  std::vector<float> vv = permuted(pr.v, pr.shape({pr.tk, pr.dv}), heads, vs);
  std::vector<float> dyv = permuted(dy, pr.shape({pr.tq, pr.dv}), heads, ys);
  ASSERT_EQ(qs, (Shape{2, 37, 3, 16}));
  ASSERT_EQ(ks, (Shape{2, 37, 3, 16}));
  const Shape packedShape{2, 37, 3, 3, 16};
  OwnedTensor q = make(qs, qv), kt = make(ks, kv), v = make(vs, vv), tdy = make(ys, dyv);
  OwnedTensor qkv = make(packedShape, packed3(qv, kv, vv, 2 * 37, 3 * 16));
  OwnedTensor bias = f32Tensor(pr.biasShape, pr.bias);
  // The operands: the three tensors, or the packed one three times.
  const Tensor *qIn = packed ? &qkv.tensor : &q.tensor, *kIn = packed ? &qkv.tensor : &kt.tensor,
               *vIn = packed ? &qkv.tensor : &v.tensor;
  auto kernel = [&](const std::string &op) {
    program::Kernel k = attentionKernel(op, pr.scale, pr.causal);
    setInts(k, "q_perm", heads);
    setInts(k, "kt_perm", keys);
    setInts(k, "v_perm", heads);
    setInts(k, "y_perm", heads);
    if (packed) {
      setInts(k, "q_select", {2, 0});
      setInts(k, "kt_select", {2, 1});
      setInts(k, "v_select", {2, 2});
    }
    return k;
  };
  OwnedTensor y(dt, ys), lse(program::DTYPE_F32, pr.shape({pr.tq}));
  Status st = runCpu(kernel("FusedAttention"), {qIn, kIn, vIn, &bias.tensor},
                     {&y.tensor, &lse.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  // The dense results, laid out as the permuted tensors.
  auto laidOut = [&](const Tensor &t, const Shape &logical, const std::vector<int64_t> &perm) {
    Shape ts;
    std::vector<float> p = permuted(values(t), logical, perm, ts);
    return bits(make(ts, p).tensor);
  };
  EXPECT_EQ(bits(y.tensor), laidOut(denseF->y.tensor, pr.shape({pr.tq, pr.dv}), heads)) << "Y";
  EXPECT_EQ(bits(lse.tensor), bits(denseF->lse.tensor)) << "LSE";

  std::vector<const Tensor *> gradIns = {&tdy.tensor, qIn, kIn, vIn,
                                         &y.tensor,   &lse.tensor, &bias.tensor};
  OwnedTensor dq(dt, qs), dkt(dt, ks), dv(dt, vs);
  st = runCpu(kernel("FusedAttentionGrad"), gradIns, {&dq.tensor, &dkt.tensor, &dv.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(bits(dq.tensor), laidOut(dense->dq.tensor, pr.shape({pr.tq, pr.d}), heads)) << "dQ";
  EXPECT_EQ(bits(dkt.tensor), laidOut(dense->dkt.tensor, pr.shape({pr.d, pr.tk}), keys)) << "dKt";
  EXPECT_EQ(bits(dv.tensor), laidOut(dense->dv.tensor, pr.shape({pr.tk, pr.dv}), heads)) << "dV";
  if (!packed)
    return;
  // packed_grad: one [B, T, 3, H, D] output holding dQ, dK, dV in place.
  program::Kernel pk = kernel("FusedAttentionGrad");
  setInt(pk, "packed_grad", 1);
  OwnedTensor dqkv(dt, packedShape);
  st = runCpu(pk, gradIns, {&dqkv.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  EXPECT_EQ(bits(dqkv.tensor),
            bits(make(packedShape, packed3(values(dq.tensor), values(dkt.tensor),
                                           values(dv.tensor), 2 * 37, 3 * 16))
                     .tensor))
      << "dQKV";
}

} // namespace

// GPT-2's heads as exported: the kernels read and write [B, T, H, D] tensors
// directly (f32 and bf16).
TEST(FusedAttention, PermutedOperandsEqualTheDenseKernels) {
  for (DType dt : {program::DTYPE_F32, program::DTYPE_BF16}) {
    SCOPED_TRACE(dtypeName(dt));
    checkGpt2Heads(dt, /*packed=*/false, 120);
  }
}

// GPT-2's heads read straight out of the packed projection, the gradient
// unpacked and packed (f32 and bf16).
TEST(FusedAttention, PackedOperandsEqualTheDenseKernels) {
  for (DType dt : {program::DTYPE_F32, program::DTYPE_BF16}) {
    SCOPED_TRACE(dtypeName(dt));
    checkGpt2Heads(dt, /*packed=*/true, 130);
  }
}

TEST(FusedAttention, SelectErrorsNameTheAttribute) {
  OwnedTensor qkv(program::DTYPE_F32, {2, 5, 3, 3, 4});
  auto run = [&](const std::string &attr, const std::vector<int64_t> &sel, Shape dqShape) {
    program::Kernel kern = attentionKernel("FusedAttentionGrad", 0.5f, false);
    std::map<std::string, std::vector<int64_t>> attrs = {
        {"q_perm", {0, 2, 1, 3}}, {"kt_perm", {0, 2, 3, 1}}, {"v_perm", {0, 2, 1, 3}},
        {"y_perm", {0, 2, 1, 3}}, {"q_select", {2, 0}},      {"kt_select", {2, 1}},
        {"v_select", {2, 2}}};
    attrs[attr] = sel;
    for (const auto &[name, p] : attrs)
      setInts(kern, name, p);
    OwnedTensor dy(program::DTYPE_F32, {2, 5, 3, 4}), y(program::DTYPE_F32, {2, 5, 3, 4}),
        l(program::DTYPE_F32, {2, 3, 5});
    OwnedTensor dq(program::DTYPE_F32, dqShape), dk(program::DTYPE_F32, {2, 5, 3, 4}),
        dv(program::DTYPE_F32, {2, 5, 3, 4});
    Status st = runCpu(kern, {&dy.tensor, &qkv.tensor, &qkv.tensor, &qkv.tensor, &y.tensor,
                              &l.tensor},
                       {&dq.tensor, &dk.tensor, &dv.tensor});
    return st.isOk() ? std::string() : st.toString();
  };
  ASSERT_EQ(run("q_select", {2, 0}, {2, 5, 3, 4}), "");
  // The gradient is the slice's shape, never the packed one.
  expectErrorNames(run("q_select", {2, 0}, {2, 5, 3, 3, 4}), "FusedAttentionGrad",
                   {"output dQ", "f32[2x5x3x4]"});
  expectErrorNames(run("q_select", {2, 3}, {2, 5, 3, 4}), "FusedAttentionGrad",
                   {"q_select [2,3]", "Q f32[2x5x3x3x4]"});
  expectErrorNames(run("kt_select", {5, 0}, {2, 5, 3, 4}), "FusedAttentionGrad",
                   {"kt_select [5,0]", "Kt"});
  expectErrorNames(run("v_select", {2}, {2, 5, 3, 4}), "FusedAttentionGrad",
                   {"v_select [2]", "[axis, index]"});
  // Slicing another axis leaves V [2, 5, 3, 4] read as [2, 3, 3, 4]... under
  // v_perm: Tk = 3 against Kt's 5.
  expectErrorNames(run("v_select", {1, 0}, {2, 5, 3, 4}), "FusedAttentionGrad",
                   {"V f32", "v_select of f32[2x5x3x3x4]"});
  // packed_grad: one dQKV of the packed shape, from selects 0, 1, 2 of one axis.
  auto runPacked = [&](const std::vector<int64_t> &vSel, Shape outShape) {
    program::Kernel kern = attentionKernel("FusedAttentionGrad", 0.5f, false);
    std::map<std::string, std::vector<int64_t>> attrs = {
        {"q_perm", {0, 2, 1, 3}}, {"kt_perm", {0, 2, 3, 1}}, {"v_perm", {0, 2, 1, 3}},
        {"y_perm", {0, 2, 1, 3}}, {"q_select", {2, 0}},      {"kt_select", {2, 1}},
        {"v_select", vSel}};
    for (const auto &[name, p] : attrs)
      setInts(kern, name, p);
    setInt(kern, "packed_grad", 1);
    OwnedTensor dy(program::DTYPE_F32, {2, 5, 3, 4}), y(program::DTYPE_F32, {2, 5, 3, 4}),
        l(program::DTYPE_F32, {2, 3, 5}), out(program::DTYPE_F32, outShape);
    Status st = runCpu(kern, {&dy.tensor, &qkv.tensor, &qkv.tensor, &qkv.tensor, &y.tensor,
                              &l.tensor},
                       {&out.tensor});
    return st.isOk() ? std::string() : st.toString();
  };
  ASSERT_EQ(runPacked({2, 2}, {2, 5, 3, 3, 4}), "");
  expectErrorNames(runPacked({2, 1}, {2, 5, 3, 3, 4}), "FusedAttentionGrad",
                   {"packed_grad", "indices 0, 1, 2"});
  expectErrorNames(runPacked({2, 2}, {2, 5, 3, 4}), "FusedAttentionGrad",
                   {"output dQKV", "f32[2x5x3x3x4]"});
}

TEST(FusedAttention, PermutationErrorsNameTheAttribute) {
  OwnedTensor q(program::DTYPE_F32, {2, 5, 3, 4}), k(program::DTYPE_F32, {2, 5, 3, 4}),
      v(program::DTYPE_F32, {2, 5, 3, 4});
  auto run = [&](const std::string &attr, const std::vector<int64_t> &perm, Shape yShape) {
    program::Kernel kern = attentionKernel("FusedAttention", 0.5f, false);
    std::map<std::string, std::vector<int64_t>> perms = {
        {"q_perm", {0, 2, 1, 3}}, {"kt_perm", {0, 2, 3, 1}}, {"v_perm", {0, 2, 1, 3}}};
    perms[attr] = perm;
    for (const auto &[name, p] : perms)
      setInts(kern, name, p);
    OwnedTensor y(program::DTYPE_F32, yShape), l(program::DTYPE_F32, {2, 3, 5});
    Status st = runCpu(kern, {&q.tensor, &k.tensor, &v.tensor}, {&y.tensor, &l.tensor});
    return st.isOk() ? std::string() : st.toString();
  };
  ASSERT_EQ(run("y_perm", {0, 2, 1, 3}, {2, 5, 3, 4}), "");
  ASSERT_EQ(run("y_perm", {0, 1, 2, 3}, {2, 3, 5, 4}), "");
  expectErrorNames(run("y_perm", {0, 1, 2, 3}, {2, 5, 3, 4}), "FusedAttention",
                   {"output Y", "f32[2x3x5x4]"});
  expectErrorNames(run("q_perm", {0, 2, 2, 3}, {2, 5, 3, 4}), "FusedAttention",
                   {"q_perm", "not a permutation"});
  expectErrorNames(run("kt_perm", {0, 2, 1}, {2, 5, 3, 4}), "FusedAttention",
                   {"kt_perm", "4 dimensions"});
  // K given as Kt's logical [b, h, D, Tk] without its permutation: D and Tk
  // swap, and the message shows the logical shape and the attribute.
  expectErrorNames(run("kt_perm", {0, 2, 1, 3}, {2, 5, 3, 4}), "FusedAttention",
                   {"Kt f32[2x3x5x4]", "kt_perm [0,2,1,3]", "D=5"});
}
