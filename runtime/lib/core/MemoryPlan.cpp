//===- MemoryPlan.cpp - Arena offsets of a device program's activations --===//
//
// Liveness of every value over the program's schedule, the kernels whose
// values share bytes (Reshape-likes, Split into and Concat of contiguous
// runs), and first-fit placement of the activations in one arena
// (planMemory, Executor.h).
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <cstdlib>
#include <list>
#include <map>
#include <set>

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

namespace {

/// A value that shares bytes of another: `offset` bytes into `root`.
struct Alias {
  int root = -1;
  uint64_t offset = 0;
};

/// The event (as computeLiveness numbers them) of every kernel, by kernel
/// index (its last, where a kernel runs in several steps), and how many times
/// it runs; and per value id the events that write it, the last event that
/// touches it, and whether the first to touch it is a kernel writing it.
struct Events {
  std::vector<int> kernel, runs;
  std::map<uint32_t, std::vector<int>> writes;
  std::map<uint32_t, int> last;
  std::map<uint32_t, bool> kernelWritesFirst;
};

Events scheduleEvents(const program::Program &p) {
  Events e;
  e.kernel.assign(p.kernels_size(), -1);
  e.runs.assign(p.kernels_size(), 0);
  std::map<uint32_t, int> kernelPos;
  for (int k = 0; k < p.kernels_size(); ++k)
    kernelPos[p.kernels(k).id()] = k;
  auto touch = [&](uint32_t id, int event, bool write, bool kernel) {
    if (id == kAbsentValue)
      return;
    e.kernelWritesFirst.emplace(id, write && kernel);
    if (write)
      e.writes[id].push_back(event);
    int &last = e.last.emplace(id, event).first->second;
    last = std::max(last, event);
  };
  int event = 0;
  for (const auto &step : p.steps()) {
    switch (step.kind_case()) {
    case program::Step::kRun:
      for (uint32_t kid : step.run().kernel_ids()) {
        auto it = kernelPos.find(kid);
        if (it == kernelPos.end())
          continue;
        const auto &kernel = p.kernels(it->second);
        e.kernel[it->second] = event;
        ++e.runs[it->second];
        for (uint32_t id : kernel.inputs())
          touch(id, event, false, true);
        for (uint32_t id : kernel.outputs())
          touch(id, event, true, true);
        ++event;
      }
      break;
    case program::Step::kSend:
      touch(step.send().value_id(), event++, step.send().keep_decoded(), false);
      break;
    case program::Step::kRecv:
      touch(step.recv().value_id(), event++, true, false);
      break;
    case program::Step::kAllReduce:
      for (uint32_t id : step.all_reduce().value_ids())
        touch(id, event, true, false);
      ++event;
      break;
    default:
      break;
    }
  }
  return e;
}

/// The first dimension in which `part` differs from `whole` (the axis of a
/// Split or Concat), and whether the parts are contiguous runs of the whole's
/// bytes: every dimension before it is 1. A part equal to the whole: axis
/// -1, contiguous.
bool contiguousPart(const program::Value &whole, const program::Value &part) {
  if (whole.shape_size() != part.shape_size())
    return false;
  for (int d = 0; d < whole.shape_size(); ++d)
    if (whole.shape(d) != part.shape(d)) {
      for (int o = 0; o < d; ++o)
        if (whole.shape(o) != 1)
          return false;
      return true;
    }
  return true;
}

} // namespace

