//===- Trace.h - Timestamped spans of what a rank ran -----------*- C++ -*-===//
//
// The execution trace of `strait-run --trace FILE.json` (docs/runtime.md,
// "Traces"): while tracing is on, the executor, the communicators' callers,
// the codecs and the worker record one span per kernel, transfer,
// all-reduce, encode/decode, data load and checkpoint write, on the thread
// that ran it (the lanes: "compute", the executor's "comm" thread, others
// numbered). Spans of one thread nest (they are scopes), so the spans of a
// lane never overlap without nesting.
//
// Times are CLOCK_MONOTONIC (std::chrono::steady_clock) nanoseconds; a
// rank's file adds its offset to rank 0's clock (estimated at the rendezvous,
// estimateClockOffset) so the ranks of a job share one time axis. The file
// is Chrome's trace event JSON (ui.perfetto.dev, chrome://tracing): one
// process per rank, one thread per lane, "X" (complete) events with ts and
// dur in microseconds.
//
// Off (the default), every hook is one relaxed atomic load and a branch.
// Process-wide, like LinkTiming.h: a rank is one process.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TRACE_H
#define STRAIT_RUNTIME_TRACE_H

#include "strait/runtime/Status.h"
#include "strait_program.pb.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {

class Communicator;

namespace trace {

extern std::atomic<bool> enabledFlag;
/// Whether spans are recorded now.
inline bool on() { return enabledFlag.load(std::memory_order_relaxed); }
void setEnabled(bool on);

/// steady_clock nanoseconds.
int64_t nowNs();

/// Names the calling thread's lane; `tid` orders the lanes (compute 1,
/// comm 2; unnamed threads get 100, 101, ... on their first span).
void nameThread(const std::string &name, int tid);

struct Event {
  std::string name, cat;
  int64_t startNs = 0, endNs = 0;
  int tid = 0;
  std::string args; ///< the members of a JSON object ("\"peer\":1,..."), or ""
};

/// Records a finished span on the calling thread's lane.
void record(std::string name, const char *cat, int64_t startNs, int64_t endNs,
            std::string args = {});

/// A scope recorded when it ends (nothing when tracing was off at its
/// start). arg() adds a JSON member: a number, or a string it quotes.
class Span {
public:
  Span() = default;
  Span(const char *cat, std::string name);
  Span(Span &&other) noexcept = default;
  Span &operator=(Span &&) = delete;
  ~Span() {
    if (state)
      finish();
  }
  bool active() const { return state != nullptr; }
  Span &arg(const char *key, double value);
  Span &arg(const char *key, int64_t value);
  Span &arg(const char *key, int value) { return arg(key, static_cast<int64_t>(value)); }
  Span &arg(const char *key, const std::string &value);
  Span &arg(const char *key, const char *value) { return arg(key, std::string(value)); }
  /// Starts an active span again now: after building its arguments, so
  /// that their cost is not the span's.
  void restart();

private:
  struct State {
    const char *cat;
    std::string name, args;
    int64_t start;
  };
  void finish();
  /// Null while inactive: an inactive span costs a null pointer.
  std::unique_ptr<State> state;
};

/// A kernel's span: its name (the op when unnamed), op type, program step
/// index, micro-batch, and a fused chain's member ops. Category "optimizer"
/// for optimizer updates, "kernel" otherwise.
Span kernelSpanOf(const program::Kernel &kernel, int step, int microBatch);
inline Span kernelSpan(const program::Kernel &kernel, int step, int microBatch) {
  return on() ? kernelSpanOf(kernel, step, microBatch) : Span();
}

/// A communication step's span: send/recv (peer, bytes, codec),
/// all-reduce (bytes, codec, ranks, islands). `bytes`: the step's tensor
/// bytes (before the codec), called only while tracing is on.
Span commSpanOf(const program::Step &step, int index, uint64_t bytes);
template <class BytesFn>
Span commSpan(const program::Step &step, int index, BytesFn &&bytes) {
  return on() ? commSpanOf(step, index, bytes()) : Span();
}

/// An encode or decode span of a codec (`what`: "encode" / "decode"):
/// codec, elements.
Span codecSpanOf(const char *what, program::Codec codec, int64_t numel);
inline Span codecSpan(const char *what, program::Codec codec, int64_t numel) {
  return on() ? codecSpanOf(what, codec, numel) : Span();
}

/// A transfer's two phases as the transport sees them: from posting until
/// the peer's side of the message met this one ("wait for peer": mostly the
/// peer getting to its matching call), then until the payload was through
/// ("transfer"). Recorded as two spans on the calling thread; nothing when
/// tracing is off or `beginNs` is 0.
void phases(int64_t beginNs, int64_t midNs, int64_t endNs);
inline int64_t toNs(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

/// The spans recorded so far, in order of their end; clears them.
std::vector<Event> take();
/// The lanes named so far: (tid, name).
std::vector<std::pair<int, std::string>> lanes();

/// What a rank's file says about the rank.
struct ProcessInfo {
  int rank = 0;
  std::string host, device;
  int64_t clockOffsetNs = 0;    ///< added to this rank's clock: rank 0's
  int64_t clockPrecisionNs = 0; ///< its uncertainty (0: rank 0, or the same clock)
  /// Whether this rank reads rank 0's clock (the same boot of one machine:
  /// CLOCK_MONOTONIC is system-wide), so the offset is exactly 0.
  bool sameClock = true;
  /// The round-trip estimate, kept even when the clock is the same (a
  /// check of the estimate) and its precision (half the best round trip).
  int64_t clockEstimateNs = 0, estimatePrecisionNs = 0;
  int firstStep = 0, lastStep = 0; ///< the traced iterations (1-based)
};

/// Parses "A:B" (1-based, inclusive, A <= B) for --steps N; an empty text
/// gives the default, iterations 2..4 (the first allocates), cut at N.
Status parseStepRange(const std::string &text, int steps, int &first, int &last);

/// Fails unless `path` can be written (its folder exists and takes a new
/// file); writes nothing that stays.
Status checkWritable(const std::string &path);

/// Writes a Chrome trace event JSON of `events` for one rank: to a
/// temporary name next to `path`, renamed when complete.
Status writeTrace(const std::string &path, const ProcessInfo &info,
                  const std::vector<Event> &events,
                  const std::vector<std::pair<int, std::string>> &lanes);

/// Merges per-rank traces (writeTrace's files) into one, times relative to
/// the earliest span; fails naming a file that is not a trace.
Status mergeTraces(const std::vector<std::string> &inputs, const std::string &output);

/// Estimates this rank's clock offset to rank 0 over `comm` on `channel`:
/// 16 round trips, the one of the smallest round trip kept, NTP's estimate
/// offset = t_rank0 - (t_send + t_back) / 2, precision = round trip / 2. A
/// rank on rank 0's machine (same /proc boot_id) reads the same clock and
/// takes offset 0 (the estimate is kept as a check). Every rank must call
/// it; rank 0 gets 0.
Status estimateClockOffset(Communicator &comm, uint32_t channel, ProcessInfo &info);

} // namespace trace
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_TRACE_H
