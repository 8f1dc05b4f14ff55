//===- BitwiseTest.cpp - BitwiseAnd/Or/Xor/Not CPU kernels ----------------===//
//
// Every integer type (signed values with the sign bit set, unsigned values
// past the signed range) and bool, with broadcasting, against the C++
// operators written here; a float operand is an Unimplemented error.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <gtest/gtest.h>

#include <cstring>
#include <limits>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

template <typename T> OwnedTensor filled(DType dtype, const Shape &shape, uint64_t seed) {
  OwnedTensor t(dtype, shape);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < t.tensor.numel(); ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t bits = s >> 11;
    T v;
    std::memcpy(&v, &bits, sizeof(T) < 8 ? sizeof(T) : 8);
    if constexpr (std::is_same<T, bool>::value)
      v = bits & 1;
    t.as<T>()[i] = v;
  }
  return t;
}

template <typename T> void checkAll(DType dtype) {
  // a [2, 3, 4] against b [3, 1]: rows and a repeated value.
  OwnedTensor a = filled<T>(dtype, {2, 3, 4}, 1), b = filled<T>(dtype, {3, 1}, 2);
  if constexpr (!std::is_same<T, bool>::value) {
    a.as<T>()[0] = std::numeric_limits<T>::min();
    a.as<T>()[1] = std::numeric_limits<T>::max();
  }
  struct Op {
    const char *name;
    T (*f)(T, T);
  };
  Op ops[] = {{"BitwiseAnd", [](T x, T y) { return T(x & y); }},
              {"BitwiseOr", [](T x, T y) { return T(x | y); }},
              {"BitwiseXor", [](T x, T y) { return T(x ^ y); }}};
  for (const Op &op : ops) {
    SCOPED_TRACE(op.name);
    OwnedTensor y(dtype, {2, 3, 4});
    runOp(op.name, {&a.tensor, &b.tensor}, {&y.tensor});
    for (int64_t i = 0; i < 24; ++i)
      ASSERT_EQ(y.as<T>()[i], op.f(a.as<T>()[i], b.as<T>()[(i / 4) % 3])) << "element " << i;
  }
  OwnedTensor y(dtype, {2, 3, 4});
  runOp("BitwiseNot", {&a.tensor}, {&y.tensor});
  for (int64_t i = 0; i < 24; ++i) {
    T want;
    if constexpr (std::is_same<T, bool>::value)
      want = !a.as<T>()[i];
    else
      want = T(~a.as<T>()[i]);
    ASSERT_EQ(y.as<T>()[i], want) << "element " << i;
  }
}

TEST(Bitwise, EveryIntegerTypeAndBoolMatchesTheOperators) {
  checkAll<uint8_t>(program::DTYPE_U8);
  checkAll<int8_t>(program::DTYPE_I8);
  checkAll<uint16_t>(program::DTYPE_U16);
  checkAll<int16_t>(program::DTYPE_I16);
  checkAll<uint32_t>(program::DTYPE_U32);
  checkAll<int32_t>(program::DTYPE_I32);
  checkAll<uint64_t>(program::DTYPE_U64);
  checkAll<int64_t>(program::DTYPE_I64);
  checkAll<bool>(program::DTYPE_BOOL);
}

TEST(Bitwise, FloatOperandIsUnimplemented) {
  OwnedTensor a = f32Tensor({3}, {1, 2, 3}), y(program::DTYPE_F32, {3});
  program::Kernel k;
  k.set_op("BitwiseAnd");
  Status s = runCpu(k, {&a.tensor, &a.tensor}, {&y.tensor});
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("f32"), std::string::npos) << s.toString();
}

} // namespace
