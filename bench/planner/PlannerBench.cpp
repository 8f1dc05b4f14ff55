//===- PlannerBench.cpp - Planner quality and speed benchmark -------------===//
//
// strait-plan-bench [--clusters DIR] [--timeline DIR] [--no-scale]
//                   [--no-quality] [--hetero]
//
// Prints markdown tables (docs/benchmarks.md, section "Planner"):
//  1. for GPT-2 and ResNet-101 on every bundled cluster: predicted
//     throughput of the Strait plan, its ratio to each baseline, the
//     simulated iteration time and the planning time;
//  2. planning time at scale (GPT-2 / 48, LLaMA-7B / 64, LLaMA-70B / 1024)
//     and its growth with devices and layers;
//  3. with --hetero only: heterogeneous clusters against homogeneous twins
//     of equal total speed (HeteroBench.cpp).
//
//===----------------------------------------------------------------------===//

#include "HeteroBench.h"

#include "strait/Analysis/ModelZoo.h"
#include "strait/Analysis/Partitioner.h"
#include "strait/Analysis/Simulator.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <string>
#include <vector>

using namespace strait;

namespace {

struct Workload {
  const char *name;
  CostGraph graph;
  double globalBatch;
};

struct Args {
  std::string clusters = std::string(STRAIT_SOURCE_DIR) + "/examples/clusters";
  std::string timeline;
  std::string explainCluster, explainModel; ///< --explain FILE gpt2|resnet
  bool scale = true, quality = true, hetero = false;
};

llvm::Expected<PartitionPlan> plan(const Workload &w, const ClusterModel &c,
                                   PlannerStrategy s) {
  PlannerOptions o;
  o.strategy = s;
  o.globalBatch = w.globalBatch;
  return planPartition(w.graph, c, o);
}

std::string ratio(const PartitionPlan &ours, const PartitionPlan &base) {
  if (!base.feasible)
    return "base OOM";
  return llvm::formatv("{0:f2}x", ours.throughput / base.throughput).str();
}

int qualityTable(const Args &args) {
  const char *files[] = {"fusionllm-48.yaml",       "dtfm-1-datacenter.yaml",
                         "dtfm-2-spot.yaml",        "dtfm-3-universities.yaml",
                         "dtfm-4-regional.yaml",    "dtfm-5-worldwide.yaml",
                         "nebula-2site.yaml",       "local-4cpu.yaml"};
  std::vector<Workload> workloads;
  workloads.push_back({"GPT-2", buildTransformerGraph(gpt2SmallShape(1)), 64});
  ResNetShape r;
  r.batch = 1;
  workloads.push_back({"ResNet-101", buildResNetGraph(r), 256});
  llvm::outs() << "| cluster | model | Strait samples/s | stages x replicas "
                  "| M, schedule | vs uniform | vs PipeDream | vs DT-FM-like "
                  "| simulated / predicted | plan time (s) |\n"
                  "|---|---|---|---|---|---|---|---|---|---|\n";
  for (const char *file : files) {
    llvm::SmallString<256> path(args.clusters);
    llvm::sys::path::append(path, file);
    llvm::Expected<ClusterModel> cluster = loadClusterFile(path);
    if (!cluster) {
      llvm::errs() << llvm::toString(cluster.takeError()) << "\n";
      return 1;
    }
    for (const Workload &w : workloads) {
      llvm::Expected<PartitionPlan> ours =
          plan(w, *cluster, PlannerStrategy::Strait);
      llvm::Expected<PartitionPlan> uni =
          plan(w, *cluster, PlannerStrategy::Uniform);
      llvm::Expected<PartitionPlan> pd =
          plan(w, *cluster, PlannerStrategy::PipeDream);
      llvm::Expected<PartitionPlan> dt = plan(w, *cluster, PlannerStrategy::DTFM);
      if (!ours || !uni || !pd || !dt) {
        llvm::errs() << "planning failed\n";
        return 1;
      }
      std::string shape = "OOM";
      std::string simRatio = "-";
      if (ours->feasible) {
        shape = std::to_string(ours->stages.size()) + " x [";
        for (unsigned j = 0; j < ours->stages.size(); ++j)
          shape += (j ? "," : "") + std::to_string(ours->stages[j].devices.size());
        shape += "]";
        llvm::Expected<SimulationResult> sim = simulatePlan(*ours, *cluster);
        if (sim) {
          simRatio = llvm::formatv("{0:f3}", sim->iterationTime /
                                                 ours->iterationTime);
          if (!args.timeline.empty()) {
            std::string out = args.timeline + "/" +
                              llvm::sys::path::stem(file).str() + "-" +
                              w.name + ".json";
            if (llvm::Error e = writeTimelineJSON(*sim, *ours, *cluster, out))
              llvm::errs() << llvm::toString(std::move(e)) << "\n";
          }
        } else {
          llvm::consumeError(sim.takeError());
        }
      }
      llvm::outs() << llvm::formatv(
          "| {0} | {1} | {2:f2} | {3} | {4}, {5} | {6} | {7} | {8} | {9} | "
          "{10:f3} |\n",
          llvm::sys::path::stem(file), w.name, ours->throughput, shape,
          ours->microBatches, stringifySchedule(ours->schedule),
          ratio(*ours, *uni), ratio(*ours, *pd), ratio(*ours, *dt), simRatio,
          ours->planningSeconds);
      if (!ours->feasible)
        llvm::errs() << w.name << " on " << file << ": " << ours->message
                     << "\n";
    }
  }
  return 0;
}

double timePlan(const CostGraph &g, const ClusterModel &c, double batch,
                PartitionPlan *out = nullptr) {
  PlannerOptions o;
  o.globalBatch = batch;
  llvm::Expected<PartitionPlan> p = planPartition(g, c, o);
  if (!p) {
    llvm::errs() << llvm::toString(p.takeError()) << "\n";
    return -1;
  }
  if (out)
    *out = *p;
  return p->planningSeconds;
}

ClusterModel bigCluster(unsigned sites, unsigned hosts) {
  return makeUniformCluster(makeA100(), sites, hosts, 8,
                            {2400e9 / 8, 5e-6, false}, {200e9 / 8, 2e-5, false},
                            {10e9 / 8, 0.02, true});
}

int scaleTable(const Args &args) {
  llvm::outs() << "\n| case | devices | blocks | plan time (s) | target (s) "
                  "| stages | samples/s |\n|---|---|---|---|---|---|---|\n";
  struct Case {
    const char *name;
    CostGraph graph;
    double batch;
    ClusterModel cluster;
    double target;
  };
  llvm::SmallString<256> fusionPath(args.clusters);
  llvm::sys::path::append(fusionPath, "fusionllm-48.yaml");
  llvm::SmallString<256> dtfmPath(args.clusters);
  llvm::sys::path::append(dtfmPath, "dtfm-4-regional.yaml");
  llvm::Expected<ClusterModel> fusion = loadClusterFile(fusionPath);
  llvm::Expected<ClusterModel> regional = loadClusterFile(dtfmPath);
  if (!fusion || !regional) {
    llvm::consumeError(fusion.takeError());
    llvm::consumeError(regional.takeError());
    return 1;
  }
  std::vector<Case> cases;
  cases.push_back({"GPT-2", buildTransformerGraph(gpt2SmallShape(1)), 64,
                   *fusion, 1});
  cases.push_back({"LLaMA-7B", buildTransformerGraph(llama7BShape(1)), 256,
                   *regional, 10});
  cases.push_back({"LLaMA-70B", buildTransformerGraph(llama70BShape(1)), 1024,
                   bigCluster(8, 16), 60});
  for (Case &c : cases) {
    PartitionPlan p;
    double s = timePlan(c.graph, c.cluster, c.batch, &p);
    llvm::Expected<CoarseGraph> coarse = coarsenGraph(c.graph, c.cluster, 64);
    unsigned blocks = coarse ? coarse->blocks.size() : 0;
    if (!coarse)
      llvm::consumeError(coarse.takeError());
    llvm::outs() << llvm::formatv("| {0} | {1} | {2} | {3:f3} | < {4} | {5} | "
                                  "{6:f2}{7} |\n",
                                  c.name, c.cluster.size(), blocks, s, c.target,
                                  p.stages.size(), p.throughput,
                                  p.feasible ? "" : " (OOM)");
  }
  llvm::outs() << "\nGrowth with devices (LLaMA-70B-shaped, 8 GPUs a host, "
                  "16 hosts a site):\n\n| devices | plan time (s) |\n|---|---|\n";
  CostGraph l70 = buildTransformerGraph(llama70BShape(1));
  for (unsigned sites : {1u, 2u, 4u, 8u})
    llvm::outs() << llvm::formatv("| {0} | {1:f3} |\n", sites * 128,
                                  timePlan(l70, bigCluster(sites, 16), 1024));
  llvm::outs() << "\nGrowth with layers (decoder of LLaMA-7B width on 512 "
                  "GPUs; blocks capped at 64):\n\n| layers | plan time (s) "
                  "|\n|---|---|\n";
  for (unsigned layers : {16u, 32u, 64u, 128u}) {
    TransformerShape t = llama7BShape(1);
    t.layers = layers;
    llvm::outs() << llvm::formatv(
        "| {0} | {1:f3} |\n", layers,
        timePlan(buildTransformerGraph(t), bigCluster(4, 16), 512));
  }
  return 0;
}

/// Prints every strategy's plan and the simulation of Strait's plan.
int explain(const Args &args) {
  llvm::Expected<ClusterModel> cluster = loadClusterFile(args.explainCluster);
  if (!cluster) {
    llvm::errs() << llvm::toString(cluster.takeError()) << "\n";
    return 1;
  }
  ResNetShape r;
  r.batch = 1;
  Workload w = args.explainModel == "resnet"
                   ? Workload{"ResNet-101", buildResNetGraph(r), 256}
                   : Workload{"GPT-2", buildTransformerGraph(gpt2SmallShape(1)),
                              64};
  for (PlannerStrategy s :
       {PlannerStrategy::Strait, PlannerStrategy::Uniform,
        PlannerStrategy::PipeDream, PlannerStrategy::DTFM}) {
    llvm::Expected<PartitionPlan> p = plan(w, *cluster, s);
    if (!p) {
      llvm::errs() << llvm::toString(p.takeError()) << "\n";
      return 1;
    }
    llvm::outs() << formatPlan(*p, *cluster);
    if (s != PlannerStrategy::Strait || !p->feasible)
      continue;
    llvm::Expected<SimulationResult> sim = simulatePlan(*p, *cluster);
    if (!sim) {
      llvm::outs() << "  simulation: " << llvm::toString(sim.takeError())
                   << "\n";
      continue;
    }
    llvm::outs() << llvm::formatv("  simulated: {0:f4} s, bubble {1:f1}%\n",
                                  sim->iterationTime,
                                  100 * sim->bubbleFraction);
    for (const LinkUsage &l : sim->links)
      llvm::outs() << llvm::formatv("    link {0}: {1:f1} MB, busy {2:f3} s, "
                                    "utilization {3:f1}%\n",
                                    l.name, l.bytes / 1e6, l.busySeconds,
                                    100 * l.utilization);
  }
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Args args;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef a = argv[i];
    if (a == "--clusters" && i + 1 < argc)
      args.clusters = argv[++i];
    else if (a == "--timeline" && i + 1 < argc)
      args.timeline = argv[++i];
    else if (a == "--explain" && i + 2 < argc) {
      args.explainCluster = argv[++i];
      args.explainModel = argv[++i];
    } else if (a == "--no-scale")
      args.scale = false;
    else if (a == "--no-quality")
      args.quality = false;
    else if (a == "--hetero")
      args.hetero = true;
    else {
      llvm::errs() << "usage: strait-plan-bench [--clusters DIR] [--timeline "
                      "DIR] [--no-scale] [--no-quality] [--hetero]\n";
      return 2;
    }
  }
  if (!args.explainCluster.empty())
    return explain(args);
  if (args.hetero)
    return bench::heteroTable(args.clusters);
  if (args.quality && qualityTable(args))
    return 1;
  if (args.scale && scaleTable(args))
    return 1;
  return 0;
}
