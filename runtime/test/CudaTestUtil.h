//===- CudaTestUtil.h - One-kernel CPU-vs-CUDA comparisons -------*- C++ -*-===//
//
// Shared by the CUDA test files: every test builds a one-kernel program, runs
// it on the CPU backend and on the CUDA backend with the same inputs, and
// compares every output. Tests that need a GPU call REQUIRE_GPU(), a
// GTEST_SKIP() (reported by ctest as skipped) when cudaGetDeviceCount finds
// none. Test-only: the helpers live in an unnamed namespace, one copy per
// test file; each file names its fixture (class X : public Cuda) so that no
// two files register one test suite with different fixture types.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TEST_CUDATESTUTIL_H
#define STRAIT_RUNTIME_TEST_CUDATESTUTIL_H

#include "TestUtil.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/Cuda.h"
#include "strait/runtime/KernelArgs.h"
#include "CudaKernels.h"

#include <gtest/gtest.h>

#include <algorithm>
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
  /// f16 (round to nearest even) of pseudo-random values times `scale`.
  static Arr randF16(Shape s, uint32_t seed, float scale = 1.0f) {
    std::vector<float> v = pseudoRandom(numElements(s), seed);
    Arr a{program::DTYPE_F16, std::move(s), {}};
    a.bytes.resize(v.size() * 2);
    for (size_t k = 0; k < v.size(); ++k) {
      uint16_t h = floatToHalf(v[k] * scale);
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
    case program::DTYPE_F16:
      return halfToFloat(reinterpret_cast<const uint16_t *>(bytes.data())[k]);
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

/// A random bf16 or f16 array (Arr::randBf16 / randF16).
inline Arr randLow(DType t, Shape s, uint32_t seed) {
  return t == program::DTYPE_BF16 ? Arr::randBf16(std::move(s), seed)
                                  : Arr::randF16(std::move(s), seed);
}

/// The f32 array of a 16-bit array's values (exact).
inline Arr widened(const Arr &x) {
  std::vector<float> v(numElements(x.shape));
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = static_cast<float>(x.at(k));
  return Arr::f(x.shape, v);
}

/// An f32 array rounded to `t` (nearest even), on the host.
inline Arr roundedTo(const Arr &x, DType t) {
  int64_t n = numElements(x.shape);
  Arr r = Arr::out(x.shape, t);
  r.bytes.resize(n * 2);
  for (int64_t k = 0; k < n; ++k) {
    float f = static_cast<float>(x.at(k));
    uint16_t h;
    if (t == program::DTYPE_F16) {
      h = floatToHalf(f);
    } else {
      uint32_t u;
      std::memcpy(&u, &f, 4);
      u += 0x7FFF + ((u >> 16) & 1);
      h = static_cast<uint16_t>(u >> 16);
    }
    std::memcpy(r.bytes.data() + 2 * k, &h, 2);
  }
  return r;
}

/// Index of the first element whose bytes differ, or -1 (0 when the types or
/// sizes differ).
inline int64_t firstDifference(const Arr &a, const Arr &b) {
  if (a.dtype != b.dtype || a.bytes.size() != b.bytes.size())
    return 0;
  size_t es = a.bytes.size() / std::max<int64_t>(numElements(a.shape), 1);
  for (size_t k = 0; k < a.bytes.size(); ++k)
    if (a.bytes[k] != b.bytes[k])
      return static_cast<int64_t>(k / es);
  return -1;
}

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
        bool nan = std::isnan(c) && std::isnan(g);
        if (!nan && !(std::abs(c - g) <= atol + rtol * std::abs(c))) {
          ADD_FAILURE() << op << " output " << o << " element " << k << ": cpu " << c
                        << " cuda " << g;
          ++bad;
        }
      }
    }
  }

  BackendRegistry registry;
};


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

#endif // STRAIT_RUNTIME_TEST_CUDATESTUTIL_H
