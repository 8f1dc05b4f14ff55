//===- CommCodecTest.cpp - Compressed and hierarchical transfers ----------===//
//
// Ranks on loopback threads (file rendezvous, bounded timeouts), as in
// CommTest.cpp: codec'd send/recv and all-reduce against the codec applied
// locally (bitwise), byte counters at the transport, hierarchical ==
// flat all-reduce for equal and unequal islands of 4 and 6 ranks, and the
// executor: codecs, islands, error feedback, and overlapped == sequential.
//
//===----------------------------------------------------------------------===//
#include "CommTestUtil.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/Communicator.h"

#include <chrono>
#include <cmath>
#include <gtest/gtest.h>
#include <mutex>
#include <random>
#include <thread>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;
using namespace std::chrono_literals;

namespace {

std::string makeStoreDir() { return makeTempDir("strait-codec"); }

void runRanks(int world, const std::function<void(int, Communicator &)> &body) {
  std::string dir = makeStoreDir();
  runGlooRanks(world, [&](int r) { return fileStoreOptions(dir, r, world); }, body);
}

program::CodecParams codecOf(program::Codec c, float ratio = 0.01f, bool ef = false) {
  program::CodecParams p;
  p.set_codec(c);
  p.set_topk_ratio(ratio);
  p.set_error_feedback(ef);
  return p;
}

std::vector<float> codecRoundTrip(const program::CodecParams &p, const std::vector<float> &x) {
  std::vector<uint8_t> payload;
  EXPECT_TRUE(encode(p, x.data(), x.size(), payload).isOk());
  std::vector<float> y(x.size());
  EXPECT_TRUE(decode(payload.data(), payload.size(), y.data(), y.size()).isOk());
  return y;
}

uint64_t sum(const std::map<int, uint64_t> &m) {
  uint64_t s = 0;
  for (const auto &kv : m)
    s += kv.second;
  return s;
}

const program::Codec kLossy[] = {program::CODEC_TOPK,      program::CODEC_INT8,
                                 program::CODEC_INT4,      program::CODEC_FP16,
                                 program::CODEC_BF16,      program::CODEC_TOPK_INT8,
                                 program::CODEC_TOPK_INT4};

} // namespace

TEST(CommCodec, SendRecvDecodesWhatTheCodecKeepsAndShrinksTheWire) {
  const int n = 1 << 20;
  runRanks(2, [&](int rank, Communicator &comm) {
    auto x = gaussian(n, 42);
    OwnedTensor t(program::DTYPE_F32, {n});
    comm.takeTraffic();
    // Uncompressed first: the baseline of the ratios.
    std::map<program::Codec, double> wire;
    for (program::Codec c : {program::CODEC_NONE, kLossy[0], kLossy[1], kLossy[2],
                             kLossy[3], kLossy[4], kLossy[5], kLossy[6]}) {
      auto p = codecOf(c);
      if (rank == 0) {
        std::copy(x.begin(), x.end(), t.as<float>());
        Status s = comm.sendCoded(t.tensor, 1, 3, p, nullptr);
        ASSERT_TRUE(s.isOk()) << s.toString();
        TrafficCounters tc = comm.takeTraffic();
        ASSERT_TRUE(tc.measured);
        wire[c] = double(tc.sent[1]);
        EXPECT_EQ(tc.sent.size(), 1u);
      } else {
        Status s = comm.recvCoded(t.tensor, 0, 3, p);
        ASSERT_TRUE(s.isOk()) << s.toString();
        auto expect = c == program::CODEC_NONE ? x : codecRoundTrip(p, x);
        ASSERT_EQ(0, std::memcmp(expect.data(), t.as<float>(), 4ull * n))
            << program::Codec_Name(c);
        comm.takeTraffic();
      }
    }
    if (rank == 0) {
      double raw = wire[program::CODEC_NONE];
      EXPECT_EQ(raw, 16.0 + 4.0 * n); // message header + f32 payload
      EXPECT_NEAR(raw / wire[program::CODEC_INT8], 4.0, 0.07);
      EXPECT_NEAR(raw / wire[program::CODEC_INT4], 8.0, 0.3);
      EXPECT_NEAR(raw / wire[program::CODEC_FP16], 2.0, 0.01);
      EXPECT_NEAR(raw / wire[program::CODEC_BF16], 2.0, 0.01);
      EXPECT_GT(raw / wire[program::CODEC_TOPK], 50.0);
      // Top-k 1% with int8 / int4 values: ~2.1 / ~1.6 bytes per kept value.
      EXPECT_GT(raw / wire[program::CODEC_TOPK_INT8], 180.0);
      EXPECT_GT(raw / wire[program::CODEC_TOPK_INT4], 235.0);
      std::printf("wire shrink vs f32: int8 %.2fx int4 %.2fx fp16 %.2fx topk1%% %.1fx\n",
                  raw / wire[program::CODEC_INT8], raw / wire[program::CODEC_INT4],
                  raw / wire[program::CODEC_FP16], raw / wire[program::CODEC_TOPK]);
    }
  });
}