/// Kernels whose outputs may share bytes of their inputs, or inputs bytes of
/// their output (by index into p.values): Reshape-likes (the same bytes),
/// Split into contiguous runs (each output its run of the input), and Concat
/// of contiguous runs (each input computed in place in its run of the
/// output: an all-reduce bucket, dist-bucket-all-reduces). Every value lives
/// in the arena (an activation or a gradient accumulator) with the same
/// element type, each kernel runs once in the step list, and the shared
/// bytes never change while a value that reads them is live:
///  - Reshape: the output written once (by the Reshape), the input only
///    before it (an accumulator: once per micro-batch); chains resolve to
///    their root;
///  - Split: each output written once, the input never after the Split (a
///    bucket is written by its Concat and reduced in place before);
///  - Concat: each input (the root of its Reshape chain) written only before
///    the Concat (an accumulator: once per micro-batch), in no other place's
///    bytes, and neither it nor its views used after the Concat (the bucket
///    is reduced in place after it).
static std::map<int, std::pair<int, uint64_t>> memoryAliases(const program::Program &p,
                                                             const Events &events) {
  std::map<uint32_t, int> index;
  for (int v = 0; v < p.values_size(); ++v)
    index[p.values(v).id()] = v;
  auto writes = [&](uint32_t id) {
    auto it = events.writes.find(id);
    return it == events.writes.end() ? size_t(0) : it->second.size();
  };
  auto activation = [&](int v) { return inArena(p.values(v).role()); };
  auto lastUse = [&](uint32_t id) {
    auto it = events.last.find(id);
    return it == events.last.end() ? -1 : it->second;
  };
  // Every write of `id` comes before event `at` (and there is one).
  auto writtenBefore = [&](uint32_t id, int at) {
    auto it = events.writes.find(id);
    return it != events.writes.end() && !it->second.empty() &&
           *std::max_element(it->second.begin(), it->second.end()) < at;
  };
  std::map<int, Alias> alias;
  auto rootOf = [&](int v) {
    while (alias.count(v))
      v = alias[v].root;
    return v;
  };
  // Reshape-likes first: the Concat rule follows their chains.
  for (int kernel = 0; kernel < p.kernels_size(); ++kernel) {
    const program::Kernel &k = p.kernels(kernel);
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
    if (!activation(in->second) || !activation(out->second) || x.dtype() != y.dtype() ||
        valueBytes(x) != valueBytes(y) || events.runs[kernel] != 1 || writes(y.id()) != 1 ||
        !writtenBefore(x.id(), events.kernel[kernel]))
      continue;
    alias[out->second] = {rootOf(in->second), 0};
  }
  // STRAIT_MEMORY_VIEWS=0: Reshape-likes only (bench/runtime/dp_step.py).
  const char *views = std::getenv("STRAIT_MEMORY_VIEWS");
  bool runs = !views || std::string(views) != "0";
  for (int k = 0; runs && k < p.kernels_size(); ++k) {
    const program::Kernel &kernel = p.kernels(k);
    int at = events.kernel[k];
    if (at < 0 || events.runs[k] != 1)
      continue;
    if (kernel.op() == "Split" && kernel.inputs_size() >= 1) {
      auto in = index.find(kernel.inputs(0));
      if (in == index.end() || !activation(in->second))
        continue;
      const program::Value &x = p.values(in->second);
      if (!writtenBefore(x.id(), at))
        continue;
      std::vector<int> outs;
      uint64_t bytes = 0;
      bool ok = true;
      for (uint32_t id : kernel.outputs()) {
        auto out = index.find(id);
        ok = ok && out != index.end() && activation(out->second) && !alias.count(out->second) &&
             out->second != in->second && writes(id) == 1 &&
             p.values(out->second).dtype() == x.dtype() && contiguousPart(x, p.values(out->second));
        if (!ok)
          break;
        outs.push_back(out->second);
        bytes += valueBytes(p.values(out->second));
      }
      if (!ok || bytes != valueBytes(x))
        continue;
      uint64_t offset = 0;
      for (int o : outs) {
        alias[o] = {in->second, offset};
        offset += valueBytes(p.values(o));
      }
    } else if (kernel.op() == "Concat" && kernel.outputs_size() == 1) {
      auto out = index.find(kernel.outputs(0));
      if (out == index.end() || !activation(out->second) || alias.count(out->second))
        continue;
      const program::Value &y = p.values(out->second);
      std::vector<std::pair<int, uint64_t>> places; // input root, offset
      std::set<int> seen;
      uint64_t offset = 0;
      bool ok = true;
      for (uint32_t id : kernel.inputs()) {
        auto in = index.find(id);
        ok = in != index.end() && activation(in->second) &&
             p.values(in->second).dtype() == y.dtype() && contiguousPart(y, p.values(in->second));
        if (!ok)
          break;
        uint64_t bytes = valueBytes(p.values(in->second));
        int root = rootOf(in->second);
        // Computed before the Concat into bytes of its own (a root), of
        // the input's size, and read by nothing after the Concat.
        bool place = root != out->second && !seen.count(root) &&
                     valueBytes(p.values(root)) == bytes && writtenBefore(p.values(root).id(), at);
        // The root and every value in its bytes (Reshape views, Split runs).
        place = place && lastUse(p.values(root).id()) <= at;
        for (const auto &[v, a] : alias)
          if (place && rootOf(v) == root)
            place = lastUse(p.values(v).id()) <= at;
        if (place)
          places.push_back({root, offset});
        seen.insert(root);
        offset += bytes;
      }
      if (!ok || offset != valueBytes(y))
        continue;
      for (const auto &[root, off] : places)
        alias[root] = {out->second, off};
    }
  }
  // Chains resolve to their root, offsets adding up.
  std::map<int, std::pair<int, uint64_t>> resolved;
  for (const auto &[v, a] : alias) {
    int root = v;
    uint64_t offset = 0;
    while (alias.count(root)) {
      offset += alias[root].offset;
      root = alias[root].root;
    }
    resolved[v] = {root, offset};
  }
  return resolved;
}

