//===- StagePlan.cpp - The stage plan dist-assign-stages applies ----------===//

#include "strait/Dialect/Dist/StagePlan.h"

#include "strait/Dialect/Graph/GraphOps.h"

#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSwitch.h"
#include "llvm/Support/MemoryBuffer.h"
#include <cmath>
#include "llvm/Support/FormatVariadic.h"

using namespace mlir;
using namespace strait;
using namespace strait::dist;
namespace json = llvm::json;

static llvm::Error planError(const llvm::Twine &message) {
  return llvm::createStringError(llvm::inconvertibleErrorCode(), message);
}

static llvm::Expected<PlannerStrategy> parseStrategy(llvm::StringRef s) {
  std::optional<PlannerStrategy> v =
      llvm::StringSwitch<std::optional<PlannerStrategy>>(s)
          .Case("strait", PlannerStrategy::Strait)
          .Case("uniform", PlannerStrategy::Uniform)
          .Case("pipedream", PlannerStrategy::PipeDream)
          .Case("dtfm", PlannerStrategy::DTFM)
          .Default(std::nullopt);
  if (!v)
    return planError("unknown strategy '" + s +
                     "' (expected strait, uniform, pipedream or dtfm)");
  return *v;
}

/// Numbers ranks stage by stage, replica by replica, and names devices.
static void fillStages(StagePlanResult &out, const PartitionPlan &plan,
                       const ClusterModel &cluster) {
  int64_t rank = 0;
  for (const StagePlan &s : plan.stages) {
    StagePlanResult::Stage st;
    for (unsigned d : s.devices) {
      st.devices.push_back(cluster.devices[d].name);
      st.ranks.push_back(rank++);
    }
    out.stages.push_back(std::move(st));
  }
  out.oneFOneB = plan.schedule == Schedule::OneFOneB;
  out.microBatches = plan.microBatches;
  for (const StagePlan &s : plan.stages)
    out.recompute.push_back(s.recompute);
  if (out.oneFOneB)
    for (const StagePlan &s : plan.stages)
      out.warmup.push_back(std::max<int64_t>(0, int64_t(s.inFlight) - 1));
}

/// `numStages` stages of equal block counts over equal chunks of the
/// cluster's devices in file order, evaluated by the planner's cost model.
static llvm::Expected<ModelPlan> forcedPlan(func::FuncOp func, const ClusterModel &cluster,
                                            const PlannerOptions &popts,
                                            int64_t numStages, unsigned microBatches) {
  llvm::Expected<ModelPlan> prepared = prepareModelPlan(func, cluster, popts.maxBlocks);
  if (!prepared)
    return prepared.takeError();
  ModelPlan mp = std::move(*prepared);
  size_t numBlocks = mp.coarse.blocks.size(), numDevices = cluster.devices.size();
  if (static_cast<size_t>(numStages) > numBlocks || static_cast<size_t>(numStages) > numDevices)
    return planError(llvm::formatv("num-stages={0} exceeds the model's {1} blocks or the "
                                   "cluster's {2} devices",
                                   numStages, numBlocks, numDevices));
  std::vector<StageAssignment> stages(numStages);
  for (int64_t i = 0; i < numStages; ++i) {
    stages[i].firstBlock = i * numBlocks / numStages;
    stages[i].endBlock = (i + 1) * numBlocks / numStages;
    for (size_t d = i * numDevices / numStages; d < (i + 1) * numDevices / numStages; ++d)
      stages[i].devices.push_back(d);
  }
  mp.plan = evaluateStages(mp.coarse, cluster, popts, stages, microBatches,
                           popts.schedules.front());
  mp.plan.strategy = popts.strategy;
  assignNodeStages(mp);
  return mp;
}

