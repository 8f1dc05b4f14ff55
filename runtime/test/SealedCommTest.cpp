//===- SealedCommTest.cpp - Authenticated, encrypted links between ranks --===//
//
// GlooOptions::linkSecretFile seals every buffer between ranks (Seal.h):
//  - sealed send/recv, coded transfers, deferred sends and all-reduces
//    (world 3, odd sizes, exact and compressed) give exactly what the plain
//    communicator gives;
//  - a raw Gloo rank that receives what a sealed rank sends sees ciphertext,
//    16 bytes longer per buffer, not the payload;
//  - a rank with another secret, a tampered buffer and a replayed buffer fail
//    with an authentication error naming the ranks and the channel, within
//    the (short) timeout; a sealed rank facing a plain one fails at connect;
//  - the salts also travel through Redis, and the hybrid communicator's
//    cross-domain traffic goes sealed over its (sealed) Gloo side;
//  - the secret file's errors name the file.
//
//===----------------------------------------------------------------------===//
#include "CommTestUtil.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/LinkSecret.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <future>
#include <gtest/gtest.h>
#include <sys/stat.h>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;
using namespace std::chrono_literals;

namespace {

constexpr const char *kSecretA =
    "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff";
constexpr const char *kSecretB =
    "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100";

std::string writeFile(const std::string &dir, const std::string &name,
                      const std::string &text, mode_t mode = 0600) {
  std::string path = dir + "/" + name;
  std::ofstream(path) << text;
  ::chmod(path.c_str(), mode);
  return path;
}

/// A secret file holding `hex` in a fresh folder.
std::string secretFile(const char *hex) {
  return writeFile(makeTempDir("strait-secret"), "link.key", std::string(hex) + "\n");
}

float pattern(int rank, int64_t i) {
  return static_cast<float>((rank + 1) * 0.37 + std::sin(0.1 * double(i)) * (rank + 2));
}

OwnedTensor filled(int64_t n, int rank) {
  OwnedTensor t(program::DTYPE_F32, {n});
  for (int64_t i = 0; i < n; ++i)
    t.as<float>()[i] = pattern(rank, i);
  return t;
}

std::vector<float> values(const OwnedTensor &t) {
  return std::vector<float>(t.as<float>(), t.as<float>() + t.tensor.numel());
}

program::CodecParams codecOf(program::Codec c) {
  program::CodecParams p;
  p.set_codec(c);
  p.set_topk_ratio(0.05f);
  return p;
}

/// Runs body on `world` ranks, sealed with `secret` (nullptr: plain).
void runRanks(int world, const std::string &secret,
              const std::function<void(int, Communicator &)> &body) {
  std::string dir = makeTempDir("strait-sealed");
  runGlooRanks(world, [&](int r) {
    GlooOptions o = fileStoreOptions(dir, r, world);
    o.linkSecretFile = secret;
    return o;
  }, body);
}

/// What every rank ends with in an exchange: send/recv, coded send/recv and
/// crossing deferred sends between ranks 0 and 1, plus exact and compressed
/// all-reduces over the whole world, for each size.
using Results = std::vector<std::vector<std::vector<float>>>; // [rank][result]

Results exchange(int world, const std::string &secret) {
  Results out(world);
  runRanks(world, secret, [&](int rank, Communicator &comm) {
    auto keep = [&](const OwnedTensor &t) { out[rank].push_back(values(t)); };
    // 600001 floats: sealed in 3 chunks of at most 1 MiB.
    for (int64_t n : {1, 7, 1001, 65537, 600001}) {
      uint32_t ch = static_cast<uint32_t>(n % 97);
      if (rank < 2) {
        int peer = 1 - rank;
        OwnedTensor mine = filled(n, rank), got(program::DTYPE_F32, {n});
        // Plain and int8-coded send/recv: rank 0 first sends, rank 1 first receives.
        for (program::Codec c : {program::CODEC_NONE, program::CODEC_INT8}) {
          Status s = rank == 0 ? comm.sendCoded(mine.tensor, peer, ch, codecOf(c), nullptr)
                               : comm.recvCoded(got.tensor, peer, ch, codecOf(c));
          ASSERT_TRUE(s.isOk()) << s.toString();
          if (rank == 1)
            keep(got);
        }
        // Crossing deferred sends (topk-coded and plain).
        for (program::Codec c : {program::CODEC_TOPK, program::CODEC_NONE}) {
          Status s = comm.sendDeferred(mine.tensor, peer, ch + 200, codecOf(c), nullptr);
          ASSERT_TRUE(s.isOk()) << s.toString();
          s = comm.recvDeferred(got.tensor, peer, ch + 200, codecOf(c));
          ASSERT_TRUE(s.isOk()) << s.toString();
          ASSERT_TRUE(comm.flushSends().isOk());
          keep(got);
        }
      }
      for (program::Codec c : {program::CODEC_NONE, program::CODEC_INT8, program::CODEC_TOPK}) {
        OwnedTensor t = filled(n, rank);
        AllReduceOptions ar;
        ar.codec = codecOf(c);
        Status s = comm.allReduce(t.tensor, ch + 400, ar);
        ASSERT_TRUE(s.isOk()) << s.toString();
        keep(t);
      }
    }
  });
  return out;
}

} // namespace

