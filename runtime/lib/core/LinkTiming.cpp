//===- LinkTiming.cpp - Timed transfers per peer --------------------------===//
#include "strait/runtime/LinkTiming.h"

#include <mutex>

namespace strait {
namespace rt {

namespace {
std::mutex timingMutex;
std::map<int, LinkTiming> timings;
} // namespace

void recordLinkTiming(int peer, uint64_t bytes, double seconds) {
  if (bytes < kLinkTimingMinBytes || !(seconds > 0))
    return;
  std::lock_guard<std::mutex> lock(timingMutex);
  LinkTiming &t = timings[peer];
  t.bytes += bytes;
  t.seconds += seconds;
  ++t.transfers;
}

std::map<int, LinkTiming> takeLinkTimings() {
  std::lock_guard<std::mutex> lock(timingMutex);
  std::map<int, LinkTiming> out;
  out.swap(timings);
  return out;
}

} // namespace rt
} // namespace strait