/// The job runs the IR's batch b per replica and micro-batch: an iteration
/// is b x M x R samples for M micro-batches and R replicas a stage. The
/// planner chose M for its own micro-batch (global batch / M over the
/// stage's replicas); re-evaluate the chosen stages at the M that makes the
/// job run the global batch (or at the planner's M without one), so that
/// the plan's figures describe what the job runs.
static llvm::Error matchJobBatch(ModelPlan &mp, const ClusterModel &cluster,
                                 PlannerOptions popts, const StagePlanOptions &o) {
  double b = mp.costs.graph.batchSamples;
  size_t R = mp.plan.stages.front().devices.size();
  for (const StagePlan &s : mp.plan.stages)
    if (s.devices.size() != R)
      return llvm::Error::success(); // the exporter reports unequal replicas
  unsigned M = mp.plan.microBatches;
  if (o.globalBatch > 0) {
    double perMicroBatch = b * R, m = o.globalBatch / perMicroBatch;
    if (m < 1 || m != std::floor(m))
      return planError(llvm::formatv(
          "the global batch {0:0} is not a multiple of the IR's batch {1:0} x {2} "
          "replicas a stage; pass --global-batch {3:0} (or change the input's batch)",
          o.globalBatch, b, R, std::max(1.0, std::round(m)) * perMicroBatch));
    if (o.microBatches > 1 && static_cast<unsigned>(o.microBatches) != unsigned(m))
      return planError(llvm::formatv(
          "--micro-batches {0} of the IR's batch {1:0} on {2} replicas make {3:0} samples, "
          "not the global batch {4:0}",
          o.microBatches, b, R, o.microBatches * b * R, o.globalBatch));
    M = unsigned(m);
  }
  popts.globalBatch = b * R * M;
  if (M == mp.plan.microBatches && popts.globalBatch == mp.plan.globalBatch)
    return llvm::Error::success();
  std::vector<StageAssignment> stages;
  for (const StagePlan &s : mp.plan.stages)
    stages.push_back({s.firstBlock, s.endBlock, s.devices});
  PartitionPlan plan = evaluateStages(mp.coarse, cluster, popts, stages, M, mp.plan.schedule);
  plan.strategy = mp.plan.strategy;
  if (!plan.feasible)
    return planError(llvm::formatv("the plan does not fit with {0} micro-batches of the "
                                   "IR's batch {1:0}: {2}",
                                   M, b, plan.message));
  mp.plan = std::move(plan);
  return llvm::Error::success();
}

/// The planner's options for `o` (strategy, batch, local steps, recompute,
/// micro-batches, schedules).
static llvm::Expected<PlannerOptions> plannerOptions(const StagePlanOptions &o) {
  PlannerOptions popts;
  llvm::Expected<PlannerStrategy> strategy = parseStrategy(o.strategy);
  if (!strategy)
    return strategy.takeError();
  popts.strategy = *strategy;
  popts.globalBatch = o.globalBatch;
  popts.localSteps = static_cast<unsigned>(std::max<int64_t>(1, o.localSteps));
  popts.recompute = o.recompute == "full"   ? RecomputeMode::Full
                    : o.recompute == "auto" ? RecomputeMode::Auto
                                            : RecomputeMode::None;
  // With a global batch the job runs the IR's batch per replica and
  // micro-batch (matchJobBatch): every strategy plans at the M it runs.
  popts.fixedReplicaBatch = o.globalBatch > 0;
  // More than one micro-batch asked for: the planner uses that count.
  if (o.microBatches > 1)
    popts.microBatchCounts = {static_cast<unsigned>(o.microBatches)};
  // The exporter orders each rank's micro-batches by the plan's schedule.
  if (o.schedule == "gpipe")
    popts.schedules = {Schedule::GPipe};
  else if (o.schedule == "1f1b")
    popts.schedules = {Schedule::OneFOneB};
  return popts;
}

static llvm::Expected<ClusterModel> loadCluster(const StagePlanOptions &o) {
  llvm::Expected<ClusterModel> cluster = loadClusterFile(o.clusterFile);
  if (cluster)
    cluster->allReduceBucketBytes = o.allReduceBucketBytes;
  return cluster;
}

static llvm::Expected<StagePlanResult> clusterPlan(func::FuncOp func,
                                                   const StagePlanOptions &o) {
  llvm::Expected<ClusterModel> cluster = loadCluster(o);
  if (!cluster)
    return cluster.takeError();
  llvm::Expected<PlannerOptions> planner = plannerOptions(o);
  if (!planner)
    return planner.takeError();
  const PlannerOptions &popts = *planner;
  llvm::Expected<ModelPlan> mp =
      o.numStages > 0
          ? forcedPlan(func, *cluster, popts, o.numStages,
                       static_cast<unsigned>(std::max<int64_t>(1, o.microBatches)))
          : planFunction(func, *cluster, popts);
  if (!mp)
    return mp.takeError();
  if (!mp->plan.feasible)
    return planError("no plan fits: " + mp->plan.message);
  if (llvm::Error err = matchJobBatch(*mp, *cluster, popts, o))
    return std::move(err);
  StagePlanResult out;
  out.ops = mp->costs.ops;
  out.stageOfNode = mp->stageOfNode;
  fillStages(out, mp->plan, *cluster);
  out.text = formatPlan(mp->plan, *cluster);
  out.json = planToJSON(*mp, *cluster);
  out.plan = mp->plan;
  return out;
}

