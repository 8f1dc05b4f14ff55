//===- CodecTest.cpp - Transfer codecs: round trips, bounds, bad payloads -===//
//
// Every codec against an independent reference computed here in the
// simplest way (a full sort for top-k, per-element rounding for the
// quantizers, numpy-style casts for fp16/bf16), plus malformed payloads and
// the error-feedback identity; the fp16 converter against the F16C
// instructions.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/Codec.h"
#include "../lib/codec/CodecLayout.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <gtest/gtest.h>
#include <numeric>
#include <random>
#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

program::CodecParams params(program::Codec codec, float ratio = 0.0f,
                            uint32_t block = 0, bool feedback = false) {
  program::CodecParams p;
  p.set_codec(codec);
  p.set_topk_ratio(ratio);
  p.set_block_size(block);
  p.set_error_feedback(feedback);
  return p;
}

std::vector<float> roundTrip(const program::CodecParams &p,
                             const std::vector<float> &x, size_t *bytes = nullptr) {
  std::vector<uint8_t> payload;
  Status s = encode(p, x.data(), x.size(), payload);
  EXPECT_TRUE(s.isOk()) << s.toString();
  if (bytes)
    *bytes = payload.size();
  std::vector<float> y(x.size(), 123.0f);
  s = decode(payload.data(), payload.size(), y.data(), y.size());
  EXPECT_TRUE(s.isOk()) << s.toString();
  return y;
}

} // namespace

TEST(Codec, NoneIsExact) {
  auto x = gaussian(1001, 1);
  size_t bytes;
  EXPECT_EQ(roundTrip(params(program::CODEC_NONE), x, &bytes), x);
  EXPECT_EQ(bytes, kCodecHeaderBytes + 4 * x.size());
}

TEST(Codec, Int8ErrorWithinHalfAScalePerBlock) {
  for (uint32_t block : {0u, 1u, 7u, 256u, 1000u}) {
    auto x = gaussian(5003, 2 + block);
    x[17] = 0.0f;
    size_t bytes;
    auto y = roundTrip(params(program::CODEC_INT8, 0, block), x, &bytes);
    uint32_t bs = block ? block : 256;
    size_t blocks = (x.size() + bs - 1) / bs;
    EXPECT_EQ(bytes, kCodecHeaderBytes + 4 * blocks + x.size());
    for (size_t b = 0; b < blocks; ++b) {
      size_t lo = b * bs, hi = std::min(x.size(), lo + bs);
      float m = 0;
      for (size_t i = lo; i < hi; ++i)
        m = std::max(m, std::fabs(x[i]));
      float scale = m / 127.0f;
      for (size_t i = lo; i < hi; ++i) {
        ASSERT_LE(std::fabs(x[i] - y[i]), scale / 2 * (1 + 1e-5f))
            << "block size " << bs << " element " << i;
        if (scale == 0.0f) {
          ASSERT_EQ(y[i], 0.0f);
          continue;
        }
        // The code is an integer multiple of the scale in [-127, 127].
        float q = y[i] / scale;
        ASSERT_NEAR(q, std::nearbyint(q), 1e-3f);
        ASSERT_LE(std::fabs(q), 127.0f + 1e-3f);
      }
    }
    EXPECT_EQ(y[17], 0.0f);
  }
}

TEST(Codec, Int4ErrorWithinHalfAScaleAndPacksTwoPerByte) {
  for (uint32_t block : {0u, 3u, 64u}) {
    auto x = gaussian(4097, 3 + block); // odd: the last byte holds one code
    size_t bytes;
    auto y = roundTrip(params(program::CODEC_INT4, 0, block), x, &bytes);
    uint32_t bs = block ? block : 256;
    size_t blocks = (x.size() + bs - 1) / bs;
    EXPECT_EQ(bytes, kCodecHeaderBytes + 4 * blocks + (x.size() + 1) / 2);
    for (size_t b = 0; b < blocks; ++b) {
      size_t lo = b * bs, hi = std::min(x.size(), lo + bs);
      float m = 0;
      for (size_t i = lo; i < hi; ++i)
        m = std::max(m, std::fabs(x[i]));
      for (size_t i = lo; i < hi; ++i)
        ASSERT_LE(std::fabs(x[i] - y[i]), m / 7.0f / 2 * (1 + 1e-5f))
            << "block size " << bs << " element " << i;
    }
  }
}

TEST(Codec, QuantizersHandleZeroTinyAndNonFiniteBlocks) {
  std::vector<float> x(512, 0.0f);
  x[300] = 1e-44f; // subnormal block maximum
  x[301] = -5e-45f;
  x[400] = std::numeric_limits<float>::infinity();
  for (auto codec : {program::CODEC_INT8, program::CODEC_INT4}) {
    auto y = roundTrip(params(codec, 0, 128), x);
    for (int i = 0; i < 256; ++i)
      ASSERT_EQ(y[i], 0.0f);
    EXPECT_LE(std::fabs(y[300] - x[300]), 1e-44f);
    EXPECT_TRUE(std::isnan(y[400])) << "a non-finite block decodes to NaN";
    EXPECT_TRUE(std::isnan(y[385]));
  }
}

