//===- Executor.h - Runs the steps of a device program ----------*- C++ -*-===//
//
// The executor owns the memory of one program: an arena for activations
// (placed by the program's memory plan, or planned here by liveness when the
// program leaves offsets unset) and one buffer per persistent value
// (inputs, parameters, optimizer state, gradients, outputs, constants). It
// resolves every kernel on its backend once, then runs the step list.
// Communication steps run on a thread of their own (run()), so that a
// transfer overlaps the kernels that follow it; a kernel whose inputs or
// outputs overlap the memory of a transfer still in flight waits for it, so
// results equal the sequential order's.
//
// Kernels are launched in segments (Backend::createSegment): maximal runs of
// kernels between host synchronization points, planned once at load for
// each of the two paths, so that a GPU backend can record a segment once
// and replay it (CUDA graphs).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_EXECUTOR_H
#define STRAIT_RUNTIME_EXECUTOR_H

#include "strait/runtime/AdaptiveRatio.h"
#include "strait/runtime/AqSgd.h"
#include "strait/runtime/Backend.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"
#include "strait_program.pb.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace strait {
namespace rt {

class Executor {
public:
  /// Validates the program, resolves kernels on the backend for its device
  /// and allocates memory. `comm` may be null when the program has no
  /// communication steps; it must outlive the executor.
  static StatusOr<std::unique_ptr<Executor>>
  create(program::Program program, const BackendRegistry &registry,
         Communicator *comm = nullptr);

  /// Initializes parameters / optimizer state from a shard file; every
  /// ROLE_PARAMETER value must be covered. The next run() first runs the
  /// program's `once` steps again (the parameters' 16-bit copies).
  Status loadParameters(const program::ParameterShardFile &shards);
  /// Makes the next run() run the `once` steps first: call it after writing
  /// parameters other than through loadParameters.
  void invalidateParameterCopies() { onceDone = false; }

  /// A view of a value's storage; NotFound for an unknown id.
  StatusOr<Tensor> getValue(uint32_t id) const;
  StatusOr<Tensor> getValueByName(const std::string &name) const;

  ~Executor();

  /// Runs every step once, in order (the `once` steps only on the first
  /// call after loading: they fill the parameters' 16-bit copies, which the
  /// optimizer keeps up to date); returns once the device finished
  /// (Backend::synchronize) and every transfer completed, so values can be
  /// read. With overlap on (the default), communication steps run on the
  /// executor's communication thread while the following kernels run.
  Status run();
  /// Runs one step by index into program.steps, synchronously: it returns
  /// once a device backend has finished the step's kernels.
  Status runStep(int index);
  /// Inference mode (strait-run --eval-data): runStep runs each kernel that
  /// has an inference form as that form instead. BatchNormalizationTraining
  /// becomes BatchNormalization: it normalizes with its running-statistics
  /// inputs and writes only Y (PyTorch's eval()), so an evaluation neither
  /// normalizes by the evaluation batch nor touches what the training step's
  /// AssignVariable reads. run() ignores the mode. An error names the kernel
  /// whose inference form the backend lacks.
  Status setInference(bool on);
  /// Overlap of communication with compute in run() (default on); off runs
  /// every step on the calling thread, in order.
  void setOverlapCommunication(bool on) { overlap = on; }

  const program::Program &getProgram() const { return program; }

  /// Time per op type of the kernels run while profiling is on: the wall
  /// time of each kernel call on the executor's thread (the CPU backend's
  /// kernels run within it; a device backend that queues work is timed for
  /// its launches only), with KernelContext::trafficBytes.
  struct OpTime {
    std::string op;
    int64_t launches = 0;
    double ms = 0;
    double bytes = 0;
  };
  void setProfiling(bool on) { profiling = on; }
  /// The op times since the last call, longest first; resets them.
  std::vector<OpTime> takeProfile();
  size_t getArenaBytes() const { return arena.size(); }

  /// Adaptive top-k (CodecParams.adapt, docs/runtime.md "Adaptive top-k"):
  /// the process default for executors created afterwards (on; strait-run
  /// --topk-adapt off turns it off: every send keeps its program ratio).
  static void setAdaptiveTopKDefault(bool on);
  /// One adaptive stream (a value sent to `peer` on `channel` every
  /// micro-batch) and its controller's state after the last run().
  struct AdaptiveLink {
    int peer = -1;
    uint32_t channel = 0;
    double ratio = 0, throughput = 0, budget = 0; // bytes/s, s
  };
  std::vector<AdaptiveLink> getAdaptiveLinks() const;

