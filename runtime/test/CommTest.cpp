//===- CommTest.cpp - Gloo communicator with 2-4 ranks on loopback --------===//
//
// Every rank runs in its own thread with its own Gloo context and TCP
// device; rendezvous goes through a fresh file-store folder (or a private
// redis-server when one is installed). All timeouts are bounded.
//
//===----------------------------------------------------------------------===//
#include "CommTestUtil.h"
#include "strait/runtime/Communicator.h"

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <gtest/gtest.h>
#include <thread>
#include <unistd.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;
using namespace std::chrono_literals;

namespace {

std::string makeStoreDir() { return makeTempDir("strait-comm"); }

GlooOptions fileOptions(const std::string &dir, int rank, int world,
                        std::chrono::milliseconds timeout = 10000ms) {
  return fileStoreOptions(dir, rank, world, timeout);
}

/// Runs body(rank, comm) on `world` threads after connecting them (no
/// barrier at the end: several tests make ranks fail on purpose).
void runRanks(int world, const std::function<GlooOptions(int)> &options,
              const std::function<void(int, Communicator &)> &body) {
  runGlooRanks(world, options, body, /*barrierAfter=*/false);
}

} // namespace

TEST(GlooComm, SendRecvBetweenTwoRanks) {
  std::string dir = makeStoreDir();
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2); },
           [](int rank, Communicator &comm) {
             OwnedTensor t(program::DTYPE_F32, {1000});
             if (rank == 0) {
               for (int i = 0; i < 1000; ++i)
                 t.as<float>()[i] = i * 0.5f;
               EXPECT_TRUE(comm.send(t.tensor, 1, 7).isOk());
               Status s = comm.recv(t.tensor, 1, 8);
               EXPECT_TRUE(s.isOk()) << s.toString();
               EXPECT_EQ(t.as<float>()[999], 2 * 999 * 0.5f);
             } else {
               Status s = comm.recv(t.tensor, 0, 7);
               EXPECT_TRUE(s.isOk()) << s.toString();
               EXPECT_EQ(t.as<float>()[10], 5.0f);
               for (int i = 0; i < 1000; ++i)
                 t.as<float>()[i] *= 2;
               EXPECT_TRUE(comm.send(t.tensor, 0, 8).isOk());
             }
           });
}

TEST(GlooComm, AllReduceSumOverFourRanks) {
  std::string dir = makeStoreDir();
  const int n = 300001; // not a multiple of the world size
  runRanks(4, [&](int r) { return fileOptions(dir, r, 4); },
           [&](int rank, Communicator &comm) {
             OwnedTensor t(program::DTYPE_F32, {n});
             for (int i = 0; i < n; ++i)
               t.as<float>()[i] = float(rank + 1) * (i % 7);
             Status s = comm.allReduceSum(t.tensor, 1);
             EXPECT_TRUE(s.isOk()) << s.toString();
             for (int i = 0; i < n; i += 997)
               ASSERT_EQ(t.as<float>()[i], 10.0f * (i % 7)) << "rank " << rank;
             EXPECT_TRUE(comm.barrier().isOk());
           });
}

TEST(GlooComm, GroupAllReduceOverDisjointAndUnevenGroups) {
  std::string dir = makeStoreDir();
  runRanks(4, [&](int r) { return fileOptions(dir, r, 4); },
           [&](int rank, Communicator &comm) {
             // Two disjoint pairs on the same channel, like the replicas of
             // two pipeline stages.
             std::vector<int> pair = rank % 2 ? std::vector<int>{1, 3}
                                              : std::vector<int>{0, 2};
             const int n = 1001;
             OwnedTensor t(program::DTYPE_F32, {n});
             for (int i = 0; i < n; ++i)
               t.as<float>()[i] = float(rank) + i;
             Status s = comm.allReduceSumGroup(t.tensor, pair, 5);
             EXPECT_TRUE(s.isOk()) << s.toString();
             float expect0 = rank % 2 ? 4.0f : 2.0f;
             EXPECT_EQ(t.as<float>()[0], expect0);
             EXPECT_EQ(t.as<float>()[n - 1], expect0 + 2.0f * (n - 1));
             // A group of three with fewer elements than ranks (empty chunks).
             if (rank != 2) {
               OwnedTensor small(program::DTYPE_F32, {2});
               small.as<float>()[0] = 1;
               small.as<float>()[1] = float(rank);
               s = comm.allReduceSumGroup(small.tensor, {0, 1, 3}, 6);
               EXPECT_TRUE(s.isOk()) << s.toString();
               EXPECT_EQ(small.as<float>()[0], 3.0f);
               EXPECT_EQ(small.as<float>()[1], 4.0f);
             }
             OwnedTensor x(program::DTYPE_F32, {3});
             Status bad = comm.allReduceSumGroup(x.tensor, {(rank + 1) % 4}, 7);
             EXPECT_NE(bad.getMessage().find("not in its all-reduce group"),
                       std::string::npos) << bad.toString();
             EXPECT_TRUE(comm.barrier().isOk());
           });
}

