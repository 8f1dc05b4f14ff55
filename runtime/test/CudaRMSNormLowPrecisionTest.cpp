//===- CudaRMSNormLowPrecisionTest.cpp - RMSNorm with bf16/f16 Y and dY ---===//
//
// graph-cast-motion rules 13 and 14: RMSNormalization writes a bf16 / f16 Y
// (the f32 value rounded once) and RMSNormalizationGrad reads a bf16 / f16 dY
// (widened on load). On the GPU each is bit for bit the f32 kernel followed
// (Y) or preceded (dY) by the cast; against the CPU kernels (statistics in
// double there, f32 here) within one rounding of the 16-bit type (Y) or f32
// summation error (dX, dScale). No kernel may run through the host
// fallback. Skipped without a GPU (the CudaNoDevice test runs everywhere).
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

#include "CudaSupport.h"

namespace {

class CudaRMSNormLow : public Cuda {
protected:
  /// The kernels that ran on the host so far (none expected).
  std::map<std::string, int64_t> hostKernels() {
    StatusOr<const Backend *> b = registry.forDevice("cuda:0");
    return b.isOk() ? cudaHostFallbackCounts(**b) : std::map<std::string, int64_t>{};
  }
};

/// Rows offset by 3 with spread 2 (Y has values every 16-bit type rounds).
Arr rowsOffBy3(const Shape &shape, uint32_t seed) {
  std::vector<float> v = pseudoRandom(numElements(shape), seed);
  for (float &x : v)
    x = 3.0f + 2.0f * x;
  return Arr::f(shape, v);
}

/// A scale in [0.5, 1.5).
Arr scaleOf(int64_t len, uint32_t seed) {
  Arr s = Arr::rand({len}, seed, 0.5f);
  for (size_t k = 0; k < s.bytes.size() / 4; ++k)
    reinterpret_cast<float *>(s.bytes.data())[k] += 1.0f;
  return s;
}

double rtolOf(DType t) { return t == program::DTYPE_BF16 ? 1e-2 : 2e-3; }

const Shape kShapes[] = {{64, 768}, {2, 3, 37}, {300, 128}};

} // namespace

// Y of type T: on the GPU, bit for bit the f32 kernel's Y rounded once;
// against the CPU kernel within one rounding.
TEST_F(CudaRMSNormLow, WritesLowY) {
  REQUIRE_GPU();
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (const Shape &shape : kShapes) {
      SCOPED_TRACE(shapeToString(shape) + " " + dtypeName(t));
      std::vector<Arr> ins = {rowsOffBy3(shape, 290), scaleOf(shape.back(), 291)};
      auto attrs = [](program::Kernel &k) { setFloat(k, "epsilon", 1e-3f); };
      std::vector<Arr> ref = {Arr::out(shape)}, low = {Arr::out(shape, t)};
      Status s = runOn("cuda:0", registry, "RMSNormalization", ins, ref, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "RMSNormalization", ins, low, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      Arr expected = roundedTo(ref[0], t);
      EXPECT_EQ(firstDifference(low[0], expected), -1) << "Y";
      // Not vacuous: the f32 Y is not the rounded one.
      EXPECT_NE(firstDifference(widened(expected), ref[0]), -1);
      compare("RMSNormalization", ins, {Arr::out(shape, t)}, attrs, rtolOf(t), 1e-4);
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// dY of type T: on the GPU, dX and dScale bit for bit the f32 kernel's on the
// widened dY (dScale's chunk partials are summed in a fixed order, so any
// row count); against the CPU within f32 summation error.
TEST_F(CudaRMSNormLow, GradReadsLowDY) {
  REQUIRE_GPU();
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    for (const Shape &shape : kShapes) {
      SCOPED_TRACE(shapeToString(shape) + " " + dtypeName(t));
      int64_t len = shape.back();
      Arr x = rowsOffBy3(shape, 293), scale = scaleOf(len, 294);
      Arr dy = randLow(t, shape, 295), dyw = widened(dy);
      auto attrs = [](program::Kernel &k) { setFloat(k, "epsilon", 1e-3f); };
      std::vector<Arr> ref = {Arr::out(shape), Arr::out({len})}, low = ref;
      Status s = runOn("cuda:0", registry, "RMSNormalizationGrad", {dyw, x, scale}, ref, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      s = runOn("cuda:0", registry, "RMSNormalizationGrad", {dy, x, scale}, low, attrs);
      ASSERT_TRUE(s.isOk()) << s.toString();
      EXPECT_EQ(firstDifference(low[0], ref[0]), -1) << "dX";
      EXPECT_EQ(firstDifference(low[1], ref[1]), -1) << "dScale";
      // dScale sums up to 300 rows of values in [-1, 1].
      compare("RMSNormalizationGrad", {dy, x, scale}, {Arr::out(shape), Arr::out({len})}, attrs,
              1e-4, 1e-3);
    }
  }
  EXPECT_TRUE(hostKernels().empty()) << hostKernels().begin()->first << " ran on the host";
}

// RMSNormalization (16-bit Y) and RMSNormalizationGrad (16-bit dY) run
// natively with their other operands f32; 16-bit operands elsewhere are not
// the kernels'.
TEST(CudaNoDevice, LowPrecisionRMSNormIsNative) {
  program::Kernel norm, grad;
  norm.set_op("RMSNormalization");
  grad.set_op("RMSNormalizationGrad");
  const DType F32 = program::DTYPE_F32;
  cuda::OperandType x{true, F32, {4, 8}}, s{true, F32, {8}};
  EXPECT_TRUE(cuda::nativeSupport({&norm, {x, s}, {x}}).native);
  EXPECT_TRUE(cuda::nativeSupport({&grad, {x, x, s}, {x, s}}).native);
  for (DType t : {program::DTYPE_BF16, program::DTYPE_F16}) {
    SCOPED_TRACE(dtypeName(t));
    cuda::OperandType y{true, t, {4, 8}}, lowS{true, t, {8}};
    EXPECT_TRUE(cuda::nativeSupport({&norm, {x, s}, {y}}).native);
    EXPECT_TRUE(cuda::nativeSupport({&grad, {y, x, s}, {x, s}}).native);
    // A 16-bit X, scale, dX or dScale is not the kernels'.
    EXPECT_FALSE(cuda::nativeSupport({&norm, {y, s}, {y}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&norm, {x, lowS}, {y}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&grad, {y, y, s}, {x, s}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&grad, {y, x, s}, {y, s}}).native);
    EXPECT_FALSE(cuda::nativeSupport({&grad, {y, x, s}, {x, lowS}}).native);
  }
  cuda::OperandType x64{true, program::DTYPE_F64, {4, 8}};
  EXPECT_FALSE(cuda::nativeSupport({&norm, {x, s}, {x64}}).native);
}