TEST(CommCodec, CodecMismatchAndWrongDtypeAreErrors) {
  runRanks(2, [&](int rank, Communicator &comm) {
    OwnedTensor t(program::DTYPE_F32, {100});
    if (rank == 0) {
      EXPECT_TRUE(comm.sendCoded(t.tensor, 1, 1, codecOf(program::CODEC_INT8), nullptr).isOk());
      OwnedTensor i(program::DTYPE_I64, {4});
      Status s = comm.sendCoded(i.tensor, 1, 2, codecOf(program::CODEC_FP16), nullptr);
      EXPECT_NE(s.toString().find("f32 only"), std::string::npos) << s.toString();
    } else {
      Status s = comm.recvCoded(t.tensor, 0, 1, codecOf(program::CODEC_FP16));
      EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument);
      EXPECT_NE(s.toString().find("rank 1 peer 0"), std::string::npos) << s.toString();
      EXPECT_NE(s.getMessage().find("peer sent a CODEC_INT8 payload, this rank expects CODEC_FP16"),
                std::string::npos) << s.toString();
    }
  });
}

TEST(CommCodec, CompressedAllReduceIsTheSumOfDecodedPayloadsOnEveryRank) {
  // Two ranks: each payload is decoded by both and summed in rank order.
  // Four ranks: chunk c of every rank goes encoded to rank c, which sums the
  // decoded chunks in rank order and sends its encoded sum to all.
  const int n = 100003;
  for (int world : {2, 4})
    for (program::Codec c : kLossy) {
      auto p = codecOf(c, 0.05f);
      std::vector<std::vector<float>> results(world);
      std::vector<uint64_t> sent(world);
      runRanks(world, [&](int rank, Communicator &comm) {
        auto x = gaussian(n, 7 + rank);
        OwnedTensor t(program::DTYPE_F32, {n});
        std::copy(x.begin(), x.end(), t.as<float>());
        AllReduceOptions o;
        o.codec = p;
        comm.takeTraffic();
        Status s = comm.allReduce(t.tensor, 9, o);
        ASSERT_TRUE(s.isOk()) << s.toString();
        sent[rank] = sum(comm.takeTraffic().sent);
        results[rank].assign(t.as<float>(), t.as<float>() + n);
      });
      std::vector<float> expect(n, 0.0f);
      for (int ch = 0; ch < (world == 2 ? 1 : world); ++ch) {
        int64_t lo = world == 2 ? 0 : int64_t(n) * ch / world;
        int64_t hi = world == 2 ? n : int64_t(n) * (ch + 1) / world;
        std::vector<float> acc(hi - lo, 0.0f);
        for (int r = 0; r < world; ++r) {
          auto x = gaussian(n, 7 + r);
          auto y = codecRoundTrip(p, std::vector<float>(x.begin() + lo, x.begin() + hi));
          for (int64_t i = 0; i < hi - lo; ++i)
            acc[i] = r ? acc[i] + y[i] : y[i];
        }
        if (world > 2)
          acc = codecRoundTrip(p, acc);
        std::copy(acc.begin(), acc.end(), expect.begin() + lo);
      }
      for (int r = 0; r < world; ++r)
        ASSERT_EQ(0, std::memcmp(results[r].data(), expect.data(), 4ull * n))
            << program::Codec_Name(c) << " world " << world << " rank " << r;
      if (c == program::CODEC_INT8) {
        // Like a ring, 2 (k-1)/k of the (int8) tensor per rank.
        double ring = 2.0 * (world - 1) / world * 4.0 * n;
        EXPECT_NEAR(ring / sent[0], 4.0, 0.1) << "world " << world;
      }
    }
}

namespace {
/// A CodecEngine that decodes as the CUDA codec communicator's does: top-k
/// payloads through their (index, value) pairs (decodeSparse) scattered
/// into the destination, fixed layouts by rt::decode. It counts its calls.
class SparseDecodeEngine final : public CodecEngine {
public:
  int encodes = 0, decodes = 0, sparse = 0;
  Status encode(const program::CodecParams &params, const float *x, int64_t n,
                ErrorFeedback *feedback, std::vector<uint8_t> &out) override {
    ++encodes;
    return hostCodecEngine().encode(params, x, n, feedback, out);
  }
  Status decode(const uint8_t *p, size_t bytes, float *out, int64_t n,
                bool accumulate) override {
    ++decodes;
    StatusOr<program::Codec> c = payloadCodec(p, bytes);
    if (!c.isOk() || !isTopKCodec(*c))
      return rt::decode(p, bytes, out, n, accumulate);
    ++sparse;
    std::vector<uint32_t> idx;
    std::vector<float> vals;
    STRAIT_RETURN_IF_ERROR(decodeSparse(p, bytes, n, idx, vals));
    if (!accumulate)
      std::fill(out, out + n, 0.0f);
    for (size_t j = 0; j < idx.size(); ++j)
      out[idx[j]] += vals[j];
    return Status::ok();
  }
};
} // namespace

