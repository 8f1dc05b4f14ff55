//===- QuantizedTopKTest.cpp - Top-k with int8/int4 values and Rice gaps -===//
//
// CODEC_TOPK_INT8 / CODEC_TOPK_INT4 against references computed here: the
// kept positions from a full sort of (|x|, index), each kept value within
// half a scale of its block of kept values (scale = max |kept| / qmax), the
// payload size from the formulas written out independently (Rice: the
// compiler's D8 size plus the 24 bytes of header and k, test/Dialect/Dist
// checks the same figures; Elias-gamma where smaller), Rice-coded positions
// that fit their bound for any pattern.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/Codec.h"

#include <algorithm>
#include <cmath>
#include <gtest/gtest.h>
#include <numeric>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

program::CodecParams qparams(bool int4, float ratio, uint32_t block = 0, bool feedback = false) {
  program::CodecParams p;
  p.set_codec(int4 ? program::CODEC_TOPK_INT4 : program::CODEC_TOPK_INT8);
  p.set_topk_ratio(ratio);
  p.set_block_size(block);
  p.set_error_feedback(feedback);
  return p;
}

/// The payload size written out: header 16, u64 k, f32 scales per block of
/// kept values, the codes, then k (b + 2) bits of gaps, b the least with
/// k 2^b >= n.
uint64_t expectedBytes(bool int4, uint64_t n, uint64_t k, uint64_t block) {
  uint64_t b = 0;
  while (k * (uint64_t(1) << b) < n)
    ++b;
  return 24 + 4 * ((k + block - 1) / block) + (int4 ? (k + 1) / 2 : k) + (k * (b + 2) + 7) / 8;
}

/// Bytes of Elias-gamma codes of the gaps of the sorted positions `kept`
/// (gap + 1 = v in 2 floor(log2 v) + 1 bits).
uint64_t gammaBytes(const std::vector<uint32_t> &kept) {
  uint64_t bits = 0;
  int64_t prev = -1;
  for (uint32_t i : kept) {
    bits += 2 * uint64_t(std::floor(std::log2(double(int64_t(i) - prev)))) + 1;
    prev = i;
  }
  return (bits + 7) / 8;
}

/// Encodes, decodes, and checks the kept positions (a full sort, ties to
/// the lower index), each kept value against half a scale of its block, and
/// the size: expectedBytes with Rice-coded gaps, or the Elias-gamma size
/// when that is smaller. Returns the index encoding.
TopKIndexEncoding expectQuantizedTopK(const std::vector<float> &x, bool int4, float ratio,
                                      uint32_t block) {
  auto p = qparams(int4, ratio, block);
  std::vector<uint8_t> payload;
  EXPECT_TRUE(encode(p, x.data(), x.size(), payload).isOk());
  int64_t k = topkCount(p, x.size());
  uint32_t B = block ? block : 256;
  std::vector<float> y(x.size(), 7.0f);
  Status s = decode(payload.data(), payload.size(), y.data(), y.size());
  EXPECT_TRUE(s.isOk()) << s.toString();

  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa > fb || (fa == fb && a < b);
  });
  std::vector<uint32_t> kept(order.begin(), order.begin() + k);
  std::sort(kept.begin(), kept.end());
  uint64_t rice = expectedBytes(int4, x.size(), k, B);
  EXPECT_EQ(rice, topkQuantizedBytes(int4, x.size(), k, B));
  uint64_t riceIndexBytes = (k * (riceParameter(x.size(), k) + 2) + 7) / 8;
  uint64_t gamma = rice - riceIndexBytes + gammaBytes(kept);
  auto enc = static_cast<TopKIndexEncoding>(payload[2]);
  EXPECT_EQ(enc, gamma < rice ? TopKIndexEncoding::Gamma : TopKIndexEncoding::Rice);
  EXPECT_EQ(payload.size(), std::min(gamma, rice))
      << (int4 ? "int4" : "int8") << " ratio " << ratio << " n " << x.size();
  std::vector<char> isKept(x.size(), 0);
  for (uint32_t i : kept)
    isKept[i] = 1;
  size_t wrong = 0;
  for (size_t i = 0; i < x.size(); ++i)
    wrong += !isKept[i] && y[i] != 0.0f;
  EXPECT_EQ(wrong, 0u) << "dropped elements decoded as non-zero";
  float qmax = int4 ? 7.0f : 127.0f;
  for (size_t lo = 0; lo < kept.size(); lo += B) {
    size_t hi = std::min(kept.size(), lo + B);
    float m = 0;
    for (size_t j = lo; j < hi; ++j)
      m = std::max(m, std::fabs(x[kept[j]]));
    float scale = m / qmax;
    for (size_t j = lo; j < hi; ++j) {
      uint32_t i = kept[j];
      EXPECT_LE(std::fabs(y[i] - x[i]), 0.5f * scale * (1 + 1e-5f) + 1e-30f)
          << "kept element " << i << " of block " << lo / B;
      if (scale > 0 && std::fabs(x[i]) > scale) // sign kept for values above a step
        EXPECT_EQ(std::signbit(y[i]), std::signbit(x[i]));
    }
  }
  return enc;
}

} // namespace

