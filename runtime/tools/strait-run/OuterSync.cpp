//===- OuterSync.cpp - Local steps: the outer step across islands ---------===//

#include "OuterSync.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

namespace strait {
namespace run {

using namespace strait::rt;

namespace {

/// Parameters are reduced in buckets of at most this many bytes (one
/// all-reduce each, as the executor packs gradients).
constexpr int64_t kBucketFloats = (32ll << 20) / 4;

std::string text(float x) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", x);
  return buf;
}

std::string keyOf(const program::Value &v) {
  if (!v.parameter_name().empty())
    return v.parameter_name();
  return v.name().empty() ? "value" + std::to_string(v.id()) : v.name();
}

} // namespace

StatusOr<std::unique_ptr<OuterSync>> OuterSync::create(Executor &exec, Communicator *comm) {
  const program::Program &p = exec.getProgram();
  if (!p.has_outer_sync())
    return std::unique_ptr<OuterSync>();
  const program::OuterSync &s = p.outer_sync();
  const std::string f = "program.outer_sync";
  if (s.local_steps() < 2)
    return invalidArgument(f + ".local_steps: " + std::to_string(s.local_steps()) +
                           " (an outer synchronization needs 2 or more local steps)");
  if (!(s.lr() > 0) || !std::isfinite(s.lr()))
    return invalidArgument(f + ".lr: " + text(s.lr()) + " is not above 0");
  if (!(s.momentum() >= 0 && s.momentum() < 1))
    return invalidArgument(f + ".momentum: " + text(s.momentum()) +
                           " is not in [0, 1)");
  STRAIT_RETURN_IF_ERROR(validateCodecParams(s.codec(), f + ".codec"));
  if (!comm)
    return invalidArgument(f + ": the job has one rank; there is nothing to synchronize");
  std::set<int> group(s.ranks().begin(), s.ranks().end());
  if (group.size() != static_cast<size_t>(s.ranks_size()) || group.size() < 2)
    return invalidArgument(f + ".ranks: needs 2 or more distinct ranks");
  for (int r : group)
    if (r < 0 || r >= comm->getWorldSize())
      return invalidArgument(f + ".ranks: rank " + std::to_string(r) + " is not in the job of " +
                             std::to_string(comm->getWorldSize()) + " ranks");
  if (!group.count(p.rank()))
    return invalidArgument(f + ".ranks: this rank is not in the group");
  if (s.islands_size() < 2)
    return invalidArgument(f + ".islands: needs 2 or more islands");
  std::set<int> covered;
  for (int i = 0; i < s.islands_size(); ++i) {
    std::string fi = f + ".islands[" + std::to_string(i) + "]";
    const auto &island = s.islands(i).ranks();
    if (island.empty())
      return invalidArgument(fi + ": empty island");
    for (int j = 0; j < island.size(); ++j) {
      if (j && island[j] <= island[j - 1])
        return invalidArgument(fi + ": ranks must be sorted and distinct");
      if (!group.count(island[j]))
        return invalidArgument(fi + ": rank " + std::to_string(island[j]) +
                               " is not in outer_sync.ranks");
      if (!covered.insert(island[j]).second)
        return invalidArgument(fi + ": rank " + std::to_string(island[j]) +
                               " is in two islands");
    }
  }
  if (covered.size() != group.size())
    return invalidArgument(f + ".islands: " + std::to_string(group.size() - covered.size()) +
                           " rank(s) of the group are in no island");
  for (const program::Step &step : p.steps()) {
    uint32_t channel = step.has_send()         ? step.send().channel()
                       : step.has_recv()       ? step.recv().channel()
                       : step.has_all_reduce() ? step.all_reduce().channel()
                                               : s.channel() + 1;
    if (channel == s.channel())
      return invalidArgument(f + ".channel: " + std::to_string(channel) +
                             " is also step '" + step.label() + "''s channel");
  }

  std::unique_ptr<OuterSync> sync(new OuterSync(exec, comm));
  sync->localSteps = s.local_steps();
  sync->lr = s.lr();
  sync->momentum = s.momentum();
  sync->channel = s.channel();
  sync->options.ranks.assign(group.begin(), group.end());
  for (const auto &island : s.islands())
    sync->options.islands.emplace_back(island.ranks().begin(), island.ranks().end());
  sync->options.codec = s.codec();
  // A GPU communicator (NCCL inside a host) reads device memory, not a host
  // bucket: device programs reduce in the parameters' own buffers.
  sync->inPlace = p.device() != "cpu";

  // Trainable: a parameter that a kernel of a per-iteration step writes
  // (the optimizer's in-place update). `once` steps write 16-bit copies.
  std::set<uint32_t> kernels, written;
  for (const program::Step &step : p.steps())
    if (step.has_run() && !step.once())
      kernels.insert(step.run().kernel_ids().begin(), step.run().kernel_ids().end());
  for (const program::Kernel &k : p.kernels())
    if (kernels.count(k.id()))
      written.insert(k.outputs().begin(), k.outputs().end());
  for (const program::Value &v : p.values()) {
    if (v.role() != program::ROLE_PARAMETER || !written.count(v.id()))
      continue;
    if (v.dtype() != program::DTYPE_F32)
      return invalidArgument(f + ": trainable parameter '" + keyOf(v) + "' is " +
                             program::DType_Name(v.dtype()) +
                             "; the outer step averages f32 parameters");
    Param param;
    param.name = keyOf(v);
    param.id = v.id();
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(v.id()));
    param.shape = t.shape;
    param.numel = t.numel();
    param.outer.assign(param.numel, 0.0f);
    param.momentum.assign(param.numel, 0.0f);
    sync->params.push_back(std::move(param));
  }
  sync->reset();
  return sync;
}

