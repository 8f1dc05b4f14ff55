//===- HybridCommTest.cpp - Fast transport inside domains, slow between ---===//
//
// The hybrid communicator routes by domain (NCCL inside a GPU host, Gloo
// between sites in strait-run). Here both transports are real Gloo worlds
// on loopback with their own rendezvous prefixes, so the routing and the
// three-phase all-reduce are checked on the CPU: results against the plain
// sum, and the slow transport's measured bytes show which ranks crossed
// domains.
//
//===----------------------------------------------------------------------===//
#include "CommTestUtil.h"

#include <cmath>
#include <mutex>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

/// Runs body(rank, hybrid) on `world` ranks; each rank has a slow and a
/// fast Gloo world and its hybrid over `domainOf`.
void runHybrid(const std::vector<int> &domainOf,
               const std::function<void(int, Communicator &)> &body) {
  int world = static_cast<int>(domainOf.size());
  std::string dir = makeTempDir("strait-hybrid");
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto slow = createGlooCommunicator(
          fileStoreOptions(dir, r, world, std::chrono::milliseconds(20000), "slow"));
      auto fast = createGlooCommunicator(
          fileStoreOptions(dir, r, world, std::chrono::milliseconds(20000), "fast"));
      if (!slow.isOk() || !fast.isOk()) {
        ADD_FAILURE() << (slow.isOk() ? fast.getStatus() : slow.getStatus()).toString();
        return;
      }
      auto hybrid = createHybridCommunicator(std::move(*slow), std::move(*fast), domainOf);
      if (!hybrid.isOk()) {
        ADD_FAILURE() << hybrid.getStatus().toString();
        return;
      }
      body(r, **hybrid);
      Status s = (*hybrid)->barrier();
      EXPECT_TRUE(s.isOk()) << s.toString();
    });
  for (auto &t : threads)
    t.join();
}

uint64_t total(const std::map<int, uint64_t> &m) {
  uint64_t n = 0;
  for (const auto &kv : m)
    n += kv.second;
  return n;
}

/// rank r's values: r + 1 + i / 1000.
void fill(OwnedTensor &t, int rank) {
  for (int64_t i = 0; i < t.tensor.numel(); ++i)
    t.as<float>()[i] = rank + 1 + i / 1000.0f;
}

} // namespace

TEST(HybridComm, AllReduceAcrossDomainsSendsOnlyLeadersOverTheSlowLink) {
  // Domains {0,1} and {2,3}: ranks 1 and 3 never touch the slow transport.
  std::vector<int> domains = {0, 0, 1, 1};
  std::mutex m;
  std::map<int, uint64_t> slowSent;
  runHybrid(domains, [&](int rank, Communicator &comm) {
    comm.takeTraffic();
    OwnedTensor t(program::DTYPE_F32, {4096});
    fill(t, rank);
    Status s = comm.allReduceSum(t.tensor, 3);
    ASSERT_TRUE(s.isOk()) << s.toString();
    for (int i = 0; i < 4096; i += 511)
      EXPECT_FLOAT_EQ(t.as<float>()[i], 10 + 4 * (i / 1000.0f)) << "rank " << rank << " i " << i;
    TrafficCounters c = comm.takeTraffic();
    EXPECT_TRUE(c.measured);
    std::lock_guard<std::mutex> lock(m);
    slowSent[rank] = total(c.sent);
  });
  EXPECT_GT(slowSent[0], 0u);
  EXPECT_GT(slowSent[2], 0u);
  EXPECT_EQ(slowSent[1], 0u);
  EXPECT_EQ(slowSent[3], 0u);
}

