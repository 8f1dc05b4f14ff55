//===- RecomputeTest.cpp - The planner's activation recomputation ---------===//

#include "strait/Analysis/ModelZoo.h"
#include "strait/Analysis/Partitioner.h"

#include "gtest/gtest.h"

using namespace strait;

namespace {

ClusterModel loadExample(const char *name) {
  llvm::Expected<ClusterModel> c =
      loadClusterFile(std::string(STRAIT_SOURCE_DIR) + "/examples/clusters/" + name);
  EXPECT_TRUE(!!c) << llvm::toString(c.takeError());
  return std::move(*c);
}

/// Recomputing a stage adds one forward to its backward and, with several
/// micro-batches in flight, keeps less than keeping every activation.
TEST(Recompute, FullAddsAForwardAndKeepsTheInputsOnly) {
  ClusterModel c = loadExample("dtfm-1-datacenter.yaml");
  llvm::Expected<CoarseGraph> g = coarsenGraph(buildTransformerGraph(gpt2SmallShape(1)), c, 64);
  ASSERT_TRUE(!!g);
  unsigned B = g->blocks.size();
  std::vector<StageAssignment> stages = {{0, B / 2, {0}}, {B / 2, B, {1}}};
  PlannerOptions none, full;
  none.globalBatch = full.globalBatch = 32;
  full.recompute = RecomputeMode::Full;
  PartitionPlan a = evaluateStages(*g, c, none, stages, 8, Schedule::OneFOneB);
  PartitionPlan b = evaluateStages(*g, c, full, stages, 8, Schedule::OneFOneB);
  ASSERT_EQ(a.stages.size(), 2u);
  ASSERT_EQ(b.stages.size(), 2u);
  for (unsigned j = 0; j < 2; ++j) {
    EXPECT_FALSE(a.stages[j].recompute);
    EXPECT_TRUE(b.stages[j].recompute);
    EXPECT_DOUBLE_EQ(b.stages[j].fwdTime, a.stages[j].fwdTime);
    EXPECT_NEAR(b.stages[j].bwdTime, a.stages[j].bwdTime + a.stages[j].fwdTime,
                1e-12 * a.stages[j].bwdTime);
  }
  // Stage 0 holds two micro-batches in flight under 1F1B: recomputing it
  // keeps far less.
  EXPECT_GT(b.stages[0].inFlight, 1u);
  EXPECT_LT(b.stages[0].peakMemory, a.stages[0].peakMemory);
  EXPECT_GT(b.iterationTime, a.iterationTime);
}

/// Auto plans exactly as none where a plan fits, and where none fits it
/// recomputes only the stages that would not fit.
TEST(Recompute, AutoOnlyWhereNothingElseFits) {
  ClusterModel c = loadExample("dtfm-1-datacenter.yaml");
  PlannerOptions none, autoMode;
  none.globalBatch = autoMode.globalBatch = 64;
  autoMode.recompute = RecomputeMode::Auto;
  CostGraph gpt2 = buildTransformerGraph(gpt2SmallShape(1));
  llvm::Expected<PartitionPlan> a = planPartition(gpt2, c, none);
  llvm::Expected<PartitionPlan> b = planPartition(gpt2, c, autoMode);
  ASSERT_TRUE(a && b);
  ASSERT_TRUE(a->feasible) << a->message;
  EXPECT_EQ(formatPlan(*a, c), formatPlan(*b, c));

  // LLaMA-7B in 4 micro-batches of 16 samples on 16 GB V100s fits only
  // recomputing.
  none.microBatchCounts = autoMode.microBatchCounts = {4};
  CostGraph llama = buildTransformerGraph(llama7BShape(1));
  llvm::Expected<PartitionPlan> n = planPartition(llama, c, none);
  llvm::Expected<PartitionPlan> r = planPartition(llama, c, autoMode);
  ASSERT_TRUE(n && r);
  EXPECT_FALSE(n->feasible);
  ASSERT_TRUE(r->feasible) << r->message;
  unsigned recomputing = 0;
  for (const StagePlan &s : r->stages) {
    recomputing += s.recompute;
    EXPECT_LE(s.peakMemory, s.capacity);
  }
  EXPECT_GT(recomputing, 0u);
  // Each recomputing stage would not fit without it: same stages and
  // micro-batches, recomputation off.
  std::vector<StageAssignment> stages;
  for (const StagePlan &s : r->stages)
    stages.push_back({s.firstBlock, s.endBlock, s.devices});
  llvm::Expected<CoarseGraph> g = coarsenGraph(llama, c, none.maxBlocks);
  ASSERT_TRUE(!!g);
  PartitionPlan plain = evaluateStages(*g, c, none, stages, r->microBatches, r->schedule);
  for (unsigned j = 0; j < stages.size(); ++j)
    if (r->stages[j].recompute)
      EXPECT_GT(plain.stages[j].peakMemory, plain.stages[j].capacity) << "stage " << j;
}

} // namespace