void OuterSync::reset() {
  for (Param &param : params) {
    StatusOr<Tensor> t = exec.getValue(param.id);
    if (t.isOk())
      std::copy(t->as<float>(), t->as<float>() + param.numel, param.outer.begin());
    std::fill(param.momentum.begin(), param.momentum.end(), 0.0f);
  }
}

bool OuterSync::dueAfter(int64_t step, int64_t lastStep, bool atLast) const {
  return step % localSteps == 0 || (atLast && step == lastStep);
}

uint64_t OuterSync::getParameterBytes() const {
  uint64_t n = 0;
  for (const Param &param : params)
    n += param.numel * sizeof(float);
  return n;
}

Status OuterSync::step() {
  std::vector<float> host;
  size_t bucketIndex = 0;
  // Parameters [first, next) go through one all-reduce: their deltas are
  // packed into `host`, averaged, and applied. In place (device programs),
  // each parameter's delta is reduced in the parameter's own buffer, which
  // the communicator can read on the device.
  for (size_t first = 0; first < params.size();) {
    size_t next = first;
    int64_t n = 0;
    while (next < params.size() &&
           (next == first || (!inPlace && n + params[next].numel <= kBucketFloats)))
      n += params[next++].numel;
    Tensor bucket;
    if (inPlace) {
      STRAIT_ASSIGN_OR_RETURN(bucket, exec.getValue(params[first].id));
    } else {
      host.resize(n);
      bucket = Tensor{program::DTYPE_F32, {n}, host.data()};
    }
    float *deltas = bucket.as<float>();
    int64_t at = 0;
    for (size_t i = first; i < next; ++i) {
      STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(params[i].id));
      const float *theta = t.as<float>();
      const std::vector<float> &outer = params[i].outer;
      for (int64_t j = 0; j < params[i].numel; ++j)
        deltas[at + j] = outer[j] - theta[j];
      at += params[i].numel;
    }
    STRAIT_RETURN_IF_ERROR(reduce(bucket, bucketIndex++));
    at = 0;
    for (size_t i = first; i < next; ++i) {
      STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(params[i].id));
      float *theta = t.as<float>();
      std::vector<float> &outer = params[i].outer, &m = params[i].momentum;
      for (int64_t j = 0; j < params[i].numel; ++j) {
        float delta = deltas[at + j];
        m[j] = momentum * m[j] + delta;
        theta[j] = outer[j] - lr * (delta + momentum * m[j]);
        outer[j] = theta[j];
      }
      at += params[i].numel;
    }
    first = next;
  }
  // The 16-bit copies of the parameters follow them.
  exec.invalidateParameterCopies();
  return Status::ok();
}

Status OuterSync::reduce(const Tensor &bucket, size_t bucketIndex) {
  while (feedback.size() <= bucketIndex)
    feedback.push_back(std::make_unique<ErrorFeedback>());
  AllReduceOptions o = options;
  o.feedback = options.codec.codec() != program::CODEC_NONE ? feedback[bucketIndex].get()
                                                            : nullptr;
  STRAIT_RETURN_IF_ERROR(comm->allReduce(bucket, channel, o));
  float scale = 1.0f / static_cast<float>(options.ranks.size());
  float *x = bucket.as<float>();
  for (int64_t i = 0, n = bucket.numel(); i < n; ++i)
    x[i] *= scale;
  return Status::ok();
}

std::vector<std::pair<std::string, Tensor>> OuterSync::state() {
  std::vector<std::pair<std::string, Tensor>> out;
  for (Param &param : params) {
    out.push_back({"outer_sync.theta/" + param.name,
                   Tensor{program::DTYPE_F32, param.shape, param.outer.data()}});
    out.push_back({"outer_sync.momentum/" + param.name,
                   Tensor{program::DTYPE_F32, param.shape, param.momentum.data()}});
  }
  return out;
}

} // namespace run
} // namespace strait
