//===- StraitRun.h - Launcher and worker of strait-run ----------*- C++ -*-===//
//
// strait-run has two modes:
//  - launcher (`strait-run DIR`): reads DIR/plan.pb and starts one worker
//    process per rank on this machine, with RANK / WORLD_SIZE / LOCAL_RANK
//    in the environment and a log file per rank; stops every rank when one
//    fails or on Ctrl-C, and exits non-zero naming the failed rank;
//  - worker (`strait-run DIR --rank R`, or RANK/WORLD_SIZE set): runs rank
//    R's program for --steps iterations, talking to peers over Gloo.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_STRAITRUN_H
#define STRAIT_RUNTIME_TOOLS_STRAITRUN_H

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace strait {
namespace program {
class PlanManifest;
} // namespace program
namespace rt {
struct GlooOptions;
} // namespace rt
namespace run {

struct RunOptions {
  std::string planDir;
  std::string manifest = "plan.pb";
  int rank = -1;            // worker mode when >= 0
  int steps = 1;
  int threads = 0;          // 0: hardware concurrency / local ranks
  int timeoutMs = 60000;    // rendezvous and per-transfer timeout
  float learningRate = 1e-3f; // value of an input named "lr"
  std::string lrText = "0.001";
  bool lrGiven = false;     // --lr on the command line: replaces the schedule's peak_lr
  std::string logDir;       // default: <planDir>/logs
  std::string runId;        // rendezvous key prefix; default: generated
  std::string executable;   // argv[0], to start workers
  // Data (see docs/runtime.md, "Data inputs").
  std::string dataPath;     // --data FILE: token file or npy samples
  std::string dataFormat;   // tokens-u16 | tokens-u32 | npy; "" = infer
  std::string labelsPath;   // --labels FILE.npy (npy data only)
  std::string inputName;    // data input; "" = input_ids / first match
  std::string labelsName = "labels";
  uint64_t seed = 1234;     // batch sampling seed
  // Further inputs (DataInputs.h): --input NAME=FILE.npy (rows aligned with
  // npy --data), --eval-input NAME=FILE.npy (with --eval-data), --input-fill
  // NAME=VALUE; each repeatable, one flag per input.
  using NamedPaths = std::vector<std::pair<std::string, std::string>>;
  NamedPaths inputFiles, evalInputFiles, inputFills;
  // Held-out loss (Eval.h): --eval-data FILE [--eval-labels FILE.npy] every
  // --eval-every K steps (0: after the last only) over --eval-batches N.
  std::string evalDataPath;
  std::string evalLabelsPath;
  int evalEvery = 0;
  int evalBatches = 8;
  std::string dumpDir;      // --dump-outputs DIR: outputs of the last step
  std::string saveParamsDir; // --save-params DIR: parameters after the last step
  // Checkpoints (docs/runtime.md, "Checkpoints and restarts").
  std::string checkpointDir; // --checkpoint DIR: step-N folders
  int checkpointEvery = 0;   // --checkpoint-every K: also after every K-th step
  std::string resumePath;    // --resume DIR: a step folder, or the newest under DIR
  // Local steps (docs/runtime.md, "Local steps"): --no-final-outer-step
  // leaves the islands' own parameters after the last step.
  bool finalOuterStep = true;
  int maxRestarts = 0;       // launcher: restarts from the newest checkpoint on a failure
  // In-process recovery from broken links (docs/runtime.md, "Flaky links";
  // LinkRecovery.h): --link-retries R recoveries in a row (0: off, no
  // snapshots), --link-retry-wait MS before the second and later ones.
  int linkRetries = 3;
  int linkRetryWaitMs = 1000;
  bool profile = false;      // --profile: time per op type after the first iteration
  bool quietProgress = false; // launcher: do not echo the merged progress
  std::string listenAddress; // worker: listen here instead of the manifest's address
  // --rendezvous URL or $STRAIT_RENDEZVOUS (redis://HOST[:PORT], file://DIR
  // or DIR): the store the ranks meet through, instead of the manifest's.
  std::string rendezvous;
  // Redis AUTH: $STRAIT_REDIS_PASSWORD (and $STRAIT_REDIS_USER for a Redis 6
  // ACL user). A password in the --rendezvous URL is moved here, and into
  // the environment the ranks inherit, by main (it warns: `ps` shows it).
  std::string redisUser, redisPassword;
  // --host NAME (launcher): start only the plan's ranks on that host (the
  // cluster file's host name), one launcher per machine, torchrun-style.
  std::string host;
  // Devices (docs/runtime.md, "Devices"): auto = the device straitc planned.
  std::string device = "auto";        // auto | cpu | cuda | cuda:N
  std::string comm = "auto";          // auto (NCCL inside a GPU host) | gloo
  std::string matmulPrecision = "bf16"; // CUDA MatMul/Gemm: f32 | tf32 | bf16
  // Sealed links (docs/runtime.md, "Sealed links"): --link-secret FILE or
  // $STRAIT_LINK_SECRET_FILE; the launcher passes the file's path, never
  // its contents, to the ranks it starts.
  std::string linkSecretFile;
  // --topk-adapt on|off (docs/runtime.md, "Adaptive top-k").
  bool topkAdapt = true;
  // Re-planning (docs/runtime.md, "Re-planning when links change"; Replan.h).
  bool replan = false;         // --replan auto|off (launcher)
  double replanFactor = 4;     // --replan-factor X: a link off by more than X
  int replanAfter = 2;         // --replan-after K: ... for K windows in a row
  int replanWindow = 5;        // --replan-window N: steps per window
  int replanMax = 3;           // --replan-max N: re-plans per run
  std::string straitcPath;     // --straitc PATH: "" = next to strait-run, then $PATH
  std::string replanStopFile;  // worker: checkpoint and exit 4 at the step it names
  // A host lost for good (docs/runtime.md, "Losing a host"; HostLoss.h):
  // --on-host-loss replan goes on with the other hosts under a new plan,
  // down to --min-hosts N hosts; fail (the default) ends the job.
  bool onHostLossReplan = false;
  int minHosts = 1;
  // Hosts that join (docs/runtime.md, "A host joins"; HostJoin.h):
  // --on-host-join replan re-plans the running job with a host whose
  // launcher announced itself with --join (refuse, the default: ignored).
  bool onHostJoinReplan = false;
  bool join = false;
  // Traces (docs/runtime.md, "Traces"; Trace.h): --trace FILE.json (the
  // launcher: the merged job; a worker: its own rank) of the iterations
  // --trace-steps A:B (default 2:4).
  std::string traceFile;
  std::string traceSteps;
  int traceFirst = 0, traceLast = 0; // parsed, 1-based; 0: not tracing
};

/// Worker exit code: stopped at the launcher's request after checkpointing,
/// to resume under a new plan.
constexpr int kExitStoppedForReplan = 4;

/// Where the ranks meet: --rendezvous, else the manifest's store (a Redis
/// host:port as redis://, or the file store's folder, DIR/rendezvous by
/// default), as a URL for rt::setRendezvous.
std::string rendezvousUrl(const RunOptions &options, const program::PlanManifest &manifest);

/// Gives a Redis store of `gloo` the options' user and password, unless its
/// URL named its own.
void setStoreAuth(const RunOptions &options, rt::GlooOptions &gloo);

/// Starts and supervises the local ranks; returns the process exit code.
int runLauncher(const RunOptions &options);

/// Runs one rank; returns the process exit code.
int runWorker(const RunOptions &options);

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_H