TEST(Codec, HalfAndBFloat16RoundToNearestEven) {
  auto x = gaussian(3000, 4);
  for (auto &v : x)
    v *= 100.0f;
  x.push_back(65519.0f);  // rounds down to 65504
  x.push_back(65520.0f);  // overflows to inf
  x.push_back(1e-7f);     // fp16 subnormal
  x.push_back(-0.0f);
  auto h = roundTrip(params(program::CODEC_FP16), x);
  auto b = roundTrip(params(program::CODEC_BF16), x);
  for (size_t i = 0; i < 3000; ++i) {
    ASSERT_LE(std::fabs(h[i] - x[i]), std::fabs(x[i]) * 0x1p-11f + 0x1p-25f);
    ASSERT_LE(std::fabs(b[i] - x[i]), std::fabs(x[i]) * 0x1p-8f);
  }
  EXPECT_EQ(h[3000], 65504.0f);
  EXPECT_TRUE(std::isinf(h[3001]));
  EXPECT_NEAR(h[3002], 1e-7f, 0x1p-25f);
  EXPECT_TRUE(std::signbit(h[3003]));
  // Exact ties go to the even neighbour: 1 + 2^-11 is half-way between fp16
  // 1 and 1 + 2^-10; 1 + 2^-8 between bf16 1 and 1 + 2^-7.
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 0x1p-11f)), 1.0f);
  EXPECT_EQ(halfToFloat(floatToHalf(1.0f + 3 * 0x1p-11f)), 1.0f + 0x1p-9f);
  EXPECT_EQ(bfloat16ToFloat(floatToBFloat16(1.0f + 0x1p-8f)), 1.0f);
  EXPECT_EQ(bfloat16ToFloat(floatToBFloat16(1.0f + 3 * 0x1p-8f)), 1.0f + 0x1p-6f);
  EXPECT_TRUE(std::isnan(bfloat16ToFloat(floatToBFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(halfToFloat(floatToHalf(std::nanf("")))));
}

TEST(Codec, TopKKeepsExactlyTheKLargestMagnitudes) {
  for (float ratio : {0.001f, 0.01f, 0.1f, 0.5f, 1.0f}) {
    auto x = gaussian(100003, 5);
    auto y = roundTrip(params(program::CODEC_TOPK, ratio), x);
    int64_t k = topkCount(params(program::CODEC_TOPK, ratio), x.size());
    EXPECT_EQ(k, static_cast<int64_t>(std::ceil(double(ratio) * x.size())));
    // Reference: full sort of the magnitudes.
    std::vector<float> mags(x.size());
    for (size_t i = 0; i < x.size(); ++i)
      mags[i] = std::fabs(x[i]);
    std::sort(mags.begin(), mags.end(), std::greater<float>());
    float kth = mags[k - 1];
    int64_t kept = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (y[i] != 0.0f) {
        ++kept;
        ASSERT_EQ(y[i], x[i]) << "kept values are exact";
        ASSERT_GE(std::fabs(x[i]), kth);
      } else {
        ASSERT_LE(std::fabs(x[i]), kth) << "ratio " << ratio << " element " << i;
      }
    }
    EXPECT_EQ(kept, k) << "ratio " << ratio;
  }
}

namespace {
/// Checks that a top-k payload keeps exactly the k largest magnitudes (ties
/// to the lower index) against a full sort of (|x|, index).
void expectExactTopK(const std::vector<float> &x, float ratio) {
  auto p = params(program::CODEC_TOPK, ratio);
  auto y = roundTrip(p, x);
  int64_t k = topkCount(p, x.size());
  std::vector<uint32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0u);
  std::sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) {
    float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
    return fa > fb || (fa == fb && a < b);
  });
  std::vector<char> kept(x.size(), 0);
  for (int64_t j = 0; j < k; ++j)
    kept[order[j]] = 1;
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(y[i], kept[i] ? x[i] : 0.0f) << "ratio " << ratio << " element " << i;
}
} // namespace

TEST(Codec, TopKOnLargeInputsMatchesAFullSort) {
  // Above 2^18 elements the threshold comes from a sample and a candidate
  // pass; the result must still be the exact top-k.
  auto x = gaussian(1 << 20, 11);
  for (float ratio : {0.0001f, 0.01f, 0.1f})
    expectExactTopK(x, ratio);
  // Many ties at the threshold, spread over the tensor.
  std::vector<float> ties(1 << 19);
  for (size_t i = 0; i < ties.size(); ++i)
    ties[i] = float(int(i * 2654435761u % 7)) - 3.0f;
  expectExactTopK(ties, 0.2f);
  // A sample that sees only large values (the sampled positions hold 2, the
  // rest 1) overestimates the threshold: the full-selection fallback.
  std::vector<float> fooled(1 << 20, 1.0f);
  for (uint64_t j = 0; j < (1u << 14); ++j)
    fooled[(j * 0x9E3779B97F4A7C15ull) % fooled.size()] = 2.0f;
  expectExactTopK(fooled, 0.1f);
}

TEST(Codec, TopKTiesGoToLowerIndicesAndEachIndexEncodingIsChosen) {
  // All equal magnitudes: the first k indices are kept.
  std::vector<float> x(1000, 1.0f);
  auto y = roundTrip(params(program::CODEC_TOPK, 0.25f), x);
  for (int i = 0; i < 1000; ++i)
    ASSERT_EQ(y[i], i < 250 ? 1.0f : 0.0f);
  auto indexEncoding = [](const std::vector<float> &v, float ratio) {
    std::vector<uint8_t> payload;
    EXPECT_TRUE(encode(params(program::CODEC_TOPK, ratio), v.data(), v.size(),
                       payload).isOk());
    return static_cast<TopKIndexEncoding>(payload[2]);
  };
  auto g = gaussian(200000, 6);
  EXPECT_EQ(indexEncoding(g, 0.01f), TopKIndexEncoding::U16Gaps); // gaps ~100
  EXPECT_EQ(indexEncoding(g, 0.3f), TopKIndexEncoding::Bitmap);   // dense
  // Few elements spread far apart: gaps need escapes, u32 is smaller.
  std::vector<float> sparse(1 << 22, 0.0f);
  for (int i = 0; i < 8; ++i)
    sparse[i * (1 << 19) + 3] = float(i + 1);
  EXPECT_EQ(indexEncoding(sparse, 8.0f / sparse.size()), TopKIndexEncoding::U32);
  auto back = roundTrip(params(program::CODEC_TOPK, 8.0f / sparse.size()), sparse);
  EXPECT_EQ(back, sparse);
  // A gap that needs an escape word round-trips under U16Gaps too.
  std::vector<float> escaped(200000, 0.0f);
  for (int i = 0; i < 200000; i += 2)
    escaped[i] = i < 100 ? 1.0f : 0.0f;
  escaped[150000] = 5.0f;
  auto e = roundTrip(params(program::CODEC_TOPK, 51.0f / 200000), escaped);
  EXPECT_EQ(e, escaped);
}

