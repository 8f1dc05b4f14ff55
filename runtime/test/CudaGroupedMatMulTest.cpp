//===- CudaGroupedMatMulTest.cpp - Routed expert products on CUDA ranks ---===//
//
// GroupedMatMul and GroupedMatMulGradWeight have no CUDA kernel: a CUDA rank
// runs the CPU kernels on the same managed memory through the backend's
// host fallback (docs/runtime-cuda.md). This checks that path against the
// CPU backend (both W layouts, an expert with no rows, negative indices,
// an index out of range that fails on either backend). Skips without a GPU.
//
//===----------------------------------------------------------------------===//
#include "CudaTestUtil.h"

namespace {

class CudaGroupedMatMul : public Cuda {};

Attrs groupedAttrs(int64_t transB, int64_t experts = 0) {
  return [=](program::Kernel &k) {
    setInt(k, "transB", transB);
    if (experts)
      setInt(k, "num_experts", experts);
  };
}

} // namespace

TEST_F(CudaGroupedMatMul, HostFallbackEqualsCpu) {
  REQUIRE_GPU();
  // 33 rows over 6 experts; expert 4 gets none, some indices count from the end.
  std::vector<int64_t> idx;
  for (int64_t s = 0; s < 33; ++s) {
    int64_t e = (s * 7 + 3) % 6;
    if (e == 4)
      e = 1;
    idx.push_back(s % 5 == 0 ? e - 6 : e);
  }
  for (int64_t transB : {1, 0}) {
    Shape w = transB ? Shape{6, 20, 12} : Shape{6, 12, 20};
    compare("GroupedMatMul", {Arr::rand({33, 12}, 1), Arr::rand(w, 2), Arr::i({33}, idx)},
            {Arr::out({33, 20})}, groupedAttrs(transB), 1e-5, 1e-6);
    compare("GroupedMatMulGradWeight",
            {Arr::rand({33, 12}, 3), Arr::rand({33, 20}, 4), Arr::i({33}, idx)}, {Arr::out(w)},
            groupedAttrs(transB, 6), 1e-5, 1e-6);
  }
}

TEST_F(CudaGroupedMatMul, IndexOutOfRangeFails) {
  REQUIRE_GPU();
  std::vector<Arr> outs = {Arr::out({3, 4})};
  Status s = runOn("cuda:0", registry, "GroupedMatMul",
                   {Arr::rand({3, 2}, 1), Arr::rand({2, 4, 2}, 2), Arr::i({3}, {0, 5, 1})}, outs,
                   groupedAttrs(1));
  ASSERT_FALSE(s.isOk());
  EXPECT_NE(s.toString().find("index 5 of row 1"), std::string::npos) << s.toString();
}