StatusOr<uint64_t> planMemory(program::Program &p) {
  uint64_t align = p.memory_plan().alignment() ? p.memory_plan().alignment() : 64;
  auto live = computeLiveness(p);
  Events events = scheduleEvents(p);
  // An accumulator holds nothing from the previous step: the first to touch
  // it in the step list must be a kernel writing it.
  for (int v = 0; v < p.values_size(); ++v) {
    const program::Value &value = p.values(v);
    auto first = events.kernelWritesFirst.find(value.id());
    if (value.role() == program::ROLE_GRADIENT && first != events.kernelWritesFirst.end() &&
        !first->second)
      return invalidArgument("values[" + std::to_string(v) + "] '" + value.name() +
                             "': a gradient accumulator (ROLE_GRADIENT) is read before a "
                             "kernel of the step writes it; accumulators live in the arena "
                             "within one step (a value kept across steps needs another role)");
  }
  // An aliased value takes its root's placement; the root is live over the
  // union of their lifetimes.
  std::map<int, std::pair<int, uint64_t>> alias = memoryAliases(p, events);
  std::map<int, std::pair<int, int>> span; // by value index
  for (int v = 0; v < p.values_size(); ++v) {
    auto it = live.find(p.values(v).id());
    span[v] = it == live.end() ? std::make_pair(0, 0) : it->second;
  }
  for (const auto &[v, place] : alias) {
    int root = place.first;
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
    if (!inArena(value.role()) || alias.count(v))
      continue;
    if (!live.count(value.id())) { // no step touches it (a folded kernel's old result)
      p.mutable_values(v)->set_arena_offset(0);
      p.mutable_values(v)->set_has_arena_offset(true);
      continue;
    }
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
  for (const auto &[v, place] : alias) {
    p.mutable_values(v)->set_arena_offset(p.values(place.first).arena_offset() + place.second);
    p.mutable_values(v)->set_has_arena_offset(true);
  }
  p.mutable_memory_plan()->set_arena_bytes(arenaBytes);
  p.mutable_memory_plan()->set_alignment(align);
  return arenaBytes;
}

} // namespace rt
} // namespace strait
