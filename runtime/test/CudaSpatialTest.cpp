//===- CudaSpatialTest.cpp - CUDA convolution, pooling, norms, reductions ===//
//
// cuDNN convolution and its gradients, pooling, batch norm, reductions,
// slices and the host fallback, against the CPU backend (CudaTestUtil.h);
// the window/descriptor logic that needs no GPU runs everywhere.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

namespace {
class CudaSpatial : public Cuda {};
} // namespace

//===----------------------------------------------------------------------===//
// Convolution (cuDNN), pooling, batch norm, reductions, slices, host fallback
//===----------------------------------------------------------------------===//

namespace {

using Kfn = std::function<void(program::Kernel &)>;

StatusOr<cuda::CudnnConvShape> cudnnShapeOf(const Shape &x, const Shape &w, int64_t group,
                                            const Kfn &attrs) {
  program::Kernel k;
  k.set_op("Conv");
  k.set_name("c");
  attrs(k);
  KernelContext ctx(k, {}, {});
  std::vector<int64_t> kshape(w.begin() + 2, w.end());
  STRAIT_ASSIGN_OR_RETURN(ConvWindow win, convWindow(ctx, x, kshape, false));
  return cuda::cudnnConvShape(ctx, win, x[0], x[1], w[0], group);
}

} // namespace

// Runs everywhere: for many attribute combinations the CPU kernels accept
// the output shape of the shared window (rt::convWindow) that the CUDA
// kernels allocate.
TEST(CudaNoDevice, SpatialWindowAgreesWithCpuBackend) {
  BackendRegistry cpu;
  registerCpuBackend(cpu);
  int checked = 0;
  for (const char *op : {"MaxPool", "AveragePool", "Conv"})
    for (const char *autoPad : {"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"})
      for (int64_t ceilMode : {0, 1})
        for (int64_t stride : {1, 2, 3})
          for (int64_t dil : {1, 2})
            for (std::vector<int64_t> pads :
                 {std::vector<int64_t>{0, 0, 0, 0}, {1, 0, 0, 2}, {2, 1, 1, 1}}) {
              bool conv = std::string(op) == "Conv";
              if ((conv && ceilMode) || (std::string(autoPad) != "NOTSET" && pads[0] != 0) ||
                  (std::string(op) == "AveragePool" && dil != 1))
                continue;
              Shape x = {1, 2, 10, 7};
              std::vector<int64_t> kernel = {3, 2};
              Kfn attrs = [&](program::Kernel &k) {
                if (!conv)
                  setInts(k, "kernel_shape", kernel);
                setString(k, "auto_pad", autoPad);
                setInt(k, "ceil_mode", ceilMode);
                setInts(k, "strides", {stride, stride});
                setInts(k, "dilations", {dil, dil});
                if (std::string(autoPad) == "NOTSET")
                  setInts(k, "pads", pads);
              };
              StatusOr<ConvWindow> w = convWindowOf(x, kernel, !conv, attrs);
              if (!w.isOk())
                continue; // an empty output: the CPU rejects it too (not checked)
              std::vector<Arr> ins = {Arr::rand(x, 1)};
              if (conv)
                ins.push_back(Arr::rand({3, 2, 3, 2}, 2));
              std::vector<Arr> outs = {
                  Arr::out(windowOutputShape(1, conv ? 3 : 2, *w))};
              Status s = runOn("cpu", cpu, op, ins, outs, attrs);
              EXPECT_TRUE(s.isOk()) << op << " " << autoPad << " ceil " << ceilMode
                                    << " stride " << stride << " dil " << dil << ": "
                                    << s.toString();
              ++checked;
            }
  EXPECT_GT(checked, 100);
}