TEST(HybridComm, GroupInsideOneDomainNeverUsesTheSlowLink) {
  std::vector<int> domains = {0, 0, 1, 1};
  std::mutex m;
  uint64_t slowBytes = 0;
  runHybrid(domains, [&](int rank, Communicator &comm) {
    comm.takeTraffic();
    OwnedTensor t(program::DTYPE_F32, {1000});
    fill(t, rank);
    std::vector<int> group = rank < 2 ? std::vector<int>{0, 1} : std::vector<int>{2, 3};
    Status s = comm.allReduceSumGroup(t.tensor, group, 5);
    ASSERT_TRUE(s.isOk()) << s.toString();
    float expect = rank < 2 ? 3 : 7; // (1 + 2) or (3 + 4), plus 2 i / 1000
    EXPECT_FLOAT_EQ(t.as<float>()[500], expect + 1.0f);
    // Point to point inside the domain: fast.
    OwnedTensor p(program::DTYPE_F32, {256});
    fill(p, rank);
    if (rank % 2 == 0)
      EXPECT_TRUE(comm.send(p.tensor, rank + 1, 9).isOk());
    else {
      EXPECT_TRUE(comm.recv(p.tensor, rank - 1, 9).isOk());
      EXPECT_FLOAT_EQ(p.as<float>()[0], rank); // (rank - 1) + 1
    }
    TrafficCounters c = comm.takeTraffic();
    std::lock_guard<std::mutex> lock(m);
    slowBytes += total(c.sent) + total(c.received);
  });
  EXPECT_EQ(slowBytes, 0u);
}

TEST(HybridComm, SendAcrossDomainsUsesTheSlowLink) {
  std::vector<int> domains = {0, 1};
  std::mutex m;
  std::map<int, uint64_t> recvBytes;
  runHybrid(domains, [&](int rank, Communicator &comm) {
    comm.takeTraffic();
    OwnedTensor p(program::DTYPE_F32, {300});
    fill(p, rank);
    Status s = rank == 0 ? comm.send(p.tensor, 1, 2) : comm.recv(p.tensor, 0, 2);
    ASSERT_TRUE(s.isOk()) << s.toString();
    if (rank == 1)
      EXPECT_FLOAT_EQ(p.as<float>()[100], 1.1f);
    std::lock_guard<std::mutex> lock(m);
    recvBytes[rank] = total(comm.takeTraffic().received);
  });
  EXPECT_GE(recvBytes[1], 300 * sizeof(float));
}

// Deferred transfers (1F1B) take the slow transport on both sides even
// inside one domain: there NCCL's point-to-point calls would block the
// stream until the peer's call. Both ranks send first (crossing), which
// would wait forever with blocking sends; takeTraffic (the slow transport's
// bytes) shows the route. A plain transfer inside the domain stays fast.
TEST(HybridComm, DeferredTransfersInsideADomainTakeTheSlowTransport) {
  std::vector<int> domains = {0, 0};
  std::mutex m;
  std::map<int, uint64_t> deferredBytes, plainBytes;
  runHybrid(domains, [&](int rank, Communicator &comm) {
    comm.takeTraffic();
    OwnedTensor out(program::DTYPE_F32, {300}), in(program::DTYPE_F32, {300});
    fill(out, rank);
    Status s = comm.sendDeferred(out.tensor, 1 - rank, 3, program::CodecParams(), nullptr);
    ASSERT_TRUE(s.isOk()) << s.toString();
    s = comm.recvDeferred(in.tensor, 1 - rank, 3, program::CodecParams());
    ASSERT_TRUE(s.isOk()) << s.toString();
    s = comm.flushSends();
    ASSERT_TRUE(s.isOk()) << s.toString();
    EXPECT_FLOAT_EQ(in.as<float>()[100], (1 - rank) + 1 + 0.1f);
    uint64_t deferred = total(comm.takeTraffic().received);
    s = rank == 0 ? comm.send(out.tensor, 1, 4) : comm.recv(in.tensor, 0, 4);
    ASSERT_TRUE(s.isOk()) << s.toString();
    std::lock_guard<std::mutex> lock(m);
    deferredBytes[rank] = deferred;
    plainBytes[rank] = total(comm.takeTraffic().received);
  });
  EXPECT_GE(deferredBytes[0], 300 * sizeof(float));
  EXPECT_GE(deferredBytes[1], 300 * sizeof(float));
  EXPECT_EQ(plainBytes[1], 0u);
}

