//===- ReduceRunsTest.cpp - Sums over contiguous runs ---------------------===//
//
// ReduceSum and ReduceMean (f32, summed in double in row-major order of the
// reduced elements) and the compiler's ReduceToShape (f32 adds) against the
// same sums written here, for shapes that take the kernels' run loops, their
// row loops (kept dims after the last reduced one) and their element walks:
// equal bits.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"

#include <gtest/gtest.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

TEST(ReduceRuns, SumAndMeanEqualRowMajorDoubleSums) {
  Shape s = {3, 4, 5, 6};
  std::vector<float> v = pseudoRandom(numElements(s), 77);
  for (float &x : v)
    x *= 1000; // large enough for the order of additions to show
  OwnedTensor x = f32Tensor(s, v);
  for (std::vector<int64_t> axes : std::vector<std::vector<int64_t>>{
           {0, 2, 3}, {1, 3}, {3}, {-1, -2}, {0, 1}, {0, 1, 2, 3},
           // Kept dims after the last reduced one: whole rows added at once.
           {1}, {0, 2}, {-2}, {0}}) {
    std::vector<bool> red(4, false);
    for (int64_t a : axes)
      red[(a + 4) % 4] = true;
    Shape out;
    for (int d = 0; d < 4; ++d)
      out.push_back(red[d] ? 1 : s[d]);
    // Row-major over the input: each element adds into its output, so each
    // output sums its elements in row-major order of the reduced dims.
    std::vector<double> sum(numElements(out), 0.0);
    int64_t count = numElements(s) / numElements(out);
    for (int64_t i = 0; i < numElements(s); ++i) {
      int64_t rem = i, o = 0, stride = 1;
      for (int d = 3; d >= 0; --d) {
        int64_t c = rem % s[d];
        rem /= s[d];
        o += (red[d] ? 0 : c) * stride;
        stride *= out[d];
      }
      sum[o] += v[i];
    }
    for (const char *op : {"ReduceSum", "ReduceMean"}) {
      SCOPED_TRACE(std::string(op) + " axes of " + std::to_string(axes.size()));
      OwnedTensor y = runF32Op(op, {&x.tensor}, out,
                               [&](program::Kernel &k) { setInts(k, "axes", axes); });
      bool mean = std::string(op) == "ReduceMean";
      for (int64_t o = 0; o < numElements(out); ++o)
        ASSERT_EQ(y.as<float>()[o],
                  static_cast<float>(mean ? sum[o] / static_cast<double>(count) : sum[o]))
            << "output " << o;
    }
  }
}

// The autodiff's sums over broadcast dims: unit dims around the reduced
// ones (Tile's gradient in MoE layers, [1, T, k, 1, 1, d] over {0, 2, 4}),
// keepdims 0: the row loop's outputs against double sums in row-major order.
TEST(ReduceRuns, RowSumsAroundUnitDims) {
  Shape s = {1, 5, 3, 1, 1, 7};
  std::vector<float> v = pseudoRandom(numElements(s), 78);
  for (float &x : v)
    x *= 1000;
  OwnedTensor x = f32Tensor(s, v);
  for (std::vector<int64_t> axes :
       std::vector<std::vector<int64_t>>{{0, 2, 4}, {2, 3}, {1, 2}, {0}}) {
    SCOPED_TRACE("axes " + shapeToString(axes));
    std::vector<bool> red(s.size(), false);
    for (int64_t a : axes)
      red[a] = true;
    Shape out;
    std::vector<int64_t> strideOf(s.size(), 0); // output stride of each kept dim
    for (size_t d = 0; d < s.size(); ++d)
      if (!red[d])
        out.push_back(s[d]);
    for (int64_t d = static_cast<int64_t>(s.size()) - 1, st = 1; d >= 0; --d)
      if (!red[d]) {
        strideOf[d] = st;
        st *= s[d];
      }
    std::vector<double> sum(numElements(out), 0.0);
    for (int64_t i = 0; i < numElements(s); ++i) {
      int64_t rem = i, o = 0;
      for (int64_t d = static_cast<int64_t>(s.size()) - 1; d >= 0; --d) {
        o += (rem % s[d]) * strideOf[d];
        rem /= s[d];
      }
      sum[o] += v[i];
    }
    OwnedTensor y = runF32Op("ReduceSum", {&x.tensor}, out, [&](program::Kernel &k) {
      setInts(k, "axes", axes);
      setInt(k, "keepdims", 0);
    });
    for (int64_t o = 0; o < numElements(out); ++o)
      ASSERT_EQ(y.as<float>()[o], static_cast<float>(sum[o])) << "output " << o;
  }
}

TEST(ReduceRuns, ReduceToShapeEqualsRowMajorFloatSums) {
  // The compiler's ReduceToShape (the adjoint of a broadcast): f32 adds in
  // row-major order of X; kept innermost dims take the kernel's row loop.
  Shape xs = {4, 3, 5};
  std::vector<float> v = pseudoRandom(numElements(xs), 91);
  for (float &x : v)
    x *= 1000;
  OwnedTensor x = f32Tensor(xs, v);
  for (Shape to : std::vector<Shape>{{5}, {1, 3, 5}, {4, 1, 5}, {3, 1}, {4, 3, 1}, {1}}) {
    SCOPED_TRACE("to " + shapeToString(to));
    Shape full(xs.size() - to.size(), 1);
    full.insert(full.end(), to.begin(), to.end());
    std::vector<float> want(numElements(to), 0.0f);
    for (int64_t i = 0; i < numElements(xs); ++i) {
      int64_t rem = i, o = 0, stride = 1;
      for (int d = 2; d >= 0; --d) {
        int64_t c = rem % xs[d];
        rem /= xs[d];
        o += (full[d] == 1 ? 0 : c) * stride;
        stride *= full[d];
      }
      want[o] += v[i];
    }
    OwnedTensor y = runF32Op("ReduceToShape", {&x.tensor}, to,
                             [&](program::Kernel &k) { setInts(k, "shape", to); });
    for (int64_t o = 0; o < numElements(to); ++o)
      ASSERT_EQ(y.as<float>()[o], want[o]) << "output " << o;
  }
}

} // namespace