TEST(GlooComm, SizeMismatchNamesBothSides) {
  std::string dir = makeStoreDir();
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2); },
           [](int rank, Communicator &comm) {
             if (rank == 0) {
               OwnedTensor t(program::DTYPE_F32, {4});
               EXPECT_TRUE(comm.send(t.tensor, 1, 0).isOk());
             } else {
               OwnedTensor t(program::DTYPE_F32, {3});
               Status s = comm.recv(t.tensor, 0, 0);
               EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument);
               EXPECT_NE(s.toString().find("rank 1 peer 0"), std::string::npos) << s.toString();
               EXPECT_NE(s.toString().find("peer sent 16 bytes, this rank expects 12"),
                         std::string::npos) << s.toString();
             }
             comm.barrier();
           });
}

// A header announcing far more than the receive expects (a corrupt or foreign
// header: unsealed links authenticate nothing) is not drained into a buffer of
// the announced size: the link is dropped with an error naming both sizes.
TEST(GlooComm, OversizedHeaderIsNotDrained) {
  std::string dir = makeStoreDir();
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2, 3000ms); },
           [](int rank, Communicator &comm) {
             if (rank == 0) {
               OwnedTensor t(program::DTYPE_F32, {17 << 20}); // 68 MiB
               (void)comm.send(t.tensor, 1, 0); // the receiver never takes the payload
             } else {
               OwnedTensor t(program::DTYPE_F32, {3});
               Status s = comm.recv(t.tensor, 0, 0);
               EXPECT_EQ(s.getCode(), StatusCode::Unavailable) << s.toString();
               EXPECT_NE(s.toString().find("rank 1 peer 0"), std::string::npos) << s.toString();
               EXPECT_NE(s.toString().find("announced a payload of 71303168 bytes, this rank "
                                           "expects 12"),
                         std::string::npos)
                   << s.toString();
             }
           });
}

TEST(GlooComm, RecvTimesOutNamingRankAndPeer) {
  std::string dir = makeStoreDir();
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2, r == 0 ? 400ms : 10000ms); },
           [](int rank, Communicator &comm) {
             if (rank == 0) {
               OwnedTensor t(program::DTYPE_F32, {4});
               auto start = std::chrono::steady_clock::now();
               Status s = comm.recv(t.tensor, 1, 5);
               auto took = std::chrono::steady_clock::now() - start;
               EXPECT_FALSE(s.isOk());
               EXPECT_LT(took, 5s);
               EXPECT_NE(s.toString().find("rank 0 peer 1"), std::string::npos) << s.toString();
               EXPECT_NE(s.toString().find("channel 5"), std::string::npos) << s.toString();
             }
             // Rank 1 never sends; it waits (outside the communicator, which
             // is unusable after a timeout) until rank 0's check is done.
             static std::atomic<bool> done{false};
             if (rank == 0) {
               OwnedTensor t(program::DTYPE_F32, {1});
               Status again = comm.send(t.tensor, 1, 6);
               EXPECT_NE(again.getMessage().find("unusable after an earlier failure"),
                         std::string::npos) << again.toString();
               done = true;
             }
             while (!done)
               std::this_thread::sleep_for(10ms);
           });
}