TEST(Codec, TopKOnePercentIsAboutFiftyTimesSmaller) {
  auto x = gaussian(1 << 20, 7);
  size_t bytes;
  roundTrip(params(program::CODEC_TOPK, 0.01f), x, &bytes);
  double ratio = double(x.size() * 4) / bytes;
  EXPECT_GT(ratio, 55.0); // 4 B value + ~2 B gap per kept element: ~66x
  EXPECT_LT(ratio, 70.0);
}

TEST(Codec, DecodeAccumulates) {
  auto x = gaussian(777, 8);
  for (auto codec : {program::CODEC_NONE, program::CODEC_FP16, program::CODEC_INT8,
                     program::CODEC_TOPK}) {
    auto p = params(codec, 0.1f);
    std::vector<uint8_t> payload;
    ASSERT_TRUE(encode(p, x.data(), x.size(), payload).isOk());
    std::vector<float> once(x.size()), twice(x.size(), 1.0f);
    ASSERT_TRUE(decode(payload.data(), payload.size(), once.data(), once.size()).isOk());
    ASSERT_TRUE(decode(payload.data(), payload.size(), twice.data(), twice.size(), true).isOk());
    for (size_t i = 0; i < x.size(); ++i)
      ASSERT_EQ(twice[i], once[i] + 1.0f);
  }
}

TEST(Codec, MalformedPayloadsAreErrorsNotCrashes) {
  auto x = gaussian(1000, 9);
  std::vector<float> out(1000);
  for (auto codec : {program::CODEC_NONE, program::CODEC_FP16, program::CODEC_BF16,
                     program::CODEC_INT8, program::CODEC_INT4, program::CODEC_TOPK,
                     program::CODEC_TOPK_INT8, program::CODEC_TOPK_INT4}) {
    for (float ratio : {0.01f, 0.5f}) {
      std::vector<uint8_t> payload;
      ASSERT_TRUE(encode(params(codec, ratio, 64), x.data(), x.size(), payload).isOk());
      // Every truncation is rejected.
      for (size_t len = 0; len < payload.size(); len += 1 + len / 8) {
        Status s = decode(payload.data(), len, out.data(), out.size());
        ASSERT_FALSE(s.isOk()) << program::Codec_Name(codec) << " truncated to " << len;
        EXPECT_NE(s.getMessage().find("corrupt codec payload"), std::string::npos);
      }
      // Wrong destination size.
      EXPECT_FALSE(decode(payload.data(), payload.size(), out.data(), 999).isOk());
      // Random byte flips: never a crash; headers and indices are checked.
      std::mt19937 gen(codec * 31 + int(ratio * 100));
      for (int trial = 0; trial < 2000; ++trial) {
        std::vector<uint8_t> bad = payload;
        int flips = 1 + trial % 4;
        for (int f = 0; f < flips; ++f)
          bad[gen() % std::min<size_t>(bad.size(), trial % 2 ? 64 : bad.size())] ^=
              uint8_t(1u << (gen() % 8));
        (void)decode(bad.data(), bad.size(), out.data(), out.size());
      }
    }
  }
  std::vector<uint8_t> junk = {0xC5, 99, 0, 1, 0, 0, 0, 0, 0xE8, 3, 0, 0, 0, 0, 0, 0};
  Status s = decode(junk.data(), junk.size(), out.data(), out.size());
  EXPECT_NE(s.getMessage().find("unknown codec 99"), std::string::npos) << s.toString();
  junk[0] = 0;
  EXPECT_NE(decode(junk.data(), junk.size(), out.data(), out.size()).getMessage().find("magic"),
            std::string::npos);
}

// decodeSparse: the pairs a device scatters instead of parsing the index
// encodings. Scattered, they are decode()'s result bit for bit (every index
// encoding: ratios from 0.001 to 0.9, ties); they are rejected exactly where
// decode() rejects the payload (truncations, byte flips); other codecs are
// InvalidArgument.
TEST(Codec, DecodeSparseGivesThePairsOfDecode) {
  auto x = gaussian(4099, 12);
  for (size_t i = 100; i < 160; ++i)
    x[i] = i % 2 ? 2.5f : -2.5f;
  for (auto codec : {program::CODEC_TOPK, program::CODEC_TOPK_INT8, program::CODEC_TOPK_INT4})
    for (float ratio : {0.001f, 0.01f, 0.2f, 0.6f, 0.9f}) {
      std::vector<uint8_t> payload;
      ASSERT_TRUE(encode(params(codec, ratio, 64), x.data(), x.size(), payload).isOk());
      std::vector<float> dense(x.size(), 7.0f), scattered(x.size(), 0.0f);
      ASSERT_TRUE(decode(payload.data(), payload.size(), dense.data(), dense.size()).isOk());
      std::vector<uint32_t> idx;
      std::vector<float> vals;
      Status s = decodeSparse(payload.data(), payload.size(), x.size(), idx, vals);
      ASSERT_TRUE(s.isOk()) << s.toString();
      ASSERT_EQ(idx.size(), size_t(topkCount(params(codec, ratio), x.size())));
      ASSERT_EQ(vals.size(), idx.size());
      for (size_t j = 0; j < idx.size(); ++j) {
        ASSERT_TRUE(j == 0 || idx[j] > idx[j - 1]);
        scattered[idx[j]] += vals[j];
      }
      ASSERT_EQ(0, std::memcmp(dense.data(), scattered.data(), 4 * x.size()))
          << program::Codec_Name(codec) << " ratio " << ratio;
      std::mt19937 gen(int(ratio * 1000) + codec);
      for (int trial = 0; trial < 600; ++trial) {
        std::vector<uint8_t> bad = payload;
        size_t len = trial < 100 ? gen() % payload.size() : payload.size();
        if (trial >= 100)
          bad[gen() % bad.size()] ^= uint8_t(1u << (gen() % 8));
        bool dOk = decode(bad.data(), len, dense.data(), dense.size()).isOk();
        bool sOk = decodeSparse(bad.data(), len, x.size(), idx, vals).isOk();
        ASSERT_EQ(dOk, sOk) << program::Codec_Name(codec) << " trial " << trial;
      }
    }
  std::vector<uint8_t> int8;
  ASSERT_TRUE(encode(params(program::CODEC_INT8), x.data(), x.size(), int8).isOk());
  std::vector<uint32_t> idx;
  std::vector<float> vals;
  Status s = decodeSparse(int8.data(), int8.size(), x.size(), idx, vals);
  EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument);
  EXPECT_NE(s.getMessage().find("CODEC_INT8"), std::string::npos) << s.toString();
}

