//===- straitc.cpp - The Strait compiler driver ---------------------------===//
//
//   straitc MODEL.onnx|MODEL.mlir [--input-shape NAME=DxD...] [--shape-only]
//           [--emit=summary|mlir|program|plan|kernels] [-o FILE|DIR]
//   straitc MODEL --cluster FILE [--num-stages N] [--global-batch N] -o DIR
//           runs the Strait pipeline (lib/Pipelines) and writes one program
//           per rank, plan.pb and plan.json; prints the plan.
//   straitc MODEL --loss L [--optimizer O] [--lr X --warmup-steps N ...] -o DIR
//           a training step (graph-build-training-step's options as flags,
//           see docs/training.md).
//
// Output is written only when compilation succeeds.
//
//===----------------------------------------------------------------------===//

#include "JobRecord.h"
#include "Options.h"
#include "Reports.h"
#include "strait/Analysis/Compression.h"
#include "strait/Analysis/KernelList.h"
#include "strait/Analysis/PlanReport.h"
#include "strait/Analysis/Simulator.h"
#include "strait/Analysis/TimelineTrace.h"
#include "strait/Dialect/Graph/Summary.h"
#include "strait/Dialect/Dist/DistOps.h"
#include "strait/Dialect/Dist/StagePlan.h"
#include "strait/InitAll.h"
#include "strait/Pipelines/Pipelines.h"
#include "strait/Target/DeviceProgram/Export.h"
#include "strait/Target/ONNX/ONNXImporter.h"

#include "mlir/IR/AsmState.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/Parser/Parser.h"
#include "mlir/Pass/Pass.h"
#include "mlir/Pass/PassInstrumentation.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Support/FileUtilities.h"
#include "mlir/Support/Timing.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/InitLLVM.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/ToolOutputFile.h"

#include <cmath>
#include <map>
#include <memory>

using namespace mlir;
namespace cl = llvm::cl;

