//===- Pipelines.cpp - The pass pipeline straitc runs ---------------------===//

#include "strait/Pipelines/Pipelines.h"

#include "strait/Dialect/Dist/DistPasses.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void strait::buildStraitPipeline(OpPassManager &pm, const StraitPipelineOptions &o) {
  if (!o.loss.empty()) {
    graph::GraphBuildTrainingStepOptions train;
    train.loss = o.loss;
    train.optimizer = o.optimizer;
    pm.addPass(graph::createGraphBuildTrainingStep(train));
  }
  dist::DistAssignStagesOptions assign;
  assign.cluster = o.cluster;
  assign.strategy = o.strategy;
  assign.globalBatch = o.globalBatch;
  assign.numStages = o.numStages;
  // The options struct holds list options as ArrayRefs; the pass copies them.
  std::vector<int64_t> boundaries(o.boundaries.begin(), o.boundaries.end());
  std::vector<int64_t> replicas(o.replicas.begin(), o.replicas.end());
  assign.boundaries = boundaries;
  assign.replicas = replicas;
  assign.microBatches = o.microBatches;
  pm.addPass(dist::createDistAssignStages(assign));
  pm.addPass(dist::createDistInsertComm());
  pm.addPass(dist::createDistSplitStages());
}

void strait::registerStraitPipeline() {
  PassPipelineRegistration<StraitPipelineOptions>(
      "strait-pipeline",
      "What straitc runs: assign stages, insert communication, split stages",
      buildStraitPipeline);
}
