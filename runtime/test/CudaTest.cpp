//===- CudaTest.cpp - CUDA kernels against the CPU backend ----------------===//
//
// Every test builds a one-kernel program, runs it on the CPU backend and on
// the CUDA backend with the same inputs, and compares every output. Tests
// that need a GPU call GTEST_SKIP() (reported by ctest as skipped) when
// cudaGetDeviceCount finds none; the error paths that need no GPU run always.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

// Runs everywhere: without a device, creating the backend is a clear error.
TEST(CudaNoDevice, CreateFailsCleanlyOrSucceeds) {
  StatusOr<std::unique_ptr<Backend>> b = createCudaBackend();
  if (cudaDeviceCount() == 0) {
    ASSERT_FALSE(b.isOk());
    EXPECT_EQ(b.getStatus().getCode(), StatusCode::Unavailable);
    EXPECT_NE(b.getStatus().toString().find("cuda backend"), std::string::npos);
  } else {
    ASSERT_TRUE(b.isOk()) << b.getStatus().toString();
    EXPECT_EQ((*b)->name(), "cuda");
  }
  CudaOptions bad;
  bad.device = 1000;
  EXPECT_EQ(createCudaBackend(bad).getStatus().getCode(), StatusCode::Unavailable);
}

TEST_F(Cuda, BinaryBroadcast) {
  REQUIRE_GPU();
  Arr a = Arr::rand({8, 4, 6, 5}, 1), b = Arr::rand({8, 1, 6, 5}, 2), s = Arr::f({}, {0.5f});
  for (const char *op : {"Add", "Sub", "Mul", "Max", "Min"})
    compare(op, {a, b}, {Arr::out({8, 4, 6, 5})});
  compare("Div", {a, Arr::f({5}, {1.5f, -2, 3, 4, 0.5f})}, {Arr::out({8, 4, 6, 5})});
  compare("Mul", {s, a}, {Arr::out({8, 4, 6, 5})});
  Arr pos = Arr::rand({3, 7}, 3);
  for (size_t k = 0; k < pos.bytes.size() / 4; ++k)
    reinterpret_cast<float *>(pos.bytes.data())[k] += 1.5f;
  compare("Pow", {pos, Arr::f({}, {3.0f})}, {Arr::out({3, 7})});
  compare("Pow", {pos, Arr::f({}, {0.7f})}, {Arr::out({3, 7})});
  compare("LessOrEqual", {Arr::i({1, 1, 1, 6}, {0, 1, 2, 3, 4, 5}), Arr::i({1, 1, 6, 1}, {0, 1, 2, 3, 4, 5})},
          {Arr::out({1, 1, 6, 6}, program::DTYPE_BOOL)});
  compare("Add", {Arr::i({4}, {1, 2, 3, 4}), Arr::i({1}, {10})}, {Arr::out({4}, program::DTYPE_I64)});
}

TEST_F(Cuda, UnaryAndWhere) {
  REQUIRE_GPU();
  Arr x = Arr::rand({1000, 3}, 4, 3.0f);
  for (const char *op : {"Tanh", "Exp", "Neg", "Abs", "Sigmoid", "Relu", "Erf"})
    compare(op, {x}, {Arr::out({1000, 3})});
  Arr cond{program::DTYPE_BOOL, {2, 1, 3, 3}, {1, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 0, 1, 0, 1, 1, 1, 0}};
  compare("Where", {cond, Arr::f({}, {0.0f}), Arr::f({}, {-1e9f})}, {Arr::out({2, 1, 3, 3})});
  compare("Where", {cond, Arr::rand({2, 4, 3, 3}, 5), Arr::rand({3}, 6)}, {Arr::out({2, 4, 3, 3})});
}