/// The plan given by `boundaries` and `replicas`: devices are named after
/// their ranks.
static llvm::Expected<StagePlanResult> explicitPlan(func::FuncOp func,
                                                    const StagePlanOptions &o) {
  // The cost nodes, as buildCostGraph numbers them, without needing a cost
  // model (tests and ops that have none yet).
  StagePlanResult out;
  for (Operation &op : func.getBody().front())
    if (!isa<graph::ConstantOp, graph::ReadVariableOp, func::ReturnOp>(op))
      out.ops.push_back(&op);
  int64_t numNodes = out.ops.size(), numStages = o.boundaries.size() + 1;
  for (auto [i, b] : llvm::enumerate(o.boundaries))
    if (b <= (i ? o.boundaries[i - 1] : 0) || b >= numNodes)
      return planError(llvm::formatv("boundaries must increase within 1..{0} (the "
                                     "function has {1} cost nodes); got {2}",
                                     numNodes - 1, numNodes, b));
  if (!o.replicas.empty() && static_cast<int64_t>(o.replicas.size()) != numStages)
    return planError(llvm::formatv("replicas lists {0} stages, boundaries give {1}",
                                   o.replicas.size(), numStages));
  if (o.microBatches < 1)
    return planError("micro-batches must be at least 1");
  out.stageOfNode.assign(numNodes, 0);
  for (int64_t n = 0, s = 0; n < numNodes; ++n) {
    while (s + 1 < numStages && n >= o.boundaries[s])
      ++s;
    out.stageOfNode[n] = s;
  }
  int64_t rank = 0;
  json::Array stagesJSON;
  std::string text;
  llvm::raw_string_ostream os(text);
  for (int64_t s = 0; s < numStages; ++s) {
    int64_t n = o.replicas.empty() ? 1 : o.replicas[s];
    if (n < 1)
      return planError(llvm::formatv("stage {0} needs at least one replica", s));
    StagePlanResult::Stage st;
    json::Array devices;
    os << "stage " << s << ":";
    for (int64_t r = 0; r < n; ++r, ++rank) {
      st.devices.push_back("rank" + std::to_string(rank));
      st.ranks.push_back(rank);
      devices.push_back(st.devices.back());
      os << " " << st.devices.back();
    }
    os << " (" << llvm::count(out.stageOfNode, s) << " ops)\n";
    stagesJSON.push_back(json::Object{{"stage", s}, {"devices", std::move(devices)},
                                      {"ops", (int64_t)llvm::count(out.stageOfNode, s)}});
    out.stages.push_back(std::move(st));
  }
  out.microBatches = o.microBatches;
  out.oneFOneB = o.schedule != "gpipe";
  // Without a planner, only "full" recomputes (every stage).
  out.recompute.assign(numStages, o.recompute == "full");
  out.text = std::move(text);
  out.json = json::Object{{"strategy", "explicit"},
                          {"schedule", out.oneFOneB ? "1f1b" : "gpipe"},
                          {"micro_batches", o.microBatches},
                          {"stages", std::move(stagesJSON)}};
  return out;
}

llvm::Expected<StagePlanResult>
strait::dist::computeStagePlan(func::FuncOp func, const StagePlanOptions &options) {
  if (options.schedule != "auto" && options.schedule != "gpipe" && options.schedule != "1f1b")
    return planError("unknown schedule '" + options.schedule + "' (auto, gpipe or 1f1b)");
  if (options.recompute != "none" && options.recompute != "auto" && options.recompute != "full")
    return planError("unknown recompute mode '" + options.recompute + "' (none, auto or full)");
  if (!options.clusterFile.empty()) {
    if (!options.boundaries.empty())
      return planError("give either a cluster or boundaries, not both");
    return clusterPlan(func, options);
  }
  if (options.numStages > 0)
    return planError("num-stages needs a cluster file");
  return explicitPlan(func, options);
}

