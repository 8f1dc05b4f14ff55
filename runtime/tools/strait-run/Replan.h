//===- Replan.h - Re-planning when links change (strait-run --replan) -*- C++ -*-===//
//
// The launcher's side of `strait-run DIR --replan auto` (docs/runtime.md,
// "Re-planning when links change"):
//  1. every rank prints, per iteration, what its timed transfers delivered
//     per peer (`link PEER:BYTES:SECONDS`, LinkTiming.h);
//  2. ReplanMonitor turns them into one throughput per inter-host rank pair
//     and window of steps (the median of the steps that timed one) and
//     compares it with the bandwidth the plan assumed (DIR/straitc.json,
//     written by straitc); a pair off by more than --replan-factor for
//     --replan-after windows in a row triggers a re-plan;
//  3. a re-plan writes the cluster file with the measured bandwidths, runs
//     the recorded straitc command on it into DIR/replan-K/, with
//     --evaluate-plan (the current plan re-simulated on the measured
//     cluster), and compares the new plan's predicted step time, calibrated
//     to this machine (the step time measured now over the current plan's
//     re-simulated step), with the step time measured now; only a predicted
//     gain switches. The ranks then checkpoint after the stop step, exit
//     with code 4, and the launcher resumes them under the new plan;
//  4. the stop step is one no rank can be past: the ranks read a control
//     file after every step (ReplanControl) and finish no step beyond the
//     lease it grants (the launcher extends it as steps merge, a tenth of a
//     second of steps ahead), and the stop step is at least the lease (with
//     --host, the lease + 1: the other hosts' ranks have none, they are
//     bound by the leader's, with which they exchange data every step).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_STRAITRUN_REPLAN_H
#define STRAIT_RUNTIME_TOOLS_STRAITRUN_REPLAN_H

#include "StraitRun.h"
#include "strait/runtime/LinkTiming.h"
#include "strait/runtime/Status.h"

#include <map>
#include <optional>
#include <string>
#include <vector>

namespace strait {
namespace run {

/// "PEER:BYTES:SECONDS,..." ("-" when nothing was timed).
std::string formatLinkTimings(const std::map<int, rt::LinkTiming> &timings);

/// Parses formatLinkTimings' text; false on a malformed item.
bool parseLinkTimings(const std::string &text, std::map<int, rt::LinkTiming> &out);

/// The ranks' control file (`<log-dir>/replan.stop`, "STOP LEASE"): stop
/// after step STOP (0: no stop), and finish no step after LEASE before
/// reading the file again (0: none granted yet: kReplanFirstLease steps
/// after the run's first; -1: no lease, the ranks of a --host follower,
/// bound by the leader's ranks they exchange data with every step). The
/// launcher writes it atomically (rename).
struct ReplanControl {
  int stop = 0;
  int lease = 0;
  /// The last step a rank that started at step `first` may finish now.
  int allowed(int first) const;
};

/// Steps a rank may do before the launcher's first lease.
constexpr int kReplanFirstLease = 4;
/// A stop step with --host (a re-plan or a host join): the other machines'
/// launchers learn it through the store (a poll every 20 ms, later on a
/// loaded machine) and their ranks run without a lease, so the stop leaves
/// them about this long of steps (at most kStopNoticeMaxSteps) to pass it on
/// before their ranks reach it.
constexpr double kStopNoticeMs = 500;
constexpr int kStopNoticeMaxSteps = 48;

/// Reads the control file; a missing or empty one is {0, 0}.
ReplanControl readReplanControl(const std::string &path);

/// Writes it atomically; false (errno set) when it cannot.
bool writeReplanControl(const std::string &path, const ReplanControl &c);

/// A rank that finished step `done` (its run started after step `first`):
/// reads o.replanStopFile until it may start step done + 1 (the lease
/// allows it) or must stop (the stop step is `done` or before), polling
/// every millisecond; an error after o.timeoutMs without either.
rt::StatusOr<ReplanControl> awaitReplanLease(const RunOptions &o, int first, int done);

/// What straitc recorded about a job (DIR/straitc.json).
struct JobRecord {
  std::vector<std::string> argv;
  std::string cwd;
  std::string clusterFile;       // absolute: the copy in the job folder
  double predictedIterationS = 0;
  /// straitc --evaluate-plan: the plan it was given on this job's cluster
  /// (0 when not asked).
  double evaluatedIterationS = 0;
  struct Rank {
    std::string device, host;
    double memoryBytes = 0; // the device's memory in the cluster file (0: not recorded)
    /// Error-feedback residuals the rank keeps (straitc's model: the first
    /// step's encodes make them, so the executor cannot count them at load).
    double feedbackBytes = 0;
  };
  std::vector<Rank> ranks;       // by rank
  struct Link {
    int a = 0, b = 0;            // ranks, a < b, on different hosts
    double bandwidth = 0;        // bytes/s the plan assumed
    double latency = 0;          // seconds
  };
  std::vector<Link> links;
};

/// Reads DIR/straitc.json; the error names the file and the field.
rt::StatusOr<JobRecord> readJobRecord(const std::string &dir);

/// What a job's plan.json says about its shape.
struct PlanFacts {
  int64_t globalBatch = 0;
  int microBatches = 0;
  double iterationS = 0;            // the planner's predicted step
  std::vector<size_t> stageDevices; // replicas per stage
};

/// Reads DIR/plan.json; the error names the file and the field.
rt::StatusOr<PlanFacts> readPlanFacts(const std::string &dir);

/// The job folder a plan folder belongs to: DIR for DIR, DIR/replan-K and
/// DIR/host-loss-K (a new plan is written next to the first one).
std::string jobFolderOf(const std::string &planDir);

/// straitc to re-run: --straitc PATH, else the one next to strait-run or in
/// the build tree, else the recorded one, else "straitc" ($PATH).
std::string findStraitc(const RunOptions &o, const JobRecord &record);

/// Runs the job's recorded straitc command with --cluster `cluster` and -o
/// `dir` (which must exist) in the folder it ran in, its output in
/// DIR/straitc.log, plus --evaluate-plan=`evaluatePlan` when not empty;
/// returns the new folder's record (and the compile time in `seconds`).
/// Unavailable "straitc failed (exit C; PATH, log LOG)".
rt::StatusOr<JobRecord> runRecordedStraitc(const std::string &straitc, const JobRecord &record,
                                           const std::string &cluster, const std::string &dir,
                                           const std::string &evaluatePlan, double *seconds);

/// The plan lines of a straitc log, each prefixed "strait-run:   ".
std::string planSummary(const std::string &log);

/// One merged step as the launcher saw it: per rank, its time and timings.
struct StepReport {
  int step = 0;
  std::map<int, double> ms;
  std::map<int, std::map<int, rt::LinkTiming>> links; // rank -> peer -> timing
};

class ReplanMonitor {
public:
  /// Checks the flags and reads the job's record; an error says what is
  /// missing (e.g. a job compiled before straitc wrote straitc.json).
  /// Without --replan auto (--on-host-join replan alone) the monitor only
  /// grants the lease and stops the ranks for switchTo: no link is watched.
  static rt::StatusOr<ReplanMonitor> create(const RunOptions &o);