TEST_F(Cuda, DropoutTrainingDrawsTheCpuMask) {
  REQUIRE_GPU();
  // The same hash on both backends (cpu/DropoutMask.h): equal bit for bit,
  // with the iteration read from the step input on the device.
  for (float ratio : {0.1f, 0.5f})
    compare("DropoutTraining", {Arr::rand({1000, 37}, 90), Arr::i({1}, {7})},
            {Arr::out({1000, 37})},
            [ratio](program::Kernel &k) {
              setFloat(k, "ratio", ratio);
              setInt(k, "key", 3);
              setInt(k, "seed", 11);
              setInt(k, "replica", 1);
            },
            0, 0);
}

TEST_F(Cuda, Layout) {
  REQUIRE_GPU();
  Arr x = Arr::rand({2, 3, 4, 5}, 7);
  for (std::vector<int64_t> perm : {std::vector<int64_t>{0, 2, 1, 3}, {0, 1, 3, 2}, {3, 2, 1, 0}, {0, 2, 3, 1}}) {
    Shape out = {x.shape[perm[0]], x.shape[perm[1]], x.shape[perm[2]], x.shape[perm[3]]};
    compare("Transpose", {x}, {Arr::out(out)}, [&](program::Kernel &k) { setInts(k, "perm", perm); });
  }
  compare("Reshape", {x, Arr::i({2}, {6, 20})}, {Arr::out({6, 20})});
  compare("Expand", {Arr::rand({1, 3, 1}, 8), Arr::i({3}, {2, 3, 4})}, {Arr::out({2, 3, 4})});
  compare("Concat", {Arr::rand({2, 3, 2}, 9), Arr::rand({2, 3, 5}, 10), Arr::rand({2, 3, 1}, 11)},
          {Arr::out({2, 3, 8})}, [](program::Kernel &k) { setInt(k, "axis", -1); });
  compare("Split", {Arr::rand({2, 9, 3}, 12), Arr::i({3}, {3, 4, 2})},
          {Arr::out({2, 3, 3}), Arr::out({2, 4, 3}), Arr::out({2, 2, 3})},
          [](program::Kernel &k) { setInt(k, "axis", 1); });
}

// Transposes large enough for the tiled copy (Elementwise.cu, tilePlan):
// dims that are not multiples of 32, a batch, 2- and 4-byte elements, the
// attention-head permutations of GPT-2 and the LM head's [V, d] -> [d, V].
TEST_F(Cuda, TransposeTiles) {
  REQUIRE_GPU();
  struct Case {
    Shape in;
    std::vector<int64_t> perm;
  };
  for (const Case &c : {Case{{3, 37, 5, 70}, {0, 2, 3, 1}}, Case{{2, 100, 3, 64}, {0, 2, 3, 1}},
                        Case{{2, 3, 64, 100}, {0, 3, 1, 2}}, Case{{77, 130}, {1, 0}},
                        Case{{50257, 24}, {1, 0}}, Case{{4, 33, 17}, {2, 1, 0}}}) {
    Shape out;
    for (int64_t p : c.perm)
      out.push_back(c.in[p]);
    auto attrs = [&](program::Kernel &k) { setInts(k, "perm", c.perm); };
    compare("Transpose", {Arr::rand(c.in, 120)}, {Arr::out(out)}, attrs, 0, 0);
    compare("Transpose", {Arr::randBf16(c.in, 121)}, {Arr::out(out, program::DTYPE_BF16)}, attrs,
            0, 0);
  }
}

TEST_F(Cuda, GatherAndScatterAdd) {
  REQUIRE_GPU();
  Arr table = Arr::rand({50, 16}, 13), idx = Arr::i({4, 6}, {1, 2, 3, 1, 1, 49, -1, 0, 7, 7, 7, 7,
                                                              5, 4, 3, 2, 1, 0, 10, 20, 30, 40, 1, 1});
  compare("Gather", {table, idx}, {Arr::out({4, 6, 16})}, [](program::Kernel &k) { setInt(k, "axis", 0); });
  compare("Gather", {Arr::rand({3, 50, 2}, 14), Arr::i({2}, {4, -3})}, {Arr::out({3, 2, 2})},
          [](program::Kernel &k) { setInt(k, "axis", 1); });
  compare("GatherGrad", {Arr::rand({4, 6, 16}, 15), idx}, {Arr::out({50, 16})}, [](program::Kernel &k) {
    setInt(k, "axis", 0);
    setInts(k, "data_shape", {50, 16});
  });
}

