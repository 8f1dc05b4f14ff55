//===- StageEvaluation.cpp - Stages to an iteration time ------------------===//
//
// evaluateWith / evaluateStages (docs/planner.md, "Partitioner"): the one
// place that turns a list of stages (blocks and devices) into a plan with
// per-stage times, memory and the iteration time the simulator checks; the
// search (Partitioner.cpp) and the baselines (Baselines.cpp) score their
// candidates with it.
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
#include <cmath>

using namespace strait;
using namespace strait::detail;

//===----------------------------------------------------------------------===//
// evaluateStages: the one place that turns stages into an iteration time.
//===----------------------------------------------------------------------===//

/// Explains why stage `j` does not fit on its worst device.
static std::string memoryMessage(const PlanContext &ctx, const StagePlan &s,
                                 unsigned j, Schedule schedule, double m) {
  const ClusterModel &cluster = ctx.cluster;
  const Device &dev = cluster.devices[s.peakMemoryDevice];
  const MemoryOptions &mem = ctx.options.memory;
  double state = s.paramBytes + s.gradBytes * (mem.gradBytesPerParamByte +
                                               mem.optimizerBytesPerParamByte);
  std::string head = llvm::formatv(
      "device '{0}' ({1}, {2} usable) in stage {3} (blocks {4}-{5})",
      dev.name, cluster.types[dev.type].name, formatGiB(s.capacity), j,
      s.firstBlock, s.endBlock - 1);
  if (state > s.capacity)
    return head + ": parameters, gradients and optimizer state need " +
           formatGiB(state) + " (constraint: parameter state)";
  return head + ": parameter state " + formatGiB(state) + " plus activations of " +
         std::to_string(s.inFlight) + " in-flight micro-batches of " +
         llvm::formatv("{0:f2}", m).str() + " samples under " +
         stringifySchedule(schedule).str() +
         (s.recompute ? " (recomputing, the blocks' inputs only)" : "") + " need " +
         formatGiB(s.peakMemory) + " (constraint: activation memory)";
}

static void fillStage(const PlanContext &ctx, const Chunk &chunk,
                      StagePlan &s, double m, unsigned inFlight) {
  StageCost cost = ctx.stageCost(s.firstBlock, s.endBlock, chunk, m, s.recompute);
  s.fwdTime = cost.fwd;
  s.bwdTime = cost.bwd;
  s.paramBytes = cost.paramBytes;
  s.gradBytes = cost.gradBytes;
  s.allReduceTime = cost.allReduce;
  s.updateTime = cost.update;
  s.inFlight = inFlight;
  s.shares.clear();
  s.peakMemory = -1;
  for (unsigned d : s.devices) {
    unsigned cls = ctx.cluster.devices[d].speedClass;
    s.shares.push_back(ctx.shareOf(s.firstBlock, s.endBlock, chunk, cls));
    double need =
        ctx.memory(s.firstBlock, s.endBlock, chunk, cls, m, inFlight, s.recompute);
    // The device with least headroom is the one reported.
    double cap = ctx.capacity(cls);
    if (s.peakMemory < 0 || need - cap > s.peakMemory - s.capacity) {
      s.peakMemory = need;
      s.capacity = cap;
      s.peakMemoryDevice = d;
    }
  }
}