TEST(Codec, InvalidParamsNameTheField) {
  Status s = validateCodecParams(params(program::CODEC_TOPK, 0.0f), "steps[2].send.codec");
  EXPECT_EQ(s.getMessage(), "steps[2].send.codec.topk_ratio: 0.000000 is not in (0, 1]");
  EXPECT_FALSE(validateCodecParams(params(program::CODEC_TOPK, 1.5f), "c").isOk());
  EXPECT_FALSE(validateCodecParams(params(program::CODEC_INT8, 0, 1u << 25), "c").isOk());
  EXPECT_FALSE(validateCodecParams(params(static_cast<program::Codec>(42)), "c").isOk());
  EXPECT_TRUE(validateCodecParams(params(program::CODEC_INT4, 0, 32), "c").isOk());
}

TEST(Codec, ErrorFeedbackCarriesExactlyWhatWasNotSent) {
  const size_t n = 20000;
  for (auto codec : {program::CODEC_TOPK, program::CODEC_INT8, program::CODEC_INT4,
                     program::CODEC_FP16, program::CODEC_BF16, program::CODEC_TOPK_INT8,
                     program::CODEC_TOPK_INT4}) {
    auto p = params(codec, 0.01f, 128, /*feedback=*/true);
    ErrorFeedback ef;
    std::vector<double> inputs(n, 0.0), sent(n, 0.0);
    std::vector<uint8_t> payload;
    std::vector<float> decoded(n);
    for (int step = 0; step < 30; ++step) {
      auto x = gaussian(n, 100 + step);
      for (size_t i = 0; i < n; ++i)
        inputs[i] += x[i];
      ASSERT_TRUE(ef.encode(p, x.data(), n, payload).isOk());
      ASSERT_TRUE(decode(payload.data(), payload.size(), decoded.data(), n).isOk());
      for (size_t i = 0; i < n; ++i)
        sent[i] += decoded[i];
    }
    const auto &r = ef.getResidual();
    ASSERT_EQ(r.size(), n);
    double maxErr = 0, maxRes = 0;
    for (size_t i = 0; i < n; ++i) {
      maxErr = std::max(maxErr, std::fabs(sent[i] + r[i] - inputs[i]));
      maxRes = std::max(maxRes, double(std::fabs(r[i])));
    }
    // Float rounding of 30 steps of (x + r) and (sum - decoded).
    EXPECT_LT(maxErr, 1e-4) << program::Codec_Name(codec);
    if (codec == program::CODEC_TOPK)
      EXPECT_GT(maxRes, 1.0) << "top-k 1% leaves most of the signal in the residual";
  }
  // Without error feedback nothing is kept.
  ErrorFeedback none;
  std::vector<float> x = gaussian(100, 1);
  std::vector<uint8_t> payload;
  ASSERT_TRUE(none.encode(params(program::CODEC_INT8), x.data(), 100, payload).isOk());
  EXPECT_TRUE(none.getResidual().empty());
}

// Error feedback's one-pass encode of the dense codecs equals its steps
// taken apart (sum, encode, decode, subtract, 0 where not finite) bit for
// bit: payload, next residual and decoded values, in place too, on blocks
// holding zeros, subnormals, huge values, infinities and NaN.
TEST(Codec, EncodeWithResidualEqualsItsStepsTakenApart) {
  auto bits = [](const std::vector<float> &v) {
    std::vector<uint32_t> b(v.size());
    std::memcpy(b.data(), v.data(), 4 * v.size());
    return b;
  };
  for (int64_t n : {int64_t(1), int64_t(255), int64_t(257), int64_t(1001), int64_t(70001)}) {
    std::vector<float> x = gaussian(n, 7), r = gaussian(n, 8);
    for (int64_t i = 0; i < n; ++i)
      r[i] *= 0.01f;
    if (n > 300) { // special blocks
      for (int64_t i = 0; i < 32; ++i)
        x[i] = r[i] = 0.0f;
      x[40] = 1e-40f;
      r[41] = 3e38f;
      x[42] = 3e38f;
      x[300] = std::numeric_limits<float>::infinity();
      x[n - 1] = std::nanf("");
    }
    for (auto codec :
         {program::CODEC_FP16, program::CODEC_BF16, program::CODEC_INT8, program::CODEC_INT4})
      for (uint32_t block : {2u, 6u, 128u, 256u}) {
        SCOPED_TRACE(program::Codec_Name(codec) + " n " + std::to_string(n) + " block " +
                     std::to_string(block));
        auto p = params(codec, 0.0f, block, true);
        // The steps apart.
        std::vector<float> sum(n), want(n), wantDecoded(n);
        for (int64_t i = 0; i < n; ++i)
          sum[i] = x[i] + r[i];
        std::vector<uint8_t> wantPayload;
        ASSERT_TRUE(encode(p, sum.data(), n, wantPayload).isOk());
        ASSERT_TRUE(decode(wantPayload.data(), wantPayload.size(), wantDecoded.data(), n).isOk());
        for (int64_t i = 0; i < n; ++i) {
          float d = sum[i] - wantDecoded[i];
          want[i] = std::isfinite(d) ? d : 0.0f;
        }
        // One pass into new buffers, then in place.
        std::vector<float> next(n, -1.0f), decoded(n, -1.0f), inPlace = r;
        std::vector<uint8_t> payload, payload2;
        StatusOr<bool> fused =
            encodeWithResidual(p, x.data(), r.data(), next.data(), n, payload, decoded.data());
        ASSERT_TRUE(fused.isOk()) << fused.getStatus().toString();
        ASSERT_TRUE(*fused);
        EXPECT_EQ(payload, wantPayload);
        EXPECT_EQ(bits(next), bits(want));
        EXPECT_EQ(bits(decoded), bits(wantDecoded));
        ASSERT_TRUE(*encodeWithResidual(p, x.data(), inPlace.data(), inPlace.data(), n, payload2));
        EXPECT_EQ(payload2, wantPayload);
        EXPECT_EQ(bits(inPlace), bits(want));
      }
  }
  // Other codecs, and int4 with an odd block (a byte across two blocks):
  // not done in one pass, nothing written.
  std::vector<float> x(10, 1.0f), r(10, 0.0f);
  std::vector<uint8_t> payload;
  for (auto p :
       {params(program::CODEC_TOPK, 0.1f, 0, true), params(program::CODEC_INT2, 0, 0, true),
        params(program::CODEC_INT4, 0, 3, true), params(program::CODEC_NONE)}) {
    StatusOr<bool> fused = encodeWithResidual(p, x.data(), r.data(), r.data(), 10, payload);
    ASSERT_TRUE(fused.isOk());
    EXPECT_FALSE(*fused);
    EXPECT_TRUE(payload.empty());
  }
}