  /// Feeds one completed step (every rank finished it): extends the ranks'
  /// lease, and returns true when the ranks must stop after stopStep() (a
  /// new plan is ready in newPlanDir()); then writes the control file. Runs
  /// straitc synchronously when a link triggers (the ranks go on up to the
  /// lease meanwhile).
  bool observe(const StepReport &step, int lastStep);

  /// The last step any rank may finish (the largest lease granted).
  int lease() const { return leaseGranted; }

  int stopStep() const { return stopAt; }
  bool stopping() const { return stopAt > 0; }
  const std::string &newPlanDir() const { return pendingDir; }
  const std::string &stopFile() const { return stopPath; }

  /// After the ranks stopped: the new plan becomes the current one (its
  /// record is read, the windows restart). The caller resumes the ranks
  /// from the checkpoint of stopStep() under newPlanDir().
  rt::Status switched();

  /// The ranks run the plan in `dir` now (another decision than this
  /// monitor's, strait-run --on-host-loss): as switched() to it.
  rt::Status adopt(const std::string &dir) {
    pendingDir = dir;
    return switched();
  }

  /// Removes a stop file a previous run left behind.
  void clearStop();

  /// The last step every rank reported (0: none yet in this generation).
  int mergedStep() const { return lastMerged; }

  /// Another decision than the links' (a host joins, HostJoin.h): the ranks
  /// stop at the first step none can be past (as a re-plan's) for the plan
  /// in `dir`, which newPlanDir() then names. Returns the stop step, 0 when
  /// it would not come before `lastStep` (nothing changes), or an error
  /// when the control file cannot be written.
  rt::StatusOr<int> switchTo(int lastStep, const std::string &dir);

  /// The pending switch is off (its generation failed, or the joining host
  /// did not come): no stop; the lease granted stays.
  void cancel();

private:
  RunOptions options;
  std::string planDir;   // the plan the ranks run now
  JobRecord record;
  std::string stopPath;
  int replans = 0;       // switches and declined re-plans
  int skipUntil = 0;     // steps up to this one feed no window (the first)
  // Windows.
  struct Window {
    std::vector<double> throughput; // per step that timed the pair (bytes/s)
  };
  std::map<std::pair<int, int>, Window> window;
  std::vector<double> windowMs;       // step times (slowest rank) of the window
  int windowSteps = 0;
  std::map<std::pair<int, int>, int> outside; // windows in a row off the plan
  std::map<std::pair<int, int>, double> declinedAt; // bandwidth a declined re-plan saw
  std::map<std::pair<int, int>, bool> warnedNoSample;
  double lastWindowMs = 0;
  int leaseGranted = 0;
  int lastMerged = 0;
  double lastStepMs = 0; ///< the slowest local rank's time of the last merged step
  /// The first step a switch decided after merged step `step` may stop at.
  int earliestStop(int step) const;
  int stopAt = 0;
  std::string pendingDir;

  bool closeWindow(int step, int lastStep);
  bool replan(int step, int lastStep, const std::map<std::pair<int, int>, double> &measured,
              const std::string &why);
  void extendLease(int step, double ms);
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_REPLAN_H
