//===- Pipelines.h - The pass pipeline straitc runs -------------*- C++ -*-===//
//
// The one ordered pipeline from an imported graph to per-stage functions.
// straitc builds it with buildStraitPipeline; `strait-opt
// --strait-pipeline='cluster=... num-stages=...'` runs the same passes.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_PIPELINES_PIPELINES_H
#define STRAIT_PIPELINES_PIPELINES_H

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace strait {

struct StraitPipelineOptions : public mlir::PassPipelineOptions<StraitPipelineOptions> {
  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("build a training step with this loss "
                                          "(cross-entropy, mse, output); empty: forward only"),
                           llvm::cl::init("")};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("training step optimizer: sgd, adamw, none"),
                                llvm::cl::init("sgd")};
  Option<std::string> cluster{*this, "cluster",
                              llvm::cl::desc("cluster file (YAML)"), llvm::cl::init("")};
  Option<std::string> strategy{*this, "strategy",
                               llvm::cl::desc("planner: strait, uniform, pipedream, dtfm"),
                               llvm::cl::init("strait")};
  Option<double> globalBatch{*this, "global-batch",
                             llvm::cl::desc("samples per iteration (0: the input's batch)"),
                             llvm::cl::init(0)};
  Option<int64_t> numStages{*this, "num-stages",
                            llvm::cl::desc("force this many equal stages (0: planner)"),
                            llvm::cl::init(0)};
  ListOption<int64_t> boundaries{*this, "boundaries",
                                 llvm::cl::desc("explicit plan: first cost node of stages 1..")};
  ListOption<int64_t> replicas{*this, "replicas",
                               llvm::cl::desc("explicit plan: replicas per stage")};
  Option<int64_t> microBatches{*this, "micro-batches",
                               llvm::cl::desc("micro-batches (with a cluster: imposed when > 1)"),
                               llvm::cl::init(1)};
};

/// [graph-build-training-step] -> dist-assign-stages -> dist-insert-comm ->
/// dist-split-stages.
void buildStraitPipeline(mlir::OpPassManager &pm, const StraitPipelineOptions &options);

/// Registers `strait-pipeline` with the global pass registry.
void registerStraitPipeline();

} // namespace strait

#endif // STRAIT_PIPELINES_PIPELINES_H