TEST(CudaNoDevice, CudnnConvShapes) {
  // 1-D: a 4-D problem with height 1.
  StatusOr<cuda::CudnnConvShape> s =
      cudnnShapeOf({2, 6, 9}, {4, 3, 3}, 2, [](program::Kernel &k) {
        setInts(k, "pads", {1, 1});
        setInts(k, "strides", {2});
      });
  ASSERT_TRUE(s.isOk()) << s.getStatus().toString();
  EXPECT_EQ(s->nbDims, 4);
  EXPECT_EQ(std::vector<int>(s->x, s->x + 4), (std::vector<int>{2, 6, 1, 9}));
  EXPECT_EQ(std::vector<int>(s->w, s->w + 4), (std::vector<int>{4, 3, 1, 3}));
  EXPECT_EQ(std::vector<int>(s->y, s->y + 4), (std::vector<int>{2, 4, 1, 5}));
  EXPECT_EQ(s->pad[0], 0);
  EXPECT_EQ(s->pad[1], 1);
  EXPECT_EQ(s->stride[1], 2);
  // 3-D: 5-D descriptors.
  s = cudnnShapeOf({1, 2, 4, 5, 6}, {3, 2, 2, 2, 2}, 1,
                   [](program::Kernel &k) { setInts(k, "dilations", {1, 2, 1}); });
  ASSERT_TRUE(s.isOk());
  EXPECT_EQ(s->nbDims, 5);
  EXPECT_EQ(std::vector<int>(s->y, s->y + 5), (std::vector<int>{1, 3, 3, 3, 5}));
  EXPECT_EQ(s->dil[1], 2);
  // An end pad that changes nothing (8 + 1 - 3) / 2 + 1 == (8 + 2 - 3) / 2 + 1.
  s = cudnnShapeOf({1, 1, 8, 8}, {1, 1, 3, 3}, 1, [](program::Kernel &k) {
    setInts(k, "pads", {1, 1, 0, 0});
    setInts(k, "strides", {2, 2});
  });
  ASSERT_TRUE(s.isOk()) << s.getStatus().toString();
  EXPECT_EQ(s->pad[0], 1);
  EXPECT_EQ(s->y[2], 4);
  // SAME_UPPER with an odd total pad: cuDNN cannot express it.
  s = cudnnShapeOf({1, 1, 224, 224}, {8, 1, 3, 3}, 1, [](program::Kernel &k) {
    setString(k, "auto_pad", "SAME_UPPER");
    setInts(k, "strides", {2, 2});
  });
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.getStatus().getCode(), StatusCode::Unimplemented);
  EXPECT_NE(s.getStatus().toString().find("pads 0 (begin) and 1 (end) of spatial dim 0"),
            std::string::npos)
      << s.getStatus().toString();
}

TEST_F(CudaSpatial, ConvForward) {
  REQUIRE_GPU();
  auto attrs = [](std::vector<int64_t> pads, std::vector<int64_t> strides,
                  std::vector<int64_t> dils, int64_t group) {
    return [=](program::Kernel &k) {
      setInts(k, "pads", pads);
      setInts(k, "strides", strides);
      setInts(k, "dilations", dils);
      setInt(k, "group", group);
    };
  };
  // 2-D, odd sizes, bias, padding, stride, dilation, groups.
  compare("Conv", {Arr::rand({2, 6, 11, 9}, 30), Arr::rand({4, 3, 3, 2}, 31), Arr::rand({4}, 32)},
          {Arr::out({2, 4, 6, 5})}, attrs({2, 1, 2, 1}, {2, 2}, {2, 1}, 2), 1e-4, 1e-4);
  // Depthwise (group == C), 1x1 and no bias.
  compare("Conv", {Arr::rand({3, 8, 7, 7}, 33), Arr::rand({8, 1, 3, 3}, 34)},
          {Arr::out({3, 8, 7, 7})}, attrs({1, 1, 1, 1}, {1, 1}, {1, 1}, 8), 1e-4, 1e-4);
  compare("Conv", {Arr::rand({2, 5, 4, 6}, 35), Arr::rand({7, 5, 1, 1}, 36), Arr::rand({7}, 37)},
          {Arr::out({2, 7, 4, 6})}, attrs({0, 0, 0, 0}, {1, 1}, {1, 1}, 1), 1e-4, 1e-4);
  // 1-D and 3-D.
  compare("Conv", {Arr::rand({2, 3, 17}, 38), Arr::rand({5, 3, 4}, 39), Arr::rand({5}, 40)},
          {Arr::out({2, 5, 8})}, attrs({1, 1}, {2}, {1}, 1), 1e-4, 1e-4);
  compare("Conv", {Arr::rand({1, 2, 5, 6, 7}, 41), Arr::rand({3, 2, 2, 3, 2}, 42)},
          {Arr::out({1, 3, 4, 4, 6})}, attrs({0, 0, 0, 0, 0, 0}, {1, 1, 1}, {1, 1, 1}, 1), 1e-4,
          1e-4);
  // SAME_UPPER with an odd total pad: cuDNN declines, the host kernel runs.
  compare("Conv", {Arr::rand({1, 2, 10, 10}, 43), Arr::rand({3, 2, 3, 3}, 44)},
          {Arr::out({1, 3, 5, 5})}, [](program::Kernel &k) {
            setString(k, "auto_pad", "SAME_UPPER");
            setInts(k, "strides", {2, 2});
          }, 1e-4, 1e-4);
}

