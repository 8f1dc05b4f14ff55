//===- ReduceRunsTest.cpp - ReduceSum/ReduceMean over contiguous runs -----===//
//
// ReduceSum and ReduceMean (f32, summed in double in row-major order of the
// reduced elements) against the same sums written here, for reduced axes
// that end at the innermost dimension (the kernel's run loop) and ones that
// do not (its element walk): equal bits.
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
           {0, 2, 3}, {1, 3}, {3}, {-1, -2}, {0, 1}, {0, 1, 2, 3}}) {
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

} // namespace
