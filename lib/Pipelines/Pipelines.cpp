//===- Pipelines.cpp - The pass pipeline straitc runs ---------------------===//

#include "strait/Pipelines/Pipelines.h"

#include "strait/Dialect/Dist/DistPasses.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/Pass/PassRegistry.h"

using namespace mlir;

void strait::addForwardFusionPasses(OpPassManager &pm, bool fuseRmsNorm, bool fuseAttention,
                                    bool foldTransposes, bool fuseRotary,
                                    llvm::StringRef moeExperts) {
  // On the forward graph, so that autodiff sees one RMSNormalization (and
  // builds one RMSNormalizationGrad) per decomposed RMSNorm, and one
  // FusedAttention (one FusedAttentionGrad) per attention block; before
  // autocast, which casts FusedAttention's Q, Kt and V like a MatMul's.
  if (fuseRmsNorm)
    pm.addNestedPass<func::FuncOp>(graph::createGraphFuseRMSNorm());
  if (fuseRotary)
    pm.addNestedPass<func::FuncOp>(graph::createGraphFuseRotary());
  if (fuseAttention)
    pm.addNestedPass<func::FuncOp>(graph::createGraphFuseAttention());
  // Mixture-of-experts products of gathered expert weights become routed
  // GroupedMatMuls, or one product of all experts and a selection (no
  // per-token weight copies either way); before graph-fold-transposes, which
  // folds the latter's Transposes into the products.
  if (moeExperts != "gathered") {
    graph::GraphRewriteExpertMatMulsOptions experts;
    experts.mode = moeExperts.str();
    pm.addNestedPass<func::FuncOp>(graph::createGraphRewriteExpertMatMuls(experts));
  }
  // After the attention fusion (whose ops take the heads' Transposes), before
  // autodiff (which adds a Transpose to the backward per forward Transpose).
  if (foldTransposes)
    pm.addNestedPass<func::FuncOp>(graph::createGraphFoldTransposes());
}