/// evaluateWith for one choice of recomputing stages.
static PartitionPlan evaluateOnce(const PlanContext &ctx,
                                  const std::vector<StageAssignment> &stages,
                                  const std::vector<Chunk> &chunks,
                                  const std::vector<char> &recompute,
                                  unsigned microBatches, Schedule schedule) {
  PartitionPlan plan;
  plan.strategy = ctx.options.strategy;
  plan.schedule = schedule;
  plan.microBatches = microBatches;
  plan.globalBatch = ctx.globalBatch;
  double m = ctx.globalBatch / microBatches;
  plan.microBatchSamples = m;
  unsigned S = stages.size();
  double latency = 0, period = 0, allReduceTail = 0, busy = 0;
  plan.feasible = S > 0;
  // Round trip of a micro-batch from stage j to the end and back.
  // The pipeline period is the slowest stage or cut per micro-batch.
  std::vector<double> cycle(S + 1, 0), stageTime(S, 0);
  double pipePeriod = 0;
  for (int j = int(S) - 1; j >= 0; --j) {
    StageCost c = ctx.stageCost(stages[j].firstBlock, stages[j].endBlock,
                                chunks[j], m, recompute[j]);
    stageTime[j] = c.fwd + c.bwd;
    cycle[j] = cycle[j + 1] + stageTime[j];
    pipePeriod = std::max(pipePeriod, stageTime[j]);
    if (j + 1 < int(S)) {
      double x = ctx.commTime(ctx.comm(chunks[j], chunks[j + 1]),
                              stages[j].endBlock - 1, m);
      cycle[j] += 2 * x;
      pipePeriod = std::max(pipePeriod, x);
    }
  }
  // A stage that alternates (fewer in flight than M) feeds the next one
  // only as fast as its own gradients return: the next stage must keep at
  // least one micro-batch fewer in flight or it stalls every period.
  std::vector<unsigned> inFlight(S);
  for (unsigned j = 0; j < S; ++j) {
    inFlight[j] = ctx.inFlight(schedule, microBatches, S - j, cycle[j],
                               std::max(pipePeriod, stageTime[j]));
    if (j > 0 && inFlight[j - 1] < microBatches)
      inFlight[j] = std::max(1u, std::min(inFlight[j], inFlight[j - 1] - 1));
  }
  // Per stage, the forward and backward chains from stage 0 to it (one
  // micro-batch's stage times and transfers before it), which its tail may
  // overlap in the steady state (steadyTail).
  std::vector<double> fwdChain(S, 0), bwdChain(S, 0);
  for (unsigned j = 0; j < S; ++j) {
    StagePlan s;
    s.firstBlock = stages[j].firstBlock;
    s.endBlock = stages[j].endBlock;
    s.devices = stages[j].devices;
    s.recompute = recompute[j];
    fillStage(ctx, chunks[j], s, m, inFlight[j]);
    double t = s.fwdTime + s.bwdTime;
    latency += t;
    busy += microBatches * t;
    period = std::max(period, (microBatches - 1) * t);
    if (j + 1 < S) {
      fwdChain[j + 1] = fwdChain[j] + s.fwdTime;
      bwdChain[j + 1] = bwdChain[j] + s.bwdTime;
    }
    if (j + 1 < S) {
      CommCost c = ctx.comm(chunks[j], chunks[j + 1]);
      s.sendTime = ctx.commTime(c, s.endBlock - 1, m);
      s.sendBytes = ctx.graph.cutBytes[s.endBlock - 1] * m;
      s.sendLink = c.link;
      s.sendLatency = c.latency;
      s.sendBandwidth = c.bandwidth;
      latency += 2 * s.sendTime;
      period = std::max(period, (microBatches - 1) * s.sendTime);
      fwdChain[j + 1] += s.sendTime;
      bwdChain[j + 1] += s.sendTime;
    }
    if (plan.feasible && s.peakMemory > s.capacity) {
      plan.feasible = false;
      plan.message = "out of memory: " + memoryMessage(ctx, s, j, schedule, m);
    }
    plan.stages.push_back(std::move(s));
  }
  // Tied weights: after its all-reduce, each stage holding a copy exchanges
  // its accumulated partial gradient with every other copy's stage, once
  // per iteration (replica i with replica i, the full tensor each).
  for (const CoarseGraph::TiedWeight &w : ctx.graph.tied) {
    std::vector<unsigned> holders;
    for (unsigned j = 0; j < S; ++j)
      if (llvm::any_of(w.blocks, [&](unsigned b) {
            return b >= stages[j].firstBlock && b < stages[j].endBlock;
          }))
        holders.push_back(j);
    for (unsigned j : holders) {
      if (j != holders.front())
        plan.stages[j].tiedBytes += w.bytes;
      if (w.frozen) // no gradient to exchange
        continue;
      for (unsigned k : holders) {
        if (k == j)
          continue;
        CommCost c = ctx.comm(chunks[j], chunks[k]);
        double pairs = std::min(chunks[j].devices.size(), chunks[k].devices.size());
        plan.stages[j].tiedExchangeTime += c.latency + w.bytes * pairs / c.bandwidth;
      }
    }
  }
  // The one-iteration objective (oneIterationTime): every stage's tail in
  // full after one iteration from an empty pipeline.
  double largestTail = 0;
  for (const StagePlan &st : plan.stages)
    largestTail = std::max(largestTail,
                           st.allReduceTime + st.tiedExchangeTime + st.updateTime);
  // The steady state of back-to-back iterations (steadyTail): stage 0's
  // tail in full, a later stage's only where it outlasts the chains around
  // it. A stage holding a tied copy waits for the other copies' partial
  // gradients, so only the next iteration's forward chain covers its tail.
  for (unsigned j = 0; j < S; ++j) {
    const StagePlan &st = plan.stages[j];
    double tail = st.allReduceTime + st.tiedExchangeTime + st.updateTime;
    double cover = fwdChain[j] + (st.tiedExchangeTime > 0 ? 0 : bwdChain[j]);
    allReduceTail = std::max(allReduceTail, steadyTail(tail, j, cover));
  }
  // All-reduces of different stages whose rings cross one shared link run
  // at the same time and split it: charge their sum on that link (two or
  // more stages; one stage's own tail is charged above).
  llvm::DenseMap<unsigned, double> sharedAllReduce;
  llvm::DenseMap<unsigned, unsigned> sharedStages;
  for (const StagePlan &st : plan.stages) {
    llvm::SmallVector<unsigned, 4> crossed;
    size_t n = st.devices.size();
    for (size_t i = 0; n > 1 && i < n; ++i) {
      unsigned id = ctx.cluster.linkId(st.devices[i], st.devices[(i + 1) % n]);
      if (ctx.cluster.links[id].shared && !llvm::is_contained(crossed, id))
        crossed.push_back(id);
    }
    for (unsigned id : crossed) {
      sharedAllReduce[id] += st.allReduceTime;
      largestTail = std::max(largestTail, sharedAllReduce[id]);
      if (++sharedStages[id] > 1)
        allReduceTail = std::max(allReduceTail, sharedAllReduce[id]);
    }
  }
  plan.iterationTime = latency + period + allReduceTail;
  plan.oneIterationTime = latency + period + largestTail;
  plan.bubbleFraction =
      S && plan.iterationTime > 0 ? 1 - busy / (S * plan.iterationTime) : 0;
  plan.throughput = plan.iterationTime > 0 ? ctx.globalBatch / plan.iterationTime
                                           : 0;
  return plan;
}

