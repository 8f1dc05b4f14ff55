//===- CudaTest.cpp - CUDA kernels against the CPU backend ----------------===//
//
// Every test builds a one-kernel program, runs it on the CPU backend and on
// the CUDA backend with the same inputs, and compares every output. Tests
// that need a GPU call GTEST_SKIP() (reported by ctest as skipped) when
// cudaGetDeviceCount finds none; the error paths that need no GPU run always.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/Cuda.h"
#include "strait/runtime/KernelArgs.h"
#include "CudaKernels.h"

#include <gtest/gtest.h>

#include <climits>
#include <cmath>
#include <cstring>
#include <map>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

#define REQUIRE_GPU()                                                            \
  do {                                                                           \
    if (cudaDeviceCount() == 0)                                                  \
      GTEST_SKIP() << "no GPU: " << cudaUnavailableReason();                     \
  } while (0)

/// A typed host array for one input or output.
struct Arr {
  DType dtype = program::DTYPE_F32;
  Shape shape;
  std::vector<char> bytes;
  static Arr f(Shape s, const std::vector<float> &v) {
    Arr a{program::DTYPE_F32, std::move(s), {}};
    a.bytes.resize(v.size() * 4);
    std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a;
  }
  static Arr i(Shape s, const std::vector<int64_t> &v) {
    Arr a{program::DTYPE_I64, std::move(s), {}};
    a.bytes.resize(v.size() * 8);
    std::memcpy(a.bytes.data(), v.data(), a.bytes.size());
    return a;
  }
  static Arr rand(Shape s, uint32_t seed, float scale = 1.0f) {
    std::vector<float> v = pseudoRandom(numElements(s), seed);
    for (float &x : v)
      x *= scale;
    return f(std::move(s), v);
  }
  /// bf16 (round to nearest even) of pseudo-random values.
  static Arr randBf16(Shape s, uint32_t seed) {
    std::vector<float> v = pseudoRandom(numElements(s), seed);
    Arr a{program::DTYPE_BF16, std::move(s), {}};
    a.bytes.resize(v.size() * 2);
    for (size_t k = 0; k < v.size(); ++k) {
      uint32_t u;
      std::memcpy(&u, &v[k], 4);
      u += 0x7FFF + ((u >> 16) & 1);
      uint16_t h = static_cast<uint16_t>(u >> 16);
      std::memcpy(a.bytes.data() + 2 * k, &h, 2);
    }
    return a;
  }
  static Arr out(Shape s, DType t = program::DTYPE_F32) { return {t, std::move(s), {}}; }
  double at(int64_t k) const {
    switch (dtype) {
    case program::DTYPE_F32: return reinterpret_cast<const float *>(bytes.data())[k];
    case program::DTYPE_I64: return double(reinterpret_cast<const int64_t *>(bytes.data())[k]);
    case program::DTYPE_BOOL: return bytes[k];
    case program::DTYPE_BF16: {
      uint32_t u = uint32_t(reinterpret_cast<const uint16_t *>(bytes.data())[k]) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      return f;
    }
    default: return NAN;
    }
  }
};

using Attrs = std::function<void(program::Kernel &)>;

/// Runs `op` on `device` ("cpu" or "cuda:0"); fills the outputs' bytes.
Status runOn(const std::string &device, const BackendRegistry &registry, const std::string &op,
             const std::vector<Arr> &ins, std::vector<Arr> &outs, const Attrs &attrs,
             const std::vector<int> &inPlace = {}) {
  ProgramBuilder b;
  std::vector<uint32_t> inIds, outIds;
  for (size_t i = 0; i < ins.size(); ++i)
    inIds.push_back(b.addValue("in" + std::to_string(i), ins[i].dtype, ins[i].shape,
                               program::ROLE_INPUT));
  for (size_t i = 0; i < outs.size(); ++i)
    outIds.push_back(i < inPlace.size() && inPlace[i] >= 0
                         ? inIds[inPlace[i]]
                         : b.addValue("out" + std::to_string(i), outs[i].dtype, outs[i].shape,
                                      program::ROLE_OUTPUT));
  program::Kernel &k = b.addKernel(op, inIds, outIds);
  k.set_name("k");
  if (attrs)
    attrs(k);
  b.addRunStep();
  b.get().set_device(device);
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::create(b.get(), registry));
  for (size_t i = 0; i < ins.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValue(inIds[i]));
    std::memcpy(t.data, ins[i].bytes.data(), ins[i].bytes.size());
  }
  STRAIT_RETURN_IF_ERROR(exec->run());
  for (size_t i = 0; i < outs.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValue(outIds[i]));
    outs[i].bytes.assign(t.as<char>(), t.as<char>() + t.byteSize());
  }
  return Status::ok();
}