  /// The error-feedback streams of the program's lossy sends and
  /// all-reduces, by (step index, value id); checkpoints save and restore
  /// their residuals (strait-run, Checkpoint.h). Empty until run() or
  /// create() made them; a stream's residual is empty before its first
  /// encode and lives on the device for a stream a device encodes.
  const std::map<std::pair<int, uint32_t>, std::unique_ptr<ErrorFeedback>> &
  getFeedbackStreams() const {
    return feedback;
  }
  std::map<std::pair<int, uint32_t>, std::unique_ptr<ErrorFeedback>> &getFeedbackStreams() {
    return feedback;
  }

  /// AQ-SGD codecs (CODEC_AQSGD_*, AqSgd.h): the per-sample state of this
  /// rank's cuts (owned by the caller, outliving the executor) and the
  /// dataset samples of the next run()'s batch, the micro-batches' stacked
  /// in order (micro-batch i holds samples [i B/M, (i + 1) B/M)). A
  /// program with such a codec fails its transfers without them.
  void setActivationDeltas(ActivationDeltas *d) { deltas = d; }
  void setBatchSamples(std::vector<uint64_t> ids) { batchSamples = std::move(ids); }
  /// Whether a Send/Recv of the program uses an AQ-SGD codec.
  bool usesActivationDeltas() const;

private:
  explicit Executor(program::Program program) : program(std::move(program)) {}
  Status resolveKernels(const Backend &backend);
  Status allocate(const Backend &backend);
  Status runKernel(const program::Kernel &kernel, int microBatch);
  /// `ready`: when the step's values were ready (the communication thread:
  /// when run() queued it; zero: now, on the calling thread).
  Status runComm(int index, std::chrono::steady_clock::time_point ready = {});
  /// run() without the adaptive ratios' progress line.
  Status runIteration();
  Status annotate(Status status, int step) const;
  Status checkCommStep(int index) const;
  /// Lookup without std::map::operator[] (which may insert), so that the
  /// communication thread and kernels may read the map concurrently.
  Tensor &value(uint32_t id) { return values.find(id)->second; }
  const Tensor &value(uint32_t id) const { return values.find(id)->second; }
  // Overlapped run: a FIFO of communication steps served by commThread.
  struct Transfer {
    int step;
    bool writes; // recv / all-reduce: writes its values; send: reads
    std::vector<std::pair<const char *, const char *>> memory;
    std::chrono::steady_clock::time_point queued{}; // when run() queued it
  };
  /// A run of kernel launches between host synchronization points.
  struct Segment {
    std::vector<std::pair<int, int>> launches; // (step, kernel position)
    std::unique_ptr<KernelSegment> impl;       // created on first use
    bool host = false; // one kernel that runs on the host: launched directly
  };
  /// One action of a run() path, in order.
  struct Action {
    enum Kind { Launch, Comm, Sync, Enqueue } kind;
    int step;       // Comm, Sync, Enqueue: the step; Launch: its first step
    int segment;    // Launch: index into the path's segments
    uint64_t wait;  // Launch (overlap): transfers of this run (numbered from
                    // 1 in queue order) that must have finished first; 0: none
  };
  struct Plan {
    std::vector<Action> actions;
    std::vector<Segment> segments;
  };
  /// The sequential path: comm steps (synchronize + transfer) and the
  /// maximal runs of run steps between them.
  void planSequential();
  /// The overlapped path: the order in which run() queues transfers
  /// (prefetching receives), and segments split where a kernel must wait
  /// for a queued transfer that overlaps its memory.
  void planOverlapped();
  Status launchSegment(Plan &plan, const Action &action);
  Status runOverlapped();
  /// Waits for the iteration's deferred sends when `result` is ok (run()'s
  /// last act); returns the first failure.
  Status finishSends(Status result);
  Transfer makeTransfer(int index) const;
  /// Whether a kernel of the run steps in [from, to) touches t's memory.
  bool kernelsTouch(const Transfer &t, int from, int to) const;
  void commLoop();
  /// Waits until the transfers up to sequence number `seq` finished (or,
  /// unless `all`, one failed); returns the first failure.
  Status waitTransfers(uint64_t seq, bool all = false);
  /// Whether transfer t and the kernel touch common memory where either
  /// writes (a recv or an all-reduce writes, a send reads).
  bool conflicts(const Transfer &t, const program::Kernel &kernel) const;

