//===- Baselines.cpp - Uniform, PipeDream and DT-FM-like planners ---------===//
//
// The baselines Strait is compared against. They choose stages their own
// way but are scored by the same cost model (evaluateWith) and may pick the
// best micro-batch count and schedule under it, so ratios compare the
// partitioning decisions only.
//
//  * uniform:   equal blocks per stage, devices in file order split evenly,
//               the stage count chosen by the cost model (bandwidth-blind);
//  * pipedream: PipeDream's DP on a homogenized cluster (every device at
//               the mean speed, every link at the mean bandwidth), devices
//               in file order; the plan is then scored on the real cluster;
//
// Every stage of a baseline has as many replicas as the others (the
// exporter runs only such pipelines: each replica talks to one replica of
// the next stage): uniform and dtfm try only stage counts S that divide the
// N devices (all of them busy); pipedream's replication d takes chunks of
// exactly d devices (the last N mod d idle; its DP may skip chunks anyway).
//  * dtfm:      DT-FM-like: equal blocks per stage, equal data-parallel
//               groups built from the bandwidth spanning-tree order, groups
//               ordered along fast links, then a swap local search scored by
//               the cost model; no compression.
//
//===----------------------------------------------------------------------===//

#include "StageCost.h"
#include "strait/Analysis/Workload.h"

#include <algorithm>
#include <random>

using namespace strait;
using namespace strait::detail;

static bool better(const PartitionPlan &a, const PartitionPlan &b, bool haveB) {
  if (!haveB)
    return true;
  if (a.feasible != b.feasible)
    return a.feasible;
  return a.iterationTime < b.iterationTime;
}

/// Stages of equal block counts over the given device groups.
static std::vector<StageAssignment>
equalBlocks(unsigned blocks, const std::vector<std::vector<unsigned>> &groups) {
  std::vector<StageAssignment> stages;
  unsigned S = groups.size();
  for (unsigned j = 0; j < S; ++j)
    stages.push_back({blocks * j / S, blocks * (j + 1) / S, groups[j]});
  return stages;
}

/// `S` groups of floor(|order| / S) consecutive devices of `order` each; the
/// last |order| mod S devices are left out (equal replica counts).
static std::vector<std::vector<unsigned>>
evenGroups(const std::vector<unsigned> &order, unsigned S) {
  std::vector<std::vector<unsigned>> groups;
  size_t width = order.size() / S;
  for (unsigned j = 0; j < S; ++j)
    groups.emplace_back(order.begin() + width * j, order.begin() + width * (j + 1));
  return groups;
}

static PartitionPlan planUniform(const PlanContext &ctx) {
  unsigned N = ctx.cluster.size(), B = ctx.numBlocks();
  std::vector<unsigned> order(N);
  for (unsigned i = 0; i < N; ++i)
    order[i] = i;
  PartitionPlan best;
  bool any = false;
  for (unsigned S = 1; S <= std::min(N, B); ++S) {
    if (N % S)
      continue; // an even split of all devices
    PartitionPlan plan =
        bestOverMicroBatches(ctx, equalBlocks(B, evenGroups(order, S)));
    if (better(plan, best, any)) {
      best = std::move(plan);
      any = true;
    }
  }
  return best;
}

/// The cluster as PipeDream sees it: one device type, one link.
static ClusterModel homogenize(const ClusterModel &cluster) {
  ClusterModel flat = cluster;
  double capacity = 0;
  for (const Device &d : flat.devices)
    capacity += cluster.typeOf(&d - flat.devices.data()).memCapacity;
  DeviceType mean = cluster.types[0];
  mean.name = "mean";
  mean.memCapacity = capacity / flat.devices.size();
  flat.types.assign(1, mean);
  for (Device &d : flat.devices) {
    d.type = 0;
    d.speedClass = 0;
    d.profile = DeviceProfile();
  }
  flat.classRepresentative.assign(1, 0);
  // Mean bandwidth and latency over (a sample of) device pairs.
  unsigned n = cluster.size();
  double bw = 0, lat = 0, pairs = 0;
  unsigned stride = std::max(1u, n / 64);
  for (unsigned a = 0; a < n; a += stride)
    for (unsigned b = 0; b < n; ++b)
      if (a != b) {
        bw += cluster.bandwidth(a, b);
        lat += cluster.latency(a, b);
        pairs += 1;
      }
  Link link;
  link.bandwidth = pairs ? bw / pairs : 1e12;
  link.latency = pairs ? lat / pairs : 0;
  link.origin = "mean link";
  flat.links.assign(1, link);
  Link self;
  self.bandwidth = 1e30;
  self.origin = "self";
  flat.links.push_back(self);
  for (unsigned a = 0; a < n; ++a)
    for (unsigned b = 0; b < n; ++b)
      flat.linkIds[size_t(a) * n + b] = a == b ? 1 : 0;
  return flat;
}

