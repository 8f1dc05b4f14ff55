//===- HeteroBench.cpp - Heterogeneous clusters against equal-speed twins --===//
//
// `strait-plan-bench --hetero`: how much throughput a heterogeneous cluster
// loses against a homogeneous cluster of the same total speed (HexiScale's
// measure: within 0.3-11.6 % of an equal-FLOPS homogeneous cluster).
//
// The twin keeps every device, host, site and link of the cluster and
// replaces each device by one type: the fastest type of the cluster with
// every rate (peak FLOP/s, memory bandwidth, measured GEMM rates, curves, op
// rates) scaled by one factor f, chosen so that N twins process a sample of
// the workload as fast as the N real devices together (sum of 1 / t_i, t_i
// the cost model's forward + backward time of one sample on device i), and
// the mean memory capacity. Equal total speed is measured by the same cost
// model that plans, on the workload itself, not by nominal peaks.
//
//===----------------------------------------------------------------------===//

#include "HeteroBench.h"

#include "strait/Analysis/ModelZoo.h"
#include "strait/Analysis/Partitioner.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <numeric>

using namespace strait;

namespace {

/// Seconds per sample (forward + backward) of each speed class.
llvm::Expected<std::vector<double>> classTimes(const CostGraph &g,
                                               const ClusterModel &c) {
  llvm::Expected<CoarseGraph> coarse = coarsenGraph(g, c, 64);
  if (!coarse)
    return coarse.takeError();
  std::vector<double> t(c.numSpeedClasses(), 0);
  for (unsigned k = 0; k < t.size(); ++k)
    for (unsigned b = 0; b < coarse->blocks.size(); ++b)
      t[k] += coarse->fwdTime[k][b] + coarse->bwdTime[k][b];
  return t;
}

void scaleProfile(DeviceProfile &p, double f) {
  auto scale = [f](double &v) {
    if (v > 0)
      v *= f;
  };
  scale(p.gemmFlops);
  scale(p.peakFlops);
  scale(p.memBandwidth);
  for (auto &point : p.gemmCurve)
    point.second *= f;
  for (auto &entry : p.opFlops)
    entry.second *= f;
  for (auto &entry : p.opBandwidth)
    entry.second *= f;
}

struct Twin {
  ClusterModel cluster;
  double factor = 1;
  std::string reference;
};

/// The equal-speed homogeneous twin of `c` for workload `g` (see the file
/// comment).
llvm::Expected<Twin> makeTwin(const CostGraph &g, const ClusterModel &c) {
  llvm::Expected<std::vector<double>> times = classTimes(g, c);
  if (!times)
    return times.takeError();
  double speed = 0, capacity = 0;
  for (unsigned i = 0; i < c.size(); ++i) {
    speed += 1 / (*times)[c.devices[i].speedClass];
    capacity += c.typeOf(i).memCapacity;
  }
  unsigned fastest = std::min_element(times->begin(), times->end()) -
                     times->begin();
  unsigned ref = c.classRepresentative[fastest];
  // N devices of time t_ref / f each process N f / t_ref samples per second.
  double f = (*times)[fastest] * speed / c.size();
  Twin twin{c, f, c.typeOf(ref).name};
  DeviceType type = c.typeOf(ref);
  type.name += "-twin";
  for (double &p : type.peakFlops)
    p *= f;
  type.memBandwidth *= f;
  type.memCapacity = capacity / c.size();
  DeviceProfile profile = c.devices[ref].profile;
  scaleProfile(profile, f);
  twin.cluster.types.assign(1, type);
  for (Device &d : twin.cluster.devices) {
    d.type = 0;
    d.speedClass = 0;
    d.profile = profile;
  }
  twin.cluster.classRepresentative.assign(1, 0);
  return twin;
}

llvm::Expected<PartitionPlan> planWith(const CostGraph &g, const ClusterModel &c,
                                       double batch, PlannerStrategy s) {
  PlannerOptions o;
  o.strategy = s;
  o.globalBatch = batch;
  return planPartition(g, c, o);
}

/// The twin's throughput under the heterogeneous plan's stages, devices and
/// micro-batches: a check of the planner's search on the twin (the DP should
/// find at least this).
double twinUnderPlan(const CostGraph &g, const ClusterModel &twin,
                     const PartitionPlan &p, double batch) {
  if (!p.feasible)
    return 0;
  llvm::Expected<CoarseGraph> coarse = coarsenGraph(g, twin, 64);
  if (!coarse) {
    llvm::consumeError(coarse.takeError());
    return 0;
  }
  std::vector<StageAssignment> stages;
  for (const StagePlan &s : p.stages)
    stages.push_back({s.firstBlock, s.endBlock, s.devices});
  PlannerOptions o;
  o.globalBatch = batch;
  PartitionPlan e =
      evaluateStages(*coarse, twin, o, stages, p.microBatches, p.schedule);
  return e.feasible ? e.throughput : 0;
}

std::string shapeOf(const PartitionPlan &p) {
  if (!p.feasible)
    return "OOM";
  std::string s = std::to_string(p.stages.size()) + " x [";
  for (unsigned j = 0; j < p.stages.size(); ++j)
    s += (j ? "," : "") + std::to_string(p.stages[j].devices.size());
  return s + "]";
}

DeviceType makeT4() {
  DeviceType t = makeV100();
  t.name = "T4";
  t.peakFlops.fill(0);
  t.peakFlops[static_cast<unsigned>(DType::F32)] = 8.1e12;
  t.peakFlops[static_cast<unsigned>(DType::F16)] = 65e12;
  t.memBandwidth = 320e9;
  t.memCapacity = 16.0 * (1ull << 30);
  return t;
}

/// One site of hosts of 8 GPUs: `hosts[i]` hosts of `types[i]`; NVLink-class
/// links inside a host, 100 Gbit/s between hosts.
ClusterModel mixedSite(const std::vector<DeviceType> &types,
                       const std::vector<unsigned> &hosts) {
  ClusterSpec spec;
  spec.name = "mixed-site";
  spec.file = "<hetero bench>";
  spec.types = types;
  spec.typeWhere.assign(types.size(), spec.file);
  unsigned h = 0;
  for (unsigned t = 0; t < types.size(); ++t)
    for (unsigned k = 0; k < hosts[t]; ++k, ++h)
      for (unsigned d = 0; d < 8; ++d)
        spec.devices.push_back({"g" + std::to_string(h) + "-" + std::to_string(d),
                                types[t].name, "host" + std::to_string(h),
                                "site", spec.file});
  spec.intraHost = LinkSpec{300e9, 5e-6, false};
  spec.intraSite = LinkSpec{100e9 / 8, 2e-5, false};
  spec.interSite = LinkSpec{10e9 / 8, 0.02, true};
  llvm::Expected<ClusterModel> c = buildCluster(spec);
  if (!c) {
    llvm::errs() << llvm::toString(c.takeError()) << "\n";
    return ClusterModel();
  }
  return std::move(*c);
}

} // namespace