// Every encode and decode of a compressed all-reduce goes through the
// options' engine (the CUDA codec communicator's runs them on the GPU), with
// the error feedback's residuals; a rank on another engine computes the same
// floats as ranks on the host's, step after step (rank 0 here), flat with 2
// and 3 ranks and between the islands of a hierarchical one.
TEST(CommCodec, CompressedAllReduceRunsItsCodecsOnTheOptionsEngine) {
  const int n = 30011, steps = 3;
  struct Case {
    int world;
    std::vector<std::vector<int>> islands;
    int encodes, decodes; // rank 0's per step
  };
  const Case cases[] = {{2, {}, 1, 2}, {3, {}, 4, 6}, {4, {{0, 1}, {2, 3}}, 1, 2}};
  for (const Case &cc : cases)
    for (program::Codec c : {program::CODEC_TOPK, program::CODEC_INT8, program::CODEC_TOPK_INT4}) {
      auto p = codecOf(c, 0.05f, /*ef=*/true);
      std::vector<float> got[2];
      SparseDecodeEngine engine;
      for (int useEngine = 0; useEngine < 2; ++useEngine)
        runRanks(cc.world, [&](int rank, Communicator &comm) {
          ErrorFeedback feedback;
          OwnedTensor t(program::DTYPE_F32, {n});
          for (int step = 0; step < steps; ++step) {
            auto x = gaussian(n, 31 * step + rank);
            std::copy(x.begin(), x.end(), t.as<float>());
            AllReduceOptions o;
            o.codec = p;
            o.islands = cc.islands;
            o.feedback = &feedback;
            if (useEngine && rank == 0)
              o.engine = &engine;
            Status s = comm.allReduce(t.tensor, 5, o);
            ASSERT_TRUE(s.isOk()) << s.toString();
            if (rank == 0)
              got[useEngine].insert(got[useEngine].end(), t.as<float>(), t.as<float>() + n);
          }
        });
      std::string what = program::Codec_Name(c) + " world " + std::to_string(cc.world);
      EXPECT_EQ(engine.encodes, steps * cc.encodes) << what;
      EXPECT_EQ(engine.decodes, steps * cc.decodes) << what;
      EXPECT_EQ(engine.sparse, c == program::CODEC_INT8 ? 0 : engine.decodes) << what;
      ASSERT_EQ(got[0].size(), size_t(steps) * n);
      EXPECT_EQ(0, std::memcmp(got[0].data(), got[1].data(), 4 * got[0].size())) << what;
    }
}

TEST(CommCodec, TwoRankInt8AllReduceSendsAQuarterOfTheRing) {
  const int n = 1 << 20;
  runRanks(2, [&](int rank, Communicator &comm) {
    OwnedTensor t(program::DTYPE_F32, {n});
    auto x = gaussian(n, rank);
    std::copy(x.begin(), x.end(), t.as<float>());
    comm.takeTraffic();
    ASSERT_TRUE(comm.allReduceSum(t.tensor, 1).isOk());
    double ring = double(comm.takeTraffic().sent[1 - rank]);
    EXPECT_EQ(ring, 4.0 * n); // 2 (k-1)/k of the tensor
    AllReduceOptions o;
    o.codec = codecOf(program::CODEC_INT8);
    ASSERT_TRUE(comm.allReduce(t.tensor, 1, o).isOk());
    double int8 = double(comm.takeTraffic().sent[1 - rank]);
    EXPECT_NEAR(ring / int8, 4.0, 0.07);
  });
}

