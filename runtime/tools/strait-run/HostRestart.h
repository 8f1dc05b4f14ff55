//===- HostRestart.h - Launchers that agree across machines --*- C++ -*-===//
//
// `strait-run DIR --host NAME --max-restarts N` or `--replan auto`
// (docs/runtime.md, "Several machines"): one launcher per machine; a rank
// that fails on any of them restarts every rank of the job, and a re-plan
// decided by the launcher of rank 0's host moves every machine's ranks to
// the new plan. The launchers agree through the rendezvous store the ranks
// meet in, under "strait-launch/<run-id>/":
//
//   fail/<g>         the first failure of generation g (the launch, then
//                    one per restart): "rank R on host H failed (exit
//                    code C)". Set once (SETNX): the first launcher to see
//                    a failure publishes it; every launcher polls it while
//                    its ranks run and, when it appears, stops its own.
//   done/<g>/<host>  every rank of <host> finished generation g; a launcher
//                    exits 0 only once every host's is there.
//   step/<g>/<host>  after g failed: the newest complete checkpoint step
//                    <host>'s launcher finds (0: none). Every launcher
//                    resumes from the smallest, a step every host sees
//                    complete (the folder is on a shared file system).
//   gone/<host>      <host>'s launcher stopped for good (interrupted, or
//                    it gave up): the others stop waiting for it at once.
//   hostloss/<g>     --on-host-loss replan (HostLoss.h): "STEP<TAB>NAME"
//                    the first remaining host's launcher re-planned without
//                    the lost host(s): every remaining launcher resumes
//                    under DIR/NAME from step STEP's checkpoint (0: from
//                    the start); "!<TAB>REASON" when it refused (--min-hosts).
//   replan/<g>       --replan: "STEP<TAB>NAME": the leader's monitor (the
//                    host of rank 0) switches to the plan DIR/NAME after
//                    STEP; every other launcher writes STEP into its own
//                    ranks' stop file, and all resume under DIR/NAME (the
//                    job folder on a shared file system) from step STEP's
//                    checkpoint.
//
// --on-host-join replan and --join (a host joins the running job) add the
// keys join/, joinack/, joinreply/, joined/, joinok/ and end (HostJoin.h).
//
// Before any rank starts, every launcher of --host mode claims the run id
// (claimRunId, whether or not it restarts):
//
//   started/<host>   "<UTC time>\t<machine>:<pid>:<nanoseconds>", set once.
//                    A launcher that finds another value there (a second
//                    launcher of the host, or a rerun of an ended job: the
//                    store keeps the keys, and the ranks would meet stale
//                    addresses) refuses the run id with exit code 2. The
//                    other hosts of the run write their own key and join.
//
// Generation g+1's ranks rendezvous under "<run-id>-restart<g+1>", so no
// key of a failed generation is read again. A launcher that waits for a
// host that does not answer gives up after --timeout-ms, naming it.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTRESTART_H
#define STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTRESTART_H

#include "StraitRun.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Status.h"

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strait {
namespace run {

/// Claims options.runId for options.host in the store of `options` (key
/// started/<host> above). InvalidArgument "run id ID was already used on
/// this store (host H started it at TIME); pick a new --run-id" when the
/// key is another launcher's; Unavailable naming the store when it fails.
rt::Status claimRunId(const RunOptions &options, const program::PlanManifest &manifest);

class HostRestart {
public:
  /// Opens the store of `options` (its --rendezvous, else the manifest's)
  /// for the launcher of options.host. Unavailable naming the store.
  static rt::StatusOr<HostRestart> open(const RunOptions &options,
                                        const program::PlanManifest &manifest);

  /// The failure of generation `g` some launcher published, if any (no wait).
  rt::StatusOr<std::optional<std::string>> failure(int g);

  /// Publishes this host's failure of `g`, unless one is there already;
  /// returns the one that stands (the first).
  rt::StatusOr<std::string> publishFailure(int g, const std::string &reason);

  /// After this host's ranks finished `g`: waits until every host's did
  /// (true) or a failure of `g` appears (false). DeadlineExceeded naming
  /// the hosts that did not answer within `timeout`; Unavailable when
  /// `stop` (the launcher's signal) becomes non-zero.
  rt::StatusOr<bool> finish(int g, std::chrono::milliseconds timeout,
                            const volatile std::sig_atomic_t &stop);

  /// Publishes `mine` (this host's newest complete checkpoint step, 0 for
  /// none) for failed generation `g` and returns the smallest over every
  /// host. DeadlineExceeded naming the hosts that did not answer.
  rt::StatusOr<int64_t> agreeStep(int g, int64_t mine, std::chrono::milliseconds timeout,
                                  const volatile std::sig_atomic_t &stop);

  /// This launcher stops for good (`why`: interrupted, gave up): publishes
  /// `why` as g's failure (unless one is there) and as gone/<host>, so that
  /// the others stop their ranks and do not wait for this host.
  void leave(int g, const std::string &why);

  /// --replan: the leader publishes that generation `g` stops after
  /// `stopStep` for the plan folder `name` (under the job folder).
  rt::Status publishReplan(int g, int stopStep, const std::string &name);

  /// The re-plan of `g` the leader published, if any (no wait).
  rt::StatusOr<std::optional<std::pair<int, std::string>>> replanOf(int g);

  /// --on-host-loss replan: the first remaining host publishes the plan
  /// `name` that generation `g`'s survivors resume under from `step`, or
  /// (name empty) why the job ends.
  rt::Status publishHostLoss(int g, int64_t step, const std::string &name,
                             const std::string &refusal);

  /// What publishHostLoss said for `g`, waiting up to `timeout`: {step,
  /// name} or, with an empty name, {0, the refusal}. DeadlineExceeded.
  rt::StatusOr<std::pair<int64_t, std::string>> awaitHostLoss(
      int g, std::chrono::milliseconds timeout, const volatile std::sig_atomic_t &stop,
      std::string *refusal);

  /// The hosts the last finish() or agreeStep() gave up on (silent past the
  /// timeout, or their launcher left: gone/<host>).
  const std::vector<std::string> &unanswered() const { return silent; }

  /// Every host of the running plan, sorted.
  const std::vector<std::string> &planHosts() const { return hosts; }

  /// After a re-plan: the hosts are the new plan's (a host it leaves
  /// without ranks is no longer waited for).
  void setHosts(const program::PlanManifest &manifest);

  const std::string &self() const { return host; }
  const std::string &where() const { return store; }

private:
  HostRestart(std::unique_ptr<rt::KeyStore> keys, std::string host,
              std::vector<std::string> hosts, std::string store)
      : keys(std::move(keys)), host(std::move(host)), hosts(std::move(hosts)),
        store(std::move(store)) {}

  /// Waits for `prefix`<host> of every host, or `failKey` when not empty.
  rt::StatusOr<bool> waitAll(const std::string &prefix, const std::string &failKey,
                             std::chrono::milliseconds timeout,
                             const volatile std::sig_atomic_t &stop,
                             std::vector<std::string> *values);

  std::unique_ptr<rt::KeyStore> keys;
  std::string host;
  std::vector<std::string> hosts; // every host of the plan, sorted
  std::string store;
  std::vector<std::string> silent; // see unanswered()
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_HOSTRESTART_H
