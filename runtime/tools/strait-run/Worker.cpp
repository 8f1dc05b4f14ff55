//===- Worker.cpp - One rank of a strait-run job --------------------------===//
//
// Loads the manifest, this rank's program and parameter shard, connects to
// the other ranks, fills the data inputs from --data (token file or npy
// arrays), and runs the program's steps once per iteration, printing one
// progress line per iteration:
//   rank R iteration N/M time MS ms [loss L] [lr X] [tokens|samples K] [outer-step T]
//   sent P:B,.. recv P:B,..
// (K items fed this iteration; T ms of the local-steps outer step when it
// ran after this iteration, included in MS; B bytes to / from peer P since
// the previous line, the outer step's included). The launcher merges these
// lines into one line per step. With --dump-outputs DIR every ROLE_OUTPUT of
// the last iteration is written as DIR/<name>.rank<R>.npy.
//
//===----------------------------------------------------------------------===//
#include "StraitRun.h"
#include "AqSgdRun.h"
#include "Checkpoint.h"
#include "LossScale.h"
#include "DataInputs.h"
#include "DataLoader.h"
#include "Devices.h"
#include "Eval.h"
#include "LinkRecovery.h"
#include "Npy.h"
#include "OuterSync.h"
#include "Replan.h"
#include "WorkerIO.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/LinkTiming.h"
#include "strait/runtime/LrSchedule.h"
#include "strait/runtime/Program.h"
#include "strait/runtime/ThreadPool.h"
#include "strait/runtime/Trace.h"

#include <algorithm>
#include <cctype>
#include <csignal>
#include <exception>
#include <chrono>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <sys/stat.h>
#include <thread>
#include <sys/resource.h>
#include <unistd.h>

namespace strait {
namespace run {

using namespace strait::rt;

namespace {

/// This rank's record in straitc.json (none when the job has none).
std::optional<JobRecord::Rank> recordedRank(const RunOptions &o) {
  if (access((o.planDir + "/straitc.json").c_str(), R_OK) != 0)
    return std::nullopt;
  StatusOr<JobRecord> record = readJobRecord(o.planDir);
  if (!record.isOk() || o.rank < 0 || o.rank >= static_cast<int>(record->ranks.size()))
    return std::nullopt;
  return record->ranks[o.rank];
}

/// In-process recovery's two state snapshots must fit, beside the
/// executor's memory and the error-feedback residuals, in the memory the
/// cluster file gives this rank's device (straitc.json records both; each
/// snapshot holds the residuals too): the reason they do not, else "" (also
/// when the job has no record).
std::string snapshotsDoNotFit(const std::optional<JobRecord::Rank> &r, const Executor &exec,
                              const NamedTensors &extra, uint64_t executorBytes) {
  if (!r)
    return "";
  double residuals = r->feedbackBytes;
  double snapshots =
      2.0 * (static_cast<double>(StateSnapshots::stateBytes(exec, extra)) + residuals);
  if (r->memoryBytes <= 0 || executorBytes + residuals + snapshots <= r->memoryBytes)
    return "";
  auto gib = [](double b) {
    char text[32];
    bool big = b >= double(1ull << 30);
    std::snprintf(text, sizeof text, big ? "%.2f GiB" : "%.2f MiB",
                  b / double(big ? 1ull << 30 : 1ull << 20));
    return std::string(text);
  };
  return "to keep memory: its two state snapshots (2 x " + gib(snapshots / 2) +
         (residuals > 0 ? " of parameters, optimizer state and error-feedback residuals"
                        : " of parameters and optimizer state") +
         ") and the executor's " + gib(double(executorBytes)) +
         (residuals > 0 ? " + the residuals' " + gib(residuals) : std::string()) + " exceed the " +
         gib(r->memoryBytes) + " of device " + r->device + " in the cluster file";
}

// Set when the loop stopped at the launcher's re-plan request (exit code 4).
bool stoppedForReplan = false;


/// Forwards to a communicator and counts the bytes sent to and received
/// from each peer. A communicator that measures its traffic at the
/// transport (Gloo: every buffer posted, codec payloads included) is read
/// through takeTraffic(); otherwise send/recv count the tensor bytes and
/// all-reduce traffic is estimated as a ring's: 2 (n-1)/n of the tensor to
/// the next rank of the group and from the previous one.
class CountingCommunicator : public Communicator {
public:
  explicit CountingCommunicator(std::unique_ptr<Communicator> inner)
      : inner(std::move(inner)) {}
  int getRank() const override { return inner->getRank(); }
  int getWorldSize() const override { return inner->getWorldSize(); }
  Status send(const Tensor &t, int peer, uint32_t channel) override {
    add(sent, peer, t.byteSize());
    return inner->send(t, peer, channel);
  }
  Status recv(const Tensor &t, int peer, uint32_t channel) override {
    add(received, peer, t.byteSize());
    return inner->recv(t, peer, channel);
  }
  Status allReduceSum(const Tensor &t, uint32_t channel) override {
    std::vector<int> all;
    for (int r = 0; r < getWorldSize(); ++r)
      all.push_back(r);
    ring(t, all);
    return inner->allReduceSum(t, channel);
  }
  Status allReduceSumGroup(const Tensor &t, const std::vector<int> &ranks,
                           uint32_t channel) override {
    ring(t, ranks);
    return inner->allReduceSumGroup(t, ranks, channel);
  }
  Status barrier() override { return inner->barrier(); }
  Status sendCoded(const Tensor &t, int peer, uint32_t channel,
                   const program::CodecParams &codec, ErrorFeedback *feedback) override {
    add(sent, peer, t.byteSize());
    return inner->sendCoded(t, peer, channel, codec, feedback);
  }
  Status recvCoded(const Tensor &t, int peer, uint32_t channel,
                   const program::CodecParams &codec) override {
    add(received, peer, t.byteSize());
    return inner->recvCoded(t, peer, channel, codec);
  }
  Status sendDeferred(const Tensor &t, int peer, uint32_t channel,
                      const program::CodecParams &codec, ErrorFeedback *feedback) override {
    add(sent, peer, t.byteSize());
    return inner->sendDeferred(t, peer, channel, codec, feedback);
  }
  Status recvDeferred(const Tensor &t, int peer, uint32_t channel,
                      const program::CodecParams &codec) override {
    add(received, peer, t.byteSize());
    return inner->recvDeferred(t, peer, channel, codec);
  }
  Status flushSends() override { return inner->flushSends(); }
  Status allReduce(const Tensor &t, uint32_t channel,
                   const AllReduceOptions &options) override {
    std::vector<int> ranks = options.ranks;
    if (ranks.empty())
      for (int r = 0; r < getWorldSize(); ++r)
        ranks.push_back(r);
    ring(t, ranks);
    return inner->allReduce(t, channel, options);
  }
  TrafficCounters takeTraffic() override { return inner->takeTraffic(); }
  void abort(const std::string &reason) override {
    std::lock_guard<std::mutex> lock(innerMutex);
    if (inner)
      inner->abort(reason);
  }
  /// In-process recovery: the next epoch's communicator (nothing in flight).
  /// `leak`: the old one is not destroyed (a thread of its transport died:
  /// its destructor would wait for it forever).
  void replace(std::unique_ptr<Communicator> next, bool leak = false) {
    std::lock_guard<std::mutex> lock(innerMutex);
    if (leak)
      (void)inner.release();
    inner = std::move(next);
  }

