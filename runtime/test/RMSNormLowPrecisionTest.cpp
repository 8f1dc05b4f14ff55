//===- RMSNormLowPrecisionTest.cpp - RMSNorm with bf16/f16 Y and dY -------===//
//
// graph-cast-motion rules 13 and 14 fold the casts around RMSNormalization
// (and its gradient) of a mixed-precision step into the ops: the CPU kernels
// write a bf16 / f16 Y (computed in f32, rounded once) and read a bf16 / f16
// dY (widened on load). Each is checked bit for bit against the f32 kernel
// with the Cast kernel after (Y) or before (dY), and the bf16 Y also against
// an independent rounding (TestUtil's bf16Bits); every case checks that the
// rounding is not vacuous. The dtype errors name the operand.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

constexpr DType F32 = program::DTYPE_F32, BF16 = program::DTYPE_BF16, F16 = program::DTYPE_F16;

const char *lowName(DType t) { return t == BF16 ? " bf16" : " f16"; }

/// Rows offset by 3 with spread 2: Y has values every 16-bit type rounds.
std::vector<float> rowsOffBy3(const Shape &shape, uint32_t seed) {
  std::vector<float> v = pseudoRandom(numElements(shape), seed);
  for (float &x : v)
    x = 3.0f + 2.0f * x;
  return v;
}

/// A scale around 1.5 (no zero weights that would hide a wrong element).
OwnedTensor scaleTensor(const Shape &shape, uint32_t seed) {
  std::vector<float> v = pseudoRandom(numElements(shape), seed);
  for (float &x : v)
    x += 1.5f;
  return f32Tensor(shape, v);
}

struct Case {
  const char *name;
  Shape x, scale;
  int64_t axis;
};

} // namespace

// Y of type T is Cast(to T) of the f32 kernel's Y, bit for bit: rows over the
// last dim, over two dims, a scale broadcast over the leading normalized dim.
TEST(RMSNormLowPrecision, YEqualsCastOfF32) {
  const Case cases[] = {{"rows", {5, 37}, {37}, -1},
                        {"two_dims", {3, 2, 8}, {2, 8}, 1},
                        {"broadcast_scale", {3, 2, 8}, {8}, -2},
                        {"many_rows", {130, 24}, {24}, -1}};
  for (DType low : {BF16, F16}) {
    for (const Case &c : cases) {
      SCOPED_TRACE(std::string(c.name) + lowName(low));
      OwnedTensor x = f32Tensor(c.x, rowsOffBy3(c.x, 71));
      OwnedTensor scale = scaleTensor(c.scale, 72);
      auto attrs = [&](program::Kernel &k) {
        setInt(k, "axis", c.axis);
        setFloat(k, "epsilon", 1e-3f);
      };
      OwnedTensor ref = runF32Op("RMSNormalization", {&x.tensor, &scale.tensor}, c.x, attrs);
      OwnedTensor y(low, c.x);
      runOp("RMSNormalization", {&x.tensor, &scale.tensor}, {&y.tensor}, attrs);
      OwnedTensor expected = castTo(ref.tensor, low);
      EXPECT_TRUE(sameBytes(y.tensor, expected.tensor));
      if (low == BF16) {
        // The same rounding written independently of the Cast kernel.
        OwnedTensor independent = bf16Tensor(
            c.x, std::vector<float>(ref.tensor.as<float>(),
                                    ref.tensor.as<float>() + ref.tensor.numel()));
        EXPECT_TRUE(sameBytes(y.tensor, independent.tensor));
      }
      // Not vacuous: most elements round.
      EXPECT_GT(roundedCount(ref.tensor, expected.tensor), ref.tensor.numel() / 2);
    }
  }
}

// dX and dScale of a 16-bit dY are the f32 kernel's on Cast(to f32)(dY), bit
// for bit, including more rows than the kernel's 64 dScale blocks.
TEST(RMSNormLowPrecision, GradEqualsF32OfCast) {
  for (DType low : {BF16, F16}) {
    for (Shape shape : {Shape{6, 37}, Shape{2, 3, 16}, Shape{130, 24}}) {
      SCOPED_TRACE(shapeToString(shape) + lowName(low));
      int64_t len = shape.back();
      OwnedTensor x = f32Tensor(shape, rowsOffBy3(shape, 81));
      OwnedTensor scale = scaleTensor({len}, 82);
      OwnedTensor dy32 = f32Tensor(shape, pseudoRandom(numElements(shape), 83));
      OwnedTensor dy = castTo(dy32.tensor, low);       // the 16-bit dY
      OwnedTensor dyw = castTo(dy.tensor, F32);        // Cast(T -> f32)
      ASSERT_GT(roundedCount(dy32.tensor, dy.tensor), 0);
      auto attrs = [](program::Kernel &k) { setFloat(k, "epsilon", 1e-3f); };
      OwnedTensor rdx(F32, shape), rds(F32, {len});
      runOp("RMSNormalizationGrad", {&dyw.tensor, &x.tensor, &scale.tensor},
            {&rdx.tensor, &rds.tensor}, attrs);
      OwnedTensor dx(F32, shape), ds(F32, {len});
      runOp("RMSNormalizationGrad", {&dy.tensor, &x.tensor, &scale.tensor},
            {&dx.tensor, &ds.tensor}, attrs);
      EXPECT_TRUE(sameBytes(dx.tensor, rdx.tensor));
      EXPECT_TRUE(sameBytes(ds.tensor, rds.tensor));
      // The rounding of dY shows in dX: the f32 dY's gradient differs.
      OwnedTensor fdx(F32, shape), fds(F32, {len});
      runOp("RMSNormalizationGrad", {&dy32.tensor, &x.tensor, &scale.tensor},
            {&fdx.tensor, &fds.tensor}, attrs);
      EXPECT_FALSE(sameBytes(fdx.tensor, rdx.tensor));
    }
  }
}

// Other dtypes are errors naming the operand: an i32 dY, an i32 Y (not a
// rounding of the f32 row), a 16-bit X.
TEST(RMSNormLowPrecision, DtypeErrors) {
  OwnedTensor x(F32, {2, 3}), s = scaleTensor({3}, 91);
  OwnedTensor dx(F32, {2, 3}), ds(F32, {3});
  program::Kernel grad;
  grad.set_op("RMSNormalizationGrad");
  OwnedTensor idy(program::DTYPE_I32, {2, 3});
  Status st = runCpu(grad, {&idy.tensor, &x.tensor, &s.tensor}, {&dx.tensor, &ds.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("dY of dtype i32[2x3]"), std::string::npos) << st.toString();
  // A 16-bit dY still needs X's shape.
  OwnedTensor shortDy(BF16, {2, 2});
  st = runCpu(grad, {&shortDy.tensor, &x.tensor, &s.tensor}, {&dx.tensor, &ds.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("dY bf16[2x2] and X f32[2x3] have different shapes"),
            std::string::npos)
      << st.toString();
  program::Kernel norm;
  norm.set_op("RMSNormalization");
  OwnedTensor iy(program::DTYPE_I32, {2, 3});
  st = runCpu(norm, {&x.tensor, &s.tensor}, {&iy.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("output 0 is declared i32[2x3]"), std::string::npos)
      << st.toString();
  OwnedTensor x16(BF16, {2, 3}), y16(BF16, {2, 3});
  st = runCpu(norm, {&x16.tensor, &s.tensor}, {&y16.tensor});
  ASSERT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("bf16"), std::string::npos) << st.toString();
}
