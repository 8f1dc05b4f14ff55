//===- Executor.cpp - Runs the steps of a device program ------------------===//
//
// Kernel resolution, allocation and the step loop (memory placement:
// MemoryPlan.cpp; the codec streams' sends and receives: ExecutorCodecs.cpp).
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Executor.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/Program.h"
#include "strait/runtime/Trace.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <set>
#include <sstream>

namespace strait {
namespace rt {

/// Whether new executors adapt top-k ratios (Executor::setAdaptiveTopKDefault).
bool adaptiveTopKDefault();

namespace {

/// The bytes [lo, hi) of a tensor.
std::pair<const char *, const char *> byteRange(const Tensor &v) {
  const char *lo = static_cast<const char *>(v.data);
  return {lo, lo + v.byteSize()};
}

/// Whether the bytes of v overlap one of the ranges of a transfer.
bool overlaps(const Tensor &v, const std::vector<std::pair<const char *, const char *>> &memory) {
  auto [lo, hi] = byteRange(v);
  for (const auto &m : memory)
    if (lo < m.second && m.first < hi)
      return true;
  return false;
}

/// The bytes a transfer moves (before its codec), for its trace span.
uint64_t transferBytes(const std::vector<std::pair<const char *, const char *>> &memory) {
  uint64_t n = 0;
  for (const auto &m : memory)
    n += static_cast<uint64_t>(m.second - m.first);
  return n;
}

} // namespace

StatusOr<std::unique_ptr<Executor>>
Executor::create(program::Program program, const BackendRegistry &registry,
                 Communicator *comm) {
  std::unique_ptr<Executor> exec(new Executor(std::move(program)));
  const program::Program &p = exec->program;
  Status s = validateProgram(p);
  if (!s.isOk())
    return s.withRank(p.rank()).withDevice(p.device());
  StatusOr<const Backend *> backend = registry.forDevice(p.device());
  if (!backend.isOk())
    return backend.takeStatus().withRank(p.rank());
  exec->comm = comm;
  exec->backend = *backend;
  (*backend)->foldKernels(exec->program);
  STRAIT_RETURN_IF_ERROR(exec->annotate(exec->allocate(**backend), -1));
  STRAIT_RETURN_IF_ERROR(exec->annotate(exec->resolveKernels(**backend), -1));
  bool warnedDeferred = false;
  for (const auto &step : p.steps())
    if (step.has_micro_batch())
      exec->microBatches = std::max<int>(exec->microBatches, step.micro_batch() + 1);
  for (const auto &v : p.values())
    if (v.name() == "step" && v.role() == program::ROLE_INPUT && v.dtype() == program::DTYPE_I64 &&
        std::all_of(v.shape().begin(), v.shape().end(), [](int64_t d) { return d == 1; }))
      exec->stepValueId = v.id();
  for (int i = 0; i < p.steps_size(); ++i) {
    const auto &step = p.steps(i);
    if (step.kind_case() == program::Step::kRun)
      continue;
    if (!comm)
      return exec->annotate(
          invalidArgument("communication step without a communicator"), i);
    if (comm->getRank() != p.rank() || comm->getWorldSize() != p.world_size())
      return exec->annotate(
          invalidArgument("communicator is rank " +
                          std::to_string(comm->getRank()) + " of " +
                          std::to_string(comm->getWorldSize()) +
                          " but the program is for rank " +
                          std::to_string(p.rank()) + " of " +
                          std::to_string(p.world_size())),
          i);
    STRAIT_RETURN_IF_ERROR(exec->annotate(exec->checkCommStep(i), i));
    // Error feedback state for every value a lossy codec sends.
    std::vector<uint32_t> sent;
    const program::CodecParams *codec = nullptr;
    if (step.has_send()) {
      sent.push_back(step.send().value_id());
      codec = &step.send().codec();
    } else if (step.has_all_reduce()) {
      sent.assign(step.all_reduce().value_ids().begin(),
                  step.all_reduce().value_ids().end());
      codec = &step.all_reduce().codec();
    }
    // Adaptive top-k sends also get a state (without error feedback it only
    // records the payload size that the controller reads).
    bool adapt = step.has_send() && codec->adapt() && adaptiveTopKDefault();
    // keep_decoded sends too: the stream writes the decoded payload and
    // keeps it for the sends that repeat it.
    bool decoded = step.has_send() && step.send().keep_decoded();
    bool repeat = step.has_send() && step.send().repeat_payload();
    if (codec && !repeat &&
        ((codec->error_feedback() && codec->codec() != program::CODEC_NONE) || adapt || decoded))
      for (uint32_t id : sent)
        exec->feedback[{i, id}] = std::make_unique<ErrorFeedback>();
    if (adapt && !step.send().deferred()) {
      const program::Send &m = step.send();
      std::unique_ptr<AdaptiveRatio> &c = exec->adaptive[{m.peer(), m.channel()}];
      if (!c) {
        AdaptiveRatioConfig config;
        config.ratioMin = codec->ratio_min();
        config.ratioMax = codec->ratio_max();
        config.initial = codec->topk_ratio();
        c = std::make_unique<AdaptiveRatio>(config, exec->value(m.value_id()).numel());
      }
    } else if (adapt && !warnedDeferred) {
      warnedDeferred = true;
      std::cerr << "rank " << p.rank() << ": adaptive top-k: deferred (1F1B) sends, from step "
                << i << " on, cannot be timed by the sender; they keep their compiled ratio "
                << "(compile with --schedule gpipe to adapt)\n";
    }
  }
  exec->planAllReduceBuckets();
  if (exec->fusedElements > 0) { // device memory: NCCL and GPU codecs read it
    StatusOr<Buffer> fused = (*backend)->allocate(exec->fusedElements * sizeof(float));
    if (!fused.isOk())
      return fused.takeStatus().withRank(p.rank());
    exec->fused = std::move(*fused);
  }
  exec->planSequential();
  exec->planOverlapped();
  bool hasComm = false;
  for (const auto &step : p.steps()) {
    hasComm |= step.kind_case() != program::Step::kRun;
    exec->hasDeferredSends |= step.has_send() && step.send().deferred();
  }
  if (hasComm)
    exec->commThread = std::thread([e = exec.get()] { e->commLoop(); });
  return exec;
}

Executor::~Executor() {
  if (commThread.joinable()) {
    {
      std::lock_guard<std::mutex> lock(commMutex);
      stopping = true;
    }
    commWake.notify_all();
    commThread.join();
  }
}

/// Load-time checks of a communication step beyond validateProgram: codec
/// parameters, codecs only on f32 values, islands that partition the group.
Status Executor::checkCommStep(int index) const {
  const program::Step &step = program.steps(index);
  std::string field = "steps[" + std::to_string(index) + "].";
  auto dtypeOf = [&](uint32_t id) {
    for (const auto &v : program.values())
      if (v.id() == id)
        return v.dtype();
    return program::DTYPE_UNSPECIFIED;
  };
  if (step.has_all_reduce() && step.all_reduce().codec().adapt())
    return invalidArgument(field + "all_reduce.codec.adapt: an all-reduce never adapts its "
                                   "codec (every replica must apply the same one)");
  if ((step.has_send() && step.send().codec().exact_steps()) ||
      (step.has_recv() && step.recv().codec().exact_steps()))
    return invalidArgument(field + (step.has_send() ? "send" : "recv") +
                           ".codec.exact_steps: only an all-reduce's codec has exact steps");
  if ((step.has_send() && step.send().codec().warmup_codec()) ||
      (step.has_recv() && step.recv().codec().warmup_codec()))
    return invalidArgument(field + (step.has_send() ? "send" : "recv") +
                           ".codec.warmup_codec: only an all-reduce's codec has a warm-up codec");
  if (step.has_all_reduce()) {
    const program::CodecParams &c = step.all_reduce().codec();
    program::Codec w = c.warmup_codec();
    if (w != program::CODEC_NONE && !c.exact_steps())
      return invalidArgument(field + "all_reduce.codec.warmup_codec = " +
                             program::Codec_Name(w) + " without exact_steps (no warm-up)");
    if (w != program::CODEC_NONE && w != program::CODEC_FP16 && w != program::CODEC_BF16 &&
        w != program::CODEC_INT8 && w != program::CODEC_INT4 && w != program::CODEC_INT2 &&
        w != program::CODEC_INT3)
      return invalidArgument(field + "all_reduce.codec.warmup_codec: " +
                             (program::Codec_IsValid(w) ? program::Codec_Name(w)
                                                        : "codec " + std::to_string(w)) +
                             " is not a dense codec (FP16, BF16, INT8, INT4, INT2, INT3)");
  }
  if (step.has_all_reduce() && step.all_reduce().codec().exact_steps() && stepValueId < 0)
    return invalidArgument(field + "all_reduce.codec.exact_steps = " +
                           std::to_string(step.all_reduce().codec().exact_steps()) +
                           " needs the program's i64 scalar input 'step' (the iteration), "
                           "which it does not have");
  auto checkCodec = [&](const program::CodecParams &codec, const std::string &f,
                        uint32_t id) -> Status {
    STRAIT_RETURN_IF_ERROR(validateCodecParams(codec, f));
    if (codec.codec() != program::CODEC_NONE && dtypeOf(id) != program::DTYPE_F32)
      return invalidArgument(f + ": codec " + program::Codec_Name(codec.codec()) +
                             " on value " + std::to_string(id) + " of type " +
                             program::DType_Name(dtypeOf(id)) + " (codecs carry f32)");
    return Status::ok();
  };
  if (step.has_send())
    return checkCodec(step.send().codec(), field + "send.codec", step.send().value_id());
  if (step.has_recv())
    return checkCodec(step.recv().codec(), field + "recv.codec", step.recv().value_id());
  const program::AllReduce &ar = step.all_reduce();
  for (uint32_t id : ar.value_ids())
    STRAIT_RETURN_IF_ERROR(checkCodec(ar.codec(), field + "all_reduce.codec", id));
  if (ar.islands().empty())
    return Status::ok();
  std::set<int> group(ar.ranks().begin(), ar.ranks().end());
  if (group.empty())
    for (int r = 0; r < program.world_size(); ++r)
      group.insert(r);
  std::set<int> covered;
  for (int i = 0; i < ar.islands_size(); ++i) {
    const auto &island = ar.islands(i).ranks();
    std::string f = field + "all_reduce.islands[" + std::to_string(i) + "]";
    if (island.empty())
      return invalidArgument(f + ": empty island");
    for (int j = 0; j < island.size(); ++j) {
      if (j && island[j] <= island[j - 1])
        return invalidArgument(f + ": ranks must be sorted and distinct");
      if (!group.count(island[j]))
        return invalidArgument(f + ": rank " + std::to_string(island[j]) +
                               " is not in the all-reduce group");
      if (!covered.insert(island[j]).second)
        return invalidArgument(f + ": rank " + std::to_string(island[j]) +
                               " is in two islands");
    }
  }
  if (covered.size() != group.size())
    return invalidArgument(field + "all_reduce.islands: " +
                           std::to_string(group.size() - covered.size()) +
                           " rank(s) of the group are in no island");
  return Status::ok();
}

/// Groups the values of each all-reduce step into buckets reduced as one
/// tensor: consecutive values up to kFuseBytes together. Top-k keeps one
/// bucket per value (its ratio is per value), as does a value larger than
/// the limit. Results equal the per-value all-reduce within float rounding
/// (the ring's chunks fall elsewhere) and are identical on all ranks.
void Executor::planAllReduceBuckets() {
  constexpr uint64_t kFuseBytes = 32ull << 20;
  size_t largest = 0;
  for (int i = 0; i < program.steps_size(); ++i) {
    if (!program.steps(i).has_all_reduce())
      continue;
    const program::AllReduce &ar = program.steps(i).all_reduce();
    bool fuse = !isTopKCodec(ar.codec().codec());
    std::vector<std::vector<uint32_t>> &buckets = allReduceBuckets[i];
    uint64_t bytes = 0;
    for (uint32_t id : ar.value_ids()) {
      uint64_t b = value(id).byteSize();
      if (!fuse || buckets.empty() || bytes + b > kFuseBytes) {
        buckets.emplace_back();
        bytes = 0;
      }
      buckets.back().push_back(id);
      bytes += b;
    }
    for (const auto &bucket : buckets)
      if (bucket.size() > 1) {
        size_t n = 0;
        for (uint32_t id : bucket)
          n += value(id).numel();
        largest = std::max(largest, n);
      }
  }
  fusedElements = largest;
}

Status Executor::annotate(Status status, int step) const {
  if (status.isOk())
    return status;
  status.withRank(program.rank()).withDevice(program.device());
  if (step >= 0)
    status.withStep(step);
  return status;
}

Status Executor::allocate(const Backend &backend) {
  bool needsPlan = false;
  for (const auto &v : program.values())
    if (inArena(v.role()) && !v.has_arena_offset())
      needsPlan = true;
  if (needsPlan)
    STRAIT_RETURN_IF_ERROR(planMemory(program).getStatus());
  STRAIT_ASSIGN_OR_RETURN(arena, backend.allocate(program.memory_plan().arena_bytes()));
  char *base = static_cast<char *>(arena.data());
  for (int i = 0; i < program.values_size(); ++i) {
    const program::Value &v = program.values(i);
    Tensor t;
    t.dtype = v.dtype();
    t.shape.assign(v.shape().begin(), v.shape().end());
    if (inArena(v.role())) {
      t.data = base + v.arena_offset();
    } else {
      STRAIT_ASSIGN_OR_RETURN(Buffer buffer, backend.allocate(t.byteSize()));
      t.data = buffer.data();
      persistent.push_back(std::move(buffer));
      if (v.role() == program::ROLE_CONSTANT) {
        STRAIT_RETURN_IF_ERROR(copyTensorData(
            v.constant(), t, "values[" + std::to_string(i) + "].constant"));
        // Integer configuration (axes, shapes, bounds) of at most 1024
        // entries also stays on the host: a GPU kernel reads it without a
        // stream wait (constants are never written after load).
        bool integer = t.dtype == program::DTYPE_I64 || t.dtype == program::DTYPE_I32;
        if (integer && t.numel() <= 1024) {
          Tensor host = t;
          hostConstants.emplace_back(t.byteSize());
          host.data = hostConstants.back().data();
          STRAIT_RETURN_IF_ERROR(copyTensorData(
              v.constant(), host, "values[" + std::to_string(i) + "].constant"));
          t.host = host.data;
        }
      }
    }
    values[v.id()] = t;
  }
  return Status::ok();
}

Status Executor::resolveKernels(const Backend &backend) {
  for (int k = 0; k < program.kernels_size(); ++k) {
    const program::Kernel &kernel = program.kernels(k);
    StatusOr<KernelFn> fn = backend.resolve(kernel);
    if (!fn.isOk())
      return fn.takeStatus().withKernel(kernel.op() + " '" + kernel.name() + "'");
    kernelFns.push_back(fn.takeValue());
    kernelIndex[kernel.id()] = k;
  }
  return Status::ok();
}

Status Executor::loadParameters(const program::ParameterShardFile &shards) {
  std::map<std::string, const program::ParameterEntry *> byName;
  for (const auto &entry : shards.parameters())
    byName[entry.name()] = &entry;
  for (const auto &v : program.values()) {
    if (v.role() != program::ROLE_PARAMETER &&
        v.role() != program::ROLE_OPTIMIZER_STATE)
      continue;
    auto it = byName.find(v.parameter_name());
    if (it == byName.end()) {
      if (v.role() == program::ROLE_OPTIMIZER_STATE)
        continue; // optimizer state starts at zero
      return annotate(notFound("parameter '" + v.parameter_name() +
                               "' (value " + std::to_string(v.id()) +
                               ") missing from the shard file"),
                      -1);
    }
    STRAIT_RETURN_IF_ERROR(
        annotate(initializeParameter(*it->second, values[v.id()]), -1));
  }
  onceDone = false;
  return Status::ok();
}

StatusOr<Tensor> Executor::getValue(uint32_t id) const {
  auto it = values.find(id);
  if (it == values.end())
    return annotate(notFound("no value with id " + std::to_string(id)), -1);
  return it->second;
}

StatusOr<Tensor> Executor::getValueByName(const std::string &name) const {
  for (const auto &v : program.values())
    if (v.name() == name)
      return getValue(v.id());
  return annotate(notFound("no value named '" + name + "'"), -1);
}

Status Executor::setInference(bool on) {
  if (on && inferenceForms.empty())
    for (const program::Kernel &k : program.kernels()) {
      bool dropout = k.op() == "DropoutTraining";
      if (k.op() != "BatchNormalizationTraining" && !dropout)
        continue;
      // BatchNormalization: X, scale, B and the running mean and variance
      // in, Y out. DropoutTraining: the identity (Dropout's inference form)
      // on X.
      program::Kernel form;
      form.set_id(k.id());
      form.set_op(dropout ? "Dropout" : "BatchNormalization");
      form.set_opset(dropout ? 13 : 15);
      form.set_name(k.name());
      for (int i = 0; i < (dropout ? 1 : 5) && i < k.inputs_size(); ++i)
        form.add_inputs(k.inputs(i));
      if (k.outputs_size() > 0)
        form.add_outputs(k.outputs(0));
      if (auto eps = k.attrs().find("epsilon"); eps != k.attrs().end())
        (*form.mutable_attrs())["epsilon"] = eps->second;
      StatusOr<KernelFn> fn = backend->resolve(form);
      if (!fn.isOk())
        return annotate(fn.takeStatus().withKernel(k.op() + " '" + k.name() +
                                                   "' (its inference form)"),
                        -1);
      inferenceForms[k.id()] = InferenceForm{std::move(form), fn.takeValue()};
    }
  inference = on;
  return Status::ok();
}

Status Executor::runKernel(const program::Kernel &trained, int microBatch) {
  const program::Kernel *chosen = &trained;
  const KernelFn *fn = &kernelFns[kernelIndex[trained.id()]];
  if (inference)
    if (auto form = inferenceForms.find(trained.id()); form != inferenceForms.end()) {
      chosen = &form->second.kernel;
      fn = &form->second.fn;
    }
  const program::Kernel &kernel = *chosen;
  std::vector<const Tensor *> ins;
  std::vector<Tensor *> outs;
  for (uint32_t id : kernel.inputs())
    ins.push_back(id == kAbsentValue ? nullptr : &value(id));
  for (uint32_t id : kernel.outputs())
    outs.push_back(id == kAbsentValue ? nullptr : &value(id));
  KernelContext ctx(kernel, std::move(ins), std::move(outs));
  ctx.setMicroBatch(microBatch);
  if (!profiling) {
    Status s = (*fn)(ctx);
    if (!s.isOk())
      s.withKernel(kernel.op() + " '" + kernel.name() + "'");
    return s;
  }
  auto start = std::chrono::steady_clock::now();
  Status s = (*fn)(ctx);
  OpTime &t = opTimes[kernel.op()];
  t.op = kernel.op();
  ++t.launches;
  t.ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count();
  t.bytes += static_cast<double>(ctx.trafficBytes());
  if (!s.isOk())
    s.withKernel(kernel.op() + " '" + kernel.name() + "'");
  return s;
}

std::vector<Executor::OpTime> Executor::takeProfile() {
  std::vector<OpTime> out;
  for (auto &e : opTimes)
    out.push_back(e.second);
  opTimes.clear();
  std::sort(out.begin(), out.end(), [](const OpTime &a, const OpTime &b) { return a.ms > b.ms; });
  return out;
}

bool Executor::exactThisStep(const program::AllReduce &ar) const {
  uint32_t n = ar.codec().exact_steps();
  if (n == 0 || stepValueId < 0)
    return false;
  return value(static_cast<uint32_t>(stepValueId)).as<int64_t>()[0] <= static_cast<int64_t>(n);
}

Status Executor::runComm(int index, std::chrono::steady_clock::time_point ready) {
  const program::Step &step = program.steps(index);
  trace::Span span =
      trace::commSpan(step, index, [&] { return transferBytes(makeTransfer(index).memory); });
  auto feedbackOf = [&](uint32_t id) -> ErrorFeedback * {
    auto it = feedback.find({index, id});
    return it == feedback.end() ? nullptr : it->second.get();
  };
  switch (step.kind_case()) {
  case program::Step::kSend: {
    const auto &m = step.send();
    const Tensor &v = value(m.value_id());
    if (isAqSgdCodec(m.codec().codec()))
      return sendDelta(index, m, v).withPeer(m.peer());
    ErrorFeedback *state = feedbackOf(m.value_id());
    if (m.keep_decoded() || m.repeat_payload())
      return sendDecoded(m, v, state).withPeer(m.peer());
    if (!m.deferred() && adaptive.count({m.peer(), m.channel()}))
      return sendAdaptive(m, v, state, ready).withPeer(m.peer());
    return (m.deferred() ? comm->sendDeferred(v, m.peer(), m.channel(), m.codec(), state)
                         : comm->sendCoded(v, m.peer(), m.channel(), m.codec(), state))
        .withPeer(m.peer());
  }
  case program::Step::kRecv: {
    const auto &m = step.recv();
    const Tensor &v = value(m.value_id());
    if (isAqSgdCodec(m.codec().codec()))
      return recvDelta(index, m, v).withPeer(m.peer());
    return (m.deferred() ? comm->recvDeferred(v, m.peer(), m.channel(), m.codec())
                         : comm->recvCoded(v, m.peer(), m.channel(), m.codec()))
        .withPeer(m.peer());
  }
  case program::Step::kAllReduce: {
    const auto &ar = step.all_reduce();
    AllReduceOptions options;
    options.ranks.assign(ar.ranks().begin(), ar.ranks().end());
    for (const auto &island : ar.islands())
      options.islands.emplace_back(island.ranks().begin(), island.ranks().end());
    // Compressed AdamW's warm-up: exact sums (no codec, no error feedback),
    // or the dense warm-up codec with error feedback in the same stream.
    bool exact = exactThisStep(ar);
    bool warmupCodec = exact && ar.codec().warmup_codec() != program::CODEC_NONE;
    if (!exact) {
      options.codec = ar.codec();
    } else if (warmupCodec) {
      options.codec.set_codec(ar.codec().warmup_codec());
      options.codec.set_block_size(ar.codec().block_size());
      options.codec.set_error_feedback(ar.codec().error_feedback());
    }
    float scale = 1.0f / (options.ranks.empty() ? comm->getWorldSize()
                                                : options.ranks.size());
    // Buckets of several values go through one all-reduce on a fused copy
    // (one message per hop instead of one per value; see allReduceBuckets).
    for (const std::vector<uint32_t> &bucket : allReduceBuckets.at(index)) {
      Tensor t = value(bucket[0]);
      if (bucket.size() > 1) {
        int64_t n = 0;
        for (uint32_t id : bucket) {
          const Tensor &v = value(id);
          STRAIT_RETURN_IF_ERROR(
              backend->copy(static_cast<float *>(fused.data()) + n, v.data, v.byteSize()));
          n += v.numel();
        }
        t = Tensor{program::DTYPE_F32, {n}, fused.data()};
      }
      options.feedback = exact && !warmupCodec ? nullptr : feedbackOf(bucket[0]);
      STRAIT_RETURN_IF_ERROR(comm->allReduce(t, ar.channel(), options));
      if (ar.reduce() == program::REDUCE_MEAN)
        STRAIT_RETURN_IF_ERROR(backend->scale(t, scale));
      const float *d = t.as<float>();
      if (bucket.size() > 1)
        for (uint32_t id : bucket) {
          const Tensor &v = value(id);
          STRAIT_RETURN_IF_ERROR(backend->copy(v.data, d, v.byteSize()));
          d += v.numel();
        }
    }
    return Status::ok();
  }
  default:
    return internalError("not a communication step");
  }
}

Status Executor::runStep(int index) {
  if (index < 0 || index >= program.steps_size())
    return annotate(invalidArgument("step index out of range"), index);
  const program::Step &step = program.steps(index);
  if (step.kind_case() != program::Step::kRun) {
    // The communicator and the mean scaling read the values from the host.
    STRAIT_RETURN_IF_ERROR(annotate(backend->synchronize(), index));
    return annotate(runComm(index), index);
  }
  for (uint32_t kid : step.run().kernel_ids())
    STRAIT_RETURN_IF_ERROR(
        annotate(runKernel(program.kernels(kernelIndex[kid]),
                            step.has_micro_batch() ? step.micro_batch() : -1), index));
  // A device backend queues the kernels: the step has run when they have
  // (the caller reads its outputs or writes its inputs next).
  return annotate(backend->synchronize(), index);
}

Status Executor::runOnceSteps() {
  for (int i = 0; i < program.steps_size(); ++i)
    if (program.steps(i).once())
      STRAIT_RETURN_IF_ERROR(runStep(i));
  onceDone = true;
  return Status::ok();
}

Status Executor::run() {
  computeSeconds = 0;
  Status result = runIteration();
  if (result.isOk() && !adaptive.empty()) {
    // This iteration's compute per micro-batch: the budget of every stream
    // (AdaptiveRatio::setComputePerValue).
    for (auto &entry : adaptive)
      entry.second->setComputePerValue(computeSeconds / microBatches);
    // The adaptive ratios after this iteration, one line per run (the
    // launcher adds them to its progress line): "rank R topk PEER/chC RATIO ...".
    std::ostringstream line;
    line << "rank " << program.rank() << " topk";
    for (const AdaptiveLink &l : getAdaptiveLinks()) {
      char text[96];
      std::snprintf(text, sizeof(text), " %d/ch%u:%.4g:%.3gMbit/s:%.3gms", l.peer, l.channel,
                    l.ratio, l.throughput * 8e-6, l.budget * 1e3);
      line << text;
    }
    std::cout << line.str() << std::endl;
  }
  return result;
}

Status Executor::runIteration() {
  if (!onceDone)
    STRAIT_RETURN_IF_ERROR(runOnceSteps());
  if (overlap && commThread.joinable())
    return finishSends(runOverlapped());
  Status result;
  for (const Action &a : sequentialPlan.actions) {
    result = a.kind == Action::Comm ? runStep(a.step) : timedLaunch(sequentialPlan, a);
    if (!result.isOk())
      break;
  }
  if (result.isOk())
    result = annotate(backend->synchronize(), program.steps_size() - 1);
  return finishSends(std::move(result));
}

Status Executor::finishSends(Status result) {
  // The iteration ends when its deferred sends have reached their peers:
  // their copies are released, and a peer that failed surfaces here. After
  // a failure the sends are not waited for (the peer may never receive).
  if (!comm || !hasDeferredSends || !result.isOk())
    return result;
  return annotate(comm->flushSends(), program.steps_size() - 1);
}

// --- Segments ----------------------------------------------------------------
//
// Both run() paths are planned at load: the kernels between two host
// synchronization points form a segment that the backend launches as one
// (KernelSegment: the CUDA backend captures it into a graph). The plans hold
// no data-dependent decision: the schedule, the memory and the order in
// which transfers are queued are static.

void Executor::planSequential() {
  Plan &plan = sequentialPlan;
  for (int i = 0; i < program.steps_size(); ++i) {
    const program::Step &step = program.steps(i);
    if (step.once())
      continue; // runOnceSteps()
    if (!step.has_run()) {
      plan.actions.push_back({Action::Comm, i, -1, 0});
      continue;
    }
    for (uint32_t kid : step.run().kernel_ids()) {
      int k = kernelIndex.at(kid);
      bool host = backend->runsOnHost(program.kernels(k));
      if (host || plan.actions.empty() || plan.actions.back().kind != Action::Launch ||
          plan.segments.back().host) {
        plan.actions.push_back({Action::Launch, i, int(plan.segments.size()), 0});
        plan.segments.emplace_back();
        plan.segments.back().host = host;
      }
      plan.segments.back().launches.push_back({i, k});
    }
  }
}

void Executor::planOverlapped() {
  Plan &plan = overlapPlan;
  // Mirrors runOverlapped() before segments existed: a communication step
  // not queued yet synchronizes and is queued; receives that follow with
  // only kernels in between are queued too unless one of those kernels
  // touches their memory; a kernel waits for the last queued transfer it
  // conflicts with. Transfers finish in queue order (one thread serves the
  // FIFO), so waiting for transfer t covers every earlier one.
  std::vector<Transfer> transfers; // queued, in order (number = index + 1)
  std::vector<char> queued(program.steps_size(), 0);
  int lastQueued = -1;
  uint64_t waited = 0;
  bool open = false; // the last action is a Launch that kernels may join
  auto enqueue = [&](int index) {
    transfers.push_back(makeTransfer(index));
    plan.actions.push_back({Action::Enqueue, index, -1, 0});
    queued[index] = 1;
    lastQueued = index;
    open = false;
  };
  for (int i = 0; i < program.steps_size(); ++i) {
    const program::Step &step = program.steps(i);
    if (step.once())
      continue; // runOnceSteps()
    if (!step.has_run()) {
      if (!queued[i]) {
        plan.actions.push_back({Action::Sync, i, -1, 0});
        enqueue(i);
      }
      for (int j = lastQueued + 1; j < program.steps_size(); ++j) {
        const program::Step &next = program.steps(j);
        if (next.has_run())
          continue;
        if (!next.has_recv() || kernelsTouch(makeTransfer(j), i + 1, j))
          break;
        enqueue(j);
      }
      open = false;
      continue;
    }
    for (uint32_t kid : step.run().kernel_ids()) {
      int k = kernelIndex.at(kid);
      uint64_t need = 0;
      for (uint64_t t = transfers.size(); t > waited; --t)
        if (conflicts(transfers[t - 1], program.kernels(k))) {
          need = t;
          break;
        }
      bool host = backend->runsOnHost(program.kernels(k));
      if (!open || need > waited || host) {
        plan.actions.push_back({Action::Launch, i, int(plan.segments.size()),
                                need > waited ? need : 0});
        plan.segments.emplace_back();
        plan.segments.back().host = host;
        waited = std::max(waited, need);
      }
      open = !host;
      plan.segments.back().launches.push_back({i, k});
    }
  }
}

Status Executor::timedLaunch(Plan &plan, const Action &action) {
  auto t0 = std::chrono::steady_clock::now();
  Status s = launchSegment(plan, action);
  computeSeconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return s;
}

Status Executor::launchSegment(Plan &plan, const Action &action) {
  Segment &segment = plan.segments[action.segment];
  if (!segment.impl && !segment.host)
    segment.impl = backend->createSegment();
  auto launch = [&]() -> Status {
    for (const auto &[stepIndex, k] : segment.launches) {
      const program::Step &step = program.steps(stepIndex);
      int microBatch = step.has_micro_batch() ? step.micro_batch() : -1;
      trace::Span span = trace::kernelSpan(program.kernels(k), stepIndex, microBatch);
      STRAIT_RETURN_IF_ERROR(annotate(runKernel(program.kernels(k), microBatch), stepIndex));
    }
    return Status::ok();
  };
  // Errors of the backend itself (a failed graph launch) name the segment's
  // first step; kernel errors already name theirs (inner context wins).
  return annotate(segment.host ? launch() : segment.impl->run(launch), action.step);
}

// --- Communication overlapped with compute ---------------------------------
//
// run() queues each communication step (in program order, so every rank
// posts its transfers in the order of the sequential schedule) and goes on
// with the kernels; the communication thread serves the queue one step at a
// time. Before a kernel runs, it waits for the last queued transfer whose
// memory overlaps one of the kernel's values where either side writes (a
// recv or an all-reduce writes, a send reads; a kernel reads its inputs and
// writes its outputs). Memory, not value ids, is compared because the arena
// reuses the bytes of dead activations. Every value thus sees the same
// reads and writes in the same order as sequentially: results are
// identical. Which transfer a kernel waits for is static (planOverlapped),
// so the wait happens before the segment that starts at that kernel.

void Executor::commLoop() {
  trace::nameThread("comm", 2);
  for (;;) {
    int step;
    std::chrono::steady_clock::time_point queued;
    {
      std::unique_lock<std::mutex> lock(commMutex);
      commWake.wait(lock, [&] { return stopping || !queue.empty(); });
      if (queue.empty())
        return;
      step = queue.front().step;
      queued = queue.front().queued;
      if (!commError.isOk()) { // skip what follows a failure
        queue.pop_front();
        ++doneSeq;
        commDone.notify_all();
        continue;
      }
    }
    Status s = annotate(runComm(step, queued), step);
    {
      std::lock_guard<std::mutex> lock(commMutex);
      queue.pop_front(); // stays queued while it runs: kernels see it
      ++doneSeq;
      if (!s.isOk() && commError.isOk())
        commError = s;
    }
    commDone.notify_all();
  }
}

Status Executor::waitTransfers(uint64_t seq, bool all) {
  std::unique_lock<std::mutex> lock(commMutex);
  commDone.wait(lock, [&] { return doneSeq >= seq || (!all && !commError.isOk()); });
  return commError;
}

bool Executor::conflicts(const Transfer &t, const program::Kernel &kernel) const {
  auto touches = [&](uint32_t id, bool kernelWrites) {
    return id != kAbsentValue && (kernelWrites || t.writes) && overlaps(value(id), t.memory);
  };
  for (uint32_t id : kernel.inputs())
    if (touches(id, false))
      return true;
  for (uint32_t id : kernel.outputs())
    if (touches(id, true))
      return true;
  return false;
}

Executor::Transfer Executor::makeTransfer(int index) const {
  const program::Step &step = program.steps(index);
  Transfer t;
  t.step = index;
  t.writes = !step.has_send() || step.send().keep_decoded();
  std::vector<uint32_t> ids;
  if (step.has_send())
    ids.push_back(step.send().value_id());
  else if (step.has_recv())
    ids.push_back(step.recv().value_id());
  else
    ids.assign(step.all_reduce().value_ids().begin(), step.all_reduce().value_ids().end());
  for (uint32_t id : ids)
    t.memory.push_back(byteRange(value(id)));
  return t;
}

bool Executor::kernelsTouch(const Transfer &t, int from, int to) const {
  for (int i = from; i < to; ++i) {
    const program::Step &step = program.steps(i);
    if (!step.has_run() || step.once())
      continue;
    for (uint32_t kid : step.run().kernel_ids()) {
      const program::Kernel &kernel = program.kernels(kernelIndex.find(kid)->second);
      for (const auto *ids : {&kernel.inputs(), &kernel.outputs()})
        for (uint32_t id : *ids)
          if (id != kAbsentValue && overlaps(value(id), t.memory))
            return true;
    }
  }
  return false;
}

Status Executor::runOverlapped() {
  Status result;
  uint64_t base; // transfers queued before this run
  {
    std::lock_guard<std::mutex> lock(commMutex);
    base = queuedSeq;
    // Nothing is in flight between runs: a failure of an earlier run is
    // not this one's (strait-run's in-process recovery runs again after
    // one, on a new communicator).
    commError = Status::ok();
  }
  for (const Action &a : overlapPlan.actions) {
    if (a.kind == Action::Sync) {
      auto t0 = std::chrono::steady_clock::now();
      result = annotate(backend->synchronize(), a.step);
      computeSeconds +=
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    } else if (a.kind == Action::Enqueue) {
      Transfer t = makeTransfer(a.step);
      t.queued = std::chrono::steady_clock::now();
      {
        std::lock_guard<std::mutex> lock(commMutex);
        if (!commError.isOk())
          break;
        queue.push_back(std::move(t));
        ++queuedSeq;
      }
      commWake.notify_one();
    } else {
      if (a.wait)
        result = waitTransfers(base + a.wait);
      if (result.isOk())
        result = timedLaunch(overlapPlan, a);
    }
    if (!result.isOk())
      break;
  }
  // Every queued transfer finishes (or fails) before run() returns.
  Status drained = waitTransfers(queuedSeq, /*all=*/true);
  if (result.isOk())
    result = drained;
  if (result.isOk())
    result = annotate(backend->synchronize(), program.steps_size() - 1);
  return result;
}

} // namespace rt
} // namespace strait
