//===- CompressionBench.cpp - Predicted gain of codecs on slow links ------===//
//
// For the planner table's workloads (ModelZoo GPT-2-small, fp16, sequence
// 1024, 64 sequences; ResNet-101, 256 images) on every bundled cluster:
// Strait's plan, then the codecs dist-insert-compression would choose
// (compressPlan, --compress=auto or the given mode), and the simulated
// iteration without and with them, in the same run. Also the DT-FM-like
// baseline's plan, simulated uncompressed (DT-FM does not compress).
//
//   strait-compress-bench [--compress auto|int8|...] [--clusters DIR]
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/Compression.h"
#include "strait/Analysis/ModelZoo.h"
#include "strait/Analysis/Partitioner.h"
#include "strait/Analysis/Simulator.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

using namespace strait;
namespace cl = llvm::cl;

static cl::opt<std::string> compress("compress", cl::desc("auto, none or a codec"),
                                     cl::init("auto"));
static cl::opt<std::string> clusters("clusters", cl::desc("folder of cluster files"),
                                     cl::init(STRAIT_SOURCE_DIR "/examples/clusters"));

namespace {
struct Workload {
  std::string name;
  CostGraph graph;
  double globalBatch;
};

/// Short list of the codecs a plan gets: "cut0 fwd int8/bwd int4, ar1 int8".
std::string codecList(const PlanCompression &c) {
  std::string out;
  auto add = [&](const std::string &s) { out += (out.empty() ? "" : ", ") + s; };
  for (size_t j = 0; j < c.forward.size(); ++j)
    if (!c.forward[j].isNone() || !c.backward[j].isNone())
      add(llvm::formatv("cut{0} {1}/{2}", j, formatCodec(c.forward[j]),
                        formatCodec(c.backward[j])));
  for (size_t j = 0; j < c.allReduce.size(); ++j)
    if (!c.allReduce[j].isNone())
      add(llvm::formatv("ar{0} {1}", j, formatCodec(c.allReduce[j], true)));
  return out.empty() ? "none" : out;
}
} // namespace

int main(int argc, char **argv) {
  cl::ParseCommandLineOptions(argc, argv, "Predicted gain of compression on slow links\n");
  const char *files[] = {"fusionllm-48.yaml",    "dtfm-1-datacenter.yaml",
                         "dtfm-2-spot.yaml",     "dtfm-3-universities.yaml",
                         "dtfm-4-regional.yaml", "dtfm-5-worldwide.yaml",
                         "nebula-2site.yaml"};
  std::vector<Workload> workloads;
  workloads.push_back({"GPT-2", buildTransformerGraph(gpt2SmallShape(1)), 64});
  ResNetShape r;
  r.batch = 1;
  workloads.push_back({"ResNet-101", buildResNetGraph(r), 256});
  CompressionOptions copts;
  copts.mode = compress;
  llvm::outs() << "--compress=" << compress << "\n"
               << "| cluster | model | stages x replicas | samples/s plain | samples/s "
                  "compressed | ratio | vs DT-FM-like plain | codecs |\n"
                  "|---|---|---|---|---|---|---|---|\n";
  for (const char *file : files) {
    llvm::SmallString<256> path(clusters);
    llvm::sys::path::append(path, file);
    llvm::Expected<ClusterModel> cluster = loadClusterFile(path);
    if (!cluster) {
      llvm::errs() << llvm::toString(cluster.takeError()) << "\n";
      return 1;
    }
    for (const Workload &w : workloads) {
      PlannerOptions o;
      o.globalBatch = w.globalBatch;
      llvm::Expected<PartitionPlan> ours = planPartition(w.graph, *cluster, o);
      o.strategy = PlannerStrategy::DTFM;
      llvm::Expected<PartitionPlan> dtfm = planPartition(w.graph, *cluster, o);
      if (!ours || !dtfm) {
        llvm::errs() << "planning failed\n";
        return 1;
      }
      if (!ours->feasible) {
        llvm::outs() << "| " << cluster->name << " | " << w.name << " | OOM | | | | | |\n";
        continue;
      }
      llvm::Expected<PlanCompression> c = compressPlan(*ours, *cluster, copts);
      if (!c) {
        llvm::errs() << llvm::toString(c.takeError()) << "\n";
        return 1;
      }
      llvm::Expected<SimulationResult> plain = simulatePlan(*ours, *cluster);
      llvm::Expected<SimulationResult> coded = simulatePlan(*ours, *cluster, &*c);
      if (!plain || !coded) {
        llvm::errs() << "simulation failed\n";
        return 1;
      }
      std::string base = "base OOM";
      if (dtfm->feasible)
        if (llvm::Expected<SimulationResult> b = simulatePlan(*dtfm, *cluster))
          base = llvm::formatv("{0:f2}x", b->iterationTime / coded->iterationTime).str();
      std::string shape = std::to_string(ours->stages.size()) + " x [";
      for (unsigned j = 0; j < ours->stages.size(); ++j)
        shape += (j ? "," : "") + std::to_string(ours->stages[j].devices.size());
      shape += "]";
      double b = ours->globalBatch;
      llvm::outs() << llvm::formatv("| {0} | {1} | {2} | {3:f2} | {4:f2} | {5:f2}x | {6} | {7} |\n",
                                    cluster->name, w.name, shape, b / plain->iterationTime,
                                    b / coded->iterationTime,
                                    plain->iterationTime / coded->iterationTime, base,
                                    codecList(*c));
    }
  }
  return 0;
}