TEST(GlooComm, RendezvousTimeoutWhenAPeerNeverComes) {
  std::string dir = makeStoreDir();
  auto start = std::chrono::steady_clock::now();
  auto comm = createGlooCommunicator(fileOptions(dir, 0, 2, 500ms));
  auto took = std::chrono::steady_clock::now() - start;
  ASSERT_FALSE(comm.isOk());
  EXPECT_LT(took, 10s);
  EXPECT_NE(comm.getStatus().toString().find("rank 0"), std::string::npos);
  EXPECT_NE(comm.getStatus().toString().find("rendezvous of 2 ranks"), std::string::npos)
      << comm.getStatus().toString();
}

TEST(GlooComm, MissingStoreFolderIsAClearError) {
  auto comm = createGlooCommunicator(fileOptions("/nonexistent/strait", 1, 2));
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.getStatus().toString().find("rank 1"), std::string::npos);
  EXPECT_NE(comm.getStatus().getMessage().find("/nonexistent/strait"), std::string::npos);
}

/// Two-rank program: rank 0 runs Relu and sends it; rank 1 receives and
/// negates; both all-reduce (mean) a buffer the test fills (an input: a
/// gradient accumulator would have to be written by a kernel of the step).
TEST(GlooComm, ExecutorRunsSendRecvAndAllReduceSteps) {
  std::string dir = makeStoreDir();
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2); },
           [](int rank, Communicator &comm) {
             ProgramBuilder b(rank, 2);
             uint32_t act = b.addValue("act", program::DTYPE_F32, {4}, program::ROLE_ACTIVATION);
             uint32_t grad = b.addValue("grad", program::DTYPE_F32, {3}, program::ROLE_INPUT);
             uint32_t x = 0, out = 0;
             if (rank == 0) {
               x = b.addValue("x", program::DTYPE_F32, {4}, program::ROLE_INPUT);
               b.addKernel("Relu", {x}, {act});
               b.addRunStep();
               auto *send = b.get().add_steps()->mutable_send();
               send->set_value_id(act);
               send->set_peer(1);
               send->set_channel(3);
             } else {
               out = b.addValue("out", program::DTYPE_F32, {4}, program::ROLE_OUTPUT);
               auto *recv = b.get().add_steps()->mutable_recv();
               recv->set_value_id(act);
               recv->set_peer(0);
               recv->set_channel(3);
               b.addKernel("Neg", {act}, {out});
               b.addRunStep();
             }
             auto *ar = b.get().add_steps()->mutable_all_reduce();
             ar->add_value_ids(grad);
             ar->set_reduce(program::REDUCE_MEAN);
             ar->set_channel(4);
             BackendRegistry reg;
             registerCpuBackend(reg);
             auto exec = Executor::create(b.get(), reg, &comm);
             ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
             Tensor g = *(*exec)->getValue(grad);
             for (int i = 0; i < 3; ++i)
               g.as<float>()[i] = rank == 0 ? 1.0f : 3.0f;
             if (rank == 0) {
               Tensor xt = *(*exec)->getValue(x);
               const float vals[4] = {-1, 2, -3, 4};
               std::copy(vals, vals + 4, xt.as<float>());
             }
             Status s = (*exec)->run();
             ASSERT_TRUE(s.isOk()) << s.toString();
             EXPECT_EQ(g.as<float>()[2], 2.0f);
             if (rank == 1) {
               Tensor o = *(*exec)->getValue(out);
               EXPECT_EQ(o.as<float>()[0], 0.0f);
               EXPECT_EQ(o.as<float>()[1], -2.0f);
               EXPECT_EQ(o.as<float>()[3], -4.0f);
             }
           });
}

