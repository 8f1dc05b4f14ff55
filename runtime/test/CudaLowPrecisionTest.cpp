//===- CudaLowPrecisionTest.cpp - bf16/f16 kernels of mixed precision -----===//
//
// The kernels graph-autocast (straitc --precision bf16) emits with 16-bit
// operands that the CUDA backend runs natively: Conv, ConvGradInput and
// ConvGradWeight through cuDNN with bf16/f16 data and f32 compute, and the
// Reduce* family widened to f32. Each is compared with the CPU backend,
// which widens the operands to f32 (exact), computes in f32 and rounds the
// result once: both round one f32 result that differs only by summation
// order, so they agree to about one unit in the last place of the 16-bit
// type (2^-8 relative for bf16, 2^-11 for f16) plus cancellation.
// SoftmaxCrossEntropyLoss(Grad) on bf16/f16 scores, LayerNormalization with
// a 16-bit Y, LayerNormalizationGrad with a 16-bit dY and AccumulateGrad of a
// 16-bit gradient are also checked bit for bit against the GPU's f32 kernels
// on the widened operands (the Y rounded once). Every case also
// checks that no kernel ran through the host fallback. Skipped without a
// GPU (the CudaNoDevice tests run everywhere).
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "CudaSupport.h"

namespace {

class CudaLowPrecision : public Cuda {
protected:
  /// The kernels that ran on the host so far (none expected).
  std::map<std::string, int64_t> hostKernels() {
    StatusOr<const Backend *> b = registry.forDevice("cuda:0");
    return b.isOk() ? cudaHostFallbackCounts(**b) : std::map<std::string, int64_t>{};
  }
};

/// Tolerances for one rounding to the 16-bit type of sums of `terms`
/// products of values in [-1, 1].
double rtolOf(DType t) { return t == program::DTYPE_BF16 ? 1e-2 : 2e-3; }
double atolOf(DType t, int64_t terms) {
  return (t == program::DTYPE_BF16 ? 8e-3 : 1e-3) * std::sqrt(double(terms));
}

} // namespace

