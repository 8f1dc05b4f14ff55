//===- SoftmaxCrossEntropyWithGradTest.cpp - The fused loss and gradient --===//
//
// SoftmaxCrossEntropyLossWithGrad on the CPU against the two kernels it
// replaces (SoftmaxCrossEntropyLoss, then SoftmaxCrossEntropyLossGrad), bit
// for bit: f32, bf16 and f16 scores, reductions mean / sum / none, class
// weights, ignore_index (outside and inside [0, C)), i32 labels, [N, C, D]
// scores, rows enough for the thread pool. A naive double-precision
// reference checks that the common result is the cross-entropy at all. Then
// the operand checks (KernelArgs.h), which name the kernel and the operand.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <optional>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

constexpr DType F32 = program::DTYPE_F32, BF16 = program::DTYPE_BF16, F16 = program::DTYPE_F16;
constexpr const char *kOp = "SoftmaxCrossEntropyLossWithGrad";

/// Element i of an f32, bf16 or f16 tensor, widened.
float valueAt(const Tensor &t, int64_t i) {
  if (t.dtype == F32)
    return t.as<float>()[i];
  uint16_t h = t.as<uint16_t>()[i];
  if (t.dtype == BF16)
    return bf16Value(h);
  _Float16 x;
  std::memcpy(&x, &h, 2);
  return static_cast<float>(x);
}

/// Scores of `dtype` holding v (16-bit: rounded to nearest even).
OwnedTensor scoresOf(DType dtype, const Shape &s, const std::vector<float> &v) {
  OwnedTensor t(dtype, s);
  for (size_t k = 0; k < v.size(); ++k) {
    if (dtype == F32) {
      t.tensor.as<float>()[k] = v[k];
    } else if (dtype == BF16) {
      t.tensor.as<uint16_t>()[k] = bf16Bits(v[k]);
    } else {
      _Float16 x = static_cast<_Float16>(v[k]);
      std::memcpy(t.tensor.as<uint16_t>() + k, &x, 2);
    }
  }
  return t;
}

struct Case {
  const char *name;
  Shape scores; // [N, C] or [N, C, D]
  const char *reduction;
  bool weighted;
  std::optional<int64_t> ignore;
  bool labels32 = false;
};

/// Labels of `c`: pseudo-random classes, every fifth the ignored value.
std::vector<int64_t> labelsOf(const Case &c, int64_t rows) {
  std::vector<int64_t> l(rows);
  for (int64_t r = 0; r < rows; ++r)
    l[r] = (r * 7 + 3) % c.scores[1];
  if (c.ignore)
    for (int64_t r = 1; r < rows; r += 5)
      l[r] = *c.ignore;
  return l;
}

/// The cross-entropy and its gradient in double, written from the
/// definition (softmax, then -log p of the label; p - onehot).
void reference(const Case &c, const Tensor &x, const std::vector<int64_t> &labels,
               const std::vector<float> &w, const std::vector<float> &dl, std::vector<double> &loss,
               std::vector<double> &grad) {
  int64_t n = c.scores[0], cl = c.scores[1], d = c.scores.size() > 2 ? c.scores[2] : 1;
  std::string red = c.reduction;
  grad.assign(x.numel(), 0.0);
  std::vector<double> terms(n * d, 0.0), ws(n * d, 0.0);
  double wsum = 0;
  for (int64_t r = 0; r < n * d; ++r)
    if (!(c.ignore && labels[r] == *c.ignore)) {
      ws[r] = c.weighted ? w[labels[r]] : 1.0;
      wsum += ws[r];
    }
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      int64_t r = i * d + j;
      std::vector<double> e(cl);
      double mx = -INFINITY, z = 0;
      for (int64_t k = 0; k < cl; ++k)
        mx = std::max<double>(mx, valueAt(x, (i * cl + k) * d + j));
      for (int64_t k = 0; k < cl; ++k)
        z += e[k] = std::exp(valueAt(x, (i * cl + k) * d + j) - mx);
      if (ws[r] != 0)
        terms[r] = -std::log(e[labels[r]] / z) * ws[r];
      double g = (red == "none" ? dl[r] : dl[0]) * ws[r] /
                 (red == "mean" ? (wsum == 0 ? INFINITY : wsum) : 1.0);
      for (int64_t k = 0; k < cl; ++k)
        grad[(i * cl + k) * d + j] = g * (e[k] / z - (k == labels[r] ? 1.0 : 0.0));
    }
  double total = 0;
  for (double t : terms)
    total += t;
  if (red == "none")
    loss = terms;
  else
    loss = {red == "sum" ? total : total / wsum};
}

} // namespace

