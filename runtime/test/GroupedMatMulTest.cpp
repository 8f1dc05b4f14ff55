//===- GroupedMatMulTest.cpp - Routed expert products on the CPU ----------===//
//
// GroupedMatMul and GroupedMatMulGradWeight against naive loops in double
// over random routings (experts with no rows, every row on one expert,
// negative indices, both W layouts, more threads than experts); bf16
// operands as the f32 result of the widened operands, rounded once; the
// errors (an index out of range names the row and the value).
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include "strait/runtime/ThreadPool.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

constexpr DType F32 = program::DTYPE_F32, BF16 = program::DTYPE_BF16, I64 = program::DTYPE_I64;

struct Case {
  int64_t s, i, o, e;
  bool transB;
  std::vector<int64_t> idx;
};

program::Kernel kernel(const std::string &op, bool transB, int64_t experts = 0) {
  program::Kernel k;
  k.set_op(op);
  k.set_name("moe");
  setInt(k, "transB", transB ? 1 : 0);
  if (experts)
    setInt(k, "num_experts", experts);
  return k;
}

OwnedTensor indices(const std::vector<int64_t> &idx) {
  OwnedTensor t(I64, Shape{static_cast<int64_t>(idx.size())});
  for (size_t k = 0; k < idx.size(); ++k)
    t.tensor.as<int64_t>()[k] = idx[k];
  return t;
}

/// W[e] as op(W[e]) [I, O] entry (a, b).
double wAt(const Case &c, const std::vector<float> &w, int64_t e, int64_t a, int64_t b) {
  return c.transB ? w[(e * c.o + b) * c.i + a] : w[(e * c.i + a) * c.o + b];
}

int64_t expertOf(const Case &c, int64_t s) { return c.idx[s] < 0 ? c.idx[s] + c.e : c.idx[s]; }

std::vector<double> naiveForward(const Case &c, const std::vector<float> &x,
                                 const std::vector<float> &w) {
  std::vector<double> y(c.s * c.o, 0.0);
  for (int64_t s = 0; s < c.s; ++s)
    for (int64_t b = 0; b < c.o; ++b) {
      double acc = 0;
      for (int64_t a = 0; a < c.i; ++a)
        acc += double(x[s * c.i + a]) * wAt(c, w, expertOf(c, s), a, b);
      y[s * c.o + b] = acc;
    }
  return y;
}

/// dW in W's layout.
std::vector<double> naiveGradWeight(const Case &c, const std::vector<float> &x,
                                    const std::vector<float> &dy) {
  std::vector<double> dw(c.e * c.i * c.o, 0.0);
  for (int64_t s = 0; s < c.s; ++s) {
    int64_t e = expertOf(c, s);
    for (int64_t a = 0; a < c.i; ++a)
      for (int64_t b = 0; b < c.o; ++b) {
        size_t at = c.transB ? (e * c.o + b) * c.i + a : (e * c.i + a) * c.o + b;
        dw[at] += double(x[s * c.i + a]) * double(dy[s * c.o + b]);
      }
  }
  return dw;
}

void expectNear(const std::vector<double> &want, const Tensor &got, double tol,
                const std::string &what) {
  ASSERT_EQ(static_cast<int64_t>(want.size()), got.numel()) << what;
  for (size_t k = 0; k < want.size(); ++k)
    ASSERT_NEAR(want[k], got.as<float>()[k], tol * (1 + std::fabs(want[k]))) << what << " at " << k;
}