TEST_F(CudaLowPrecision, ConvForward) {
  REQUIRE_GPU();
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    auto attrs = [](std::vector<int64_t> pads, std::vector<int64_t> strides,
                    std::vector<int64_t> dils, int64_t group) {
      return [=](program::Kernel &k) {
        setInts(k, "pads", pads);
        setInts(k, "strides", strides);
        setInts(k, "dilations", dils);
        setInt(k, "group", group);
      };
    };
    // Bias in the operands' type, stride, dilation, groups, odd sizes.
    compare("Conv", {randLow(t, {2, 6, 11, 9}, 130), randLow(t, {4, 3, 3, 2}, 131),
                     randLow(t, {4}, 132)},
            {Arr::out({2, 4, 6, 5}, t)}, attrs({2, 1, 2, 1}, {2, 2}, {2, 1}, 2), rtolOf(t),
            atolOf(t, 18));
    // An f32 bias, depthwise.
    compare("Conv", {randLow(t, {3, 8, 7, 7}, 133), randLow(t, {8, 1, 3, 3}, 134),
                     Arr::rand({8}, 135)},
            {Arr::out({3, 8, 7, 7}, t)}, attrs({1, 1, 1, 1}, {1, 1}, {1, 1}, 8), rtolOf(t),
            atolOf(t, 9));
    // No bias; the 7x7/2 stem of a ResNet on a small image; 1-D.
    compare("Conv", {randLow(t, {2, 3, 20, 20}, 136), randLow(t, {16, 3, 7, 7}, 137)},
            {Arr::out({2, 16, 10, 10}, t)}, attrs({3, 3, 3, 3}, {2, 2}, {1, 1}, 1), rtolOf(t),
            atolOf(t, 147));
    compare("Conv", {randLow(t, {2, 3, 17}, 138), randLow(t, {5, 3, 4}, 139),
                     randLow(t, {5}, 140)},
            {Arr::out({2, 5, 8}, t)}, attrs({1, 1}, {2}, {1}, 1), rtolOf(t), atolOf(t, 12));
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

TEST_F(CudaLowPrecision, ConvGradients) {
  REQUIRE_GPU();
  struct Case {
    Shape x, w;
    std::vector<int64_t> pads, strides, dils;
    int64_t group;
  };
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    for (const Case &c : {Case{{2, 6, 11, 9}, {4, 3, 3, 2}, {2, 1, 2, 1}, {2, 2}, {2, 1}, 2},
                          Case{{3, 8, 7, 7}, {8, 1, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 8},
                          Case{{4, 16, 8, 8}, {32, 16, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 1},
                          Case{{2, 3, 17}, {5, 3, 4}, {1, 1}, {2}, {1}, 1}}) {
      auto attrs = [&](program::Kernel &k) {
        setInts(k, "pads", c.pads);
        setInts(k, "strides", c.strides);
        setInts(k, "dilations", c.dils);
        setInt(k, "group", c.group);
      };
      std::vector<int64_t> kshape(c.w.begin() + 2, c.w.end());
      StatusOr<ConvWindow> w = convWindowOf(c.x, kshape, false, attrs);
      ASSERT_TRUE(w.isOk());
      Shape y = windowOutputShape(c.x[0], c.w[0], *w);
      Arr dy = randLow(t, y, 145), x = randLow(t, c.x, 146), wt = randLow(t, c.w, 147);
      // dX sums over M/group output channels and the window; dW over the
      // batch and the output positions.
      int64_t kernelSize = numElements(kshape);
      int64_t dxTerms = c.w[0] / c.group * kernelSize;
      int64_t dwTerms = y[0] * numElements(Shape(y.begin() + 2, y.end()));
      compare("ConvGradInput", {dy, wt}, {Arr::out(c.x, t)}, [&](program::Kernel &k) {
        attrs(k);
        setInts(k, "input_shape", c.x);
      }, rtolOf(t), atolOf(t, dxTerms));
      compare("ConvGradWeight", {dy, x}, {Arr::out(c.w, t)}, [&](program::Kernel &k) {
        attrs(k);
        setInts(k, "weight_shape", c.w);
      }, rtolOf(t), atolOf(t, dwTerms));
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// Errors found on the host from the static types, before any launch.
TEST_F(CudaLowPrecision, ConvTypeErrors) {
  REQUIRE_GPU();
  std::vector<Arr> outs = {Arr::out({1, 3, 4, 4}, program::DTYPE_BF16)};
  Status s = runOn("cuda:0", registry, "Conv",
                   {Arr::randBf16({1, 2, 6, 6}, 1), Arr::rand({3, 2, 3, 3}, 2)}, outs, {});
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument) << s.toString();
  EXPECT_NE(s.toString().find("differ in type"), std::string::npos) << s.toString();
  outs = {Arr::out({1, 3, 4, 4}, program::DTYPE_F32)};
  s = runOn("cuda:0", registry, "Conv",
            {Arr::randBf16({1, 2, 6, 6}, 1), Arr::randBf16({3, 2, 3, 3}, 2)}, outs, {});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("output 0 is declared f32"), std::string::npos) << s.toString();
}

TEST_F(CudaLowPrecision, ReduceSum) {
  REQUIRE_GPU();
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    Arr x = randLow(t, {3, 4, 37, 5}, 160);
    struct Case {
      std::vector<int64_t> axes;
      int64_t keep;
      Shape out;
    };
    // The Conv bias gradient (axes 0, 2, 3), the innermost dim, all dims.
    for (const Case &c : {Case{{0, 2, 3}, 0, {4}}, Case{{-1}, 0, {3, 4, 37}},
                          Case{{1, 3}, 1, {3, 1, 37, 1}}, Case{{}, 0, {}}})
      compare("ReduceSum", {x}, {Arr::out(c.out, t)}, [&](program::Kernel &k) {
        setInts(k, "axes", c.axes);
        setInt(k, "keepdims", c.keep);
      }, rtolOf(t), atolOf(t, 3 * 4 * 37 * 5));
    // Axes as an input, as the compiler emits it (keepdims = 0 for the
    // Conv bias gradient; the default 1 would give [1, 4, 1, 1]).
    compare("ReduceSum", {x, Arr::i({3}, {0, 2, 3})}, {Arr::out({4}, t)},
            [](program::Kernel &k) { setInt(k, "keepdims", 0); }, rtolOf(t),
            atolOf(t, 3 * 37 * 5));
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// ReduceMean and ReduceMax of 16-bit values (the CPU backend has no 16-bit
// ReduceMean): against the CPU's f32 reduction of the widened values,
// rounded once.
TEST_F(CudaLowPrecision, ReduceMeanMaxAgainstWidenedCpu) {
  REQUIRE_GPU();
  Arr x = Arr::randBf16({6, 50}, 170);
  std::vector<float> v(300);
  for (int k = 0; k < 300; ++k)
    v[k] = static_cast<float>(x.at(k));
  Arr wide = Arr::f({6, 50}, v);
  for (const char *op : {"ReduceMean", "ReduceMax"}) {
    auto attrs = [](program::Kernel &k) {
      setInts(k, "axes", {1});
      setInt(k, "keepdims", 0);
    };
    std::vector<Arr> ref = {Arr::out({6})}, gpu = {Arr::out({6}, program::DTYPE_BF16)};
    ASSERT_TRUE(runOn("cpu", registry, op, {wide}, ref, attrs).isOk());
    Status s = runOn("cuda:0", registry, op, {x}, gpu, attrs);
    ASSERT_TRUE(s.isOk()) << s.toString();
    for (int k = 0; k < 6; ++k)
      EXPECT_NEAR(gpu[0].at(k), ref[0].at(k), 4e-3 * std::abs(ref[0].at(k)) + 1e-6)
          << op << " " << k;
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// SoftmaxCrossEntropyLoss and its gradient on 16-bit scores (graph-cast-motion
// folds the logits' casts into them): on the GPU, bit for bit the f32 kernels
// on the widened scores (the loss, an f32 log_prob) followed by the rounding
// (dScores, a 16-bit log_prob); and against the CPU kernel within rounding.
TEST_F(CudaLowPrecision, SoftmaxCrossEntropyOnLowScores) {
  REQUIRE_GPU();
  struct Case {
    const char *name;
    Shape x;
    std::vector<int64_t> labels;
    bool weighted;
    const char *reduction;
  };
  std::vector<int64_t> wide(16);
  for (int64_t k = 0; k < 16; ++k)
    wide[k] = (k * 977) % 1003;
  wide[3] = -100; // ignored
  const Case cases[] = {
      {"lm_rows_mean_ignore", {16, 1003}, wide, false, "mean"},
      {"sum_weighted_3d", {3, 5, 4}, {0, 4, 2, 1, 3, 3, 0, 1, 2, 4, 4, 0}, true, "sum"},
      {"none", {4, 9}, {8, 0, 3, 1}, true, "none"}};
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(c.name) + " " + dtypeName(t));
      Shape ls = c.x.size() == 2 ? Shape{c.x[0]} : Shape{c.x[0], c.x[2]};
      bool none = std::string(c.reduction) == "none";
      Shape lossShape = none ? ls : Shape{};
      Arr x = t == program::DTYPE_BF16 ? Arr::randBf16(c.x, 180) : Arr::randF16(c.x, 180, 6.0f);
      Arr xw = widened(x), labels = Arr::i(ls, c.labels);
      Arr w = Arr::rand({c.x[1]}, 181);
      for (size_t k = 0; k < w.bytes.size() / 4; ++k)
        reinterpret_cast<float *>(w.bytes.data())[k] += 1.5f;
      Arr dl = none ? Arr::rand(ls, 182) : Arr::f({}, {1.7f});
      auto attrs = [&](program::Kernel &k) {
        setString(k, "reduction", c.reduction);
        if (std::string(c.reduction) == "mean")
          setInt(k, "ignore_index", -100);
      };
      std::vector<Arr> lowIns = {x, labels}, refIns = {xw, labels};
      if (c.weighted) {
        lowIns.push_back(w);
        refIns.push_back(w);
      }
      // Forward: the f32 loss and an f32 log_prob, then a 16-bit log_prob.
      std::vector<Arr> ref = {Arr::out(lossShape), Arr::out(c.x)};
      std::vector<Arr> low = ref, low16 = {Arr::out(lossShape), Arr::out(c.x, t)};
      Status s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLoss", refIns, ref, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLoss", lowIns, low, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLoss", lowIns, low16, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      EXPECT_EQ(firstDifference(low[0], ref[0]), -1) << "loss";
      EXPECT_EQ(firstDifference(low[1], ref[1]), -1) << "f32 log_prob";
      EXPECT_EQ(firstDifference(low16[0], ref[0]), -1) << "loss";
      EXPECT_EQ(firstDifference(low16[1], roundedTo(ref[1], t)), -1) << "16-bit log_prob";
      // Backward: dScores of the scores' type = the f32 gradient rounded once.
      std::vector<Arr> gLowIns = lowIns, gRefIns = refIns;
      gLowIns.insert(gLowIns.begin(), dl);
      gRefIns.insert(gRefIns.begin(), dl);
      std::vector<Arr> gRef = {Arr::out(c.x)}, gLow = {Arr::out(c.x, t)};
      s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLossGrad", gRefIns, gRef, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLossGrad", gLowIns, gLow, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      EXPECT_EQ(firstDifference(gLow[0], roundedTo(gRef[0], t)), -1) << "dScores";
      // The CPU kernels (double statistics) on the same 16-bit inputs: the
      // f32 loss and log_prob within f32 rounding of the row statistics
      // (|x - lse| up to about 10: 1e-5 absolute), dScores within a rounding
      // of the 16-bit type.
      compare("SoftmaxCrossEntropyLoss", lowIns, {Arr::out(lossShape), Arr::out(c.x)}, attrs,
              1e-5, 1e-5);
      compare("SoftmaxCrossEntropyLossGrad", gLowIns, {Arr::out(c.x, t)}, attrs, rtolOf(t),
              t == program::DTYPE_BF16 ? 1e-6 : 1e-7);
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
  // A bf16 loss is an error (the loss of 16-bit scores is f32), on the GPU
  // or through the host fallback alike.
  std::vector<Arr> bad = {Arr::out({}, program::DTYPE_BF16)};
  Status s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLoss",
                   {Arr::randBf16({2, 3}, 1), Arr::i({2}, {0, 2})}, bad, {});
  EXPECT_FALSE(s.isOk());
}

// LayerNormalization with a 16-bit Y (graph-cast-motion rule 9): on the GPU,
// bit for bit the f32 kernel's Y rounded once (the statistics stay f32 and
// equal); against the CPU kernel (double statistics) within one rounding.
TEST_F(CudaLowPrecision, LayerNormWritesLowY) {
  REQUIRE_GPU();
  struct Case {
    Shape x;
    bool bias;
  };
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (const Case &c : {Case{{64, 768}, true}, Case{{2, 3, 37}, false}}) {
      SCOPED_TRACE(shapeToString(c.x) + " " + dtypeName(t));
      int64_t len = c.x.back();
      Shape stats = c.x;
      stats.back() = 1;
      std::vector<float> xv = pseudoRandom(numElements(c.x), 190);
      for (float &v : xv)
        v = 3.0f + 2.0f * v;
      Arr x = Arr::f(c.x, xv), scale = Arr::rand({len}, 191, 0.5f), bias = Arr::rand({len}, 192);
      for (size_t k = 0; k < scale.bytes.size() / 4; ++k)
        reinterpret_cast<float *>(scale.bytes.data())[k] += 1.0f;
      std::vector<Arr> ins = {x, scale};
      if (c.bias)
        ins.push_back(bias);
      auto attrs = [](program::Kernel &k) { setFloat(k, "epsilon", 1e-3f); };
      std::vector<Arr> ref = {Arr::out(c.x), Arr::out(stats), Arr::out(stats)};
      std::vector<Arr> low = {Arr::out(c.x, t), Arr::out(stats), Arr::out(stats)};
      std::vector<Arr> yOnly = {Arr::out(c.x, t)};
      Status s = runOn("cuda:0", registry, "LayerNormalization", ins, ref, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "LayerNormalization", ins, low, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "LayerNormalization", ins, yOnly, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      Arr expected = roundedTo(ref[0], t);
      EXPECT_EQ(firstDifference(low[0], expected), -1) << "Y";
      EXPECT_EQ(firstDifference(yOnly[0], expected), -1) << "Y alone";
      EXPECT_EQ(firstDifference(low[1], ref[1]), -1) << "mean";
      EXPECT_EQ(firstDifference(low[2], ref[2]), -1) << "inverse std";
      // Y is about unit-sized: one rounding of the 16-bit type, plus the f32
      // statistics' error near zero.
      compare("LayerNormalization", ins, {Arr::out(c.x, t)}, attrs, rtolOf(t), 1e-4);
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// LayerNormalizationGrad on a 16-bit dY (rule 10): on the GPU, bit for bit
// the f32 kernel on the widened dY (rows <= 64: one chunk of the column
// sums, so dScale and dB are summed in one order); against the CPU within
// f32 summation error.
TEST_F(CudaLowPrecision, LayerNormGradReadsLowDY) {
  REQUIRE_GPU();
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (const Shape &shape : {Shape{64, 768}, Shape{2, 3, 37}}) {
      SCOPED_TRACE(shapeToString(shape) + " " + dtypeName(t));
      int64_t len = shape.back();
      std::vector<float> xv = pseudoRandom(numElements(shape), 193);
      for (float &v : xv)
        v = 3.0f + 2.0f * v;
      Arr x = Arr::f(shape, xv), scale = Arr::rand({len}, 194, 0.5f);
      for (size_t k = 0; k < scale.bytes.size() / 4; ++k)
        reinterpret_cast<float *>(scale.bytes.data())[k] += 1.0f;
      Arr dy = randLow(t, shape, 195), dyw = widened(dy);
      auto attrs = [](program::Kernel &k) { setFloat(k, "epsilon", 1e-3f); };
      std::vector<Arr> ref = {Arr::out(shape), Arr::out({len}), Arr::out({len})};
      std::vector<Arr> low = ref;
      Status s = runOn("cuda:0", registry, "LayerNormalizationGrad", {dyw, x, scale}, ref, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "LayerNormalizationGrad", {dy, x, scale}, low, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      EXPECT_EQ(firstDifference(low[0], ref[0]), -1) << "dX";
      EXPECT_EQ(firstDifference(low[1], ref[1]), -1) << "dScale";
      EXPECT_EQ(firstDifference(low[2], ref[2]), -1) << "dB";
      // dScale and dB sum up to 64 rows of values in [-1, 1].
      compare("LayerNormalizationGrad", {dy, x, scale},
              {Arr::out(shape), Arr::out({len}), Arr::out({len})}, attrs, 1e-4, 1e-4);
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// AccumulateGrad of a 16-bit gradient into an f32 total (rule 11) over two
// micro-batches (micro-batch 0 overwrites a stale total, 1 adds): the same
// f32 bits as for the widened gradient, on the GPU and on the CPU.
TEST_F(CudaLowPrecision, AccumulateGradReadsLowGrad) {
  REQUIRE_GPU();
  auto accumulate = [&](const std::string &device, const Arr &g0,
                        const Arr &g1) -> StatusOr<std::vector<char>> {
    ProgramBuilder b;
    uint32_t g = b.addValue("g", g0.dtype, g0.shape, program::ROLE_INPUT);
    uint32_t total = b.addValue("total", program::DTYPE_F32, g0.shape, program::ROLE_GRADIENT);
    program::Kernel &k = b.addKernel("AccumulateGrad", {g}, {total});
    k.set_name("acc");
    setInt(k, "micro_batches", 2);
    for (int mb = 0; mb < 2; ++mb) {
      b.addRunStep({0});
      b.get().mutable_steps(mb)->set_micro_batch(mb);
    }
    b.get().set_device(device);
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::create(b.get(), registry));
    STRAIT_ASSIGN_OR_RETURN(Tensor gt, exec->getValue(g));
    STRAIT_ASSIGN_OR_RETURN(Tensor tt, exec->getValue(total));
    std::vector<float> stale(numElements(g0.shape), 100.0f);
    std::memcpy(tt.data, stale.data(), stale.size() * 4);
    std::memcpy(gt.data, g0.bytes.data(), g0.bytes.size());
    STRAIT_RETURN_IF_ERROR(exec->runStep(0));
    std::memcpy(gt.data, g1.bytes.data(), g1.bytes.size());
    STRAIT_RETURN_IF_ERROR(exec->runStep(1));
    return std::vector<char>(tt.as<char>(), tt.as<char>() + tt.byteSize());
  };
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    Arr g0 = randLow(t, {1000, 3}, 196), g1 = randLow(t, {1000, 3}, 197);
    StatusOr<std::vector<char>> ref = accumulate("cuda:0", widened(g0), widened(g1));
    ASSERT_TRUE(ref.isOk()) << ref.getStatus().toString();
    StatusOr<std::vector<char>> gpu = accumulate("cuda:0", g0, g1);
    ASSERT_TRUE(gpu.isOk()) << gpu.getStatus().toString();
    StatusOr<std::vector<char>> cpu = accumulate("cpu", g0, g1);
    ASSERT_TRUE(cpu.isOk()) << cpu.getStatus().toString();
    EXPECT_TRUE(*gpu == *ref);
    EXPECT_TRUE(*gpu == *cpu);
    // Not vacuous: the mean of the two micro-batches, not the last one.
    float first;
    std::memcpy(&first, gpu->data(), 4);
    EXPECT_FLOAT_EQ(first, static_cast<float>((g0.at(0) + g1.at(0)) / 2));
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// Runs everywhere: the checks of a 16-bit convolution (an f32 view of its
// operands through the shared argument checks) see the kernel's attributes
// and the real data, and reject mixed or unsupported types.
TEST(CudaNoDevice, LowPrecisionConvChecks) {
  std::vector<char> mem(4096);
  auto tensor = [&](DType t, Shape s) { return Tensor{t, std::move(s), mem.data()}; };
  const DType BF = program::DTYPE_BF16;
  struct Run {
    program::Kernel k;
    std::vector<Tensor> ins, outs;
    StatusOr<cuda::ConvCheck> check() {
      std::vector<const Tensor *> i;
      std::vector<Tensor *> o;
      for (Tensor &t : ins)
        i.push_back(&t);
      for (Tensor &t : outs)
        o.push_back(&t);
      KernelContext ctx(k, i, o);
      return cuda::checkConv(ctx);
    }
  };
  Run conv;
  conv.k.set_op("Conv");
  conv.k.set_name("c");
  setInts(conv.k, "strides", {2, 2});
  setInts(conv.k, "pads", {1, 1, 1, 1});
  conv.ins = {tensor(BF, {1, 2, 6, 6}), tensor(BF, {3, 2, 3, 3}), tensor(BF, {3})};
  conv.outs = {tensor(BF, {1, 3, 3, 3})};
  StatusOr<cuda::ConvCheck> c = conv.check();
  ASSERT_TRUE(c.isOk()) << c.getStatus().toString();
  EXPECT_EQ(c->dtype, BF);
  EXPECT_EQ(c->conv.y->shape, (Shape{1, 3, 3, 3}));
  EXPECT_EQ(c->conv.x->data, mem.data());
  EXPECT_EQ(c->conv.window.stride[2], 2);
  EXPECT_EQ(c->conv.window.pad[2], 1);
  EXPECT_NE(c->conv.bias, nullptr);
  // The strides were read: the unstrided output shape is an error.
  conv.outs = {tensor(BF, {1, 3, 6, 6})};
  c = conv.check();
  ASSERT_FALSE(c.isOk());
  EXPECT_EQ(c.getStatus().getCode(), StatusCode::InvalidArgument);
  // auto_pad is read too.
  Run same;
  same.k.set_op("Conv");
  setString(same.k, "auto_pad", "SAME_UPPER");
  same.ins = {tensor(BF, {1, 2, 5, 5}), tensor(BF, {3, 2, 3, 3})};
  same.outs = {tensor(BF, {1, 3, 5, 5})};
  EXPECT_TRUE(same.check().isOk()) << same.check().getStatus().toString();
  // An f32 bias with bf16 operands; an f16 bias is an error; f64 declines.
  conv.outs = {tensor(BF, {1, 3, 3, 3})};
  conv.ins[2] = tensor(program::DTYPE_F32, {3});
  EXPECT_TRUE(conv.check().isOk());
  conv.ins[2] = tensor(program::DTYPE_F16, {3});
  EXPECT_EQ(conv.check().getStatus().getCode(), StatusCode::InvalidArgument);
  conv.ins[2] = tensor(BF, {3});
  conv.ins[1] = tensor(program::DTYPE_F32, {3, 2, 3, 3});
  c = conv.check();
  ASSERT_FALSE(c.isOk());
  EXPECT_NE(c.getStatus().toString().find("differ in type"), std::string::npos)
      << c.getStatus().toString();
  Run f64 = conv;
  f64.ins = {tensor(program::DTYPE_F64, {1, 2, 6, 6}), tensor(program::DTYPE_F64, {3, 2, 3, 3})};
  f64.outs = {tensor(program::DTYPE_F64, {1, 3, 3, 3})};
  EXPECT_EQ(f64.check().getStatus().getCode(), StatusCode::Unimplemented);
  // The gradients, grouped, with their shape attributes.
  Run gi;
  gi.k.set_op("ConvGradInput");
  setInt(gi.k, "group", 2);
  setInts(gi.k, "input_shape", {2, 4, 5, 5});
  gi.ins = {tensor(program::DTYPE_F16, {2, 6, 3, 3}),
            tensor(program::DTYPE_F16, {6, 2, 3, 3})};
  gi.outs = {tensor(program::DTYPE_F16, {2, 4, 5, 5})};
  c = gi.check();
  ASSERT_TRUE(c.isOk()) << c.getStatus().toString();
  EXPECT_EQ(c->dtype, program::DTYPE_F16);
  EXPECT_EQ(c->grad.group, 2);
  EXPECT_EQ(c->grad.xShape, (Shape{2, 4, 5, 5}));
  Run gw;
  gw.k.set_op("ConvGradWeight");
  setInt(gw.k, "group", 2);
  setInts(gw.k, "weight_shape", {6, 2, 3, 3});
  gw.ins = {tensor(BF, {2, 6, 3, 3}), tensor(BF, {2, 4, 5, 5})};
  gw.outs = {tensor(BF, {6, 2, 3, 3})};
  c = gw.check();
  ASSERT_TRUE(c.isOk()) << c.getStatus().toString();
  EXPECT_EQ(c->grad.wShape, (Shape{6, 2, 3, 3}));
  gw.outs = {tensor(BF, {6, 4, 3, 3})};
  EXPECT_FALSE(gw.check().isOk());
}

// The static answer agrees with what the backend did for the cases above.
TEST(CudaNoDevice, LowPrecisionKernelsAreNative) {
  program::Kernel conv, sum;
  conv.set_op("Conv");
  sum.set_op("ReduceSum");
  bool cudnn = false;
  for (const std::string &op : cuda::cudaKernelOps())
    cudnn |= op == "Conv";
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    cuda::OperandType x{true, t, {2, 3, 8, 8}}, w{true, t, {4, 3, 3, 3}},
        y{true, t, {2, 4, 6, 6}}, b{true, t, {4}}, axes{true, program::DTYPE_I64, {3}};
    EXPECT_EQ(cuda::nativeSupport({&conv, {x, w, b}, {y}}).native, cudnn) << dtypeName(t);
    EXPECT_TRUE(cuda::nativeSupport({&sum, {y, axes}, {b}}).native) << dtypeName(t);
  }
}

// SoftmaxCrossEntropyLoss(Grad) on 16-bit scores run natively: an f32 loss,
// dLoss and weights, dScores (and a log_prob) in the scores' type.
TEST(CudaNoDevice, LowPrecisionSoftmaxCrossEntropyIsNative) {
  program::Kernel loss, grad;
  loss.set_op("SoftmaxCrossEntropyLoss");
  grad.set_op("SoftmaxCrossEntropyLossGrad");
  const DType F32 = program::DTYPE_F32;
  cuda::OperandType labels{true, program::DTYPE_I64, {4}}, scalar{true, F32, {}},
      weights{true, F32, {7}}, absent{};
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    cuda::OperandType x{true, t, {4, 7}}, x32{true, F32, {4, 7}};
    EXPECT_TRUE(cuda::nativeSupport({&loss, {x, labels}, {scalar}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&loss, {x, labels, weights}, {scalar, x}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&loss, {x, labels}, {scalar, x32}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&grad, {scalar, x, labels}, {x}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&grad, {scalar, x, labels, weights}, {x}}).native);
    // A 16-bit loss, dLoss or gradient of another type is not the kernel's.
    cuda::OperandType lowScalar{true, t, {}};
    EXPECT_FALSE(cuda::nativeSupport({&loss, {x, labels}, {lowScalar}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&grad, {lowScalar, x, labels}, {x}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&grad, {scalar, x, labels}, {x32}}).native);
  }
  cuda::OperandType x64{true, program::DTYPE_F64, {4, 7}};
  cuda::NativeSupport no = cuda::nativeSupport({&loss, {x64, labels}, {scalar}});
  EXPECT_FALSE(no.native);
  EXPECT_NE(no.reason.find("scores are f64"), std::string::npos) << no.reason;
  EXPECT_TRUE(cuda::nativeSupport({&loss, {cuda::OperandType{true, F32, {4, 7}}, labels, absent},
                                   {scalar}}).native);
}

// LayerNormalization (16-bit Y), LayerNormalizationGrad (16-bit dY) and
// AccumulateGrad (16-bit grad) run natively with their other operands f32;
// 16-bit operands elsewhere are not the kernels'.
TEST(CudaNoDevice, LowPrecisionNormAndAccumulateAreNative) {
  program::Kernel norm, grad, acc;
  norm.set_op("LayerNormalization");
  grad.set_op("LayerNormalizationGrad");
  acc.set_op("AccumulateGrad");
  const DType F32 = program::DTYPE_F32;
  cuda::OperandType x{true, F32, {4, 8}}, s{true, F32, {8}}, stat{true, F32, {4, 1}};
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    cuda::OperandType y{true, t, {4, 8}}, lowS{true, t, {8}};
    EXPECT_TRUE(cuda::nativeSupport({&norm, {x, s, s}, {y}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&norm, {x, s}, {y, stat, stat}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&grad, {y, x, s}, {x, s, s}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&acc, {y}, {x}}).native);
    // A 16-bit X, scale, dX or total is not the kernels'.
    EXPECT_FALSE(cuda::nativeSupport({&norm, {y, s, s}, {y}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&norm, {x, lowS, s}, {y}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&grad, {y, y, s}, {x, s, s}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&grad, {y, x, s}, {y, s, s}}).native);
    cuda::NativeSupport no = cuda::nativeSupport({&acc, {y}, {y}});
    EXPECT_FALSE(no.native);
    EXPECT_NE(no.reason.find("output 0 is " + std::string(dtypeName(t))), std::string::npos)
        << no.reason;
  }
  EXPECT_TRUE(cuda::nativeSupport({&acc, {x}, {x}}).native);
  cuda::OperandType x64{true, program::DTYPE_F64, {4, 8}};
  EXPECT_FALSE(cuda::nativeSupport({&acc, {x64}, {x64}}).native);
}

// A one-micro-batch step hands the 16-bit gradient straight to AdamW or SGD
// (the exporter drops AccumulateGrad). On the GPU the update is bit for bit
// the one on the widened gradient (the f32 total AccumulateGrad would have
// written), and it matches the CPU kernel. Odd sizes take the vectorized
// body and the scalar tail.
TEST_F(CudaLowPrecision, OptimizersReadLowGradient) {
  REQUIRE_GPU();
  Arr lr = Arr::f({}, {0.01f}), step = Arr::i({}, {3});
  Shape shape{1001};
  Arr x = Arr::rand(shape, 201), m = Arr::rand(shape, 202, 0.1f), v = Arr::rand(shape, 203, 0.01f);
  for (size_t k = 0; k < v.bytes.size() / 4; ++k)
    reinterpret_cast<float *>(v.bytes.data())[k] = std::abs(reinterpret_cast<float *>(v.bytes.data())[k]);
  Attrs adamAttrs = [](program::Kernel &k) {
    k.set_domain("strait");
    setFloat(k, "weight_decay", 0.1f);
  };
  Attrs sgdAttrs = [](program::Kernel &k) {
    setFloat(k, "momentum", 0.9f);
    setFloat(k, "weight_decay", 0.01f);
    setInt(k, "nesterov", 1);
  };
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    Arr g = randLow(t, shape, 204), gw = widened(g);
    auto run = [&](const std::string &device, const std::string &op, const Arr &grad) {
      std::vector<Arr> outs(op == "AdamW" ? 3 : 2, Arr::out(shape));
      std::vector<Arr> ins = op == "AdamW" ? std::vector<Arr>{lr, step, x, grad, m, v}
                                           : std::vector<Arr>{lr, x, grad, m};
      Status s = runOn(device, registry, op, ins, outs, op == "AdamW" ? adamAttrs : sgdAttrs);
      EXPECT_TRUE(s.isOk()) << op << " on " << device << ": " << s.toString();
      return outs;
    };
    for (const char *op : {"AdamW", "SGD"}) {
      SCOPED_TRACE(op);
      std::vector<Arr> low = run("cuda:0", op, g), ref = run("cuda:0", op, gw),
                       cpu = run("cpu", op, g);
      for (size_t o = 0; o < low.size(); ++o) {
        EXPECT_TRUE(low[o].bytes == ref[o].bytes) << "output " << o;
        for (int64_t k = 0; k < numElements(shape); ++k)
          ASSERT_NEAR(low[o].at(k), cpu[o].at(k), 1e-5 + 1e-5 * std::abs(cpu[o].at(k)))
              << "output " << o << " element " << k;
      }
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// The exporter merges a step's AdamW updates into one multi-tensor kernel;
// the CUDA backend runs it in launches of up to 24 tensors, one block per
// 4096 elements. 30 tensors (two launches) of sizes around the chunk and the
// 4-wide body, with f32, bf16 and f16 gradients mixed: every output is bit
// for bit the one of AdamW on that tensor alone, and matches the CPU.
TEST_F(CudaLowPrecision, MultiTensorAdamWEqualsOneTensorAtATime) {
  REQUIRE_GPU();
  Arr lr = Arr::f({}, {0.003f}), step = Arr::i({}, {2});
  const int64_t sizes[] = {1, 3, 4, 7, 768, 4095, 4096, 4097, 8195, 20000};
  const int count = 30;
  std::vector<Arr> xs, gs, ms, vs;
  for (int i = 0; i < count; ++i) {
    Shape shape{sizes[i % 10]};
    uint32_t seed = 300 + 4 * i;
    xs.push_back(Arr::rand(shape, seed));
    DType gt = i % 3 == 0 ? program::DTYPE_F32 : i % 3 == 1 ? program::DTYPE_BF16 : program::DTYPE_F16;
    gs.push_back(gt == program::DTYPE_F32 ? Arr::rand(shape, seed + 1) : randLow(gt, shape, seed + 1));
    ms.push_back(Arr::rand(shape, seed + 2, 0.1f));
    Arr v = Arr::rand(shape, seed + 3, 0.01f);
    for (size_t k = 0; k < v.bytes.size() / 4; ++k)
      reinterpret_cast<float *>(v.bytes.data())[k] = std::abs(reinterpret_cast<float *>(v.bytes.data())[k]);
    vs.push_back(v);
  }
  Attrs attrs = [](program::Kernel &k) {
    k.set_domain("strait");
    setFloat(k, "weight_decay", 0.1f);
  };
  auto adamW = [&](const std::string &device, int first, int n) {
    std::vector<Arr> ins = {lr, step};
    for (const std::vector<Arr> *group : {&xs, &gs, &ms, &vs})
      ins.insert(ins.end(), group->begin() + first, group->begin() + first + n);
    std::vector<Arr> outs;
    for (int g = 0; g < 3; ++g)
      for (int i = first; i < first + n; ++i)
        outs.push_back(Arr::out(xs[i].shape));
    Status s = runOn(device, registry, "AdamW", ins, outs, attrs);
    EXPECT_TRUE(s.isOk()) << device << ": " << s.toString();
    return outs;
  };
  std::vector<Arr> all = adamW("cuda:0", 0, count), cpu = adamW("cpu", 0, count);
  ASSERT_EQ(all.size(), size_t(3 * count));
  for (int i = 0; i < count; ++i) {
    SCOPED_TRACE("tensor " + std::to_string(i) + " of " + std::to_string(sizes[i % 10]));
    std::vector<Arr> one = adamW("cuda:0", i, 1);
    for (int g = 0; g < 3; ++g) {
      const Arr &got = all[g * count + i];
      EXPECT_TRUE(got.bytes == one[g].bytes) << "output group " << g;
      const Arr &ref = cpu[g * count + i];
      for (int64_t k = 0; k < numElements(got.shape); ++k)
        ASSERT_NEAR(got.at(k), ref.at(k), 1e-5 + 1e-5 * std::abs(ref.at(k)))
            << "output group " << g << " element " << k;
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// AdamW's fourth output group on the GPU: the 16-bit copy of each new
// parameter is the Cast kernel of the new f32 parameter, bit for bit; a
// tensor without a copy (absent output) is updated all the same.
TEST_F(CudaLowPrecision, AdamWWritesTheParametersLowCopies) {
  REQUIRE_GPU();
  Arr lr = Arr::f({}, {0.01f}), step = Arr::i({}, {2});
  Shape a{4099}, c{33};
  Arr xa = Arr::rand(a, 401, 3.0f), xc = Arr::rand(c, 402, 3.0f), ga = randLow(program::DTYPE_BF16, a, 403),
      gc = Arr::rand(c, 404), ma = Arr::rand(a, 405, 0.1f), mc = Arr::rand(c, 406, 0.1f),
      va = Arr::rand(a, 407, 0.01f), vc = Arr::rand(c, 408, 0.01f);
  for (Arr *v : {&va, &vc})
    for (size_t k = 0; k < v->bytes.size() / 4; ++k)
      reinterpret_cast<float *>(v->bytes.data())[k] = std::abs(reinterpret_cast<float *>(v->bytes.data())[k]);
  Attrs attrs = [](program::Kernel &k) {
    k.set_domain("strait");
    setFloat(k, "weight_decay", 0.1f);
  };
  std::vector<Arr> ins = {lr, step, xa, xc, ga, gc, ma, mc, va, vc};
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    std::vector<Arr> plain = {Arr::out(a), Arr::out(c), Arr::out(a), Arr::out(c), Arr::out(a),
                              Arr::out(c)};
    std::vector<Arr> withCopies = plain;
    withCopies.push_back(Arr::out(a, t));
    withCopies.push_back(Arr::out(c, t));
    ASSERT_TRUE(runOn("cuda:0", registry, "AdamW", ins, plain, attrs).isOk());
    Status s = runOn("cuda:0", registry, "AdamW", ins, withCopies, attrs);
    ASSERT_TRUE(s.isOk()) << s.toString();
    for (size_t o = 0; o < plain.size(); ++o)
      EXPECT_TRUE(withCopies[o].bytes == plain[o].bytes) << "output " << o;
    for (int i = 0; i < 2; ++i) {
      std::vector<Arr> cast = {Arr::out(i ? c : a, t)};
      ASSERT_TRUE(runOn("cuda:0", registry, "Cast", {plain[i]}, cast,
                        [&](program::Kernel &k) { setInt(k, "to", t); })
                      .isOk());
      EXPECT_TRUE(withCopies[6 + i].bytes == cast[0].bytes) << "copy " << i;
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// AdamW's and SGD's gradients may be 16-bit on the GPU; their parameters and
// state may not.
TEST(CudaNoDevice, OptimizersTakeLowGradients) {
  program::Kernel adam, sgd;
  adam.set_op("AdamW");
  sgd.set_op("SGD");
  const DType F32 = program::DTYPE_F32;
  cuda::OperandType lr{true, F32, {}}, step{true, program::DTYPE_I64, {}}, x{true, F32, {8}};
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    cuda::OperandType g{true, t, {8}};
    EXPECT_TRUE(cuda::nativeSupport({&adam, {lr, step, x, x, g, g, x, x, x, x}, {x, x, x, x, x, x}})
                    .native);
    EXPECT_TRUE(cuda::nativeSupport({&sgd, {lr, x, g, x}, {x, x}}).native);
    // The parameters' 16-bit copies (AdamW's fourth output group).
    cuda::OperandType absent{false, F32, {}};
    EXPECT_TRUE(cuda::nativeSupport({&adam, {lr, step, x, x, g, g, x, x, x, x},
                                     {x, x, x, x, x, x, g, absent}})
                    .native);
    cuda::NativeSupport no =
        cuda::nativeSupport({&adam, {lr, step, x, x, g, g, x, g, x, x}, {x, x, x, x, x, x}});
    EXPECT_FALSE(no.native);
    EXPECT_NE(no.reason.find("input 7 is " + std::string(dtypeName(t))), std::string::npos)
        << no.reason;
    EXPECT_FALSE(cuda::nativeSupport({&sgd, {lr, g, g, x}, {x, x}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&sgd, {lr, x, g, x}, {g, x}}).native);
  }
}
