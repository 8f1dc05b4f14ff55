//===- BinaryBroadcastTest.cpp - Binary kernels' broadcasting loops -------===//
//
// Sub (not commutative, so swapped operands show) over every inner-stride
// case of the CPU backend's applyBinary (same shapes; rows of both; a row
// and a repeated value, either way round; a strided inner dimension)
// against an index computation written here.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

/// The element of `in` that output index `flat` of `out` reads (numpy
/// broadcasting, shapes aligned at the right).
int64_t sourceIndex(const Shape &in, const Shape &out, int64_t flat) {
  int64_t idx = 0, stride = 1;
  for (int64_t d = static_cast<int64_t>(out.size()) - 1; d >= 0; --d) {
    int64_t coord = flat % out[d];
    flat /= out[d];
    int64_t id = d - static_cast<int64_t>(out.size() - in.size());
    if (id < 0)
      continue;
    idx += (in[id] == 1 ? 0 : coord) * stride;
    stride *= in[id];
  }
  return idx;
}

TEST(BinaryBroadcast, EveryInnerStrideCaseMatchesIndexArithmetic) {
  struct Case {
    Shape a, b, out;
  };
  std::vector<Case> cases = {
      {{3, 5}, {3, 5}, {3, 5}},          // same shapes: one flat loop
      {{2, 3, 5}, {2, 1, 5}, {2, 3, 5}}, // rows of both
      {{3, 5}, {5}, {3, 5}},             // rows of both, b repeated
      {{3, 5}, {3, 1}, {3, 5}},          // a row, b one value per row
      {{3, 1}, {3, 5}, {3, 5}},          // a one value per row, b a row
      {{4, 1}, {1, 5}, {4, 5}},          // outer product
      {{1}, {2, 3}, {2, 3}},             // scalar a
      {{2, 3, 1}, {2, 1, 1}, {2, 3, 1}}, // inner dim 1
  };
  uint32_t seed = 40;
  for (const Case &c : cases) {
    SCOPED_TRACE(shapeToString(c.a) + " - " + shapeToString(c.b));
    std::vector<float> va = pseudoRandom(numElements(c.a), ++seed),
                       vb = pseudoRandom(numElements(c.b), ++seed);
    OwnedTensor a = f32Tensor(c.a, va), b = f32Tensor(c.b, vb);
    OwnedTensor y = runF32Op("Sub", {&a.tensor, &b.tensor}, c.out);
    for (int64_t i = 0; i < numElements(c.out); ++i)
      ASSERT_EQ(y.as<float>()[i],
                va[sourceIndex(c.a, c.out, i)] - vb[sourceIndex(c.b, c.out, i)])
          << "element " << i;
  }
}

} // namespace
