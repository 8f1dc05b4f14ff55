//===- CudaSoftmaxCrossEntropyWithGradTest.cpp - The fused loss on the GPU ===//
//
// SoftmaxCrossEntropyLossWithGrad's CUDA kernel (Normalization.cu) against
// the CPU kernel (within f32 rounding: the two backends sum in different
// orders) and against the CUDA SoftmaxCrossEntropyLoss then
// SoftmaxCrossEntropyLossGrad, bit for bit (the same row statistics and f32
// expressions). f32, bf16 and f16 scores, reductions mean / sum / none,
// weights, ignore_index, i32 labels, a GPT-2-wide row. Skips without a GPU,
// except the static native-support rule (CudaNoDevice).
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"
#include "CudaSupport.h"

#include <optional>

namespace {

class CudaSceWithGrad : public Cuda {};

constexpr DType F32 = program::DTYPE_F32, BF16 = program::DTYPE_BF16, F16 = program::DTYPE_F16;
constexpr const char *kOp = "SoftmaxCrossEntropyLossWithGrad";

struct Case {
  Shape scores; // [N, C] or [N, C, D]
  const char *reduction;
  bool weighted;
  std::optional<int64_t> ignore;
  bool labels32 = false;
};

Arr scoresOf(DType dt, const Shape &s, uint32_t seed) {
  if (dt == BF16)
    return Arr::randBf16(s, seed);
  if (dt == F16)
    return Arr::randF16(s, seed, 4.0f);
  return Arr::rand(s, seed, 4.0f);
}

Arr labelsOf(const Case &c, const Shape &ls) {
  int64_t rows = numElements(ls);
  std::vector<int64_t> l(rows);
  for (int64_t r = 0; r < rows; ++r)
    l[r] = (r * 7 + 3) % c.scores[1];
  if (c.ignore)
    for (int64_t r = 1; r < rows; r += 5)
      l[r] = *c.ignore;
  if (!c.labels32)
    return Arr::i(ls, l);
  Arr a{program::DTYPE_I32, ls, {}};
  a.bytes.resize(rows * 4);
  for (int64_t r = 0; r < rows; ++r) {
    int32_t v = static_cast<int32_t>(l[r]);
    std::memcpy(a.bytes.data() + 4 * r, &v, 4);
  }
  return a;
}

} // namespace

