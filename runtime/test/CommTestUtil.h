//===- CommTestUtil.h - Ranks as threads for communicator tests -*- C++ -*-===//
//
// Every rank runs in its own thread with its own Gloo context and TCP device;
// rendezvous goes through a file-store folder. Shared by the communicator
// test files.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TEST_COMMTESTUTIL_H
#define STRAIT_RUNTIME_TEST_COMMTESTUTIL_H

#include "TestUtil.h"
#include "strait/runtime/Communicator.h"

#include <chrono>
#include <functional>
#include <gtest/gtest.h>
#include <thread>
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

} // namespace test
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TEST_COMMTESTUTIL_H