void check(const Case &c, uint32_t seed) {
  std::vector<float> x = pseudoRandom(c.s * c.i, seed), w = pseudoRandom(c.e * c.i * c.o, seed + 1);
  std::vector<float> dy = pseudoRandom(c.s * c.o, seed + 2);
  OwnedTensor xt = f32Tensor({c.s, c.i}, x), dyt = f32Tensor({c.s, c.o}, dy);
  OwnedTensor wt = f32Tensor(c.transB ? Shape{c.e, c.o, c.i} : Shape{c.e, c.i, c.o}, w);
  OwnedTensor it = indices(c.idx);
  OwnedTensor y(F32, Shape{c.s, c.o});
  Status st = runCpu(kernel("GroupedMatMul", c.transB), {&xt.tensor, &wt.tensor, &it.tensor},
                     {&y.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  expectNear(naiveForward(c, x, w), y.tensor, 1e-5, "Y");
  OwnedTensor dw(F32, wt.tensor.shape);
  st = runCpu(kernel("GroupedMatMulGradWeight", c.transB, c.e),
              {&xt.tensor, &dyt.tensor, &it.tensor}, {&dw.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  expectNear(naiveGradWeight(c, x, dy), dw.tensor, 1e-5, "dW");
}

std::vector<int64_t> randomRouting(int64_t s, int64_t e, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> pick(0, e - 1);
  std::vector<int64_t> idx(s);
  for (int64_t &v : idx)
    v = pick(gen);
  return idx;
}

TEST(GroupedMatMul, RandomRoutingBothLayouts) {
  for (bool transB : {true, false}) {
    // Experts 2, 5 and 7 get no row: a routing over {0, 1, 3, 4, 6} only.
    std::vector<int64_t> idx = randomRouting(37, 5, 3);
    const int64_t map[] = {0, 1, 3, 4, 6};
    for (int64_t &v : idx)
      v = map[v];
    check({37, 24, 40, 8, transB, idx}, 10);
    check({64, 16, 48, 6, transB, randomRouting(64, 6, 4)}, 20);
  }
}

TEST(GroupedMatMul, AllRowsOnOneExpertAndNegativeIndices) {
  for (bool transB : {true, false}) {
    check({20, 12, 9, 4, transB, std::vector<int64_t>(20, 2)}, 30);
    check({20, 12, 9, 4, transB, std::vector<int64_t>(20, -1)}, 31);
    std::vector<int64_t> mixed = randomRouting(30, 8, 5);
    for (size_t k = 0; k < mixed.size(); k += 3)
      mixed[k] -= 8; // the same expert, counted from the end
    check({30, 10, 14, 8, transB, mixed}, 32);
  }
}

TEST(GroupedMatMul, LargeExpertsAndManyThreads) {
  // Products above the per-expert threshold (OpenBLAS's threads), and small
  // ones spread over more workers than there are experts.
  int before = getNumThreads();
  setNumThreads(4);
  check({96, 128, 160, 3, true, randomRouting(96, 3, 6)}, 40);
  check({50, 8, 8, 2, false, randomRouting(50, 2, 7)}, 41);
  setNumThreads(before);
}

TEST(GroupedMatMul, Bf16OperandsWidenedAndRoundedOnce) {
  Case c{24, 16, 12, 4, true, randomRouting(24, 4, 8)};
  std::vector<float> x = pseudoRandom(c.s * c.i, 50), w = pseudoRandom(c.e * c.i * c.o, 51);
  for (float &v : x)
    v = bf16Value(bf16Bits(v));
  for (float &v : w)
    v = bf16Value(bf16Bits(v));
  OwnedTensor xf = f32Tensor({c.s, c.i}, x), wf = f32Tensor({c.e, c.o, c.i}, w);
  OwnedTensor xb = castTo(xf.tensor, BF16), wb = castTo(wf.tensor, BF16);
  OwnedTensor it = indices(c.idx);
  OwnedTensor yf(F32, Shape{c.s, c.o}), yb(BF16, Shape{c.s, c.o});
  ASSERT_TRUE(runCpu(kernel("GroupedMatMul", true), {&xf.tensor, &wf.tensor, &it.tensor},
                     {&yf.tensor})
                  .isOk());
  Status st = runCpu(kernel("GroupedMatMul", true), {&xb.tensor, &wb.tensor, &it.tensor},
                     {&yb.tensor});
  ASSERT_TRUE(st.isOk()) << st.toString();
  for (int64_t k = 0; k < yf.tensor.numel(); ++k)
    ASSERT_EQ(bf16Bits(yf.tensor.as<float>()[k]), yb.tensor.as<uint16_t>()[k]) << k;
}

TEST(GroupedMatMul, IndexOutOfRangeNamesRowAndValue) {
  OwnedTensor x = f32Tensor({3, 2}, pseudoRandom(6, 1)), w = f32Tensor({2, 4, 2}, pseudoRandom(16, 2));
  OwnedTensor it = indices({0, 2, 1});
  OwnedTensor y(F32, Shape{3, 4});
  Status st = runCpu(kernel("GroupedMatMul", true), {&x.tensor, &w.tensor, &it.tensor}, {&y.tensor});
  ASSERT_FALSE(st.isOk());
  expectErrorNames(st.toString(), "GroupedMatMul", {"index 2", "row 1", "[-2, 2)"});
  OwnedTensor low = indices({0, -3, 1});
  OwnedTensor dy = f32Tensor({3, 4}, pseudoRandom(12, 3)), dw(F32, Shape{2, 4, 2});
  st = runCpu(kernel("GroupedMatMulGradWeight", true, 2), {&x.tensor, &dy.tensor, &low.tensor},
              {&dw.tensor});
  ASSERT_FALSE(st.isOk());
  expectErrorNames(st.toString(), "GroupedMatMulGradWeight", {"index -3", "row 1"});
}

TEST(GroupedMatMul, ShapeErrorsNameTheOperands) {
  OwnedTensor x = f32Tensor({3, 2}, pseudoRandom(6, 1)), w = f32Tensor({2, 4, 3}, pseudoRandom(24, 2));
  OwnedTensor it = indices({0, 1, 1});
  OwnedTensor y(F32, Shape{3, 4});
  Status st = runCpu(kernel("GroupedMatMul", true), {&x.tensor, &w.tensor, &it.tensor}, {&y.tensor});
  ASSERT_FALSE(st.isOk());
  expectErrorNames(st.toString(), "GroupedMatMul", {"inner dimensions"});
  OwnedTensor shortIdx = indices({0, 1});
  OwnedTensor w2 = f32Tensor({2, 4, 2}, pseudoRandom(16, 2));
  st = runCpu(kernel("GroupedMatMul", true), {&x.tensor, &w2.tensor, &shortIdx.tensor}, {&y.tensor});
  ASSERT_FALSE(st.isOk());
  expectErrorNames(st.toString(), "GroupedMatMul", {"indices"});
}

} // namespace
