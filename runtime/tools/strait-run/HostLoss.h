//===- HostLoss.h - Going on without a lost host (--on-host-loss) -*- C++ -*-===//
//
// `strait-run DIR --on-host-loss replan [--min-hosts N]` (docs/runtime.md,
// "Losing a host"): when a host is gone for good (a dead machine, a
// preempted spot instance), the job goes on with the hosts that are left
// instead of failing after --max-restarts. A host is lost when
//  - its ranks failed more than --max-restarts times (each failure whose
//    root cause, Launcher.cpp's reportFailure, is one of its ranks counts
//    against its own budget), or
//  - with --host, its launcher did not answer the restart agreement within
//    --timeout-ms, or it announced that it stopped (HostRestart.h, gone/).
// The launcher then writes DIR/host-loss-K/cluster.yaml (the running
// plan's cluster file plus `exclude_hosts: [...]`, which straitc's cluster
// parser applies: the devices of those hosts and the link rules naming
// them are left out), re-runs the job's recorded straitc command on it
// (Replan.h's runRecordedStraitc; the global batch is the command's, so it
// stays unless the planner cannot keep it: then it says what changed) and
// resumes every remaining rank from the newest complete checkpoint under
// the new plan. Below --min-hosts remaining hosts the job fails instead.
// With --host the first remaining host (sorted by name) decides and
// publishes the new plan through the store (hostloss/<g>); the others
// follow it.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTLOSS_H
#define STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTLOSS_H

#include "Replan.h"
#include "StraitRun.h"
#include "strait/runtime/Status.h"

#include <csignal>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strait {
namespace run {

class HostRestart;

/// A plan's shape for the launcher's messages: "1 stage x 3 replicas, 2
/// micro-batches" or "2 stages of 2, 1 devices, 4 micro-batches".
std::string planShape(const PlanFacts &facts);

/// Where the remaining ranks resume after a host loss.
struct HostLossSwitch {
  std::string dir;        // the new plan's folder
  std::string checkpoint; // "" (from the start) or a step-N folder
};

class HostLoss {
public:
  /// Reads the job's record (DIR/straitc.json, which straitc writes with
  /// --cluster); the error says what is missing.
  static rt::StatusOr<HostLoss> create(const RunOptions &o);

  /// A failure whose root cause is a rank of `host`: counts it against the
  /// host's --max-restarts; true when the host has no restart left (lost).
  bool failed(const std::string &host);

  /// Failures counted against `host` so far.
  int failures(const std::string &host) const {
    auto it = failuresOf.find(host);
    return it == failuresOf.end() ? 0 : it->second;
  }

  /// The running plan (planDir) lost `lost` (`why` says how): checks the
  /// --min-hosts floor, writes the cluster file without them, runs straitc
  /// into DIR/host-loss-K and prints every decision; returns the new plan's
  /// folder. InvalidArgument below the floor, Unavailable when straitc
  /// fails (no plan for the remaining devices), both saying why.
  rt::StatusOr<std::string> replanWithout(const std::string &planDir,
                                          const std::vector<std::string> &lost,
                                          const std::string &why);

  /// After generation `g` of the plan in `planDir` failed, the root cause a
  /// rank of `failedHost` ("" when unknown): decides whether a host is lost
  /// (see above) and, if so, re-plans without it. Without `hosts` (one
  /// launcher) this launcher decides; with `hosts` (--host) every launcher
  /// first agrees on the restart step (HostRestart::agreeStep), hosts that
  /// do not answer are lost, and the first remaining host decides and
  /// publishes for the others. nullopt: no host is lost, restart as usual.
  /// An error: the job ends (below --min-hosts, no plan, this host lost).
  rt::StatusOr<std::optional<HostLossSwitch>>
  afterFailure(const std::string &planDir, const std::string &checkpointDir,
               const std::string &firstResume, int g, const std::string &failedHost,
               HostRestart *hosts, const volatile std::sig_atomic_t &stop);

  /// The host H of a published failure "rank R on host H failed ...".
  static std::string hostOfFailure(const std::string &reason);

  /// The ranks run the plan in `dir` now (a host loss or a --replan
  /// switch): its record becomes the one a next loss starts from.
  rt::Status switched(const std::string &dir);

private:
  RunOptions options;
  JobRecord record;            // the running plan's
  int losses = 0;              // host-loss-K folders written
  std::map<std::string, int> failuresOf;
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTLOSS_H