namespace {
/// Runs flat and hierarchical all-reduce on `world` ranks; checks that the
/// hierarchical result is identical on all ranks and equals the flat one
/// within float rounding, and returns each rank's bytes sent per peer.
std::vector<std::map<int, uint64_t>>
checkHierarchical(int world, std::vector<std::vector<int>> islands, int n,
                  program::Codec codec = program::CODEC_NONE, double tol = -1) {
  std::vector<std::vector<float>> flat(world), hier(world);
  std::vector<std::map<int, uint64_t>> sent(world);
  runRanks(world, [&](int rank, Communicator &comm) {
    auto x = gaussian(n, 100 + rank);
    OwnedTensor t(program::DTYPE_F32, {n});
    std::copy(x.begin(), x.end(), t.as<float>());
    ASSERT_TRUE(comm.allReduceSum(t.tensor, 2).isOk());
    flat[rank].assign(t.as<float>(), t.as<float>() + n);
    std::copy(x.begin(), x.end(), t.as<float>());
    AllReduceOptions o;
    o.islands = islands;
    o.codec = codecOf(codec);
    comm.takeTraffic();
    Status s = comm.allReduce(t.tensor, 2, o);
    ASSERT_TRUE(s.isOk()) << s.toString();
    sent[rank] = comm.takeTraffic().sent;
    hier[rank].assign(t.as<float>(), t.as<float>() + n);
  });
  for (int r = 0; r < world; ++r) {
    EXPECT_EQ(0, std::memcmp(hier[r].data(), hier[0].data(), 4ull * n)) << "rank " << r;
    double maxErr = 0;
    for (int i = 0; i < n; ++i)
      maxErr = std::max(maxErr, double(std::fabs(hier[r][i] - flat[r][i])));
    if (tol < 0)
      tol = codec == program::CODEC_NONE ? 4e-6 * world : 0.05 * world;
    EXPECT_LT(maxErr, tol) << "rank " << r;
  }
  return sent;
}
} // namespace

TEST(CommCodec, HierarchicalEqualsFlatFourRanksTwoIslands) {
  const int n = 100001;
  auto sent = checkHierarchical(4, {{0, 1}, {2, 3}}, n);
  // Each member carries its half of the island's sum to its counterpart in
  // the other island: the slow links carry the data once per island.
  uint64_t chunk0 = 4ull * (n * 1 / 2), chunk1 = 4ull * (n - n / 2);
  uint64_t overhead = 8 + kCodecHeaderBytes;
  EXPECT_EQ(sent[0][2] + sent[1][3], chunk0 + chunk1 + 2 * overhead);
  EXPECT_EQ(sent[0].count(3) + sent[1].count(2), 0u);
}

TEST(CommCodec, HierarchicalEqualsFlatFourRanksUnequalIslands) {
  auto sent = checkHierarchical(4, {{0, 1, 2}, {3}}, 50000);
  // Only the leaders (0 and 3) cross islands.
  EXPECT_EQ(sent[1].count(3) + sent[2].count(3), 0u);
  EXPECT_GT(sent[0][3], 4u * 50000);
}

TEST(CommCodec, HierarchicalEqualsFlatSixRanks) {
  checkHierarchical(6, {{0, 1, 2}, {3, 4, 5}}, 30001);
  checkHierarchical(6, {{0, 1}, {2, 3}, {4, 5}}, 30001);
  checkHierarchical(6, {{0}, {1, 2, 3, 4}, {5}}, 1001);
  checkHierarchical(6, {{0, 1, 2}, {3, 4, 5}}, 2); // fewer elements than members
}

TEST(CommCodec, HierarchicalCodecAppliesBetweenIslandsOnly) {
  const int n = 1 << 18;
  auto plain = checkHierarchical(4, {{0, 1}, {2, 3}}, n);
  auto int8 = checkHierarchical(4, {{0, 1}, {2, 3}}, n, program::CODEC_INT8);
  // Inside an island: unchanged. Across: about 4x less.
  EXPECT_EQ(int8[0][1], plain[0][1]);
  EXPECT_NEAR(double(plain[0][2]) / int8[0][2], 4.0, 0.1);
  // Top-k 1% between the leaders of unequal islands: identical on all
  // ranks (checked inside); far from the exact sum, so no tolerance.
  auto topk = checkHierarchical(4, {{0, 1, 2}, {3}}, 40000, program::CODEC_TOPK, 1e30);
  EXPECT_LT(topk[3][0], 4u * 40000 / 50);
}

TEST(CommCodec, BadIslandsAreErrors) {
  runRanks(2, [&](int rank, Communicator &comm) {
    OwnedTensor t(program::DTYPE_F32, {10});
    AllReduceOptions o;
    o.islands = {{0}};
    Status s = comm.allReduce(t.tensor, 1, o);
    EXPECT_NE(s.getMessage().find("do not partition"), std::string::npos) << s.toString();
    o.islands = {{1, 0}};
    s = comm.allReduce(t.tensor, 1, o);
    EXPECT_NE(s.getMessage().find("sorted distinct"), std::string::npos) << s.toString();
  });
}