TEST_F(CudaSpatial, ConvGradients) {
  REQUIRE_GPU();
  struct Case {
    Shape x, w;
    std::vector<int64_t> pads, strides, dils;
    int64_t group;
  };
  for (const Case &c : {Case{{2, 6, 11, 9}, {4, 3, 3, 2}, {2, 1, 2, 1}, {2, 2}, {2, 1}, 2},
                        Case{{3, 8, 7, 7}, {8, 1, 3, 3}, {1, 1, 1, 1}, {1, 1}, {1, 1}, 8},
                        Case{{2, 3, 17}, {5, 3, 4}, {1, 1}, {2}, {1}, 1}}) {
    auto attrs = [&](program::Kernel &k) {
      setInts(k, "pads", c.pads);
      setInts(k, "strides", c.strides);
      setInts(k, "dilations", c.dils);
      setInt(k, "group", c.group);
    };
    // The forward output shape, from the CPU backend.
    std::vector<int64_t> kshape(c.w.begin() + 2, c.w.end());
    StatusOr<ConvWindow> w = convWindowOf(c.x, kshape, false, attrs);
    ASSERT_TRUE(w.isOk());
    Shape y = windowOutputShape(c.x[0], c.w[0], *w);
    Arr dy = Arr::rand(y, 45), x = Arr::rand(c.x, 46), wt = Arr::rand(c.w, 47);
    compare("ConvGradInput", {dy, wt}, {Arr::out(c.x)}, [&](program::Kernel &k) {
      attrs(k);
      setInts(k, "input_shape", c.x);
    }, 1e-4, 1e-4);
    compare("ConvGradWeight", {dy, x}, {Arr::out(c.w)}, [&](program::Kernel &k) {
      attrs(k);
      setInts(k, "weight_shape", c.w);
    }, 1e-4, 1e-4);
  }
}

