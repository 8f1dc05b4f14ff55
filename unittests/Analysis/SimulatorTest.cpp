//===- SimulatorTest.cpp - Simulator against the analytic model -----------===//

#include "strait/Analysis/Partitioner.h"
#include "strait/Analysis/Simulator.h"

#include "llvm/Support/FileSystem.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include "gtest/gtest.h"

using namespace strait;

namespace {

/// S identical layers; with `edges` a 100 MB tensor flows between layers.
CostGraph chain(unsigned layers, bool edges) {
  CostGraph g;
  g.name = "chain";
  g.batchSamples = 4;
  for (unsigned l = 0; l < layers; ++l) {
    CostNode n;
    n.name = "n" + std::to_string(l);
    n.kind = OpKind::MatMul;
    n.fwdFlops = 4e12;
    n.layer = l;
    g.addNode(n);
    if (edges && l > 0)
      g.addEdge(l - 1, l, 4e8);
  }
  return g;
}

struct Fixture {
  ClusterModel cluster;
  CoarseGraph graph;
  PlannerOptions options;
};

Fixture make(unsigned stages, bool edges, bool shared) {
  Fixture f;
  f.cluster = makeUniformCluster(makeV100(), 1, stages, 1, {1e10, 0, false},
                                 {1e9, 1e-3, shared}, {1e9, 1e-3, shared});
  f.graph = *coarsenGraph(chain(stages, edges), f.cluster, 64);
  return f;
}

std::vector<StageAssignment> onePerDevice(unsigned stages) {
  std::vector<StageAssignment> out;
  for (unsigned j = 0; j < stages; ++j)
    out.push_back({j, j + 1, {j}});
  return out;
}

TEST(Simulator, TrivialPipelineMatchesAnalytic) {
  for (unsigned S : {1u, 2u, 4u})
    for (unsigned M : {1u, 4u, 8u})
      for (Schedule sched : {Schedule::GPipe, Schedule::OneFOneB}) {
        Fixture f = make(S, false, false);
        PartitionPlan plan = evaluateStages(f.graph, f.cluster, f.options,
                                            onePerDevice(S), M, sched);
        llvm::Expected<SimulationResult> sim = simulatePlan(plan, f.cluster);
        ASSERT_TRUE(!!sim) << llvm::toString(sim.takeError());
        double t = plan.stages[0].fwdTime + plan.stages[0].bwdTime;
        EXPECT_NEAR(sim->iterationTime, (M + S - 1) * t, 1e-9);
        EXPECT_NEAR(plan.iterationTime, (M + S - 1) * t, 1e-9);
        EXPECT_NEAR(sim->bubbleFraction, double(S - 1) / (M + S - 1), 1e-9);
        EXPECT_NEAR(plan.bubbleFraction, sim->bubbleFraction, 1e-9);
      }
}

TEST(Simulator, TransfersStayCloseToAnalytic) {
  Fixture f = make(3, true, false);
  PartitionPlan plan = evaluateStages(f.graph, f.cluster, f.options,
                                      onePerDevice(3), 8, Schedule::OneFOneB);
  llvm::Expected<SimulationResult> sim = simulatePlan(plan, f.cluster);
  ASSERT_TRUE(!!sim);
  EXPECT_GT(plan.stages[0].sendTime, 0);
  EXPECT_NEAR(sim->iterationTime / plan.iterationTime, 1.0, 0.15);
  ASSERT_FALSE(sim->links.empty());
  for (const LinkUsage &l : sim->links) {
    EXPECT_GT(l.utilization, 0);
    EXPECT_LE(l.utilization, 1.0 + 1e-9);
  }
}

TEST(Simulator, SharedLinkIsSlowerThanPrivateLinks) {
  Fixture priv = make(3, true, false), shared = make(3, true, true);
  auto run = [](Fixture &f) {
    PartitionPlan plan = evaluateStages(f.graph, f.cluster, f.options,
                                        onePerDevice(3), 8, Schedule::GPipe);
    return simulatePlan(plan, f.cluster)->iterationTime;
  };
  EXPECT_GE(run(shared), run(priv) - 1e-12);
}

TEST(Simulator, WritesTimelineJSON) {
  Fixture f = make(2, true, false);
  PartitionPlan plan = evaluateStages(f.graph, f.cluster, f.options,
                                      onePerDevice(2), 4, Schedule::OneFOneB);
  llvm::Expected<SimulationResult> sim = simulatePlan(plan, f.cluster);
  ASSERT_TRUE(!!sim);
  llvm::SmallString<128> path;
  ASSERT_FALSE(llvm::sys::fs::createTemporaryFile("timeline", "json", path));
  ASSERT_FALSE(!!writeTimelineJSON(*sim, plan, f.cluster, path));
  auto buffer = llvm::MemoryBuffer::getFile(path);
  ASSERT_TRUE(!!buffer);
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  ASSERT_TRUE(!!json) << llvm::toString(json.takeError());
  const llvm::json::Array *events = json->getAsObject()->getArray("events");
  ASSERT_TRUE(events);
  EXPECT_GE(events->size(), 16u); // 2 stages x 4 x (F, B) + transfers
  llvm::sys::fs::remove(path);
}

} // namespace
