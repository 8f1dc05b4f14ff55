//===- Simulator.cpp - Discrete-event simulation of a plan ----------------===//
//
// A fluid flow model: a transfer waits its link's latency, then moves its
// bytes at the link's bandwidth divided by the number of transfers active
// on it. Compute runs one op at a time per stage in schedule order. Time
// advances to the earliest of: a compute end, a transfer's latency expiry,
// a transfer's completion at current rates.
//
// A stage's tail follows its last backward of an iteration: its all-reduce,
// then (a holder of a tied weight) the wait for the other holders' partial
// gradients, then the optimizer update; the stage's next iteration starts
// after it. The iteration time is the steady-state period of back-to-back
// iterations, which is what a training loop measures per step: a later
// stage's tail overlaps the next iteration's first forwards upstream.
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/Simulator.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <limits>

using namespace strait;

static constexpr double kNever = std::numeric_limits<double>::infinity();

llvm::StringRef strait::stringifyEventKind(TimelineEvent::Kind kind) {
  static const char *names[] = {"forward", "backward", "send_activation",
                                "send_gradient", "allreduce"};
  return names[unsigned(kind)];
}

namespace {
struct Op {
  enum Kind { Forward, Backward, Tail } kind;
  unsigned microBatch; ///< iteration * M + micro-batch (Tail: the iteration)
  bool backward() const { return kind == Backward; }
};

struct Flow {
  unsigned resource, cut, microBatch;
  bool gradient;
  double begin, activeAt, remaining;
  bool active = false, done = false;
};

struct Resource {
  double capacity = 1;
  unsigned active = 0;
  LinkUsage usage;
};

class Simulation {
public:
  Simulation(const PartitionPlan &plan, const ClusterModel &cluster,
             const PlanCompression *compression, unsigned iterations)
      : plan(plan), cluster(cluster), compression(compression),
        S(plan.stages.size()), M(plan.microBatches), K(iterations) {}
  SimulationResult run();
  /// End of iteration k: the last of the stages' tails.
  std::vector<double> iterationEnds;

private:
  std::vector<Op> scheduleOf(unsigned stage) const;
  std::vector<Op> iterationSchedule(unsigned stage) const;
  double tailStart(unsigned stage, unsigned iteration) const;
  bool holdsTied(unsigned stage) const { return plan.stages[stage].tiedExchangeTime > 0; }
  unsigned resourceFor(unsigned cut, bool gradient);
  bool ready(unsigned stage, const Op &op) const;
  void startOps();
  void finishCompute(unsigned stage);
  void send(unsigned cut, bool gradient, unsigned mb);
  double nextEventTime() const;
  void advance(double to);
  void settleFlows();

  const PartitionPlan &plan;
  const ClusterModel &cluster;
  const PlanCompression *compression;
  unsigned S, M, K;
  double now = 0;
  std::vector<std::vector<Op>> ops;
  std::vector<unsigned> cursor;
  std::vector<double> busyUntil;
  std::vector<std::vector<char>> actArrived, gradArrived, fwdDone;
  /// Per stage and iteration: when its gradients are all-reduced (its tied
  /// partials ready to send); -1 before its last backward.
  std::vector<std::vector<double>> reduced;
  std::vector<Flow> flows;
  std::vector<Resource> resources;
  llvm::DenseMap<uint64_t, unsigned> resourceIndex;
  SimulationResult result;
  double computeBusy = 0;
};
} // namespace

std::vector<Op> Simulation::scheduleOf(unsigned j) const {
  std::vector<Op> list;
  for (unsigned k = 0; k < K; ++k) {
    for (Op op : iterationSchedule(j)) {
      op.microBatch += k * M;
      list.push_back(op);
    }
    list.push_back({Op::Tail, k});
  }
  return list;
}