TEST_F(CudaSpatial, Pooling) {
  REQUIRE_GPU();
  Arr x = Arr::rand({2, 3, 9, 8}, 50);
  auto pool = [](std::vector<int64_t> k, std::vector<int64_t> pads, std::vector<int64_t> s,
                 int64_t ceil, int64_t includePad) {
    return [=](program::Kernel &kk) {
      setInts(kk, "kernel_shape", k);
      setInts(kk, "pads", pads);
      setInts(kk, "strides", s);
      setInt(kk, "ceil_mode", ceil);
      setInt(kk, "count_include_pad", includePad);
    };
  };
  // MaxPool with Indices, padding and ceil mode: 9 + 1 + 1 - 3 = 8 -> 4 + 1.
  compare("MaxPool", {x}, {Arr::out({2, 3, 5, 4}), Arr::out({2, 3, 5, 4}, program::DTYPE_I64)},
          pool({3, 3}, {1, 1, 1, 0}, {2, 2}, 1, 0));
  compare("MaxPool", {x}, {Arr::out({2, 3, 7, 6})}, [](program::Kernel &k) {
    setInts(k, "kernel_shape", {2, 2});
    setInts(k, "dilations", {2, 2});
    setInts(k, "strides", {1, 1});
  });
  for (int64_t includePad : {0, 1})
    compare("AveragePool", {x}, {Arr::out({2, 3, 5, 4})},
            pool({3, 3}, {1, 1, 1, 0}, {2, 2}, 1, includePad));
  compare("AveragePool", {Arr::rand({2, 4, 13}, 51)}, {Arr::out({2, 4, 7})},
          [](program::Kernel &k) {
            setInts(k, "kernel_shape", {3});
            setString(k, "auto_pad", "SAME_UPPER");
            setInts(k, "strides", {2});
          });
  compare("GlobalAveragePool", {x}, {Arr::out({2, 3, 1, 1})});
  compare("GlobalMaxPool", {x}, {Arr::out({2, 3, 1, 1})});
  // Gradients.
  Arr dy = Arr::rand({2, 3, 5, 4}, 52);
  compare("MaxPoolGrad", {dy, x}, {Arr::out({2, 3, 9, 8})},
          pool({3, 3}, {1, 1, 1, 0}, {2, 2}, 1, 0));
  for (int64_t includePad : {0, 1})
    compare("AveragePoolGrad", {dy}, {Arr::out({2, 3, 9, 8})}, [&](program::Kernel &k) {
      pool({3, 3}, {1, 1, 1, 0}, {2, 2}, 1, includePad)(k);
      setInts(k, "input_shape", {2, 3, 9, 8});
    });
}

TEST_F(CudaSpatial, BatchNorm) {
  REQUIRE_GPU();
  Arr x = Arr::rand({4, 5, 3, 7}, 60, 2.0f), scale = Arr::rand({5}, 61), bias = Arr::rand({5}, 62);
  Arr mean = Arr::rand({5}, 63), var = Arr::rand({5}, 64);
  for (size_t k = 0; k < 5; ++k)
    reinterpret_cast<float *>(var.bytes.data())[k] += 1.5f;
  Shape c = {5};
  auto eps = [](program::Kernel &k) {
    setFloat(k, "epsilon", 1e-3f);
    setFloat(k, "momentum", 0.8f);
  };
  compare("BatchNormalization", {x, scale, bias, mean, var}, {Arr::out(x.shape)}, eps);
  compare("BatchNormalization", {x, scale, bias, mean, var},
          {Arr::out(x.shape), Arr::out(c), Arr::out(c)}, [&](program::Kernel &k) {
            eps(k);
            setInt(k, "training_mode", 1);
          });
  compare("BatchNormalizationTraining", {x, scale, bias, mean, var},
          {Arr::out(x.shape), Arr::out(c), Arr::out(c), Arr::out(c), Arr::out(c)}, eps);
  // 2-D input (N, C): spatial size 1.
  compare("BatchNormalizationTraining", {Arr::rand({6, 5}, 65), scale, bias, mean, var},
          {Arr::out({6, 5}), Arr::out(c), Arr::out(c)}, eps);
  Arr invStd = Arr::rand({5}, 66);
  for (size_t k = 0; k < 5; ++k)
    reinterpret_cast<float *>(invStd.bytes.data())[k] += 2.0f;
  compare("BatchNormalizationGrad", {Arr::rand(x.shape, 67), x, scale, mean, invStd},
          {Arr::out(x.shape), Arr::out(c), Arr::out(c)}, {}, 1e-4, 1e-4);
}

