//===- Partitioner.cpp - Heterogeneous pipeline DP over bandwidth islands -===//
//
// The search (docs/planner.md, section "Partitioner"):
//  1. coarsen the graph to at most maxBlocks blocks;
//  2. group devices into islands at every gap level of the bandwidth
//     hierarchy; order the islands of a level into a path that keeps
//     consecutive islands on fast links; split every island into s equal
//     chunks (s = 1, 2, 4, ...);
//  3. for each micro-batch count M and schedule, a DP over (first block,
//     chunk) minimizes the summed latency of one micro-batch through the
//     pipeline subject to every stage's and cut's steady-state load staying
//     under a bound L; the iteration time is latency + load, and L runs over
//     the distinct loads between the min-max load and the largest useful one.
//
//===----------------------------------------------------------------------===//

#include "StageCost.h"
#include "strait/Analysis/Partitioner.h"
#include "strait/Analysis/Workload.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>

using namespace strait;
using namespace strait::detail;

static constexpr double kInf = std::numeric_limits<double>::infinity();

llvm::StringRef strait::stringifySchedule(Schedule schedule) {
  return schedule == Schedule::GPipe ? "gpipe" : "1f1b";
}

llvm::StringRef strait::stringifyStrategy(PlannerStrategy strategy) {
  switch (strategy) {
  case PlannerStrategy::Strait:
    return "strait";
  case PlannerStrategy::Uniform:
    return "uniform";
  case PlannerStrategy::PipeDream:
    return "pipedream";
  case PlannerStrategy::DTFM:
    return "dtfm";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// The DP over an ordered chunk list.
//===----------------------------------------------------------------------===//

namespace {
/// DP over (first block, chunk), processed from the last block backwards.
/// For bounds P (on every stage's and cut's (M-1) * per-micro-batch time)
/// and A (on every stage's tail: all-reduce and update), it finds the
/// stages of least one-micro-batch latency; the iteration time is the
/// steady-state period latency + P + the largest tail beyond the chains
/// that overlap it (steadyTail), minimized over the candidate bounds.
class ChunkDP {
public:
  ChunkDP(const PlanContext &ctx, std::vector<Chunk> chunks, unsigned maxSkip,
          bool ignoreMemory)
      : ctx(ctx), chunks(std::move(chunks)), maxSkip(std::max(1u, maxSkip)),
        ignoreMemory(ignoreMemory) {
    precompute();
  }

  /// Best stages for (M, schedule) faster than `incumbent` seconds in the
  /// steady state; empty if nothing fits or nothing beats it. `oneIteration`
  /// (optional) is the one-iteration objective's search (oneIterationTime)
  /// as the planner ran it before the steady state: its incumbent in, its
  /// best stages out (empty if none beat it); every plan it finds is also a
  /// steady-state candidate, so no plan is worse by the planner's measure
  /// than the one the old objective chose.
  struct OneIteration {
    double incumbent = kInf;
    std::vector<StageAssignment> best;
  };
  std::vector<StageAssignment> solve(unsigned microBatches, Schedule schedule,
                                     double incumbent = kInf,
                                     OneIteration *oneIteration = nullptr);

private:
  struct Entry {
    double cost = kInf;
    unsigned next = 0, nextChunk = 0, stages = 0;
    bool recompute = false; ///< the stage [b, next) recomputes (auto)
  };
  struct PathTime {
    double latency = 0, period = 0, allReduce = 0;
    double largestTail = 0; ///< the one-iteration objective's tail
    double total() const { return latency + period + allReduce; }
    double oneIteration() const { return latency + period + largestTail; }
  };
  void precompute();
  size_t stageIndex(unsigned v, unsigned b0, unsigned b1) const {
    return (size_t(v) * B + b0) * (B + 1) + b1;
  }
  /// Runs the DP under bounds (periodBound, arBound); returns the best
  /// first chunk or -1. With minMax, minimizes the largest period instead.
  /// `laterBound` bounds the tails of the stages after the first (arBound
  /// the first's).
  int run(double periodBound, double arBound, bool minMax, double laterBound);
  int run(double periodBound, double arBound, bool minMax) {
    return run(periodBound, arBound, minMax, arBound);
  }
  PathTime pathTime(int first) const;
  std::vector<StageAssignment> reconstruct(int first) const;
  bool fits(size_t idx, bool recompute, unsigned stagesFromEnd, double cycle,
            double period) const {
    if (ignoreMemory)
      return true;
    double t = (recompute ? unitTimeR : unitTime)[idx] * m;
    unsigned need = ctx.inFlight(schedule, M, stagesFromEnd, cycle,
                                 std::max(t, period));
    return need <= (recompute ? unitFitR : unitFit)[idx] / m;
  }
  /// Stage variants tried per candidate: without recomputation, then (auto)
  /// with it where the first does not fit.
  unsigned variants() const {
    return ctx.options.recompute == RecomputeMode::Auto && !ignoreMemory ? 2 : 1;
  }
  /// Transfer time of a micro-batch from chunk v to chunk w at the cut
  /// before block b1 (tabulated per solve, for the current m).
  double commTime(unsigned v, unsigned w, unsigned b1) const {
    return xTimes[(size_t(v) * maxSkip + (w - v - 1)) * (B + 1) + b1];
  }
  void tabulateCommTimes() {
    xTimes.assign(size_t(V) * maxSkip * (B + 1), 0);
    for (unsigned v = 0; v < V; ++v)
      for (unsigned w = v + 1; w < V && w <= v + maxSkip; ++w) {
        const CommCost &c = comms[size_t(v) * maxSkip + (w - v - 1)];
        for (unsigned b1 = 1; b1 <= B; ++b1)
          xTimes[(size_t(v) * maxSkip + (w - v - 1)) * (B + 1) + b1] =
              ctx.commTime(c, b1 - 1, m);
      }
  }

  const PlanContext &ctx;
  std::vector<Chunk> chunks;
  unsigned maxSkip;
  bool ignoreMemory;
  unsigned B = 0, V = 0;
  std::vector<double> unitTime, allReduce, unitFit; // per (v, b0, b1), m = 1
  std::vector<double> unitTimeR, unitFitR;          // the same, recomputing
  std::vector<CommCost> comms;                      // per (v, w - v - 1)
  std::vector<double> xTimes;                       // per (v, w - v - 1, b1)
  std::vector<Entry> table;                         // per (b, v)
  unsigned M = 1;
  double m = 1;
  Schedule schedule = Schedule::OneFOneB;
};
} // namespace

void ChunkDP::precompute() {
  B = ctx.numBlocks();
  V = chunks.size();
  size_t n = size_t(V) * B * (B + 1);
  unitTime.assign(n, kInf);
  allReduce.assign(n, kInf);
  unitFit.assign(n, -1);
  bool full = ctx.options.recompute == RecomputeMode::Full;
  if (variants() > 1) {
    unitTimeR.assign(n, kInf);
    unitFitR.assign(n, -1);
  }
  for (unsigned v = 0; v < V; ++v)
    for (unsigned b0 = 0; b0 < B; ++b0)
      for (unsigned b1 = b0 + 1; b1 <= B; ++b1) {
        StageCost c = ctx.stageCost(b0, b1, chunks[v], 1.0, full);
        size_t idx = stageIndex(v, b0, b1);
        unitTime[idx] = c.fwd + c.bwd;
        // The stage's once-per-iteration tail: all-reduce, then the update.
        allReduce[idx] = c.allReduce + c.update;
        unitFit[idx] = c.maxInFlight;
        if (variants() > 1) {
          StageCost r = ctx.stageCost(b0, b1, chunks[v], 1.0, true);
          unitTimeR[idx] = r.fwd + r.bwd;
          unitFitR[idx] = r.maxInFlight;
        }
      }
  comms.resize(size_t(V) * maxSkip);
  for (unsigned v = 0; v < V; ++v)
    for (unsigned w = v + 1; w < V && w <= v + maxSkip; ++w)
      comms[size_t(v) * maxSkip + (w - v - 1)] = ctx.comm(chunks[v], chunks[w]);
}

int ChunkDP::run(double periodBound, double arBound, bool minMax, double laterBound) {
  table.assign(size_t(B + 1) * V, Entry());
  auto at = [&](unsigned b, unsigned v) -> Entry & {
    return table[size_t(b) * V + v];
  };
  double steady = M > 1 ? M - 1 : 0;
  // The pipeline's period as the memory check assumes it.
  double period = M > 1 && !minMax ? periodBound / steady : 0;
  for (int b = int(B) - 1; b >= 0; --b) {
    for (unsigned v = 0; v < V; ++v) {
      Entry best;
      auto better = [&](double cost, unsigned stages) {
        return cost < best.cost || (cost == best.cost && stages < best.stages);
      };
      auto consider = [&](double cost, unsigned next, unsigned w,
                          unsigned stages, bool recompute) {
        if (better(cost, stages))
          best = {cost, next, w, stages, recompute};
      };
      for (unsigned b1 = b + 1; b1 <= B; ++b1) {
        size_t idx = stageIndex(v, b, b1);
        if (allReduce[idx] > (b == 0 ? arBound : laterBound) ||
            (!minMax && steady * unitTime[idx] * m > periodBound))
          break; // both grow with the block range
        // Recomputing (variant 1) is slower: only where the stage does not
        // fit without it.
        for (unsigned r = 0; r < variants(); ++r) {
          double lat = (r ? unitTimeR : unitTime)[idx] * m, load = steady * lat;
          if (!minMax && load > periodBound)
            break;
          if (b1 == B) {
            if (!fits(idx, r, 1, lat, period))
              continue;
            consider(minMax ? load : lat, B, V, 1, r);
            break;
          }
          bool allFit = true;
          for (unsigned w = v + 1; w < V && w <= v + maxSkip; ++w) {
            const Entry &e = at(b1, w);
            if (e.cost == kInf)
              continue;
            double x = commTime(v, w, b1);
            double xLoad = steady * x;
            if (!minMax && xLoad > periodBound)
              continue;
            double cost = minMax ? std::max({load, xLoad, e.cost})
                                 : lat + 2 * x + e.cost;
            // The memory check only matters for a candidate that would win.
            // In min-max mode the downstream latency is unknown; classic 1F1B
            // in-flight counts are a relaxation, so the bound stays a bound.
            if (!better(cost, e.stages + 1))
              continue;
            if (!fits(idx, r, e.stages + 1, minMax ? 0 : lat + 2 * x + e.cost,
                      period)) {
              allFit = false;
              continue;
            }
            consider(cost, b1, w, e.stages + 1, r);
          }
          if (allFit)
            break;
        }
      }
      at(b, v) = best;
    }
  }
  int first = -1;
  for (unsigned v = 0; v < V; ++v)
    if (at(0, v).cost < kInf &&
        (first < 0 || at(0, v).cost < at(0, first).cost))
      first = v;
  return first;
}

ChunkDP::PathTime ChunkDP::pathTime(int first) const {
  PathTime t;
  double steady = M > 1 ? M - 1 : 0;
  unsigned b = 0, v = first;
  while (b < B) {
    const Entry &e = table[size_t(b) * V + v];
    size_t idx = stageIndex(v, b, e.next);
    double unit = (e.recompute ? unitTimeR : unitTime)[idx];
    // The chains before this stage are the latency so far (steadyTail).
    t.allReduce = std::max(t.allReduce, steadyTail(allReduce[idx], b == 0 ? 0 : 1, t.latency));
    t.largestTail = std::max(t.largestTail, allReduce[idx]);
    t.latency += unit * m;
    t.period = std::max(t.period, steady * unit * m);
    if (e.next < B) {
      double x = commTime(v, e.nextChunk, e.next);
      t.latency += 2 * x;
      t.period = std::max(t.period, steady * x);
    }
    b = e.next;
    v = e.nextChunk;
  }
  return t;
}

std::vector<StageAssignment> ChunkDP::reconstruct(int first) const {
  std::vector<StageAssignment> stages;
  unsigned b = 0, v = first;
  while (b < B) {
    const Entry &e = table[size_t(b) * V + v];
    stages.push_back({b, e.next, chunks[v].devices});
    b = e.next;
    v = e.nextChunk;
  }
  return stages;
}

/// Sorted distinct values in (lo, hi].
static std::vector<double> distinctIn(std::vector<double> values, double lo,
                                      double hi) {
  llvm::erase_if(values, [&](double v) { return !(v > lo && v <= hi); });
  std::sort(values.begin(), values.end());
  values.erase(std::unique(values.begin(), values.end()), values.end());
  return values;
}

std::vector<StageAssignment> ChunkDP::solve(unsigned microBatches,
                                            Schedule sched, double incumbent,
                                            OneIteration *oneIteration) {
  M = microBatches;
  m = ctx.globalBatch / M;
  schedule = sched;
  tabulateCommTimes();
  const PlannerOptions &opts = ctx.options;
  const double slack = 1 + 1e-12, ratio = std::max(1.001, opts.boundRatio);
  std::vector<StageAssignment> best, oneBest;
  double bestTime = incumbent;
  double oneTime = oneIteration ? oneIteration->incumbent : kInf;
  // Sweep 0 searches as the one-iteration objective did (its incumbent,
  // oneTime, drives the sweep); every plan is a steady-state candidate too.
  auto keep = [&](int start, int sweep) {
    if (start < 0)
      return;
    PathTime t = pathTime(start);
    bool steadyBetter = t.total() < bestTime;
    bool oneBetter = sweep == 0 && t.oneIteration() < oneTime;
    if (!steadyBetter && !oneBetter)
      return;
    // The DP's memory check assumes the bound's period; confirm with the
    // plan's own.
    std::vector<StageAssignment> stages = reconstruct(start);
    if (!ignoreMemory && !evaluateWith(ctx, stages, M, schedule).feasible)
      return;
    if (oneBetter) {
      oneTime = t.oneIteration();
      oneBest = stages;
    }
    if (steadyBetter) {
      bestTime = t.total();
      best = std::move(stages);
    }
  };
  // All-reduce bounds: every distinct value when few, else a geometric grid
  // (each step loses at most ratio - 1 of the all-reduce time).
  std::vector<double> arValues;
  for (double ar : allReduce)
    if (ar != kInf)
      arValues.push_back(ar);
  arValues = distinctIn(std::move(arValues), -1, kInf);
  bool exactAR = arValues.size() <= opts.exhaustiveLimit;
  // Without an all-reduce bound: the least latency and the least period
  // bound every plan's time from below (with the all-reduce added).
  int anyFirst = run(0, kInf, /*minMax=*/true);
  if (anyFirst < 0)
    return best;
  double floorPeriod = table[anyFirst].cost;
  int anyFree = run(kInf, kInf, false);
  if (anyFree < 0)
    return best;
  double floorLatency = table[anyFree].cost;
  // Two sweeps over the tail bounds. In the first, the bound holds for
  // every stage, and the sweep and its pruning are the one-iteration
  // objective's (latency + period + the largest tail, against oneTime). In
  // the second it holds for the first stage only, whose tail the steady
  // state pays in full, so a plan new at a bound takes at least latency +
  // period + arPrev; later stages may take larger tails, which the chains
  // before them cover (steadyTail).
  for (int sweep = 0; sweep < 2; ++sweep) {
  const double later = sweep == 0 ? -1 : kInf; // -1: the bound itself
  auto floorOf = [&](double latency, double period, double arPrev) {
    return latency + period + arPrev;
  };
  // The incumbent the sweep prunes against.
  auto target = [&] { return sweep == 0 ? oneTime : bestTime; };
  double arPrev = 0;
  for (size_t i = 0; i < arValues.size();) {
    double arBound = arValues[i] * slack;
    double laterBound = later < 0 ? arBound : later;
    if (floorOf(floorLatency, floorPeriod, arPrev) >= target())
      break;
    int first = run(0, arBound, /*minMax=*/true, laterBound);
    int freeFirst = first < 0 ? -1 : run(kInf, arBound, false, laterBound);
    if (first >= 0 && freeFirst >= 0) {
      double lmin = table[first].cost;
      double freeLatency = table[freeFirst].cost;
      double cap = target() - floorOf(freeLatency, 0, arPrev);
      // Sweep the period bound down from the loosest useful one. Each run
      // gives the least-latency plan within the bound; the next bound lies
      // just under that plan's period, so each run finds a new point of the
      // (latency, period) Pareto front, exactly, for the first
      // exhaustiveLimit runs; after that the bound falls by `ratio` at
      // least. Lowering the bound only raises the latency, so the sweep
      // stops once latency + least period can no longer beat the best.
      double bound = cap;
      for (unsigned runs = 0; lmin <= cap; ++runs) {
        bool last = bound <= lmin;
        int f = run(last ? lmin * slack : bound * slack, arBound, false, laterBound);
        if (f < 0)
          break;
        PathTime t = pathTime(f);
        keep(f, sweep);
        cap = target() - floorOf(freeLatency, 0, arPrev);
        if (last || t.period <= lmin || floorOf(t.latency, lmin, arPrev) >= target())
          break;
        double below = t.period * (1 - 1e-9);
        // Sweep 1 (a wider space, its candidates mostly behind sweep 0's)
        // takes the geometric steps from the start: 5x the plan time on
        // ResNet-101 / fusionllm-48 with exhaustive steps.
        bool exhaustive = sweep == 0 && runs + 1 < opts.exhaustiveLimit;
        bound = std::min(exhaustive ? below : t.period / ratio, cap);
      }
    }
    arPrev = arValues[i];
    if (exactAR && sweep == 0) {
      ++i;
      continue;
    }
    double target = arValues[i] * ratio;
    ++i;
    while (i < arValues.size() && arValues[i] < target)
      ++i;
    if (i == arValues.size() && arValues.back() > arPrev)
      i = arValues.size() - 1; // always try the largest
  }
  }
  if (oneIteration)
    oneIteration->best = std::move(oneBest);
  return best;
}

PartitionPlan strait::planOverChunks(
    const CoarseGraph &graph, const ClusterModel &cluster,
    const PlannerOptions &options,
    const std::vector<std::vector<unsigned>> &chunkDevices, unsigned maxSkip,
    unsigned microBatches, Schedule schedule) {
  PlanContext ctx(graph, cluster, options);
  std::vector<Chunk> chunks;
  for (const auto &devices : chunkDevices)
    chunks.push_back(ctx.makeChunk(devices));
  ChunkDP dp(ctx, std::move(chunks), maxSkip, /*ignoreMemory=*/false);
  std::vector<StageAssignment> stages = dp.solve(microBatches, schedule);
  if (stages.empty()) {
    PartitionPlan plan;
    plan.message = "no stage assignment fits in memory";
    return plan;
  }
  return evaluateWith(ctx, stages, microBatches, schedule);
}

//===----------------------------------------------------------------------===//
// planPartition: the search over grouping levels, island splits, micro-batch
// counts and schedules.
//===----------------------------------------------------------------------===//

/// Orders islands into a path that keeps consecutive islands on fast links:
/// greedy nearest-neighbour from every start (from the largest island only
/// when there are many), keeping the path with the best bottleneck, then
/// the best sum of log-bandwidths.
std::vector<unsigned>
detail::orderIslands(const ClusterModel &cluster,
             const std::vector<std::vector<unsigned>> &islands) {
  unsigned k = islands.size();
  std::vector<double> bw(size_t(k) * k, 0);
  for (unsigned a = 0; a < k; ++a)
    for (unsigned b = 0; b < k; ++b)
      if (a != b)
        bw[size_t(a) * k + b] =
            cluster.bandwidth(islands[a].front(), islands[b].front());
  std::vector<unsigned> starts;
  if (k <= 128) {
    for (unsigned s = 0; s < k; ++s)
      starts.push_back(s);
  } else {
    unsigned biggest = 0;
    for (unsigned s = 1; s < k; ++s)
      if (islands[s].size() > islands[biggest].size())
        biggest = s;
    starts.push_back(biggest);
  }
  std::vector<unsigned> bestPath;
  double bestNeck = -1, bestSum = -kInf;
  for (unsigned start : starts) {
    std::vector<char> used(k, 0);
    std::vector<unsigned> path = {start};
    used[start] = 1;
    double neck = kInf, sum = 0;
    for (unsigned step = 1; step < k; ++step) {
      unsigned cur = path.back(), next = k;
      for (unsigned c = 0; c < k; ++c)
        if (!used[c] && (next == k || bw[size_t(cur) * k + c] >
                                          bw[size_t(cur) * k + next]))
          next = c;
      double b = bw[size_t(cur) * k + next];
      neck = std::min(neck, b);
      sum += std::log(b);
      used[next] = 1;
      path.push_back(next);
    }
    if (neck > bestNeck || (neck == bestNeck && sum > bestSum)) {
      bestNeck = neck;
      bestSum = sum;
      bestPath = path;
    }
  }
  return bestPath;
}

int PlanContext::fixedMicroBatches(size_t replicas) const {
  if (!options.fixedReplicaBatch)
    return -1;
  double m = globalBatch / (graph.batchSamples * replicas);
  double rounded = std::round(m);
  if (rounded < 1 || std::abs(m - rounded) > 1e-9)
    return 0;
  if (!options.microBatchCounts.empty() &&
      !llvm::is_contained(options.microBatchCounts, unsigned(rounded)))
    return 0; // --micro-batches asked for another count
  return int(rounded);
}

/// With fixedReplicaBatch, the one micro-batch count at which `stages` run
/// (0: they cannot: unequal replica counts or no whole M); -1 without it.
static int fixedMicroBatches(const PlanContext &ctx,
                             const std::vector<StageAssignment> &stages) {
  if (!ctx.options.fixedReplicaBatch)
    return -1;
  for (const StageAssignment &s : stages)
    if (s.devices.size() != stages.front().devices.size())
      return 0;
  return stages.empty() ? 0 : ctx.fixedMicroBatches(stages.front().devices.size());
}

static std::vector<unsigned> microBatchCandidates(const PlannerOptions &options,
                                                  double globalBatch) {
  std::vector<unsigned> counts;
  for (unsigned c : options.microBatchCounts)
    if (c >= 1 && c <= globalBatch)
      counts.push_back(c);
  if (options.microBatchCounts.empty())
    for (unsigned c = 1; c <= globalBatch && c <= 256; c *= 2)
      counts.push_back(c);
  if (counts.empty())
    counts.push_back(1);
  return counts;
}

namespace {
/// Best plan so far across configurations.
struct Search {
  const PlanContext &ctx;
  PartitionPlan best;
  bool any = false;
  /// The least oneIterationTime of the plans the one-iteration objective
  /// chose so far (ChunkDP::OneIteration's incumbent).
  double oneIteration = kInf;
  void consider(PartitionPlan plan, int level, unsigned islands) {
    plan.groupingLevel = level;
    plan.numIslands = islands;
    if (!any || plan.iterationTime < best.iterationTime) {
      best = std::move(plan);
      any = true;
    }
  }
};
} // namespace

/// Chunks of one grouping level: islands in path order, each split in
/// `split` near-equal chunks of consecutive (tree-ordered) devices.
static std::vector<std::vector<unsigned>>
splitIslands(const std::vector<std::vector<unsigned>> &islands,
             const std::vector<unsigned> &order, unsigned split) {
  std::vector<std::vector<unsigned>> chunks;
  for (unsigned i : order) {
    const std::vector<unsigned> &island = islands[i];
    unsigned parts = std::min<unsigned>(split, island.size());
    for (unsigned p = 0; p < parts; ++p) {
      size_t lo = island.size() * p / parts, hi = island.size() * (p + 1) / parts;
      chunks.emplace_back(island.begin() + lo, island.begin() + hi);
    }
  }
  return chunks;
}

static void searchStrait(const PlanContext &ctx, const DeviceGrouping &grouping,
                         bool ignoreMemory, Search &search) {
  const PlannerOptions &options = ctx.options;
  std::vector<unsigned> counts = microBatchCandidates(options, ctx.globalBatch);
  unsigned blocks = ctx.numBlocks();
  for (unsigned level = 0; level < grouping.levels.size(); ++level) {
    const auto &islands = grouping.levels[level].islands;
    std::vector<unsigned> order = orderIslands(ctx.cluster, islands);
    size_t largest = 0;
    for (const auto &island : islands)
      largest = std::max(largest, island.size());
    for (unsigned split = 1; split <= options.maxStagesPerIsland; split *= 2) {
      // More chunks than a few per block only slow the DP down; small
      // clusters may still go down to single devices.
      size_t budget = std::max<size_t>(4 * blocks, 64);
      if (split > 1 && (split > largest || islands.size() * split / 2 >= budget))
        break;
      auto chunkDevices = splitIslands(islands, order, split);
      // With a fixed per-replica batch, one DP per chunk width R over the
      // chunks of that width, at the one M that width runs.
      std::vector<std::pair<size_t, std::vector<unsigned>>> runs;
      if (options.fixedReplicaBatch) {
        std::vector<size_t> widths;
        for (auto &devices : chunkDevices)
          if (!llvm::is_contained(widths, devices.size()))
            widths.push_back(devices.size());
        for (size_t width : widths)
          if (int M = ctx.fixedMicroBatches(width); M > 0)
            runs.push_back({width, {unsigned(M)}});
      } else {
        runs.push_back({0, counts});
      }
      for (auto &[width, runCounts] : runs) {
      std::vector<Chunk> chunks;
      for (auto &devices : chunkDevices)
        if (!width || devices.size() == width)
          chunks.push_back(ctx.makeChunk(devices));
      // Enough reach to skip whole islands, not every mix of chunks.
      ChunkDP dp(ctx, std::move(chunks), options.maxSkip + split - 1,
                 ignoreMemory);
      for (unsigned M : runCounts) {
        for (Schedule schedule : options.schedules) {
          double incumbent = search.any ? search.best.iterationTime : kInf;
          ChunkDP::OneIteration one;
          one.incumbent = search.oneIteration;
          std::vector<StageAssignment> stages =
              dp.solve(M, schedule, incumbent, &one);
          if (!one.best.empty()) {
            PartitionPlan plan = evaluateWith(ctx, one.best, M, schedule);
            if (plan.feasible || ignoreMemory) {
              search.oneIteration = std::min(search.oneIteration, plan.oneIterationTime);
              search.consider(std::move(plan), level, islands.size());
            }
          }
          if (stages.empty() && one.best.empty())
            continue;
          if (!stages.empty()) {
            PartitionPlan plan = evaluateWith(ctx, stages, M, schedule);
            if (plan.feasible || ignoreMemory)
              search.consider(std::move(plan), level, islands.size());
          }
          // GPipe takes as long as 1F1B in this model and keeps more
          // activations: it is only worth trying where 1F1B did not fit.
          break;
        }
      }
      }
    }
  }
}

PartitionPlan detail::bestOverChunks(
    const PlanContext &ctx, const std::vector<std::vector<unsigned>> &devices,
    unsigned maxSkip) {
  std::vector<Chunk> chunks;
  for (const auto &d : devices)
    chunks.push_back(ctx.makeChunk(d));
  ChunkDP dp(ctx, std::move(chunks), maxSkip, /*ignoreMemory=*/false);
  PartitionPlan best;
  bool any = false;
  std::vector<unsigned> counts = microBatchCandidates(ctx.options, ctx.globalBatch);
  if (ctx.options.fixedReplicaBatch) { // equal chunks: their width fixes M
    int M = devices.empty() ? 0 : ctx.fixedMicroBatches(devices.front().size());
    if (M <= 0)
      return best;
    counts = {unsigned(M)};
  }
  for (unsigned M : counts)
    for (Schedule schedule : ctx.options.schedules) {
      std::vector<StageAssignment> stages = dp.solve(M, schedule);
      if (stages.empty())
        continue;
      PartitionPlan plan = evaluateWith(ctx, stages, M, schedule);
      if (plan.feasible && (!any || plan.iterationTime < best.iterationTime)) {
        best = std::move(plan);
        any = true;
      }
    }
  return best;
}

PartitionPlan detail::bestOverMicroBatches(
    const PlanContext &ctx, const std::vector<StageAssignment> &stages) {
  PartitionPlan best;
  bool any = false;
  std::vector<unsigned> counts = microBatchCandidates(ctx.options, ctx.globalBatch);
  if (int M = fixedMicroBatches(ctx, stages); M >= 0) {
    if (M == 0) { // not runnable: scored at one micro-batch, infeasible
      best = evaluateWith(ctx, stages, 1, ctx.options.schedules.front());
      best.feasible = false;
      best.message = llvm::formatv(
          "the stages' replica counts ({0} in the first) do not run the global batch "
          "{1:0} in whole micro-batches of the graph's batch {2:0} per replica",
          stages.empty() ? 0 : stages.front().devices.size(), ctx.globalBatch,
          ctx.graph.batchSamples);
      return best;
    }
    counts = {unsigned(M)};
  }
  for (unsigned M : counts)
    for (Schedule schedule : ctx.options.schedules) {
      PartitionPlan plan = evaluateWith(ctx, stages, M, schedule);
      bool better = !any || (plan.feasible && !best.feasible) ||
                    (plan.feasible == best.feasible &&
                     plan.iterationTime < best.iterationTime);
      if (better) {
        best = std::move(plan);
        any = true;
      }
    }
  return best;
}

llvm::Expected<PartitionPlan> strait::planPartition(
    const CostGraph &graph, const ClusterModel &cluster,
    const PlannerOptions &options) {
  auto start = std::chrono::steady_clock::now();
  if (cluster.size() == 0)
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cluster '" + cluster.name +
                                       "' has no devices");
  // Auto recomputes only when nothing fits without it: a plan that fits
  // as it is stays the same.
  if (options.recompute == RecomputeMode::Auto) {
    PlannerOptions plain = options;
    plain.recompute = RecomputeMode::None;
    llvm::Expected<PartitionPlan> first = planPartition(graph, cluster, plain);
    if (!first || first->feasible)
      return first;
  }
  llvm::Expected<CoarseGraph> coarse =
      coarsenGraph(graph, cluster, options.maxBlocks);
  if (!coarse)
    return coarse.takeError();
  PlanContext ctx(*coarse, cluster, options);
  DeviceGrouping grouping = groupDevices(cluster, options.grouping);
  PartitionPlan result;
  if (options.strategy != PlannerStrategy::Strait) {
    result = planBaseline(ctx, grouping);
  } else {
    Search search{ctx, {}, false};
    searchStrait(ctx, grouping, /*ignoreMemory=*/false, search);
    if (search.any) {
      result = std::move(search.best);
    } else {
      // Nothing fits: plan without memory limits and report what fails.
      Search relaxed{ctx, {}, false};
      searchStrait(ctx, grouping, /*ignoreMemory=*/true, relaxed);
      result = std::move(relaxed.best);
      llvm::StringRef why = result.message;
      why.consume_front("out of memory: ");
      double b = ctx.graph.batchSamples;
      bool wholeBatches = !options.fixedReplicaBatch || ctx.globalBatch <= 0 ||
                          std::fmod(ctx.globalBatch, b) == 0;
      if (!result.feasible && !wholeBatches)
        result.message = llvm::formatv(
            "the global batch {0:0} is not a multiple of the IR's batch {1:0} (every "
            "replica runs whole micro-batches of it); pass --global-batch {2:0} (or change "
            "the input's batch)",
            ctx.globalBatch, b, std::max(1.0, std::round(ctx.globalBatch / b)) * b);
      else if (!result.feasible)
        result.message = why.empty()
                           ? std::string("no plan found")
                           : "no plan fits in memory; the fastest plan "
                             "ignoring memory fails first on " +
                                 why.str();
    }
  }
  result.strategy = options.strategy;
  result.planningSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  return result;
}

std::string strait::formatPlan(const PartitionPlan &plan,
                               const ClusterModel &cluster) {
  std::string out = llvm::formatv(
      "plan ({0}): {1} stages, {2} micro-batches of {3:f2} samples, {4}; "
      "iteration {5:f4} s, {6:f2} samples/s, bubble {7:f1}%{8}\n",
      stringifyStrategy(plan.strategy), plan.stages.size(), plan.microBatches,
      plan.microBatchSamples, stringifySchedule(plan.schedule),
      plan.iterationTime, plan.throughput, 100 * plan.bubbleFraction,
      plan.feasible ? "" : " [INFEASIBLE: " + plan.message + "]");
  for (unsigned j = 0; j < plan.stages.size(); ++j) {
    const StagePlan &s = plan.stages[j];
    std::string devs;
    for (unsigned i = 0; i < s.devices.size() && i < 4; ++i)
      devs += (i ? "," : "") + cluster.devices[s.devices[i]].name;
    if (s.devices.size() > 4)
      devs += ",...";
    out += llvm::formatv(
        "  stage {0}: blocks [{1},{2}) on {3} device(s) [{4}] fwd {5:f4} s "
        "bwd {6:f4} s allreduce {7:f4} s mem {8}/{9}",
        j, s.firstBlock, s.endBlock, s.devices.size(), devs, s.fwdTime,
        s.bwdTime, s.allReduceTime, formatGiB(s.peakMemory), formatGiB(s.capacity));
    if (s.recompute)
      out += " recompute";
    if (s.tiedExchangeTime > 0)
      out += llvm::formatv(" tied-gradient exchange {0:f4} s", s.tiedExchangeTime);
    if (j + 1 < plan.stages.size())
      out += llvm::formatv(" -> send {0:f1} MB in {1:f4} s over {2}",
                           s.sendBytes / 1e6, s.sendTime,
                           cluster.links[s.sendLink].origin);
    out += "\n";
  }
  return out;
}