TEST_F(CudaSceWithGrad, EqualsCpuAndTheCudaPair) {
  REQUIRE_GPU();
  const Case cases[] = {{{8, 37}, "mean", false, -100},
                        {{7, 11}, "mean", true, 1},
                        {{3, 5, 4}, "sum", true, std::nullopt},
                        {{9, 13}, "none", true, -1},
                        {{2, 6, 5}, "none", false, 0, /*labels32=*/true},
                        {{16, 50304}, "mean", false, -100}};
  uint32_t seed = 11;
  for (DType dt : {F32, BF16, F16})
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(dtypeName(dt)) + shapeToString(c.scores) + " " + c.reduction);
      Shape ls = c.scores.size() > 2 ? Shape{c.scores[0], c.scores[2]} : Shape{c.scores[0]};
      bool none = std::string(c.reduction) == "none";
      Shape lossShape = none ? ls : Shape{};
      Arr x = scoresOf(dt, c.scores, seed++), y = labelsOf(c, ls);
      Arr dl = none ? Arr::rand(ls, seed++) : Arr::f({}, {1.5f});
      std::vector<Arr> lossIns = {x, y};
      if (c.weighted)
        lossIns.push_back(Arr::rand({c.scores[1]}, seed++));
      std::vector<Arr> ins = lossIns;
      ins.insert(ins.begin(), dl);
      Attrs attrs = [&](program::Kernel &k) {
        setString(k, "reduction", c.reduction);
        if (c.ignore)
          setInt(k, "ignore_index", *c.ignore);
      };
      std::vector<Arr> cpu = {Arr::out(lossShape), Arr::out(c.scores, dt)}, gpu = cpu;
      Status s = runOn("cpu", registry, kOp, ins, cpu, attrs);
      ASSERT_TRUE(s.isOk()) << "cpu: " << s.toString();
      s = runOn("cuda:0", registry, kOp, ins, gpu, attrs);
      ASSERT_TRUE(s.isOk()) << "cuda: " << s.toString();
      // The CUDA pair: bit for bit.
      std::vector<Arr> pairLoss = {Arr::out(lossShape)}, pairGrad = {Arr::out(c.scores, dt)};
      s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLoss", lossIns, pairLoss, attrs);
      ASSERT_TRUE(s.isOk()) << "cuda loss: " << s.toString();
      s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLossGrad", ins, pairGrad, attrs);
      ASSERT_TRUE(s.isOk()) << "cuda grad: " << s.toString();
      EXPECT_EQ(gpu[0].bytes, pairLoss[0].bytes);
      EXPECT_EQ(gpu[1].bytes, pairGrad[0].bytes);
      // The CPU kernel: within f32 rounding (16-bit dScores: one unit of
      // their rounding).
      for (int64_t i = 0; i < numElements(lossShape); ++i)
        EXPECT_NEAR(gpu[0].at(i), cpu[0].at(i), 1e-5 * (1 + std::abs(cpu[0].at(i)))) << i;
      double rel = dt == F32 ? 1e-5 : dt == BF16 ? 8e-3 : 1e-3;
      int64_t nonzero = 0;
      for (int64_t i = 0; i < numElements(c.scores); ++i) {
        nonzero += cpu[1].at(i) != 0;
        ASSERT_NEAR(gpu[1].at(i), cpu[1].at(i), rel * (1e-6 + std::abs(cpu[1].at(i)))) << i;
      }
      EXPECT_GT(nonzero, 0);
    }
}

// A label outside [0, C) is reported by the device kernel.
TEST_F(CudaSceWithGrad, LabelOutOfRange) {
  REQUIRE_GPU();
  std::vector<Arr> ins = {Arr::f({}, {1.0f}), Arr::rand({2, 3}, 1), Arr::i({2}, {0, 3})};
  std::vector<Arr> outs = {Arr::out({}), Arr::out({2, 3})};
  Status s = runOn("cuda:0", registry, kOp, ins, outs, {});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("label"), std::string::npos) << s.toString();
}

// Native on CUDA: f32, bf16 or f16 scores with an f32 dLoss, weights and
// loss and dScores of the scores' type; not f64 scores or a 16-bit loss.
TEST(CudaNoDevice, SoftmaxCrossEntropyWithGradIsNative) {
  program::Kernel k;
  k.set_op(kOp);
  cuda::OperandType labels{true, program::DTYPE_I64, {4}}, scalar{true, F32, {}},
      weights{true, F32, {7}};
  for (DType t : {F32, BF16, F16}) {
    SCOPED_TRACE(dtypeName(t));
    cuda::OperandType x{true, t, {4, 7}}, lowScalar{true, BF16, {}};
    EXPECT_TRUE(cuda::nativeSupport({&k, {scalar, x, labels}, {scalar, x}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&k, {scalar, x, labels, weights}, {scalar, x}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&k, {lowScalar, x, labels}, {scalar, x}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&k, {scalar, x, labels}, {lowScalar, x}}).native);
  }
  cuda::OperandType x64{true, program::DTYPE_F64, {4, 7}};
  cuda::NativeSupport no = cuda::nativeSupport({&k, {scalar, x64, labels}, {scalar, x64}});
  EXPECT_FALSE(no.native);
  EXPECT_NE(no.reason.find("scores are f64"), std::string::npos) << no.reason;
  cuda::OperandType bf{true, BF16, {4, 7}}, f32x{true, F32, {4, 7}};
  EXPECT_FALSE(cuda::nativeSupport({&k, {scalar, bf, labels}, {scalar, f32x}}).native);
}
