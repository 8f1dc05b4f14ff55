//===- AdaptiveRatioTest.cpp - The adaptive top-k ratio controller --------===//
//
// AdaptiveRatio on injected times. A simulated link reproduces what the
// sender sees over Gloo (AdaptiveRatio.h): a send starts `compute` seconds
// after the previous one returned, its payload is written once the header
// reached the receiver (behind the previous payload) plus one round trip,
// and the link then carries it at `rate` bytes per second. Payload sizes
// follow the top-k layout (24 bytes, 4 per value, 2 per u16-gap index).
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/AdaptiveRatio.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

using namespace strait::rt;

namespace {

constexpr int64_t kNumel = 65536;

struct SimLink {
  double rate;          // bytes per second
  double rtt = 1e-3;    // header there, notification back
  double encode = 5e-4; // sender's encode and posting
  double compute = 0.02;
  double linkFree = 0, now = 0;
};

uint64_t payloadBytes(int64_t k) {
  return kTopKFixedBytes + 4 * k + std::min<uint64_t>(2 * k, (kNumel + 7) / 8);
}

int64_t kOf(double ratio) {
  return std::max<int64_t>(1, static_cast<int64_t>(std::ceil(ratio * kNumel)));
}

/// Runs `n` transfers; returns the ratio each one used.
std::vector<double> run(AdaptiveRatio &c, SimLink &l, int n) {
  std::vector<double> ratios;
  for (int i = 0; i < n; ++i) {
    double r = c.ratio();
    ratios.push_back(r);
    int64_t k = kOf(r);
    uint64_t bytes = payloadBytes(k);
    double start = l.now + l.compute;
    double end = std::max(start + l.encode, l.linkFree) + l.rtt;
    l.linkFree = end + bytes / l.rate;
    c.observe(start, start, end, bytes, k, true);
    l.now = end;
  }
  return ratios;
}

/// The ratio whose payload the link carries in `seconds`.
double fitting(double rate, double seconds) {
  double bytes = rate * seconds;
  // 24 + 6k with u16 gaps below numel/16 kept values, 24 + 4k + numel/8
  // with a bitmap above.
  double k = (bytes - kTopKFixedBytes) / 6.0;
  if (k > kNumel / 16.0)
    k = (bytes - kTopKFixedBytes - kNumel / 8.0) / 4.0;
  return k / kNumel;
}

AdaptiveRatioConfig config(double initial, double lo = 0.001, double hi = 0.5) {
  AdaptiveRatioConfig c;
  c.ratioMin = lo;
  c.ratioMax = hi;
  c.initial = initial;
  return c;
}

TEST(AdaptiveRatio, ShrinksOnASlowLinkAndStaysInItsBand) {
  // 1 MB/s: the initial 0.1 (39 KB) takes 39 ms per 20 ms of compute.
  SimLink l{1e6};
  AdaptiveRatio c(config(0.1), kNumel);
  std::vector<double> r = run(c, l, 200);
  double kStar = fitting(l.rate, 0.8 * l.compute); // budget = headroom x gap
  // Within a few transfers the ratio is at most the link's.
  EXPECT_LE(r[5], fitting(l.rate, l.compute) * 1.05);
  // Steady state: inside [k*, 1.5 k*] (probing raises the ratio until a
  // transfer is busy by more than the slack, which brings it back to k*).
  double lo = 1, hi = 0;
  for (size_t i = 20; i < r.size(); ++i) {
    lo = std::min(lo, r[i]);
    hi = std::max(hi, r[i]);
  }
  EXPECT_GE(lo, kStar * 0.97);
  EXPECT_LE(hi, kStar * 1.5);
  EXPECT_NEAR(c.throughput(), l.rate, 0.5 * l.rate);
  EXPECT_NEAR(c.budget(), 0.8 * l.compute, 1e-9);
}

TEST(AdaptiveRatio, GrowsToTheMaximumOnAFastLink) {
  SimLink l{1e9};
  AdaptiveRatio c(config(0.01, 0.001, 0.3), kNumel);
  std::vector<double> r = run(c, l, 40);
  EXPECT_DOUBLE_EQ(r.back(), 0.3);
  // Never above the maximum, and rising at most 25 % per transfer.
  for (size_t i = 1; i < r.size(); ++i) {
    EXPECT_LE(r[i], 0.3);
    EXPECT_LE(r[i], r[i - 1] * 1.25 + 1e-12);
  }
}

TEST(AdaptiveRatio, RespectsTheBounds) {
  // So slow that even ratio_min does not fit: the ratio sits at ratio_min.
  SimLink slow{2e4};
  AdaptiveRatio c(config(0.2, 0.05, 0.4), kNumel);
  std::vector<double> r = run(c, slow, 60);
  for (double x : r) {
    EXPECT_GE(x, 0.05);
    EXPECT_LE(x, 0.4);
  }
  EXPECT_DOUBLE_EQ(r.back(), 0.05);
  // An initial ratio outside the bounds is clamped; the ratio never
  // exceeds 1 even with ratio_max 1.
  AdaptiveRatio d(config(2.0, 0.1, 1.0), kNumel);
  EXPECT_DOUBLE_EQ(d.ratio(), 1.0);
  SimLink fast{1e10};
  for (double x : run(d, fast, 30))
    EXPECT_LE(x, 1.0);
}

TEST(AdaptiveRatio, FollowsABandwidthChange) {
  SimLink l{4e6};
  AdaptiveRatio c(config(0.05), kNumel);
  run(c, l, 100);
  double before = c.ratio();
  // The link becomes 4x slower: within 3 transfers the ratio is about 4x
  // smaller.
  l.rate /= 4;
  std::vector<double> r = run(c, l, 100);
  EXPECT_LE(r[3], before / 4 * 1.35);
  EXPECT_GE(r.back(), fitting(l.rate, 0.8 * l.compute) * 0.97);
  // 4x faster again: it grows back (probing) within 100 transfers.
  l.rate *= 4;
  r = run(c, l, 100);
  EXPECT_GE(r.back(), fitting(l.rate, 0.8 * l.compute) * 0.97);
  EXPECT_LE(r.back(), fitting(l.rate, l.compute) * 1.2);
}

TEST(AdaptiveRatio, IgnoresSendsAfterALongPause) {
  // A send after an iteration boundary (gap 10x the usual) that waited for
  // the receiver does not count as a link measurement.
  SimLink l{1e6};
  AdaptiveRatio c(config(0.04), kNumel);
  run(c, l, 50);
  double before = c.ratio();
  double start = l.now + 10 * l.compute;
  c.observe(start, start, start + 0.05, payloadBytes(kOf(before)), kOf(before), true);
  EXPECT_GE(c.ratio(), before * 0.95);
}

TEST(AdaptiveRatio, QueuedSendsKeepTheComputeBudget) {
  // Overlap: the compute thread readies a value `compute` seconds after it
  // is free and a communication thread sends them one after another, so on
  // a slow link a send starts as soon as the previous one returned; the
  // compute thread runs at most one value ahead (it waits for transfer i-2
  // before reusing its memory, as the executor's liveness plan makes it).
  // The budget follows the compute, not the back-to-back sends: the ratio
  // settles where the link carries a payload within the compute, neither
  // at ratio_min nor above the link.
  SimLink l{1e6};
  AdaptiveRatio c(config(0.1), kNumel);
  double commFree = 0, prevReady = 0;
  std::vector<double> r, ends;
  for (int i = 0; i < 200; ++i) {
    double ratio = c.ratio();
    r.push_back(ratio);
    int64_t k = kOf(ratio);
    uint64_t bytes = payloadBytes(k);
    double free = std::max(prevReady, i >= 2 ? ends[i - 2] : 0.0);
    double ready = free + l.compute;
    prevReady = ready;
    double start = std::max(ready, commFree);
    double end = std::max(start + l.encode, l.linkFree) + l.rtt;
    l.linkFree = end + bytes / l.rate;
    commFree = end;
    ends.push_back(end);
    c.observe(ready, start, end, bytes, k, false);
  }
  double kStar = fitting(l.rate, 0.8 * l.compute);
  for (size_t i = 30; i < r.size(); ++i) {
    EXPECT_GE(r[i], kStar * 0.97) << i;
    EXPECT_LE(r[i], kStar * 1.5) << i;
  }
}

TEST(AdaptiveRatio, AReceiverBusyComputingIsNotASlowLink) {
  // A fast link whose receiver posts each receive 30 ms late (it computes
  // longer than the sender): the transport's header phase reports the wait,
  // and the ratio grows to its maximum instead of shrinking for nothing.
  AdaptiveRatio c(config(0.05, 0.001, 0.2), kNumel);
  double now = 0;
  for (int i = 0; i < 40; ++i) {
    int64_t k = kOf(c.ratio());
    uint64_t bytes = payloadBytes(k);
    double start = now + 0.02, wait = 0.03;
    double end = start + wait + 1e-3 + bytes / 1e9;
    c.observe(start, start, end, bytes, k, true, wait);
    now = end;
  }
  EXPECT_DOUBLE_EQ(c.ratio(), 0.2);
}

TEST(AdaptiveRatio, TheMeasuredComputeSetsTheBudget) {
  // The executor reports 40 ms of compute per value while sends come 20 ms
  // apart (GPipe: the forwards run back to back, the backwards come later):
  // the budget is 0.8 x 40 ms and the ratio settles where that fits.
  SimLink l{1e6};
  AdaptiveRatio c(config(0.1, 0.001, 0.5), kNumel);
  c.setComputePerValue(0.04);
  std::vector<double> r = run(c, l, 200);
  EXPECT_NEAR(c.budget(), 0.032, 1e-12);
  double kStar = fitting(l.rate, 0.032);
  for (size_t i = 30; i < r.size(); ++i) {
    EXPECT_GE(r[i], kStar * 0.9) << i;
    EXPECT_LE(r[i], kStar * 1.5) << i;
  }
}

TEST(AdaptiveRatio, IsDeterministic) {
  SimLink a{1.5e6}, b{1.5e6};
  AdaptiveRatio x(config(0.1), kNumel), y(config(0.1), kNumel);
  EXPECT_EQ(run(x, a, 80), run(y, b, 80));
}

} // namespace
