//===- CostGraphTest.cpp - Cost graphs, generators and coarsening ---------===//

#include "strait/Analysis/ModelZoo.h"
#include "strait/Analysis/Partitioner.h"
#include "strait/Analysis/Workload.h"

#include "gtest/gtest.h"

using namespace strait;

namespace {

double params(const CostGraph &g, DType dtype) {
  return g.totalParamBytes() / dtypeBytes(dtype);
}

TEST(ModelZoo, TransformerParameterCounts) {
  TransformerShape gpt2 = gpt2SmallShape();
  EXPECT_NEAR(params(buildTransformerGraph(gpt2), gpt2.dtype) / 1e6, 124.4,
              0.2);
  double h = gpt2.hidden;
  EXPECT_DOUBLE_EQ(transformerLayerParams(gpt2), 12 * h * h + 13 * h);
  TransformerShape l7 = llama7BShape();
  EXPECT_NEAR(params(buildTransformerGraph(l7), l7.dtype) / 1e9, 6.74, 0.01);
  TransformerShape l70 = llama70BShape();
  EXPECT_NEAR(params(buildTransformerGraph(l70), l70.dtype) / 1e9, 68.98,
              0.05);
}

TEST(ModelZoo, LayerFlopsMatchNodes) {
  for (TransformerShape shape : {gpt2SmallShape(4), llama7BShape(2)}) {
    CostGraph g = buildTransformerGraph(shape);
    double layer1 = 0;
    for (const CostNode &n : g.nodes)
      if (n.layer == 1)
        layer1 += n.fwdFlops;
    EXPECT_DOUBLE_EQ(layer1, transformerLayerFlops(shape)) << shape.name;
  }
  // 6 * params * tokens rule of thumb (embeddings do no matmul work, the
  // attention scores add some): within 40% for GPT-2 at s = 1024.
  TransformerShape gpt2 = gpt2SmallShape(8);
  CostGraph g = buildTransformerGraph(gpt2);
  double tokens = 8.0 * 1024;
  double total = g.totalFwdFlops() + g.totalBwdFlops();
  double rule = 6 * params(g, gpt2.dtype) * tokens;
  EXPECT_GT(total / rule, 0.9);
  EXPECT_LT(total / rule, 1.6);
}

TEST(ModelZoo, ResNetShapes) {
  ResNetShape r;
  r.batch = 1;
  CostGraph g = buildResNetGraph(r);
  EXPECT_NEAR(params(g, r.dtype) / 1e6, 44.5, 0.3);
  EXPECT_NEAR(g.totalFwdFlops() / 1e9, 15.6, 0.4); // 7.8 GMACs
  ASSERT_TRUE(!!g.topologicalOrder());
  r.depth = 50;
  EXPECT_NEAR(params(buildResNetGraph(r), r.dtype) / 1e6, 25.5, 0.3);
}

TEST(CostGraph, CycleIsAnError) {
  CostGraph g;
  g.name = "loop";
  CostNode a, b;
  a.name = "a";
  b.name = "b";
  unsigned ia = g.addNode(a), ib = g.addNode(b);
  g.addEdge(ia, ib, 1);
  g.addEdge(ib, ia, 1);
  llvm::Expected<std::vector<unsigned>> order = g.topologicalOrder();
  ASSERT_FALSE(!!order);
  std::string err = llvm::toString(order.takeError());
  EXPECT_NE(err.find("cycle through node 'a'"), std::string::npos) << err;
  g.addEdge(0, 7, 1);
  order = g.topologicalOrder();
  ASSERT_FALSE(!!order);
  EXPECT_NE(llvm::toString(order.takeError()).find("missing node"),
            std::string::npos);
}

/// A chain of 5 layers with a skip edge from layer 0 to layer 4.
CostGraph skipGraph() {
  CostGraph g;
  g.name = "skip";
  g.batchSamples = 2;
  for (int l = 0; l < 5; ++l) {
    CostNode n;
    n.name = "n" + std::to_string(l);
    n.kind = OpKind::MatMul;
    n.fwdFlops = 1e9;
    n.paramBytes = 1e6;
    n.activationBytes = 4e6;
    n.bytesWritten = (l + 1) * 1e6;
    n.layer = l;
    g.addNode(n);
    if (l > 0)
      g.addEdge(l - 1, l, 2e6);
  }
  g.addEdge(0, 4, 10e6);
  return g;
}

TEST(Coarsen, ResidualEdgesCountAtEveryCutTheyCross) {
  ClusterModel c = makeUniformCluster(makeV100(), 1, 1, 2, {1e10, 0, false},
                                      {1e10, 0, false}, {1e10, 0, false});
  llvm::Expected<CoarseGraph> coarse = coarsenGraph(skipGraph(), c, 64);
  ASSERT_TRUE(!!coarse);
  ASSERT_EQ(coarse->blocks.size(), 5u);
  ASSERT_EQ(coarse->cutBytes.size(), 4u);
  for (double bytes : coarse->cutBytes) // per sample: (2 + 10) MB / 2
    EXPECT_DOUBLE_EQ(bytes, 6e6);
  EXPECT_DOUBLE_EQ(coarse->blocks[0].activationBytes, 2e6);
  // The working set: twice the largest forward result, per sample.
  for (unsigned b = 0; b < 5; ++b)
    EXPECT_DOUBLE_EQ(coarse->blocks[b].workingBytes, (b + 1) * 1e6) << b;
  // Merging keeps totals, and the working set is the largest of the block.
  coarse = coarsenGraph(skipGraph(), c, 2);
  ASSERT_TRUE(!!coarse);
  ASSERT_EQ(coarse->blocks.size(), 2u);
  EXPECT_DOUBLE_EQ(std::max(coarse->blocks[0].workingBytes, coarse->blocks[1].workingBytes),
                   5e6);
  EXPECT_LT(coarse->blocks[0].workingBytes, coarse->blocks[1].workingBytes);
  EXPECT_DOUBLE_EQ(coarse->blocks[0].paramBytes + coarse->blocks[1].paramBytes,
                   5e6);
  // Roofline: 1 GFLOP of fp32 matmul on a V100 at 15.7 TFLOP/s.
  CostNode n = skipGraph().nodes[0];
  EXPECT_NEAR(nodeTime(n, c, 0, false), 1e9 / 15.7e12, 1e-12);
  EXPECT_NEAR(nodeTime(n, c, 0, true), 2e9 / 15.7e12, 1e-12);
}

TEST(Workload, AllReduceModels) {
  ClusterModel c = makeUniformCluster(makeV100(), 2, 1, 4, {100e9, 0, false},
                                      {10e9, 0, false}, {0.1e9, 0.01, false});
  std::vector<unsigned> host0 = {0, 1, 2, 3};
  // Ring on 4 devices: 2 * 3 * (bytes / 4) / bw, plus the reduce-scatter's
  // sums: 3 steps adding a received quarter into one's own (two read, one
  // written) at the memory bandwidth.
  double sums = 3 * 3 * (4e9 / 4) / memoryBandwidth(c, 0);
  EXPECT_GT(sums, 0.005);
  EXPECT_NEAR(ringAllReduceTime(c, host0, 4e9), 6 * 1e9 / 100e9 + sums, 1e-9);
  // Copies into and out of the bucket and the mean's scale: 6 x bytes.
  EXPECT_NEAR(allReduceLocalTime(c, host0, 4e9), 6 * 4e9 / memoryBandwidth(c, 0), 1e-12);
  EXPECT_EQ(allReduceLocalTime(c, {0}, 4e9), 0);
  // A measured all-reduce step latency replaces the link's latency.
  ClusterModel m = makeUniformCluster(makeV100(), 1, 1, 2, {100e9, 1e-5, false},
                                      {10e9, 0, false}, {0.1e9, 0.01, false});
  double plain = ringAllReduceTime(m, {0, 1}, 1e3);
  m.links[m.linkId(0, 1)].allReduceLatency = 3e-4;
  EXPECT_NEAR(ringAllReduceTime(m, {0, 1}, 1e3) - plain, 2 * (3e-4 - 1e-5), 1e-12);
  std::vector<unsigned> all = {0, 1, 2, 3, 4, 5, 6, 7};
  double flat = ringAllReduceTime(c, all, 1e9);
  double hier = allReduceTime(c, all, 1e9);
  EXPECT_LT(hier, flat); // hierarchical wins across the slow link
  EXPECT_NEAR(transferTime(c.link(0, 4), 1e8), 0.01 + 1.0, 1e-9);
}

// Each bucket of dist-bucket-all-reduces is a ring of its own: the latency
// is paid once a ring step per bucket, the bandwidth term is unchanged, and
// the phases of a hierarchical all-reduce count the whole all-reduce's
// buckets (not their share of the bytes).
TEST(Workload, AllReduceBucketsPayTheLatencyEach) {
  ClusterModel c = makeUniformCluster(makeV100(), 2, 1, 2, {100e9, 0, false},
                                      {10e9, 0, false}, {0.1e9, 0.01, false});
  std::vector<unsigned> pair = {0, 2}; // across the slow 10 ms link
  double bytes = 1e9;
  c.allReduceBucketBytes = 0; // unbucketed: one all-reduce
  double one = ringAllReduceTime(c, pair, bytes);
  EXPECT_NEAR(one, 2 * (0.01 + bytes / 2 / 0.1e9) + 1.5 * bytes / memoryBandwidth(c, 0), 1e-9);
  c.allReduceBucketBytes = 256.0 * 1048576; // ceil(1e9 / 256 MiB) = 4 buckets
  EXPECT_DOUBLE_EQ(allReduceBuckets(c, bytes), 4);
  EXPECT_NEAR(ringAllReduceTime(c, pair, bytes) - one, 2 * 3 * 0.01, 1e-9);
  EXPECT_DOUBLE_EQ(allReduceBuckets(c, 1e3), 1);
  double hier4 = hierarchicalAllReduceTime(c, {{0, 1}, {2, 3}}, bytes);
  c.allReduceBucketBytes = 0;
  double hier1 = hierarchicalAllReduceTime(c, {{0, 1}, {2, 3}}, bytes);
  // Inside each host (no latency) nothing changes; across, 2 rings of half
  // the bytes each still pay 4 buckets' latency: 2 * (4 - 1) * 10 ms.
  EXPECT_NEAR(hier4 - hier1, 2 * 3 * 0.01, 1e-9);
}

} // namespace