TEST(Codec, ErrorFeedbackRollsBackAnIterationAndFollowsTheScale) {
  // Loss scaling's use (strait-run, LossScale.cpp): an armed iteration's
  // encodes (two here) are undone by rollBack() bit for bit, sub-streams
  // included, and one made during the iteration returns to zero; an
  // iteration that goes ahead leaves the stream as an unarmed one does.
  const size_t n = 3000;
  auto p = params(program::CODEC_TOPK_INT8, 0.05f, 256, /*feedback=*/true);
  ErrorFeedback armed, plain;
  std::vector<uint8_t> a, b;
  for (int step = 0; step < 4; ++step) {
    auto x = gaussian(n, 70 + step);
    ASSERT_TRUE(armed.beginIteration().isOk());
    ASSERT_TRUE(armed.encode(p, x.data(), n, a).isOk());
    ASSERT_TRUE(armed.part(0).encode(p, x.data(), n, a).isOk());
    ASSERT_TRUE(plain.encode(p, x.data(), n, b).isOk());
    ASSERT_TRUE(plain.part(0).encode(p, x.data(), n, b).isOk());
    EXPECT_EQ(a, b);
  }
  ASSERT_EQ(armed.getResidual(), plain.getResidual());
  std::vector<float> before = armed.getResidual(), partBefore = armed.getPart(0)->getResidual();
  ASSERT_TRUE(armed.beginIteration().isOk());
  auto big = gaussian(n, 99);
  for (int twice = 0; twice < 2; ++twice) {
    ASSERT_TRUE(armed.encode(p, big.data(), n, a).isOk());
    ASSERT_TRUE(armed.part(0).encode(p, big.data(), n, a).isOk());
  }
  ASSERT_TRUE(armed.part(1).encode(p, big.data(), n, a).isOk()); // new in this iteration
  ASSERT_NE(armed.getResidual(), before);
  ASSERT_TRUE(armed.rollBack().isOk());
  EXPECT_EQ(armed.getResidual(), before);
  EXPECT_EQ(armed.getPart(0)->getResidual(), partBefore);
  EXPECT_TRUE(armed.getPart(1)->getResidual().empty());
  // Not encoded since beginIteration(): rollBack() keeps it.
  ASSERT_TRUE(armed.beginIteration().isOk());
  ASSERT_TRUE(armed.rollBack().isOk());
  EXPECT_EQ(armed.getResidual(), before);
  // A restored residual (a checkpoint's) is what an armed first encode keeps.
  ErrorFeedback resumed;
  resumed.setResidual(before);
  ASSERT_TRUE(resumed.beginIteration().isOk());
  ASSERT_TRUE(resumed.encode(p, big.data(), n, a).isOk());
  ASSERT_TRUE(resumed.rollBack().isOk());
  EXPECT_EQ(resumed.getResidual(), before);
  // A scale change multiplies every residual.
  ASSERT_TRUE(armed.scaleResidual(0.5f).isOk());
  for (size_t i = 0; i < n; ++i) {
    ASSERT_EQ(armed.getResidual()[i], before[i] * 0.5f) << i;
    ASSERT_EQ(armed.getPart(0)->getResidual()[i], partBefore[i] * 0.5f) << i;
  }
}

TEST(Codec, DecodedOutputIsThePayloadsDecodeAndLeavesTheStreamUnchanged) {
  // keep_decoded sends: with setDecodedOutput the stream also writes
  // decode(payload) (bit for bit, not sum - residual) and keeps the payload;
  // its payloads and residual are those of a stream without it.
  const size_t n = 5000;
  for (bool feedback : {true, false})
    for (auto codec : {program::CODEC_INT8, program::CODEC_INT4, program::CODEC_INT2,
                       program::CODEC_TOPK_INT8, program::CODEC_BF16}) {
      auto p = params(codec, 0.05f, 256, feedback);
      ErrorFeedback with, without;
      std::vector<uint8_t> a, b;
      std::vector<float> out(n), ref(n);
      for (int step = 0; step < 5; ++step) {
        auto x = gaussian(n, 40 + step);
        with.setDecodedOutput(out.data());
        ASSERT_TRUE(with.encode(p, x.data(), n, a).isOk());
        with.setDecodedOutput(nullptr);
        ASSERT_TRUE(without.encode(p, x.data(), n, b).isOk());
        ASSERT_EQ(a, b) << program::Codec_Name(codec);
        ASSERT_EQ(with.getLastPayload(), a);
        ASSERT_TRUE(decode(a.data(), a.size(), ref.data(), n).isOk());
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(out[i], ref[i]) << program::Codec_Name(codec) << " step " << step;
      }
      EXPECT_EQ(with.getResidual(), without.getResidual()) << program::Codec_Name(codec);
    }
}