TEST(GlooComm, ExecutorErrorNamesStepAndPeer) {
  std::string dir = makeStoreDir();
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2, r == 1 ? 400ms : 10000ms); },
           [](int rank, Communicator &comm) {
             static std::atomic<bool> done{false};
             if (rank == 0) { // never sends; waits for rank 1 to finish
               while (!done)
                 std::this_thread::sleep_for(10ms);
               return;
             }
             ProgramBuilder b(1, 2);
             uint32_t v = b.addValue("v", program::DTYPE_F32, {2}, program::ROLE_ACTIVATION);
             auto *recv = b.get().add_steps()->mutable_recv();
             recv->set_value_id(v);
             recv->set_peer(0);
             recv->set_channel(2);
             BackendRegistry reg;
             registerCpuBackend(reg);
             auto exec = Executor::create(b.get(), reg, &comm);
             ASSERT_TRUE(exec.isOk());
             Status s = (*exec)->run();
             EXPECT_FALSE(s.isOk());
             EXPECT_NE(s.toString().find("rank 1 device cpu step 0 peer 0"), std::string::npos)
                 << s.toString();
             done = true;
           });
}


TEST(GlooComm, RedisRendezvousThreeRanks) {
  RedisServer redis;
  if (!redis.running())
    GTEST_SKIP() << "redis-server not available";
  std::string prefix = "strait-test-" + std::to_string(::getpid());
  runRanks(3,
           [&](int r) {
             GlooOptions o;
             o.rank = r;
             o.worldSize = 3;
             o.store = StoreKind::Redis;
             o.redisPort = redis.port;
             o.prefix = prefix;
             o.timeout = 10000ms;
             return o;
           },
           [](int rank, Communicator &comm) {
             OwnedTensor t(program::DTYPE_F32, {5});
             for (int i = 0; i < 5; ++i)
               t.as<float>()[i] = float(rank);
             Status s = comm.allReduceSum(t.tensor, 0);
             EXPECT_TRUE(s.isOk()) << s.toString();
             EXPECT_EQ(t.as<float>()[4], 3.0f);
           });
}

/// Four ranks as 2 stages x 2 replicas: each stage averages its gradient
/// over its replicas through an AllReduce step with a rank group.
TEST(GlooComm, ExecutorGroupAllReduceMean) {
  std::string dir = makeStoreDir();
  runRanks(4, [&](int r) { return fileOptions(dir, r, 4); },
           [](int rank, Communicator &comm) {
             ProgramBuilder b(rank, 4);
             uint32_t grad = b.addValue("grad", program::DTYPE_F32, {5}, program::ROLE_INPUT);
             auto *ar = b.get().add_steps()->mutable_all_reduce();
             ar->add_value_ids(grad);
             ar->add_ranks(rank % 2);
             ar->add_ranks(rank % 2 + 2);
             ar->set_reduce(program::REDUCE_MEAN);
             BackendRegistry reg;
             registerCpuBackend(reg);
             auto exec = Executor::create(b.get(), reg, &comm);
             ASSERT_TRUE(exec.isOk()) << exec.getStatus().toString();
             Tensor g = *(*exec)->getValue(grad);
             for (int i = 0; i < 5; ++i)
               g.as<float>()[i] = float(rank * 10 + i);
             Status s = (*exec)->run();
             ASSERT_TRUE(s.isOk()) << s.toString();
             // mean of rank r and r+2: 10 * (r%2 + 1) + i
             EXPECT_EQ(g.as<float>()[3], 10.0f * (rank % 2 + 1) + 3);
           });
}

// --- In-process recovery (docs/runtime.md, "Flaky links") -------------------

TEST(GlooComm, AbortEndsABlockedReceiveAsALinkFailure) {
  std::string dir = makeStoreDir();
  std::atomic<bool> received{false};
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2, 20000ms); },
           [&](int rank, Communicator &comm) {
             if (rank == 0) { // never sends; stays until rank 1 is done
               while (!received)
                 std::this_thread::sleep_for(10ms);
               return;
             }
             std::thread aborter([&] {
               std::this_thread::sleep_for(200ms);
               comm.abort("rank 7 in step 3: test");
             });
             OwnedTensor t(program::DTYPE_F32, {16});
             auto start = std::chrono::steady_clock::now();
             Status s = comm.recv(t.tensor, 0, 3);
             double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                                 .count();
             aborter.join();
             received = true;
             EXPECT_FALSE(s.isOk());
             EXPECT_TRUE(isLinkFailure(s)) << s.toString();
             EXPECT_NE(s.getMessage().find("rank 7 in step 3: test"), std::string::npos)
                 << s.toString();
             EXPECT_LT(waited, 5.0); // not the 20 s timeout
             // Later calls fail at once, and so does a barrier.
             Status again = comm.send(t.tensor, 0, 4);
             EXPECT_TRUE(isLinkFailure(again)) << again.toString();
             EXPECT_TRUE(isLinkFailure(comm.barrier()));
           });
}