// Every transfer kind gives, bit for bit, the plain communicator's result,
// and the exact parts equal an independent reference.
TEST(SealedComm, TransfersGiveThePlainResults) {
  std::string secret = secretFile(kSecretA);
  Results plain = exchange(3, ""), sealed = exchange(3, secret);
  for (int r = 0; r < 3; ++r) {
    ASSERT_EQ(sealed[r].size(), plain[r].size()) << "rank " << r;
    ASSERT_FALSE(sealed[r].empty());
    for (size_t i = 0; i < plain[r].size(); ++i)
      EXPECT_EQ(sealed[r][i], plain[r][i]) << "rank " << r << " result " << i;
  }
  // Rank 1's first result: rank 0's tensor of 1 element sent plain.
  EXPECT_EQ(sealed[1][0], std::vector<float>{pattern(0, 0)});
  // Rank 2's first result: the exact all-reduce of 1 element.
  double sum = pattern(0, 0) + pattern(1, 0) + pattern(2, 0);
  EXPECT_NEAR(sealed[2][0][0], sum, 1e-5);
}

// A raw Gloo rank in the sealed rank's place sees, for a header and a
// payload, exactly 16 more bytes per chunk of 1 MiB, and ciphertext instead
// of the bytes.
TEST(SealedComm, TheWireCarriesCiphertext) {
  std::string dir = makeTempDir("strait-sealed"), secret = secretFile(kSecretA);
  constexpr int64_t n = (1 << 18) + 4099; // 2 chunks: 1 MiB and 16396 bytes
  constexpr uint32_t channel = 3;
  OwnedTensor payload = filled(n, 0);
  std::vector<uint8_t> header(16 + 16), body(n * 4 + 2 * 16);
  std::promise<void> received;
  std::thread sealedRank([&] {
    GlooOptions o = fileStoreOptions(dir, 0, 2);
    o.linkSecretFile = secret;
    auto comm = createGlooCommunicator(o);
    ASSERT_TRUE(comm.isOk()) << comm.getStatus().toString();
    Status s = (*comm)->send(payload.tensor, 1, channel);
    EXPECT_TRUE(s.isOk()) << s.toString();
    TrafficCounters t = (*comm)->takeTraffic();
    EXPECT_EQ(t.sent[1], header.size() + body.size());
    received.get_future().wait(); // the raw rank has the bytes: close
  });
  // The raw rank: publishes a salt as a sealed rank would, then receives the
  // header (slot 2c) and the payload (slot 2c+1) of a send.
  try {
    gloo::rendezvous::FileStore store(dir);
    gloo::rendezvous::PrefixStore prefixed("strait", store);
    prefixed.set("strait-link-salt-1", std::vector<char>(32, 'x'));
    auto ctx = std::make_shared<gloo::rendezvous::Context>(1, 2);
    gloo::transport::tcp::attr attr;
    attr.hostname = "127.0.0.1";
    ctx->setTimeout(20000ms);
    auto device = gloo::transport::tcp::CreateDevice(attr);
    ctx->connectFullMesh(prefixed, device);
    auto hb = ctx->createUnboundBuffer(header.data(), header.size());
    auto pb = ctx->createUnboundBuffer(body.data(), (1 << 20) + 16);
    auto pb2 = ctx->createUnboundBuffer(body.data() + (1 << 20) + 16, body.size() - (1 << 20) - 16);
    hb->recv(0, 2 * channel);
    pb->recv(0, 2 * channel + 1);
    pb2->recv(0, 2 * channel + 1);
    EXPECT_TRUE(hb->waitRecv(20000ms));
    EXPECT_TRUE(pb->waitRecv(20000ms));
    EXPECT_TRUE(pb2->waitRecv(20000ms));
    received.set_value();
    sealedRank.join();
  } catch (const std::exception &e) {
    ADD_FAILURE() << e.what();
    received.set_value();
    sealedRank.join();
  }
  // The plain header starts with "STRAIT01" and the count; neither shows.
  EXPECT_EQ(std::search(header.begin(), header.end(), "10TIARTS", "10TIARTS" + 8), header.end());
  uint64_t count = n * 4;
  EXPECT_EQ(std::search(header.begin(), header.end(), reinterpret_cast<uint8_t *>(&count),
                        reinterpret_cast<uint8_t *>(&count) + 8),
            header.end());
  // About 1 byte in 256 matches by chance; the plaintext would match all.
  const uint8_t *plain = static_cast<const uint8_t *>(payload.tensor.data);
  int64_t same = 0;
  for (int64_t i = 0; i < n * 4; ++i) // chunk 2 follows chunk 1's tag
    same += body[i < (1 << 20) ? i : i + 16] == plain[i];
  EXPECT_LT(same, n * 4 / 50) << same << " of " << n * 4 << " bytes travelled in clear";
}