  program::Program program;
  const Backend *backend = nullptr; // owned by the registry
  Communicator *comm = nullptr;
  Buffer arena;
  std::vector<Buffer> persistent;
  /// Host copies of small integer constants (Tensor::host).
  std::vector<std::vector<char>> hostConstants;
  std::map<uint32_t, Tensor> values;
  /// Whether the `once` steps ran since the parameters were last loaded.
  bool onceDone = false;
  bool profiling = false;
  std::map<std::string, OpTime> opTimes;
  Status runOnceSteps();
  std::map<uint32_t, int> kernelIndex;
  std::vector<KernelFn> kernelFns; // parallel to program.kernels()
  /// setInference: the inference forms, by the id of the kernel they
  /// replace (made on the first call).
  struct InferenceForm {
    program::Kernel kernel;
    KernelFn fn;
  };
  std::map<uint32_t, InferenceForm> inferenceForms;
  bool inference = false;
  void planAllReduceBuckets();
  /// Per all-reduce step: its values grouped into buckets reduced together.
  std::map<int, std::vector<std::vector<uint32_t>>> allReduceBuckets;
  /// The largest multi-value bucket, contiguous, in the backend's memory
  /// (a GPU communicator reads it on the device).
  Buffer fused;
  size_t fusedElements = 0;
  /// Error feedback of each (step, value) that sends with a lossy codec
  /// (a fused bucket uses its first value's).
  std::map<std::pair<int, uint32_t>, std::unique_ptr<ErrorFeedback>> feedback;
  /// The program's i64 scalar input "step" (the 1-based iteration), which
  /// all-reduces with codec.exact_steps read; -1 without one.
  int64_t stepValueId = -1;
  /// Whether all-reduce `ar` runs without its codec this iteration (its
  /// first codec.exact_steps iterations).
  bool exactThisStep(const program::AllReduce &ar) const;
  /// Adaptive top-k controllers by (peer, channel): the send steps of one
  /// value (one per micro-batch) share one. Used on the communication
  /// thread only; read by getAdaptiveLinks() between runs.
  std::map<std::pair<int, uint32_t>, std::unique_ptr<AdaptiveRatio>> adaptive;
  /// Time run() spent launching kernels and waiting for the device (its
  /// compute), and the program's micro-batches: the adaptive budget.
  double computeSeconds = 0;
  int microBatches = 1;
  Status timedLaunch(Plan &plan, const Action &action);
  /// Sends the encoded transfer `m` of step `index` with an adaptive ratio.
  Status sendAdaptive(const program::Send &m, const Tensor &v, ErrorFeedback *state,
                      std::chrono::steady_clock::time_point ready);

  ActivationDeltas *deltas = nullptr;
  std::vector<uint64_t> batchSamples;
  /// The samples of step `index`'s micro-batch (first, count).
  StatusOr<std::pair<const uint64_t *, size_t>> microBatchSamples(int index) const;
  /// Send / Recv `index` through the AQ-SGD state.
  Status sendDelta(int index, const program::Send &m, const Tensor &v);
  /// A Send with keep_decoded (the value becomes what the peer receives) or
  /// repeat_payload (the payload of the value's keep_decoded Send again).
  Status sendDecoded(const program::Send &m, const Tensor &v, ErrorFeedback *state);
  /// The stream of each value's latest keep_decoded Send (its payload).
  std::map<uint32_t, const ErrorFeedback *> decodedPayloads;
  std::vector<float> decodedIn, decodedOut;
  Status recvDelta(int index, const program::Recv &m, const Tensor &v);

  Plan sequentialPlan, overlapPlan;

  bool overlap = true;
  bool hasDeferredSends = false; // a Send step with `deferred` (1F1B)
  std::thread commThread;
  std::mutex commMutex;
  std::condition_variable commWake, commDone;
  std::deque<Transfer> queue;  // queued or running, in program order
  uint64_t queuedSeq = 0;      // transfers queued so far
  uint64_t doneSeq = 0;        // transfers finished so far
  Status commError;            // first failure of the communication thread
  bool stopping = false;
};

/// Plans arena offsets for activations by liveness over the schedule
/// (first-fit over freed intervals). Writes offsets and arena size into the
/// program; returns the arena size.
StatusOr<uint64_t> planMemory(program::Program &program);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_EXECUTOR_H