int strait::bench::heteroTable(llvm::StringRef clustersDir) {
  struct Case {
    std::string name;
    ClusterModel cluster;
  };
  std::vector<Case> cases;
  cases.push_back({"A100 x16 + V100 x16, one site",
                   mixedSite({makeA100(), makeV100()}, {2, 2})});
  cases.push_back({"A100 x8 + V100 x8 + T4 x16, one site",
                   mixedSite({makeA100(), makeV100(), makeT4()}, {1, 1, 2})});
  for (const char *file : {"fusionllm-48.yaml", "nebula-2site.yaml"}) {
    llvm::SmallString<256> path(clustersDir);
    llvm::sys::path::append(path, file);
    llvm::Expected<ClusterModel> c = loadClusterFile(path);
    if (!c) {
      llvm::errs() << llvm::toString(c.takeError()) << "\n";
      return 1;
    }
    cases.push_back({llvm::sys::path::stem(file).str(), std::move(*c)});
  }
  struct Load {
    const char *name;
    CostGraph graph;
    double batch;
  };
  std::vector<Load> loads;
  loads.push_back({"GPT-2", buildTransformerGraph(gpt2SmallShape(1)), 64});
  loads.push_back({"GPT-2", buildTransformerGraph(gpt2SmallShape(1)), 512});
  loads.push_back({"LLaMA-7B", buildTransformerGraph(llama7BShape(1)), 256});

  llvm::outs() << "| cluster | model, global batch | twin (reference x f) | "
                  "Strait hetero samples/s | stages x replicas | twin "
                  "samples/s | twin plan | hetero / twin | PipeDream hetero / "
                  "twin | twin under the hetero plan |\n"
                  "|---|---|---|---|---|---|---|---|---|---|\n";
  for (Case &c : cases) {
    if (c.cluster.size() == 0)
      return 1;
    for (const Load &l : loads) {
      llvm::Expected<Twin> twin = makeTwin(l.graph, c.cluster);
      if (!twin) {
        llvm::errs() << llvm::toString(twin.takeError()) << "\n";
        return 1;
      }
      llvm::Expected<PartitionPlan> het =
          planWith(l.graph, c.cluster, l.batch, PlannerStrategy::Strait);
      llvm::Expected<PartitionPlan> pd =
          planWith(l.graph, c.cluster, l.batch, PlannerStrategy::PipeDream);
      llvm::Expected<PartitionPlan> hom =
          planWith(l.graph, twin->cluster, l.batch, PlannerStrategy::Strait);
      if (!het || !pd || !hom) {
        llvm::errs() << "planning failed\n";
        llvm::consumeError(het ? llvm::Error::success() : het.takeError());
        llvm::consumeError(pd ? llvm::Error::success() : pd.takeError());
        llvm::consumeError(hom ? llvm::Error::success() : hom.takeError());
        return 1;
      }
      auto ratio = [&](const PartitionPlan &p) -> std::string {
        if (!p.feasible || !hom->feasible)
          return "-";
        return llvm::formatv("{0:f3}", p.throughput / hom->throughput).str();
      };
      llvm::outs() << llvm::formatv(
          "| {0} | {1}, {2} | {3} x {4:f3} | {5:f2} | {6} | {7:f2} | {8} | "
          "{9} | {10} | {11:f2} |\n",
          c.name, l.name, unsigned(l.batch), twin->reference, twin->factor,
          het->throughput, shapeOf(*het), hom->throughput, shapeOf(*hom),
          ratio(*het), ratio(*pd),
          twinUnderPlan(l.graph, twin->cluster, *het, l.batch));
    }
  }
  return 0;
}