class Cuda : public ::testing::Test {
protected:
  void SetUp() override {
    if (cudaDeviceCount() == 0)
      return;
    registerCpuBackend(registry);
    CudaOptions o;
    o.syncEachKernel = true;
    Status s = registerCudaBackend(registry, o);
    ASSERT_TRUE(s.isOk()) << s.toString();
  }

  /// Runs on both backends; every output element within atol + rtol*|cpu|.
  void compare(const std::string &op, const std::vector<Arr> &ins, std::vector<Arr> outs,
               const Attrs &attrs = {}, double rtol = 1e-4, double atol = 1e-5,
               const std::vector<int> &inPlace = {}) {
    std::vector<Arr> cpu = outs, gpu = outs;
    Status s = runOn("cpu", registry, op, ins, cpu, attrs, inPlace);
    ASSERT_TRUE(s.isOk()) << "cpu: " << s.toString();
    s = runOn("cuda:0", registry, op, ins, gpu, attrs, inPlace);
    ASSERT_TRUE(s.isOk()) << "cuda: " << s.toString();
    for (size_t o = 0; o < outs.size(); ++o) {
      int64_t n = numElements(outs[o].shape);
      int bad = 0;
      for (int64_t k = 0; k < n && bad < 5; ++k) {
        double c = cpu[o].at(k), g = gpu[o].at(k);
        if (!(std::abs(c - g) <= atol + rtol * std::abs(c))) {
          ADD_FAILURE() << op << " output " << o << " element " << k << ": cpu " << c
                        << " cuda " << g;
          ++bad;
        }
      }
    }
  }

  BackendRegistry registry;
};

} // namespace

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

