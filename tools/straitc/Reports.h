//===- Reports.h - straitc's reports on the compiled job -------*- C++ -*-===//
//
// What straitc prints (and writes to plan.json) about a plan's codecs and a
// job's local steps, apart from the driver's flags.
//
//===----------------------------------------------------------------------===//

#ifndef STRAITC_REPORTS_H
#define STRAITC_REPORTS_H

#include "strait/Analysis/Compression.h"
#include "strait/Analysis/Partitioner.h"
#include "strait/Analysis/PlanReport.h"
#include "strait/Dialect/Dist/StagePlan.h"
#include "strait/Analysis/Simulator.h"
#include "strait/Dialect/Dist/DistOps.h"

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/raw_ostream.h"

#include <optional>
#include <string>
#include <vector>

namespace straitc {

/// The codec flags as straitc was given them.
struct CompressionFlags {
  std::string mode = "none";      ///< --compress
  std::vector<std::string> links; ///< --compress-link, as written
  unsigned localSteps = 1;        ///< --local-steps
  bool gradientTopK = true;       ///< whether auto may pick top-k for weight gradients
  int64_t compressedAdam = 0;     ///< --compressed-adam N: exact (or warm-up codec) steps
  std::string warmupCodec = "none"; ///< --compressed-adam-warmup
  int64_t totalSteps = 0;         ///< --total-steps (0: unknown), for the whole-run figure
  bool lossScaling = false;       ///< loss scaling keeps error-feedback residuals twice
  /// The codecs as chosen already (CompressionOptions::codecs): only timed.
  const strait::PlanCompression *codecs = nullptr;
};

/// The codecs the flags give `plan` on `cluster` (compressPlan).
llvm::Expected<strait::PlanCompression> chooseCodecs(const CompressionFlags &flags,
                                                     const strait::PartitionPlan &plan,
                                                     const strait::ClusterModel &cluster);

/// With a codec flag: the codec per link of the plan, and the simulated
/// iteration time without and with them (text to `os`, JSON into `json`'s
/// "compression"). Without: only `predicted` / `timeline` of the plain plan.
mlir::LogicalResult
reportCompression(const CompressionFlags &flags, const strait::PartitionPlan &plan,
                  const strait::ClusterModel &cluster, llvm::raw_ostream &os,
                  llvm::json::Value *json, bool perLink = true, double *predicted = nullptr,
                  std::optional<strait::SimulationResult> *timeline = nullptr);

/// --evaluate-plan DIR: DIR's plan (plan.json) on `sopts.clusterFile`, and
/// the codecs the flags gave it on the cluster it was planned for
/// (DIR/cluster.yaml), to be timed on this one.
struct EvaluatedPlan {
  strait::ModelPlan plan;
  std::optional<strait::PlanCompression> codecs; // none without codec flags
};
llvm::Expected<EvaluatedPlan> evaluateJobPlan(mlir::func::FuncOp main,
                                              const strait::dist::StagePlanOptions &sopts,
                                              const std::string &dir,
                                              const CompressionFlags &flags);

/// Per stage of the compiled job: the error-feedback residual bytes each of
/// its ranks keeps (strait::allReduceResidualBytes of every compressed
/// gradient all-reduce with feedback, the value's bytes for a tied
/// exchange; twice under loss scaling), for straitc.json.
std::vector<double> errorFeedbackBytes(mlir::ModuleOp module, strait::dist::PlanAttr plan,
                                       bool lossScaling);

/// One line per compressed link of the compiled job.
void printJobCompression(mlir::ModuleOp module, llvm::raw_ostream &os);

/// --local-steps H > 1: which stages synchronize every H steps.
void reportLocalSteps(mlir::ModuleOp module, strait::dist::PlanAttr plan, int64_t localSteps,
                      double outerLr, double outerMomentum);

} // namespace straitc

#endif // STRAITC_REPORTS_H
