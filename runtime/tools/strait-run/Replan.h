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
//     the recorded straitc command on it into DIR/replan-K/ and compares the
//     new plan's predicted step time, calibrated to this machine (the step
//     time measured now over the old plan's prediction for the measured
//     links), with the step time measured now; only a predicted gain
//     switches. The ranks then checkpoint after
//     a step a few steps ahead (a stop file they read after every step),
//     exit with code 4, and the launcher resumes them under the new plan.
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

/// The step the stop file names, 0 when there is none.
int readReplanStop(const std::string &path);

/// What straitc recorded about a job (DIR/straitc.json).
struct JobRecord {
  std::vector<std::string> argv;
  std::string cwd;
  std::string clusterFile;       // absolute: the copy in the job folder
  double predictedIterationS = 0;
  struct Rank {
    std::string device, host;
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

/// One merged step as the launcher saw it: per rank, its time and timings.
struct StepReport {
  int step = 0;
  std::map<int, double> ms;
  std::map<int, std::map<int, rt::LinkTiming>> links; // rank -> peer -> timing
  std::map<int, std::map<int, uint64_t>> sent;         // rank -> peer -> bytes sent
};

/// "P:B,P:B" (the progress line's sent field) into peer -> bytes.
std::map<int, uint64_t> parseSentBytes(const std::string &text);

/// One measured inter-host pair of the old plan: the bytes it carried a step
/// (the larger direction) and the bandwidths (bytes/s) assumed and measured.
struct OldPlanLink {
  double bytes = 0, assumedBw = 0, measuredBw = 0;
};

struct OldPlanAtMeasured {
  double seconds = 0;           // the old plan's predicted step at the measured links
  double fasterAssumedS = 0;    // the faster links' transfers at the assumed rates
  double removedS = 0;          // what the faster links remove from the prediction
  double unboundedRemovedS = 0; // what they would remove were their transfers serial
};

/// The old plan's prediction for the measured links (the re-plan's
/// calibration, docs/runtime.md): predictedS plus each slower pair's extra
/// transfer time, minus each faster pair's saving; the savings are scaled by
/// predictedS / fasterAssumedS when the faster pairs' transfers at the
/// assumed rates exceed the predicted step (they overlapped), so the result
/// stays positive for a positive predictedS.
OldPlanAtMeasured oldPlanAtMeasuredLinks(double predictedS,
                                         const std::vector<OldPlanLink> &links);

class ReplanMonitor {
public:
  /// Checks the flags and reads the job's record; an error says what is
  /// missing (e.g. a job compiled before straitc wrote straitc.json).
  static rt::StatusOr<ReplanMonitor> create(const RunOptions &o);

  /// Feeds one completed step. Returns true when the ranks must stop after
  /// stopStep() (a new plan is ready in newPlanDir()); then writes the stop
  /// file. Runs straitc synchronously when a link triggers.
  bool observe(const StepReport &step, int lastStep);

  int stopStep() const { return stopAt; }
  bool stopping() const { return stopAt > 0; }
  const std::string &newPlanDir() const { return pendingDir; }
  const std::string &stopFile() const { return stopPath; }

  /// After the ranks stopped: the new plan becomes the current one (its
  /// record is read, the windows restart). The caller resumes the ranks
  /// from the checkpoint of stopStep() under newPlanDir().
  rt::Status switched();

  /// Removes a stop file a previous run left behind.
  void clearStop();

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
    std::vector<double> bytes;      // per step: the larger direction's bytes
  };
  std::map<std::pair<int, int>, Window> window;
  std::vector<double> windowMs;       // step times (slowest rank) of the window
  int windowSteps = 0;
  std::map<std::pair<int, int>, int> outside; // windows in a row off the plan
  std::map<std::pair<int, int>, double> declinedAt; // bandwidth a declined re-plan saw
  std::map<std::pair<int, int>, bool> warnedNoSample;
  double lastWindowMs = 0;
  std::map<std::pair<int, int>, double> lastBytes; // median bytes a step, last window
  int stopAt = 0;
  std::string pendingDir;

  bool closeWindow(int step, int lastStep);
  bool replan(int step, int lastStep, const std::map<std::pair<int, int>, double> &measured,
              const std::string &why);
  double assumed(std::pair<int, int> pair) const;
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_REPLAN_H