  /// "P:B,P:B" of sent and received bytes since the last call, then resets.
  void take(std::string &sentText, std::string &recvText) {
    std::lock_guard<std::mutex> lock(mutex);
    TrafficCounters measured = inner->takeTraffic();
    if (measured.measured) {
      sent = measured.sent;
      received = measured.received;
    }
    sentText = format(sent);
    recvText = format(received);
    for (auto &kv : sent)
      kv.second = 0;
    for (auto &kv : received)
      kv.second = 0;
  }

private:
  void add(std::map<int, uint64_t> &m, int peer, uint64_t bytes) {
    std::lock_guard<std::mutex> lock(mutex);
    m[peer] += bytes;
  }
  void ring(const Tensor &t, const std::vector<int> &ranks) {
    size_t n = ranks.size();
    int self = getRank();
    for (size_t i = 0; i < n && n > 1; ++i)
      if (ranks[i] == self) {
        uint64_t bytes = 2 * (n - 1) * t.byteSize() / n;
        add(sent, ranks[(i + 1) % n], bytes);
        add(received, ranks[(i + n - 1) % n], bytes);
      }
  }
  static std::string format(const std::map<int, uint64_t> &m) {
    std::string out;
    for (const auto &kv : m)
      out += (out.empty() ? "" : ",") + std::to_string(kv.first) + ":" +
             std::to_string(kv.second);
    return out.empty() ? "-" : out;
  }
  std::unique_ptr<Communicator> inner;
  std::mutex innerMutex; // abort() from the recovery watcher vs. replace()
  std::mutex mutex;
  std::map<int, uint64_t> sent, received;
};

} // namespace

std::string rendezvousUrl(const RunOptions &o, const program::PlanManifest &m) {
  if (!o.rendezvous.empty())
    return o.rendezvous;
  if (m.rendezvous() == program::RENDEZVOUS_REDIS)
    return "redis://" + m.rendezvous_address();
  return m.rendezvous_address().empty() ? "rendezvous" : m.rendezvous_address();
}

void setStoreAuth(const RunOptions &o, GlooOptions &g) {
  if (g.store != StoreKind::Redis || !g.redisPassword.empty())
    return;
  g.redisUser = o.redisUser;
  g.redisPassword = o.redisPassword;
}

namespace {

/// The Gloo options of this rank; `epoch` > 0: the rendezvous of in-process
/// recovery epoch `epoch` (LinkRecovery.h), under a prefix of its own. The
/// store is --rendezvous's, else the manifest's; a rank whose store is on
/// another machine and that was given no address listens on the interface
/// that reaches the store.
StatusOr<GlooOptions> glooOptions(const RunOptions &o, const program::PlanManifest &m,
                                  int epoch = 0) {
  GlooOptions g;
  g.rank = o.rank;
  g.worldSize = m.world_size();
  g.timeout = std::chrono::milliseconds(o.timeoutMs);
  g.prefix = (o.runId.empty() ? "strait" : o.runId) +
             (epoch > 0 ? "/e" + std::to_string(epoch) : std::string());
  g.linkSecretFile = o.linkSecretFile;
  const program::RankEntry *self = nullptr;
  for (const auto &r : m.ranks())
    if (r.rank() == o.rank)
      self = &r;
  bool addressGiven = !o.listenAddress.empty() || (self && !self->address().empty());
  if (self && !self->address().empty())
    g.hostname = self->address().substr(0, self->address().find(':'));
  if (!o.listenAddress.empty()) // e.g. inside a network namespace (wan-netns.sh)
    g.hostname = o.listenAddress;
  std::string url = rendezvousUrl(o, m);
  Status s = setRendezvous(g, url, o.planDir);
  if (!s.isOk())
    return s;
  setStoreAuth(o, g);
  if (g.store == StoreKind::Redis && !addressGiven) {
    StatusOr<std::string> local = localAddressToward(g.redisHost, g.redisPort);
    if (!local.isOk())
      return local.getStatus();
    g.hostname = local.takeValue();
  }
  return g;
}

StatusOr<std::unique_ptr<Communicator>> connect(const RunOptions &o,
                                                const program::PlanManifest &m, int epoch = 0) {
  STRAIT_ASSIGN_OR_RETURN(GlooOptions g, glooOptions(o, m, epoch));
  return createGlooCommunicator(g);
}

/// The trace's channel for the clock offset estimate: above any a program
/// uses (straitc numbers them from 0).
constexpr uint32_t kTraceClockChannel = 0x7ffffff0u;

/// With --trace: this rank's host and device, and its clock's offset to
/// rank 0's (estimated over the Gloo connection, before anything else
/// uses it).
Status startTrace(const RunOptions &o, Communicator *gloo, const std::string &device,
                  trace::ProcessInfo &info) {
  char host[256] = {0};
  ::gethostname(host, sizeof(host) - 1);
  info.rank = o.rank;
  info.host = host;
  info.device = device;
  info.firstStep = o.traceFirst;
  info.lastStep = o.traceLast;
  trace::nameThread("compute", 1);
  if (gloo)
    STRAIT_RETURN_IF_ERROR(trace::estimateClockOffset(*gloo, kTraceClockChannel, info));
  return Status::ok();
}

Status runRank(const RunOptions &o) {
  STRAIT_ASSIGN_OR_RETURN(program::PlanManifest m,
                          loadManifest(resolvePath(o.planDir, o.manifest)));
  const program::RankEntry *entry = nullptr;
  for (const auto &r : m.ranks())
    if (r.rank() == o.rank)
      entry = &r;
  if (!entry)
    return notFound("rank not in the manifest").withRank(o.rank);
  STRAIT_ASSIGN_OR_RETURN(program::Program p,
                          loadProgram(resolvePath(o.planDir, entry->program_file())));
  if (p.rank() != o.rank || p.world_size() != m.world_size())
    return invalidArgument("program file '" + entry->program_file() +
                           "' is for rank " + std::to_string(p.rank()) +
                           " of " + std::to_string(p.world_size()))
        .withRank(o.rank);
  // The device: the program's unless --device says otherwise; a missing
  // GPU fails here, before the rendezvous.
  std::string cudaReason;
  bool wantsCuda = p.device().rfind("cuda", 0) == 0 || o.device.rfind("cuda", 0) == 0;
  int gpus = wantsCuda && o.device != "cpu" ? cudaDevices(cudaReason) : 0;
  StatusOr<DeviceSpec> chosen = chooseDevice(p.device(), o.device, cudaBuilt(), gpus, cudaReason);
  if (!chosen.isOk())
    return Status(chosen.getStatus()).withRank(o.rank);
  DeviceSpec device = *chosen;
  p.set_device(device.str());
  // The learning-rate schedule (an explicit --lr replaces its peak); like a
  // bad data file, a bad schedule fails before the rendezvous.
  std::optional<program::LrSchedule> schedule;
  if (p.has_lr_schedule()) {
    schedule = p.lr_schedule();
    if (o.lrGiven) {
      schedule->set_peak_lr(o.learningRate);
      schedule->set_min_lr(std::min(schedule->min_lr(), o.learningRate));
    }
    Status s = validateLrSchedule(*schedule);
    if (!s.isOk())
      return invalidArgument("program file '" + entry->program_file() + "': " + s.getMessage() +
                             (o.lrGiven ? " (after --lr " + o.lrText + ")" : ""))
          .withRank(o.rank);
  }
  if (o.threads > 0) {
    setNumThreads(o.threads);
    setBlasThreads(o.threads);
  }
  // Data first: a bad file fails before the rendezvous.
  std::unique_ptr<data::DataLoader> loader, evalLoader;
  bool tokens = false;
  // Ranks of one replica (the stages of a pipeline) read the same batch;
  // replica r feeds part r of the global batch (one stream, so the job reads
  // what one rank with the whole batch would read).
  auto openLoader = [&](const std::string &path, const std::string &labelsPath,
                        const char *labelsFlag) -> StatusOr<std::unique_ptr<data::DataLoader>> {
    STRAIT_ASSIGN_OR_RETURN(data::DataFormat format, data::parseDataFormat(o.dataFormat, path));
    bool layout = false;
    for (const auto &r : m.ranks())
      layout |= r.stage() > 0 || r.replica() != 0;
    uint64_t stream = static_cast<uint64_t>(layout ? 0 : o.rank);
    tokens = format != data::DataFormat::Npy;
    std::unique_ptr<data::DataLoader> made;
    if (tokens) {
      if (!labelsPath.empty())
        return invalidArgument(std::string(labelsFlag) + " is for npy data; token files make "
                               "their own next-token labels").withRank(o.rank);
      STRAIT_ASSIGN_OR_RETURN(made, data::openTokenFile(path, format, o.seed, stream));
    } else {
      // Now, not at the first evaluation (after the training it follows).
      for (const auto &v : p.values())
        if (labelsPath.empty() && v.role() == program::ROLE_INPUT && v.name() == o.labelsName)
          return invalidArgument("'" + path + "' is an npy array and the program reads labels '" +
                                 v.name() + "': give them with " + labelsFlag + " FILE.npy")
              .withRank(o.rank);
      STRAIT_ASSIGN_OR_RETURN(made, data::openNpyArrays(path, labelsPath, o.seed, stream));
    }
    if (layout)
      made->setBatchPart(entry->replica());
    return made;
  };
  if (!o.dataPath.empty()) {
    STRAIT_RETURN_IF_ERROR(checkInputName(p, m, *entry, o).withRank(o.rank));
    STRAIT_ASSIGN_OR_RETURN(loader, openLoader(o.dataPath, o.labelsPath, "--labels"));
  }
  std::vector<int> evalSteps;
  std::map<int, uint32_t> evalLossOf; // step -> the loss value it writes
  if (!o.evalDataPath.empty()) {
    if (!loader)
      return invalidArgument("--eval-data needs --data (the training data)").withRank(o.rank);
    bool trainTokens = tokens;
    STRAIT_ASSIGN_OR_RETURN(evalLoader,
                            openLoader(o.evalDataPath, o.evalLabelsPath, "--eval-labels"));
    if (tokens != trainTokens)
      return invalidArgument("--eval-data '" + o.evalDataPath + "' and --data '" + o.dataPath +
                             "' are not of the same kind (token file, npy arrays)")
          .withRank(o.rank);
    STRAIT_RETURN_IF_ERROR(evaluationSteps(p, evalSteps, evalLossOf).withRank(o.rank));
  }
  // What feeds each input (DataInputs.h): the data input is the replica's
  // choice, on its first stage; --input arrays and defaults for the rest.
  DataInputChoice dataInput;
  if (loader) {
    StatusOr<DataInputChoice> chosenInput = chooseDataInput(p, m, *entry, o, tokens);
    if (!chosenInput.isOk())
      return chosenInput.takeStatus().withRank(o.rank);
    dataInput = *chosenInput;
  }
  StatusOr<std::unique_ptr<InputFeeds>> openedFeeds =
      InputFeeds::open(p, m, *entry, o, dataInput, loader.get(), evalLoader.get(), tokens);
  if (!openedFeeds.isOk())
    return openedFeeds.takeStatus().withRank(o.rank);
  std::unique_ptr<InputFeeds> feeds = std::move(*openedFeeds);
  // The checkpoint to resume from, like the data: before the rendezvous.
  std::optional<CheckpointRef> resume;
  if (!o.resumePath.empty()) {
    StatusOr<CheckpointRef> c = findCheckpoint(o.resumePath);
    if (!c.isOk())
      return c.takeStatus().withRank(o.rank);
    if (c->step >= o.steps)
      return invalidArgument("checkpoint '" + c->dir + "' is at step " +
                             std::to_string(c->step) + "; --steps " + std::to_string(o.steps) +
                             " leaves nothing to run")
          .withRank(o.rank);
    resume = *c;
  }
  BackendRegistry registry;
  std::string backendText, commText = "none (one rank)";
  STRAIT_RETURN_IF_ERROR(registerBackend(registry, device, o, backendText));
  std::unique_ptr<Communicator> comm;
  CountingCommunicator *counter = nullptr;
  bool tracing = !o.traceFile.empty();
  trace::ProcessInfo traceInfo;
  if (m.world_size() > 1) {
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> gloo, connect(o, m));
    if (tracing)
      STRAIT_RETURN_IF_ERROR(startTrace(o, gloo.get(), device.str(), traceInfo));
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> joined,
                            joinFastTransport(std::move(gloo), m, device, o, commText));
    counter = new CountingCommunicator(std::move(joined));
    comm.reset(counter);
  }
  if (tracing && !comm)
    STRAIT_RETURN_IF_ERROR(startTrace(o, nullptr, device.str(), traceInfo));
  std::cerr << "rank " << o.rank << ": device " << backendText << ", communication "
            << commText
            << (comm && !o.linkSecretFile.empty() ? " (Gloo links sealed, " + o.linkSecretFile + ")"
                                                  : "")
            << "\n";
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec,
                          Executor::create(p, registry, comm.get()));
  std::string note = backendNote(registry, device, p);
  for (size_t at = 0; !note.empty() && at != std::string::npos;) {
    size_t nl = note.find('\n', at);
    std::cerr << "rank " << o.rank << ": " << note.substr(at, nl - at) << "\n";
    at = nl == std::string::npos ? nl : nl + 1;
  }
  uint64_t executorBytes = exec->getArenaBytes();
  { // Memory, for bench/runtime/memory_vs_plan.py: arena + persistent buffers.
    uint64_t persistent = 0, accumulators = 0;
    for (const auto &v : p.values()) {
      StatusOr<Tensor> t = exec->getValue(v.id());
      uint64_t bytes = t.isOk() ? t->byteSize() : 0;
      if (v.role() == program::ROLE_GRADIENT)
        accumulators += bytes;
      else if (!inArena(v.role()) && v.role() != program::ROLE_CONSTANT)
        persistent += bytes;
    }
    executorBytes += persistent;
    std::cerr << "rank " << o.rank << ": memory arena " << exec->getArenaBytes()
              << " bytes, persistent " << persistent << " bytes, gradient accumulators "
              << accumulators << " bytes (in the arena)\n";
  }
  if (!entry->parameter_file().empty()) {
    STRAIT_ASSIGN_OR_RETURN(program::ParameterShardFile shards,
                            loadShardFile(resolvePath(o.planDir, entry->parameter_file())));
    STRAIT_RETURN_IF_ERROR(exec->loadParameters(shards));
  }
  // Local steps (program.outer_sync): theta_outer starts as the loaded
  // parameters.
  StatusOr<std::unique_ptr<OuterSync>> createdSync = OuterSync::create(*exec, comm.get());
  if (!createdSync.isOk())
    return createdSync.takeStatus().withRank(o.rank);
  std::unique_ptr<OuterSync> outerSync = std::move(*createdSync);
  // Loss scaling (program.loss_scale): the scale, kept and checkpointed here.
  StatusOr<std::unique_ptr<LossScaler>> createdScaler = LossScaler::create(p, *exec);
  if (!createdScaler.isOk())
    return createdScaler.takeStatus().withRank(o.rank);
  std::unique_ptr<LossScaler> scaler = std::move(*createdScaler);
  // State kept outside the program's values, in snapshots and checkpoints.
  auto hostState = [&]() {
    NamedTensors all = outerSync ? outerSync->state() : NamedTensors{};
    if (scaler)
      for (auto &entry : scaler->state())
        all.push_back(entry);
    return all;
  };
  if (outerSync) {
    const program::OuterSync &s = p.outer_sync();
    std::string islands;
    for (const auto &island : s.islands()) {
      islands += islands.empty() ? "{" : " {";
      for (int i = 0; i < island.ranks_size(); ++i)
        islands += (i ? "," : "") + std::to_string(island.ranks(i));
      islands += "}";
    }
    std::cerr << "rank " << o.rank << ": local steps " << s.local_steps() << ": outer step (lr "
              << s.lr() << ", Nesterov momentum " << s.momentum() << ") over islands " << islands
              << (s.codec().codec() != program::CODEC_NONE
                      ? " with " + program::Codec_Name(s.codec().codec())
                      : std::string())
              << ", " << outerSync->getNumParameters() << " parameters ("
              << outerSync->getParameterBytes() << " bytes)\n";
  }
  int first = 0; // iterations before this run (a resumed job's)
  if (resume) {
    OuterSync *sync = outerSync.get();
    NamedTensors extra = sync ? sync->state() : NamedTensors{};
    // The scale's state: NaN until the checkpoint fills it (one written
    // without loss scaling leaves it, and the scale starts afresh).
    double initScale = scaler ? scaler->getScale() : 0;
    if (scaler)
      for (auto &entry : scaler->state()) {
        entry.second.as<double>()[0] = std::nan("");
        extra.push_back(entry);
      }
    STRAIT_ASSIGN_OR_RETURN(size_t found, loadCheckpoint(*exec, *resume, o.rank, extra));
    if (scaler) {
      extra.pop_back();
      NamedTensors s = scaler->state();
      double *v = s[0].second.as<double>();
      if (std::isnan(v[0])) {
        v[0] = initScale;
        v[1] = 0;
        v[2] = static_cast<double>(resume->step);
        std::cerr << "rank " << o.rank << ": the checkpoint has no loss-scale state: the scale "
                  << "starts at " << initScale << "\n";
      } else {
        --found;
      }
      scaler->setIterations(resume->step);
    }
    if (sync && found == 0) {
      sync->reset();
      std::cerr << "rank " << o.rank << ": the checkpoint has no outer-step state (written "
                << "without local steps): the outer step starts from its parameters\n";
    } else if (found != extra.size()) {
      return invalidArgument("checkpoint '" + resume->dir + "' holds " + std::to_string(found) +
                             " of the " + std::to_string(extra.size()) +
                             " outer-step states of this rank (written under another plan?)")
          .withRank(o.rank);
    }
    STRAIT_ASSIGN_OR_RETURN(std::string feedbackNote, loadFeedback(*exec, *resume, o.rank));
    first = static_cast<int>(resume->step);
    std::cerr << "rank " << o.rank << ": resumed from " << resume->dir << " (step " << first
              << ")" << (feedbackNote.empty() ? "" : "; " + feedbackNote) << "\n";
  }
  // Checkpoints: the first data-parallel replica writes them (every replica
  // holds the same parameters and optimizer states); under local steps
  // every rank does (the islands' copies differ between outer steps).
  std::vector<int> writers;
  for (const auto &r : m.ranks())
    if (r.replica() == 0)
      writers.push_back(r.rank());
  bool writes = entry->replica() == 0 || outerSync;
  auto checkpointAfter = [&](int step) {
    return !o.checkpointDir.empty() &&
           (step == o.steps || (o.checkpointEvery > 0 && step % o.checkpointEvery == 0));
  };
  // Inputs by convention: "step" (i64 scalar) = 1-based iteration, "lr"
  // (f32 scalar) = the program's lr schedule at that step (an explicit --lr
  // replaces its peak; without a schedule, --lr constant); the data input
  // and "labels" come from --data.
  StatusOr<Tensor> stepIn = exec->getValueByName("step");
  StatusOr<Tensor> lrIn = exec->getValueByName("lr");
  bool stepOk = stepIn.isOk() && stepIn->dtype == program::DTYPE_I64 && stepIn->numel() == 1;
  bool lrOk = lrIn.isOk() && lrIn->dtype == program::DTYPE_F32 && lrIn->numel() == 1;
  auto lrAt = [&](int64_t step) -> float {
    return schedule ? static_cast<float>(learningRateAt(*schedule, step)) : o.learningRate;
  };
  std::string inputName, labelsName;
  StatusOr<Tensor> input = invalidArgument("none"), labels = invalidArgument("none");
  if (loader) {
    for (const auto &v : p.values())
      if (v.role() == program::ROLE_INPUT && v.name() == dataInput.name)
        inputName = v.name();
    if (!inputName.empty())
      input = exec->getValueByName(inputName);
    for (const auto &v : p.values())
      if (v.role() == program::ROLE_INPUT && v.name() == o.labelsName)
        labelsName = v.name();
    if (!labelsName.empty())
      labels = exec->getValueByName(labelsName);
    std::cerr << "rank " << o.rank << ": data " << o.dataPath << " -> "
              << (inputName.empty() ? "(no data input on this rank)" : "'" + inputName + "'")
              << (labelsName.empty() ? "" : ", labels '" + labelsName + "'") << "\n";
  }
  STRAIT_RETURN_IF_ERROR(feeds->bind(*exec).withRank(o.rank));
  int64_t items = 0;
  if (loader) {
    const Tensor *t = input.isOk() ? &*input : labels.isOk() ? &*labels : nullptr;
    if (t && !t->shape.empty())
      items = tokens ? t->numel() : t->shape[0];
  }
  // AQ-SGD codecs on this rank's cuts: state per dataset sample, whose ids
  // follow from the data input's shape (this rank's, else the input of the
  // rank of this replica that reads one: a pipeline's later stages).
  std::unique_ptr<AqSgdState> aqsgd;
  Shape dataShape;
  if (exec->usesActivationDeltas()) {
    if (loader)
      dataShape = dataInput.shape;
    STRAIT_ASSIGN_OR_RETURN(aqsgd, createAqSgd(*exec, device, loader.get(), dataShape, o.rank));
    if (resume) {
      STRAIT_ASSIGN_OR_RETURN(std::string note, loadAqSgd(*aqsgd, *resume, o.rank));
      std::cerr << "rank " << o.rank << ": " << note << "\n";
    }
  }
  StatusOr<Tensor> loss = exec->getValueByName("loss");
  double profiledMs = 0; // iterations' wall time while profiling
  int profiled = 0;
  // In-process recovery from link failures (LinkRecovery.h): CPU ranks
  // over Gloo without AQ-SGD state; the others leave it to --max-restarts.
  std::unique_ptr<LinkRecovery> recovery;
  StateSnapshots snapshots;
  if (counter && o.linkRetries > 0) {
    std::optional<JobRecord::Rank> record = recordedRank(o);
    std::string off = device.kind != "cpu" ? "with a " + device.str() + " rank"
                      : aqsgd              ? "with AQ-SGD activation state"
                              : snapshotsDoNotFit(record, *exec, hostState(), executorBytes);
    if (!off.empty()) {
      std::cerr << "rank " << o.rank << ": no in-process recovery from link failures " << off
                << " (--max-restarts restarts the job instead)\n";
    } else {
      LinkRecovery::Options ro;
      ro.rank = o.rank;
      ro.worldSize = m.world_size();
      ro.retries = o.linkRetries;
      ro.wait = std::chrono::milliseconds(o.linkRetryWaitMs);
      ro.timeout = std::chrono::milliseconds(o.timeoutMs);
      STRAIT_ASSIGN_OR_RETURN(GlooOptions g, glooOptions(o, m));
      StatusOr<std::unique_ptr<LinkRecovery>> made =
          LinkRecovery::create(g, o.runId.empty() ? "strait" : o.runId, ro);
      if (!made.isOk())
        return made.takeStatus().withRank(o.rank);
      recovery = made.takeValue();
      recovery->watch(counter);
      uint64_t residuals = record ? static_cast<uint64_t>(record->feedbackBytes) : 0;
      std::cerr << "rank " << o.rank << ": in-process recovery from link failures (--link-retries "
                << o.linkRetries << "): two state snapshots of "
                << StateSnapshots::stateBytes(*exec, hostState()) + residuals << " bytes each"
                << (residuals ? " (with " + std::to_string(residuals) +
                                    " bytes of error-feedback residuals)"
                              : std::string())
                << "\n";
    }
  }
  // A link failure in iteration `it`: every rank agrees on the iteration to
  // resume from, restores its snapshot of it and reconnects; `it` becomes
  // that iteration - 1 (the loop's ++it follows). Any other failure, or a
  // recovery that fails, is returned.
  auto recover = [&](Status failure, int &it) -> Status {
    if (recovery && !isLinkFailure(failure))
      recovery->fatal(failure, it);
    if (!recovery || !isLinkFailure(failure))
      return failure;
    for (;;) {
      STRAIT_ASSIGN_OR_RETURN(int resume, recovery->agree(failure, it, snapshots.oldest()));
      auto t0 = std::chrono::steady_clock::now();
      STRAIT_RETURN_IF_ERROR(
          snapshots.restore(*exec, hostState(), resume));
      if (scaler)
        scaler->setIterations(resume);
      StatusOr<std::unique_ptr<Communicator>> next = connect(o, m, recovery->getEpoch());
      it = resume;
      if (!next.isOk()) { // e.g. the link still down: another epoch
        failure = linkFailure(next.takeStatus().withRank(o.rank));
        if (failure.getCode() != StatusCode::Unavailable &&
            failure.getCode() != StatusCode::DeadlineExceeded)
          return failure;
        continue;
      }
      counter->replace(next.takeValue(), LinkRecovery::takeDeadTransportThread());
      std::cerr << "rank " << o.rank << ": reconnected (epoch " << recovery->getEpoch()
                << ") in "
                << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                       .count()
                << " ms; replaying from step " << resume + 1 << std::endl;
      it = resume - 1;
      return Status::ok();
    }
  };
  for (int it = first; it < o.steps; ++it) {
    if (recovery)
      if (Status s = snapshots.take(*exec, hostState(), it); !s.isOk())
        return s.withRank(o.rank).withStep(it + 1);
    // The first iteration allocates and runs the `once` steps: not profiled.
    exec->setProfiling(o.profile && it > first);
    trace::setEnabled(tracing && it + 1 >= o.traceFirst && it + 1 <= o.traceLast);
    trace::Span iteration("iteration", "iteration " + std::to_string(it + 1));
    if (stepOk)
      stepIn->as<int64_t>()[0] = it + 1;
    if (lrOk)
      lrIn->as<float>()[0] = lrAt(it + 1);
    if (loader) {
      trace::Span load("data", "data load");
      Status s = loader->fill(input.isOk() ? &*input : nullptr, inputName,
                              labels.isOk() ? &*labels : nullptr, labelsName, it);
      if (s.isOk())
        s = feeds->fill(*loader, it, /*eval=*/false);
      if (!s.isOk())
        return s.withStep(it + 1);
      if (aqsgd)
        exec->setBatchSamples(loader->sampleIds(it, dataShape));
    }
    if (scaler)
      if (Status s = scaler->feed(); !s.isOk())
        return s.withRank(o.rank).withStep(it + 1);
    auto start = std::chrono::steady_clock::now();
    if (Status ran = exec->run(); !ran.isOk()) {
      STRAIT_RETURN_IF_ERROR(recover(ran.withStep(it + 1), it));
      continue;
    }
    bool skipped = false;
    if (scaler) {
      StatusOr<bool> updated = scaler->update();
      if (!updated.isOk())
        return updated.takeStatus().withRank(o.rank).withStep(it + 1);
      skipped = *updated;
    }
    // The local-steps outer step belongs to the iteration it follows (its
    // time is in `ms`, and printed on its own).
    double outerMs = -1;
    if (outerSync && outerSync->dueAfter(it + 1, o.steps, o.finalOuterStep)) {
      auto outerStart = std::chrono::steady_clock::now();
      trace::Span outer("outer_step", "outer step");
      Status s = outerSync->step();
      if (!s.isOk()) {
        STRAIT_RETURN_IF_ERROR(recover(s.withRank(o.rank).withStep(it + 1), it));
        continue;
      }
      outerMs = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                          outerStart)
                    .count();
    }
    double ms = std::chrono::duration<double, std::milli>(
                    std::chrono::steady_clock::now() - start).count();
    if (o.profile && it > first) {
      profiledMs += ms;
      ++profiled;
    }
    std::ostringstream line;
    line << "rank " << o.rank << " iteration " << it + 1 << "/" << o.steps
         << " time " << ms << " ms";
    if (loss.isOk() && loss->dtype == program::DTYPE_F32 && loss->numel() == 1)
      line << " loss " << loss->as<float>()[0];
    if (lrOk)
      line << " lr " << lrIn->as<float>()[0];
    if (scaler)
      line << scaler->describe(skipped);
    if (items > 0)
      line << " " << loader->itemName() << " " << items;
    if (outerMs >= 0)
      line << " outer-step " << outerMs;
    if (counter) {
      std::string sent, received;
      counter->take(sent, received);
      line << " sent " << sent << " recv " << received;
    }
    if (!o.replanStopFile.empty())
      line << " link " << formatLinkTimings(rt::takeLinkTimings());
    std::cout << line.str() << std::endl;
    if (evalLoader && ((o.evalEvery > 0 && (it + 1) % o.evalEvery == 0) || it + 1 == o.steps)) {
      trace::Span span("eval", "evaluation");
      auto evalStart = std::chrono::steady_clock::now();
      double sum = 0;
      int64_t terms = 0, fed = 0;
      // BatchNorm normalizes with its running statistics, as in eval().
      STRAIT_RETURN_IF_ERROR(exec->setInference(true).withStep(it + 1));
      for (int b = 0; b < o.evalBatches; ++b) {
        Status s = evalLoader->fill(input.isOk() ? &*input : nullptr, inputName,
                                    labels.isOk() ? &*labels : nullptr, labelsName, b);
        if (s.isOk())
          s = feeds->fill(*evalLoader, b, /*eval=*/true);
        if (!s.isOk())
          return s.withStep(it + 1);
        for (int i : evalSteps) {
          Status ran = exec->runStep(i);
          if (!ran.isOk()) // not replayed: an evaluation changes no state
            return ran.withStep(it + 1);
          auto lossValue = evalLossOf.find(i);
          if (lossValue != evalLossOf.end()) {
            StatusOr<Tensor> l = exec->getValue(lossValue->second);
            if (l.isOk() && l->dtype == program::DTYPE_F32 && l->numel() == 1) {
              sum += l->as<float>()[0];
              ++terms;
            }
          }
        }
        if (comm)
          STRAIT_RETURN_IF_ERROR(comm->flushSends().withStep(it + 1));
        fed += items;
      }
      STRAIT_RETURN_IF_ERROR(exec->setInference(false).withStep(it + 1));
      std::ostringstream eval;
      eval << "rank " << o.rank << " eval " << it + 1 << "/" << o.steps << " time "
           << std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() -
                                                        evalStart)
                  .count()
           << " ms";
      if (terms > 0)
        eval << " loss " << sum / static_cast<double>(terms);
      if (fed > 0)
        eval << " " << loader->itemName() << " " << fed;
      std::cout << eval.str() << std::endl;
    }
    int stopAt = 0;
    if (!o.replanStopFile.empty()) {
      // --replan (Replan.h): finish no step beyond the launcher's lease; the
      // stop step it names is at least the lease, so no rank is past it.
      StatusOr<ReplanControl> c = awaitReplanLease(o, first, it + 1);
      if (!c.isOk())
        return c.takeStatus().withStep(it + 1);
      stopAt = c->stop;
      if (stopAt > 0 && it + 1 > stopAt)
        return internalError("the launcher asked to stop for a re-plan after step " +
                             std::to_string(stopAt) + ", this rank is past it (beyond the "
                             "lease it granted)")
            .withStep(it + 1);
    }
    if (checkpointAfter(it + 1) || stopAt == it + 1) {
      trace::Span write("checkpoint", "checkpoint write");
      if (aqsgd)
        STRAIT_RETURN_IF_ERROR(saveAqSgd(*aqsgd, o.checkpointDir, it + 1, o.rank));
      StatusOr<std::string> dir =
          writeCheckpoint(*exec, o.checkpointDir, it + 1, o.rank, m.world_size(), writes, writers,
                          comm.get(), hostState());
      if (!dir.isOk()) {
        STRAIT_RETURN_IF_ERROR(recover(dir.takeStatus().withStep(it + 1), it));
        continue;
      }
      std::cerr << "rank " << o.rank << ": checkpoint of step " << it + 1 << " in " << *dir
                << "\n";
    }
    if (recovery && it + 1 == o.steps) {
      // No rank leaves before every rank finished: a link failure until
      // here replays (the barrier after the loop, with recovery).
      if (Status s = comm->barrier(); !s.isOk()) {
        STRAIT_RETURN_IF_ERROR(recover(s.withStep(it + 1), it));
        continue;
      }
    }
    if (recovery)
      recovery->completed();
    if (stopAt == it + 1 && it + 1 < o.steps) {
      std::cerr << "rank " << o.rank << ": stopped after step " << it + 1
                << " for a re-plan" << std::endl;
      stoppedForReplan = true;
      return Status::ok();
    }
  }
  trace::setEnabled(false);
  if (tracing) {
    STRAIT_RETURN_IF_ERROR(
        trace::writeTrace(o.traceFile, traceInfo, trace::take(), trace::lanes()));
    std::cerr << "rank " << o.rank << ": trace of iterations " << o.traceFirst << "-"
              << o.traceLast << " in " << o.traceFile << " (clock offset to rank 0 "
              << traceInfo.clockOffsetNs / 1000 << " us +- "
              << traceInfo.clockPrecisionNs / 1000 << " us"
              << (o.rank > 0 && traceInfo.sameClock ? ", rank 0's clock" : "") << ")\n";
  }
  if (o.profile)
    printProfile(*exec, o.rank, profiled, profiledMs);
  if (!o.dumpDir.empty()) {
    std::vector<std::string> fed = feeds->fedNames();
    fed.push_back(inputName);
    fed.push_back(labelsName);
    STRAIT_RETURN_IF_ERROR(dumpOutputs(*exec, p, o, fed));
  }
  if (!o.saveParamsDir.empty())
    STRAIT_RETURN_IF_ERROR(saveParameters(*exec, p, o));
  if (comm && !recovery)
    STRAIT_RETURN_IF_ERROR(comm->barrier());
  if (counter && LinkRecovery::takeDeadTransportThread())
    counter->replace(nullptr, /*leak=*/true);
  return Status::ok();
}

} // namespace