TEST(QuantizedTopK, KeepsTheTopKWithinHalfAScaleAndTheFormulaSize) {
  auto x = gaussian(100003, 21);
  for (bool int4 : {false, true})
    for (float ratio : {0.001f, 0.01f, 0.1f, 1.0f})
      for (uint32_t block : {0u, 7u, 64u})
        expectQuantizedTopK(x, int4, ratio, block);
  // Tiny tensors, odd k for the int4 nibbles, a block larger than k.
  for (size_t n : {1, 2, 3, 5, 17})
    for (bool int4 : {false, true})
      expectQuantizedTopK(gaussian(n, 3 + n), int4, 0.5f, 2);
}

TEST(QuantizedTopK, SizesOfTheCompilerTests) {
  // The figures test/Dialect/Dist/round-trip.mlir and errors.mlir check for
  // the compiler (its size omits the 24 bytes of header and k).
  EXPECT_EQ(topkQuantizedBytes(false, 4096, 41, 256), 24u + 92u);
  EXPECT_EQ(topkQuantizedBytes(true, 4096, 41, 256), 24u + 72u);
  EXPECT_EQ(topkQuantizedBytes(false, 1 << 20, 10486, 256), 24u + 22447u);
  EXPECT_EQ(riceParameter(4096, 41), 7);
  EXPECT_EQ(riceParameter(100, 100), 0);
  EXPECT_EQ(riceParameter(0, 0), 0);
}

TEST(QuantizedTopK, RiceForScatteredPositionsGammaForClusteredOnes) {
  // Gaussian noise: positions spread at random, gaps ~ n / k: Rice.
  auto x = gaussian(1 << 16, 4);
  EXPECT_EQ(expectQuantizedTopK(x, false, 0.01f, 0), TopKIndexEncoding::Rice);
  // Whole rows large (as an embedding's rows of the batch's tokens): runs
  // of gap 0 cost 1 bit each in Elias-gamma against Rice's b + 1.
  std::vector<float> rows(1 << 16, 0.01f);
  for (int r : {3, 40, 41, 200})
    for (int c = 0; c < 160; ++c)
      rows[r * 256 + c] = 1.0f + c % 7;
  EXPECT_EQ(expectQuantizedTopK(rows, false, 0.01f, 0), TopKIndexEncoding::Gamma);
  EXPECT_EQ(expectQuantizedTopK(rows, true, 0.01f, 0), TopKIndexEncoding::Gamma);
}

TEST(QuantizedTopK, RiceGapsFitTheirBoundForAnyPattern) {
  const size_t n = 1 << 18;
  for (bool int4 : {false, true}) {
    // All kept elements at the end (one huge first gap), the start, evenly
    // spread, and in clusters with long gaps between.
    std::vector<float> tail(n, 0.001f), head(n, 0.001f), even(n, 0.001f), clusters(n, 0.001f);
    for (size_t i = n - 2621; i < n; ++i)
      tail[i] = 1.0f + i % 5;
    for (size_t i = 0; i < 2622; ++i)
      head[i] = -2.0f - i % 3;
    for (size_t i = 0; i < n; i += 100)
      even[i] = 3.0f;
    for (size_t c = 0; c < 10; ++c)
      for (size_t i = 0; i < 262; ++i)
        clusters[c * 25000 + 13 * i] = float(c + 1);
    for (auto *v : {&tail, &head, &even, &clusters})
      expectQuantizedTopK(*v, int4, 0.01f, 0);
  }
}

TEST(QuantizedTopK, NonFiniteKeptValueDecodesToNaNInItsBlock) {
  auto x = gaussian(4000, 8);
  x[123] = INFINITY;
  std::vector<uint8_t> payload;
  ASSERT_TRUE(encode(qparams(false, 0.05f, 16), x.data(), x.size(), payload).isOk());
  std::vector<float> y(x.size());
  ASSERT_TRUE(decode(payload.data(), payload.size(), y.data(), y.size()).isOk());
  EXPECT_TRUE(std::isnan(y[123])) << "the block of the infinity decodes to NaN, not silently";
}

