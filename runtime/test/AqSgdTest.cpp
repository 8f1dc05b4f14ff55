//===- AqSgdTest.cpp - INT2/INT3 codecs and the AQ-SGD per-sample state ---===//
//
// INT2 / INT3 against a per-element reference computed here (the scale of
// least squared error per block, codes of the full two's-complement range,
// round half to even, packed LSB first), and against the max-|x| scale;
// AQ-SGD: a sender's and a receiver's AqSgdState over several epochs of
// drifting activations, against a reference of the update written here
// (delta = a - m, reference quantization, m = f16(m + Q(delta))): both
// states stay bit-identical, the receiver's value is m + Q(delta), the first
// sight of a sample goes int8, repeats at the codec's bits; bad inputs are
// errors naming the stream.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/AqSgd.h"
#include "strait/runtime/Codec.h"

#include <cmath>
#include <gtest/gtest.h>
#include <random>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

/// The reference quantizer of INT8 / INT4: per block scale = max|x| / qmax,
/// codes round-half-even(x / scale) clamped to [-qmax, qmax].
/// INT2 / INT3 (`fullRange`): codes clamped to [-2^(bits-1), qmax] and, per
/// block, the scale of the least squared error (in double) among
/// +-(max|x| / qmax) j / 20, j = 20..10 (the first on a tie; all codes zero
/// unless one beats that). Value = code * scale.
std::vector<float> referenceQuantize(const std::vector<float> &x, int bits, uint32_t block) {
  bool fullRange = bits <= 3;
  float qmax = static_cast<float>((1 << (bits - 1)) - 1);
  float qmin = fullRange ? -qmax - 1 : -qmax;
  auto code = [&](float v, float scale) {
    return std::nearbyint(std::min(qmax, std::max(qmin, v * (1.0f / scale))));
  };
  std::vector<float> y(x.size());
  for (size_t lo = 0; lo < x.size(); lo += block) {
    size_t hi = std::min(x.size(), lo + block);
    float m = 0;
    for (size_t i = lo; i < hi; ++i)
      m = std::max(m, std::fabs(x[i]));
    float scale = m / qmax;
    if (fullRange) {
      double bestErr = 0;
      for (size_t i = lo; i < hi; ++i)
        bestErr += static_cast<double>(x[i]) * x[i];
      scale = 0;
      for (int j = 20; j >= 10; --j)
        for (float sign : {1.0f, -1.0f}) {
          float s = sign * (m / qmax) * (static_cast<float>(j) / 20);
          if (s == 0)
            continue;
          double err = 0;
          for (size_t i = lo; i < hi; ++i) {
            double d = static_cast<double>(code(x[i], s) * s) - x[i];
            err += d * d;
          }
          if (err < bestErr)
            bestErr = err, scale = s;
        }
    }
    for (size_t i = lo; i < hi; ++i)
      y[i] = scale != 0 ? code(x[i], scale) * scale : 0.0f;
  }
  return y;
}

program::CodecParams params(program::Codec codec, uint32_t block = 0) {
  program::CodecParams p;
  p.set_codec(codec);
  p.set_block_size(block);
  return p;
}

} // namespace

TEST(IntBits, MatchesTheReferenceAndItsSize) {
  for (int bits : {2, 3})
    for (uint32_t block : {1u, 5u, 64u, 256u})
      for (size_t n : {1u, 7u, 1000u, 4099u}) {
        auto x = gaussian(n, bits * 100 + block);
        if (n > 3)
          x[3] = 0.0f;
        program::CodecParams p =
            params(bits == 2 ? program::CODEC_INT2 : program::CODEC_INT3, block);
        std::vector<uint8_t> payload;
        ASSERT_TRUE(encode(p, x.data(), n, payload).isOk());
        size_t blocks = (n + block - 1) / block;
        EXPECT_EQ(payload.size(), kCodecHeaderBytes + 4 * blocks + (n * bits + 7) / 8);
        std::vector<float> y(n, 5.0f);
        ASSERT_TRUE(decode(payload.data(), payload.size(), y.data(), n).isOk());
        std::vector<float> want = referenceQuantize(x, bits, block);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(y[i], want[i]) << "int" << bits << " block " << block << " n " << n
                                   << " element " << i;
        // accumulate adds
        std::vector<float> z(n, 1.0f);
        ASSERT_TRUE(decode(payload.data(), payload.size(), z.data(), n, true).isOk());
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(z[i], 1.0f + want[i]);
      }
}

