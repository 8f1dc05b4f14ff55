//===- AdaptiveTopKCommTest.cpp - Top-k transfers whose k changes ---------===//
//
// Adaptive top-k (docs/runtime.md, "Adaptive top-k") changes k from one
// transfer of a value to the next. Over real Gloo ranks (loopback threads):
//  - a receiver decodes a stream of top-k payloads of varying k (1 value to
//    all of them, every index encoding) bit-exactly, through plain, sealed,
//    deferred and sealed deferred transfers, against a reference decode
//    written here from the payload layout, while the sender's error
//    feedback carries what each k dropped; with $STRAIT_TOPK_DUMP_DIR set
//    the payloads and received tensors are written there for
//    python/tests/test_adaptive_topk.py's numpy decode;
//  - the executor adapts the ratio of a send step with CodecParams.adapt
//    within its bounds, the receiver's values equal the decoded payloads,
//    setAdaptiveTopKDefault(false) keeps the compiled ratio, and bad bounds
//    or adapt on an all-reduce are load errors naming the step.
//
//===----------------------------------------------------------------------===//
#include "CommTestUtil.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/Executor.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <gtest/gtest.h>
#include <set>
#include <sys/stat.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

constexpr const char *kSecret =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";

/// Ratios of consecutive transfers: k = 2 (u32 indices: the first input has
/// two spikes 140000 apart, which u16 gaps would need 3 words each for),
/// u16 gaps, a bitmap, all values, and back down.
constexpr int64_t kNumel = 400000;
const float kRatios[] = {1.5f / kNumel, 0.001f, 0.02f, 0.2f, 1.0f, 0.05f, 0.004f, 0.5f};

/// A top-k payload decoded from the layout alone (CodecLayout.h): header,
/// u64 k, k f32 values, then u32 indices, u16 gaps or a bitmap.
std::vector<float> referenceDecode(const std::vector<uint8_t> &p, int64_t numel) {
  std::vector<float> out(numel, 0.0f);
  EXPECT_GE(p.size(), 24u);
  EXPECT_EQ(p[0], 0xC5);
  EXPECT_EQ(p[1], program::CODEC_TOPK);
  uint64_t n = 0, k = 0;
  std::memcpy(&n, p.data() + 8, 8);
  std::memcpy(&k, p.data() + 16, 8);
  EXPECT_EQ(n, static_cast<uint64_t>(numel));
  const uint8_t *values = p.data() + 24, *idx = values + 4 * k;
  std::vector<uint64_t> at;
  switch (p[2]) {
  case 1:
    for (uint64_t j = 0; j < k; ++j) {
      uint32_t i;
      std::memcpy(&i, idx + 4 * j, 4);
      at.push_back(i);
    }
    break;
  case 2: {
    int64_t pos = -1;
    uint64_t pending = 0;
    for (const uint8_t *w = idx; w < p.data() + p.size(); w += 2) {
      uint16_t g;
      std::memcpy(&g, w, 2);
      pending += g;
      if (g == 0xFFFF)
        continue;
      pos += static_cast<int64_t>(pending) + 1;
      pending = 0;
      at.push_back(pos);
    }
    break;
  }
  case 3:
    for (int64_t i = 0; i < numel; ++i)
      if (idx[i / 8] >> (i % 8) & 1)
        at.push_back(i);
    break;
  default:
    ADD_FAILURE() << "index encoding " << int(p[2]);
  }
  EXPECT_EQ(at.size(), k);
  for (uint64_t j = 0; j < std::min<uint64_t>(k, at.size()); ++j)
    std::memcpy(&out[at[j]], values + 4 * j, 4);
  return out;
}

void dump(const std::string &dir, const std::string &name, const void *data, size_t bytes) {
  std::ofstream(dir + "/" + name, std::ios::binary)
      .write(static_cast<const char *>(data), static_cast<std::streamsize>(bytes));
}