std::vector<Op> Simulation::iterationSchedule(unsigned j) const {
  std::vector<Op> list;
  if (plan.schedule == Schedule::GPipe) {
    for (unsigned i = 0; i < M; ++i)
      list.push_back({Op::Forward, i});
    for (unsigned i = 0; i < M; ++i)
      list.push_back({Op::Backward, i});
    return list;
  }
  // Warm-up forwards: the plan's in-flight count minus the one in steady
  // state (classic 1F1B: S - j - 1).
  unsigned inFlight = plan.stages[j].inFlight ? plan.stages[j].inFlight
                                              : std::min(S - j, M);
  unsigned warm = std::min(inFlight, M) - 1;
  for (unsigned i = 0; i < warm; ++i)
    list.push_back({Op::Forward, i});
  for (unsigned i = 0; i + warm < M; ++i) {
    list.push_back({Op::Forward, i + warm});
    list.push_back({Op::Backward, i});
  }
  for (unsigned i = M - warm; i < M; ++i)
    list.push_back({Op::Backward, i});
  return list;
}

unsigned Simulation::resourceFor(unsigned cut, bool gradient) {
  const StagePlan &s = plan.stages[cut];
  bool shared = cluster.links[s.sendLink].shared;
  uint64_t key = shared ? (uint64_t(s.sendLink) << 2) | (gradient ? 1 : 0)
                        : (uint64_t(cut) << 2) | (gradient ? 3 : 2);
  auto [it, inserted] = resourceIndex.try_emplace(key, resources.size());
  if (inserted) {
    Resource r;
    r.capacity = s.sendBandwidth > 0 ? s.sendBandwidth : 1e30;
    r.usage.name = cluster.links[s.sendLink].origin +
                   (shared ? "" : " cut " + std::to_string(cut)) +
                   (gradient ? " (backward)" : " (forward)");
    resources.push_back(std::move(r));
  }
  return it->second;
}

bool Simulation::ready(unsigned j, const Op &op) const {
  if (op.kind == Op::Tail)
    return tailStart(j, op.microBatch) < kNever;
  if (op.kind == Op::Forward)
    return j == 0 || actArrived[j][op.microBatch];
  if (j + 1 == S)
    return fwdDone[j][op.microBatch];
  return gradArrived[j][op.microBatch];
}

/// The update of stage j in iteration k starts once its gradients are
/// all-reduced and, where it holds a copy of a tied weight, every other
/// copy's reduced partial gradient has crossed to it (its
/// tiedExchangeTime: the partials of the other holders, sent as each is
/// ready); kNever while some holder has not finished its backward.
double Simulation::tailStart(unsigned j, unsigned k) const {
  double start = reduced[j][k];
  if (start < 0)
    return kNever;
  if (!holdsTied(j))
    return start;
  for (unsigned h = 0; h < S; ++h)
    if (h != j && holdsTied(h)) {
      if (reduced[h][k] < 0)
        return kNever;
      start = std::max(start, reduced[h][k] + (compression && j < compression->tiedTime.size() &&
                                                       compression->tiedTime[j] > 0
                                                   ? compression->tiedTime[j]
                                                   : plan.stages[j].tiedExchangeTime));
    }
  return start;
}

void Simulation::startOps() {
  for (unsigned j = 0; j < S; ++j) {
    if (busyUntil[j] != kNever || cursor[j] >= ops[j].size())
      continue;
    const Op &op = ops[j][cursor[j]];
    if (!ready(j, op))
      continue;
    const StagePlan &s = plan.stages[j];
    if (op.kind == Op::Tail) {
      busyUntil[j] = std::max(now, tailStart(j, op.microBatch)) + s.updateTime;
      continue;
    }
    double duration = op.backward() ? s.bwdTime : s.fwdTime;
    busyUntil[j] = now + duration;
    if (op.microBatch >= M) // the timeline shows the first iteration
      continue;
    computeBusy += duration;
    result.events.push_back({op.backward() ? TimelineEvent::Kind::Backward
                                           : TimelineEvent::Kind::Forward,
                             j, op.microBatch, now, now + duration});
  }
}

