//===- Options.cpp - straitc's command-line flags -------------------------===//

#include "Options.h"

namespace straitc::flags {

cl::OptionCategory straitCat("straitc options");
cl::opt<std::string> inputFile(cl::Positional, cl::desc("<model.onnx>"), cl::Required,
                               cl::cat(straitCat));
cl::opt<std::string> outputFile("o", cl::desc("Output file (default: stdout)"),
                                cl::value_desc("file"), cl::init("-"), cl::cat(straitCat));
cl::list<std::string> inputShapes(
    "input-shape",
    cl::desc("Static input shapes: NAME=DxD...[,NAME=...] (repeatable: the entries of every "
             "--input-shape count)"),
    cl::ZeroOrMore, cl::cat(straitCat));
cl::opt<bool> shapeOnly("shape-only", cl::desc("Read no weight bytes"), cl::init(false),
                        cl::cat(straitCat));
cl::opt<Emit> emit("emit", cl::desc("What to produce"), cl::init(Emit::Summary),
                   cl::values(clEnumValN(Emit::Summary, "summary", "model summary"),
                              clEnumValN(Emit::MLIR, "mlir", "the graph-dialect IR"),
                              clEnumValN(Emit::Program, "program",
                                         "a job folder for strait-run (-o DIR)"),
                              clEnumValN(Emit::Plan, "plan",
                                         "the partition plan on --cluster (text; JSON "
                                         "with --plan-json)"),
                              clEnumValN(Emit::Kernels, "kernels",
                                         "the distinct kernels the planner costs, for "
                                         "strait-probe --kernels (-o FILE)")),
                   cl::cat(straitCat));
cl::opt<std::string> clusterFile("cluster", cl::desc("Cluster description (YAML)"),
                                 cl::value_desc("file"), cl::init(""), cl::cat(straitCat));
cl::opt<std::string> planJson("plan-json", cl::desc("Also write the plan as JSON"),
                              cl::value_desc("file"), cl::init(""), cl::cat(straitCat));
cl::opt<std::string> evaluatePlan(
    "evaluate-plan",
    cl::desc("With --cluster: evaluate the plan of job folder DIR (compiled with --cluster from "
             "the same model and flags: DIR/plan.json's stages, devices, micro-batches and "
             "schedule, with the codecs the flags chose for it on DIR/cluster.yaml) on this "
             "cluster. --emit=plan prints it instead of planning; a job prints its predicted "
             "iteration and records it in straitc.json (strait-run --replan's calibration)"),
    cl::value_desc("DIR"), cl::init(""), cl::cat(straitCat));
cl::opt<std::string> tracePlan(
    "trace-plan",
    cl::desc("With --cluster (--emit=plan or a job): also write the simulated iteration as a "
             "Chrome trace (per stage: forward/backward micro-batches, transfers, all-reduce, "
             "bubble), the format of strait-run --trace (docs/runtime.md, \"Traces\")"),
    cl::value_desc("file.json"), cl::init(""), cl::cat(straitCat));
cl::opt<strait::PlannerStrategy> strategy(
    "strategy", cl::desc("Planner"), cl::init(strait::PlannerStrategy::Strait),
    cl::values(clEnumValN(strait::PlannerStrategy::Strait, "strait", "bandwidth-aware DP"),
               clEnumValN(strait::PlannerStrategy::Uniform, "uniform",
                          "equal layers per stage (baseline)"),
               clEnumValN(strait::PlannerStrategy::PipeDream, "pipedream",
                          "homogeneous DP (baseline)"),
               clEnumValN(strait::PlannerStrategy::DTFM, "dtfm",
                          "DT-FM-like search (baseline)")), cl::cat(straitCat));
cl::opt<double> globalBatch("global-batch",
                            cl::desc("Samples per iteration (default: the input's batch)"),
                            cl::init(0), cl::cat(straitCat));
cl::opt<std::string> loss("loss",
                          cl::desc("Compile a training step with this loss (cross-entropy, "
                                   "mse, output); runs the Strait pipeline"),
                          cl::init(""), cl::cat(straitCat));
cl::opt<std::string> precision(
    "precision",
    cl::desc("Mixed precision: f32 (default, no casts), bf16 or f16 (graph-autocast: MatMul, "
             "Gemm, Conv and FusedAttention on that type, f32 master weights and optimizer)"),
    cl::init("f32"), cl::cat(straitCat));
cl::opt<std::string> optimizer("optimizer",
                               cl::desc("Training step optimizer: sgd, adamw, none"),
                               cl::init("sgd"), cl::cat(straitCat));
// Training-step hyper-parameters (graph-build-training-step's options, as in
// onnxruntime-training's artifact generation); defaults are the pass's.
const strait::graph::GraphBuildTrainingStepOptions &kTrain =
    strait::StraitPipelineOptions::kTrainDefaults;
cl::OptionCategory trainCat("Training step (with --loss)");
cl::opt<std::string> lossOutput("output", cl::desc("Output the loss uses (default: the first)"),
                                cl::init(kTrain.output), cl::cat(trainCat));
cl::opt<std::string> label("label", cl::desc("Name of the new labels input"),
                           cl::init(kTrain.labelName), cl::cat(trainCat));
cl::opt<int64_t> ignoreIndex("ignore-index",
                             cl::desc("Cross-entropy: label value that contributes nothing"),
                             cl::init(kTrain.ignoreIndex), cl::cat(trainCat));
cl::opt<bool> returnGradients("return-gradients",
                              cl::desc("Also output each variable's gradient as grad.<name>"),
                              cl::init(kTrain.returnGradients), cl::cat(trainCat));
cl::opt<std::string> stepOutputs(
    "step-outputs",
    cl::desc("Results of each training step: loss (the loss, and the gradients with "
             "--return-gradients), or all (also the model's outputs, e.g. the logits)"),
    cl::init(kTrain.stepOutputs), cl::cat(trainCat));
cl::opt<int64_t> padClasses(
    "pad-classes",
    cl::desc("Cross-entropy over a product of at least 2^30 multiply-adds (an LM head), with "
             "the model's outputs dropped: compute the logits with the classes padded to a "
             "multiple of N (zero weights, -inf bias; the loss and gradients are unchanged) "
             "so that GPU GEMM rows are 16-byte aligned; 0 never (default 64: GPT-2's 50257 "
             "-> 50304)"),
    cl::init(kTrain.padClasses), cl::cat(trainCat));
// For tests: padding small products too.
cl::opt<int64_t> padClassesMinWork("pad-classes-min-work",
                                   cl::desc("--pad-classes only for products of at least "
                                            "this many multiply-adds (default 2^30)"),
                                   cl::init(kTrain.padClassesMinWork), cl::Hidden,
                                   cl::cat(trainCat));
cl::opt<double> lr("lr", cl::desc("Peak learning rate (the program's lr schedule)"),
                   cl::init(kTrain.lr), cl::cat(trainCat));
cl::opt<double> momentum("momentum", cl::desc("SGD momentum"), cl::init(kTrain.momentum),
                         cl::cat(trainCat));
cl::opt<bool> nesterov("nesterov", cl::desc("SGD: Nesterov momentum"),
                       cl::init(kTrain.nesterov), cl::cat(trainCat));
cl::opt<double> beta1("beta1", cl::desc("AdamW first-moment decay"), cl::init(kTrain.beta1),
                      cl::cat(trainCat));
cl::opt<double> beta2("beta2", cl::desc("AdamW second-moment decay"), cl::init(kTrain.beta2),
                      cl::cat(trainCat));
cl::opt<double> eps("eps", cl::desc("AdamW denominator epsilon"), cl::init(kTrain.epsilon),
                    cl::cat(trainCat));
cl::opt<double> weightDecay("weight-decay",
                            cl::desc("Weight decay (decoupled for adamw, L2 for sgd)"),
                            cl::init(kTrain.weightDecay), cl::cat(trainCat));
cl::opt<double> clipNorm("clip-norm", cl::desc("Clip gradients to this global norm (0: off)"),
                         cl::init(kTrain.clipNorm), cl::cat(trainCat));
cl::opt<std::string> lossScale(
    "loss-scale",
    cl::desc("Loss scaling: dynamic (torch.amp.GradScaler's), a fixed scale, or none; "
             "default auto: dynamic with --precision f16 and an optimizer, else none"),
    cl::init("auto"), cl::cat(trainCat));
cl::opt<double> lossScaleInit("loss-scale-init",
                              cl::desc("Dynamic loss scaling: initial scale (GradScaler's 2^16)"),
                              cl::init(kTrain.lossScaleInit), cl::cat(trainCat));
cl::opt<double> lossScaleGrowth("loss-scale-growth",
                                cl::desc("Dynamic loss scaling: growth factor (> 1)"),
                                cl::init(kTrain.lossScaleGrowth), cl::cat(trainCat));
cl::opt<double> lossScaleBackoff("loss-scale-backoff",
                                 cl::desc("Dynamic loss scaling: backoff factor on inf/nan"),
                                 cl::init(kTrain.lossScaleBackoff), cl::cat(trainCat));
cl::opt<int64_t> lossScaleInterval(
    "loss-scale-interval", cl::desc("Dynamic loss scaling: finite steps before the scale grows"),
    cl::init(kTrain.lossScaleInterval), cl::cat(trainCat));
cl::opt<int64_t> warmupSteps("warmup-steps", cl::desc("LR schedule: linear warm-up steps"),
                             cl::init(kTrain.warmupSteps), cl::cat(trainCat));
cl::opt<int64_t> totalSteps("total-steps",
                            cl::desc("LR schedule: step where the cosine decay reaches "
                                     "--min-lr (0: constant after warm-up)"),
                            cl::init(kTrain.totalSteps), cl::cat(trainCat));
cl::opt<double> minLr("min-lr", cl::desc("LR schedule: final learning rate"),
                      cl::init(kTrain.minLr), cl::cat(trainCat));
cl::list<std::string> trainable("trainable",
                                cl::desc("Glob of trainable variables (repeatable or "
                                         "comma list; default: all float ones)"),
                                cl::CommaSeparated, cl::cat(trainCat));
cl::list<std::string> frozen("frozen",
                             cl::desc("Glob of frozen variables (repeatable or comma "
                                      "list; wins over --trainable)"),
                             cl::CommaSeparated, cl::cat(trainCat));
cl::opt<int64_t> lora("lora",
                      cl::desc("LoRA: adapters of rank R on the linear layers' weights, every "
                               "other variable frozen (graph-add-lora; docs/training.md "
                               "\"LoRA\"; default 0: off)"),
                      cl::init(0), cl::cat(trainCat));
cl::opt<double> loraAlpha("lora-alpha",
                          cl::desc("LoRA: the adapters' update is scaled by alpha / R "
                                   "(default: alpha = R, scale 1)"),
                          cl::init(0), cl::cat(trainCat));
cl::opt<double> loraDropout("lora-dropout",
                            cl::desc("LoRA: Dropout of this ratio on the adapters' input x "
                                     "(PEFT's lora_dropout; seeded like the model's Dropouts, "
                                     "identity in evaluation; default 0)"),
                            cl::init(0), cl::cat(trainCat));
cl::list<std::string> loraTargets("lora-targets",
                                  cl::desc("LoRA: glob of the weights given adapters "
                                           "(repeatable or comma list; default: every "
                                           "linear layer's but the output head's)"),
                                  cl::CommaSeparated, cl::cat(trainCat));
cl::opt<int64_t> microBatches("micro-batches",
                              cl::desc("Micro-batches per iteration, each of the IR's batch "
                                       "(default: the planner's choice; 1 without a cluster)"),
                              cl::init(1), cl::cat(straitCat));
cl::opt<std::string> schedule(
    "schedule",
    cl::desc("Pipeline schedule of the micro-batches: auto (the planner's choice; 1F1B "
             "whenever it fits), gpipe (all forwards, then all backwards) or 1f1b (each "
             "stage keeps at most as many micro-batches as stages follow it)"),
    cl::init("auto"), cl::cat(straitCat));
cl::opt<Warmup> pipelineWarmup(
    "pipeline-warmup",
    cl::desc("1F1B warm-up forwards per stage: plan (the planner's, enough to cover a "
             "micro-batch's round trip over slow links) or classic (stages after it)"),
    cl::values(clEnumValN(Warmup::Plan, "plan", "the planner's count (default)"),
               clEnumValN(Warmup::Classic, "classic", "min(S-1-s, M)")),
    cl::init(Warmup::Plan), cl::cat(straitCat));
cl::opt<int64_t> numStages("num-stages",
                           cl::desc("Force this many pipeline stages of equal size over "
                                    "equal device chunks (0: the planner decides)"),
                           cl::init(0), cl::cat(straitCat));
cl::opt<uint64_t> seed("seed", cl::desc("Seed of weights a shape-only model lacks, of LoRA's A "
                                         "and of the training step's dropout masks"),
                       cl::init(0), cl::cat(straitCat));
cl::opt<std::string> compress(
    "compress",
    cl::desc("Codecs on slow links: none (default), auto (per link from the cost model), "
             "or fp16, bf16, int8, int4, int3, int2, topk:R, topk:R:int8, topk:R:int4 (top-k "
             "with int8 / int4 values) on every link, or aqsgd:B[:GRAD] (AQ-SGD: B = 2, 3, 4 "
             "bit deltas against per-sample state on the pipeline activations, GRAD (default "
             "int8) on their gradients; docs/runtime.md \"AQ-SGD\")"),
    cl::init("none"), cl::cat(straitCat));
cl::opt<double> allReduceBucketMib(
    "all-reduce-bucket-mib",
    cl::desc("Gradient all-reduces of a stage packed into buckets of this many MiB, one "
             "all-reduce each (default 256; 0: one all-reduce per gradient)"),
    cl::init(256), cl::cat(straitCat));
cl::opt<int64_t> localSteps(
    "local-steps",
    cl::desc("Local steps (DiLoCo): the data-parallel replicas of a stage that span several "
             "bandwidth islands reduce their gradients inside their island each step and "
             "average their parameters across islands every H steps with an outer Nesterov "
             "step (default 1: synchronous training)"),
    cl::init(1), cl::cat(straitCat));
cl::opt<double> outerLr("outer-lr", cl::desc("Outer learning rate of --local-steps (> 0)"),
                        cl::init(0.7), cl::cat(straitCat));
cl::opt<double> outerMomentum("outer-momentum",
                              cl::desc("Outer Nesterov momentum of --local-steps, in [0, 1)"),
                              cl::init(0.9), cl::cat(straitCat));
cl::opt<int64_t> compressedAdam(
    "compressed-adam",
    cl::desc("Compressed AdamW (1-bit-Adam-like): the first N steps all-reduce exact gradients "
             "while AdamW's second moment warms up; then the second moment is frozen and the "
             "gradient all-reduces use their codec (--compress) with error feedback "
             "(docs/training.md; default 0: off)"),
    cl::init(0), cl::cat(straitCat));
cl::opt<std::string> compressedAdamWarmup(
    "compressed-adam-warmup",
    cl::desc("With --compressed-adam N: the dense codec (fp16, bf16, int8, int4, int3, int2) "
             "of the gradient all-reduces during the N warm-up steps, with error feedback, "
             "instead of exact f32 (default none)"),
    cl::init("none"), cl::cat(straitCat));
cl::opt<std::string> adaptiveTopk(
    "adaptive-topk",
    cl::desc("MIN:MAX: the runtime adapts the ratio of every top-k transfer between stages "
             "(--compress topk:R or --compress-link ...=topk:R; R in [MIN, MAX]) to the "
             "throughput its link delivers (docs/runtime.md, \"Adaptive top-k\")"),
    cl::cat(straitCat));
cl::list<std::string> compressLink(
    "compress-link",
    cl::desc("Codec of one link: SITE_A:SITE_B=CODEC[:RATIO[:int8|int4]] or "
             "SITE_A:SITE_B=aqsgd:B[:GRAD] (sites, hosts or devices; "
             "repeatable; wins over --compress)"), cl::cat(straitCat));
cl::opt<strait::FuseMode> fuse(
    "fuse", cl::desc("Fusion after the stage split (training jobs and --cluster)"),
    cl::init(strait::FuseMode::Elementwise),
    cl::values(clEnumValN(strait::FuseMode::Elementwise, "elementwise",
                          "chains of elementwise ops become one FusedElementwise kernel"),
               clEnumValN(strait::FuseMode::None, "none", "one kernel per op")),
    cl::cat(straitCat));
cl::opt<bool> fuseRmsNorm(
    "fuse-rmsnorm",
    cl::desc("Rewrite decomposed RMSNorm chains (LLaMA exports) into one RMSNormalization "
             "before the training step (default on; =false keeps the decomposition)"),
    cl::init(true), cl::cat(straitCat));
cl::opt<bool> fuseAttention(
    "fuse-attention",
    cl::desc("Rewrite decomposed attention (MatMul, scale, bias, Softmax, MatMul) into one "
             "FusedAttention before the training step (default on; =false keeps the "
             "decomposition)"),
    cl::init(true), cl::cat(straitCat));
cl::opt<bool> fuseRotary(
    "fuse-rotary",
    cl::desc("Rewrite rotate-half rotary position embeddings (LLaMA exports: Slice, Neg, "
             "Concat, Mul, Add) into one FusedRotaryEmbedding before the training step "
             "(default on; =false keeps the decomposition)"),
    cl::init(true), cl::cat(straitCat));
cl::opt<std::string> moeExperts(
    "moe-experts",
    cl::desc("Mixture-of-experts products of gathered expert weights (batched_mm exports): "
             "auto (default: grouped unless the all-experts GEMM is cheaper), grouped (one "
             "GroupedMatMul of the routed slots: the routed FLOPs), dense (one GEMM of every "
             "expert with every token and a one-hot selection) or gathered (as exported: a "
             "copy of an expert's weights per slot)"),
    cl::init("auto"), cl::cat(straitCat));
cl::opt<bool> foldTransposes(
    "fold-transposes",
    cl::desc("Fold Transposes into their readers before the training step (default on): "
             "FusedAttention reads and writes the heads where the model keeps them (its "
             "q_perm, kt_perm, v_perm, y_perm), MatMuls by a transposed weight become Gemms "
             "with transposition flags; no Transpose runs forward or backward"),
    cl::init(true), cl::cat(straitCat));
cl::opt<bool> fuseLossGrad(
    "fuse-loss-grad",
    cl::desc("Compute the cross-entropy loss and its gradient in one "
             "SoftmaxCrossEntropyLossWithGrad kernel in the forward, which reads the logits "
             "once (default on; =false keeps the loss and its gradient apart)"),
    cl::init(true), cl::cat(straitCat));
cl::opt<bool> parameterCopies(
    "parameter-copies",
    cl::desc("Cast the parameters to bf16/f16 once, when they are loaded, into copies that "
             "AdamW writes with each update (default on); =false casts them in every "
             "iteration"),
    cl::init(true), cl::cat(straitCat));
cl::opt<bool> castMotion(
    "cast-motion",
    cl::desc("With --precision bf16/f16: move casts through layout ops and remove exact "
             "T -> f32 -> T round trips after the training step (default on; =false keeps "
             "autocast's casts)"),
    cl::init(true), cl::cat(straitCat));
cl::opt<Remat> rematerialize(
    "rematerialize",
    cl::desc("With --fuse=elementwise and a loss: recompute forward elementwise values in the "
             "backward pass when that reads fewer bytes than keeping them (the GELU's tanh "
             "from its input)"),
    cl::values(clEnumValN(Remat::Auto, "auto",
                          "when the cluster has a GPU or NPU (memory-bound elementwise "
                          "kernels); not on CPUs, where recomputing tanh costs more than "
                          "reading it (the default)"),
               clEnumValN(Remat::On, "true", "always"), clEnumValN(Remat::Off, "false", "never")),
    cl::init(Remat::Auto), cl::cat(straitCat));
cl::opt<std::string> recompute(
    "recompute",
    cl::desc("With a loss: recompute each block's forward right before its backward, so that "
             "in-flight micro-batches keep only the blocks' inputs: auto (only the stages of a "
             "plan that fits no other way; plans that fit are unchanged; the default), full "
             "(every stage) or none (docs/planner.md, \"Activation recomputation\")"),
    cl::init("auto"), cl::cat(straitCat));
cl::opt<bool> printWeights("print-weights",
                           cl::desc("Print weight blobs in full with --emit=mlir"),
                           cl::init(false), cl::cat(straitCat));

} // namespace straitc::flags