// The least-squares scale and the full code range against the max-|x| scale
// of symmetric codes (the quantizer before): never a worse block, and less
// squared error in total on Gaussian and heavy-tailed (Student t, 3 degrees
// of freedom) data.
TEST(IntBits, BeatsTheMaxAbsScale) {
  std::mt19937 rng(3);
  std::student_t_distribution<float> t3(3.0f);
  std::vector<float> heavy(4096);
  for (float &v : heavy)
    v = t3(rng);
  for (const auto &x : {gaussian(4096, 11), heavy})
    for (int bits : {2, 3}) {
      std::vector<uint8_t> payload;
      program::CodecParams p = params(bits == 2 ? program::CODEC_INT2 : program::CODEC_INT3, 256);
      ASSERT_TRUE(encode(p, x.data(), x.size(), payload).isOk());
      std::vector<float> y(x.size());
      ASSERT_TRUE(decode(payload.data(), payload.size(), y.data(), y.size()).isOk());
      float qmax = static_cast<float>((1 << (bits - 1)) - 1);
      double total = 0, totalOld = 0;
      for (size_t lo = 0; lo < x.size(); lo += 256) {
        float m = 0;
        for (size_t i = lo; i < lo + 256; ++i)
          m = std::max(m, std::fabs(x[i]));
        double err = 0, errOld = 0;
        for (size_t i = lo; i < lo + 256; ++i) {
          double old = std::nearbyint(std::min(qmax, std::max(-qmax, x[i] / (m / qmax)))) *
                       (m / qmax);
          err += (y[i] - x[i]) * (y[i] - x[i]);
          errOld += (old - x[i]) * (old - x[i]);
        }
        EXPECT_LE(err, errOld * (1 + 1e-5)) << "int" << bits << " block at " << lo;
        total += err, totalOld += errOld;
      }
      std::printf("int%d: squared error %.4f of the max-|x| scale's\n", bits, total / totalOld);
      EXPECT_LT(total, (bits == 2 ? 0.7 : 0.6) * totalOld); // measured 0.30-0.62, 0.45-0.46
    }
}

TEST(IntBits, TruncatedPayloadIsAnError) {
  auto x = gaussian(300, 1);
  std::vector<uint8_t> payload;
  ASSERT_TRUE(encode(params(program::CODEC_INT3), x.data(), x.size(), payload).isOk());
  std::vector<float> y(x.size());
  Status s = decode(payload.data(), payload.size() - 1, y.data(), y.size());
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(s.getMessage().find("int3"), std::string::npos) << s.getMessage();
}

TEST(AqSgd, EncodeRefusesTheDeltaCodecs) {
  auto x = gaussian(100, 1);
  std::vector<uint8_t> payload;
  Status s = encode(params(program::CODEC_AQSGD_INT2), x.data(), x.size(), payload);
  EXPECT_FALSE(s.isOk());
  program::CodecParams ef = params(program::CODEC_AQSGD_INT2);
  ef.set_error_feedback(true);
  EXPECT_FALSE(validateCodecParams(ef, "send.codec").isOk());
}

namespace {

/// One transfer through a sender and a receiver state, as the executor
/// does it (the transport: encode with the wire codec, decode at the peer).
void transfer(AqSgdState &tx, AqSgdState &rx, const std::vector<uint64_t> &samples,
              const std::vector<float> &a, const program::CodecParams &p,
              std::vector<float> &received, program::Codec &wireCodec, size_t &bytes) {
  Shape shape{static_cast<int64_t>(a.size())};
  Tensor at{program::DTYPE_F32, shape, const_cast<float *>(a.data())};
  std::vector<float> delta;
  program::CodecParams wire, rwire;
  DeltaStreamKey out{true, 1, 0}, in{false, 0, 0};
  Status s = tx.prepareSend(out, samples.data(), samples.size(), at, p, delta, wire);
  ASSERT_TRUE(s.isOk()) << s.toString();
  s = rx.prepareRecv(in, samples.data(), samples.size(), a.size(), p, rwire);
  ASSERT_TRUE(s.isOk()) << s.toString();
  ASSERT_EQ(wire.codec(), rwire.codec());
  std::vector<uint8_t> payload;
  ASSERT_TRUE(encode(wire, delta.data(), delta.size(), payload).isOk());
  received.assign(a.size(), 0.0f);
  ASSERT_TRUE(decode(payload.data(), payload.size(), received.data(), received.size()).isOk());
  Tensor rt{program::DTYPE_F32, shape, received.data()};
  s = rx.finishRecv(in, samples.data(), samples.size(), rt);
  ASSERT_TRUE(s.isOk()) << s.toString();
  wireCodec = wire.codec();
  bytes = payload.size();
}

float f16(float v) { return halfToFloat(floatToHalf(v)); }

} // namespace