// --- CodecLayout.h: the per-element code the device codecs run --------------
//
// lib/cuda/Codec.cu encodes element by element with the functions of
// CodecLayout.h (one CUDA block per scale block, one thread per code). The
// same computation, written here on the CPU in the kernels' order, must give
// rt::encode's payload byte for byte, and decodeElement rt::decode's floats.

namespace {

std::vector<uint8_t> layoutEncode(int codecNumber, const std::vector<float> &x, uint32_t block) {
  namespace cl = codec;
  int64_t n = static_cast<int64_t>(x.size());
  cl::FixedLayout l;
  EXPECT_TRUE(cl::fixedLayout(codecNumber, n, block, l));
  std::vector<uint8_t> out(l.bytes, 0xAB);
  bool quantized = codecNumber == 3 || codecNumber == 4;
  cl::writeHeader(out.data(), codecNumber, 0, quantized ? block : 0, n);
  if (codecNumber == 0) {
    std::memcpy(out.data() + l.data, x.data(), 4 * x.size());
  } else if (!quantized) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t h = codecNumber == 5 ? cl::floatToBFloat16(x[i]) : cl::floatToHalf(x[i]);
      out[l.data + 2 * i] = uint8_t(h);
      out[l.data + 2 * i + 1] = uint8_t(h >> 8);
    }
  } else {
    float qmax = codecNumber == 4 ? 7.0f : 127.0f;
    std::vector<float> scales(cl::numBlocks(n, block));
    for (size_t b = 0; b < scales.size(); ++b) {
      // As the kernel: strided partial maxima, then a tree.
      std::vector<float> part(256, 0.0f);
      bool nonFinite = false;
      for (int64_t i = b * block, t = 0; i < std::min<int64_t>(n, (b + 1) * int64_t(block)); ++i, ++t) {
        float a = std::fabs(x[i]);
        part[t % 256] = a > part[t % 256] ? a : part[t % 256];
        nonFinite |= cl::isNonFinite(x[i]);
      }
      for (int w = 128; w > 0; w /= 2)
        for (int t = 0; t < w; ++t)
          part[t] = part[t + w] > part[t] ? part[t + w] : part[t];
      scales[b] = cl::blockScale(part[0], nonFinite, qmax);
    }
    std::memcpy(out.data() + l.scales, scales.data(), 4 * scales.size());
    if (codecNumber == 3)
      for (int64_t i = 0; i < n; ++i)
        out[l.data + i] = uint8_t(cl::int8Code(x.data(), i, block, scales.data()));
    else
      for (int64_t j = 0; j < (n + 1) / 2; ++j)
        out[l.data + j] = cl::int4Byte(x.data(), n, j, block, scales.data());
  }
  return out;
}

/// Gaussian values with the hard cases: a zero block, a block with inf /
/// NaN, a block of subnormals (a subnormal scale), exact ties and halves.
std::vector<float> hardValues(size_t n, uint32_t seed) {
  std::vector<float> x = gaussian(n, seed);
  for (size_t i = 0; i < std::min<size_t>(n, 40); ++i)
    x[i] = 0.0f;
  if (n > 60) {
    x[45] = INFINITY;
    x[50] = NAN;
  }
  for (size_t i = 64; i < std::min<size_t>(n, 96); ++i)
    x[i] = 1e-39f * float(i - 70);
  for (size_t i = 96; i < std::min<size_t>(n, 128); ++i)
    x[i] = 0.5f * float(int(i) - 110); // halves: rounding ties
  return x;
}

} // namespace

TEST(CodecLayout, ElementCodesGiveTheHostPayloadByteForByte) {
  for (size_t n : {1u, 2u, 7u, 127u, 300u, 4099u})
    for (uint32_t block : {1u, 7u, 32u, 256u})
      for (program::Codec c : {program::CODEC_NONE, program::CODEC_FP16, program::CODEC_BF16,
                               program::CODEC_INT8, program::CODEC_INT4}) {
        auto x = hardValues(n, uint32_t(n + block));
        std::vector<uint8_t> host;
        ASSERT_TRUE(encode(params(c, 0.0f, block), x.data(), n, host).isOk());
        std::vector<uint8_t> layout = layoutEncode(c, x, block);
        ASSERT_EQ(host, layout) << program::Codec_Name(c) << " n " << n << " block " << block;
        std::vector<float> decoded(n);
        ASSERT_TRUE(decode(host.data(), host.size(), decoded.data(), n).isOk());
        for (size_t i = 0; i < n; ++i) {
          float e = codec::decodeElement(host.data(), c, n, block, i);
          ASSERT_EQ(codec::floatBits(e), codec::floatBits(decoded[i]))
              << program::Codec_Name(c) << " element " << i;
        }
      }
}

