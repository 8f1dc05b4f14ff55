//===- LinkRecovery.h - In-process recovery from broken links --*- C++ -*-===//
//
// When a transfer fails because its connection did (reset, EOF, timeout:
// rt::isLinkFailure), the ranks of a strait-run job recover without
// restarting (docs/runtime.md, "Flaky links"):
//  1. the failing rank sets the key `abort/E` (E: the job's recovery epoch,
//     0 at the start) in the rendezvous store; a watcher thread on every
//     rank polls that key (50 ms) and aborts its communicator
//     (Communicator::abort), so ranks blocked in a transfer with a healthy
//     peer leave it at once instead of at the timeout;
//  2. each rank posts `state/E/R` = the iteration it was in, the oldest
//     iteration it holds a snapshot of and its count of recoveries since
//     its last completed iteration, and reads every rank's: all resume from
//     the smallest iteration (ranks may be one iteration apart: one can
//     finish an all-reduce while its peer waits for the last chunk);
//  3. every rank restores its snapshot of that iteration (StateSnapshots)
//     and rendezvouses again under a fresh prefix (the run id + "/e<E+1>").
// A rank that does not post its state within the timeout (a process that
// died), a step older than a rank's snapshots, or more than --link-retries
// recoveries in a row end the recovery with the failure: the rank exits and
// the launcher's --max-restarts takes over.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_LINKRECOVERY_H
#define STRAIT_RUNTIME_TOOLS_LINKRECOVERY_H

#include "Checkpoint.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strait {
namespace run {

/// Copies of a rank's training state at the start of its latest `depth`
/// iterations: the parameters and optimizer states, the named `extra`
/// tensors (the outer step's state under local steps) and the
/// error-feedback residuals (a device's downloaded). The parameters' 16-bit copies
/// are refilled from the parameters after a restore (the `once` steps).
class StateSnapshots {
public:
  explicit StateSnapshots(int depth = 2) : slots(depth) {}
  /// The state at the start of iteration `it` (0-based).
  rt::Status take(const rt::Executor &exec, const NamedTensors &extra, int it);
  /// The oldest iteration held; -1 when none.
  int oldest() const;
  /// Writes the state of iteration `it` back (Internal when not held).
  rt::Status restore(rt::Executor &exec, const NamedTensors &extra, int it) const;
  /// Bytes one snapshot holds (the last one taken).
  uint64_t getBytes() const { return bytes; }
  /// Bytes one snapshot of `exec` will hold: its parameters, optimizer
  /// states and `extra` (error-feedback residuals, made by the first
  /// step's encodes, not counted).
  static uint64_t stateBytes(const rt::Executor &exec, const NamedTensors &extra);

  /// Residuals of one error-feedback stream and its sub-streams.
  struct Feedback {
    std::vector<float> residual;
    std::vector<Feedback> parts;
  };

private:
  struct Slot {
    int it = -1;
    std::vector<std::vector<uint8_t>> values, extra;
    std::map<std::pair<int, uint32_t>, Feedback> feedback;
  };
  std::vector<Slot> slots;
  uint64_t bytes = 0;
};

/// The recovery protocol of one rank over the job's rendezvous store.
class LinkRecovery {
public:
  struct Options {
    int rank = 0, worldSize = 1;
    int retries = 3;                       // --link-retries R
    std::chrono::milliseconds wait{1000};  // --link-retry-wait: before attempt 2, 3, ...
    std::chrono::milliseconds timeout{60000}; // for the other ranks to join
  };
  /// Opens the store `store` names (its own connections: one for the
  /// watcher, one for the protocol), keys under `runId` + "/recovery".
  static rt::StatusOr<std::unique_ptr<LinkRecovery>>
  create(const rt::GlooOptions &store, const std::string &runId, const Options &options);
  ~LinkRecovery();

  /// Starts the watcher: when `abort/E` of the current epoch appears,
  /// target->abort(its text). `target` must outlive this object.
  void watch(rt::Communicator *target);
  int getEpoch() {
    std::lock_guard<std::mutex> lock(epochMutex);
    return epoch;
  }

  /// After `failure` (a link failure) in iteration `it` (0-based), with
  /// snapshots from iteration `oldest` on: aborts epoch E for every rank,
  /// agrees with them, and returns the iteration to resume from (the epoch
  /// is then E + 1). The failure itself (annotated) when the job cannot
  /// recover in process.
  rt::StatusOr<int> agree(const rt::Status &failure, int it, int oldest);
  /// A failure that is not a link failure ends the job: the other ranks
  /// learn it (the key `fatal`, and the abort of the current epoch) instead
  /// of waiting for this rank to join a recovery.
  void fatal(const rt::Status &failure, int it);
  /// A thread of the transport (Gloo's device loop) died with `what`: the
  /// watcher aborts the epoch for every rank (this one's links are silent
  /// from now on), and the communicator of that epoch must be leaked, not
  /// destroyed (its destructor would join the dead thread). Thread-safe.
  /// False when no watcher runs (recovery off): nobody would act on it.
  static bool noteDeadTransportThread(const std::string &what);
  /// Whether a transport thread died since the last call (and resets it).
  static bool takeDeadTransportThread();
  /// A completed iteration: the count of recoveries in a row restarts.
  void completed() { inARow = 0; }

private:
  LinkRecovery(Options options, std::unique_ptr<rt::KeyStore> protocol,
               std::unique_ptr<rt::KeyStore> watcherStore)
      : options(options), store(std::move(protocol)), watcherStore(std::move(watcherStore)) {}
  void watchLoop(rt::Communicator *target);

  Options options;
  std::unique_ptr<rt::KeyStore> store, watcherStore;
  /// The watcher aborts under epochMutex, for the epoch it read only: an
  /// abort key of an epoch that ended never reaches the next communicator
  /// (installed after agree() moved the epoch on).
  std::mutex epochMutex;
  int epoch = 0;
  int inARow = 0;
  std::thread watcher;
  std::mutex stopMutex;
  std::condition_variable stopCv;
  bool stopping = false;
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_LINKRECOVERY_H
