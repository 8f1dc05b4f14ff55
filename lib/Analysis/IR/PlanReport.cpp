//===- PlanReport.cpp - Plans of real models, as text and JSON ------------===//

#include "strait/Analysis/PlanReport.h"
#include "strait/Analysis/Workload.h"

using namespace strait;
namespace json = llvm::json;

llvm::Expected<ModelPlan> strait::prepareModelPlan(mlir::func::FuncOp func,
                                                   const ClusterModel &cluster,
                                                   unsigned maxBlocks) {
  llvm::Expected<IRCostGraph> costs = buildCostGraph(func);
  if (!costs)
    return costs.takeError();
  ModelPlan out;
  out.costs = std::move(*costs);
  llvm::Expected<CoarseGraph> coarse = coarsenGraph(out.costs.graph, cluster, maxBlocks);
  if (!coarse)
    return coarse.takeError();
  out.coarse = std::move(*coarse);
  return out;
}

void strait::assignNodeStages(ModelPlan &mp) {
  mp.stageOfNode.assign(mp.costs.graph.nodes.size(), 0);
  for (auto [s, stage] : llvm::enumerate(mp.plan.stages))
    for (unsigned b = stage.firstBlock; b < stage.endBlock && b < mp.coarse.blocks.size(); ++b)
      for (unsigned n : mp.coarse.blocks[b].nodes)
        mp.stageOfNode[n] = s;
}

llvm::Expected<ModelPlan> strait::planFunction(mlir::func::FuncOp func,
                                               const ClusterModel &cluster,
                                               const PlannerOptions &options) {
  llvm::Expected<ModelPlan> out = prepareModelPlan(func, cluster, options.maxBlocks);
  if (!out)
    return out.takeError();
  llvm::Expected<PartitionPlan> plan = planPartition(out->costs.graph, cluster, options);
  if (!plan)
    return plan.takeError();
  out->plan = std::move(*plan);
  assignNodeStages(*out);
  return out;
}

/// Seconds per iteration of the stage's ops by op kind: its forward and
/// backward time (all micro-batches) split in proportion to each kind's
/// share on the stage's first device, plus the optimizer step. What
/// `strait-run --profile` measures per op type, in the planner's terms.
static json::Object timeByKind(const ModelPlan &mp, const ClusterModel &cluster,
                               const StagePlan &s, unsigned microBatches) {
  std::array<double, kNumOpKinds> pass{}, update{};
  double total = 0;
  unsigned dev = s.devices.empty() ? 0 : s.devices.front();
  for (unsigned b = s.firstBlock; b < s.endBlock && b < mp.coarse.blocks.size(); ++b)
    for (unsigned v : mp.coarse.blocks[b].nodes) {
      const CostNode &n = mp.costs.graph.nodes[v];
      double t = nodeTime(n, cluster, dev, false) + nodeTime(n, cluster, dev, true);
      pass[unsigned(n.kind)] += t;
      total += t;
      for (const CostTerm &term : n.updateTerms)
        update[unsigned(term.kind)] += termTime(term, cluster, dev);
    }
  double scale = total > 0 ? (s.fwdTime + s.bwdTime) * microBatches / total : 0;
  json::Object out;
  for (unsigned k = 0; k < kNumOpKinds; ++k)
    if (pass[k] > 0 || update[k] > 0)
      out[stringifyOpKind(OpKind(k))] = pass[k] * scale + update[k];
  return out;
}

json::Value strait::planToJSON(const ModelPlan &mp, const ClusterModel &cluster) {
  const PartitionPlan &p = mp.plan;
  json::Array stages;
  std::vector<unsigned> opsPerStage(p.stages.size(), 0);
  for (unsigned s : mp.stageOfNode)
    if (s < opsPerStage.size())
      ++opsPerStage[s];
  for (auto [i, s] : llvm::enumerate(p.stages)) {
    json::Array devices;
    for (unsigned d : s.devices)
      devices.push_back(cluster.devices[d].name);
    json::Object stage{
        {"stage", (int64_t)i},
        {"devices", std::move(devices)},
        {"blocks", json::Array{(int64_t)s.firstBlock, (int64_t)s.endBlock}},
        {"ops", (int64_t)opsPerStage[i]},
        {"forward_s", s.fwdTime},
        {"backward_s", s.bwdTime},
        {"param_bytes", s.paramBytes},
        {"allreduce_s", s.allReduceTime},
        {"update_s", s.updateTime},
        {"time_by_kind_s", timeByKind(mp, cluster, s, p.microBatches)},
        {"send_bytes", s.sendBytes},
        {"send_s", s.sendTime},
        {"peak_memory_bytes", s.peakMemory},
        {"in_flight", (int64_t)s.inFlight},
        {"capacity_bytes", s.capacity},
    };
    if (i + 1 < p.stages.size())
      stage["link"] = cluster.links[s.sendLink].origin;
    stages.push_back(std::move(stage));
  }
  return json::Object{
      {"model", mp.costs.graph.name},
      {"cluster", cluster.name},
      {"strategy", stringifyStrategy(p.strategy)},
      {"feasible", p.feasible},
      {"message", p.message},
      {"schedule", stringifySchedule(p.schedule)},
      {"micro_batches", (int64_t)p.microBatches},
      {"global_batch", p.globalBatch},
      {"iteration_s", p.iterationTime},
      {"bubble_fraction", p.bubbleFraction},
      {"throughput_samples_per_s", p.throughput},
      {"planning_s", p.planningSeconds},
      {"stages", std::move(stages)},
  };
}