TEST(SoftmaxCrossEntropyWithGrad, EqualsLossThenGradBitForBit) {
  const Case cases[] = {{"mean_ignore", {6, 37}, "mean", false, -100},
                        {"mean_weighted_ignore_in_range", {7, 11}, "mean", true, 1},
                        {"sum_weighted_3d", {3, 5, 4}, "sum", true, std::nullopt},
                        {"none_ignore", {9, 13}, "none", true, -1},
                        {"none_3d_i32", {2, 6, 5}, "none", false, 0, /*labels32=*/true},
                        {"mean_many_rows", {96, 257}, "mean", false, -100},
                        {"mean_weighted_ignore_3", {5, 4}, "mean", true, 3}};
  uint32_t seed = 7;
  for (DType dt : {F32, BF16, F16}) {
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + dtypeName(dt));
      int64_t n = c.scores[0], cl = c.scores[1], d = c.scores.size() > 2 ? c.scores[2] : 1;
      Shape ls = c.scores.size() > 2 ? Shape{n, d} : Shape{n};
      bool none = std::string(c.reduction) == "none";
      Shape lossShape = none ? ls : Shape{};
      std::vector<float> v = gaussian(numElements(c.scores), seed++);
      for (float &e : v)
        e *= 3.0f;
      OwnedTensor x = scoresOf(dt, c.scores, v);
      std::vector<int64_t> labels = labelsOf(c, n * d);
      OwnedTensor y(c.labels32 ? program::DTYPE_I32 : program::DTYPE_I64, ls);
      for (int64_t r = 0; r < n * d; ++r) {
        if (c.labels32)
          y.tensor.as<int32_t>()[r] = static_cast<int32_t>(labels[r]);
        else
          y.tensor.as<int64_t>()[r] = labels[r];
      }
      OwnedTensor w(F32, {cl});
      std::vector<float> wv(cl);
      for (int64_t k = 0; k < cl; ++k)
        w.tensor.as<float>()[k] = wv[k] = 0.25f + 0.5f * static_cast<float>(k % 3);
      OwnedTensor dl(F32, lossShape);
      std::vector<float> dlv = pseudoRandom(dl.tensor.numel(), seed++);
      for (int64_t i = 0; i < dl.tensor.numel(); ++i)
        dl.tensor.as<float>()[i] = dlv[i] = none ? dlv[i] : 1.7f;
      auto attrs = [&](program::Kernel &k) {
        setString(k, "reduction", c.reduction);
        if (c.ignore)
          setInt(k, "ignore_index", *c.ignore);
      };
      std::vector<const Tensor *> lossIns = {&x.tensor, &y.tensor};
      if (c.weighted)
        lossIns.push_back(&w.tensor);
      std::vector<const Tensor *> gradIns = lossIns;
      gradIns.insert(gradIns.begin(), &dl.tensor);
      // The two kernels, then the fused one.
      OwnedTensor loss(F32, lossShape), grad(dt, c.scores);
      runOp("SoftmaxCrossEntropyLoss", lossIns, {&loss.tensor}, attrs);
      runOp("SoftmaxCrossEntropyLossGrad", gradIns, {&grad.tensor}, attrs);
      OwnedTensor fusedLoss(F32, lossShape), fusedGrad(dt, c.scores);
      runOp(kOp, gradIns, {&fusedLoss.tensor, &fusedGrad.tensor}, attrs);
      EXPECT_TRUE(sameBytes(fusedLoss.tensor, loss.tensor));
      EXPECT_TRUE(sameBytes(fusedGrad.tensor, grad.tensor));
      // Both are the cross-entropy: within f32 (16-bit dScores: their
      // rounding) of the double reference, and not vacuously zero.
      std::vector<double> refLoss, refGrad;
      reference(c, x.tensor, labels, wv, dlv, refLoss, refGrad);
      ASSERT_EQ(refLoss.size(), static_cast<size_t>(fusedLoss.tensor.numel()));
      for (size_t i = 0; i < refLoss.size(); ++i)
        EXPECT_NEAR(fusedLoss.tensor.as<float>()[i], refLoss[i], 1e-5 * (1 + std::abs(refLoss[i])))
            << "loss " << i;
      double tol = dt == F32 ? 1e-6 : dt == BF16 ? 8e-3 : 1e-3;
      int64_t nonzero = 0;
      for (int64_t i = 0; i < fusedGrad.tensor.numel(); ++i) {
        float g = valueAt(fusedGrad.tensor, i);
        nonzero += g != 0;
        ASSERT_NEAR(g, refGrad[i], tol * (1e-3 + std::abs(refGrad[i]))) << "dScores " << i;
      }
      EXPECT_GT(nonzero, 0);
      EXPECT_NE(fusedLoss.tensor.as<float>()[0], 0.0f);
    }
  }
}

