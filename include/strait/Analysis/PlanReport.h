//===- PlanReport.h - Plans of real models, as text and JSON ----*- C++ -*-===//

#ifndef STRAIT_ANALYSIS_PLANREPORT_H
#define STRAIT_ANALYSIS_PLANREPORT_H

#include "strait/Analysis/IRCostGraph.h"
#include "strait/Analysis/Partitioner.h"

#include "llvm/Support/JSON.h"

namespace strait {

/// A plan of a function with what is needed to apply it: which cost nodes
/// (and so which ops) each stage holds.
struct ModelPlan {
  IRCostGraph costs;
  CoarseGraph coarse;
  PartitionPlan plan;
  /// stageOfNode[n]: the stage cost node n belongs to.
  std::vector<unsigned> stageOfNode;
};

/// The cost graph of `func` coarsened for `cluster`; the plan is left empty.
llvm::Expected<ModelPlan> prepareModelPlan(mlir::func::FuncOp func,
                                           const ClusterModel &cluster,
                                           unsigned maxBlocks);

/// Fills `mp.stageOfNode` from the plan's stages (block ranges).
void assignNodeStages(ModelPlan &mp);

/// Builds the cost graph of `func`, coarsens it and plans it on `cluster`.
llvm::Expected<ModelPlan> planFunction(mlir::func::FuncOp func,
                                       const ClusterModel &cluster,
                                       const PlannerOptions &options);

/// The plan as JSON: strategy, schedule, micro-batches, predicted iteration
/// time and throughput, and per stage its devices, op count, compute,
/// transfer (bytes, link), all-reduce and memory.
llvm::json::Value planToJSON(const ModelPlan &plan, const ClusterModel &cluster);

} // namespace strait

#endif // STRAIT_ANALYSIS_PLANREPORT_H