TEST_F(Cuda, GatherIndexOutOfRangeIsAnError) {
  REQUIRE_GPU();
  std::vector<Arr> outs = {Arr::out({2, 4})};
  Status s = runOn("cuda:0", registry, "Gather", {Arr::rand({5, 4}, 16), Arr::i({2}, {1, 5})}, outs,
                   {});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("Gather 'k'"), std::string::npos) << s.toString();
  EXPECT_NE(s.toString().find("out of range"), std::string::npos) << s.toString();
}

TEST_F(Cuda, UnsupportedOpFailsAtLoad) {
  REQUIRE_GPU();
  std::vector<Arr> outs = {Arr::out({1, 1, 3, 3})};
  Status s = runOn("cuda:0", registry, "MaxRoiPool", {Arr::rand({1, 1, 3, 3}, 1)}, outs, {});
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.getCode(), StatusCode::Unimplemented);
  EXPECT_NE(s.toString().find("cuda backend has no kernel for op 'MaxRoiPool'"), std::string::npos)
      << s.toString();
}

TEST_F(Cuda, MatMulAndGemm) {
  REQUIRE_GPU();
  compare("MatMul", {Arr::rand({8, 4, 16, 32}, 17), Arr::rand({8, 4, 32, 24}, 18)}, {Arr::out({8, 4, 16, 24})});
  compare("MatMul", {Arr::rand({8, 16, 32}, 19), Arr::rand({32, 24}, 20)}, {Arr::out({8, 16, 24})});
  compare("MatMul", {Arr::rand({16, 32}, 21), Arr::rand({3, 32, 24}, 22)}, {Arr::out({3, 16, 24})});
  compare("MatMul", {Arr::rand({2, 1, 5, 7}, 23), Arr::rand({1, 3, 7, 4}, 24)}, {Arr::out({2, 3, 5, 4})});
  compare("MatMul", {Arr::rand({7}, 25), Arr::rand({7, 4}, 26)}, {Arr::out({4})});
  for (int ta = 0; ta < 2; ++ta)
    for (int tb = 0; tb < 2; ++tb) {
      Shape as = ta ? Shape{33, 20} : Shape{20, 33}, bs = tb ? Shape{17, 33} : Shape{33, 17};
      compare("Gemm", {Arr::rand(as, 27), Arr::rand(bs, 28), Arr::rand({17}, 29)}, {Arr::out({20, 17})},
              [&](program::Kernel &k) {
                setInt(k, "transA", ta);
                setInt(k, "transB", tb);
                setFloat(k, "alpha", 0.5f);
                setFloat(k, "beta", 2.0f);
              });
    }
  compare("Gemm", {Arr::rand({20, 33}, 30), Arr::rand({33, 17}, 31)}, {Arr::out({20, 17})});
}

TEST_F(Cuda, MatMulBf16TensorCores) {
  REQUIRE_GPU();
  BackendRegistry bf16;
  registerCpuBackend(bf16);
  CudaOptions o;
  o.matmul = MatmulPrecision::BF16;
  ASSERT_TRUE(registerCudaBackend(bf16, o).isOk());
  std::swap(registry, bf16);
  // bf16 inputs (8 bits of mantissa), f32 accumulation over K = 256: relative
  // error ~ sqrt(K) * 2^-8 / sqrt(K)-ish of the row norm; 2e-2 is generous.
  compare("MatMul", {Arr::rand({64, 256}, 32), Arr::rand({256, 96}, 33)}, {Arr::out({64, 96})}, {},
          2e-2, 5e-2);
  std::swap(registry, bf16);
}