// A training step's backward is the sum of its backward ops' own rooflines
// (CostNode::bwdTerms), not twice the forward's bytes at the forward's kind;
// an op no backward op differentiates (bwdFlops 0) costs nothing backward;
// the optimizer step is paid once per iteration, whatever the batch.
TEST(Workload, BackwardAndUpdateTermsAreCostedOnTheirOwn) {
  ClusterModel c = makeUniformCluster(makeV100(), 1, 1, 1, {1e10, 0, false},
                                      {1e10, 0, false}, {1e10, 0, false});
  CostNode n;
  n.kind = OpKind::MatMul;
  n.fwdFlops = 1e9;
  n.bytesRead = 1e6;
  n.paramBytes = 4e6;
  double bw = memoryBandwidth(c, 0);
  // Estimate: 2 GFLOP at the matmul rate (an op with weights).
  EXPECT_NEAR(nodeTime(n, c, 0, true), 2e9 / 15.7e12, 1e-12);
  n.bwdFlops = 0;
  EXPECT_DOUBLE_EQ(nodeTime(n, c, 0, true), 0);
  // A GEMM gradient and a memory-bound elementwise op.
  n.bwdTerms = {{OpKind::MatMul, DType::F32, 1e9, 1e6}, {OpKind::Elementwise, DType::F32, 1e3, 9e8}};
  EXPECT_NEAR(nodeTime(n, c, 0, true), 1e9 / 15.7e12 + 9e8 / bw, 1e-12);
  EXPECT_DOUBLE_EQ(nodeUpdateTime(n, c, 0), 0);
  n.updateTerms = {{OpKind::Elementwise, DType::F32, 0, 7e8}};
  EXPECT_DOUBLE_EQ(nodeUpdateTime(n, c, 0), 7e8 / bw);

  // In a plan: the update lands in the stage's tail once, not per micro-batch.
  CostGraph g = skipGraph();
  llvm::Expected<CoarseGraph> plain = coarsenGraph(g, c, 64);
  for (CostNode &node : g.nodes)
    node.updateTerms = {{OpKind::Elementwise, DType::F32, 0, 9e8}};
  llvm::Expected<CoarseGraph> updated = coarsenGraph(g, c, 64);
  ASSERT_TRUE(plain && updated);
  PlannerOptions o;
  std::vector<StageAssignment> stages = {{0, 5, {0}}};
  for (unsigned m : {1u, 4u}) {
    PartitionPlan a = evaluateStages(*plain, c, o, stages, m, Schedule::GPipe);
    PartitionPlan b = evaluateStages(*updated, c, o, stages, m, Schedule::GPipe);
    EXPECT_NEAR(b.stages[0].updateTime, 5 * 9e8 / bw, 1e-12);
    EXPECT_NEAR(b.iterationTime - a.iterationTime, 5 * 9e8 / bw, 1e-12) << m;
  }
}