/// Block times at the cluster's mean speed (harmonic mean of the classes).
static CoarseGraph homogenizeGraph(const CoarseGraph &graph,
                                   const ClusterModel &cluster) {
  CoarseGraph flat = graph;
  unsigned B = graph.blocks.size();
  auto meanTimes = [&](const std::vector<std::vector<double>> &times) {
    std::vector<double> out(B, 0);
    for (unsigned b = 0; b < B; ++b) {
      double rate = 0;
      for (const Device &d : cluster.devices)
        rate += times[d.speedClass][b] > 0 ? 1 / times[d.speedClass][b] : 0;
      out[b] = rate > 0 ? cluster.size() / rate : 0;
    }
    return out;
  };
  flat.fwdTime.assign(1, meanTimes(graph.fwdTime));
  flat.bwdTime.assign(1, meanTimes(graph.bwdTime));
  return flat;
}

static PartitionPlan planPipeDream(const PlanContext &ctx) {
  ClusterModel flatCluster = homogenize(ctx.cluster);
  CoarseGraph flatGraph = homogenizeGraph(ctx.graph, ctx.cluster);
  PlanContext flat(flatGraph, flatCluster, ctx.options);
  unsigned N = ctx.cluster.size();
  std::vector<unsigned> order(N);
  for (unsigned i = 0; i < N; ++i)
    order[i] = i;
  PartitionPlan bestFlat;
  bool any = false;
  for (unsigned d = 1; d <= N; d *= 2) {
    // Replication d: chunks of exactly d devices (the last N mod d idle).
    std::vector<unsigned> used(order.begin(), order.begin() + N / d * d);
    PartitionPlan plan = bestOverChunks(flat, evenGroups(used, N / d), 1);
    if (plan.feasible && better(plan, bestFlat, any)) {
      bestFlat = std::move(plan);
      any = true;
    }
  }
  if (!any)
    return bestOverMicroBatches(ctx, equalBlocks(ctx.numBlocks(), {order}));
  std::vector<StageAssignment> stages;
  for (const StagePlan &s : bestFlat.stages)
    stages.push_back({s.firstBlock, s.endBlock, s.devices});
  return bestOverMicroBatches(ctx, stages);
}

/// Swap local search over device-to-group assignment at fixed M/schedule.
static void localSearch(const PlanContext &ctx,
                        std::vector<std::vector<unsigned>> &groups,
                        unsigned M, Schedule schedule, std::mt19937_64 &rng) {
  unsigned B = ctx.numBlocks(), S = groups.size();
  if (S < 2)
    return;
  double cost = evaluateWith(ctx, equalBlocks(B, groups), M, schedule)
                    .iterationTime;
  unsigned iterations = ctx.options.searchIterations / 8;
  for (unsigned it = 0; it < iterations; ++it) {
    unsigned ga = rng() % S, gb = rng() % S;
    if (ga == gb)
      continue;
    unsigned ia = rng() % groups[ga].size(), ib = rng() % groups[gb].size();
    std::swap(groups[ga][ia], groups[gb][ib]);
    PartitionPlan plan = evaluateWith(ctx, equalBlocks(B, groups), M, schedule);
    if (plan.feasible && plan.iterationTime < cost)
      cost = plan.iterationTime;
    else
      std::swap(groups[ga][ia], groups[gb][ib]);
  }
}

static PartitionPlan planDTFM(const PlanContext &ctx,
                              const DeviceGrouping &grouping) {
  unsigned N = ctx.cluster.size(), B = ctx.numBlocks();
  std::mt19937_64 rng(ctx.options.seed);
  PartitionPlan best;
  bool any = false;
  for (unsigned S = 1; S <= std::min(N, B); ++S) {
    if (N % S)
      continue; // DT-FM uses equal data-parallel groups
    auto groups = evenGroups(grouping.order, S);
    std::vector<unsigned> path = orderIslands(ctx.cluster, groups);
    std::vector<std::vector<unsigned>> ordered;
    for (unsigned g : path)
      ordered.push_back(groups[g]);
    PartitionPlan plan = bestOverMicroBatches(ctx, equalBlocks(B, ordered));
    localSearch(ctx, ordered, plan.microBatches, plan.schedule, rng);
    plan = bestOverMicroBatches(ctx, equalBlocks(B, ordered));
    if (better(plan, best, any)) {
      best = std::move(plan);
      any = true;
    }
  }
  return best;
}

PartitionPlan detail::planBaseline(const PlanContext &ctx,
                                   const DeviceGrouping &grouping) {
  switch (ctx.options.strategy) {
  case PlannerStrategy::Uniform:
    return planUniform(ctx);
  case PlannerStrategy::PipeDream:
    return planPipeDream(ctx);
  case PlannerStrategy::DTFM:
    return planDTFM(ctx, grouping);
  case PlannerStrategy::Strait:
    break;
  }
  return PartitionPlan();
}