// graph-autocast's programs: bf16 products, casts, transposes and the bias
// gradient (ReduceToShape) against the CPU backend (f32 accumulation and
// round to nearest even on both; summation orders differ: one bf16 ulp).
TEST_F(Cuda, Bf16StorageOfMixedPrecisionPrograms) {
  REQUIRE_GPU();
  const double ulp = 1.0 / 128;
  compare("MatMul", {Arr::randBf16({2, 16, 64}, 60), Arr::randBf16({64, 24}, 61)},
          {Arr::out({2, 16, 24}, program::DTYPE_BF16)}, {}, ulp, 1e-3);
  compare("Gemm", {Arr::randBf16({16, 64}, 62), Arr::randBf16({24, 64}, 63),
                   Arr::randBf16({24}, 64)},
          {Arr::out({16, 24}, program::DTYPE_BF16)},
          [](program::Kernel &k) { setInt(k, "transB", 1); }, ulp, 1e-3);
  compare("Cast", {Arr::rand({300}, 65)}, {Arr::out({300}, program::DTYPE_BF16)},
          [](program::Kernel &k) { setInt(k, "to", program::DTYPE_BF16); }, 0, 0);
  compare("Cast", {Arr::randBf16({300}, 66)}, {Arr::out({300})},
          [](program::Kernel &k) { setInt(k, "to", program::DTYPE_F32); }, 0, 0);
  compare("Transpose", {Arr::randBf16({3, 5, 7}, 67)}, {Arr::out({7, 3, 5}, program::DTYPE_BF16)},
          [](program::Kernel &k) { setInts(k, "perm", {2, 0, 1}); }, 0, 0);
  compare("ReduceToShape", {Arr::randBf16({256, 24}, 68)}, {Arr::out({24}, program::DTYPE_BF16)},
          [](program::Kernel &k) { setInts(k, "shape", {24}); }, ulp, 1e-2);
}

// Products large enough to be padded (CudaMatMul.cpp, kPadMinWork) whose
// rows are not 16-byte aligned, as GPT-2's 50257-wide logits: the padded
// copies in and out must give the CPU's result.
TEST_F(Cuda, MisalignedLeadingDimsArePadded) {
  REQUIRE_GPU();
  const double ulp = 1.0 / 128;
  // Y and B rows misaligned (n = 8201).
  compare("MatMul", {Arr::randBf16({512, 256}, 90), Arr::randBf16({256, 8201}, 91)},
          {Arr::out({512, 8201}, program::DTYPE_BF16)}, {}, ulp, 1e-2);
  // A rows misaligned (k = 8201), B shared by a batch folded into M.
  compare("MatMul", {Arr::randBf16({2, 128, 8201}, 92), Arr::randBf16({8201, 512}, 93)},
          {Arr::out({2, 128, 512}, program::DTYPE_BF16)}, {}, ulp, 1e-2);
  // A strided batch of misaligned rows (k = 4101).
  compare("MatMul", {Arr::randBf16({2, 256, 4101}, 94), Arr::randBf16({2, 4101, 512}, 95)},
          {Arr::out({2, 256, 512}, program::DTYPE_BF16)}, {}, ulp, 1e-2);
  // Gemm with transB and a bias, Y misaligned: the tied LM head's layout.
  compare("Gemm", {Arr::randBf16({512, 256}, 96), Arr::randBf16({8201, 256}, 97),
                   Arr::randBf16({8201}, 98)},
          {Arr::out({512, 8201}, program::DTYPE_BF16)},
          [](program::Kernel &k) { setInt(k, "transB", 1); }, ulp, 1e-2);
  // f32 rows of 8201 (not a multiple of 4 floats).
  compare("MatMul", {Arr::rand({512, 256}, 99), Arr::rand({256, 8201}, 100)},
          {Arr::out({512, 8201})}, {}, 1e-4, 1e-4);
}

