//===- AdaptiveRatio.h - Top-k ratio that follows the link ------*- C++ -*-===//
//
// The online top-k ratio of one stream of point-to-point transfers (one
// value sent on one channel to one peer, every micro-batch): AdaTopK-like,
// the ratio follows the throughput the link actually delivers instead of the
// cluster file's nominal bandwidth (docs/runtime.md, "Adaptive top-k").
//
// What the sender can see. A coded send over Gloo (GlooCommunicator) posts a
// 16-byte header and the payload; the transport writes the payload only
// once the receiver has posted its receive for it, which it does when the
// header arrived, and the header travels behind the previous payload of the
// same pair. So a blocking send returns about L after the link has carried
// the previous payload, where L (encode, posting, one round trip) is what a
// send costs on an idle link, plus the time the receiver took to post its
// receive for the header (the transport reports that phase; the busy test
// leaves it out: a receiver busy computing is not a slow link). The controller thus gets, per transfer i, the
// time its value was ready to go (the executor queued the send), the send's
// start and end times and its payload bytes b_i, and derives:
//   W_i = end_i - start_i       the send's time; L = min W over the last
//                               256 transfers;
//   gap_i = ready_i - free_{i-1}
//                               the sender's compute for value i: since it
//                               was free after handing over value i-1
//                               (free = end when the send ran on the
//                               computing thread, ready when a
//                               communication thread took it; with overlap
//                               a send may start after ready, when that
//                               thread is free);
//   busy_i = W_i > L + slack, or start_i - ready_i > slack
//                               (slack: 1 ms, L / 4 or 15 % of the budget)
//                               the link was still carrying b_{i-1} when
//                               send i started (or send i waited in the
//                               queue behind it);
//   drain_i = end_i - end_{i-1} - L
//                               when busy: the time the link took for
//                               b_{i-1} (a sample of seconds per byte,
//                               smoothed by an EWMA); when idle: an upper
//                               bound on it.
// Budget: the stream's transfer should take no longer than the sender's
// compute per value, so that the link keeps pace with the compute (the
// compile-time codec choice uses the same target, the stage's forward and
// backward compute per micro-batch from the cost model:
// docs/distribution-dialect.md, dist-insert-compression):
//   budget = headroom x the compute per value the executor measured in the
//            last iteration (setComputePerValue: its kernel time over its
//            micro-batches), before the first iteration's end
//            headroom x min gap over the window.
// Next ratio: the largest k whose payload (16 + 8 + k x the last payload's
// bytes per kept value) takes at most the budget at the estimated seconds
// per byte, clamped to [ratioMin, ratioMax], rising at most by maxGrowth per
// transfer (falling at once), changes under deadBand ignored. A link never
// seen busy rises by maxGrowth per transfer (it keeps up); after probeAfter
// idle transfers in a row the estimate is assumed probe times faster per
// transfer, so a link that became faster is found. Hence the steady state
// stays in a band [k*, about 1.5 k*] where k* fits the budget: the ratio
// rises by probing until the link is busy by more than the slack (k above
// about (1 + 0.15) k* / headroom), and a busy sample brings it back to k*.
//
// Pure logic on injected times (seconds, any epoch): deterministic, unit
// tested in runtime/test/AdaptiveRatioTest.cpp.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_ADAPTIVERATIO_H
#define STRAIT_RUNTIME_ADAPTIVERATIO_H

#include <cstdint>
#include <deque>

namespace strait {
namespace rt {

struct AdaptiveRatioConfig {
  double ratioMin = 0.001, ratioMax = 1.0;
  double initial = 0.1;     // ratio of the first transfer
  double headroom = 0.8;    // budget = headroom x compute per value (or smallest gap)
  int window = 8;           // transfers over which the smallest gap is taken
  /// Transfers over which L (the idle send time) is the minimum: long,
  /// because when the budget lets the link stay busy every send waits
  /// and only an early or occasional idle one shows L.
  int baseWindow = 256;
  double alpha = 0.3;       // EWMA weight of a new seconds-per-byte sample
  double busySlack = 1e-3;  // s: busy when W > L + max(busySlack, L / 4, budget x 0.15)
  double maxGrowth = 1.25;  // largest rise of the ratio per transfer
  int probeAfter = 4;       // idle transfers in a row before probing
  double probe = 1.03;      // assumed speed-up per idle transfer while probing
  double deadBand = 0.05;   // relative changes below this are not applied
  /// A busy transfer measures the link only when its gap is at most this
  /// many times the smallest recent gap (not after an iteration boundary,
  /// where the receiver may have been elsewhere).
  double regularGap = 2.0;
};

/// Bytes of a top-k payload's fixed part (header and k).
constexpr uint64_t kTopKFixedBytes = 24;

class AdaptiveRatio {
public:
  AdaptiveRatio(const AdaptiveRatioConfig &config, int64_t numel);

  /// Ratio of the next transfer.
  double ratio() const { return current; }
  /// Records transfer i: when its value was ready, its start and end
  /// (seconds; ready <= start <= end), its payload bytes, the k it carried,
  /// and whether the send ran on the thread that computes the values
  /// (sequential: that thread was busy until `end`); updates ratio().
  /// `receiverWait`: the part of the send spent waiting for the receiver
  /// to post its receive (the transport's header phase; 0 when unknown),
  /// which says nothing about the link.
  void observe(double ready, double start, double end, uint64_t payloadBytes, int64_t k,
               bool onComputeThread, double receiverWait = 0);

  /// The sender's measured compute per value (per micro-batch: the
  /// executor's kernel time of the last iteration over its micro-batches).
  /// When set (> 0), the budget is headroom x this instead of headroom x
  /// the smallest gap.
  void setComputePerValue(double seconds) { computePerValue = seconds; }

  /// Estimated link throughput in bytes per second (0: never seen busy).
  double throughput() const { return secondsPerByte > 0 ? 1.0 / secondsPerByte : 0.0; }
  /// Current budget in seconds (0 before the second transfer).
  double budget() const { return budgetSeconds; }
  /// Whether the last observed transfer found the link busy.
  bool lastBusy() const { return busy; }
  int64_t transfers() const { return count; }

private:
  AdaptiveRatioConfig config;
  int64_t numel;
  double current;
  std::deque<double> sendTimes, gaps;
  double prevEnd = 0, prevFree = 0, prevReceiverWait = 0;
  uint64_t prevBytes = 0;
  double secondsPerByte = 0; // 0: unknown
  double budgetSeconds = 0;
  double computePerValue = 0;
  int idleRun = 0;
  bool busy = false;
  int64_t count = 0;
};

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_ADAPTIVERATIO_H