TEST(AqSgd, BothEndsStayBitIdenticalAndMatchTheReference) {
  const uint64_t samples = 12, row = 96, mb = 3;
  for (auto [codec, bits] : {std::pair{program::CODEC_AQSGD_INT2, 2},
                             std::pair{program::CODEC_AQSGD_INT3, 3},
                             std::pair{program::CODEC_AQSGD_INT4, 4}}) {
    AqSgdState tx(samples, 1 << 20), rx(samples, 1 << 20);
    program::CodecParams p = params(codec, 32);
    std::vector<std::vector<float>> base(samples), ref(samples, std::vector<float>(row, 0.0f));
    std::vector<bool> seen(samples, false);
    for (uint64_t x = 0; x < samples; ++x)
      base[x] = gaussian(row, 7 + x);
    std::mt19937 rng(5);
    double firstErr = 0, lastErr = 0;
    for (int epoch = 0; epoch < 6; ++epoch)
      for (uint64_t step = 0; step < samples / mb; ++step) {
        // A micro-batch of mb samples (one repeated in the last step).
        std::vector<uint64_t> ids;
        for (uint64_t i = 0; i < mb; ++i)
          ids.push_back((step * mb + i + epoch) % samples);
        if (step == samples / mb - 1)
          ids[2] = ids[0];
        // Activations drift slowly between epochs (training converging).
        std::vector<float> a(mb * row);
        std::normal_distribution<float> noise(0.0f, 0.02f / (1 + epoch));
        for (uint64_t i = 0; i < mb; ++i)
          for (uint64_t j = 0; j < row; ++j)
            a[i * row + j] = base[ids[i]][j] + noise(rng);
        std::vector<float> got;
        program::Codec wireCodec;
        size_t bytes = 0;
        transfer(tx, rx, ids, a, p, got, wireCodec, bytes);
        if (HasFatalFailure())
          return;
        // The reference update (all rows read m before any row writes it).
        bool fresh = false;
        for (uint64_t id : ids)
          fresh |= !seen[id];
        int wantBits = fresh ? 8 : bits;
        EXPECT_EQ(wireCodec, fresh ? program::CODEC_INT8
                                   : bits == 2   ? program::CODEC_INT2
                                     : bits == 3 ? program::CODEC_INT3
                                                 : program::CODEC_INT4);
        std::vector<float> delta(a.size()), mOld(a.size());
        for (uint64_t i = 0; i < mb; ++i)
          for (uint64_t j = 0; j < row; ++j) {
            mOld[i * row + j] = ref[ids[i]][j];
            delta[i * row + j] = a[i * row + j] - ref[ids[i]][j];
          }
        std::vector<float> q = referenceQuantize(delta, wantBits, 32);
        for (uint64_t i = 0; i < mb; ++i) {
          for (uint64_t j = 0; j < row; ++j) {
            float v = mOld[i * row + j] + q[i * row + j];
            ASSERT_EQ(got[i * row + j], v) << "epoch " << epoch << " row " << i << " el " << j;
            ref[ids[i]][j] = f16(v);
          }
          seen[ids[i]] = true;
        }
        double err = 0;
        for (size_t i = 0; i < a.size(); ++i)
          err = std::max(err, static_cast<double>(std::fabs(a[i] - got[i])));
        if (epoch == 0 && step == 0)
          firstErr = err;
        lastErr = err;
      }
    // Both ends' state, bit for bit, and the reference's.
    const auto &ts = tx.getStreams().begin()->second, &rs = rx.getStreams().begin()->second;
    ASSERT_EQ(ts.m, rs.m);
    ASSERT_EQ(ts.seen, rs.seen);
    for (uint64_t x = 0; x < samples; ++x)
      for (uint64_t j = 0; j < row; ++j)
        ASSERT_EQ(halfToFloat(ts.m[x * row + j]), ref[x][j]);
    // The reconstruction converges as the activations settle.
    EXPECT_LT(lastErr, 0.2) << "int" << bits << " first " << firstErr;
  }
}

TEST(AqSgd, BadStreamsAreErrorsNamingThem) {
  AqSgdState s(4, 1000);
  program::CodecParams p = params(program::CODEC_AQSGD_INT2);
  std::vector<float> a(10, 1.0f), delta;
  Tensor t{program::DTYPE_F32, {10}, a.data()};
  program::CodecParams wire;
  std::vector<uint64_t> two{0, 1}, three{0, 1, 2}, far{0, 9};
  Status st = s.prepareSend({true, 1, 3}, three.data(), 3, t, p, delta, wire);
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("rank 1 on channel 3"), std::string::npos) << st.getMessage();
  st = s.prepareSend({true, 1, 3}, far.data(), 2, t, p, delta, wire);
  EXPECT_NE(st.getMessage().find("sample 9"), std::string::npos) << st.getMessage();
  // 4 samples x 500 elements in f16 do not fit 1000 bytes.
  std::vector<float> big(1000, 1.0f);
  Tensor b{program::DTYPE_F32, {1000}, big.data()};
  st = s.prepareSend({true, 1, 3}, two.data(), 2, b, p, delta, wire);
  EXPECT_FALSE(st.isOk());
  EXPECT_NE(st.getMessage().find("4004 bytes"), std::string::npos) << st.getMessage();
  EXPECT_TRUE(s.prepareSend({true, 1, 3}, two.data(), 2, t, p, delta, wire).isOk());
  std::vector<float> odd(12, 1.0f);
  Tensor o{program::DTYPE_F32, {12}, odd.data()};
  st = s.prepareSend({true, 1, 3}, two.data(), 2, o, p, delta, wire);
  EXPECT_NE(st.getMessage().find("earlier transfers had 5"), std::string::npos)
      << st.getMessage();
}