// straitc --pad-classes: an LM head computed over classes padded to a
// multiple of 64 (zero weight columns, a bias of 0 / -inf), then the loss and
// its gradient over the padded scores: the padded scores are -inf on both
// backends, the loss is the CPU's and the padded gradient columns are 0.
TEST_F(Cuda, PaddedClassesNegInfBias) {
  REQUIRE_GPU();
  const int64_t rows = 512, k = 256, v = 8201, vp = 8256;
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F32}) {
    SCOPED_TRACE(t == program::DTYPE_BF16 ? "bf16" : "f32");
    bool low = t == program::DTYPE_BF16;
    Arr a = low ? Arr::randBf16({rows, k}, 120) : Arr::rand({rows, k}, 120);
    Arr b = low ? Arr::randBf16({k, vp}, 121) : Arr::rand({k, vp}, 121);
    Arr bias{t, {vp}, {}};
    bias.bytes.assign(static_cast<size_t>(vp) * (low ? 2 : 4), 0);
    for (int64_t j = v; j < vp; ++j) {
      if (low) {
        uint16_t ninf = 0xFF80;
        std::memcpy(&bias.bytes[j * 2], &ninf, 2);
      } else {
        float ninf = -INFINITY;
        std::memcpy(&bias.bytes[j * 4], &ninf, 4);
      }
    }
    std::vector<Arr> cpu = {Arr::out({rows, vp}, t)}, gpu = cpu;
    ASSERT_TRUE(runOn("cpu", registry, "Gemm", {a, b, bias}, cpu, {}).isOk());
    Status s = runOn("cuda:0", registry, "Gemm", {a, b, bias}, gpu, {});
    ASSERT_TRUE(s.isOk()) << s.toString();
    int bad = 0;
    for (int64_t i = 0; i < rows * vp && bad < 5; ++i) {
      double c = cpu[0].at(i), g = gpu[0].at(i);
      bool ok = i % vp >= v ? std::isinf(g) && g < 0
                            : std::abs(c - g) <= (low ? 1.0 / 128 : 1e-4) * (1 + std::abs(c));
      if (!ok) {
        ADD_FAILURE() << "score " << i / vp << "," << i % vp << ": cpu " << c << " cuda " << g;
        ++bad;
      }
    }
    // The loss and its gradient over the CPU's padded scores.
    std::vector<int64_t> labels(rows);
    for (int64_t i = 0; i < rows; ++i)
      labels[i] = i % 7 == 0 ? -100 : (i * 131) % v;
    Arr y = Arr::i({rows}, labels);
    Attrs mean = [](program::Kernel &k) {
      setString(k, "reduction", "mean");
      setInt(k, "ignore_index", -100);
    };
    std::vector<Arr> lc = {Arr::out({})}, lg = lc;
    ASSERT_TRUE(runOn("cpu", registry, "SoftmaxCrossEntropyLoss", {cpu[0], y}, lc, mean).isOk());
    s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLoss", {cpu[0], y}, lg, mean);
    ASSERT_TRUE(s.isOk()) << s.toString();
    EXPECT_TRUE(std::isfinite(lg[0].at(0)));
    EXPECT_NEAR(lg[0].at(0), lc[0].at(0), 1e-5 * std::abs(lc[0].at(0)));
    std::vector<Arr> dc = {Arr::out({rows, vp}, t)}, dg = dc;
    ASSERT_TRUE(runOn("cpu", registry, "SoftmaxCrossEntropyLossGrad", {Arr::f({}, {1.0f}), cpu[0], y},
                      dc, mean)
                    .isOk());
    s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLossGrad", {Arr::f({}, {1.0f}), cpu[0], y}, dg,
              mean);
    ASSERT_TRUE(s.isOk()) << s.toString();
    bad = 0;
    for (int64_t i = 0; i < rows * vp && bad < 5; ++i) {
      double c = dc[0].at(i), g = dg[0].at(i);
      bool ok = i % vp >= v ? g == 0.0 : std::abs(c - g) <= 1e-6 + (low ? 1.0 / 128 : 1e-4) * std::abs(c);
      if (!ok) {
        ADD_FAILURE() << "gradient " << i / vp << "," << i % vp << ": cpu " << c << " cuda " << g;
        ++bad;
      }
    }
  }
}

