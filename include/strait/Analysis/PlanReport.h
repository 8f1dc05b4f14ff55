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
  /// Distinct kernel signatures of the cost graph, and how many of them the
  /// cluster's `kernel_times` hold (the fewest over the devices that have
  /// kernel times; 0 and 0 when none has).
  unsigned kernels = 0, kernelsMeasured = 0;
};

/// Counts the cost graph's kernel signatures found in the devices'
/// `kernel_times`. An error when a device has kernel times but none of
/// them is a kernel of this graph: they were measured for another model,
/// shapes or dtype.
llvm::Error matchKernelTimes(ModelPlan &mp, const ClusterModel &cluster);

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
