//===- HostJoin.h - Hosts that join a running job (--join) -----*- C++ -*-===//
//
// `strait-run DIR --host C --run-id ID --rendezvous URL --join` (docs/
// runtime.md, "A host joins"): the launcher of a machine the running plan
// leaves out (a host lost earlier and back again, or a standby host the
// cluster file excludes, `exclude_hosts: [C]`) announces itself through the
// store; the deciding launcher (the one of rank 0's host, which grants the
// ranks their lease: Replan.h) re-runs the job's recorded straitc command on
// the running plan's cluster file plus `include_hosts: [C]` into
// DIR/host-join-K, stops every rank at a step none is past (the lease) with
// a checkpoint, and every launcher, the joiner's included, resumes from it
// under the new plan. The running launchers take joins with
// `--on-host-join replan` (and --host). Keys under "strait-launch/<run-id>/"
// (HostRestart.h lists the others); all are set once:
//
//   join/<host>/<n>       the joiner's announcement (n = 1, 2, ...: the
//                         first free one; "<machine>:<pid>:<ns>").
//   joinack/<host>/<n>    the deciding launcher saw it: "G<TAB>STEP<TAB>HOST"
//                         (generation G was running at merged step STEP).
//   joinreply/<host>/<n>  "G<TAB>STOP<TAB>NAME": generation G-1 stops after
//                         step STOP and generation G runs DIR/NAME from its
//                         checkpoint; "!<TAB>REASON" when refused (the host
//                         runs ranks of the running plan, straitc found no
//                         plan, the job ends first).
//   replan/<G-1>          "STOP<TAB>NAME", as for --replan: the other
//                         launchers stop their ranks at STOP.
//   joined/<G>/<host>     the joiner found the checkpoint and the plan and
//                         starts its ranks with generation G.
//   joinok/<G>            the deciding launcher's verdict, which every
//                         launcher follows: "1" (every joiner confirmed),
//                         or "0<TAB>WHY" (one did not within --timeout-ms:
//                         every launcher resumes the running plan from the
//                         same checkpoint instead, and the joiner gives up).
//   end                   the job finished (a joiner that comes later is
//                         told so).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTJOIN_H
#define STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTJOIN_H

#include "StraitRun.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Status.h"

#include <csignal>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace run {

class HostRestart;
class ReplanMonitor;

/// The host names a cluster file's devices give (`host: NAME` and
/// `host_prefix: P` with `count`/`per_host` are read as written; an
/// unreadable file gives none), sorted.
std::vector<std::string> clusterFileHosts(const std::string &path);

/// Where a joining launcher's ranks start.
struct JoinedPlan {
  int generation = 0;     // the first generation they run in
  std::string dir;        // the plan folder
  std::string checkpoint; // the step folder every rank resumes from
};

/// --join: checks the host against the job's cluster file and the run id
/// against the store, announces this host and waits for the deciding
/// launcher's decision and the switch (printing each step). InvalidArgument
/// for a bad host, run id or a refusal; Unavailable when the job went on
/// without this host or stopped answering.
rt::StatusOr<JoinedPlan> joinRunningJob(const RunOptions &o,
                                        const volatile std::sig_atomic_t &stop);

/// A plan folder name of a join (host-join-K).
bool isJoinPlan(const std::string &name);

/// The running launchers' side (--on-host-join replan).
class HostJoin {
public:
  static rt::StatusOr<HostJoin> create(const RunOptions &o);

  /// The deciding launcher, every 200 ms while generation `g` of the plan
  /// in `planDir` runs: acknowledges new announcements and, once a step has
  /// merged and no other switch is pending, re-plans with the joining hosts
  /// and asks `monitor` to stop the ranks (publishing the stop for the
  /// other launchers and the reply for the joiners). Errors are printed and
  /// answered to the joiner; the job keeps its plan.
  void poll(int g, const std::string &planDir, const std::vector<std::string> &planHosts,
            ReplanMonitor &monitor, HostRestart &hosts, int lastStep);

  /// A join switch is pending (this launcher decided it).
  bool switching() const { return !admitted.empty(); }

  /// After every rank stopped for a join switch into generation `next`:
  /// the deciding launcher waits up to --timeout-ms for every joiner's
  /// joined/<next>/<host> and publishes joinok/<next>; the others wait for
  /// it. True: the new plan goes ahead; false: the running plan resumes.
  rt::StatusOr<bool> verdict(int next, bool deciding, const volatile std::sig_atomic_t &stop);

  /// The generation that was to switch failed first: the pending switch is
  /// off (the joiners see the failure and give up).
  void abandon() { admitted.clear(); }

  /// The job finished: a joiner that comes now is told so.
  void ended() { (void)keys->set("end", "finished"); }

private:
  struct Announcement {
    std::string host;
    int n = 0;
  };
  rt::StatusOr<std::string> replanWith(const std::string &planDir,
                                       const std::vector<std::string> &joining, int step);
  void reply(const Announcement &a, const std::string &value);

  RunOptions options;
  std::unique_ptr<rt::KeyStore> keys;
  std::string store;
  std::vector<std::string> clusterHosts;
  std::map<std::string, int> next;   // per host: the next announcement to read
  std::vector<Announcement> pending; // acknowledged, not answered
  std::vector<Announcement> admitted; // in the pending switch
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTJOIN_H
