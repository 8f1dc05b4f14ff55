//===- PlanReport.cpp - Plans of real models, as text and JSON ------------===//

#include "strait/Analysis/PlanReport.h"
#include "strait/Analysis/Workload.h"

#include "llvm/ADT/StringSet.h"

#include <map>

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
  if (llvm::Error err = matchKernelTimes(out, cluster))
    return std::move(err);
  llvm::Expected<CoarseGraph> coarse = coarsenGraph(out.costs.graph, cluster, maxBlocks);
  if (!coarse)
    return coarse.takeError();
  out.coarse = std::move(*coarse);
  return out;
}

llvm::Error strait::matchKernelTimes(ModelPlan &mp, const ClusterModel &cluster) {
  llvm::StringSet<> keys;
  for (const CostNode &n : mp.costs.graph.nodes) {
    if (!n.kernel.empty())
      keys.insert(n.kernel);
    for (const std::vector<CostTerm> *terms : {&n.bwdTerms, &n.updateTerms})
      for (const CostTerm &t : *terms)
        if (!t.kernel.empty())
          keys.insert(t.kernel);
  }
  mp.kernels = keys.size();
  mp.kernelsMeasured = 0;
  bool any = false;
  for (unsigned c = 0; c < cluster.numSpeedClasses(); ++c) {
    const Device &dev = cluster.devices[cluster.classRepresentative[c]];
    const auto &times = dev.profile.kernelTimes;
    if (!times || times->empty())
      continue;
    unsigned found = llvm::count_if(keys, [&](const auto &k) { return times->count(k.getKey()); });
    if (found == 0 && !keys.empty())
      return llvm::createStringError(
          "the kernel_times of device '" + dev.name + "' (" + std::to_string(times->size()) +
          " kernels) hold none of the " + std::to_string(keys.size()) +
          " kernels of the model being planned: they were measured for another model, "
          "shapes or dtype; "
          "list this job's kernels with straitc --emit=kernels and time them with "
          "strait-probe --kernels");
    mp.kernelsMeasured = any ? std::min(mp.kernelsMeasured, found) : found;
    any = true;
  }
  return llvm::Error::success();
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

/// Seconds per iteration of the stage's ops, by op kind and by op type
/// (the forward op's, each backward and optimizer op's own): its forward
/// and backward time (all micro-batches) split in proportion to each op's
/// time on the stage's first device, plus the optimizer step. What
/// `strait-run --profile` measures per op type (with --fuse=none, op for
/// op), in the planner's terms.
static std::pair<json::Object, json::Object> stageTimeBy(const ModelPlan &mp,
                                                         const ClusterModel &cluster,
                                                         const StagePlan &s,
                                                         unsigned microBatches) {
  std::array<double, kNumOpKinds> pass{}, update{};
  std::map<std::string, double> passOp, updateOp;
  double total = 0;
  unsigned dev = s.devices.empty() ? 0 : s.devices.front();
  auto opOf = [](const std::string &op, OpKind kind) {
    return op.empty() ? stringifyOpKind(kind).str() : op;
  };
  for (unsigned b = s.firstBlock; b < s.endBlock && b < mp.coarse.blocks.size(); ++b)
    for (unsigned v : mp.coarse.blocks[b].nodes) {
      const CostNode &n = mp.costs.graph.nodes[v];
      double fwd = nodeTime(n, cluster, dev, false), bwd = nodeTime(n, cluster, dev, true);
      pass[unsigned(n.kind)] += fwd + bwd;
      total += fwd + bwd;
      passOp[opOf(n.op, n.kind)] += fwd;
      if (n.bwdTerms.empty())
        passOp[opOf(n.op, n.kind) + " (backward)"] += bwd;
      for (const CostTerm &term : n.bwdTerms)
        passOp[opOf(term.op, term.kind)] += termTime(term, cluster, dev);
      for (const CostTerm &term : n.updateTerms) {
        double t = termTime(term, cluster, dev);
        update[unsigned(term.kind)] += t;
        updateOp[opOf(term.op, term.kind)] += t;
      }
    }
  double scale = total > 0 ? (s.fwdTime + s.bwdTime) * microBatches / total : 0;
  json::Object byKind, byOp;
  for (unsigned k = 0; k < kNumOpKinds; ++k)
    if (pass[k] > 0 || update[k] > 0)
      byKind[stringifyOpKind(OpKind(k))] = pass[k] * scale + update[k];
  for (auto &[op, t] : passOp)
    updateOp[op] += t * scale;
  for (auto &[op, t] : updateOp)
    if (t > 0)
      byOp[op] = t;
  return {std::move(byKind), std::move(byOp)};
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
    auto [byKind, byOp] = stageTimeBy(mp, cluster, s, p.microBatches);
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
        {"grad_bytes", s.gradBytes},
        {"allreduce_s", s.allReduceTime},
        {"update_s", s.updateTime},
        {"time_by_kind_s", std::move(byKind)},
        {"time_by_op_s", std::move(byOp)},
        {"send_bytes", s.sendBytes},
        {"send_s", s.sendTime},
        {"peak_memory_bytes", s.peakMemory},
        {"in_flight", (int64_t)s.inFlight},
        {"recompute", s.recompute},
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
      {"one_iteration_s", p.oneIterationTime},
      {"bubble_fraction", p.bubbleFraction},
      {"throughput_samples_per_s", p.throughput},
      {"planning_s", p.planningSeconds},
      {"kernels", (int64_t)mp.kernels},
      {"kernels_measured", (int64_t)mp.kernelsMeasured},
      {"stages", std::move(stages)},
  };
}