TEST(GlooComm, APeerGoneIsALinkFailureASizeMismatchIsNot) {
  std::string dir = makeStoreDir();
  runRanks(2, [&](int r) { return fileOptions(dir, r, 2, 20000ms); },
           [&](int rank, Communicator &comm) {
             OwnedTensor small(program::DTYPE_F32, {4}), big(program::DTYPE_F32, {8});
             if (rank == 0) {
               EXPECT_TRUE(comm.send(big.tensor, 1, 1).isOk());
               return; // its communicator goes: rank 1's next receive sees the link end
             }
             Status mismatch = comm.recv(small.tensor, 0, 1);
             EXPECT_EQ(mismatch.getCode(), StatusCode::InvalidArgument) << mismatch.toString();
             EXPECT_FALSE(isLinkFailure(mismatch));
             Status gone = comm.recv(small.tensor, 0, 2);
             EXPECT_TRUE(isLinkFailure(gone)) << gone.toString();
           });
}

TEST(GlooComm, KeyStoreKeepsTheFirstValueAndWaits) {
  std::string dir = makeStoreDir();
  StatusOr<std::unique_ptr<KeyStore>> a = openKeyStore(fileOptions(dir, 0, 2), "job/recovery");
  StatusOr<std::unique_ptr<KeyStore>> b = openKeyStore(fileOptions(dir, 1, 2), "job/recovery");
  ASSERT_TRUE(a.isOk() && b.isOk()) << a.getStatus().toString();
  StatusOr<bool> absent = (*b)->has("abort/0");
  ASSERT_TRUE(absent.isOk());
  EXPECT_FALSE(*absent);
  std::thread late([&] {
    std::this_thread::sleep_for(100ms);
    EXPECT_TRUE((*a)->set("abort/0", "rank 0 first").isOk());
  });
  StatusOr<std::string> got = (*b)->get("abort/0", 5000ms);
  late.join();
  ASSERT_TRUE(got.isOk()) << got.getStatus().toString();
  EXPECT_EQ(*got, "rank 0 first");
  EXPECT_TRUE((*b)->set("abort/0", "rank 1 second").isOk());
  EXPECT_EQ(*(*b)->get("abort/0", 1000ms), "rank 0 first");
  StatusOr<bool> present = (*b)->has("abort/0");
  EXPECT_TRUE(present.isOk() && *present);
  StatusOr<std::string> missing = (*a)->get("state/0/1", 50ms);
  EXPECT_EQ(missing.getStatus().getCode(), StatusCode::DeadlineExceeded);
  EXPECT_NE(missing.getStatus().getMessage().find("state/0/1"), std::string::npos);
  StatusOr<std::unique_ptr<KeyStore>> bad = openKeyStore(fileOptions(dir + "/none", 0, 2), "x");
  EXPECT_FALSE(bad.isOk());
}

// --- Rendezvous URLs (strait-run --rendezvous) -------------------------------

TEST(Rendezvous, ReadsRedisAndFileUrls) {
  GlooOptions g;
  ASSERT_TRUE(setRendezvous(g, "redis://10.0.0.7:7000", "/job").isOk());
  EXPECT_EQ(g.store, StoreKind::Redis);
  EXPECT_EQ(g.redisHost, "10.0.0.7");
  EXPECT_EQ(g.redisPort, 7000);
  ASSERT_TRUE(setRendezvous(g, "redis://store.example/", "/job").isOk());
  EXPECT_EQ(g.redisHost, "store.example");
  EXPECT_EQ(g.redisPort, 6379); // Redis's own default
  ASSERT_TRUE(setRendezvous(g, "redis://[fd00::5]:6400", "/job").isOk());
  EXPECT_EQ(g.redisHost, "fd00::5");
  EXPECT_EQ(g.redisPort, 6400);
  ASSERT_TRUE(setRendezvous(g, "file:///mnt/shared/rv", "/job").isOk());
  EXPECT_EQ(g.store, StoreKind::File);
  EXPECT_EQ(g.storePath, "/mnt/shared/rv");
  ASSERT_TRUE(setRendezvous(g, "rendezvous", "/job").isOk());
  EXPECT_EQ(g.storePath, "/job/rendezvous"); // relative to the job folder
}