PartitionPlan detail::evaluateWith(const PlanContext &ctx,
                                  const std::vector<StageAssignment> &stages,
                                  unsigned microBatches, Schedule schedule) {
  unsigned S = stages.size();
  std::vector<Chunk> chunks;
  for (const StageAssignment &a : stages)
    chunks.push_back(ctx.makeChunk(a.devices));
  // Which stages recompute: all (full), none, or (auto) those that do not
  // fit without it. Recomputing lengthens a stage, which changes the 1F1B
  // in-flight counts: repeat until no further stage needs it (each round
  // only adds stages).
  RecomputeMode mode = ctx.options.recompute;
  std::vector<char> recompute(S, mode == RecomputeMode::Full);
  for (unsigned round = 0;; ++round) {
    PartitionPlan plan =
        evaluateOnce(ctx, stages, chunks, recompute, microBatches, schedule);
    if (mode != RecomputeMode::Auto || round == S)
      return plan;
    bool changed = false;
    for (unsigned j = 0; j < S; ++j)
      if (!recompute[j] && plan.stages[j].peakMemory > plan.stages[j].capacity)
        recompute[j] = changed = true;
    if (!changed)
      return plan;
  }
}

PartitionPlan strait::evaluateStages(const CoarseGraph &graph,
                                     const ClusterModel &cluster,
                                     const PlannerOptions &options,
                                     const std::vector<StageAssignment> &stages,
                                     unsigned microBatches, Schedule schedule) {
  PlanContext ctx(graph, cluster, options);
  return evaluateWith(ctx, stages, std::max(1u, microBatches), schedule);
}