TEST_F(CudaSpatial, Reductions) {
  REQUIRE_GPU();
  Arr x = Arr::rand({3, 4, 37, 5}, 70, 2.0f);
  Arr pos = x;
  for (size_t k = 0; k < pos.bytes.size() / 4; ++k) {
    float &v = reinterpret_cast<float *>(pos.bytes.data())[k];
    v = std::abs(v) + 0.5f;
  }
  struct Case {
    std::vector<int64_t> axes;
    int64_t keep;
    Shape out;
  };
  for (const Case &c : {Case{{1, 3}, 1, {3, 1, 37, 1}}, Case{{-1}, 0, {3, 4, 37}},
                        Case{{0, 2, 3}, 0, {4}}, Case{{2}, 1, {3, 4, 1, 5}},
                        Case{{}, 0, {}}})
    for (const char *op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL1",
                           "ReduceL2", "ReduceSumSquare", "ReduceLogSumExp", "ReduceLogSum",
                           "ReduceProd"}) {
      bool positive = std::string(op) == "ReduceLogSum" || std::string(op) == "ReduceProd";
      if (std::string(op) == "ReduceProd" && c.axes.size() != 1)
        continue; // products of hundreds of values overflow
      compare(op, {positive ? pos : x}, {Arr::out(c.out)}, [&](program::Kernel &k) {
        setInts(k, "axes", c.axes);
        setInt(k, "keepdims", c.keep);
      }, 1e-5, 1e-5);
    }
  // Axes as an input (opset >= 13/18) and noop_with_empty_axes.
  compare("ReduceSum", {x, Arr::i({2}, {0, -2})}, {Arr::out({1, 4, 1, 5})}, {}, 1e-5, 1e-5);
  compare("ReduceMean", {x}, {Arr::out(x.shape)},
          [](program::Kernel &k) { setInt(k, "noop_with_empty_axes", 1); });
  compare("ReduceMax", {Arr::i({2, 3}, {4, -9, 2, 7, 7, -1})}, {Arr::out({2}, program::DTYPE_I64)},
          [](program::Kernel &k) {
            setInts(k, "axes", {1});
            setInt(k, "keepdims", 0);
          });
}

TEST_F(CudaSpatial, SliceAndGrad) {
  REQUIRE_GPU();
  Arr x = Arr::rand({4, 6, 10}, 80);
  auto attrs = [](std::vector<int64_t> starts, std::vector<int64_t> ends,
                  std::vector<int64_t> axes, std::vector<int64_t> steps) {
    return [=](program::Kernel &k) {
      setInts(k, "starts", starts);
      setInts(k, "ends", ends);
      setInts(k, "axes", axes);
      setInts(k, "steps", steps);
    };
  };
  compare("Slice", {x}, {Arr::out({4, 6, 3})}, attrs({1}, {8}, {-1}, {3}));
  compare("Slice", {x}, {Arr::out({2, 3, 10})}, attrs({3, -1, 0}, {0, 0, INT64_MAX}, {0, 1, 2},
                                                     {-2, -2, 1}));
  // starts/ends/axes/steps as inputs (opset >= 10).
  compare("Slice", {x, Arr::i({2}, {1, 2}), Arr::i({2}, {3, 100}), Arr::i({2}, {0, 2}),
                    Arr::i({2}, {1, 4})},
          {Arr::out({2, 6, 2})});
  compare("SliceGrad", {Arr::rand({4, 6, 3}, 81)}, {Arr::out({4, 6, 10})}, [&](program::Kernel &k) {
    attrs({1}, {8}, {-1}, {3})(k);
    setInts(k, "input_shape", {4, 6, 10});
  });
  compare("SliceGrad", {Arr::rand({2, 3, 10}, 82)}, {Arr::out({4, 6, 10})},
          [&](program::Kernel &k) {
            attrs({3, -1, 0}, {0, 0, INT64_MAX}, {0, 1, 2}, {-2, -2, 1})(k);
            setInts(k, "input_shape", {4, 6, 10});
          });
}

TEST_F(CudaSpatial, HardActivations) {
  REQUIRE_GPU();
  Arr x = Arr::rand({999}, 90, 8.0f);
  compare("HardSwish", {x}, {Arr::out({999})});
  compare("HardSigmoid", {x}, {Arr::out({999})}, [](program::Kernel &k) {
    setFloat(k, "alpha", 1.0f / 6);
    setFloat(k, "beta", 0.5f);
  });
}