TEST_F(Cuda, ConvForward) {
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

TEST_F(Cuda, ConvGradients) {
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

TEST_F(Cuda, Pooling) {
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

TEST_F(Cuda, BatchNorm) {
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

TEST_F(Cuda, Reductions) {
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

TEST_F(Cuda, SliceAndGrad) {
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

TEST_F(Cuda, HardActivations) {
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
TEST_F(Cuda, GatherElements) {
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

TEST_F(Cuda, HostFallback) {
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

// NCCL on one rank: bootstrap over a one-rank loopback communicator, the
// all-reduce of a world of one leaves the tensor unchanged.
namespace {
class LoneCommunicator : public Communicator {
public:
  int getRank() const override { return 0; }
  int getWorldSize() const override { return 1; }
  Status send(const Tensor &, int, uint32_t) override { return internalError("no peers"); }
  Status recv(const Tensor &, int, uint32_t) override { return internalError("no peers"); }
  Status allReduceSum(const Tensor &, uint32_t) override { return Status::ok(); }
  Status allReduceSumGroup(const Tensor &, const std::vector<int> &, uint32_t) override {
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }
};
} // namespace

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

// --- CUDA graphs (CudaGraph.cpp) ---------------------------------------------
//
// A small training step (MatMul, cross-entropy and its gradient, Transpose,
// ClipByGlobalNorm, SGD) with a one-rank all-reduce of the gradient in the
// middle, so the executor forms two segments around a host synchronization.
// Three steps with graphs on (direct, captured, replayed) against graphs off.

namespace {

program::Program graphTrainingProgram(const std::string &device) {
  ProgramBuilder b(0, 1);
  b.get().set_device(device);
  auto v = [&](const char *n, Shape s, program::ValueRole role,
               DType t = program::DTYPE_F32) { return b.addValue(n, t, s, role); };
  uint32_t x = v("x", {16, 32}, program::ROLE_INPUT),
           labels = v("labels", {16}, program::ROLE_INPUT, program::DTYPE_I64),
           lr = v("lr", {}, program::ROLE_INPUT), w = v("W", {32, 10}, program::ROLE_PARAMETER),
           mom = v("mom", {32, 10}, program::ROLE_OPTIMIZER_STATE),
           one = b.addConstant("one", {1.0f}, {}),
           logits = v("logits", {16, 10}, program::ROLE_ACTIVATION),
           loss = v("loss", {}, program::ROLE_OUTPUT),
           dlogits = v("dlogits", {16, 10}, program::ROLE_ACTIVATION),
           xt = v("xt", {32, 16}, program::ROLE_ACTIVATION),
           dw = v("dW", {32, 10}, program::ROLE_GRADIENT),
           norm = v("norm", {}, program::ROLE_OUTPUT),
           dwc = v("dWc", {32, 10}, program::ROLE_ACTIVATION);
  b.get().mutable_values(w)->set_parameter_name("W");
  b.get().mutable_values(mom)->set_parameter_name("mom");
  auto mean = [](program::Kernel &k) { setString(k, "reduction", "mean"); };
  std::vector<uint32_t> fwd = {b.addKernel("MatMul", {x, w}, {logits}).id()};
  program::Kernel &ce = b.addKernel("SoftmaxCrossEntropyLoss", {logits, labels}, {loss});
  mean(ce);
  fwd.push_back(ce.id());
  program::Kernel &ceg = b.addKernel("SoftmaxCrossEntropyLossGrad", {one, logits, labels}, {dlogits});
  mean(ceg);
  fwd.push_back(ceg.id());
  program::Kernel &tr = b.addKernel("Transpose", {x}, {xt});
  setInts(tr, "perm", {1, 0});
  fwd.push_back(tr.id());
  fwd.push_back(b.addKernel("MatMul", {xt, dlogits}, {dw}).id());
  b.addRunStep(fwd);
  auto *ar = b.get().add_steps()->mutable_all_reduce();
  ar->add_value_ids(dw);
  ar->set_reduce(program::REDUCE_MEAN);
  program::Kernel &clip = b.addKernel("ClipByGlobalNorm", {dw}, {norm, dwc});
  setFloat(clip, "max_norm", 0.5f);
  program::Kernel &sgd = b.addKernel("SGD", {lr, w, dwc, mom}, {w, mom});
  setFloat(sgd, "momentum", 0.9f);
  b.addRunStep({clip.id(), sgd.id()});
  return b.get();
}

/// Losses and final W of 3 steps on `device` (cuda:0 with graphs on or off).
void runGraphSteps(const std::string &device, bool graphs, std::vector<float> &losses,
                   std::vector<float> &w, CudaGraphStats &stats) {
  CudaOptions co;
  co.graphs = graphs;
  BackendRegistry reg;
  if (device == "cpu")
    registerCpuBackend(reg);
  else
    ASSERT_TRUE(registerCudaBackend(reg, co).isOk());
  LoneCommunicator lone;
  auto exec = Executor::create(graphTrainingProgram(device), reg, &lone);
  ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
  Tensor wt = *(*exec)->getValueByName("W");
  auto w0 = pseudoRandom(wt.numel(), 5);
  std::copy(w0.begin(), w0.end(), wt.as<float>());
  for (int step = 0; step < 3; ++step) {
    Tensor x = *(*exec)->getValueByName("x");
    auto xv = pseudoRandom(x.numel(), 100 + step);
    std::copy(xv.begin(), xv.end(), x.as<float>());
    Tensor l = *(*exec)->getValueByName("labels");
    for (int64_t i = 0; i < l.numel(); ++i)
      l.as<int64_t>()[i] = (i * 7 + step) % 10;
    (*exec)->getValueByName("lr")->as<float>()[0] = 0.1f;
    Status s = (*exec)->run();
    ASSERT_TRUE(s.isOk()) << s.toString();
    losses.push_back((*exec)->getValueByName("loss")->as<float>()[0]);
  }
  w.assign(wt.as<float>(), wt.as<float>() + wt.numel());
  stats = cudaGraphStats(*reg.forDevice(device).takeValue());
}

} // namespace

TEST(CudaGraphs, ReplayedStepsEqualDirectLaunches) {
  REQUIRE_GPU();
  std::vector<float> lossOn, lossOff, lossCpu, wOn, wOff, wCpu;
  CudaGraphStats on, off, cpu;
  runGraphSteps("cuda:0", true, lossOn, wOn, on);
  runGraphSteps("cuda:0", false, lossOff, wOff, off);
  runGraphSteps("cpu", false, lossCpu, wCpu, cpu);
  ASSERT_EQ(lossOn.size(), 3u);
  ASSERT_EQ(lossOff.size(), 3u);
  ASSERT_EQ(lossCpu.size(), 3u);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NEAR(lossOn[i], lossOff[i], 1e-6 * std::abs(lossOff[i])) << "step " << i;
    EXPECT_NEAR(lossOn[i], lossCpu[i], 1e-4 * std::abs(lossCpu[i])) << "step " << i;
  }
  EXPECT_NE(lossOn[0], lossOn[2]); // SGD changed W between steps
  for (size_t i = 0; i < wOn.size(); ++i)
    ASSERT_NEAR(wOn[i], wOff[i], 1e-6) << "W[" << i << "]";
  // Two segments: run 1 direct, run 2 captured and launched, run 3 replayed.
  EXPECT_EQ(on.captured, 2);
  EXPECT_EQ(on.replays, 4);
  EXPECT_EQ(on.direct, 2);
  EXPECT_EQ(on.disabled, 0);
  EXPECT_EQ(off.captured, 0);
  EXPECT_EQ(off.direct, 6);
}

// --- Device codecs (Codec.cu, CudaCodecCommunicator.cpp) ---------------------
//
// The inner communicator records the wire (plain sends) and plays back host
// payloads; the device side must produce rt::encode's bytes and decode them
// as rt::decode does.

namespace {

class WireRecorder : public Communicator {
public:
  std::vector<std::vector<uint8_t>> sent; // plain sends (payloads)
  std::vector<uint8_t> incoming;          // what the next recv delivers
  int codedCalls = 0;                     // sendCoded/recvCoded left to this layer
  int getRank() const override { return 0; }
  int getWorldSize() const override { return 2; }
  Status send(const Tensor &t, int, uint32_t) override {
    const uint8_t *p = static_cast<const uint8_t *>(t.data);
    sent.emplace_back(p, p + t.byteSize());
    return Status::ok();
  }
  Status recv(const Tensor &t, int, uint32_t) override {
    if (t.byteSize() != incoming.size())
      return invalidArgument("peer sent " + std::to_string(incoming.size()) + " bytes");
    std::memcpy(t.data, incoming.data(), incoming.size());
    return Status::ok();
  }
  Status sendCoded(const Tensor &t, int, uint32_t, const program::CodecParams &codec,
                   ErrorFeedback *feedback) override {
    ++codedCalls;
    std::vector<uint8_t> out;
    Status s = feedback ? feedback->encode(codec, t.as<float>(), t.numel(), out)
                        : encode(codec, t.as<float>(), t.numel(), out);
    sent.push_back(out);
    return s;
  }
  Status recvCoded(const Tensor &t, int, uint32_t, const program::CodecParams &) override {
    ++codedCalls;
    return decode(incoming.data(), incoming.size(), t.as<float>(), t.numel());
  }
  Status allReduceSum(const Tensor &, uint32_t) override { return Status::ok(); }
  Status allReduceSumGroup(const Tensor &, const std::vector<int> &, uint32_t) override {
    return Status::ok();
  }
  Status barrier() override { return Status::ok(); }
};

program::CodecParams codecParams(program::Codec c, float ratio, uint32_t block, bool ef) {
  program::CodecParams p;
  p.set_codec(c);
  p.set_topk_ratio(ratio);
  p.set_block_size(block);
  p.set_error_feedback(ef);
  return p;
}

/// Values with zeros, a non-finite block, subnormals and ties of magnitude.
std::vector<float> codecValues(size_t n, uint32_t seed) {
  std::vector<float> x = gaussian(n, seed);
  for (size_t i = 0; i < n && i < 40; ++i)
    x[i] = 0.0f;
  for (size_t i = 64; i < n && i < 96; ++i)
    x[i] = 1e-39f * float(int(i) - 70);
  for (size_t i = 200; i < n && i < 260; ++i)
    x[i] = (i % 2 ? -1.5f : 1.5f); // ties for top-k
  return x;
}

struct CodecCase {
  program::Codec codec;
  float ratio;
  uint32_t block;
};
const CodecCase kCodecCases[] = {
    {program::CODEC_FP16, 0, 0},    {program::CODEC_BF16, 0, 0},
    {program::CODEC_INT8, 0, 0},    {program::CODEC_INT8, 0, 7},
    {program::CODEC_INT4, 0, 64},   {program::CODEC_INT4, 0, 0},
    {program::CODEC_TOPK, 0.01f, 0}, {program::CODEC_TOPK, 0.3f, 0},
    {program::CODEC_TOPK, 0.9f, 0}};

} // namespace

TEST(CudaCodecs, DevicePayloadsEqualHostPayloadsWithErrorFeedback) {
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  for (size_t n : {1u, 1001u, 300007u})
    for (const CodecCase &cc : kCodecCases)
      for (bool ef : {false, true}) {
        auto recorder = std::make_unique<WireRecorder>();
        WireRecorder &wire = *recorder;
        auto comm = createCudaCodecCommunicator(std::move(recorder), 0);
        ASSERT_TRUE(comm.isOk()) << comm.getStatus().toString();
        StatusOr<Buffer> buf = (*backend)->allocate(4 * n);
        ASSERT_TRUE(buf.isOk());
        Tensor t{program::DTYPE_F32, {int64_t(n)}, buf->data()};
        auto p = codecParams(cc.codec, cc.ratio, cc.block, ef);
        ErrorFeedback device, host;
        for (int step = 0; step < 3; ++step) {
          auto x = codecValues(n, 10 * step + uint32_t(n));
          std::copy(x.begin(), x.end(), t.as<float>());
          Status s = (*comm)->sendCoded(t, 1, 0, p, &device);
          ASSERT_TRUE(s.isOk()) << s.toString();
          std::vector<uint8_t> expect;
          ASSERT_TRUE(host.encode(p, x.data(), n, expect).isOk());
          ASSERT_EQ(wire.sent.size(), size_t(step + 1));
          ASSERT_EQ(wire.sent.back(), expect)
              << program::Codec_Name(cc.codec) << " n " << n << " block " << cc.block
              << " ratio " << cc.ratio << " ef " << ef << " step " << step;
        }
        EXPECT_EQ(wire.codedCalls, 0); // all on the device
      }
}

TEST(CudaCodecs, DeviceDecodeEqualsHostDecode) {
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  const size_t n = 70001;
  auto x = codecValues(n, 5);
  for (const CodecCase &cc : kCodecCases) {
    auto recorder = std::make_unique<WireRecorder>();
    WireRecorder &wire = *recorder;
    auto comm = createCudaCodecCommunicator(std::move(recorder), 0);
    ASSERT_TRUE(comm.isOk());
    auto p = codecParams(cc.codec, cc.ratio, cc.block, false);
    ASSERT_TRUE(encode(p, x.data(), n, wire.incoming).isOk());
    std::vector<float> expect(n);
    ASSERT_TRUE(decode(wire.incoming.data(), wire.incoming.size(), expect.data(), n).isOk());
    StatusOr<Buffer> buf = (*backend)->allocate(4 * n);
    ASSERT_TRUE(buf.isOk());
    Tensor t{program::DTYPE_F32, {int64_t(n)}, buf->data()};
    Status s = (*comm)->recvCoded(t, 1, 0, p);
    ASSERT_TRUE(s.isOk()) << s.toString();
    ASSERT_EQ(std::memcmp(t.data, expect.data(), 4 * n), 0) << program::Codec_Name(cc.codec);
    // Top-k receives decode on the host (size unknown in advance).
    EXPECT_EQ(wire.codedCalls, cc.codec == program::CODEC_TOPK ? 1 : 0);
  }
}

TEST(CudaCodecs, MismatchedPayloadsAndHostTensors) {
  REQUIRE_GPU();
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  auto recorder = std::make_unique<WireRecorder>();
  WireRecorder &wire = *recorder;
  auto comm = createCudaCodecCommunicator(std::move(recorder), 0);
  ASSERT_TRUE(comm.isOk());
  const size_t n = 1000;
  auto x = gaussian(n, 1);
  StatusOr<Buffer> buf = (*backend)->allocate(4 * n);
  ASSERT_TRUE(buf.isOk());
  Tensor t{program::DTYPE_F32, {int64_t(n)}, buf->data()};
  // fp16 payload, bf16 expected: same size, the header names the codec.
  ASSERT_TRUE(encode(codecParams(program::CODEC_FP16, 0, 0, false), x.data(), n, wire.incoming)
                  .isOk());
  Status s = (*comm)->recvCoded(t, 1, 0, codecParams(program::CODEC_BF16, 0, 0, false));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("codec 2, this rank expects codec 5 (CODEC_BF16)"),
            std::string::npos) << s.toString();
  // int8 in blocks of 128 while blocks of 64 are expected: a size error.
  ASSERT_TRUE(encode(codecParams(program::CODEC_INT8, 0, 128, false), x.data(), n, wire.incoming)
                  .isOk());
  s = (*comm)->recvCoded(t, 1, 0, codecParams(program::CODEC_INT8, 0, 64, false));
  ASSERT_FALSE(s.isOk());
  // A host tensor goes to the inner communicator's codecs.
  std::vector<float> hostData(x);
  Tensor h{program::DTYPE_F32, {int64_t(n)}, hostData.data()};
  ASSERT_TRUE((*comm)->sendCoded(h, 1, 0, codecParams(program::CODEC_INT8, 0, 0, false), nullptr)
                  .isOk());
  EXPECT_EQ(wire.codedCalls, 1);
}

//===----------------------------------------------------------------------===//
// FusedElementwise: the programs of FusedTestPrograms.h (the CPU kernel's
// conformance cases) on CUDA vs the CPU backend.
//===----------------------------------------------------------------------===//
#include "FusedTestPrograms.h"

namespace {

TEST(CudaFused, ProgramsMatchCpu) {
  REQUIRE_GPU();
  BackendRegistry registry;
  registerCpuBackend(registry);
  CudaOptions o;
  o.syncEachKernel = true;
  Status st = registerCudaBackend(registry, o);
  ASSERT_TRUE(st.isOk()) << st.toString();
  for (int i = 0; i < numFusedCases(); ++i) {
    FusedCase c = fusedCase(i);
    SCOPED_TRACE(c.name);
    std::vector<Arr> ins, outs;
    for (const OwnedTensor &t : c.inputs) {
      Arr a{t.tensor.dtype, t.tensor.shape, {}};
      a.bytes.assign(t.as<char>(), t.as<char>() + t.tensor.byteSize());
      ins.push_back(std::move(a));
    }
    for (DType d : c.outputTypes)
      outs.push_back(Arr::out(c.shape, d));
    program::Kernel proto = c.kernel();
    Attrs attrs = [&](program::Kernel &k) {
      k.set_domain("strait");
      *k.mutable_attrs() = proto.attrs();
    };
    std::vector<Arr> cpu = outs, gpu = outs;
    Status s = runOn("cpu", registry, "FusedElementwise", ins, cpu, attrs);
    ASSERT_TRUE(s.isOk()) << "cpu: " << s.toString();
    s = runOn("cuda:0", registry, "FusedElementwise", ins, gpu, attrs);
    ASSERT_TRUE(s.isOk()) << "cuda: " << s.toString();
    for (size_t j = 0; j < outs.size(); ++j) {
      int bad = 0;
      for (int64_t k = 0; k < numElements(c.shape) && bad < 5; ++k) {
        double x = cpu[j].at(k), g = gpu[j].at(k);
        // CUDA's expf/tanhf/erff are within 2 ulp of the CPU's libm.
        if (!(std::abs(x - g) <= 1e-6 + 1e-5 * std::abs(x)) && !(std::isnan(x) && std::isnan(g))) {
          ADD_FAILURE() << "output " << j << " element " << k << ": cpu " << x << " cuda " << g;
          ++bad;
        }
      }
    }
  }
}

TEST(CudaFused, BadProgramIsInvalidArgumentOnCuda) {
  REQUIRE_GPU();
  BackendRegistry registry;
  registerCpuBackend(registry);
  ASSERT_TRUE(registerCudaBackend(registry, CudaOptions{}).isOk());
  FusedCase c = fusedCase(1);
  std::vector<Arr> ins;
  for (const OwnedTensor &t : c.inputs) {
    Arr a{t.tensor.dtype, t.tensor.shape, {}};
    a.bytes.assign(t.as<char>(), t.as<char>() + t.tensor.byteSize());
    ins.push_back(std::move(a));
  }
  std::vector<Arr> outs = {Arr::out(c.shape)};
  program::Kernel proto = c.kernel();
  (*proto.mutable_attrs())["args"].mutable_ints()->set_v(3, 50);
  Status s = runOn("cuda:0", registry, "FusedElementwise", ins, outs, [&](program::Kernel &k) {
    k.set_domain("strait");
    *k.mutable_attrs() = proto.attrs();
  });
  ASSERT_FALSE(s.isOk());
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument) << s.toString();
  EXPECT_NE(s.toString().find("reads register 50 before it is written"), std::string::npos)
      << s.toString();
}

} // namespace

#ifdef STRAIT_TEST_HAVE_GLOO
// A GPU rank (device codecs over Gloo) and a CPU rank (Gloo's own codecs) on
// loopback: each decodes exactly what the other's host codec would send.
#include "CommTestUtil.h"

#include <thread>

/// Rank r of a pair on loopback Gloo: rank 0 is a GPU rank (the CUDA codec
/// communicator, its tensor in managed memory), rank 1 a CPU rank.
struct MixedRank {
  std::unique_ptr<Communicator> comm;
  std::unique_ptr<Backend> backend;
  Buffer gpu;
  std::vector<float> host;
  Tensor t;
};

void makeMixedRank(int r, const std::string &dir, int64_t n, MixedRank &m) {
  auto gloo = createGlooCommunicator(fileStoreOptions(dir, r, 2));
  ASSERT_TRUE(gloo.isOk()) << gloo.getStatus().toString();
  m.comm = std::move(*gloo);
  StatusOr<std::unique_ptr<Backend>> backend = createCudaBackend();
  ASSERT_TRUE(backend.isOk());
  m.backend = std::move(*backend);
  StatusOr<Buffer> buf = m.backend->allocate(4 * n);
  ASSERT_TRUE(buf.isOk());
  m.gpu = std::move(*buf);
  m.host.resize(n);
  if (r == 0) {
    auto wrapped = createCudaCodecCommunicator(std::move(m.comm), 0);
    ASSERT_TRUE(wrapped.isOk()) << wrapped.getStatus().toString();
    m.comm = std::move(*wrapped);
  }
  m.t = Tensor{program::DTYPE_F32, {n}, r == 0 ? m.gpu.data() : m.host.data()};
}

TEST(CudaCodecs, GpuAndCpuRanksInteroperateOverGloo) {
  REQUIRE_GPU();
  const int64_t n = 100003;
  std::string dir = makeTempDir("strait-cuda-codec");
  const CodecCase cases[] = {{program::CODEC_INT8, 0, 0}, {program::CODEC_BF16, 0, 0},
                             {program::CODEC_TOPK, 0.01f, 0}, {program::CODEC_INT4, 0, 128}};
  std::vector<std::vector<float>> got[2], want[2];
  auto rank = [&](int r) {
    MixedRank m;
    makeMixedRank(r, dir, n, m);
    if (HasFatalFailure())
      return;
    std::unique_ptr<Communicator> &comm = m.comm;
    Tensor &t = m.t;
    for (const CodecCase &cc : cases) {
      auto p = codecParams(cc.codec, cc.ratio, cc.block, /*ef=*/true);
      ErrorFeedback feedback, reference;
      for (int step = 0; step < 3; ++step) {
        // Sender: rank 0 in even rounds, rank 1 in odd ones.
        for (int sender = 0; sender < 2; ++sender) {
          auto x = codecValues(n, 100 * step + 10 * sender + 1);
          if (r == sender) {
            std::copy(x.begin(), x.end(), t.as<float>());
            Status s = comm->sendCoded(t, 1 - r, 7, p, &feedback);
            ASSERT_TRUE(s.isOk()) << s.toString();
          } else {
            Status s = comm->recvCoded(t, 1 - r, 7, p);
            ASSERT_TRUE(s.isOk()) << s.toString();
            got[r].emplace_back(t.as<float>(), t.as<float>() + n);
            std::vector<uint8_t> payload;
            ASSERT_TRUE(reference.encode(p, x.data(), n, payload).isOk());
            std::vector<float> expect(n);
            ASSERT_TRUE(decode(payload.data(), payload.size(), expect.data(), n).isOk());
            want[r].push_back(expect);
          }
        }
      }
    }
    ASSERT_TRUE(comm->barrier().isOk());
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(got[r].size(), want[r].size());
    for (size_t i = 0; i < got[r].size(); ++i)
      ASSERT_EQ(std::memcmp(got[r][i].data(), want[r][i].data(), 4 * n), 0)
          << "rank " << r << " transfer " << i;
  }
}

// Plain transfers of GPU memory go through the pinned staging copy (64 KiB
// and up) and arrive bit-exact at a CPU rank, and back.
TEST(CudaCodecs, StagedPlainTransfersBetweenGpuAndCpuRanks) {
  REQUIRE_GPU();
  const int64_t n = 100003;
  std::string dir = makeTempDir("strait-cuda-staging");
  std::vector<float> sent = codecValues(n, 5), back[2];
  auto rank = [&](int r) {
    MixedRank m;
    makeMixedRank(r, dir, n, m);
    if (HasFatalFailure())
      return;
    std::unique_ptr<Communicator> &comm = m.comm;
    Tensor &t = m.t;
    if (r == 0) {
      std::copy(sent.begin(), sent.end(), t.as<float>());
      ASSERT_TRUE(comm->send(t, 1, 3).isOk());
      std::fill(t.as<float>(), t.as<float>() + n, 0.0f);
      ASSERT_TRUE(comm->recv(t, 1, 4).isOk());
    } else {
      ASSERT_TRUE(comm->recv(t, 0, 3).isOk());
      ASSERT_TRUE(comm->send(t, 0, 4).isOk());
    }
    back[r].assign(t.as<float>(), t.as<float>() + n);
    ASSERT_TRUE(comm->barrier().isOk());
  };
  std::thread other(rank, 1);
  rank(0);
  other.join();
  EXPECT_EQ(back[1], sent); // GPU -> CPU
  EXPECT_EQ(back[0], sent); // and back into GPU memory
}
#endif // STRAIT_TEST_HAVE_GLOO

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