namespace {

/// A program per rank: `buckets` gradient buckets, each computed by a
/// MatMul chain and all-reduced (group of all ranks, islands of pairs when
/// `islands`, codec), then a Neg of every reduced bucket into the outputs.
/// Rank 0 also sends `x` to rank 1 right before overwriting it (the
/// transfer must read the old value).
program::Program bucketProgram(int rank, int world, int buckets, int dim,
                               const program::CodecParams &codec, bool islands) {
  ProgramBuilder b(rank, world);
  uint32_t w = b.addValue("w", program::DTYPE_F32, {dim, dim}, program::ROLE_INPUT);
  uint32_t x = b.addValue("x", program::DTYPE_F32, {dim, dim}, program::ROLE_INPUT);
  std::vector<uint32_t> grads, outs;
  for (int k = 0; k < buckets; ++k) {
    uint32_t h = b.addValue("h" + std::to_string(k), program::DTYPE_F32, {dim, dim},
                            program::ROLE_ACTIVATION);
    uint32_t g = b.addValue("g" + std::to_string(k), program::DTYPE_F32, {dim, dim},
                            program::ROLE_GRADIENT);
    uint32_t o = b.addValue("out" + std::to_string(k), program::DTYPE_F32, {dim, dim},
                            program::ROLE_OUTPUT);
    uint32_t k1 = b.addKernel("MatMul", {x, w}, {h}).id();
    uint32_t k2 = b.addKernel("MatMul", {h, w}, {g}).id();
    b.addRunStep({k1, k2});
    auto *ar = b.get().add_steps()->mutable_all_reduce();
    ar->add_value_ids(g);
    ar->set_reduce(program::REDUCE_MEAN);
    ar->set_channel(10 + k);
    *ar->mutable_codec() = codec;
    if (islands)
      for (int i = 0; i < world; i += 2) {
        auto *isl = ar->add_islands();
        isl->add_ranks(i);
        isl->add_ranks(i + 1);
      }
    grads.push_back(g);
    outs.push_back(o);
  }
  uint32_t copy = b.addValue("xcopy", program::DTYPE_F32, {dim, dim}, program::ROLE_OUTPUT);
  if (rank == 0) {
    auto *send = b.get().add_steps()->mutable_send();
    send->set_value_id(x);
    send->set_peer(1);
    send->set_channel(5);
    *send->mutable_codec() = codec;
    b.addRunStep({b.addKernel("Neg", {w}, {x}).id()}); // overwrites x
  } else if (rank == 1) {
    auto *recv = b.get().add_steps()->mutable_recv();
    recv->set_value_id(copy);
    recv->set_peer(0);
    recv->set_channel(5);
    *recv->mutable_codec() = codec;
  }
  std::vector<uint32_t> negs;
  for (int k = 0; k < buckets; ++k)
    negs.push_back(b.addKernel("Neg", {grads[k]}, {outs[k]}).id());
  b.addRunStep(negs);
  return b.get();
}

/// Runs the bucket program for `iterations` on every rank; returns every
/// rank's outputs (flattened) after the last iteration.
std::vector<std::vector<float>> runBuckets(int world, const program::CodecParams &codec,
                                           bool islands, bool overlap, int iterations = 3) {
  const int buckets = 4, dim = 48;
  std::vector<std::vector<float>> outputs(world);
  runRanks(world, [&](int rank, Communicator &comm) {
    BackendRegistry reg;
    registerCpuBackend(reg);
    auto exec = Executor::create(bucketProgram(rank, world, buckets, dim, codec, islands),
                                 reg, &comm);
    ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
    (*exec)->setOverlapCommunication(overlap);
    for (int it = 0; it < iterations; ++it) {
      for (const char *name : {"w", "x"}) {
        Tensor t = *(*exec)->getValueByName(name);
        auto v = gaussian(t.numel(), 1000 * it + 10 * rank + (name[0] == 'w'));
        std::copy(v.begin(), v.end(), t.as<float>());
      }
      Status s = (*exec)->run();
      ASSERT_TRUE(s.isOk()) << s.toString();
    }
    for (const auto &v : (*exec)->getProgram().values())
      if (v.role() == program::ROLE_OUTPUT) {
        Tensor t = *(*exec)->getValue(v.id());
        outputs[rank].insert(outputs[rank].end(), t.as<float>(), t.as<float>() + t.numel());
      }
  });
  return outputs;
}

} // namespace

TEST(CommCodec, ExecutorOverlappedEqualsSequential) {
  for (bool islands : {false, true})
    for (program::Codec c : {program::CODEC_NONE, program::CODEC_TOPK, program::CODEC_INT8}) {
      auto codec = codecOf(c, 0.1f, /*ef=*/c != program::CODEC_NONE);
      auto seq = runBuckets(4, codec, islands, false);
      auto ovl = runBuckets(4, codec, islands, true);
      for (int r = 0; r < 4; ++r) {
        ASSERT_FALSE(seq[r].empty());
        ASSERT_EQ(seq[r], ovl[r]) << program::Codec_Name(c) << " islands " << islands
                                  << " rank " << r;
      }
    }
}