TEST(CodecLayout, SectionsMatchTheHostPayloads) {
  std::vector<float> x = gaussian(1000, 3);
  for (program::Codec c : {program::CODEC_NONE, program::CODEC_FP16, program::CODEC_INT8,
                           program::CODEC_INT4, program::CODEC_BF16}) {
    std::vector<uint8_t> host;
    ASSERT_TRUE(encode(params(c, 0.0f, 64), x.data(), x.size(), host).isOk());
    codec::FixedLayout l;
    ASSERT_TRUE(codec::fixedLayout(c, 1000, 64, l));
    EXPECT_EQ(l.bytes, host.size()) << program::Codec_Name(c);
  }
  codec::FixedLayout none;
  EXPECT_FALSE(codec::fixedLayout(program::CODEC_TOPK, 1000, 64, none));
  // Top-k: k after the header, then k values, then the indices.
  std::vector<uint8_t> host;
  ASSERT_TRUE(encode(params(program::CODEC_TOPK, 0.01f), x.data(), x.size(), host).isOk());
  uint64_t k = 0;
  std::memcpy(&k, host.data() + codec::kHeaderBytes, 8);
  EXPECT_EQ(k, 10u);
  float first;
  std::memcpy(&first, host.data() + codec::topkValuesOffset(), 4);
  uint32_t index = 0;
  if (host[2] == uint8_t(TopKIndexEncoding::U32))
    std::memcpy(&index, host.data() + codec::topkIndicesOffset(k), 4);
  else if (host[2] == uint8_t(TopKIndexEncoding::U16Gaps))
    index = uint32_t(host[codec::topkIndicesOffset(k)]) |
            uint32_t(host[codec::topkIndicesOffset(k) + 1]) << 8;
  else
    FAIL() << "1000 elements, k 10: u32 or gaps, not a bitmap";
  EXPECT_EQ(first, x[index]);
}

namespace {

/// The device top-k (Codec.cu) on the CPU: 4 radix passes over 8-bit digits
/// with the shared RadixSelect functions, the tie ranks in index order, the
/// index encoding by the host's size rule, the payload from the shared
/// layout.
std::vector<uint8_t> layoutEncodeTopK(const std::vector<float> &x, int64_t k) {
  namespace cl = codec;
  int64_t n = static_cast<int64_t>(x.size());
  std::vector<uint8_t> flags(n, 1);
  if (k < n) {
    cl::RadixSelect st;
    st.remaining = k;
    for (int shift = 24; shift >= 0; shift -= 8) {
      uint32_t hist[256] = {};
      for (float f : x)
        if (cl::radixMatches(st, cl::magnitudeKey(f)))
          ++hist[cl::radixDigit(cl::magnitudeKey(f), shift)];
      cl::radixPick(st, shift, hist);
    }
    uint64_t ties = 0;
    for (int64_t i = 0; i < n; ++i) {
      uint32_t key = cl::magnitudeKey(x[i]);
      flags[i] = cl::topkKeep(st, key, ties);
      ties += key == st.prefix;
    }
  }
  std::vector<uint32_t> idx;
  for (int64_t i = 0; i < n; ++i)
    if (flags[i])
      idx.push_back(uint32_t(i));
  EXPECT_EQ(int64_t(idx.size()), k);
  uint64_t words = 0;
  for (size_t j = 0; j < idx.size(); ++j)
    words += cl::gapWords(idx[j] - (j ? int64_t(idx[j - 1]) : -1) - 1);
  uint64_t sizes[3] = {4ull * k, 2 * words, (uint64_t(n) + 7) / 8};
  uint64_t indexBytes;
  int encoding = cl::smallestIndexEncoding(sizes, indexBytes);
  std::vector<uint8_t> out(cl::topkIndicesOffset(k) + indexBytes, 0);
  cl::writeHeader(out.data(), program::CODEC_TOPK, encoding, 0, n);
  uint64_t kk = k;
  std::memcpy(out.data() + cl::kHeaderBytes, &kk, 8);
  uint8_t *ip = out.data() + cl::topkIndicesOffset(k);
  uint64_t w = 0;
  for (size_t j = 0; j < idx.size(); ++j) {
    std::memcpy(out.data() + cl::topkValuesOffset() + 4 * j, &x[idx[j]], 4);
    if (encoding == 1)
      std::memcpy(ip + 4 * j, &idx[j], 4);
    else if (encoding == 3)
      ip[idx[j] / 8] |= uint8_t(1u << (idx[j] % 8));
    else
      for (uint64_t gap = idx[j] - (j ? int64_t(idx[j - 1]) : -1) - 1;; gap -= 0xFFFF) {
        uint16_t word = gap >= 0xFFFF ? 0xFFFF : uint16_t(gap);
        std::memcpy(ip + 2 * w++, &word, 2);
        if (gap < 0xFFFF)
          break;
      }
  }
  return out;
}

} // namespace

TEST(CodecLayout, RadixTopKSelectsTheHostIndices) {
  // Ties of magnitude (+-1.5, +-0 and 0), inf, NaN, and sizes on both sides
  // of the host's sampling threshold (16 * 2^14 elements).
  for (size_t n : {1u, 10u, 1000u, 70000u, 300000u})
    for (float ratio : {0.0001f, 0.01f, 0.35f, 0.9f}) {
      std::vector<float> x = gaussian(n, uint32_t(n) + 7);
      for (size_t i = 0; i < n; i += 3)
        x[i] = (i % 2 ? -1.5f : 1.5f);
      for (size_t i = 1; i < n; i += 17)
        x[i] = (i % 2 ? -0.0f : 0.0f);
      if (n > 100) {
        x[50] = -INFINITY;
        x[77] = NAN;
      }
      auto p = params(program::CODEC_TOPK, ratio);
      std::vector<uint8_t> host;
      ASSERT_TRUE(encode(p, x.data(), n, host).isOk());
      ASSERT_EQ(host, layoutEncodeTopK(x, topkCount(p, n))) << "n " << n << " ratio " << ratio
                                                            << " encoding " << int(host[2]);
    }
}