namespace {

/// Rank 0 sends `messages` tensors on channel 7, rank 1 receives them; rank
/// r runs with secret[r] and options tweak(r). Returns each rank's statuses.
std::vector<std::vector<Status>> sendAndReceive(const std::string (&secret)[2], int messages,
                                                const std::function<void(int, GlooOptions &)> &tweak) {
  std::string dir = makeTempDir("strait-sealed");
  std::vector<std::vector<Status>> out(2);
  runGlooRanks(
      2,
      [&](int r) {
        GlooOptions o = fileStoreOptions(dir, r, 2, 2000ms);
        o.linkSecretFile = secret[r];
        tweak(r, o);
        return o;
      },
      [&](int rank, Communicator &comm) {
        OwnedTensor t = filled(1001, 0);
        for (int m = 0; m < messages; ++m) {
          Status s = rank == 0 ? comm.send(t.tensor, 1, 7) : comm.recv(t.tensor, 0, 7);
          out[rank].push_back(s);
          if (!s.isOk())
            break;
        }
        if (rank == 1 && out[1].back().isOk())
          EXPECT_EQ(values(t), values(filled(1001, 0)));
      },
      /*barrierAfter=*/false);
  return out;
}

void expectAuthFailure(const Status &s) {
  std::string text = s.toString();
  EXPECT_FALSE(s.isOk());
  EXPECT_NE(text.find("authentication failed"), std::string::npos) << text;
  EXPECT_NE(text.find("from rank 0 to rank 1"), std::string::npos) << text;
  EXPECT_NE(text.find("channel 7"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1"), std::string::npos) << text;
}

} // namespace

TEST(SealedComm, AnotherSecretFailsAuthentication) {
  std::string secrets[2] = {secretFile(kSecretA), secretFile(kSecretB)};
  auto start = std::chrono::steady_clock::now();
  auto st = sendAndReceive(secrets, 1, [](int, GlooOptions &) {});
  ASSERT_EQ(st[1].size(), 1u);
  expectAuthFailure(st[1][0]);
  EXPECT_FALSE(st[0][0].isOk()) << "the sender's payload is never received";
  EXPECT_LT(std::chrono::steady_clock::now() - start, 15s);
}

TEST(SealedComm, TamperedBufferFailsAuthentication) {
  std::string secret = secretFile(kSecretA), secrets[2] = {secret, secret};
  // Buffers 0 and 1 are the first message's header and payload: flip a bit
  // of the second message's payload (buffer 3).
  auto st = sendAndReceive(secrets, 2, [](int r, GlooOptions &o) {
    if (r == 0)
      o.testTamperSealedSend = 3;
  });
  ASSERT_EQ(st[1].size(), 2u);
  EXPECT_TRUE(st[1][0].isOk()) << st[1][0].toString();
  expectAuthFailure(st[1][1]);
  EXPECT_NE(st[1][1].toString().find("4004-byte buffer number 1"), std::string::npos)
      << st[1][1].toString();
}

TEST(SealedComm, ReplayedBufferFailsAuthentication) {
  std::string secret = secretFile(kSecretA), secrets[2] = {secret, secret};
  // The second message's header (buffer 2) is the first one's ciphertext
  // again, a valid buffer of the same link and slot, one message late.
  auto st = sendAndReceive(secrets, 2, [](int r, GlooOptions &o) {
    if (r == 0)
      o.testReplaySealedSend = 2;
  });
  ASSERT_EQ(st[1].size(), 2u);
  EXPECT_TRUE(st[1][0].isOk()) << st[1][0].toString();
  expectAuthFailure(st[1][1]);
}

// The control: without a hook the same two messages arrive.
TEST(SealedComm, UntamperedMessagesArrive) {
  std::string secret = secretFile(kSecretA), secrets[2] = {secret, secret};
  auto st = sendAndReceive(secrets, 2, [](int, GlooOptions &) {});
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(st[r].size(), 2u);
    for (const Status &s : st[r])
      EXPECT_TRUE(s.isOk()) << s.toString();
  }
}

// A sealed rank facing a plain one fails at connect, naming the plain rank.
TEST(SealedComm, PlainPeerFailsAtConnect) {
  std::string dir = makeTempDir("strait-sealed"), secret = secretFile(kSecretA);
  Status sealedStatus;
  std::thread plain([&] {
    auto comm = createGlooCommunicator(fileStoreOptions(dir, 1, 2, 2000ms));
    ASSERT_TRUE(comm.isOk()) << comm.getStatus().toString();
    OwnedTensor t(program::DTYPE_F32, {5});
    EXPECT_FALSE((*comm)->recv(t.tensor, 0, 1).isOk());
  });
  GlooOptions o = fileStoreOptions(dir, 0, 2, 2000ms);
  o.linkSecretFile = secret;
  auto comm = createGlooCommunicator(o);
  ASSERT_FALSE(comm.isOk());
  std::string text = comm.getStatus().toString();
  EXPECT_NE(text.find("rank 1 published no link salt"), std::string::npos) << text;
  plain.join();
}

// The hybrid communicator (NCCL inside a host in strait-run; a plain Gloo
// world here) seals what crosses domains over its sealed slow side: sums are
// right, and a 100-float send across domains arrives as 32 + 416 bytes
// (header and payload, 16 more each), not 16 + 400.
TEST(SealedComm, HybridSealsItsSlowSide) {
  std::string dir = makeTempDir("strait-sealed"), secret = secretFile(kSecretA);
  std::vector<int> domainOf = {0, 0, 1, 1};
  std::vector<uint64_t> received(4);
  std::vector<std::thread> threads;
  for (int r = 0; r < 4; ++r)
    threads.emplace_back([&, r] {
      GlooOptions slowOptions = fileStoreOptions(dir, r, 4, 20000ms, "slow");
      slowOptions.linkSecretFile = secret;
      auto slow = createGlooCommunicator(slowOptions);
      auto fast = createGlooCommunicator(fileStoreOptions(dir, r, 4, 20000ms, "fast"));
      ASSERT_TRUE(slow.isOk() && fast.isOk());
      auto hybrid = createHybridCommunicator(std::move(*slow), std::move(*fast), domainOf);
      ASSERT_TRUE(hybrid.isOk()) << hybrid.getStatus().toString();
      Communicator &comm = **hybrid;
      OwnedTensor t(program::DTYPE_F32, {1001});
      std::fill(t.as<float>(), t.as<float>() + 1001, float(r + 1));
      Status s = comm.allReduceSum(t.tensor, 1);
      EXPECT_TRUE(s.isOk()) << s.toString();
      EXPECT_EQ(t.as<float>()[1000], 10.0f) << "rank " << r;
      comm.takeTraffic();
      OwnedTensor x = filled(100, 1);
      if (r == 1 || r == 2) {
        s = r == 1 ? comm.send(x.tensor, 2, 5) : comm.recv(x.tensor, 1, 5);
        EXPECT_TRUE(s.isOk()) << s.toString();
        EXPECT_EQ(values(x), values(filled(100, 1)));
      }
      received[r] = comm.takeTraffic().received[1];
      EXPECT_TRUE(comm.barrier().isOk());
    });
  for (auto &t : threads)
    t.join();
  EXPECT_EQ(received[2], 32u + 416u);
}

// Across machines the salts travel through Redis: three sealed ranks.
TEST(SealedComm, RedisRendezvousThreeRanks) {
  RedisServer redis(/*offset=*/7);
  if (!redis.running())
    GTEST_SKIP() << "redis-server not available";
  std::string secret = secretFile(kSecretA);
  runGlooRanks(
      3,
      [&](int r) {
        GlooOptions o;
        o.rank = r;
        o.worldSize = 3;
        o.store = StoreKind::Redis;
        o.redisPort = redis.port;
        o.prefix = "strait-sealed-" + std::to_string(::getpid());
        o.timeout = 10000ms;
        o.linkSecretFile = secret;
        return o;
      },
      [](int rank, Communicator &comm) {
        OwnedTensor t(program::DTYPE_F32, {5});
        std::fill(t.as<float>(), t.as<float>() + 5, float(rank));
        Status s = comm.allReduceSum(t.tensor, 0);
        EXPECT_TRUE(s.isOk()) << s.toString();
        EXPECT_EQ(t.as<float>()[4], 3.0f);
      });
}

TEST(LinkSecretFile, WriteThenRead) {
  std::string path = makeTempDir("strait-secret") + "/new.key";
  ASSERT_TRUE(writeLinkSecretFile(path).isOk());
  struct stat st;
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(st.st_size, 65);
  StatusOr<LinkSecret> a = readLinkSecretFile(path);
  ASSERT_TRUE(a.isOk()) << a.getStatus().toString();
  Status again = writeLinkSecretFile(path);
  EXPECT_FALSE(again.isOk());
  EXPECT_NE(again.toString().find("exists"), std::string::npos) << again.toString();
  // Two fresh secrets differ.
  std::string other = makeTempDir("strait-secret") + "/other.key";
  ASSERT_TRUE(writeLinkSecretFile(other).isOk());
  EXPECT_NE(*a, *readLinkSecretFile(other));
  // The bytes are the hex of the file.
  StatusOr<LinkSecret> known = readLinkSecretFile(secretFile(kSecretA));
  ASSERT_TRUE(known.isOk());
  EXPECT_EQ((*known)[0], 0x00);
  EXPECT_EQ((*known)[1], 0x11);
  EXPECT_EQ((*known)[15], 0xff);
}

TEST(LinkSecretFile, ErrorsNameTheFile) {
  std::string dir = makeTempDir("strait-secret");
  struct Case {
    std::string path, expect;
  } cases[] = {
      {dir + "/missing.key", "No such file"},
      {writeFile(dir, "short.key", "0011\n"), "exactly 64 hex characters"},
      {writeFile(dir, "nothex.key", std::string(63, 'a') + "g\n"), "exactly 64 hex"},
      {writeFile(dir, "long.key", std::string(66, 'a') + "\n"), "exactly 64 hex"},
      {writeFile(dir, "open.key", std::string(kSecretA) + "\n", 0644), "chmod 600"},
  };
  for (const Case &c : cases) {
    StatusOr<LinkSecret> s = readLinkSecretFile(c.path);
    ASSERT_FALSE(s.isOk()) << c.path;
    std::string text = s.getStatus().toString();
    EXPECT_NE(text.find("'" + c.path + "'"), std::string::npos) << text;
    EXPECT_NE(text.find(c.expect), std::string::npos) << text;
  }
  // The communicator fails before the rendezvous, naming the file.
  GlooOptions o = fileStoreOptions(dir, 0, 2, 1000ms);
  o.linkSecretFile = dir + "/short.key";
  auto comm = createGlooCommunicator(o);
  ASSERT_FALSE(comm.isOk());
  EXPECT_NE(comm.getStatus().toString().find("short.key"), std::string::npos);
}