TEST(CommCodec, ExecutorSendReadsTheValueBeforeTheNextKernelOverwritesIt) {
  auto out = runBuckets(2, codecOf(program::CODEC_NONE), false, true, 1);
  // rank 1's xcopy (last output, after the 4 buckets) is rank 0's x as fed.
  auto x = gaussian(48 * 48, 0);
  std::vector<float> got(out[1].end() - 48 * 48, out[1].end());
  EXPECT_EQ(got, x);
}

TEST(CommCodec, ExecutorRejectsBadCodecsAndIslandsNamingTheField) {
  BackendRegistry reg;
  registerCpuBackend(reg);
  runRanks(2, [&](int rank, Communicator &comm) {
    if (rank)
      return;
    auto bad = codecOf(program::CODEC_TOPK, 2.0f);
    auto p = bucketProgram(0, 2, 1, 4, bad, false);
    auto exec = Executor::create(p, reg, &comm);
    ASSERT_FALSE(exec.isOk());
    EXPECT_NE(exec.getStatus().toString().find("step 1"), std::string::npos)
        << exec.getStatus().toString();
    EXPECT_NE(exec.getStatus().getMessage().find("steps[1].all_reduce.codec.topk_ratio"),
              std::string::npos) << exec.getStatus().toString();
    p = bucketProgram(0, 2, 1, 4, codecOf(program::CODEC_NONE), true);
    p.mutable_steps(1)->mutable_all_reduce()->mutable_islands(0)->set_ranks(1, 0);
    exec = Executor::create(p, reg, &comm);
    ASSERT_FALSE(exec.isOk());
    EXPECT_NE(exec.getStatus().getMessage().find("steps[1].all_reduce.islands[0]: ranks must be sorted"),
              std::string::npos) << exec.getStatus().toString();
    p = bucketProgram(0, 2, 1, 4, codecOf(program::CODEC_NONE), false);
    auto *ar = p.mutable_steps(1)->mutable_all_reduce();
    ar->add_islands()->add_ranks(0);
    exec = Executor::create(p, reg, &comm);
    ASSERT_FALSE(exec.isOk());
    EXPECT_NE(exec.getStatus().getMessage().find("1 rank(s) of the group are in no island"),
              std::string::npos) << exec.getStatus().toString();
  });
}

TEST(CommCodec, ExecutorFusesTheValuesOfAnAllReduceStep) {
  // Three gradients of an all-reduce step (REDUCE_MEAN over 4 ranks as two
  // islands) are reduced as one bucket; each must get its own mean.
  const std::vector<int64_t> sizes = {5, 1000, 7};
  for (program::Codec c : {program::CODEC_NONE, program::CODEC_INT8}) {
    std::vector<std::vector<float>> got(4);
    runRanks(4, [&](int rank, Communicator &comm) {
      ProgramBuilder b(rank, 4);
      auto *ar = b.get().add_steps()->mutable_all_reduce();
      for (size_t v = 0; v < sizes.size(); ++v)
        ar->add_value_ids(b.addValue("g" + std::to_string(v), program::DTYPE_F32, {sizes[v]},
                                     program::ROLE_INPUT)); // filled here
      ar->set_reduce(program::REDUCE_MEAN);
      ar->set_channel(3);
      *ar->mutable_codec() = codecOf(c);
      for (int i = 0; i < 4; i += 2) {
        auto *isl = ar->add_islands();
        isl->add_ranks(i);
        isl->add_ranks(i + 1);
      }
      BackendRegistry reg;
      registerCpuBackend(reg);
      auto exec = Executor::create(b.get(), reg, &comm);
      ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
      for (size_t v = 0; v < sizes.size(); ++v) {
        Tensor t = *(*exec)->getValueByName("g" + std::to_string(v));
        for (int64_t i = 0; i < t.numel(); ++i)
          t.as<float>()[i] = float(rank + 1) * (v + 1) + 0.001f * i;
      }
      Status s = (*exec)->run();
      ASSERT_TRUE(s.isOk()) << s.toString();
      for (size_t v = 0; v < sizes.size(); ++v) {
        Tensor t = *(*exec)->getValueByName("g" + std::to_string(v));
        got[rank].insert(got[rank].end(), t.as<float>(), t.as<float>() + t.numel());
      }
    });
    size_t at = 0;
    for (size_t v = 0; v < sizes.size(); ++v)
      for (int64_t i = 0; i < sizes[v]; ++i, ++at) {
        // mean over ranks of (r+1)(v+1) + 0.001 i = 2.5 (v+1) + 0.001 i
        float expect = 2.5f * (v + 1) + 0.001f * i;
        float tol = c == program::CODEC_NONE ? 1e-5f : 0.02f * (v + 2);
        for (int r = 0; r < 4; ++r)
          ASSERT_NEAR(got[r][at], expect, tol) << program::Codec_Name(c) << " value " << v
                                               << " element " << i << " rank " << r;
      }
    for (int r = 1; r < 4; ++r)
      EXPECT_EQ(got[r], got[0]);
  }
}