namespace {
using namespace straitc::flags;

using straitc::EvaluatedPlan;
llvm::Expected<EvaluatedPlan> evaluateJobPlan(func::FuncOp main,
                                              const strait::dist::StagePlanOptions &sopts);

/// Computes the plan report right before dist-assign-stages runs.
struct PlanReporter : public PassInstrumentation {
  explicit PlanReporter(strait::dist::StagePlanOptions options) : options(options) {}
  void runBeforePass(Pass *pass, Operation *op) override {
    auto module = dyn_cast<ModuleOp>(op);
    if (pass->getArgument() != "dist-assign-stages" || !module)
      return;
    if (auto main = module.lookupSymbol<func::FuncOp>("main")) {
      llvm::Expected<strait::dist::StagePlanResult> r =
          strait::dist::computeStagePlan(main, options);
      if (r)
        result = std::move(*r);
      else
        llvm::consumeError(r.takeError()); // the pass reports it
      if (!evaluatePlan.empty()) {
        llvm::Expected<EvaluatedPlan> e = evaluateJobPlan(main, options);
        if (e)
          evaluated = std::move(*e);
        else
          evaluateError = llvm::toString(e.takeError());
      }
    }
  }
  strait::dist::StagePlanOptions options;
  std::optional<strait::dist::StagePlanResult> result;
  /// --evaluate-plan: that plan on this cluster, or why it failed.
  std::optional<EvaluatedPlan> evaluated;
  std::string evaluateError;
};

/// --loss-scale as the training step applies it. auto: GradScaler's
/// default where f16 needs it (bf16 and f32 have f32's range); not with
/// returned gradients, which would come out scaled.
std::string effectiveLossScale() {
  if (lossScale != "auto")
    return lossScale.getValue();
  return precision == "f16" && optimizer != "none" && !returnGradients ? "dynamic" : "none";
}

/// The codec flags for the reports (Reports.h).
straitc::CompressionFlags compressionFlags() {
  straitc::CompressionFlags f;
  f.mode = compress;
  f.links.assign(compressLink.begin(), compressLink.end());
  f.localSteps = static_cast<unsigned>(localSteps.getValue());
  f.gradientTopK = optimizer != "adamw" || compressedAdam > 0;
  f.compressedAdam = compressedAdam;
  f.warmupCodec = compressedAdamWarmup;
  f.totalSteps = totalSteps;
  f.lossScaling = effectiveLossScale() != "none" && !loss.empty();
  return f;
}

/// --evaluate-plan DIR with the flags' codecs (Reports.h).
llvm::Expected<EvaluatedPlan> evaluateJobPlan(func::FuncOp main,
                                              const strait::dist::StagePlanOptions &sopts) {
  return straitc::evaluateJobPlan(main, sopts, evaluatePlan, compressionFlags());
}

/// Whether --cluster names a GPU or NPU device (a cluster file that does
/// not load is reported where the planner reads it).
bool clusterHasAccelerator() {
  if (clusterFile.empty())
    return false;
  llvm::Expected<strait::ClusterModel> cluster = strait::loadClusterFile(clusterFile);
  if (cluster)
    cluster->allReduceBucketBytes = allReduceBucketMib * 1048576.0;
  if (!cluster) {
    llvm::consumeError(cluster.takeError());
    return false;
  }
  for (unsigned d = 0; d < cluster->size(); ++d)
    if (cluster->typeOf(d).kind != strait::DeviceKind::CPU)
      return true;
  return false;
}

/// --trace-plan FILE: the simulated iteration as a Chrome trace.
LogicalResult writePlanTrace(const std::optional<strait::SimulationResult> &timeline,
                             const strait::PartitionPlan &plan,
                             const strait::ClusterModel &cluster,
                             const std::vector<std::vector<int>> &stageRanks) {
  if (tracePlan.empty())
    return success();
  if (!timeline) {
    llvm::errs() << "straitc: --trace-plan: the plan could not be simulated\n";
    return failure();
  }
  if (llvm::Error e =
          strait::writeTimelineChromeTrace(*timeline, plan, cluster, stageRanks, tracePlan)) {
    llvm::errs() << "straitc: --trace-plan: " << llvm::toString(std::move(e)) << "\n";
    return failure();
  }
  llvm::outs() << "straitc: wrote the predicted timeline to " << tracePlan << "\n";
  return success();
}

/// The Strait pipeline's options (lib/Pipelines) from the flags.
/// --recompute as the planner applies it: a forward-only graph has no
/// backward to recompute in.
std::string effectiveRecompute() { return loss.empty() ? "none" : recompute.getValue(); }

void fillPipelineOptions(strait::StraitPipelineOptions &popts) {
  popts.cluster = clusterFile.getValue();
  popts.strategy = strait::stringifyStrategy(strategy).str();
  popts.globalBatch = globalBatch.getValue();
  popts.numStages = numStages.getValue();
  popts.loss = loss.getValue();
  popts.microBatches = microBatches.getValue();
  popts.schedule = schedule.getValue();
  popts.optimizer = optimizer.getValue();
  popts.precision = precision.getValue();
  popts.output = lossOutput.getValue();
  popts.label = label.getValue();
  popts.ignoreIndex = ignoreIndex.getValue();
  popts.returnGradients = returnGradients.getValue();
  popts.stepOutputs = stepOutputs.getValue();
  popts.padClasses = padClasses.getValue();
  popts.padClassesMinWork = padClassesMinWork.getValue();
  popts.lr = lr.getValue();
  popts.momentum = momentum.getValue();
  popts.nesterov = nesterov.getValue();
  popts.beta1 = beta1.getValue();
  popts.beta2 = beta2.getValue();
  popts.eps = eps.getValue();
  popts.compressedAdam = compressedAdam.getValue();
  popts.compressedAdamWarmup = compressedAdamWarmup.getValue();
  popts.weightDecay = weightDecay.getValue();
  popts.clipNorm = clipNorm.getValue();
  popts.lossScale = effectiveLossScale();
  popts.lossScaleInit = lossScaleInit.getValue();
  popts.lossScaleGrowth = lossScaleGrowth.getValue();
  popts.lossScaleBackoff = lossScaleBackoff.getValue();
  popts.lossScaleInterval = lossScaleInterval.getValue();
  popts.warmupSteps = warmupSteps.getValue();
  popts.totalSteps = totalSteps.getValue();
  popts.minLr = minLr.getValue();
  popts.trainable = std::vector<std::string>(trainable.begin(), trainable.end());
  popts.frozen = std::vector<std::string>(frozen.begin(), frozen.end());
  popts.lora = lora.getValue();
  popts.loraAlpha = loraAlpha.getValue();
  popts.loraTargets = std::vector<std::string>(loraTargets.begin(), loraTargets.end());
  popts.loraSeed = seed.getValue();
  popts.loraDropout = loraDropout.getValue();
  popts.compress = compress.getValue();
  popts.allReduceBucketMib = allReduceBucketMib.getValue();
  popts.localSteps = localSteps.getValue();
  popts.recompute = effectiveRecompute();
  popts.compressLink = std::vector<std::string>(compressLink.begin(), compressLink.end());
  popts.adaptiveTopk = adaptiveTopk.getValue();
  popts.fuse = fuse.getValue();
  popts.fuseRmsNorm = fuseRmsNorm.getValue();
  popts.fuseAttention = fuseAttention.getValue();
  popts.foldTransposes = foldTransposes.getValue();
  popts.fuseRotary = fuseRotary.getValue();
  popts.moeExperts = moeExperts.getValue();
  popts.castMotion = castMotion.getValue();
  popts.fuseLossGrad = fuseLossGrad.getValue();
  popts.rematerialize = rematerialize == Remat::On ||
                        (rematerialize == Remat::Auto && clusterHasAccelerator());
}

/// The passes a job runs before its planner (fusions, autocast and, with
/// --loss, the training step and cast motion): the graph --emit=plan costs
/// and --emit=kernels lists.
LogicalResult runPlannedGraphPasses(ModuleOp module) {
  PassManager pm(module.getContext());
  strait::StraitPipelineOptions popts;
  fillPipelineOptions(popts);
  strait::addTrainingStepPasses(pm, popts);
  return pm.run(module);
}

/// Runs the Strait pipeline (lib/Pipelines) with the flags' options; the
/// plan report is computed on the way.
LogicalResult runPipeline(ModuleOp module, TimingScope &timing,
                          std::optional<strait::dist::StagePlanResult> &report,
                          std::optional<EvaluatedPlan> *evaluated = nullptr) {
  strait::StraitPipelineOptions popts;
  fillPipelineOptions(popts);
  strait::dist::StagePlanOptions sopts;
  sopts.clusterFile = clusterFile;
  sopts.strategy = popts.strategy;
  sopts.globalBatch = globalBatch;
  sopts.numStages = numStages;
  sopts.microBatches = microBatches;
  sopts.schedule = schedule;
  sopts.localSteps = localSteps;
  sopts.recompute = popts.recompute;
  sopts.allReduceBucketBytes = allReduceBucketMib * 1048576.0;
  PassManager pm(module.getContext());
  if (failed(applyPassManagerCLOptions(pm)))
    return failure();
  pm.enableTiming(timing);
  // The report comes from the analysis dist-assign-stages applies (pure, so
  // the same plan), on the IR that pass sees (after the training step).
  auto instrumentation = std::make_unique<PlanReporter>(sopts);
  PlanReporter *reporter = instrumentation.get();
  pm.addInstrumentation(std::move(instrumentation));
  strait::buildStraitPipeline(pm, popts);
  if (failed(pm.run(module)))
    return failure();
  if (!reporter->result) {
    llvm::errs() << "straitc: the pipeline planned nothing\n";
    return failure();
  }
  report = std::move(reporter->result);
  if (!evaluatePlan.empty() && evaluated) {
    if (!reporter->evaluated) {
      llvm::errs() << "straitc: --evaluate-plan "
                   << (reporter->evaluateError.empty() ? "was not evaluated"
                                                       : reporter->evaluateError)
                   << "\n";
      return failure();
    }
    *evaluated = std::move(reporter->evaluated);
  }
  return success();
}

/// Each rank's device and host from the cluster file: a device of kind gpu
/// runs "cuda:N", N its index among its host's GPUs (in file order); cpu and
/// npu devices run "cpu" (there is no NPU backend yet: straitc says so).
void assignDevices(strait::dist::PlanAttr plan, const strait::ClusterModel &cluster,
                   std::vector<strait::RankExport> &ranks) {
  llvm::StringMap<unsigned> byName;
  std::vector<int> ordinal(cluster.size(), -1);
  std::map<unsigned, int> gpusOnHost;
  for (unsigned d = 0; d < cluster.size(); ++d) {
    byName[cluster.devices[d].name] = d;
    if (cluster.typeOf(d).kind == strait::DeviceKind::GPU)
      ordinal[d] = gpusOnHost[cluster.devices[d].host]++;
  }
  bool npu = false;
  for (int64_t s = 0; s < plan.getNumStages(); ++s) {
    strait::dist::PlacementAttr p = plan.getStage(s);
    for (auto [device, rank] : llvm::zip(p.getDevices(), p.getRanks().asArrayRef())) {
      auto it = byName.find(llvm::cast<StringAttr>(device).getValue());
      if (it == byName.end() || rank < 0 || rank >= static_cast<int64_t>(ranks.size()))
        continue;
      unsigned d = it->second;
      strait::RankExport &e = ranks[rank];
      e.host = cluster.hosts[cluster.devices[d].host];
      e.device = ordinal[d] >= 0 ? "cuda:" + std::to_string(ordinal[d]) : "cpu";
      npu |= cluster.typeOf(d).kind == strait::DeviceKind::NPU;
    }
  }
  if (npu)
    llvm::outs() << "straitc: note: the runtime has no NPU backend yet; ranks on npu "
                    "devices run the CPU backend\n";
}

/// The multi-rank flow: pipeline, plan report, one program per rank.
/// straitc's arguments as given (DIR/straitc.json, for strait-run --replan).
std::vector<std::string> commandLine;

/// DIR/lora.json with --lora: the adapters' rank, alpha (the scale is
/// alpha / rank) and dropout, for merging trained adapters or writing a PEFT
/// adapter (python/strait/lora.py, python/strait/export.py).
std::string loraRecord() {
  if (lora <= 0)
    return "";
  double alpha = loraAlpha > 0 ? loraAlpha.getValue() : static_cast<double>(lora);
  char buf[200];
  std::snprintf(buf, sizeof(buf),
                "{\"rank\": %lld, \"alpha\": %.17g, \"seed\": %llu, \"dropout\": %.17g}",
                static_cast<long long>(lora.getValue()), alpha,
                static_cast<unsigned long long>(seed.getValue()), loraDropout.getValue());
  return buf;
}

int compileJob(ModuleOp module, TimingScope &timing) {
  std::optional<strait::dist::StagePlanResult> report;
  std::optional<EvaluatedPlan> evaluated;
  if (!evaluatePlan.empty() && clusterFile.empty()) {
    llvm::errs() << "straitc: --evaluate-plan needs --cluster FILE\n";
    return 1;
  }
  if (failed(runPipeline(module, timing, report, &evaluated)))
    return 1;
  strait::dist::PlanAttr plan = strait::dist::getPlan(module);
  strait::JobExportOptions jobOpts;
  jobOpts.modelName = inputFile;
  jobOpts.seed = seed;
  jobOpts.planJSON = llvm::formatv("{0:2}", report->json).str();
  jobOpts.loraJSON = loraRecord();
  jobOpts.microBatches = plan.getMicroBatches();
  jobOpts.order.oneFOneB = plan.getSchedule() == strait::dist::Schedule::one_f_one_b;
  if (auto warmup = module->getAttrOfType<DenseI64ArrayAttr>("dist.warmup");
      warmup && pipelineWarmup == Warmup::Plan)
    jobOpts.order.warmup.assign(warmup.asArrayRef().begin(), warmup.asArrayRef().end());
  jobOpts.parameterCopies = parameterCopies;
  jobOpts.outerSync = {localSteps, outerLr, outerMomentum};
  std::vector<strait::RankExport> ranks(plan.getNumRanks());
  for (int64_t s = 0; s < plan.getNumStages(); ++s) {
    strait::dist::PlacementAttr p = plan.getStage(s);
    auto func = module.lookupSymbol<func::FuncOp>(("stage" + llvm::Twine(s)).str());
    std::vector<int> stageRanks;
    for (auto [r, rank] : llvm::enumerate(p.getRanks().asArrayRef())) {
      strait::RankExport &e = ranks[rank];
      e.rank = rank;
      e.stage = s;
      e.replica = r;
      e.function = func;
      stageRanks.push_back(rank);
    }
    jobOpts.stageRanks.push_back(std::move(stageRanks));
  }
  // The simulator's prediction for the plan the job runs (forced stages
  // included), with and without the codecs the pipeline inserted; computed
  // before anything is written.
  std::string prediction;
  double predicted = 0;
  std::optional<double> evaluatedS;
  std::optional<strait::ClusterModel> clusterModel;
  if (!clusterFile.empty()) {
    llvm::Expected<strait::ClusterModel> cluster = strait::loadClusterFile(clusterFile);
    if (cluster)
      cluster->allReduceBucketBytes = allReduceBucketMib * 1048576.0;
    if (!cluster) {
      llvm::errs() << "straitc: " << llvm::toString(cluster.takeError()) << "\n";
      return 1;
    }
    clusterModel = std::move(*cluster);
    assignDevices(plan, *clusterModel, ranks);
  }
  if (report->plan && clusterModel) {
    std::optional<strait::ClusterModel> &cluster = clusterModel;
    llvm::raw_string_ostream os(prediction);
    std::optional<strait::SimulationResult> timeline;
    if (failed(straitc::reportCompression(compressionFlags(), *report->plan, *cluster, os,
                                          nullptr, /*perLink=*/false, &predicted,
                                          tracePlan.empty() ? nullptr : &timeline)))
      return 1;
    if (failed(writePlanTrace(timeline, *report->plan, *cluster, jobOpts.stageRanks)))
      return 1;
    // --evaluate-plan: that plan on this cluster, with its codecs, simulated
    // as this plan's prediction is.
    if (evaluated) {
      std::string ignored;
      llvm::raw_string_ostream ios(ignored);
      straitc::CompressionFlags flags = compressionFlags();
      flags.codecs = evaluated->codecs ? &*evaluated->codecs : nullptr;
      double t = 0;
      if (failed(straitc::reportCompression(flags, evaluated->plan.plan, *cluster, ios, nullptr,
                                            /*perLink=*/false, &t)))
        return 1;
      evaluatedS = t;
      prediction += llvm::formatv("straitc: the plan of {0} on this cluster: predicted "
                                  "iteration {1:f6} s (this job's plan: {2:f6} s)\n",
                                  evaluatePlan, t, predicted)
                        .str();
    }
  } else if (!tracePlan.empty()) {
    llvm::errs() << "straitc: --trace-plan needs --cluster FILE\n";
    return 1;
  }
  std::string scheduleNote;
  if (jobOpts.order.oneFOneB && plan.getMicroBatches() > 1)
    if (std::optional<std::string> against = strait::againstThePipeline(ranks)) {
      if (schedule == "1f1b") {
        llvm::errs() << "straitc: --schedule 1f1b needs the stages' transfers to go one way per "
                        "phase, but "
                     << *against << "; use --schedule gpipe\n";
        return 1;
      }
      scheduleNote = "straitc: note: " + *against +
                     ", which 1F1B cannot order (each stage would wait for the other); the "
                     "job runs in GPipe order and holds every micro-batch's activations, more "
                     "than the plan's 1F1B memory\n";
      jobOpts.order.oneFOneB = false;
    }
  TimingScope exportTiming = timing.nest("export");
  if (failed(strait::writeJob(module, ranks, outputFile, jobOpts)))
    return 1;
  // What strait-run --replan needs: the command, the cluster, the links.
  if (clusterModel && failed(strait::writeJobRecord(
                          outputFile, commandLine, clusterFile, *clusterModel, plan, predicted,
                          straitc::errorFeedbackBytes(
                              module, plan, effectiveLossScale() != "none" && !loss.empty()),
                          evaluatePlan, evaluatedS)))
    return 1;
  llvm::outs() << scheduleNote << report->text;
  if (localSteps > 1)
    straitc::reportLocalSteps(module, plan, localSteps, outerLr, outerMomentum);
  straitc::printJobCompression(module, llvm::outs());
  if (!adaptiveTopk.empty() && jobOpts.order.oneFOneB)
    llvm::errs() << "straitc: warning: --adaptive-topk with the 1F1B schedule: its deferred "
                    "sends return before their bytes leave, so the runtime cannot time them and "
                    "keeps the compiled top-k ratios; compile with --schedule gpipe to adapt\n";
  llvm::outs() << prediction;
  llvm::outs() << "straitc: wrote " << outputFile << "/plan.pb (" << ranks.size()
               << " ranks, " << plan.getNumStages() << " stages)\n";
  if (plan.getMicroBatches() > 1) {
    llvm::outs() << "straitc: each rank runs " << plan.getMicroBatches()
                 << " micro-batches of the IR's batch in "
                 << (jobOpts.order.oneFOneB ? "1F1B" : "GPipe")
                 << " order (batch inputs hold them stacked)";
    if (jobOpts.order.oneFOneB) {
      llvm::outs() << "; warm-up forwards per stage:";
      for (int64_t s = 0; s < plan.getNumStages(); ++s)
        llvm::outs() << " "
                     << jobOpts.order.warmupOf(s, plan.getNumStages(), plan.getMicroBatches());
    }
    llvm::outs() << "\n";
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  commandLine.assign(argv, argv + argc);
  llvm::InitLLVM init(argc, argv);
  registerAsmPrinterCLOptions();
  registerMLIRContextCLOptions();
  registerDefaultTimingManagerCLOptions();
  registerPassManagerCLOptions();
  // --help lists straitc's own options, not every LLVM/MLIR library flag
  // linked in (those still parse; --help-hidden lists them).
  cl::HideUnrelatedOptions({&straitCat, &trainCat});
  cl::ParseCommandLineOptions(argc, argv, "Strait compiler\n");
  const cl::Option *trainingFlags[] = {
      &lossOutput, &label, &ignoreIndex, &returnGradients, &stepOutputs, &padClasses, &rematerialize,
      &lr,
      &momentum,
      &nesterov, &beta1, &beta2, &eps, &weightDecay, &clipNorm,
      &lossScale, &lossScaleInit, &lossScaleGrowth, &lossScaleBackoff, &lossScaleInterval,
      &warmupSteps, &totalSteps, &minLr,
      // cl::list overloads operator& (it returns the storage).
      std::addressof(trainable), std::addressof(frozen), &lora, &loraAlpha, &loraDropout,
      std::addressof(loraTargets)};
  if (localSteps < 1) {
    llvm::errs() << "straitc: --local-steps must be at least 1 (got " << localSteps << ")\n";
    return 1;
  }
  if (lora < 0 || (lora == 0 && (loraAlpha.getNumOccurrences() || loraTargets.size() ||
                                  loraDropout.getNumOccurrences()))) {
    llvm::errs() << "straitc: --lora must be an adapter rank >= 1 (got " << lora
                 << "); --lora-alpha, --lora-dropout and --lora-targets need it\n";
    return 1;
  }
  if (!(loraDropout >= 0 && loraDropout < 1)) {
    llvm::errs() << "straitc: --lora-dropout must be a ratio in [0, 1) (got "
                 << llvm::format("%g", loraDropout.getValue())
                 << ")\n";
    return 1;
  }
  if (recompute != "auto" && recompute != "none" && recompute != "full") {
    llvm::errs() << "straitc: --recompute must be auto, full or none (got '" << recompute
                 << "')\n";
    return 1;
  }
  if (moeExperts != "auto" && moeExperts != "grouped" && moeExperts != "dense" &&
      moeExperts != "gathered") {
    llvm::errs() << "straitc: --moe-experts must be auto, grouped, dense or gathered (got '"
                 << moeExperts << "')\n";
    return 1;
  }
  if (recompute == "full" && loss.empty()) {
    llvm::errs() << "straitc: --recompute full needs a training step (--loss): a forward-only "
                    "graph keeps no activations for a backward\n";
    return 1;
  }
  if (compressedAdam.getNumOccurrences()) {
    const char *why = nullptr;
    if (compressedAdam < 1)
      why = "N must be at least 1 (exact warm-up steps of the second moment)";
    else if (loss.empty() || optimizer != "adamw")
      why = "it needs --loss and --optimizer adamw (it freezes AdamW's second moment)";
    else if (localSteps > 1)
      why = "--local-steps average parameters across islands, not gradients";
    if (why) {
      llvm::errs() << "straitc: --compressed-adam " << compressedAdam << ": " << why << "\n";
      return 1;
    }
  }
  if (compressedAdamWarmup.getNumOccurrences() && compressedAdamWarmup != "none" &&
      compressedAdam < 1) {
    llvm::errs() << "straitc: --compressed-adam-warmup " << compressedAdamWarmup
                 << ": it needs --compressed-adam N (the warm-up it compresses)\n";
    return 1;
  }
  if (!(outerLr > 0) || !std::isfinite(outerLr)) {
    llvm::errs() << "straitc: --outer-lr must be a finite number above 0 (got "
                 << llvm::format("%g", outerLr.getValue()) << ")\n";
    return 1;
  }
  if (!(outerMomentum >= 0 && outerMomentum < 1)) {
    llvm::errs() << "straitc: --outer-momentum must be in [0, 1) (got "
                 << llvm::format("%g", outerMomentum.getValue()) << ")\n";
    return 1;
  }
  if (loss.empty())
    for (const cl::Option *o : trainingFlags)
      if (o->getNumOccurrences()) {
        llvm::errs() << "straitc: --" << o->ArgStr << " configures the training step; it "
                     << "needs --loss\n";
        return 1;
      }

  DialectRegistry registry;
  strait::registerAllDialects(registry);
  MLIRContext context(registry);
  // A user's error names the model, op and field; the whole function's IR
  // after it ("see current operation") would bury it (strait-opt keeps it).
  context.printOpOnDiagnostic(false);
  llvm::SourceMgr sourceMgr;
  SourceMgrDiagnosticHandler diagHandler(sourceMgr, &context);

  DefaultTimingManager tm;
  applyDefaultTimingManagerCLOptions(tm);
  TimingScope timing = tm.getRootScope();

  strait::ONNXImportOptions opts;
  opts.shapeOnly = shapeOnly;
  std::string err = strait::parseInputShapes(llvm::join(inputShapes, ","), opts.inputShapes);
  if (!err.empty()) {
    llvm::errs() << "straitc: " << err << "\n";
    return 1;
  }
  TimingScope importTiming = timing.nest("import");
  OwningOpRef<ModuleOp> module =
      StringRef(inputFile).ends_with(".mlir")
          ? parseSourceFile<ModuleOp>(inputFile, sourceMgr, ParserConfig(&context))
          : strait::importONNXFile(inputFile, &context, opts);
  importTiming.stop();
  if (!module)
    return 1;

  if (emit == Emit::Plan) {
    if (clusterFile.empty()) {
      llvm::errs() << "straitc: --emit=plan needs --cluster FILE\n";
      return 1;
    }
    llvm::Expected<strait::ClusterModel> cluster = strait::loadClusterFile(clusterFile);
    if (cluster)
      cluster->allReduceBucketBytes = allReduceBucketMib * 1048576.0;
    if (!cluster) {
      llvm::errs() << "straitc: " << llvm::toString(cluster.takeError()) << "\n";
      return 1;
    }
    // The plan costs the graph the job compiles and plans: the forward
    // fusions (no T x T attention scores), the products in a mixed-precision
    // job's type and, with --loss, the training step after cast motion (what
    // the backward keeps, as the job's planner sees it).
    if (failed(runPlannedGraphPasses(*module)))
      return 1;
    TimingScope planTiming = timing.nest("plan");
    auto func = module->lookupSymbol<func::FuncOp>("main");
    strait::PartitionPlan partition;
    llvm::json::Value json = nullptr;
    std::optional<strait::PlanCompression> givenCodecs;
    if (!evaluatePlan.empty()) {
      // A job's plan on this cluster instead of a new one.
      strait::dist::StagePlanOptions sopts;
      sopts.clusterFile = clusterFile;
      sopts.strategy = strait::stringifyStrategy(strategy).str();
      sopts.localSteps = localSteps;
      sopts.recompute = effectiveRecompute();
      sopts.allReduceBucketBytes = allReduceBucketMib * 1048576.0;
      llvm::Expected<EvaluatedPlan> given = evaluateJobPlan(func, sopts);
      if (!given) {
        llvm::errs() << "straitc: --evaluate-plan " << llvm::toString(given.takeError())
                     << "\n";
        return 1;
      }
      json = strait::planToJSON(given->plan, *cluster);
      partition = std::move(given->plan.plan);
      givenCodecs = std::move(given->codecs);
    } else if (numStages > 0 || microBatches > 1) {
      // Forced stages or micro-batches: the plan a job compiled with these
      // flags applies (dist-assign-stages' analysis, GPipe), not the
      // planner's free choice.
      strait::dist::StagePlanOptions sopts;
      sopts.clusterFile = clusterFile;
      sopts.strategy = strait::stringifyStrategy(strategy).str();
      sopts.globalBatch = globalBatch;
      sopts.numStages = numStages;
      sopts.microBatches = microBatches;
      sopts.schedule = schedule;
      sopts.localSteps = localSteps;
      sopts.recompute = effectiveRecompute();
      sopts.allReduceBucketBytes = allReduceBucketMib * 1048576.0;
      llvm::Expected<strait::dist::StagePlanResult> staged =
          strait::dist::computeStagePlan(func, sopts);
      if (!staged) {
        llvm::errs() << "straitc: " << llvm::toString(staged.takeError()) << "\n";
        return 1;
      }
      partition = *staged->plan;
      json = std::move(staged->json);
    } else {
      strait::PlannerOptions popts;
      popts.strategy = strategy;
      popts.globalBatch = globalBatch.getValue();
      // A training job runs the IR's batch per replica and micro-batch: plan
      // at the micro-batch count it runs, as `-o DIR` does (StagePlan.cpp).
      popts.fixedReplicaBatch = globalBatch > 0 && !loss.empty();
      popts.localSteps = static_cast<unsigned>(localSteps.getValue());
      popts.recompute = effectiveRecompute() == "full"   ? strait::RecomputeMode::Full
                        : effectiveRecompute() == "auto" ? strait::RecomputeMode::Auto
                                                         : strait::RecomputeMode::None;
      if (schedule == "gpipe")
        popts.schedules = {strait::Schedule::GPipe};
      else if (schedule == "1f1b")
        popts.schedules = {strait::Schedule::OneFOneB};
      else if (schedule != "auto") {
        llvm::errs() << "straitc: unknown --schedule '" << schedule
                     << "' (auto, gpipe or 1f1b)\n";
        return 1;
      }
      llvm::Expected<strait::ModelPlan> plan = strait::planFunction(func, *cluster, popts);
      if (!plan) {
        llvm::errs() << "straitc: " << llvm::toString(plan.takeError()) << "\n";
        return 1;
      }
      if (!plan->plan.feasible) {
        llvm::errs() << "straitc: no plan fits: " << plan->plan.message << "\n";
        return 1;
      }
      json = strait::planToJSON(*plan, *cluster);
      partition = std::move(plan->plan);
    }
    planTiming.stop();
    std::string compressionText;
    llvm::raw_string_ostream compressionOS(compressionText);
    std::optional<strait::SimulationResult> timeline;
    straitc::CompressionFlags flags = compressionFlags();
    flags.codecs = givenCodecs ? &*givenCodecs : nullptr;
    if (failed(straitc::reportCompression(flags, partition, *cluster,
                                          compressionOS, &json, /*perLink=*/true, nullptr,
                                          tracePlan.empty() ? nullptr : &timeline)))
      return 1;
    if (failed(writePlanTrace(timeline, partition, *cluster, {})))
      return 1;
    if (!planJson.empty()) {
      std::string err;
      auto jsonOut = openOutputFile(planJson, &err);
      if (!jsonOut) {
        llvm::errs() << "straitc: " << err << "\n";
        return 1;
      }
      jsonOut->os() << llvm::formatv("{0:2}", json) << "\n";
      jsonOut->keep();
    }
    std::string err;
    auto out = openOutputFile(outputFile, &err);
    if (!out) {
      llvm::errs() << "straitc: " << err << "\n";
      return 1;
    }
    out->os() << strait::formatPlan(partition, *cluster) << compressionText;
    out->keep();
    return 0;
  }

  if (emit == Emit::Kernels) {
    // The kernels of the graph the planner costs (as --emit=plan builds it),
    // each once, for strait-probe --kernels to time (docs/planner.md).
    if (outputFile == "-") {
      llvm::errs() << "straitc: --emit=kernels needs -o FILE\n";
      return 1;
    }
    if (failed(runPlannedGraphPasses(*module)))
      return 1;
    // The fused elementwise kernels the job's program runs, on a copy of
    // the step whose ops carry their signatures (charged to them).
    auto main = module->lookupSymbol<func::FuncOp>("main");
    func::FuncOp fused;
    if (fuse == strait::FuseMode::Elementwise) {
      fused = main.clone();
      fused.setName("main.fused");
      module->push_back(fused);
      strait::tagKernelSignatures(fused);
      PassManager fpm(&context, func::FuncOp::getOperationName());
      fpm.addPass(strait::graph::createGraphFuseElementwise());
      if (failed(fpm.run(fused)))
        return 1;
    }
    unsigned count = 0;
    auto kernels = strait::buildKernelModule(main, &count, fused);
    if (fused)
      fused.erase();
    if (!kernels) {
      llvm::errs() << "straitc: " << llvm::toString(kernels.takeError()) << "\n";
      return 1;
    }
    if (failed(strait::writeKernelList((*kernels)->lookupSymbol<func::FuncOp>("main"),
                                       outputFile)))
      return 1;
    llvm::outs() << "straitc: wrote " << outputFile << " (" << count << " kernels)\n";
    return 0;
  }

  // With a cluster, -o DIR (or --emit=program) compiles the multi-rank job.
  bool jobByDefault = emit.getNumOccurrences() == 0 && outputFile != "-";
  // Without a cluster, a training step is one stage on one rank.
  if ((emit == Emit::Program || jobByDefault) && (!clusterFile.empty() || !loss.empty())) {
    if (outputFile == "-") {
      llvm::errs() << "straitc: --cluster and --loss need -o DIR\n";
      return 1;
    }
    return compileJob(*module, timing);
  }

  if (emit == Emit::Program) {
    if (outputFile == "-") {
      llvm::errs() << "straitc: --emit=program needs -o DIR\n";
      return 1;
    }
    // A forward-only program gets the forward-graph fusions of the pipeline
    // and its elementwise fusion (not the stage split): GPT-2's GELU is one
    // kernel instead of eight.
    PassManager pm(&context);
    if (failed(applyPassManagerCLOptions(pm)))
      return 1;
    pm.enableTiming(timing);
    strait::addForwardFusionPasses(pm, fuseRmsNorm, fuseAttention, foldTransposes, fuseRotary,
                                   moeExperts);
    if (fuse == strait::FuseMode::Elementwise)
      pm.addNestedPass<func::FuncOp>(strait::graph::createGraphFuseElementwise());
    if (failed(pm.run(*module)))
      return 1;
    auto func = module->lookupSymbol<func::FuncOp>("main");
    strait::RankExport rank;
    rank.function = func;
    strait::JobExportOptions jobOpts;
    jobOpts.modelName = inputFile;
    jobOpts.seed = seed;
    jobOpts.parameterCopies = parameterCopies;
    jobOpts.loraJSON = loraRecord();
    TimingScope exportTiming = timing.nest("export");
    if (failed(strait::writeJob(*module, {rank}, outputFile, jobOpts)))
      return 1;
    llvm::outs() << "straitc: wrote " << outputFile << "/plan.pb (1 rank)\n";
    return 0;
  }

  std::string error;
  std::unique_ptr<llvm::ToolOutputFile> out = openOutputFile(outputFile, &error);
  if (!out) {
    llvm::errs() << "straitc: " << error << "\n";
    return 1;
  }
  if (emit == Emit::MLIR && (!clusterFile.empty() || !loss.empty())) {
    // The IR after the pipeline, as `strait-opt --strait-pipeline` prints it.
    std::optional<strait::dist::StagePlanResult> report;
    if (failed(runPipeline(*module, timing, report)))
      return 1;
  }
  if (emit == Emit::MLIR) {
    OpPrintingFlags flags;
    if (!printWeights)
      flags.elideLargeResourceString(64).elideLargeElementsAttrs(64);
    module->print(out->os(), flags);
    out->os() << "\n"; // as strait-opt prints it
  } else {
    strait::graph::printSummary(*module, strait::graph::summarize(*module), out->os());
  }
  out->keep();
  return 0;
}