TEST(QuantizedTopK, ErrorFeedbackCarriesTheDroppedAndTheRoundingOfTheKept) {
  const size_t n = 20000;
  for (bool int4 : {false, true}) {
    ErrorFeedback ef;
    auto x = gaussian(n, 31);
    std::vector<uint8_t> payload;
    ASSERT_TRUE(ef.encode(qparams(int4, 0.01f, 0, true), x.data(), n, payload).isOk());
    std::vector<float> sent(n);
    ASSERT_TRUE(decode(payload.data(), payload.size(), sent.data(), n).isOk());
    const auto &r = ef.getResidual();
    size_t keptWithError = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(r[i], x[i] - sent[i]) << "element " << i;
      keptWithError += sent[i] != 0.0f && r[i] != 0.0f;
    }
    EXPECT_GT(keptWithError, 150u) << "the residual holds the quantization error of kept values";
  }
}

TEST(QuantizedTopK, CorruptPayloadsNameTheProblem) {
  auto x = gaussian(5000, 12);
  std::vector<uint8_t> payload;
  ASSERT_TRUE(encode(qparams(false, 0.01f), x.data(), x.size(), payload).isOk());
  std::vector<float> y(x.size());
  auto message = [&](std::vector<uint8_t> bad) {
    return decode(bad.data(), bad.size(), y.data(), y.size()).getMessage();
  };
  std::vector<uint8_t> bad = payload;
  bad[2] = 2; // u16 gaps named on a quantized top-k payload
  EXPECT_NE(message(bad).find("index encoding 2 on a quantized top-k"), std::string::npos);
  bad = payload;
  bad.back() |= 0x80; // a bit after the last gap
  EXPECT_NE(message(bad).find("after the last"), std::string::npos) << message(bad);
  bad = payload;
  bad[4] = 0, bad[5] = 0; // block size 0
  EXPECT_NE(message(bad).find("block size 0"), std::string::npos);
  bad = payload;
  bad.push_back(0);
  EXPECT_NE(message(bad).find("needs"), std::string::npos);
  // All ones in the gaps: the first gap runs past numel or the section.
  bad = payload;
  size_t indices = payload.size() - (50 * 9 + 7) / 8; // k = 50, b = 7: 9 bits each
  std::fill(bad.begin() + indices, bad.end(), 0xFF);
  EXPECT_NE(message(bad).find("Rice-coded gap"), std::string::npos) << message(bad);
  // An Elias-gamma payload: a byte too many, a bit after the last gap, a
  // code running past numel.
  std::vector<float> rows(5000, 0.01f);
  for (int i = 100; i < 150; ++i)
    rows[i] = 1.0f;
  std::vector<uint8_t> g;
  ASSERT_TRUE(encode(qparams(false, 0.01f), rows.data(), rows.size(), g).isOk());
  ASSERT_EQ(g[2], static_cast<uint8_t>(TopKIndexEncoding::Gamma));
  ASSERT_TRUE(decode(g.data(), g.size(), y.data(), y.size()).isOk());
  bad = g;
  bad.push_back(0);
  EXPECT_NE(message(bad).find("bytes after the last"), std::string::npos) << message(bad);
  bad = g;
  bad.back() |= 0x80;
  EXPECT_NE(message(bad).find("Elias-gamma"), std::string::npos) << message(bad);
  bad = g;
  std::fill(bad.end() - 3, bad.end(), 0);
  EXPECT_NE(message(bad).find("Elias-gamma gap"), std::string::npos) << message(bad);
  // Random flips and truncations of the Elias-gamma payload: errors, never
  // a crash (Codec.MalformedPayloadsAreErrorsNotCrashes does the Rice ones).
  uint32_t state = 77;
  for (int trial = 0; trial < 2000; ++trial) {
    bad = g;
    for (int f = 0; f <= trial % 3; ++f) {
      state = state * 1664525u + 1013904223u;
      bad[(state >> 8) % bad.size()] ^= uint8_t(1u << (state % 8));
    }
    (void)decode(bad.data(), bad.size(), y.data(), y.size());
  }
  for (size_t len = 0; len < g.size(); ++len)
    EXPECT_FALSE(decode(g.data(), len, y.data(), y.size()).isOk()) << len;
  // Parameters: a quantized top-k does not adapt.
  auto p = qparams(true, 0.01f);
  p.set_adapt(true);
  EXPECT_FALSE(validateCodecParams(p, "c").isOk());
}