TEST_F(Cuda, SoftmaxFamily) {
  REQUIRE_GPU();
  Arr x = Arr::rand({4, 3, 70}, 34, 4.0f), dy = Arr::rand({4, 3, 70}, 35);
  compare("Softmax", {x}, {Arr::out({4, 3, 70})});
  compare("LogSoftmax", {x}, {Arr::out({4, 3, 70})});
  compare("Softmax", {x}, {Arr::out({4, 3, 70})}, [](program::Kernel &k) { setInt(k, "axis", 1); });
  compare("Softmax", {Arr::rand({2, 50257}, 36, 5.0f)}, {Arr::out({2, 50257})}, {}, 1e-4, 1e-7);
  std::vector<Arr> y = {Arr::out({4, 3, 70})};
  ASSERT_TRUE(runOn("cpu", registry, "Softmax", {x}, y, {}).isOk());
  compare("SoftmaxGrad", {dy, y[0]}, {Arr::out({4, 3, 70})});
  compare("SoftmaxGrad", {dy, y[0]}, {Arr::out({4, 3, 70})}, [](program::Kernel &k) { setInt(k, "axis", 1); });
  compare("LogSoftmaxGrad", {dy, Arr::rand({4, 3, 70}, 37)}, {Arr::out({4, 3, 70})});
}

TEST_F(Cuda, LayerNormAndGrad) {
  REQUIRE_GPU();
  Arr x = Arr::rand({6, 10, 768}, 38, 2.0f), s = Arr::rand({768}, 39), b = Arr::rand({768}, 40);
  compare("LayerNormalization", {x, s, b}, {Arr::out({6, 10, 768}), Arr::out({6, 10, 1}), Arr::out({6, 10, 1})},
          [](program::Kernel &k) { setFloat(k, "epsilon", 1e-5f); });
  compare("LayerNormalizationGrad", {Arr::rand({6, 10, 768}, 41), x, s},
          {Arr::out({6, 10, 768}), Arr::out({768}), Arr::out({768})}, {}, 1e-3, 1e-4);
  compare("ReduceToShape", {Arr::rand({6, 10, 768}, 42)}, {Arr::out({768})},
          [](program::Kernel &k) { setInts(k, "shape", {768}); }, 1e-4, 1e-4);
  compare("ReduceToShape", {Arr::rand({6, 10, 7}, 43)}, {Arr::out({6, 1, 7})},
          [](program::Kernel &k) { setInts(k, "shape", {6, 1, 7}); });
  compare("ReduceToShape", {Arr::rand({300, 500}, 44)}, {Arr::out({})},
          [](program::Kernel &k) { setInts(k, "shape", {}); }, 1e-4, 1e-3);
}

