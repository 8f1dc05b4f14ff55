//===- AdaptiveRatio.cpp - Top-k ratio that follows the link --------------===//
//
// See AdaptiveRatio.h for the measurement model and the rule.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/AdaptiveRatio.h"

#include <algorithm>
#include <cmath>

namespace strait {
namespace rt {

AdaptiveRatio::AdaptiveRatio(const AdaptiveRatioConfig &c, int64_t n)
    : config(c), numel(std::max<int64_t>(1, n)),
      current(std::clamp(c.initial, c.ratioMin, c.ratioMax)) {}

void AdaptiveRatio::observe(double ready, double start, double end, uint64_t payloadBytes,
                            int64_t k, bool onComputeThread, double receiverWait) {
  ++count;
  receiverWait = std::clamp(receiverWait, 0.0, std::max(0.0, end - start));
  double w = std::max(0.0, end - start - receiverWait);
  sendTimes.push_back(w);
  if (static_cast<int>(sendTimes.size()) > config.baseWindow)
    sendTimes.pop_front();
  double base = *std::min_element(sendTimes.begin(), sendTimes.end());
  bool first = count == 1;
  double gap = first ? 0.0 : std::max(0.0, ready - prevFree);
  // The link carries the previous payload from its hand-off on, whatever
  // the receiver does meanwhile: the receiver's wait counts here.
  double drain = first ? 0.0 : std::max(0.0, end - prevEnd - base);
  // Time the send waited behind the previous one (overlap), less what that
  // one spent waiting for its receiver.
  double queued = onComputeThread ? 0.0 : std::max(0.0, start - ready - prevReceiverWait);
  prevReceiverWait = receiverWait;
  uint64_t drained = prevBytes;
  prevEnd = end;
  prevFree = onComputeThread ? end : ready;
  prevBytes = payloadBytes;
  if (first) {
    busy = false;
    return; // nothing to compare with yet
  }
  gaps.push_back(gap);
  if (static_cast<int>(gaps.size()) > config.window)
    gaps.pop_front();
  double minGap = *std::min_element(gaps.begin(), gaps.end());
  budgetSeconds = config.headroom * (computePerValue > 0 ? computePerValue : minGap);

  // Busy: the send itself waited for the link, or it waited in the queue
  // behind the previous transfer (overlap: the link is behind the compute),
  // by more than the noise of the clocks and threads: 1 ms, a quarter of the
  // idle send time, or 15 % of the budget (a link a little over the budget
  // changes nothing yet).
  double slack = std::max({config.busySlack, 0.25 * base, 0.15 * budgetSeconds});
  busy = w > base + slack || queued > slack;
  bool regular = gap <= config.regularGap * minGap + config.busySlack;
  if (busy && drained > 0) {
    if (regular && drain > 0) {
      // A slower link is believed at once (the transfers already queue),
      // a faster one through the EWMA.
      double sample = drain / static_cast<double>(drained);
      secondsPerByte = secondsPerByte > 0 && sample < secondsPerByte
                           ? (1 - config.alpha) * secondsPerByte + config.alpha * sample
                           : sample;
    }
    idleRun = 0;
  } else if (!busy) {
    ++idleRun;
    if (secondsPerByte > 0 && drained > 0) {
      // The link carried the previous payload within `drain`: never slower.
      secondsPerByte = std::min(secondsPerByte, drain / static_cast<double>(drained));
      if (idleRun >= config.probeAfter)
        secondsPerByte /= config.probe;
    }
  }

  double target;
  if (secondsPerByte <= 0) {
    target = current * config.maxGrowth; // never busy: the link keeps up
  } else {
    double perKept = k > 0 && payloadBytes > kTopKFixedBytes
                         ? static_cast<double>(payloadBytes - kTopKFixedBytes) / k
                         : 8.0;
    double bytes = budgetSeconds / secondsPerByte;
    double kTarget = (bytes - kTopKFixedBytes) / perKept;
    target = kTarget / static_cast<double>(numel);
  }
  target = std::min(target, current * config.maxGrowth);
  target = std::clamp(target, config.ratioMin, config.ratioMax);
  bool atBound = target == config.ratioMin || target == config.ratioMax;
  if (std::fabs(target - current) > config.deadBand * current ||
      (atBound && target != current))
    current = target;
}

} // namespace rt
} // namespace strait
