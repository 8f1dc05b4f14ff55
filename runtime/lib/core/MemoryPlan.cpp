//===- MemoryPlan.cpp - Arena offsets of a device program's activations --===//
//
// Liveness of every value over the program's schedule, the Reshape-like
// kernels whose result shares its input's bytes, and first-fit placement of
// the activations in one arena (planMemory, Executor.h).
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <list>
#include <map>

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
  // A sent value stays live until the next communication step: run()
  // overlaps the send with the kernels that follow it, and a kernel that
  // wrote into the sent bytes (arena reuse) would have to wait for it.
  std::vector<uint32_t> inFlight;
  auto settle = [&](int at) {
    for (uint32_t id : inFlight)
      recordUse(live, id, at);
    inFlight.clear();
  };
  int prevComm = -1;
  for (const auto &step : p.steps()) {
    if (step.kind_case() != program::Step::kRun)
      settle(event);
    int commEvent = event;
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
      inFlight.push_back(step.send().value_id());
      recordUse(live, step.send().value_id(), event++);
      break;
    case program::Step::kRecv:
      // Live from the previous communication step: run() may queue the
      // receive that early (prefetch), and its bytes must not be shared
      // with the kernels in between.
      if (prevComm >= 0)
        recordUse(live, step.recv().value_id(), prevComm);
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
    if (step.kind_case() != program::Step::kRun)
      prevComm = commEvent;
  }
  settle(std::max(0, event - 1));
  return live;
}

} // namespace

/// Reshape-like kernels whose output may share its input's bytes: for each
/// such output, the value it aliases (by index into p.values). Both must be
/// activations of the same size, written once (by one kernel, no receive,
/// not reduced in place), so that the shared bytes never change while
/// either is live; chains (a Reshape of a Squeeze) resolve to their root.
std::map<int, int> reshapeAliases(const program::Program &p) {
  std::map<uint32_t, int> index, writes;
  for (int v = 0; v < p.values_size(); ++v)
    index[p.values(v).id()] = v;
  for (const auto &k : p.kernels())
    for (uint32_t id : k.outputs())
      ++writes[id];
  for (const auto &step : p.steps()) {
    if (step.has_recv())
      writes[step.recv().value_id()] += 2;
    if (step.has_send() && step.send().keep_decoded()) // replaced by the decoded payload
      writes[step.send().value_id()] += 2;
    if (step.has_all_reduce())
      for (uint32_t id : step.all_reduce().value_ids())
        writes[id] += 2;
  }
  std::map<int, int> alias;
  for (const auto &k : p.kernels()) {
    const std::string &op = k.op();
    if (op != "Reshape" && op != "Flatten" && op != "Squeeze" && op != "Unsqueeze" &&
        op != "Identity")
      continue;
    if (k.inputs_size() < 1 || k.outputs_size() != 1)
      continue;
    auto in = index.find(k.inputs(0)), out = index.find(k.outputs(0));
    if (in == index.end() || out == index.end() || in->second == out->second)
      continue;
    const program::Value &x = p.values(in->second), &y = p.values(out->second);
    if (x.role() != program::ROLE_ACTIVATION || y.role() != program::ROLE_ACTIVATION ||
        x.dtype() != y.dtype() || valueBytes(x) != valueBytes(y) ||
        writes[x.id()] != 1 || writes[y.id()] != 1)
      continue;
    int root = in->second;
    while (alias.count(root))
      root = alias[root];
    alias[out->second] = root;
  }
  return alias;
}

StatusOr<uint64_t> planMemory(program::Program &p) {
  uint64_t align = p.memory_plan().alignment() ? p.memory_plan().alignment() : 64;
  auto live = computeLiveness(p);
  // An aliased value takes its root's placement; the root is live over the
  // union of their lifetimes.
  std::map<int, int> alias = reshapeAliases(p);
  std::map<int, std::pair<int, int>> span; // by value index
  for (int v = 0; v < p.values_size(); ++v) {
    auto it = live.find(p.values(v).id());
    span[v] = it == live.end() ? std::make_pair(0, 0) : it->second;
  }
  for (const auto &[v, root] : alias) {
    span[root].first = std::min(span[root].first, span[v].first);
    span[root].second = std::max(span[root].second, span[v].second);
  }
  struct Item {
    int index, start, end;
    uint64_t size;
  };
  std::vector<Item> items;
  for (int v = 0; v < p.values_size(); ++v) {
    const auto &value = p.values(v);
    if (value.role() != program::ROLE_ACTIVATION || alias.count(v))
      continue;
    uint64_t size = (valueBytes(value) + align - 1) / align * align;
    items.push_back({v, span[v].first, span[v].second, std::max<uint64_t>(size, align)});
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
  for (const auto &[v, root] : alias) {
    p.mutable_values(v)->set_arena_offset(p.values(root).arena_offset());
    p.mutable_values(v)->set_has_arena_offset(true);
  }
  p.mutable_memory_plan()->set_arena_bytes(arenaBytes);
  p.mutable_memory_plan()->set_alignment(align);
  return arenaBytes;
}

} // namespace rt
} // namespace strait
