//===- CudaCopyPlanTest.cpp - The strided-copy plans, checked on the CPU --===//
//
// The tile and row plans of launchStridedCopy (lib/cuda/CopyPlan.h) run the
// same host+device index functions here as the kernels do on the GPU: every
// output element must be written exactly once, from the input offset the
// plain strided copy would read. No GPU needed.
//
//===----------------------------------------------------------------------===//
#include "../lib/cuda/CopyPlan.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

using namespace strait::rt::cuda;

namespace {

/// The Index of a Transpose of `in` by `perm`, as the CUDA Transpose builds it.
Index transposeIndex(const std::vector<int64_t> &in, const std::vector<int64_t> &perm,
                     std::vector<int64_t> &out) {
  size_t r = in.size();
  std::vector<int64_t> inStrides(r, 1), strides(r);
  for (int64_t d = static_cast<int64_t>(r) - 2; d >= 0; --d)
    inStrides[d] = inStrides[d + 1] * in[d + 1];
  out.assign(r, 0);
  for (size_t d = 0; d < r; ++d) {
    out[d] = in[perm[d]];
    strides[d] = inStrides[perm[d]];
  }
  Index ix;
  EXPECT_TRUE(stridedIndex(out, strides, ix));
  return ix;
}

/// The input offset the plain strided copy reads for output element i.
int64_t plainSource(const Index &ix, int64_t i) {
  int64_t off = 0;
  for (int d = ix.rank - 1; d >= 0; --d) {
    off += (i % ix.shape[d]) * ix.stride[0][d];
    i /= ix.shape[d];
  }
  return off;
}

/// Runs the tile plan's index functions over every element.
void checkTile(const Index &ix, const TileCopy &t, const std::string &what) {
  std::vector<int> hits(ix.n, 0);
  for (int64_t bi = 0; bi < t.batch; ++bi) {
    int64_t inBase, outBase;
    tileBase(t, bi, inBase, outBase);
    for (uint32_t a = 0; a < t.shape[t.a]; ++a)
      for (uint32_t b = 0; b < t.shape[t.b]; ++b) {
        int64_t in = inBase + tileIn(t, a, b), out = outBase + tileOut(t, a, b);
        ASSERT_GE(out, 0) << what;
        ASSERT_LT(out, ix.n) << what;
        ++hits[out];
        ASSERT_EQ(in, plainSource(ix, out)) << what << ": output " << out;
      }
  }
  for (int64_t i = 0; i < ix.n; ++i)
    ASSERT_EQ(hits[i], 1) << what << ": output " << i;
}

void checkRow(const Index &ix, const RowCopy &r, const std::string &what) {
  std::vector<int> hits(ix.n, 0);
  ASSERT_EQ(r.chunks * r.vec, ix.n) << what;
  for (int64_t c = 0; c < r.chunks; ++c) {
    int64_t src = rowCopySource(r, c);
    ASSERT_EQ(src % r.vec, 0) << what << ": chunk " << c << " starts unaligned";
    for (int j = 0; j < r.vec; ++j) {
      int64_t out = c * r.vec + j;
      ++hits[out];
      ASSERT_EQ(src + j, plainSource(ix, out)) << what << ": output " << out;
    }
  }
  for (int64_t i = 0; i < ix.n; ++i)
    ASSERT_EQ(hits[i], 1) << what << ": output " << i;
}

} // namespace

TEST(CudaCopyPlan, TransposesTakeTheRightPlanAndEveryOffsetMatches) {
  struct Case {
    std::vector<int64_t> in, perm;
    bool tile;    // expected: the tiled plan
    int rowVec2;  // expected row vector for 2-byte elements (0: no row plan)
  };
  const Case cases[] = {
      {{8, 64, 12, 64}, {0, 2, 3, 1}, true, 0},  // GPT-2's Kt (shortened)
      {{8, 12, 64, 64}, {0, 3, 1, 2}, true, 0},  // and back
      {{8, 64, 12, 64}, {0, 2, 1, 3}, false, 8}, // heads: rows of 64 stay whole
      {{2, 3, 64, 100}, {0, 3, 1, 2}, true, 0},
      {{3, 37, 5, 70}, {0, 2, 3, 1}, true, 0},
      {{77, 130}, {1, 0}, true, 0},
      {{4, 33, 17}, {2, 1, 0}, false, 0},      // innermost output dim of 4: plain copy
      {{5, 7, 12}, {1, 0, 2}, false, 4},        // rows of 12 bf16: 8-byte chunks
      {{5, 7, 6}, {1, 0, 2}, false, 2},         // rows of 6: 4-byte chunks
      {{5, 7, 3}, {1, 0, 2}, false, 0},         // rows of 3: no chunk divides
      {{6, 4}, {1, 0}, false, 0},               // too small to tile
  };
  for (const Case &c : cases) {
    std::vector<int64_t> out;
    Index ix = transposeIndex(c.in, c.perm, out);
    std::string what = "transpose of rank " + std::to_string(c.in.size()) + " [" +
                       std::to_string(c.in[0]) + "...] perm[0]=" + std::to_string(c.perm[0]);
    TileCopy t;
    EXPECT_EQ(planTileCopy(ix, t), c.tile) << what;
    if (c.tile)
      checkTile(ix, t, what);
    for (size_t es : {1, 2, 4, 8}) {
      RowCopy r;
      bool row = planRowCopy(ix, es, r);
      if (es == 2)
        EXPECT_EQ(row ? r.vec : 0, c.rowVec2) << what;
      if (row) {
        EXPECT_FALSE(c.tile) << what << ": both plans";
        EXPECT_LE(r.vec * es, 16u) << what;
        checkRow(ix, r, what + " es " + std::to_string(es));
      }
    }
  }
}

TEST(CudaCopyPlan, BroadcastsUseRowChunks) {
  // A Gemm bias [n] broadcast over [m, n], and Expand of [1, 3, 1, 8] -> [2, 3, 4, 8].
  struct Case {
    std::vector<int64_t> out, in;
  };
  for (const Case &c : {Case{{64, 24}, {24}}, Case{{2, 3, 4, 8}, {1, 3, 1, 8}}}) {
    Index ix;
    ASSERT_TRUE(broadcastIndex(c.out, {c.in}, ix));
    RowCopy r;
    ASSERT_TRUE(planRowCopy(ix, 4, r));
    EXPECT_EQ(r.vec, 4);
    checkRow(ix, r, "broadcast");
    TileCopy t;
    EXPECT_FALSE(planTileCopy(ix, t));
  }
}

TEST(CudaCopyPlan, StridedSlicesKeepThePlainCopy) {
  // Every other column: no stride-1 dim, neither plan applies.
  Index ix;
  ASSERT_TRUE(stridedIndex({16, 32}, {64, 2}, ix));
  TileCopy t;
  RowCopy r;
  EXPECT_FALSE(planTileCopy(ix, t));
  EXPECT_FALSE(planRowCopy(ix, 2, r));
}