llvm::Expected<ModelPlan> strait::dist::evaluatePlanFile(func::FuncOp func,
                                                         const StagePlanOptions &options,
                                                         llvm::StringRef planFile) {
  auto fail = [&](const llvm::Twine &what) {
    return planError(planFile + ": " + what);
  };
  llvm::ErrorOr<std::unique_ptr<llvm::MemoryBuffer>> text =
      llvm::MemoryBuffer::getFile(planFile, /*IsText=*/true);
  if (!text)
    return planError("cannot read " + planFile + ": " + text.getError().message());
  llvm::Expected<json::Value> parsed = json::parse((*text)->getBuffer());
  if (!parsed)
    return fail("not JSON: " + llvm::toString(parsed.takeError()));
  const json::Object *root = parsed->getAsObject();
  if (!root)
    return fail("not a JSON object");
  if (root->getString("strategy") == "explicit")
    return fail("an explicit plan (straitc without --cluster) has no blocks to evaluate");
  std::optional<int64_t> microBatches = root->getInteger("micro_batches");
  std::optional<llvm::StringRef> schedule = root->getString("schedule");
  std::optional<double> globalBatch = root->getNumber("global_batch");
  const json::Array *stagesJSON = root->getArray("stages");
  if (!microBatches || *microBatches < 1)
    return fail("field 'micro_batches' is missing or not a count >= 1");
  if (!schedule || (*schedule != "1f1b" && *schedule != "gpipe"))
    return fail("field 'schedule' is missing or not 1f1b or gpipe");
  if (!globalBatch || !(*globalBatch > 0))
    return fail("field 'global_batch' is missing or not positive");
  if (!stagesJSON || stagesJSON->empty())
    return fail("field 'stages' is missing or empty");
  llvm::Expected<ClusterModel> cluster = loadCluster(options);
  if (!cluster)
    return cluster.takeError();
  llvm::Expected<PlannerOptions> planner = plannerOptions(options);
  if (!planner)
    return planner.takeError();
  PlannerOptions popts = *planner;
  popts.globalBatch = *globalBatch;
  llvm::Expected<ModelPlan> prepared = prepareModelPlan(func, *cluster, popts.maxBlocks);
  if (!prepared)
    return prepared.takeError();
  ModelPlan mp = std::move(*prepared);
  llvm::StringMap<unsigned> byName;
  for (unsigned d = 0; d < cluster->size(); ++d)
    byName[cluster->devices[d].name] = d;
  std::vector<StageAssignment> stages;
  std::vector<int64_t> ops;
  size_t numBlocks = mp.coarse.blocks.size();
  for (auto [i, v] : llvm::enumerate(*stagesJSON)) {
    std::string where = llvm::formatv("stage {0}: ", i).str();
    const json::Object *st = v.getAsObject();
    const json::Array *blocks = st ? st->getArray("blocks") : nullptr;
    const json::Array *devices = st ? st->getArray("devices") : nullptr;
    std::optional<int64_t> opCount = st ? st->getInteger("ops") : std::nullopt;
    std::optional<int64_t> first, end;
    if (blocks && blocks->size() == 2) {
      first = (*blocks)[0].getAsInteger();
      end = (*blocks)[1].getAsInteger();
    }
    if (!first || !end || !devices || devices->empty() || !opCount)
      return fail(where + "needs 'blocks' [first, end], 'devices' and 'ops'");
    int64_t expected = stages.empty() ? 0 : stages.back().endBlock;
    if (*first != expected || *end <= *first || *end > static_cast<int64_t>(numBlocks))
      return fail(where + llvm::formatv("blocks [{0}, {1}] do not continue the stages before "
                                        "within this model's {2} blocks (from {3})",
                                        *first, *end, numBlocks, expected));
    StageAssignment a;
    a.firstBlock = static_cast<unsigned>(*first);
    a.endBlock = static_cast<unsigned>(*end);
    for (const json::Value &d : *devices) {
      std::optional<llvm::StringRef> name = d.getAsString();
      auto it = name ? byName.find(*name) : byName.end();
      if (it == byName.end())
        return fail(where + "device '" + (name ? *name : "?") + "' is not a device of " +
                    options.clusterFile);
      a.devices.push_back(it->second);
    }
    stages.push_back(std::move(a));
    ops.push_back(*opCount);
  }
  if (stages.back().endBlock != numBlocks)
    return fail(llvm::formatv("its stages end at block {0}, this model has {1} blocks: a plan "
                              "of another model or other flags",
                              stages.back().endBlock, numBlocks));
  Schedule sched = *schedule == "gpipe" ? Schedule::GPipe : Schedule::OneFOneB;
  mp.plan = evaluateStages(mp.coarse, *cluster, popts, stages,
                           static_cast<unsigned>(*microBatches), sched);
  if (std::optional<llvm::StringRef> s = root->getString("strategy")) {
    if (llvm::Expected<PlannerStrategy> named = parseStrategy(*s))
      mp.plan.strategy = *named;
    else
      llvm::consumeError(named.takeError());
  }
  assignNodeStages(mp);
  for (auto [s, n] : llvm::enumerate(ops)) {
    int64_t here = llvm::count(mp.stageOfNode, static_cast<unsigned>(s));
    if (here != n)
      return fail(llvm::formatv("stage {0} holds {1} ops here, {2} in the file: a plan of "
                                "another model or other flags",
                                s, here, n));
  }
  if (!mp.plan.feasible)
    return fail("the plan does not fit on " + options.clusterFile + ": " + mp.plan.message);
  return mp;
}