void Simulation::send(unsigned cut, bool gradient, unsigned mb) {
  const StagePlan &s = plan.stages[cut];
  if (s.sendBytes <= 0) {
    (gradient ? gradArrived[cut] : actArrived[cut + 1])[mb] = 1;
    return;
  }
  Flow f;
  f.resource = resourceFor(cut, gradient);
  f.cut = cut;
  f.microBatch = mb;
  f.gradient = gradient;
  f.begin = now;
  double bytes = s.sendBytes, codecDelay = 0;
  if (compression && cut < compression->forward.size()) {
    bytes = gradient ? compression->backwardBytes[cut] : compression->forwardBytes[cut];
    codecDelay = gradient ? compression->backwardCodecTime[cut]
                          : compression->forwardCodecTime[cut];
  }
  f.activeAt = now + s.sendLatency + codecDelay;
  f.remaining = bytes;
  resources[f.resource].usage.bytes += bytes;
  flows.push_back(f);
}

void Simulation::finishCompute(unsigned j) {
  const Op op = ops[j][cursor[j]++];
  busyUntil[j] = kNever;
  if (op.kind == Op::Tail) {
    iterationEnds[op.microBatch] = std::max(iterationEnds[op.microBatch], now);
    return;
  }
  if (!op.backward()) {
    fwdDone[j][op.microBatch] = 1;
    if (j + 1 < S)
      send(j, false, op.microBatch);
    return;
  }
  if (j > 0)
    send(j - 1, true, op.microBatch);
  if (ops[j][cursor[j]].kind == Op::Tail) { // the iteration's last backward
    double ar = compression && j < compression->allReduceTime.size()
                    ? compression->allReduceTime[j]
                    : plan.stages[j].allReduceTime;
    if (ar > 0 && op.microBatch < M)
      result.events.push_back(
          {TimelineEvent::Kind::AllReduce, j, 0, now, now + ar});
    reduced[j][op.microBatch / M] = now + ar;
  }
}

double Simulation::nextEventTime() const {
  double next = kNever;
  for (unsigned j = 0; j < S; ++j)
    next = std::min(next, busyUntil[j]);
  for (const Flow &f : flows) {
    if (f.done)
      continue;
    if (!f.active) {
      next = std::min(next, f.activeAt);
      continue;
    }
    const Resource &r = resources[f.resource];
    next = std::min(next, now + f.remaining * r.active / r.capacity);
  }
  return next;
}

void Simulation::advance(double to) {
  double dt = to - now;
  for (Resource &r : resources)
    if (r.active)
      r.usage.busySeconds += dt;
  for (Flow &f : flows)
    if (f.active && !f.done) {
      const Resource &r = resources[f.resource];
      f.remaining -= dt * r.capacity / r.active;
    }
  now = to;
}

void Simulation::settleFlows() {
  double eps = 1e-9 * std::max(1.0, now);
  for (Flow &f : flows) {
    if (f.done)
      continue;
    if (!f.active && f.activeAt <= now + eps) {
      f.active = true;
      ++resources[f.resource].active;
    }
    Resource &r = resources[f.resource];
    if (f.active && f.remaining <= eps * r.capacity / std::max(1u, r.active)) {
      f.done = true;
      --r.active;
      (f.gradient ? gradArrived[f.cut] : actArrived[f.cut + 1])[f.microBatch] =
          1;
      if (f.microBatch < M)
        result.events.push_back({f.gradient
                                     ? TimelineEvent::Kind::SendGradient
                                     : TimelineEvent::Kind::SendActivation,
                                 f.gradient ? f.cut + 1 : f.cut, f.microBatch,
                                 f.begin, now});
    }
  }
  llvm::erase_if(flows, [](const Flow &f) { return f.done; });
}