/// Sends the stream of kRatios from rank 0 to rank 1 (error feedback on)
/// and checks what rank 1 receives against the reference decode of the
/// payloads rank 0's feedback state produced.
void varyingK(bool sealed, bool deferred, const std::string &tag) {
  std::string dir = makeTempDir("strait-adaptive-topk");
  std::string secret;
  if (sealed) {
    secret = makeTempDir("strait-secret") + "/link.key";
    std::ofstream(secret) << kSecret << "\n";
    ::chmod(secret.c_str(), 0600);
  }
  const char *dumpDir = std::getenv("STRAIT_TOPK_DUMP_DIR");
  const int n = sizeof(kRatios) / sizeof(kRatios[0]);
  std::vector<std::vector<uint8_t>> payloads(n);
  std::vector<std::vector<float>> received(n);
  runGlooRanks(
      2,
      [&](int r) {
        GlooOptions o = fileStoreOptions(dir, r, 2);
        o.linkSecretFile = secret;
        return o;
      },
      [&](int rank, Communicator &comm) {
        program::CodecParams codec;
        codec.set_codec(program::CODEC_TOPK);
        codec.set_error_feedback(true);
        OwnedTensor t(program::DTYPE_F32, {kNumel});
        if (rank == 0) {
          ErrorFeedback state, shadow; // shadow: the same stream, encoded locally
          for (int i = 0; i < n; ++i) {
            std::vector<float> x = gaussian(kNumel, 77 + i);
            if (i == 0)
              x[140000] = x[280000] = 1e3f;
            std::copy(x.begin(), x.end(), t.as<float>());
            codec.set_topk_ratio(kRatios[i]);
            ASSERT_TRUE(shadow.encode(codec, x.data(), kNumel, payloads[i]).isOk());
            Status s = deferred ? comm.sendDeferred(t.tensor, 1, 7, codec, &state)
                                : comm.sendCoded(t.tensor, 1, 7, codec, &state);
            ASSERT_TRUE(s.isOk()) << s.toString();
            EXPECT_EQ(state.getLastPayloadBytes(), payloads[i].size()) << "transfer " << i;
          }
          ASSERT_TRUE(comm.flushSends().isOk());
          // Error feedback: what the stream dropped, whatever k was.
          EXPECT_EQ(state.getResidual(), shadow.getResidual());
        } else {
          for (int i = 0; i < n; ++i) {
            // The receiver's codec names any ratio: k comes from the payload.
            codec.set_topk_ratio(0.5f);
            Status s = deferred ? comm.recvDeferred(t.tensor, 0, 7, codec)
                                : comm.recvCoded(t.tensor, 0, 7, codec);
            ASSERT_TRUE(s.isOk()) << s.toString();
            received[i].assign(t.as<float>(), t.as<float>() + kNumel);
          }
        }
      });
  std::set<int> encodings;
  for (int i = 0; i < n; ++i) {
    ASSERT_FALSE(payloads[i].empty());
    encodings.insert(payloads[i][2]);
    uint64_t k = 0;
    std::memcpy(&k, payloads[i].data() + 16, 8);
    EXPECT_EQ(k, static_cast<uint64_t>(std::max<double>(1, std::ceil(double(kRatios[i]) * kNumel))));
    std::vector<float> want = referenceDecode(payloads[i], kNumel);
    ASSERT_EQ(received[i].size(), want.size());
    EXPECT_EQ(std::memcmp(received[i].data(), want.data(), 4 * want.size()), 0)
        << tag << ": transfer " << i << " (k = " << k << ") differs from the reference";
    if (dumpDir) {
      std::string base = tag + "." + std::to_string(i);
      dump(dumpDir, base + ".payload", payloads[i].data(), payloads[i].size());
      dump(dumpDir, base + ".received", received[i].data(), 4 * received[i].size());
    }
  }
  EXPECT_EQ(encodings, (std::set<int>{1, 2, 3})) << "every index encoding crossed the link";
}