// An ignored label inside [0, C) still gives its row a zero gradient (and
// the two kernels' signed zeros), and a step of all-ignored labels a zero
// mean loss and gradient.
TEST(SoftmaxCrossEntropyWithGrad, AllIgnoredIsZero) {
  OwnedTensor x = scoresOf(BF16, {3, 4}, gaussian(12, 3));
  OwnedTensor y(program::DTYPE_I64, {3});
  for (int r = 0; r < 3; ++r)
    y.tensor.as<int64_t>()[r] = 2;
  OwnedTensor dl(F32, {});
  dl.tensor.as<float>()[0] = 1;
  auto attrs = [](program::Kernel &k) { setInt(k, "ignore_index", 2); };
  OwnedTensor loss(F32, {}), grad(BF16, {3, 4}), refLoss(F32, {}), refGrad(BF16, {3, 4});
  runOp(kOp, {&dl.tensor, &x.tensor, &y.tensor}, {&loss.tensor, &grad.tensor}, attrs);
  runOp("SoftmaxCrossEntropyLoss", {&x.tensor, &y.tensor}, {&refLoss.tensor}, attrs);
  runOp("SoftmaxCrossEntropyLossGrad", {&dl.tensor, &x.tensor, &y.tensor}, {&refGrad.tensor},
        attrs);
  EXPECT_EQ(loss.tensor.as<float>()[0], 0.0f);
  for (int64_t i = 0; i < 12; ++i)
    EXPECT_EQ(valueAt(grad.tensor, i), 0.0f) << i;
  EXPECT_TRUE(sameBytes(loss.tensor, refLoss.tensor));
  EXPECT_TRUE(sameBytes(grad.tensor, refGrad.tensor));
}

TEST(SoftmaxCrossEntropyWithGrad, OperandErrorsNameTheOperand) {
  OwnedTensor x = scoresOf(F32, {2, 3}, {1, 2, 3, 4, 5, 6});
  OwnedTensor y(program::DTYPE_I64, {2});
  y.tensor.as<int64_t>()[0] = 0;
  y.tensor.as<int64_t>()[1] = 2;
  OwnedTensor one(F32, {});
  one.tensor.as<float>()[0] = 1;
  OwnedTensor loss(F32, {}), grad(F32, {2, 3});
  auto run = [&](std::vector<const Tensor *> ins, std::vector<Tensor *> outs,
                 const std::function<void(program::Kernel &)> &attrs = {}) {
    program::Kernel k;
    k.set_op(kOp);
    if (attrs)
      attrs(k);
    Status st = runCpu(k, std::move(ins), std::move(outs));
    return st.isOk() ? std::string() : st.toString();
  };
  // A label outside [0, C).
  OwnedTensor bad(program::DTYPE_I64, {2});
  bad.tensor.as<int64_t>()[0] = 0;
  bad.tensor.as<int64_t>()[1] = 3;
  expectErrorNames(run({&one.tensor, &x.tensor, &bad.tensor}, {&loss.tensor, &grad.tensor}), kOp,
                   {"label 3", "row 1", "outside [0, 3)"});
  // f64 scores: the gradient kernel has none either.
  OwnedTensor x64(program::DTYPE_F64, {2, 3}), g64(program::DTYPE_F64, {2, 3});
  expectErrorNames(run({&one.tensor, &x64.tensor, &y.tensor}, {&loss.tensor, &g64.tensor}), kOp,
                   {"scores of dtype f64", "f32, bf16 or f16"});
  // Float labels.
  OwnedTensor yf(F32, {2});
  expectErrorNames(run({&one.tensor, &x.tensor, &yf.tensor}, {&loss.tensor, &grad.tensor}), kOp,
                   {"labels of dtype f32"});
  // Labels of the wrong shape.
  OwnedTensor y3(program::DTYPE_I64, {3});
  expectErrorNames(run({&one.tensor, &x.tensor, &y3.tensor}, {&loss.tensor, &grad.tensor}), kOp,
                   {"scores f32[2x3]", "labels i64[3]"});
  // Weights of the wrong size.
  OwnedTensor w(F32, {4});
  expectErrorNames(
      run({&one.tensor, &x.tensor, &y.tensor, &w.tensor}, {&loss.tensor, &grad.tensor}), kOp,
      {"weights f32[4]", "C = 3"});
  // dLoss of reduction none has the labels' shape.
  OwnedTensor lossN(F32, {2});
  expectErrorNames(run({&one.tensor, &x.tensor, &y.tensor}, {&lossN.tensor, &grad.tensor},
                       [](program::Kernel &k) { setString(k, "reduction", "none"); }),
                   kOp, {"dLoss f32[]", "labels' shape"});
  expectErrorNames(run({&one.tensor, &x.tensor, &y.tensor}, {&loss.tensor, &grad.tensor},
                       [](program::Kernel &k) { setString(k, "reduction", "avg"); }),
                   kOp, {"unknown reduction 'avg'"});
  // Outputs: the loss is f32, dScores has the scores' type.
  OwnedTensor bfLoss(BF16, {}), bfGrad(BF16, {2, 3});
  expectErrorNames(run({&one.tensor, &x.tensor, &y.tensor}, {&bfLoss.tensor, &grad.tensor}), kOp,
                   {"output 0 (loss)", "bf16[]"});
  expectErrorNames(run({&one.tensor, &x.tensor, &y.tensor}, {&loss.tensor, &bfGrad.tensor}), kOp,
                   {"output 1 (dScores)", "bf16[2x3]", "the scores' type"});
  expectErrorNames(run({&one.tensor, &x.tensor, &y.tensor}, {&loss.tensor}), kOp,
                   {"missing output 1 (dScores)"});
}