TEST(Rendezvous, RejectsMalformedUrlsNamingWhatIsWrong) {
  const std::pair<const char *, const char *> bad[] = {
      {"redis://host:0", "the port '0' is not a number from 1 to 65535"},
      {"redis://host:65536", "the port '65536'"},
      {"redis://host:12ab", "the port '12ab'"},
      {"redis://host:", "the port ''"},
      {"redis://", "no host"},
      {"redis://[fd00::5", "closing ']'"},
      {"redis://user@host", "a user name without ':PASSWORD'"},
      {"redis://:@host", "an empty password"},
      {"redis://:p%zzx@host", "malformed %XX escape"},
      {"redis://:secret@", "no host"},
      {"redis://:secret@host:99999", "the port '99999'"},
      {"http://host/x", "unknown scheme 'http'"},
      {"file://", "no folder"},
      {"", "empty"},
  };
  for (const auto &[url, why] : bad) {
    GlooOptions g;
    Status s = setRendezvous(g, url, "/job");
    ASSERT_FALSE(s.isOk()) << url;
    EXPECT_EQ(s.getCode(), StatusCode::InvalidArgument) << url;
    EXPECT_NE(s.getMessage().find(why), std::string::npos) << url << ": " << s.getMessage();
    std::string u = url;
    if (u.find('@') == std::string::npos) // else the message hides USER:PASSWORD
      EXPECT_NE(s.getMessage().find("'" + u + "'"), std::string::npos) << s.getMessage();
    else
      EXPECT_NE(s.getMessage().find("'redis://***@" + u.substr(u.rfind('@') + 1) + "'"),
                std::string::npos)
          << s.getMessage();
    EXPECT_EQ(s.getMessage().find("secret"), std::string::npos) << s.getMessage();
  }
}

TEST(Rendezvous, ReadsARedisUserAndPassword) {
  GlooOptions g;
  ASSERT_TRUE(setRendezvous(g, "redis://:s3cret@10.0.0.7:7000", "/job").isOk());
  EXPECT_EQ(g.redisHost, "10.0.0.7");
  EXPECT_EQ(g.redisPort, 7000);
  EXPECT_EQ(g.redisUser, "");
  EXPECT_EQ(g.redisPassword, "s3cret");
  // Redis 6 ACL users; %XX escapes, and an '@' or ':' in the password.
  ASSERT_TRUE(setRendezvous(g, "redis://trainer:a%40b:c@@[fd00::5]", "/job").isOk());
  EXPECT_EQ(g.redisUser, "trainer");
  EXPECT_EQ(g.redisPassword, "a@b:c@");
  EXPECT_EQ(g.redisHost, "fd00::5");
  EXPECT_EQ(g.redisPort, 6379);
  EXPECT_EQ(redisUrlWithoutPassword(g), "redis://[fd00::5]:6379");
  // A URL without one leaves none behind from an earlier URL.
  ASSERT_TRUE(setRendezvous(g, "redis://store.example", "/job").isOk());
  EXPECT_EQ(g.redisPassword, "");
  EXPECT_EQ(g.redisUser, "");
  EXPECT_EQ(redisUrlWithoutPassword(g), "redis://store.example:6379");
}

TEST(Rendezvous, LocalAddressTowardLoopbackIsLoopback) {
  StatusOr<std::string> a = localAddressToward("127.0.0.1", 6379);
  ASSERT_TRUE(a.isOk()) << a.getStatus().toString();
  EXPECT_EQ(a.takeValue(), "127.0.0.1");
  StatusOr<std::string> none = localAddressToward("no-such-host.invalid", 6379);
  ASSERT_FALSE(none.isOk());
  EXPECT_NE(none.getStatus().getMessage().find("no-such-host.invalid"), std::string::npos);
}