TEST(AdaptiveTopKComm, ReceiverDecodesAnyKPlain) { varyingK(false, false, "plain"); }
TEST(AdaptiveTopKComm, ReceiverDecodesAnyKSealed) { varyingK(true, false, "sealed"); }
TEST(AdaptiveTopKComm, ReceiverDecodesAnyKDeferred) { varyingK(false, true, "deferred"); }
TEST(AdaptiveTopKComm, ReceiverDecodesAnyKSealedDeferred) {
  varyingK(true, true, "sealed-deferred");
}

/// Rank 0 sends x to rank 1 with an adaptive top-k codec; rank 1 writes
/// what it received to an output.
program::Program adaptiveProgram(int rank, float ratio, float lo, float hi, bool allReduce) {
  ProgramBuilder b(rank, 2);
  uint32_t x = b.addValue("x", program::DTYPE_F32, {256, 64}, program::ROLE_INPUT);
  uint32_t y = b.addValue("y", program::DTYPE_F32, {256, 64}, program::ROLE_OUTPUT);
  program::CodecParams codec;
  codec.set_codec(program::CODEC_TOPK);
  codec.set_topk_ratio(ratio);
  codec.set_error_feedback(true);
  codec.set_adapt(true);
  codec.set_ratio_min(lo);
  codec.set_ratio_max(hi);
  if (allReduce) {
    auto *ar = b.get().add_steps()->mutable_all_reduce();
    ar->add_value_ids(x);
    ar->set_channel(3);
    *ar->mutable_codec() = codec;
  } else if (rank == 0) {
    auto *send = b.get().add_steps()->mutable_send();
    send->set_value_id(x);
    send->set_peer(1);
    send->set_channel(3);
    *send->mutable_codec() = codec;
  } else {
    auto *recv = b.get().add_steps()->mutable_recv();
    recv->set_value_id(y);
    recv->set_peer(0);
    recv->set_channel(3);
    recv->mutable_codec()->set_codec(program::CODEC_TOPK);
    recv->mutable_codec()->set_topk_ratio(ratio);
  }
  return b.get();
}

TEST(AdaptiveTopKComm, ExecutorAdaptsWithinTheBoundsAndCanBeTurnedOff) {
  for (bool on : {true, false}) {
    Executor::setAdaptiveTopKDefault(on);
    std::string dir = makeTempDir("strait-adaptive-exec");
    runGlooRanks(2, [&](int r) { return fileStoreOptions(dir, r, 2); },
                 [&](int rank, Communicator &comm) {
                   BackendRegistry reg;
                   registerCpuBackend(reg);
                   auto exec = Executor::create(adaptiveProgram(rank, 0.05f, 0.01f, 0.2f, false),
                                                reg, &comm);
                   ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
                   for (int it = 0; it < 12; ++it) {
                     Tensor x = *(*exec)->getValueByName("x");
                     std::vector<float> v = gaussian(x.numel(), 5 + it);
                     std::copy(v.begin(), v.end(), x.as<float>());
                     Status s = (*exec)->run();
                     ASSERT_TRUE(s.isOk()) << s.toString();
                     if (rank == 0) {
                       std::vector<Executor::AdaptiveLink> links = (*exec)->getAdaptiveLinks();
                       ASSERT_EQ(links.size(), on ? 1u : 0u);
                       if (on) {
                         EXPECT_EQ(links[0].peer, 1);
                         EXPECT_EQ(links[0].channel, 3u);
                         EXPECT_GE(links[0].ratio, 0.01f * 0.9999);
                         EXPECT_LE(links[0].ratio, 0.2f * 1.0001);
                       }
                     }
                   }
                   if (rank == 1)
                     EXPECT_TRUE((*exec)->getAdaptiveLinks().empty());
                 });
  }
  Executor::setAdaptiveTopKDefault(true);
}

