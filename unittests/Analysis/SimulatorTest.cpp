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

/// Two stages, one micro-batch, by hand: forward 1 and 3 s, backward 2
/// and 4 s, updates 0.5 and `update1` s, transfers of 0.1 s latency + 1 MB
/// at 10 MB/s (0.2 s), and a tied weight whose partials take 0.3 s to cross.
PartitionPlan handPlan(const ClusterModel &cluster, double update1) {
  PartitionPlan plan;
  plan.schedule = Schedule::OneFOneB;
  plan.microBatches = 1;
  for (unsigned j = 0; j < 2; ++j) {
    StagePlan s;
    s.firstBlock = j;
    s.endBlock = j + 1;
    s.devices = {j};
    s.fwdTime = j ? 3 : 1;
    s.bwdTime = j ? 4 : 2;
    s.updateTime = j ? update1 : 0.5;
    s.tiedExchangeTime = 0.3;
    plan.stages.push_back(s);
  }
  StagePlan &s0 = plan.stages[0];
  s0.sendBytes = 1e6;
  s0.sendBandwidth = 1e7;
  s0.sendLatency = 0.1;
  s0.sendLink = cluster.linkId(0, 1);
  return plan;
}

TEST(Simulator, SteadyStateOverlapsTheLastStagesTail) {
  Fixture f = make(2, false, false);
  llvm::Expected<SimulationResult> sim = simulatePlan(handPlan(f.cluster, 0.6), f.cluster);
  ASSERT_TRUE(!!sim) << llvm::toString(sim.takeError());
  // First iteration: F0 [0, 1], F1 [1.2, 4.2], B1 [4.2, 8.2], B0 [8.4,
  // 10.4]; stage 0 updates at 10.4 (stage 1's partial arrived at 8.5) until
  // 10.9, stage 1 at 10.4 + 0.3 until 11.3.
  EXPECT_NEAR(sim->firstIterationTime, 11.3, 1e-9);
  // Back to back, stage 1's update overlaps stage 0's next forward: the
  // period is stage 0's cycle F0 + send + F1 + B1 + send + B0 + U0.
  EXPECT_NEAR(sim->iterationTime, 1 + 0.2 + 3 + 4 + 0.2 + 2 + 0.5, 1e-9);
  // The timeline is the first iteration's: 2 x (F, B) and two transfers.
  EXPECT_EQ(sim->events.size(), 6u);
  for (const TimelineEvent &e : sim->events)
    EXPECT_LE(e.end, sim->firstIterationTime + 1e-9);
}

TEST(Simulator, LongTailOfALaterStageBoundsThePeriod) {
  Fixture f = make(2, false, false);
  llvm::Expected<SimulationResult> sim = simulatePlan(handPlan(f.cluster, 20), f.cluster);
  ASSERT_TRUE(!!sim) << llvm::toString(sim.takeError());
  EXPECT_NEAR(sim->firstIterationTime, 10.4 + 0.3 + 20, 1e-9);
  // Stage 1's cycle: F1 + B1 + send + B0, then stage 0's partial crosses
  // (0.3 s) and stage 1 updates (20 s); the next activation is waiting.
  EXPECT_NEAR(sim->iterationTime, 3 + 4 + 0.2 + 2 + 0.3 + 20, 1e-9);
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