// Ops without a CUDA kernel run the CPU kernel on the managed memory (the
// same results) and are listed; without the fallback they fail at load.
TEST_F(CudaSpatial, GatherElements) {
  REQUIRE_GPU();
  Arr data = Arr::rand({4, 5, 3}, 92);
  compare("GatherElements", {data, Arr::i({4, 2, 3}, {0, 4, -1, 1, 1, 3, 2, 2, 0, -5, 4, 4,
                                                      1, 0, 1, 3, 3, 3, 4, 2, 0, 0, 1, 2})},
          {Arr::out({4, 2, 3})}, [](program::Kernel &k) { setInt(k, "axis", 1); });
  compare("GatherElements", {Arr::i({2, 3}, {1, 2, 3, 4, 5, 6}), Arr::i({2, 2}, {1, 0, 2, 2})},
          {Arr::out({2, 2}, program::DTYPE_I64)}, [](program::Kernel &k) { setInt(k, "axis", -1); });
  std::vector<Arr> outs = {Arr::out({1, 2})};
  Status s = runOn("cuda:0", registry, "GatherElements",
                   {Arr::rand({2, 3}, 93), Arr::i({1, 2}, {0, 3})}, outs,
                   [](program::Kernel &k) { setInt(k, "axis", 1); });
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("GatherElements 'k'"), std::string::npos) << s.toString();
  EXPECT_NE(s.toString().find("out of range"), std::string::npos) << s.toString();
}

// A mixture-of-experts router's TopK and its gradient's ScatterElements.
TEST_F(CudaSpatial, TopKAndScatterElements) {
  REQUIRE_GPU();
  // 6 rows of 8 experts with ties (equal values keep the lower index first).
  std::vector<float> v = pseudoRandom(48, 94);
  for (int r = 0; r < 6; ++r)
    v[r * 8 + 5] = v[r * 8 + 2];
  Arr x = Arr::f({6, 8}, v);
  for (int64_t largest : {1, 0})
    compare("TopK", {x, Arr::i({1}, {3})}, {Arr::out({6, 3}), Arr::out({6, 3}, program::DTYPE_I64)},
            [=](program::Kernel &k) { setInt(k, "largest", largest); });
  // NaNs (larger than every number, by index among themselves): a row with
  // two, a row of NaNs only; every index once.
  std::vector<float> nans = v;
  nans[3] = nans[6] = NAN;
  for (int c = 8; c < 16; ++c)
    nans[c] = NAN;
  for (int64_t largest : {1, 0})
    compare("TopK", {Arr::f({6, 8}, nans), Arr::i({1}, {8})},
            {Arr::out({6, 8}), Arr::out({6, 8}, program::DTYPE_I64)},
            [=](program::Kernel &k) { setInt(k, "largest", largest); });
  // A middle axis, and bf16 values.
  compare("TopK", {Arr::rand({2, 7, 3}, 95), Arr::i({1}, {2})},
          {Arr::out({2, 2, 3}), Arr::out({2, 2, 3}, program::DTYPE_I64)},
          [](program::Kernel &k) { setInt(k, "axis", 1); });
  compare("TopK", {Arr::randBf16({5, 16}, 96), Arr::i({1}, {4})},
          {Arr::out({5, 4}, program::DTYPE_BF16), Arr::out({5, 4}, program::DTYPE_I64)});
  // TopK's gradient: dValues scattered into zeros at the indices (none;
  // distinct per row, as TopK's are: the writes of repeated indices are
  // unordered on a GPU), and an accumulating scatter with repeated and
  // negative indices (add, f32).
  std::vector<int64_t> idx = {0, 5, 2, 7, 1, 3, 6, 4, 5, 0, 2, 1};
  compare("ScatterElements", {Arr::f({4, 8}, std::vector<float>(32, 0.0f)),
                              Arr::i({4, 3}, idx), Arr::rand({4, 3}, 97)},
          {Arr::out({4, 8})}, [](program::Kernel &k) { setInt(k, "axis", 1); });
  compare("ScatterElements", {Arr::rand({3, 4}, 98), Arr::i({2, 4}, {0, -1, 2, 2, 0, 0, 1, 2}),
                              Arr::rand({2, 4}, 99)},
          {Arr::out({3, 4})}, [](program::Kernel &k) {
            setInt(k, "axis", 0);
            setString(k, "reduction", "add");
          });
  std::vector<Arr> outs = {Arr::out({2, 3})};
  Status s = runOn("cuda:0", registry, "ScatterElements",
                   {Arr::rand({2, 3}, 100), Arr::i({1, 2}, {0, 3}), Arr::rand({1, 2}, 101)},
                   outs, [](program::Kernel &k) { setInt(k, "axis", 1); });
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("out of range"), std::string::npos) << s.toString();
}

