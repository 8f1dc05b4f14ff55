//===- Executor.cpp - Runs the steps of a device program ------------------===//
//
// Memory placement, kernel resolution and the step loop.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <list>

namespace strait {
namespace rt {

namespace {

uint64_t valueBytes(const program::Value &v) {
  return numElements(Shape(v.shape().begin(), v.shape().end())) *
         dtypeSize(v.dtype());
}

/// Records for every value the first and last event index using it.
void recordUse(std::map<uint32_t, std::pair<int, int>> &live, uint32_t id,
               int event) {
  auto it = live.find(id);
  if (it == live.end())
    live[id] = {event, event};
  else
    it->second.second = event;
}

std::map<uint32_t, std::pair<int, int>>
computeLiveness(const program::Program &p) {
  std::map<uint32_t, int> kernelPos;
  for (int k = 0; k < p.kernels_size(); ++k)
    kernelPos[p.kernels(k).id()] = k;
  std::map<uint32_t, std::pair<int, int>> live;
  int event = 0;
  for (const auto &step : p.steps()) {
    switch (step.kind_case()) {
    case program::Step::kRun:
      for (uint32_t kid : step.run().kernel_ids()) {
        const auto &kernel = p.kernels(kernelPos[kid]);
        for (uint32_t id : kernel.inputs())
          if (id != kAbsentValue)
            recordUse(live, id, event);
        for (uint32_t id : kernel.outputs())
          if (id != kAbsentValue)
            recordUse(live, id, event);
        ++event;
      }
      break;
    case program::Step::kSend:
      recordUse(live, step.send().value_id(), event++);
      break;
    case program::Step::kRecv:
      recordUse(live, step.recv().value_id(), event++);
      break;
    case program::Step::kAllReduce:
      for (uint32_t id : step.all_reduce().value_ids())
        recordUse(live, id, event);
      ++event;
      break;
    default:
      break;
    }
  }
  return live;
}

} // namespace

StatusOr<uint64_t> planMemory(program::Program &p) {
  uint64_t align = p.memory_plan().alignment() ? p.memory_plan().alignment() : 64;
  auto live = computeLiveness(p);
  struct Item {
    int index, start, end;
    uint64_t size;
  };
  std::vector<Item> items;
  for (int v = 0; v < p.values_size(); ++v) {
    const auto &value = p.values(v);
    if (value.role() != program::ROLE_ACTIVATION)
      continue;
    auto it = live.find(value.id());
    int start = it == live.end() ? 0 : it->second.first;
    int end = it == live.end() ? 0 : it->second.second;
    uint64_t size = (valueBytes(value) + align - 1) / align * align;
    items.push_back({v, start, end, std::max<uint64_t>(size, align)});
  }
  std::stable_sort(items.begin(), items.end(), [](const Item &a, const Item &b) {
    return a.start < b.start || (a.start == b.start && a.size > b.size);
  });
  struct Placed {
    uint64_t offset, size;
    int end;
  };
  std::list<Placed> placed; // sorted by offset
  uint64_t arenaBytes = 0;
  for (const Item &item : items) {
    placed.remove_if([&](const Placed &q) { return q.end < item.start; });
    uint64_t offset = 0;
    auto pos = placed.begin();
    for (; pos != placed.end(); ++pos) {
      if (pos->offset >= offset + item.size)
        break;
      offset = std::max(offset, pos->offset + pos->size);
    }
    placed.insert(pos, {offset, item.size, item.end});
    arenaBytes = std::max(arenaBytes, offset + item.size);
    auto *value = p.mutable_values(item.index);
    value->set_arena_offset(offset);
    value->set_has_arena_offset(true);
  }
  p.mutable_memory_plan()->set_arena_bytes(arenaBytes);
  p.mutable_memory_plan()->set_alignment(align);
  return arenaBytes;
}

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
  STRAIT_RETURN_IF_ERROR(exec->annotate(exec->allocate(**backend), -1));
  STRAIT_RETURN_IF_ERROR(exec->annotate(exec->resolveKernels(**backend), -1));
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
    const program::CodecParams &codec =
        step.has_send()   ? step.send().codec()
        : step.has_recv() ? step.recv().codec()
                          : step.all_reduce().codec();
    if (codec.codec() != program::CODEC_NONE)
      return exec->annotate(
          unimplemented("codec " + program::Codec_Name(codec.codec()) +
                        " is reserved; runtime v1 implements CODEC_NONE only"),
          i);
  }
  return exec;
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
    if (v.role() == program::ROLE_ACTIVATION && !v.has_arena_offset())
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
    if (v.role() == program::ROLE_ACTIVATION) {
      t.data = base + v.arena_offset();
    } else {
      STRAIT_ASSIGN_OR_RETURN(Buffer buffer, backend.allocate(t.byteSize()));
      t.data = buffer.data();
      persistent.push_back(std::move(buffer));
      if (v.role() == program::ROLE_CONSTANT)
        STRAIT_RETURN_IF_ERROR(copyTensorData(
            v.constant(), t, "values[" + std::to_string(i) + "].constant"));
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

Status Executor::runKernel(const program::Kernel &kernel, int microBatch) {
  std::vector<const Tensor *> ins;
  std::vector<Tensor *> outs;
  for (uint32_t id : kernel.inputs())
    ins.push_back(id == kAbsentValue ? nullptr : &values[id]);
  for (uint32_t id : kernel.outputs())
    outs.push_back(id == kAbsentValue ? nullptr : &values[id]);
  KernelContext ctx(kernel, std::move(ins), std::move(outs));
  ctx.setMicroBatch(microBatch);
  Status s = kernelFns[kernelIndex[kernel.id()]](ctx);
  if (!s.isOk())
    s.withKernel(kernel.op() + " '" + kernel.name() + "'");
  return s;
}

Status Executor::runComm(const program::Step &step) {
  switch (step.kind_case()) {
  case program::Step::kSend:
    return comm->send(values[step.send().value_id()], step.send().peer(),
                      step.send().channel())
        .withPeer(step.send().peer());
  case program::Step::kRecv:
    return comm->recv(values[step.recv().value_id()], step.recv().peer(),
                      step.recv().channel())
        .withPeer(step.recv().peer());
  case program::Step::kAllReduce: {
    const auto &ar = step.all_reduce();
    std::vector<int> group(ar.ranks().begin(), ar.ranks().end());
    for (uint32_t id : ar.value_ids()) {
      Tensor &t = values[id];
      STRAIT_RETURN_IF_ERROR(group.empty()
                                 ? comm->allReduceSum(t, ar.channel())
                                 : comm->allReduceSumGroup(t, group, ar.channel()));
      if (ar.reduce() == program::REDUCE_MEAN) {
        float scale = 1.0f / (group.empty() ? comm->getWorldSize() : group.size());
        float *d = t.as<float>();
        for (int64_t i = 0; i < t.numel(); ++i)
          d[i] *= scale;
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
    return annotate(runComm(step), index);
  }
  for (uint32_t kid : step.run().kernel_ids())
    STRAIT_RETURN_IF_ERROR(
        annotate(runKernel(program.kernels(kernelIndex[kid]),
                            step.has_micro_batch() ? step.micro_batch() : -1), index));
  return Status::ok();
}

Status Executor::run() {
  for (int i = 0; i < program.steps_size(); ++i)
    STRAIT_RETURN_IF_ERROR(runStep(i));
  return annotate(backend->synchronize(), program.steps_size() - 1);
}

} // namespace rt
} // namespace strait