int runWorker(const RunOptions &options) {
  // A write to a connection the peer reset raises SIGPIPE, which would end
  // the rank without a word; ignored, it is an EPIPE that Gloo reports as a
  // link failure (and in-process recovery replays the step).
  std::signal(SIGPIPE, SIG_IGN);
  // libgloo (Debian 0.0~git20220518) lets an exception out of its device
  // thread when a connection breaks while that thread writes a payload the
  // peer asked for (docs/runtime.md, "Flaky links"): no recovery in process
  // is possible then; say so and exit as a lost link (3), not SIGABRT.
  static int rank = options.rank;
  static std::thread::id mainThread = std::this_thread::get_id();
  std::set_terminate([] {
    std::string what = "unknown exception";
    try {
      if (std::exception_ptr e = std::current_exception())
        std::rethrow_exception(e);
    } catch (const std::exception &e) {
      what = e.what();
    } catch (...) {
    }
    if (std::this_thread::get_id() != mainThread && LinkRecovery::noteDeadTransportThread(what)) {
      // Gloo's device thread: the recovery watcher aborts the epoch for
      // every rank and the epoch's communicator is leaked; this thread
      // stays parked.
      std::cerr << "rank " << rank << ": a transport thread failed: " << what
                << " (its connections are abandoned)" << std::endl;
      for (;;)
        std::this_thread::sleep_for(std::chrono::hours(1));
    }
    std::cerr << "strait-run: rank " << rank << ": a transport thread failed: " << what
              << " (no in-process recovery from this; --max-restarts restarts the job)"
              << std::endl;
    std::_Exit(3);
  });
  Status s = runRank(options);
  if (!s.isOk()) {
    s.withRank(options.rank);
    std::cerr << "strait-run: " << s.toString() << std::endl;
    // 3 marks a failure to reach a peer, usually the echo of another rank's
    // failure; the launcher reports the other kind first.
    bool comm = s.getCode() == StatusCode::Unavailable ||
                s.getCode() == StatusCode::DeadlineExceeded;
    return comm ? 3 : 1;
  }
  if (stoppedForReplan)
    return kExitStoppedForReplan;
  struct rusage usage;
  if (::getrusage(RUSAGE_SELF, &usage) == 0)
    std::cout << "rank " << options.rank << " peak RSS " << usage.ru_maxrss << " KiB"
              << std::endl;
  std::cout << "rank " << options.rank << " done" << std::endl;
  return 0;
}

} // namespace run
} // namespace strait
