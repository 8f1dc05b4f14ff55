//===- seal_bench.cpp - Cost of sealed links (docs/runtime.md) -------------===//
//
// 1. Sealing alone: XChaCha20-Poly1305 seal and open (LinkSealer, one
//    thread) of buffers of 64 KiB .. 16 MiB, in GB/s and Gbit/s, against the
//    WAN link rates of the scenarios (examples/clusters: 0.05 .. 10 Gbit/s
//    between sites).
// 2. Over loopback, plain and sealed in the same run (alternating rounds,
//    best of each): send/recv throughput between two ranks and the ring
//    all-reduce of 2 and 3 ranks (ranks are threads of this process, each with
//    its own Gloo context and TCP device, like the communicator tests).
// Usage: strait-seal-bench [--rounds R] [--mib M]
//
//===----------------------------------------------------------------------===//
#include "Seal.h"
#include "strait/runtime/Communicator.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace strait;
using namespace strait::rt;

namespace {

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void sealingAlone() {
  LinkSecret secret{};
  for (size_t i = 0; i < secret.size(); ++i)
    secret[i] = static_cast<uint8_t>(i * 7 + 1);
  std::vector<LinkSalt> salts = {randomLinkSalt(), randomLinkSalt()};
  LinkSealer a(secret, "bench", 0, salts), b(secret, "bench", 1, salts);
  std::printf("sealing alone (one thread): size, seal GB/s, open GB/s, open Gbit/s\n");
  for (size_t bytes : {size_t(64) << 10, size_t(1) << 20, size_t(16) << 20}) {
    std::vector<uint8_t> plain(bytes, 0x5a), wire(bytes + kSealTagBytes), out(bytes);
    int reps = static_cast<int>(std::max<size_t>(4, (size_t(512) << 20) / bytes));
    double t0 = now();
    for (int r = 0; r < reps; ++r)
      a.seal(1, 9, r, plain.data(), bytes, wire.data());
    double t1 = now();
    bool ok = true;
    a.seal(1, 9, 0, plain.data(), bytes, wire.data()); // opened `reps` times below
    double t2 = now();
    for (int r = 0; r < reps; ++r)
      ok &= b.open(0, 9, 0, wire.data(), bytes, out.data());
    double t3 = now();
    double total = double(bytes) * reps;
    std::printf("  %6zu KiB  %6.2f  %6.2f  %6.1f%s\n", bytes >> 10, total / (t1 - t0) / 1e9,
                total / (t3 - t2) / 1e9, total * 8 / (t3 - t2) / 1e9, ok ? "" : "  (VERIFY FAILED)");
  }
}

/// Runs body(rank, comm) on `world` threads; plain or sealed with `secret`.
void runRanks(int world, const std::string &secret, int run,
              const std::function<void(int, Communicator &)> &body) {
  char tmpl[] = "/tmp/strait-seal-bench-XXXXXX";
  std::string dir = ::mkdtemp(tmpl);
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      GlooOptions o;
      o.rank = r;
      o.worldSize = world;
      o.storePath = dir;
      o.prefix = "bench" + std::to_string(run);
      o.linkSecretFile = secret;
      auto comm = createGlooCommunicator(o);
      if (!comm.isOk()) {
        std::fprintf(stderr, "%s\n", comm.getStatus().toString().c_str());
        std::exit(1);
      }
      body(r, **comm);
      (*comm)->barrier();
    });
  for (auto &t : threads)
    t.join();
}

/// MB/s of `bytes` moved per repetition, best of the rounds.
struct Best {
  double plain = 0, sealed = 0;
};

void loopback(int rounds, size_t mib) {
  char tmpl[] = "/tmp/strait-seal-key-XXXXXX";
  std::string keyDir = ::mkdtemp(tmpl), key = keyDir + "/link.key";
  if (!writeLinkSecretFile(key).isOk())
    std::exit(1);
  size_t n = (mib << 20) / sizeof(float);
  struct Case {
    const char *name;
    int world;
    bool allReduce;
  } cases[] = {{"send/recv, 2 ranks", 2, false},
               {"all-reduce, 2 ranks", 2, true},
               {"all-reduce, 3 ranks", 3, true}};
  std::printf("loopback, %zu MiB f32 tensors, best of %d rounds: plain MB/s, sealed MB/s, "
              "sealed/plain\n",
              mib, rounds);
  int run = 0;
  for (const Case &c : cases) {
    Best best;
    for (int round = 0; round < rounds; ++round)
      for (int sealed = 0; sealed < 2; ++sealed) {
        std::vector<double> rate(c.world);
        runRanks(c.world, sealed ? key : "", run++, [&](int rank, Communicator &comm) {
          OwnedTensor t(program::DTYPE_F32, {static_cast<int64_t>(n)});
          std::fill(t.as<float>(), t.as<float>() + n, 1.0f + rank);
          const int reps = 4;
          comm.barrier();
          double t0 = now();
          for (int i = 0; i < reps; ++i) {
            Status s = c.allReduce ? comm.allReduceSum(t.tensor, 1)
                       : rank == 0 ? comm.send(t.tensor, 1, 1)
                                   : comm.recv(t.tensor, 0, 1);
            if (!s.isOk()) {
              std::fprintf(stderr, "%s\n", s.toString().c_str());
              std::exit(1);
            }
          }
          rate[rank] = double(n * sizeof(float)) * reps / (now() - t0) / 1e6;
        });
        double r = *std::min_element(rate.begin(), rate.end());
        double &b = sealed ? best.sealed : best.plain;
        b = std::max(b, r);
      }
    std::printf("  %-22s %8.0f %8.0f   %.2f\n", c.name, best.plain, best.sealed,
                best.sealed / best.plain);
  }
  ::unlink(key.c_str());
  ::rmdir(keyDir.c_str());
}

} // namespace

int main(int argc, char **argv) {
  int rounds = 3;
  size_t mib = 64;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--rounds")
      rounds = std::atoi(argv[i + 1]);
    else if (a == "--mib")
      mib = std::strtoull(argv[i + 1], nullptr, 10);
  }
  if (!initSodium().isOk())
    return 1;
  sealingAlone();
  loopback(rounds, mib);
  return 0;
}