TEST_F(Cuda, CrossEntropyAndGrad) {
  REQUIRE_GPU();
  Arr x = Arr::rand({64, 1000}, 45, 4.0f);
  std::vector<int64_t> labels(64);
  for (int i = 0; i < 64; ++i)
    labels[i] = i % 5 == 0 ? -100 : (i * 37) % 1000;
  Arr t = Arr::i({64}, labels);
  Attrs mean = [](program::Kernel &k) {
    setString(k, "reduction", "mean");
    setInt(k, "ignore_index", -100);
  };
  compare("SoftmaxCrossEntropyLoss", {x, t}, {Arr::out({}), Arr::out({64, 1000})}, mean);
  compare("SoftmaxCrossEntropyLossGrad", {Arr::f({}, {1.5f}), x, t}, {Arr::out({64, 1000})}, mean, 1e-4, 1e-8);
  Attrs none = [](program::Kernel &k) { setString(k, "reduction", "none"); };
  Arr x3 = Arr::rand({4, 7, 3}, 46);
  Arr t3 = Arr::i({4, 3}, {0, 1, 2, 3, 4, 5, 6, 0, 1, 2, 3, 4});
  compare("SoftmaxCrossEntropyLoss", {x3, t3}, {Arr::out({4, 3})}, none);
  compare("SoftmaxCrossEntropyLossGrad", {Arr::rand({4, 3}, 47), x3, t3}, {Arr::out({4, 7, 3})}, none);
  std::vector<Arr> outs = {Arr::out({})};
  Status s = runOn("cuda:0", registry, "SoftmaxCrossEntropyLoss", {Arr::rand({2, 3}, 1), Arr::i({2}, {0, 3})},
                   outs, {});
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("label"), std::string::npos) << s.toString();
}

TEST_F(Cuda, Optimizers) {
  REQUIRE_GPU();
  Arr lr = Arr::f({}, {0.01f}), step = Arr::i({}, {3});
  Arr x1 = Arr::rand({100}, 48), x2 = Arr::rand({7, 9}, 49), g1 = Arr::rand({100}, 50),
      g2 = Arr::rand({7, 9}, 51), m1 = Arr::rand({100}, 52, 0.1f), m2 = Arr::rand({7, 9}, 53, 0.1f);
  Arr v1 = Arr::rand({100}, 54, 0.01f), v2 = Arr::rand({7, 9}, 55, 0.01f);
  for (Arr *v : {&v1, &v2})
    for (size_t k = 0; k < v->bytes.size() / 4; ++k)
      reinterpret_cast<float *>(v->bytes.data())[k] = std::abs(reinterpret_cast<float *>(v->bytes.data())[k]);
  compare("AdamW", {lr, step, x1, x2, g1, g2, m1, m2, v1, v2},
          {Arr::out({100}), Arr::out({7, 9}), Arr::out({100}), Arr::out({7, 9}), Arr::out({100}), Arr::out({7, 9})},
          [](program::Kernel &k) {
            k.set_domain("strait");
            setFloat(k, "weight_decay", 0.1f);
          },
          1e-5, 1e-6, {2, 3, 6, 7, 8, 9});
  compare("SGD", {lr, x1, g1, m1}, {Arr::out({100}), Arr::out({100})}, [](program::Kernel &k) {
    setFloat(k, "momentum", 0.9f);
    setFloat(k, "weight_decay", 0.01f);
    setInt(k, "nesterov", 1);
  });
  compare("AccumulateGrad", {g1}, {Arr::out({100})});
  compare("ClipByGlobalNorm", {g1, g2}, {Arr::out({}), Arr::out({100}), Arr::out({7, 9})},
          [](program::Kernel &k) { setFloat(k, "max_norm", 1.0f); });
  std::vector<Arr> outs = {Arr::out({100}), Arr::out({100}), Arr::out({100})};
  Status s = runOn("cuda:0", registry, "AdamW", {lr, Arr::i({}, {0}), x1, g1, m1, v1}, outs,
                   [](program::Kernel &k) { k.set_domain("strait"); });
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("step count must start at 1"), std::string::npos) << s.toString();
}