TEST(CommCodec, ExecutorPrefetchesReceivesAndKeepsTheirOrder) {
  // Stage 0 sends M activations; stage 1 receives each (activations, so the
  // arena plans them; the executor queues the receives ahead of the
  // kernels) and negates it. The last two messages are received into the
  // same value, read by a kernel in between: that receive must not be
  // queued before the read. Overlapped == sequential, bitwise.
  const int m = 5, n = 4096;
  auto build = [&](int rank) {
    ProgramBuilder b(rank, 2);
    uint32_t same = b.addValue("same", program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
    for (int k = 0; k < m; ++k) {
      std::string s = std::to_string(k);
      bool last = k >= m - 2;
      if (rank == 0) {
        uint32_t x = b.addValue("x" + s, program::DTYPE_F32, {n}, program::ROLE_INPUT);
        uint32_t a = b.addValue("a" + s, program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
        b.addRunStep({b.addKernel("Relu", {x}, {a}).id()});
        auto *send = b.get().add_steps()->mutable_send();
        send->set_value_id(a);
        send->set_peer(1);
        send->set_channel(20 + k);
      } else {
        uint32_t a = last ? same
                          : b.addValue("a" + s, program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
        uint32_t o = b.addValue("o" + s, program::DTYPE_F32, {n}, program::ROLE_OUTPUT);
        auto *recv = b.get().add_steps()->mutable_recv();
        recv->set_value_id(a);
        recv->set_peer(0);
        recv->set_channel(20 + k);
        b.addRunStep({b.addKernel("Neg", {a}, {o}).id()});
      }
    }
    return b.get();
  };
  std::vector<std::vector<float>> out[2];
  for (bool overlap : {false, true})
    runRanks(2, [&](int rank, Communicator &comm) {
      BackendRegistry reg;
      registerCpuBackend(reg);
      auto exec = Executor::create(build(rank), reg, &comm);
      ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
      (*exec)->setOverlapCommunication(overlap);
      for (int it = 0; it < 2; ++it) {
        if (rank == 0)
          for (int k = 0; k < m; ++k) {
            Tensor t = *(*exec)->getValueByName("x" + std::to_string(k));
            auto v = gaussian(n, 100 * it + k);
            std::copy(v.begin(), v.end(), t.as<float>());
          }
        Status s = (*exec)->run();
        ASSERT_TRUE(s.isOk()) << s.toString();
      }
      if (rank == 1) {
        std::vector<float> all;
        for (int k = 0; k < m; ++k) {
          Tensor t = *(*exec)->getValueByName("o" + std::to_string(k));
          all.insert(all.end(), t.as<float>(), t.as<float>() + n);
          // o_k = -relu(x_k) of the last iteration
          auto x = gaussian(n, 100 + k);
          for (int i = 0; i < n; i += 97)
            ASSERT_EQ(t.as<float>()[i], -std::max(x[i], 0.0f)) << "k " << k;
        }
        out[overlap].push_back(all);
      }
    });
  ASSERT_EQ(out[0].size(), 1u);
  ASSERT_EQ(out[1].size(), 1u);
  EXPECT_EQ(out[0][0], out[1][0]);
}

TEST(CommCodec, ExecutorKeepDecodedSendsOnePayloadToEveryCopy) {
  // A tied variable's partial gradient g on rank 0 goes to ranks 1 and 2
  // (three copies): the first Send encodes g + r at int4 with error feedback
  // and replaces g by the decoded payload (keep_decoded), the second sends
  // the same payload again (repeat_payload). Rank 0's later kernel reads the
  // decoded g, so all three ranks compute with the same bits, which are the
  // reference error feedback's decode(encode(g + r)) in every iteration.
  const int n = 3000, iterations = 4;
  program::CodecParams int4 = codecOf(program::CODEC_INT4, 0.01f, /*ef=*/true);
  auto build = [&](int rank) {
    ProgramBuilder b(rank, 3);
    uint32_t o = b.addValue("o", program::DTYPE_F32, {n}, program::ROLE_OUTPUT);
    if (rank == 0) {
      uint32_t x = b.addValue("x", program::DTYPE_F32, {n}, program::ROLE_INPUT);
      uint32_t g = b.addValue("g", program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
      b.addRunStep({b.addKernel("Neg", {x}, {g}).id()});
      for (int peer : {1, 2}) {
        auto *send = b.get().add_steps()->mutable_send();
        send->set_value_id(g);
        send->set_peer(peer);
        send->set_channel(40 + peer);
        *send->mutable_codec() = int4;
        send->mutable_codec()->set_error_feedback(peer == 1);
        (peer == 1 ? send->set_keep_decoded(true) : send->set_repeat_payload(true));
      }
      b.addRunStep({b.addKernel("Neg", {g}, {o}).id()});
    } else {
      uint32_t r = b.addValue("r", program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
      auto *recv = b.get().add_steps()->mutable_recv();
      recv->set_value_id(r);
      recv->set_peer(0);
      recv->set_channel(40 + rank);
      *recv->mutable_codec() = int4;
      recv->mutable_codec()->set_error_feedback(false);
      b.addRunStep({b.addKernel("Neg", {r}, {o}).id()});
    }
    return b.get();
  };
  // The reference: the decoded payloads of one error-feedback stream.
  std::vector<std::vector<float>> expect;
  ErrorFeedback ref;
  for (int it = 0; it < iterations; ++it) {
    std::vector<float> g = gaussian(n, 500 + it), d(n);
    for (float &v : g)
      v = -v;
    std::vector<uint8_t> payload;
    ASSERT_TRUE(ref.encode(int4, g.data(), n, payload).isOk());
    ASSERT_TRUE(decode(payload.data(), payload.size(), d.data(), n).isOk());
    for (float &v : d)
      v = -v;
    expect.push_back(d);
  }
  std::vector<std::vector<float>> got[3];
  runRanks(3, [&](int rank, Communicator &comm) {
    BackendRegistry reg;
    registerCpuBackend(reg);
    auto exec = Executor::create(build(rank), reg, &comm);
    ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
    for (int it = 0; it < iterations; ++it) {
      if (rank == 0) {
        auto x = gaussian(n, 500 + it);
        Tensor t = *(*exec)->getValueByName("x");
        std::copy(x.begin(), x.end(), t.as<float>());
      }
      Status s = (*exec)->run();
      ASSERT_TRUE(s.isOk()) << s.toString();
      Tensor o = *(*exec)->getValueByName("o");
      got[rank].emplace_back(o.as<float>(), o.as<float>() + n);
    }
  });
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_EQ(got[rank].size(), size_t(iterations)) << "rank " << rank;
    for (int it = 0; it < iterations; ++it)
      for (int i = 0; i < n; ++i)
        ASSERT_EQ(got[rank][it][i], expect[it][i]) << "rank " << rank << " it " << it << " i " << i;
  }
}

TEST(CommCodec, ExecutorSendWithoutKeepDecodedKeepsItsExactValue) {
  // The control: a plain int4 send leaves the sender's value exact, so the
  // sender's output differs from what the peer decodes.
  const int n = 3000;
  auto build = [&](int rank) {
    ProgramBuilder b(rank, 2);
    uint32_t o = b.addValue("o", program::DTYPE_F32, {n}, program::ROLE_OUTPUT);
    uint32_t g = b.addValue("g", program::DTYPE_F32, {n}, program::ROLE_ACTIVATION);
    if (rank == 0) {
      uint32_t x = b.addValue("x", program::DTYPE_F32, {n}, program::ROLE_INPUT);
      b.addRunStep({b.addKernel("Neg", {x}, {g}).id()});
      auto *send = b.get().add_steps()->mutable_send();
      send->set_value_id(g);
      send->set_peer(1);
      *send->mutable_codec() = codecOf(program::CODEC_INT4, 0.01f, true);
    } else {
      auto *recv = b.get().add_steps()->mutable_recv();
      recv->set_value_id(g);
      recv->set_peer(0);
      *recv->mutable_codec() = codecOf(program::CODEC_INT4);
    }
    b.addRunStep({b.addKernel("Neg", {g}, {o}).id()});
    return b.get();
  };
  std::vector<float> got[2];
  runRanks(2, [&](int rank, Communicator &comm) {
    BackendRegistry reg;
    registerCpuBackend(reg);
    auto exec = Executor::create(build(rank), reg, &comm);
    ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
    if (rank == 0) {
      auto x = gaussian(n, 7);
      std::copy(x.begin(), x.end(), (*exec)->getValueByName("x")->as<float>());
    }
    ASSERT_TRUE((*exec)->run().isOk());
    Tensor o = *(*exec)->getValueByName("o");
    got[rank].assign(o.as<float>(), o.as<float>() + n);
  });
  EXPECT_NE(got[0], got[1]);
}