TEST(AdaptiveTopKComm, ReceivedValuesAreTheDecodedPayloadsAtTheAdaptedRatios) {
  // Rank 0 records the ratio of each transfer; rank 1's outputs must be the
  // reference decode of a local stream encoded at those ratios.
  std::string dir = makeTempDir("strait-adaptive-values");
  const int iterations = 10;
  std::vector<double> ratios;
  std::vector<std::vector<float>> got;
  runGlooRanks(2, [&](int r) { return fileStoreOptions(dir, r, 2); },
               [&](int rank, Communicator &comm) {
                 BackendRegistry reg;
                 registerCpuBackend(reg);
                 auto exec = Executor::create(adaptiveProgram(rank, 0.1f, 0.001f, 0.1f, false),
                                              reg, &comm);
                 ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
                 (*exec)->setOverlapCommunication(false);
                 for (int it = 0; it < iterations; ++it) {
                   if (rank == 0) {
                     Tensor x = *(*exec)->getValueByName("x");
                     std::vector<float> v = gaussian(x.numel(), 50 + it);
                     std::copy(v.begin(), v.end(), x.as<float>());
                     ratios.push_back((*exec)->getAdaptiveLinks().at(0).ratio);
                   }
                   Status s = (*exec)->run();
                   ASSERT_TRUE(s.isOk()) << s.toString();
                   if (rank == 1) {
                     Tensor y = *(*exec)->getValueByName("y");
                     got.emplace_back(y.as<float>(), y.as<float>() + y.numel());
                   }
                 }
               });
  ASSERT_EQ(ratios.size(), size_t(iterations));
  ASSERT_EQ(got.size(), size_t(iterations));
  ErrorFeedback shadow;
  program::CodecParams codec;
  codec.set_codec(program::CODEC_TOPK);
  codec.set_error_feedback(true);
  for (int it = 0; it < iterations; ++it) {
    std::vector<float> v = gaussian(256 * 64, 50 + it);
    codec.set_topk_ratio(static_cast<float>(ratios[it]));
    std::vector<uint8_t> payload;
    ASSERT_TRUE(shadow.encode(codec, v.data(), v.size(), payload).isOk());
    std::vector<float> want = referenceDecode(payload, v.size());
    EXPECT_EQ(std::memcmp(got[it].data(), want.data(), 4 * want.size()), 0)
        << "iteration " << it << " at ratio " << ratios[it];
  }
}

TEST(AdaptiveTopKComm, BadBoundsAndAllReduceAdaptAreLoadErrors) {
  BackendRegistry reg;
  registerCpuBackend(reg);
  struct Case {
    float ratio, lo, hi;
    bool allReduce;
    const char *message;
  } cases[] = {
      {0.05f, 0.1f, 0.2f, false, "steps[0].send.codec: adaptive top-k needs 0 < ratio_min"},
      {0.05f, 0.0f, 0.2f, false, "steps[0].send.codec: adaptive top-k needs 0 < ratio_min"},
      {0.05f, 0.01f, 1.5f, false, "ratio_max 1.5"},
      {0.05f, 0.01f, 0.2f, true, "steps[0].all_reduce.codec.adapt: an all-reduce never adapts"},
  };
  for (const Case &c : cases) {
    std::string dir = makeTempDir("strait-adaptive-bad");
    runGlooRanks(2, [&](int r) { return fileStoreOptions(dir, r, 2); },
                 [&](int rank, Communicator &comm) {
                   if (rank != 0 && !c.allReduce)
                     return;
                   auto exec = Executor::create(
                       adaptiveProgram(rank, c.ratio, c.lo, c.hi, c.allReduce), reg, &comm);
                   ASSERT_FALSE(exec.isOk());
                   EXPECT_NE(exec.getStatus().toString().find(c.message), std::string::npos)
                       << exec.getStatus().toString();
                 });
  }
  // adapt on a codec other than top-k.
  program::CodecParams int8;
  int8.set_codec(program::CODEC_INT8);
  int8.set_adapt(true);
  Status s = validateCodecParams(int8, "steps[2].send.codec");
  EXPECT_NE(s.toString().find("steps[2].send.codec.adapt: only a top-k codec adapts"),
            std::string::npos)
      << s.toString();
}

} // namespace