SimulationResult Simulation::run() {
  for (unsigned j = 0; j < S; ++j)
    ops.push_back(scheduleOf(j));
  cursor.assign(S, 0);
  busyUntil.assign(S, kNever);
  actArrived.assign(S, std::vector<char>(K * M, 0));
  gradArrived.assign(S, std::vector<char>(K * M, 0));
  fwdDone.assign(S, std::vector<char>(K * M, 0));
  reduced.assign(S, std::vector<double>(K, -1));
  iterationEnds.assign(K, 0);
  startOps();
  while (true) {
    double next = nextEventTime();
    if (next == kNever)
      break;
    advance(next);
    double eps = 1e-12 * std::max(1.0, now);
    for (unsigned j = 0; j < S; ++j)
      if (busyUntil[j] <= now + eps)
        finishCompute(j);
    settleFlows();
    startOps();
  }
  result.iterationTime = result.firstIterationTime = iterationEnds[0];
  double T = result.iterationTime;
  result.bubbleFraction = T > 0 ? 1 - computeBusy / (S * T) : 0;
  for (Resource &r : resources) {
    r.usage.utilization = T > 0 ? r.usage.bytes / (r.capacity * T) : 0;
    result.links.push_back(r.usage);
  }
  return result;
}

llvm::Expected<SimulationResult>
strait::simulatePlan(const PartitionPlan &plan, const ClusterModel &cluster,
                     const PlanCompression *compression) {
  if (plan.stages.empty() || plan.microBatches == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cannot simulate a plan without stages");
  Simulation sim(plan, cluster, compression, 1);
  SimulationResult result = sim.run();
  for (unsigned j = 0; j < plan.stages.size(); ++j) {
    unsigned expected = 2 * plan.microBatches;
    unsigned seen = llvm::count_if(result.events, [&](const TimelineEvent &e) {
      return e.stage == j && (e.kind == TimelineEvent::Kind::Forward ||
                              e.kind == TimelineEvent::Kind::Backward);
    });
    if (seen != expected)
      return llvm::createStringError(
          llvm::inconvertibleErrorCode(),
          "simulation deadlocked in stage " + std::to_string(j));
  }
  // The steady state: iterations back to back, each stage starting the next
  // after its own tail; the period between the ends of the 2nd and 4th.
  Simulation steady(plan, cluster, compression, 4);
  steady.run();
  const std::vector<double> &ends = steady.iterationEnds;
  if (ends[1] > 0 && ends[3] > ends[1])
    result.iterationTime = (ends[3] - ends[1]) / 2;
  return result;
}

llvm::Error strait::writeTimelineJSON(const SimulationResult &result,
                                      const PartitionPlan &plan,
                                      const ClusterModel &cluster,
                                      llvm::StringRef path) {
  std::error_code ec;
  llvm::raw_fd_ostream os(path, ec, llvm::sys::fs::OF_Text);
  if (ec)
    return llvm::createStringError(ec, "cannot write '" + path +
                                           "': " + ec.message());
  llvm::json::OStream json(os, 1);
  json.object([&] {
    json.attribute("iteration_time", result.iterationTime);
    json.attribute("bubble_fraction", result.bubbleFraction);
    json.attribute("schedule", stringifySchedule(plan.schedule));
    json.attribute("micro_batches", plan.microBatches);
    json.attributeArray("stages", [&] {
      for (const StagePlan &s : plan.stages)
        json.object([&] {
          json.attribute("first_block", s.firstBlock);
          json.attribute("end_block", s.endBlock);
          json.attribute("devices", int64_t(s.devices.size()));
          json.attribute("first_device", cluster.devices[s.devices[0]].name);
        });
    });
    json.attributeArray("events", [&] {
      for (const TimelineEvent &e : result.events)
        json.object([&] {
          json.attribute("kind", stringifyEventKind(e.kind));
          json.attribute("stage", e.stage);
          json.attribute("micro_batch", e.microBatch);
          json.attribute("start", e.start);
          json.attribute("end", e.end);
        });
    });
    json.attributeArray("links", [&] {
      for (const LinkUsage &l : result.links)
        json.object([&] {
          json.attribute("name", l.name);
          json.attribute("bytes", l.bytes);
          json.attribute("busy_seconds", l.busySeconds);
          json.attribute("utilization", l.utilization);
        });
    });
  });
  return llvm::Error::success();
}