void strait::addTrainingStepPasses(OpPassManager &pm, const StraitPipelineOptions &o) {
  // LoRA first, while linear layers still read their weights as
  // MatMul(x, W), MatMul(x, Transpose(W)) or Gemm(x, W): the fusions and
  // graph-fold-transposes then see the adapted products. --trainable names
  // the base variables that stay trainable besides the adapters.
  bool lora = !o.loss.empty() && o.lora > 0;
  if (lora) {
    graph::GraphAddLoraOptions adapters;
    adapters.rank = o.lora;
    adapters.alpha = o.loraAlpha;
    adapters.seed = o.loraSeed;
    adapters.dropout = o.loraDropout;
    std::vector<std::string> targets(o.loraTargets.begin(), o.loraTargets.end());
    std::vector<std::string> keep(o.trainable.begin(), o.trainable.end());
    adapters.targets = targets;
    adapters.trainable = keep;
    pm.addPass(graph::createGraphAddLora(adapters));
  }
  addForwardFusionPasses(pm, o.fuseRmsNorm, o.fuseAttention, o.foldTransposes, o.fuseRotary,
                         o.moeExperts);
  // Mixed precision rewrites the forward graph, so that autodiff
  // differentiates through the casts; "f32" leaves the graph unchanged.
  if (o.precision != "f32") {
    graph::GraphAutocastOptions autocast;
    autocast.precision = o.precision;
    pm.addPass(graph::createGraphAutocast(autocast));
  }
  if (!o.loss.empty()) {
    graph::GraphBuildTrainingStepOptions train;
    train.loss = o.loss;
    train.optimizer = o.optimizer;
    train.output = o.output;
    train.labelName = o.label;
    train.ignoreIndex = o.ignoreIndex;
    train.returnGradients = o.returnGradients;
    train.stepOutputs = o.stepOutputs;
    train.padClasses = o.padClasses;
    train.padClassesMinWork = o.padClassesMinWork;
    train.lr = o.lr;
    train.momentum = o.momentum;
    train.nesterov = o.nesterov;
    train.beta1 = o.beta1;
    train.beta2 = o.beta2;
    train.epsilon = o.eps;
    train.freezeVarianceAfter = o.compressedAdam;
    train.weightDecay = o.weightDecay;
    train.clipNorm = o.clipNorm;
    train.lossScale = o.lossScale;
    train.lossScaleInit = o.lossScaleInit;
    train.lossScaleGrowth = o.lossScaleGrowth;
    train.lossScaleBackoff = o.lossScaleBackoff;
    train.lossScaleInterval = o.lossScaleInterval;
    train.warmupSteps = o.warmupSteps;
    train.totalSteps = o.totalSteps;
    train.minLr = o.minLr;
    // Micro-batches are the plan's (dist-assign-stages): the exporter sets
    // each AccumulateGrad's count. The options struct holds lists as
    // ArrayRefs; the pass copies them.
    // With LoRA the adapters and --trainable's variables are the unfrozen ones.
    std::vector<std::string> trainable;
    if (!lora)
      trainable.assign(o.trainable.begin(), o.trainable.end());
    std::vector<std::string> frozen(o.frozen.begin(), o.frozen.end());
    train.trainable = trainable;
    train.frozen = frozen;
    pm.addPass(graph::createGraphBuildTrainingStep(train));
  }
  // After autodiff (the rewrites are exact on the whole step, and merged
  // casts would otherwise sum gradients in bf16), before the planner, so
  // that stages and transfers see the 16-bit layout ops.
  if (o.precision != "f32" && o.castMotion)
    pm.addNestedPass<func::FuncOp>(graph::createGraphCastMotion());
  // After cast motion (whose rule 8 gives the loss gradient the 16-bit
  // logits' type), before the planner and rematerialization: one
  // SoftmaxCrossEntropyLossWithGrad reads the logits once, in the forward.
  if (!o.loss.empty() && o.fuseLossGrad)
    pm.addNestedPass<func::FuncOp>(graph::createGraphFuseLossGrad());
  // Before the planner, so that it counts the values the backward keeps
  // after recomputation; only when graph-fuse-elementwise will fuse the
  // clones into the backward groups (unfused, they would be extra kernels).
  if (!o.loss.empty() && o.fuse == FuseMode::Elementwise && o.rematerialize)
    pm.addNestedPass<func::FuncOp>(graph::createGraphRematerialize());
}

void strait::buildStraitPipeline(OpPassManager &pm, const StraitPipelineOptions &o) {
  addTrainingStepPasses(pm, o);
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
  assign.schedule = o.schedule;
  assign.allReduceBucketMib = o.allReduceBucketMib;
  assign.localSteps = o.localSteps;
  // The planner's choice of recomputing stages is applied by the pass, on
  // the stage-assigned step (graph-recompute-blocks' transformation).
  assign.recompute = o.recompute;
  pm.addPass(dist::createDistAssignStages(assign));
  dist::DistInsertCommOptions comm;
  comm.cluster = o.cluster;
  comm.localSteps = o.localSteps;
  pm.addPass(dist::createDistInsertComm(comm));
  // Before compression, which then picks one codec per bucket.
  dist::DistBucketAllReducesOptions buckets;
  buckets.bucketMib = o.allReduceBucketMib;
  pm.addPass(dist::createDistBucketAllReduces(buckets));
  dist::DistInsertCompressionOptions compression;
  compression.cluster = o.cluster;
  compression.compress = o.compress;
  std::vector<std::string> links(o.compressLink.begin(), o.compressLink.end());
  compression.compressLink = links;
  compression.allReduceBucketMib = o.allReduceBucketMib;
  compression.adaptiveTopk = o.adaptiveTopk;
  compression.localSteps = o.localSteps;
  compression.warmupCodec = o.compressedAdamWarmup;
  pm.addPass(dist::createDistInsertCompression(compression));
  pm.addPass(dist::createDistSplitStages());
  if (o.fuse == FuseMode::Elementwise)
    pm.addNestedPass<func::FuncOp>(graph::createGraphFuseElementwise());
}

void strait::registerStraitPipeline() {
  PassPipelineRegistration<StraitPipelineOptions>(
      "strait-pipeline",
      "What straitc runs: assign stages, insert communication and compression, "
      "split stages",
      buildStraitPipeline);
}
