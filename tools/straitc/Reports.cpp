//===- Reports.cpp - straitc's reports on the compiled job ----------------===//

#include "Reports.h"

#include "strait/Analysis/Compression.h"
#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"

#include <map>

using namespace mlir;

namespace straitc {

/// With --compress or --compress-link: the codec per link of the plan, and
/// the simulated iteration time without and with them (text and JSON).
llvm::Expected<strait::PlanCompression> chooseCodecs(const CompressionFlags &flags,
                                                     const strait::PartitionPlan &plan,
                                                     const strait::ClusterModel &cluster) {
  strait::CompressionOptions copts;
  copts.mode = flags.mode;
  copts.localSteps = flags.localSteps;
  copts.gradientTopK = flags.gradientTopK;
  copts.lossScaling = flags.lossScaling;
  copts.codecs = flags.codecs;
  for (const std::string &text : flags.links) {
    auto o = strait::parseLinkOverride(text);
    if (!o)
      return llvm::createStringError("--compress-link=" + llvm::toString(o.takeError()));
    copts.links.push_back(std::move(*o));
  }
  return strait::compressPlan(plan, cluster, copts);
}

llvm::Expected<EvaluatedPlan> evaluateJobPlan(func::FuncOp main,
                                              const strait::dist::StagePlanOptions &sopts,
                                              const std::string &dir,
                                              const CompressionFlags &flags) {
  std::string planFile = dir + "/plan.json";
  std::string planned = dir + "/cluster.yaml";
  if (!llvm::sys::fs::exists(planFile) || !llvm::sys::fs::exists(planned))
    return llvm::createStringError(dir + " is not a job folder compiled with --cluster (it "
                                   "needs plan.json and cluster.yaml)");
  llvm::Expected<strait::ModelPlan> here = strait::dist::evaluatePlanFile(main, sopts, planFile);
  if (!here)
    return here.takeError();
  EvaluatedPlan out{std::move(*here), std::nullopt};
  if (flags.mode == "none" && flags.links.empty())
    return out;
  // The codecs the job runs: chosen for its plan on the cluster it was
  // planned for, then timed on this one.
  strait::dist::StagePlanOptions there = sopts;
  there.clusterFile = planned;
  llvm::Expected<strait::ModelPlan> old = strait::dist::evaluatePlanFile(main, there, planFile);
  if (!old)
    return old.takeError();
  llvm::Expected<strait::ClusterModel> cluster = strait::loadClusterFile(planned);
  if (!cluster)
    return cluster.takeError();
  cluster->allReduceBucketBytes = sopts.allReduceBucketBytes;
  llvm::Expected<strait::PlanCompression> codecs = chooseCodecs(flags, old->plan, *cluster);
  if (!codecs)
    return codecs.takeError();
  out.codecs = std::move(*codecs);
  return out;
}

LogicalResult reportCompression(const CompressionFlags &flags,
                                const strait::PartitionPlan &plan,
                                const strait::ClusterModel &cluster, llvm::raw_ostream &os,
                                llvm::json::Value *json, bool perLink, double *predicted,
                                std::optional<strait::SimulationResult> *timeline) {
  if (flags.mode == "none" && flags.links.empty()) {
    if (predicted || timeline) { // the plan without codecs
      if (auto sim = strait::simulatePlan(plan, cluster)) {
        if (predicted)
          *predicted = sim->iterationTime;
        if (timeline)
          *timeline = std::move(*sim);
      } else {
        llvm::consumeError(sim.takeError());
      }
    }
    return success();
  }
  auto c = chooseCodecs(flags, plan, cluster);
  if (!c) {
    llvm::errs() << "straitc: " << llvm::toString(c.takeError()) << "\n";
    return failure();
  }
  auto without = strait::simulatePlan(plan, cluster);
  auto with = strait::simulatePlan(plan, cluster, &*c);
  if (!without || !with) {
    llvm::errs() << "straitc: cannot simulate the plan: "
                 << llvm::toString(without ? with.takeError() : without.takeError()) << "\n";
    return failure();
  }
  if (perLink)
    os << "compression (--compress=" << flags.mode << "):\n"
       << strait::formatCompression(*c, plan, cluster);
  else // a job: the codecs are listed from its IR; the residuals are not
    os << strait::formatResidualMemory(*c, plan);
  double t0 = without->iterationTime, t1 = with->iterationTime;
  if (predicted)
    *predicted = t1;
  if (timeline)
    *timeline = std::move(*with);
  os << llvm::formatv("predicted iteration (simulated): {0:f4} s without compression, {1:f4} s "
                      "with ({2:f2}x throughput)\n",
                      t0, t1, t1 > 0 ? t0 / t1 : 0.0);
  // Compressed AdamW: the N warm-up steps all-reduce exact f32, or the
  // dense codec of --compressed-adam-warmup, where the others compress.
  std::optional<llvm::json::Object> warmupJson;
  if (flags.compressedAdam > 0 && llvm::any_of(c->allReduce, [](const strait::Codec &x) {
        return !x.isNone();
      })) {
    strait::Codec warm;
    if (flags.warmupCodec != "none") {
      auto parsed = strait::parseCodec(flags.warmupCodec);
      if (!parsed) {
        llvm::errs() << "straitc: --compressed-adam-warmup " << flags.warmupCodec << ": "
                     << llvm::toString(parsed.takeError()) << "\n";
        return failure();
      }
      warm = *parsed;
      warm.errorFeedback = true;
    }
    strait::PlanCompression w =
        strait::warmupCompression(*c, plan, cluster, warm, flags.localSteps);
    auto sim = strait::simulatePlan(plan, cluster, &w);
    if (!sim) {
      llvm::errs() << "straitc: cannot simulate the warm-up steps: "
                   << llvm::toString(sim.takeError()) << "\n";
      return failure();
    }
    double tw = sim->iterationTime;
    double plainBytes = 0, wireBytes = 0; // the compressed all-reduces, per iteration
    llvm::json::Array reduces;
    for (size_t j = 0; j < c->allReduce.size(); ++j) {
      if (c->allReduce[j].isNone())
        continue;
      double g = plan.stages[j].gradBytes;
      double bytes = strait::encodedBytes(warm, g / 4, 4);
      plainBytes += g;
      wireBytes += bytes;
      reduces.push_back(llvm::json::Object{{"stage", int64_t(j)},
                                           {"codec", strait::formatCodec(warm)},
                                           {"wire_bytes", bytes},
                                           {"plain_bytes", g},
                                           {"time", w.allReduceTime[j]}});
    }
    std::string name = warm.isNone() ? std::string("exact f32")
                                     : llvm::formatv("{0} ({1:f2}x fewer bytes than f32)",
                                                     strait::formatCodec(warm, true),
                                                     wireBytes > 0 ? plainBytes / wireBytes : 0.0)
                                           .str();
    os << llvm::formatv("compressed AdamW: the {0} warm-up step(s) all-reduce {1}: predicted "
                        "{2:f4} s an iteration",
                        flags.compressedAdam, name, tw);
    llvm::json::Object obj{{"steps", flags.compressedAdam},
                           {"codec", warm.isNone() ? "none" : strait::formatCodec(warm)},
                           {"all_reduces", std::move(reduces)},
                           {"iteration_time", tw}};
    if (flags.totalSteps > flags.compressedAdam) {
      double n = double(flags.compressedAdam), total = double(flags.totalSteps);
      double run = n * tw + (total - n) * t1;
      os << llvm::formatv("; the whole run of {0} steps (--total-steps): {1:f1} s, {2:f2}x the "
                          "throughput without compression",
                          flags.totalSteps, run, run > 0 ? total * t0 / run : 0.0);
      obj["total_steps"] = flags.totalSteps;
      obj["run_time"] = run;
    }
    os << "\n";
    warmupJson = std::move(obj);
  }
  if (auto *obj = json ? json->getAsObject() : nullptr) {
    llvm::json::Array links;
    for (size_t j = 0; j < c->forward.size(); ++j)
      for (bool backward : {false, true}) {
        const strait::Codec &codec = backward ? c->backward[j] : c->forward[j];
        links.push_back(llvm::json::Object{
            {"from_stage", int64_t(backward ? j + 1 : j)},
            {"to_stage", int64_t(backward ? j : j + 1)},
            {"codec", strait::formatCodec(codec)},
            {"error_feedback", codec.errorFeedback},
            {"wire_bytes", backward ? c->backwardBytes[j] : c->forwardBytes[j]},
            {"plain_bytes", plan.stages[j].sendBytes},
            {"time", backward ? c->backwardTime[j] : c->forwardTime[j]}});
      }
    llvm::json::Array reduces;
    for (size_t j = 0; j < c->allReduce.size(); ++j)
      reduces.push_back(llvm::json::Object{{"stage", int64_t(j)},
                                           {"codec", strait::formatCodec(c->allReduce[j])},
                                           {"error_feedback", c->allReduce[j].errorFeedback},
                                           {"time", c->allReduceTime[j]}});
    // Per stage: the error-feedback residuals beside the plan's peak memory.
    llvm::json::Array residuals;
    for (size_t j = 0; j < c->residualBytes.size(); ++j)
      if (c->residualBytes[j] > 0 || c->droppedResidual[j] > 0)
        residuals.push_back(llvm::json::Object{
            {"stage", int64_t(j)},
            {"residual_bytes", c->residualBytes[j]},
            {"dropped_residual_bytes", c->droppedResidual[j]},
            {"peak_with_residuals_bytes", plan.stages[j].peakMemory + c->residualBytes[j]},
            {"capacity_bytes", plan.stages[j].capacity}});
    llvm::json::Array tied; // per stage holding a copy: its per-iteration exchange
    for (size_t j = 0; j < c->tied.size(); ++j)
      if (c->tiedPlainBytes[j] > 0)
        tied.push_back(llvm::json::Object{{"stage", int64_t(j)},
                                          {"codec", strait::formatCodec(c->tied[j])},
                                          {"error_feedback", c->tied[j].errorFeedback},
                                          {"wire_bytes", c->tiedBytes[j]},
                                          {"plain_bytes", c->tiedPlainBytes[j]},
                                          {"time", c->tiedTime[j]}});
    (*obj)["compression"] = llvm::json::Object{{"mode", flags.mode},
                                               {"links", std::move(links)},
                                               {"all_reduces", std::move(reduces)},
                                               {"tied_exchanges", std::move(tied)},
                                               {"error_feedback_memory", std::move(residuals)},
                                               {"iteration_time_without", t0},
                                               {"iteration_time_with", t1}};
    if (warmupJson)
      (*(*obj)["compression"].getAsObject())["compressed_adam_warmup"] = std::move(*warmupJson);
  }
  return success();
}

std::vector<double> errorFeedbackBytes(ModuleOp module, strait::dist::PlanAttr plan,
                                       bool lossScaling) {
  std::vector<double> bytes(plan.getNumStages(), 0);
  module.walk([&](strait::dist::CompressOp c) {
    std::optional<int64_t> stage = strait::dist::getStage(c);
    if (!c.getErrorFeedback() || !stage || *stage < 0 || *stage >= plan.getNumStages())
      return;
    auto type = cast<RankedTensorType>(c.getValue().getType());
    double plain = double(type.getNumElements()) * ((type.getElementTypeBitWidth() + 7) / 8);
    // A gradient all-reduce keeps what its exchange encodes; a tied
    // variable's partial gradient, sent to every other copy, one stream.
    strait::dist::AllReduceOp reduce;
    for (Operation *u : c.getEncoded().getUsers())
      if (auto r = dyn_cast<strait::dist::AllReduceOp>(u))
        reduce = r;
    if (!reduce) {
      bytes[*stage] += lossScaling ? 2 * plain : plain;
      return;
    }
    std::vector<size_t> sizes;
    if (ArrayAttr islands = reduce.getIslandsAttr())
      for (auto island : islands.getAsRange<DenseI64ArrayAttr>())
        sizes.push_back(island.size());
    else
      sizes.assign(reduce.getGroup().size(), 1);
    bytes[*stage] += strait::allReduceResidualBytes(sizes, plain, lossScaling);
  });
  return bytes;
}

/// One line per compressed link of the compiled job (what
/// dist-insert-compression inserted): "stage 0 -> 1: int8 (3 values)".
void printJobCompression(ModuleOp module, llvm::raw_ostream &os) {
  std::map<std::string, int> links;
  module.walk([&](strait::dist::CompressOp c) {
    if (c.getEncoded().use_empty())
      return;
    // A tied variable's partial gradient feeds sends and a local decompress.
    Operation *user = *c.getEncoded().getUsers().begin();
    for (Operation *u : c.getEncoded().getUsers())
      if (isa<strait::dist::SendOp>(u))
        user = u;
    std::string codec = strait::dist::stringifyCodec(c.getCodec()).str();
    if (FloatAttr r = c.getRatioAttr()) { // topk:R, topk:R:int8 as --compress spells them
      auto [name, values] = llvm::StringRef(codec).split('_');
      std::string ratio;
      llvm::raw_string_ostream(ratio) << llvm::format("%g", r.getValueAsDouble());
      codec = name.str() + ":" + ratio + (values.empty() ? "" : ":" + values.str());
    }
    if (c.getErrorFeedback())
      codec += "+ef";
    if (auto adapt = c->getAttrOfType<DenseF64ArrayAttr>("dist.topk_adapt");
        adapt && adapt.size() == 2)
      llvm::raw_string_ostream(codec) << llvm::format(" adaptive %g:%g", adapt[0], adapt[1]);
    std::optional<int64_t> stage = strait::dist::getStage(c);
    std::string key;
    if (auto send = dyn_cast<strait::dist::SendOp>(user))
      key = llvm::formatv("stage {0} -> {1}{2}: {3}", stage.value_or(-1), send.getPeer(),
                          send->hasAttr("dist.per_step") ? " (per step)" : "", codec);
    else
      key = llvm::formatv("all-reduce of stage {0}: {1}", stage.value_or(-1), codec);
    ++links[key];
  });
  for (auto &[key, count] : links)
    os << "straitc: compressed " << key << " (" << count
       << (count == 1 ? " value)\n" : " values)\n");
}

/// --local-steps H > 1: which stages synchronize every H steps (their
/// gradient all-reduce spans several islands, as the exporter's
/// applyOuterSync looks for); a warning when none does (the flag then
/// changes nothing).
void reportLocalSteps(ModuleOp module, strait::dist::PlanAttr plan, int64_t localSteps,
                      double outerLr, double outerMomentum) {
  std::vector<int64_t> synced;
  for (int64_t s = 0; s < plan.getNumStages(); ++s) {
    auto func = module.lookupSymbol<func::FuncOp>(("stage" + llvm::Twine(s)).str());
    bool spans = false;
    if (func)
      func.walk([&](strait::dist::AllReduceOp reduce) {
        ArrayAttr islands = reduce.getIslandsAttr();
        spans |= islands && islands.size() >= 2;
      });
    if (spans)
      synced.push_back(s);
  }
  if (synced.empty()) {
    llvm::errs() << "straitc: warning: --local-steps " << localSteps
                 << " ignored: no stage has data-parallel replicas on several bandwidth "
                    "islands (the job trains synchronously)\n";
    return;
  }
  llvm::outs() << "straitc: local steps: stage" << (synced.size() > 1 ? "s" : "");
  for (int64_t s : synced)
    llvm::outs() << " " << s;
  llvm::outs() << " reduce gradients inside each island and average parameters across islands "
               << "every " << localSteps << " steps (outer lr "
               << llvm::format("%g", outerLr) << ", momentum "
               << llvm::format("%g", outerMomentum) << ")\n";
}

} // namespace straitc
