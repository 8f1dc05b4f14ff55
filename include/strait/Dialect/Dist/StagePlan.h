//===- StagePlan.h - The stage plan dist-assign-stages applies --*- C++ -*-===//
//
// A pure analysis: which stage every cost node (computational op) of a
// function belongs to and which devices/ranks each stage runs on, from the
// planner, a forced number of equal stages, or explicit boundaries. The pass
// applies it; straitc prints its report.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_DIST_STAGEPLAN_H
#define STRAIT_DIALECT_DIST_STAGEPLAN_H

#include "strait/Analysis/PlanReport.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/JSON.h"

#include <optional>
#include <string>
#include <vector>

namespace strait::dist {

struct StagePlanOptions {
  std::string clusterFile;   ///< empty: `boundaries` gives the plan
  std::string strategy = "strait";
  double globalBatch = 0;
  int64_t numStages = 0;     ///< > 0: equal blocks over equal device chunks
  std::vector<int64_t> boundaries; ///< first cost node of stages 1, 2, ...
  std::vector<int64_t> replicas;   ///< replicas per stage (explicit plan)
  /// Micro-batches per iteration: the explicit plan's; with a cluster, a
  /// count > 1 is imposed on the planner (1: the planner chooses).
  int64_t microBatches = 1;
  /// "auto" (with a cluster: the planner's choice; else 1F1B), "gpipe" or
  /// "1f1b".
  std::string schedule = "auto";
  /// The gradient all-reduces' bucket size (ClusterModel::allReduceBucketBytes).
  double allReduceBucketBytes = 256.0 * 1048576;
  /// Local steps (PlannerOptions::localSteps).
  int64_t localSteps = 1;
  /// "none", "auto" or "full" (PlannerOptions::recompute).
  std::string recompute = "none";
};

struct StagePlanResult {
  struct Stage {
    std::vector<std::string> devices; ///< one per replica
    std::vector<int64_t> ranks;       ///< ranks numbered stage by stage
  };
  /// ops[n] is cost node n; stageOfNode[n] its stage.
  std::vector<mlir::Operation *> ops;
  std::vector<unsigned> stageOfNode;
  std::vector<Stage> stages;
  bool oneFOneB = true;
  int64_t microBatches = 1;
  /// Human-readable plan and its JSON (planner figures when a cluster is used).
  std::string text;
  llvm::json::Value json = nullptr;
  /// The planner's plan (with a cluster; empty for an explicit plan).
  std::optional<PartitionPlan> plan;
  /// 1F1B warm-up forwards per stage the planner costed (its in-flight
  /// micro-batches - 1: enough to cover a micro-batch's round trip through
  /// the rest of the pipeline); empty without a planner or under GPipe.
  std::vector<int64_t> warmup;
  /// Per stage: its blocks are recomputed in the backward.
  std::vector<bool> recompute;
};

/// Computes the plan of `func`. Errors (bad cluster file, infeasible plan,
/// boundaries out of range) are returned, not asserted.
llvm::Expected<StagePlanResult> computeStagePlan(mlir::func::FuncOp func,
                                                 const StagePlanOptions &options);

/// The plan of a job's plan.json (straitc --evaluate-plan): its stages'
/// block ranges and devices, its micro-batches, schedule and global batch,
/// evaluated on `options.clusterFile` by the planner's cost model, for the
/// function the job was compiled from (the same model and flags: its stages
/// must hold the op counts the file records). Errors name the file and the
/// field, a device the cluster lacks, or the stage whose ops differ.
llvm::Expected<ModelPlan> evaluatePlanFile(mlir::func::FuncOp func,
                                           const StagePlanOptions &options,
                                           llvm::StringRef planFile);

} // namespace strait::dist

#endif // STRAIT_DIALECT_DIST_STAGEPLAN_H