TEST(CodecLayout, ReceivedHeadersAreCheckedAgainstTheReceive) {
  std::vector<float> x = gaussian(100, 9);
  std::vector<uint8_t> p;
  ASSERT_TRUE(encode(params(program::CODEC_INT8, 0.0f, 32), x.data(), 100, p).isOk());
  EXPECT_EQ(codec::fixedHeaderMismatch(p.data(), program::CODEC_INT8, 100, 32), "");
  EXPECT_EQ(codec::fixedHeaderMismatch(p.data(), program::CODEC_INT8, 100, 64),
            "peer quantized in blocks of 32, this rank expects 64");
  EXPECT_EQ(codec::fixedHeaderMismatch(p.data(), program::CODEC_INT8, 99, 32),
            "corrupt codec payload: payload holds 100 elements, the destination 99");
  EXPECT_EQ(codec::fixedHeaderMismatch(p.data(), program::CODEC_INT4, 100, 32),
            "peer sent a payload of codec 3, this rank expects codec 4");
  ASSERT_TRUE(encode(params(program::CODEC_BF16), x.data(), 100, p).isOk());
  // The block size is not part of a bf16 payload.
  EXPECT_EQ(codec::fixedHeaderMismatch(p.data(), program::CODEC_BF16, 100, 256), "");
  p[0] = 0;
  EXPECT_EQ(codec::fixedHeaderMismatch(p.data(), program::CODEC_BF16, 100, 256),
            "corrupt codec payload: bad magic byte 0");
  p[0] = codec::kMagic;
  p[2] = 1;
  EXPECT_NE(codec::fixedHeaderMismatch(p.data(), program::CODEC_BF16, 100, 256)
                .find("index encoding"),
            std::string::npos);
}

// --- codec::halfToFloat / codec::floatToHalf against the F16C instructions --
// The one half <-> float converter of the runtime (the codecs, the CPU
// backend, the fused kernels, the CUDA interpreter) against the hardware's
// IEEE conversion with round-to-nearest-even. NaNs compare by NaN-ness and
// sign only: the codec writes the canonical quiet NaN, F16C keeps payload bits.
#if defined(__x86_64__) || defined(__i386__)

namespace {

__attribute__((target("f16c"))) float f16cHalfToFloat(uint16_t h) {
  return _cvtsh_ss(h);
}
__attribute__((target("f16c"))) uint16_t f16cFloatToHalf(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

uint32_t bitsOf(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
float floatOf(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
bool isHalfNaN(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }

/// Empty when codec::floatToHalf(x) equals the F16C result, else a message.
std::string floatToHalfMismatch(uint32_t x) {
  float f = floatOf(x);
  uint16_t got = codec::floatToHalf(f), want = f16cFloatToHalf(f);
  if (got == want || (isHalfNaN(got) && isHalfNaN(want) && (got & 0x8000) == (want & 0x8000)))
    return "";
  char buf[96];
  std::snprintf(buf, sizeof buf, "float bits 0x%08x: codec 0x%04x, F16C 0x%04x", x, got, want);
  return buf;
}

} // namespace

TEST(HalfConversion, HalfToFloatMatchesF16CForAllHalfPatterns) {
  if (!__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "this CPU has no F16C";
  int nans = 0;
  for (uint32_t h = 0; h < 65536; ++h) {
    float got = codec::halfToFloat(uint16_t(h)), want = f16cHalfToFloat(uint16_t(h));
    if (isHalfNaN(uint16_t(h))) {
      ++nans;
      ASSERT_TRUE(std::isnan(got)) << "half 0x" << std::hex << h;
      ASSERT_EQ(std::signbit(got), std::signbit(want)) << "half 0x" << std::hex << h;
      continue;
    }
    ASSERT_EQ(bitsOf(got), bitsOf(want)) << "half 0x" << std::hex << h;
  }
  EXPECT_EQ(nans, 2 * 1023);
  // Exact values the sweep above must have covered.
  EXPECT_EQ(codec::halfToFloat(0x0001), 0x1p-24f); // smallest subnormal
  EXPECT_EQ(codec::halfToFloat(0x7bff), 65504.0f); // largest finite
  EXPECT_EQ(bitsOf(codec::halfToFloat(0x8000)), 0x80000000u);
}

TEST(HalfConversion, FloatToHalfMatchesF16CAroundEveryHalfAndOnASweep) {
  if (!__builtin_cpu_supports("f16c"))
    GTEST_SKIP() << "this CPU has no F16C";
  std::string first;
  uint64_t bad = 0, checked = 0;
  auto check = [&](uint32_t x) {
    ++checked;
    std::string m = floatToHalfMismatch(x);
    if (!m.empty() && bad++ == 0)
      first = m;
  };
  // Every half value h: the float equal to it, the tie half-way to the next
  // half up, one float ulp either side of both (subnormals, the normal
  // boundary, 65504 -> 65520 overflow, both signs).
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (uint32_t sign : {0u, 0x80000000u}) {
      uint32_t lo = bitsOf(codec::halfToFloat(uint16_t(h))) & 0x7fffffffu;
      uint32_t hi = h + 1 == 0x7c00 ? bitsOf(65520.0f)
                                    : bitsOf(codec::halfToFloat(uint16_t(h + 1)));
      uint32_t tie = bitsOf(0.5f * (floatOf(lo) + floatOf(hi)));
      for (uint32_t x : {lo, lo + 1, tie - 1, tie, tie + 1})
        check(sign | x);
      if (lo != 0)
        check(sign | (lo - 1));
    }
  }
  // Every 7th float bit pattern (7 is odd, so the sweep meets every residue
  // of the 13 rounded-away mantissa bits in every exponent), plus infinities,
  // NaNs and float subnormals.
  for (uint64_t x = 0; x <= 0xffffffffull; x += 7)
    check(uint32_t(x));
  for (uint32_t x : {0x7f800000u, 0xff800000u, 0x7fc00000u, 0xffc00000u, 0x7f800001u,
                     0x7fffffffu, 0x00000001u, 0x807fffffu, 0x33000000u, 0x33000001u,
                     0xb3000000u, 0xb3000001u, 0x387fc000u, 0x387fe000u, 0x477fefffu,
                     0x477ff000u})
    check(x);
  EXPECT_EQ(bad, 0u) << "first of " << bad << " mismatches in " << checked << ": " << first;
  EXPECT_GT(checked, 600000000u);
}
#endif // x86