// Loss scaling: UnscaleGradients, and AdamW / SGD reading the found_inf
// flag on the device (1: the outputs keep the inputs; 0: the plain update),
// against the CPU kernels.
TEST_F(Cuda, LossScaling) {
  REQUIRE_GPU();
  Arr lr = Arr::f({}, {0.01f}), step = Arr::i({}, {3}), scale = Arr::f({}, {1024.0f});
  Arr x1 = Arr::rand({100}, 60), x2 = Arr::rand({7, 9}, 61), g1 = Arr::rand({100}, 62),
      g2 = Arr::rand({7, 9}, 63), m1 = Arr::rand({100}, 64, 0.1f), m2 = Arr::rand({7, 9}, 65, 0.1f);
  Arr v1 = Arr::rand({100}, 66, 0.01f), v2 = Arr::rand({7, 9}, 67, 0.01f);
  for (Arr *v : {&v1, &v2})
    for (size_t k = 0; k < v->bytes.size() / 4; ++k)
      reinterpret_cast<float *>(v->bytes.data())[k] = std::abs(reinterpret_cast<float *>(v->bytes.data())[k]);
  compare("UnscaleGradients", {scale, g1, g2}, {Arr::out({}), Arr::out({100}), Arr::out({7, 9})},
          [](program::Kernel &k) { k.set_domain("strait"); });
  for (float found : {0.0f, 1.0f}) {
    Arr flag = Arr::f({}, {found});
    compare("AdamW", {lr, step, x1, x2, g1, g2, m1, m2, v1, v2, flag},
            {Arr::out({100}), Arr::out({7, 9}), Arr::out({100}), Arr::out({7, 9}), Arr::out({100}),
             Arr::out({7, 9})},
            [](program::Kernel &k) { k.set_domain("strait"); }, 1e-5, 1e-6);
    compare("SGD", {lr, x1, g1, m1, flag}, {Arr::out({100}), Arr::out({100})},
            [](program::Kernel &k) { setFloat(k, "momentum", 0.9f); });
  }
}

// NCCL on one rank: bootstrap over a one-rank loopback communicator, the
// all-reduce of a world of one leaves the tensor unchanged.

TEST_F(Cuda, NcclOneRankAllReduce) {
  REQUIRE_GPU();
  LoneCommunicator lone;
  StatusOr<std::unique_ptr<Communicator>> nccl = createNcclCommunicator(lone);
  ASSERT_TRUE(nccl.isOk()) << nccl.getStatus().toString();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  StatusOr<Buffer> buf = (*backend)->allocate(64 * sizeof(float));
  ASSERT_TRUE(buf.isOk());
  Tensor t{program::DTYPE_F32, {64}, buf->data()};
  for (int i = 0; i < 64; ++i)
    t.as<float>()[i] = float(i);
  ASSERT_TRUE((*nccl)->allReduceSum(t, 0).isOk());
  for (int i = 0; i < 64; ++i)
    EXPECT_EQ(t.as<float>()[i], float(i));
  EXPECT_EQ((*nccl)->getWorldSize(), 1);
}


// RMSNormalization (one block a row) and its gradient (dScale from per-chunk
// partials summed in chunk order) against the CPU backend; rows of 4096 and
// of 100 (fewer elements than threads in a block), axis 1 over [10, 100],
// 3000 rows (several chunks).
TEST_F(Cuda, RMSNormAndGrad) {
  REQUIRE_GPU();
  Arr x = Arr::rand({6, 10, 4096}, 90, 2.0f), s = Arr::rand({4096}, 91);
  compare("RMSNormalization", {x, s}, {Arr::out({6, 10, 4096})},
          [](program::Kernel &k) { setFloat(k, "epsilon", 1e-6f); });
  compare("RMSNormalizationGrad", {Arr::rand({6, 10, 4096}, 92), x, s},
          {Arr::out({6, 10, 4096}), Arr::out({4096})}, {}, 1e-3, 1e-4);
  Arr x2 = Arr::rand({3000, 100}, 93), s2 = Arr::rand({100}, 94);
  auto axis1 = [](program::Kernel &k) { setInt(k, "axis", 1); };
  compare("RMSNormalization", {Arr::rand({30, 10, 100}, 95), Arr::rand({10, 100}, 97)},
          {Arr::out({30, 10, 100})}, axis1);
  compare("RMSNormalizationGrad", {Arr::rand({3000, 100}, 96), x2, s2},
          {Arr::out({3000, 100}), Arr::out({100})}, {}, 1e-3, 1e-3);
}
