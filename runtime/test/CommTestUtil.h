//===- CommTestUtil.h - Ranks as threads for communicator tests -*- C++ -*-===//
//
// Every rank runs in its own thread with its own Gloo context and TCP device;
// rendezvous goes through a file-store folder (or a private redis-server).
// Shared by the communicator test files.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TEST_COMMTESTUTIL_H
#define STRAIT_RUNTIME_TEST_COMMTESTUTIL_H

#include "TestUtil.h"
#include "strait/runtime/Communicator.h"

#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <gtest/gtest.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

namespace strait {
namespace rt {
namespace test {

/// File-store options of `rank` in a world of `world` ranks.
inline GlooOptions fileStoreOptions(const std::string &dir, int rank, int world,
                                    std::chrono::milliseconds timeout =
                                        std::chrono::milliseconds(20000),
                                    const std::string &prefix = "strait") {
  GlooOptions o;
  o.rank = rank;
  o.worldSize = world;
  o.store = StoreKind::File;
  o.storePath = dir;
  o.timeout = timeout;
  o.prefix = prefix;
  return o;
}

/// Connects `world` ranks (one thread each) with options(rank) and runs
/// body(rank, comm) on each. With `barrierAfter`, the ranks meet at a
/// barrier before tearing down, so nobody closes its pairs while another
/// rank still connects or waits (tests of failures turn it off).
inline void runGlooRanks(int world, const std::function<GlooOptions(int)> &options,
                         const std::function<void(int, Communicator &)> &body,
                         bool barrierAfter = true) {
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      auto comm = createGlooCommunicator(options(r));
      if (!comm.isOk()) {
        ADD_FAILURE() << comm.getStatus().toString();
        return;
      }
      body(r, **comm);
      if (barrierAfter) {
        Status s = (*comm)->barrier();
        EXPECT_TRUE(s.isOk()) << s.toString();
      }
    });
  for (auto &t : threads)
    t.join();
}

/// A private redis-server on a free-ish port (distinct `offset`s: distinct
/// ports within one process), stopped by pid at the end.
class RedisServer {
public:
  explicit RedisServer(int offset = 0) {
    if (std::system("command -v redis-server > /dev/null 2>&1") != 0)
      return;
    port = 20000 + static_cast<int>((::getpid() + offset) % 20000);
    pidFile = testing::TempDir() + "/strait-redis-" + std::to_string(port) + ".pid";
    std::string cmd = "redis-server --port " + std::to_string(port) +
                      " --bind 127.0.0.1 --save '' --daemonize yes --pidfile " +
                      pidFile + " > /dev/null 2>&1";
    if (std::system(cmd.c_str()) != 0)
      return;
    for (int i = 0; i < 50 && pid <= 0; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      std::ifstream(pidFile) >> pid;
    }
  }
  ~RedisServer() {
    if (pid > 0)
      ::kill(pid, SIGTERM);
  }
  bool running() const { return pid > 0; }
  int port = 0;

private:
  std::string pidFile;
  pid_t pid = 0;
};

} // namespace test
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TEST_COMMTESTUTIL_H
