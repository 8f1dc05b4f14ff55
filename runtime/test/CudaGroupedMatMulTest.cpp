//===- CudaGroupedMatMulTest.cpp - Routed expert products on CUDA ranks ---===//
//
// GroupedMatMul and GroupedMatMulGradWeight on CUDA (CudaMatMul.cpp: the
// experts read on the host, rows gathered by expert, one cuBLAS GEMM per
// expert) against the CPU backend: both W layouts, an expert with no rows,
// negative indices, f32 and bf16 operands, an index out of range that fails
// on either backend. Skips without a GPU.
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

/// 33 rows over 6 experts; expert 4 gets none, some indices count from the end.
std::vector<int64_t> routedRows() {
  std::vector<int64_t> idx;
  for (int64_t s = 0; s < 33; ++s) {
    int64_t e = (s * 7 + 3) % 6;
    if (e == 4)
      e = 1;
    idx.push_back(s % 5 == 0 ? e - 6 : e);
  }
  return idx;
}

} // namespace

TEST_F(CudaGroupedMatMul, EqualsCpu) {
  REQUIRE_GPU();
  std::vector<int64_t> idx = routedRows();
  for (int64_t transB : {1, 0}) {
    Shape w = transB ? Shape{6, 20, 12} : Shape{6, 12, 20};
    compare("GroupedMatMul", {Arr::rand({33, 12}, 1), Arr::rand(w, 2), Arr::i({33}, idx)},
            {Arr::out({33, 20})}, groupedAttrs(transB), 1e-5, 1e-6);
    compare("GroupedMatMulGradWeight",
            {Arr::rand({33, 12}, 3), Arr::rand({33, 20}, 4), Arr::i({33}, idx)}, {Arr::out(w)},
            groupedAttrs(transB, 6), 1e-5, 1e-6);
  }
}

// bf16 operands: cuBLAS accumulates in f32 and rounds once, as the CPU
// backend's widened kernel does; they may differ by a rounding of the sums.
TEST_F(CudaGroupedMatMul, Bf16EqualsCpu) {
  REQUIRE_GPU();
  std::vector<int64_t> idx = routedRows();
  constexpr DType bf16 = program::DTYPE_BF16;
  for (int64_t transB : {1, 0}) {
    Shape w = transB ? Shape{6, 24, 16} : Shape{6, 16, 24};
    compare("GroupedMatMul",
            {Arr::randBf16({33, 16}, 5), Arr::randBf16(w, 6), Arr::i({33}, idx)},
            {Arr::out({33, 24}, bf16)}, groupedAttrs(transB), 1e-2, 1e-3);
    compare("GroupedMatMulGradWeight",
            {Arr::randBf16({33, 16}, 7), Arr::randBf16({33, 24}, 8), Arr::i({33}, idx)},
            {Arr::out(w, bf16)}, groupedAttrs(transB, 6), 1e-2, 1e-3);
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