TEST_F(CudaSpatial, HostFallback) {
  REQUIRE_GPU();
  Arr data = Arr::rand({3, 5}, 91);
  compare("Softplus", {data}, {Arr::out({3, 5})});
  const Backend *b = *registry.forDevice("cuda:0");
  std::map<std::string, int64_t> counts = cudaHostFallbackCounts(*b);
  EXPECT_EQ(counts["Softplus"], 1);
  EXPECT_EQ(counts.count("Add"), 0u);
  EXPECT_NE(cudaHostFallbackNote(*b).find("1 kernel of ops [Softplus]"), std::string::npos)
      << cudaHostFallbackNote(*b);
  EXPECT_EQ(cudaHostFallbackNote(*createCpuBackend()), "");
  // A host kernel between two CUDA kernels: it reads what the first wrote
  // (after the wait) and the second reads what it wrote.
  auto chain = [&](const std::string &device, std::vector<float> &out) -> Status {
    ProgramBuilder pb;
    uint32_t d = pb.addValue("d", program::DTYPE_F32, {3, 5}, program::ROLE_INPUT);
    uint32_t d2 = pb.addValue("d2", program::DTYPE_F32, {3, 5}, program::ROLE_ACTIVATION);
    uint32_t g = pb.addValue("g", program::DTYPE_F32, {3, 5}, program::ROLE_ACTIVATION);
    uint32_t y = pb.addValue("y", program::DTYPE_F32, {3, 5}, program::ROLE_OUTPUT);
    pb.addKernel("Exp", {d}, {d2}).set_name("e");
    pb.addKernel("Softplus", {d2}, {g}).set_name("h");
    pb.addKernel("Sqrt", {g}, {y}).set_name("s");
    pb.addRunStep();
    pb.get().set_device(device);
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::create(pb.get(), registry));
    STRAIT_ASSIGN_OR_RETURN(Tensor td, exec->getValue(d));
    std::memcpy(td.data, data.bytes.data(), data.bytes.size());
    STRAIT_RETURN_IF_ERROR(exec->run());
    STRAIT_ASSIGN_OR_RETURN(Tensor ty, exec->getValue(y));
    out.assign(ty.as<float>(), ty.as<float>() + 15);
    return Status::ok();
  };
  std::vector<float> onCpu, onGpu;
  ASSERT_TRUE(chain("cpu", onCpu).isOk());
  Status cs = chain("cuda:0", onGpu);
  ASSERT_TRUE(cs.isOk()) << cs.toString();
  for (int k = 0; k < 15; ++k)
    EXPECT_NEAR(onGpu[k], onCpu[k], 1e-5 * std::abs(onCpu[k])) << k;
  EXPECT_EQ(cudaHostFallbackCounts(*b)["Softplus"], 2);
  // A CUDA kernel that declines at run time (pads cuDNN cannot express).
  compare("Conv", {Arr::rand({1, 2, 10, 10}, 94), Arr::rand({3, 2, 3, 3}, 95)},
          {Arr::out({1, 3, 5, 5})}, [](program::Kernel &k) {
            setString(k, "auto_pad", "SAME_UPPER");
            setInts(k, "strides", {2, 2});
          }, 1e-4, 1e-4);
  EXPECT_EQ(cudaHostFallbackCounts(*b)["Conv"], 1);
  BackendRegistry off;
  CudaOptions o;
  o.hostFallback = false;
  ASSERT_TRUE(registerCudaBackend(off, o).isOk());
  std::vector<Arr> outs = {Arr::out({3, 5})};
  Status s = runOn("cuda:0", off, "Softplus", {data}, outs, {});
  EXPECT_EQ(s.getCode(), StatusCode::Unimplemented);
  EXPECT_NE(s.toString().find("cuda backend has no kernel for op 'Softplus'"),
            std::string::npos)
      << s.toString();
}
