//===- LinkTiming.h - Timed transfers per peer, for re-planning -*- C++ -*-===//
//
// What a rank's links delivered, for `strait-run --replan` (docs/runtime.md,
// "Re-planning when links change"). The Gloo communicator records transfers
// whose time is the link's and not a peer's compute:
//  - the payload of a point-to-point message on the receiving side, from
//    the header's arrival (the sender posted header and payload together;
//    Gloo writes the payload once the receive is posted) to its end; the
//    sender's clock would stop when the bytes reach its socket buffer;
//  - each all-gather step of a ring all-reduce (every rank of the ring has
//    finished its reduce-scatter, so both ends are inside the collective);
//  - the payloads of a compressed all-reduce's exchange, from the arrival
//    of their size on, as a message's.
// Transfers under kLinkTimingMinBytes give no sample: their time is mostly
// latency and the jitter of a loaded machine. The worker takes the sums
// after every iteration and prints them as `link PEER:BYTES:SECONDS,...`.
//
// Process-wide: a rank has one Gloo communicator (a hybrid one wraps it for
// the slow links), so the samples live in one table, not in the
// Communicator interface.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LINKTIMING_H
#define STRAIT_RUNTIME_LINKTIMING_H

#include <cstdint>
#include <map>

namespace strait {
namespace rt {

/// Smallest transfer (bytes) that gives a throughput sample.
constexpr uint64_t kLinkTimingMinBytes = 64 * 1024;

struct LinkTiming {
  uint64_t bytes = 0;   ///< timed bytes
  double seconds = 0;   ///< time those bytes took on the link
  uint32_t transfers = 0;
};

/// Adds one timed transfer to `peer` (ignored below kLinkTimingMinBytes).
void recordLinkTiming(int peer, uint64_t bytes, double seconds);

/// The sums per peer since the previous call; resets them.
std::map<int, LinkTiming> takeLinkTimings();

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LINKTIMING_H