TEST(HybridComm, UnevenDomainsWithCodecAndIslandsAgreeOnEveryRank) {
  // Domains {0}, {1,2}, {3,4,5}; the compiler's islands {0,1,2} {3,4,5}
  // reach the leaders 0, 1, 3 as {0,1} {3}. int8 quantization with error
  // feedback on the slow phase: every rank ends with the same values, within
  // the quantization error of the true sum.
  std::vector<int> domains = {0, 1, 1, 2, 2, 2};
  std::mutex m;
  std::vector<std::vector<float>> results(6);
  runHybrid(domains, [&](int rank, Communicator &comm) {
    OwnedTensor t(program::DTYPE_F32, {2048});
    fill(t, rank);
    AllReduceOptions o;
    o.islands = {{0, 1, 2}, {3, 4, 5}};
    o.codec.set_codec(program::CODEC_INT8);
    o.codec.set_error_feedback(true);
    ErrorFeedback feedback;
    o.feedback = &feedback;
    Status s = comm.allReduce(t.tensor, 4, o);
    ASSERT_TRUE(s.isOk()) << s.toString();
    std::lock_guard<std::mutex> lock(m);
    results[rank].assign(t.as<float>(), t.as<float>() + 2048);
  });
  for (int r = 1; r < 6; ++r)
    EXPECT_EQ(results[r], results[0]) << "rank " << r;
  double worst = 0;
  for (int i = 0; i < 2048; ++i)
    worst = std::max(worst, std::fabs(results[0][i] - (21 + 6 * (i / 1000.0))));
  EXPECT_LT(worst, 21 * 3 / 127.0); // a few int8 steps of the largest magnitude
}

TEST(HybridComm, BadDomainsAreAnError) {
  std::string dir = makeTempDir("strait-hybrid-bad");
  auto slow = createGlooCommunicator(fileStoreOptions(dir, 0, 1));
  auto fast = createGlooCommunicator(fileStoreOptions(dir, 0, 1, std::chrono::milliseconds(20000), "f"));
  ASSERT_TRUE(slow.isOk() && fast.isOk());
  auto h = createHybridCommunicator(std::move(*slow), std::move(*fast), {0, 0});
  ASSERT_FALSE(h.isOk());
  EXPECT_NE(h.getStatus().getMessage().find("2 domain entries for a world of 1"),
            std::string::npos)
      << h.getStatus().toString();
}

// Phase 3 of a hybrid all-reduce: the part's leader broadcasts on the fast
// transport. The default broadcastGroup (Gloo here; NCCL overrides it) gives
// every member the root's bytes (a -0.0 stays -0.0, which a sum with zeros
// would not keep), leaves ranks outside the group alone, and refuses a
// group without its root.
TEST(HybridComm, BroadcastGroupCopiesTheRootsBytesToItsMembersOnly) {
  std::vector<int> domains = {0, 0, 0, 1};
  std::mutex m;
  std::map<int, std::vector<float>> got;
  runHybrid(domains, [&](int rank, Communicator &comm) {
    OwnedTensor t(program::DTYPE_F32, {3000});
    fill(t, rank);
    t.as<float>()[7] = rank == 1 ? -0.0f : 5.0f;
    std::vector<int> group = {0, 1, 2};
    if (rank < 3) {
      Status s = comm.broadcastGroup(t.tensor, 1, group, 6);
      ASSERT_TRUE(s.isOk()) << s.toString();
      Status bad = comm.broadcastGroup(t.tensor, 3, group, 6);
      EXPECT_EQ(bad.getCode(), StatusCode::InvalidArgument) << bad.toString();
    }
    std::lock_guard<std::mutex> lock(m);
    got[rank].assign(t.as<float>(), t.as<float>() + 3000);
  });
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(got[r], got[1]) << "rank " << r;
    EXPECT_TRUE(std::signbit(got[r][7])) << "rank " << r;
  }
  EXPECT_EQ(got[3][0], 4.0f); // rank 3's own fill
  EXPECT_EQ(got[3][7], 5.0f);
}
