//===- Pipelines.h - The pass pipeline straitc runs -------------*- C++ -*-===//
//
// The one ordered pipeline from an imported graph to per-stage functions.
// straitc builds it with buildStraitPipeline; `strait-opt
// --strait-pipeline='cluster=... num-stages=...'` runs the same passes.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_PIPELINES_PIPELINES_H
#define STRAIT_PIPELINES_PIPELINES_H

#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Pass/PassManager.h"
#include "mlir/Pass/PassOptions.h"

#include <string>

namespace strait {

/// What the pipeline fuses after the stage split.
enum class FuseMode { Elementwise, None };

struct StraitPipelineOptions : public mlir::PassPipelineOptions<StraitPipelineOptions> {
  /// The pass's defaults, so the two option sets cannot drift apart.
  inline static const graph::GraphBuildTrainingStepOptions kTrainDefaults{};

  Option<std::string> loss{*this, "loss",
                           llvm::cl::desc("build a training step with this loss "
                                          "(cross-entropy, mse, output); empty: forward only"),
                           llvm::cl::init("")};
  Option<bool> fuseRmsNorm{
      *this, "fuse-rmsnorm",
      llvm::cl::desc("graph-fuse-rmsnorm first: decomposed RMSNorm chains become "
                     "graph.RMSNormalization"),
      llvm::cl::init(true)};
  Option<bool> fuseAttention{
      *this, "fuse-attention",
      llvm::cl::desc("graph-fuse-attention after graph-fuse-rmsnorm: decomposed attention "
                     "(MatMul, scale, bias, Softmax, MatMul) becomes "
                     "graph.FusedAttention"),
      llvm::cl::init(true)};
  Option<bool> fuseRotary{
      *this, "fuse-rotary",
      llvm::cl::desc("graph-fuse-rotary after graph-fuse-rmsnorm: rotate-half rotary embeddings "
                     "become graph.FusedRotaryEmbedding"),
      llvm::cl::init(true)};
  Option<std::string> moeExperts{
      *this, "moe-experts",
      llvm::cl::desc("graph-rewrite-expert-matmuls' mode: auto (grouped unless the all-experts "
                     "GEMM is cheaper), grouped (GroupedMatMul: the routed FLOPs), dense (one "
                     "product of every expert with every token) or gathered (no rewrite)"),
      llvm::cl::init("auto")};
  Option<bool> foldTransposes{
      *this, "fold-transposes",
      llvm::cl::desc("graph-fold-transposes after the fusions: Transposes become FusedAttention's "
                     "permutations (the heads) and Gemm's transposition flags (linear layers)"),
      llvm::cl::init(true)};
  Option<std::string> precision{
      *this, "precision",
      llvm::cl::desc("f32 (no casts), or bf16 / f16: graph-autocast runs the "
                     "products in that type before the training step"),
      llvm::cl::init("f32")};
  Option<bool> castMotion{
      *this, "cast-motion",
      llvm::cl::desc("with bf16 / f16: graph-cast-motion after the training step moves "
                     "casts through layout ops and removes exact T -> f32 -> T round "
                     "trips"),
      llvm::cl::init(true)};
  Option<bool> fuseLossGrad{
      *this, "fuse-loss-grad",
      llvm::cl::desc("with a loss: graph-fuse-loss-grad after the training step (and cast "
                     "motion) computes the cross-entropy and its gradient in one "
                     "SoftmaxCrossEntropyLossWithGrad, which reads the logits once"),
      llvm::cl::init(true)};
  Option<bool> rematerialize{
      *this, "rematerialize",
      llvm::cl::desc("with a loss and fuse=elementwise: graph-rematerialize after the "
                     "training step recomputes forward elementwise values in the backward "
                     "pass when that reads fewer bytes (straitc: only for clusters with "
                     "GPUs or NPUs unless --rematerialize=true)"),
      llvm::cl::init(true)};
  Option<std::string> optimizer{*this, "optimizer",
                                llvm::cl::desc("training step optimizer: sgd, adamw, none"),
                                llvm::cl::init("sgd")};
  // Training-step hyper-parameters, forwarded to graph-build-training-step
  // (same names and defaults as its options; see docs/training.md).
  Option<std::string> output{*this, "output",
                             llvm::cl::desc("graph.name of the output the loss uses "
                                            "(default: the first)"),
                             llvm::cl::init(kTrainDefaults.output)};
  Option<std::string> label{*this, "label", llvm::cl::desc("graph.name of the labels argument"),
                            llvm::cl::init(kTrainDefaults.labelName)};
  Option<int64_t> ignoreIndex{*this, "ignore-index",
                              llvm::cl::desc("cross-entropy: label value that contributes "
                                             "nothing"),
                              llvm::cl::init(kTrainDefaults.ignoreIndex)};
  Option<bool> returnGradients{*this, "return-gradients",
                               llvm::cl::desc("also return each variable's gradient as "
                                              "grad.<name>"),
                               llvm::cl::init(kTrainDefaults.returnGradients)};
  Option<std::string> stepOutputs{
      *this, "step-outputs",
      llvm::cl::desc("results of the training step: loss (and the gradients with "
                     "return-gradients), or all (also the model's outputs)"),
      llvm::cl::init(kTrainDefaults.stepOutputs)};
  Option<int64_t> padClasses{
      *this, "pad-classes",
      llvm::cl::desc("cross-entropy over a large product with the outputs dropped: pad "
                     "the classes to a multiple of this (0: never) for aligned GEMM rows"),
      llvm::cl::init(kTrainDefaults.padClasses)};
  Option<int64_t> padClassesMinWork{
      *this, "pad-classes-min-work",
      llvm::cl::desc("pad-classes: only products of at least rows x classes x inner "
                     "multiply-adds"),
      llvm::cl::init(kTrainDefaults.padClassesMinWork)};
  Option<double> lr{*this, "lr", llvm::cl::desc("peak learning rate"),
                    llvm::cl::init(kTrainDefaults.lr)};
  Option<double> momentum{*this, "momentum", llvm::cl::desc("sgd: momentum"),
                          llvm::cl::init(kTrainDefaults.momentum)};
  Option<bool> nesterov{*this, "nesterov", llvm::cl::desc("sgd: Nesterov momentum"),
                        llvm::cl::init(kTrainDefaults.nesterov)};
  Option<double> beta1{*this, "beta1", llvm::cl::desc("adamw: first-moment decay"),
                       llvm::cl::init(kTrainDefaults.beta1)};
  Option<double> beta2{*this, "beta2", llvm::cl::desc("adamw: second-moment decay"),
                       llvm::cl::init(kTrainDefaults.beta2)};
  Option<double> eps{*this, "eps", llvm::cl::desc("adamw: denominator epsilon"),
                     llvm::cl::init(kTrainDefaults.epsilon)};
  Option<int64_t> compressedAdam{
      *this, "compressed-adam",
      llvm::cl::desc("adamw: N > 0 exact warm-up steps, then the second moment frozen and the "
                     "gradient all-reduces compressed (0: off)"),
      llvm::cl::init(0)};
  Option<std::string> compressedAdamWarmup{
      *this, "compressed-adam-warmup",
      llvm::cl::desc("adamw with compressed-adam: the dense codec of the N warm-up steps' "
                     "gradient all-reduces (none: exact f32)"),
      llvm::cl::init("none")};
  Option<double> weightDecay{*this, "weight-decay",
                             llvm::cl::desc("decoupled (adamw) or L2 (sgd) weight decay"),
                             llvm::cl::init(kTrainDefaults.weightDecay)};
  Option<double> clipNorm{*this, "clip-norm",
                          llvm::cl::desc("clip gradients to this global L2 norm (0: off)"),
                          llvm::cl::init(kTrainDefaults.clipNorm)};
  Option<std::string> lossScale{
      *this, "loss-scale",
      llvm::cl::desc("none, dynamic or a fixed scale: loss scaling (docs/training.md)"),
      llvm::cl::init(kTrainDefaults.lossScale)};
  Option<double> lossScaleInit{*this, "loss-scale-init",
                               llvm::cl::desc("dynamic loss scaling: initial scale"),
                               llvm::cl::init(kTrainDefaults.lossScaleInit)};
  Option<double> lossScaleGrowth{*this, "loss-scale-growth",
                                 llvm::cl::desc("dynamic loss scaling: growth factor"),
                                 llvm::cl::init(kTrainDefaults.lossScaleGrowth)};
  Option<double> lossScaleBackoff{*this, "loss-scale-backoff",
                                  llvm::cl::desc("dynamic loss scaling: backoff factor"),
                                  llvm::cl::init(kTrainDefaults.lossScaleBackoff)};
  Option<int64_t> lossScaleInterval{
      *this, "loss-scale-interval",
      llvm::cl::desc("dynamic loss scaling: finite steps between growths"),
      llvm::cl::init(kTrainDefaults.lossScaleInterval)};
  Option<int64_t> warmupSteps{*this, "warmup-steps",
                              llvm::cl::desc("lr schedule: linear warm-up steps"),
                              llvm::cl::init(kTrainDefaults.warmupSteps)};
  Option<int64_t> totalSteps{*this, "total-steps",
                             llvm::cl::desc("lr schedule: step where the cosine decay "
                                            "reaches min-lr (0: constant)"),
                             llvm::cl::init(kTrainDefaults.totalSteps)};
  Option<double> minLr{*this, "min-lr", llvm::cl::desc("lr schedule: final learning rate"),
                       llvm::cl::init(kTrainDefaults.minLr)};
  ListOption<std::string> trainable{*this, "trainable",
                                    llvm::cl::desc("glob patterns of trainable variables")};
  ListOption<std::string> frozen{*this, "frozen",
                                 llvm::cl::desc("glob patterns of frozen variables")};
  Option<int64_t> lora{*this, "lora",
                       llvm::cl::desc("with a loss: graph-add-lora first, adapters of this rank "
                                      "(0: off; straitc --lora)"),
                       llvm::cl::init(0)};
  Option<double> loraAlpha{*this, "lora-alpha",
                           llvm::cl::desc("LoRA scale alpha / rank (0: alpha = rank)"),
                           llvm::cl::init(0)};
  ListOption<std::string> loraTargets{
      *this, "lora-targets",
      llvm::cl::desc("glob patterns of the weights given adapters (default: every linear "
                     "layer's but the output head's)")};
  Option<double> loraDropout{*this, "lora-dropout",
                             llvm::cl::desc("Dropout ratio on the adapters' input (PEFT's "
                                            "lora_dropout; straitc --lora-dropout)"),
                             llvm::cl::init(0)};
  Option<uint64_t> loraSeed{*this, "lora-seed",
                            llvm::cl::desc("seed of the adapters' A (straitc --seed)"),
                            llvm::cl::init(0)};
  Option<std::string> cluster{*this, "cluster", llvm::cl::desc("cluster file (YAML)"),
                              llvm::cl::init("")};
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
  Option<std::string> schedule{*this, "schedule",
                               llvm::cl::desc("pipeline schedule: auto, gpipe or 1f1b"),
                               llvm::cl::init("auto")};
  Option<std::string> recompute{
      *this, "recompute",
      llvm::cl::desc("activation recomputation (dist-assign-stages): none, auto (the stages of "
                     "a plan that fits no other way) or full"),
      llvm::cl::init("none")};
  Option<std::string> compress{
      *this, "compress",
      llvm::cl::desc("codecs on slow links: none, auto (needs cluster), or "
                     "fp16, bf16, int8, "
                     "int4, topk:R for every link"),
      llvm::cl::init("none")};
  Option<double> allReduceBucketMib{
      *this, "all-reduce-bucket-mib",
      llvm::cl::desc("gradient all-reduces packed into buckets of this many MiB (0: one per "
                     "gradient)"),
      llvm::cl::init(256)};
  Option<int64_t> localSteps{
      *this, "local-steps",
      llvm::cl::desc("local steps H (straitc --local-steps): the planner costs the "
                     "inter-island gradient sync once per H steps"),
      llvm::cl::init(1)};
  ListOption<std::string> compressLink{
      *this, "compress-link",
      llvm::cl::desc("per link: A:B=CODEC[:R] (sites, hosts or devices A and B)")};
  Option<std::string> adaptiveTopk{
      *this, "adaptive-topk",
      llvm::cl::desc("MIN:MAX: top-k ratios between stages adapt to the link at run time")};
  Option<FuseMode> fuse{*this, "fuse", llvm::cl::desc("fusion after the stage split"),
                        llvm::cl::init(FuseMode::Elementwise),
                        llvm::cl::values(clEnumValN(FuseMode::Elementwise, "elementwise",
                                                    "graph-fuse-elementwise on every function"),
                                         clEnumValN(FuseMode::None, "none", "one kernel per op"))};
};

/// The forward-graph fusions, in pipeline order: [graph-fuse-rmsnorm] ->
/// [graph-fuse-rotary] -> [graph-fuse-attention] -> graph-rewrite-expert-matmuls ->
/// [graph-fold-transposes]. buildStraitPipeline starts with them; straitc runs
/// them alone for a forward-only program and before --emit=plan's planner.
void addForwardFusionPasses(mlir::OpPassManager &pm, bool fuseRmsNorm, bool fuseAttention,
                            bool foldTransposes = true, bool fuseRotary = true,
                            llvm::StringRef moeExperts = "auto");

/// The graph the planner plans: [graph-add-lora] (with a loss and lora > 0) ->
/// [graph-fuse-rmsnorm] -> [graph-fuse-attention] -> graph-rewrite-expert-matmuls ->
/// [graph-fold-transposes] -> [graph-autocast] -> [graph-build-training-step] (with a loss) -> [graph-cast-motion] -> [graph-rematerialize] (with a loss and
/// fuse=elementwise). buildStraitPipeline starts with them; straitc
/// --emit=plan runs them alone, so that it shows the plan a job applies.
void addTrainingStepPasses(mlir::OpPassManager &pm, const StraitPipelineOptions &o);

/// [graph-fuse-rmsnorm] -> [graph-fuse-attention] -> [graph-autocast] ->
/// [graph-build-training-step] -> [graph-cast-motion] -> [graph-rematerialize]
/// -> dist-assign-stages -> dist-insert-comm -> dist-insert-compression ->
/// dist-split-stages -> [graph-fuse-elementwise]. Fusion runs last, so pipeline
/// cuts and communication see unfused ops.
void buildStraitPipeline(mlir::OpPassManager &pm, const StraitPipelineOptions &options);

/// Registers `strait-pipeline` with the global pass registry.
void registerStraitPipeline();

} // namespace strait

#endif // STRAIT_PIPELINES_PIPELINES_H
