//===- CompressionTest.cpp - Codec choice, islands, compressed plans ------===//

#include "strait/Analysis/Compression.h"
#include "strait/Analysis/Simulator.h"
#include "strait/Analysis/Workload.h"

#include "gtest/gtest.h"

#include <cmath>

using namespace strait;

namespace {

Codec make(CodecKind kind, double ratio = 1) {
  Codec c;
  c.kind = kind;
  c.ratio = ratio;
  return c;
}

TEST(Compression, SizeModel) {
  // 1000 f32 values, blocks of 256 (4 scales).
  EXPECT_EQ(encodedBytes(make(CodecKind::None), 1000), 4000);
  EXPECT_EQ(encodedBytes(make(CodecKind::FP16), 1000), 2000);
  EXPECT_EQ(encodedBytes(make(CodecKind::BF16), 1000), 2000);
  EXPECT_EQ(encodedBytes(make(CodecKind::Int8), 1000), 1000 + 16);
  EXPECT_EQ(encodedBytes(make(CodecKind::Int4), 1001), 501 + 16);
  // k = ceil(0.01 x 1000) = 10 values and u32 indices.
  EXPECT_EQ(encodedBytes(make(CodecKind::TopK, 0.01), 1000), 80);
  EXPECT_EQ(encodedBytes(make(CodecKind::TopK, 0.015), 1000), 120);
}

TEST(Compression, CodecTimeFollowsTheDeviceType) {
  DeviceType cpu = makeCpuType(), gpu = makeA100();
  EXPECT_EQ(quantizeRate(cpu), 2e9);
  EXPECT_EQ(quantizeRate(gpu), 100e9);
  cpu.codecBandwidth = 8e9; // codec_gbs: 8
  EXPECT_EQ(quantizeRate(cpu), 8e9);
  // 1 GB through int8: encode at 8 GB/s, decode at 100 GB/s; casts twice
  // as fast, int4 twice slower, top-k four times slower; none is free.
  EXPECT_NEAR(codecTime(make(CodecKind::Int8), 1e9, 8e9, 100e9), 0.125 + 0.01, 1e-12);
  EXPECT_NEAR(codecTime(make(CodecKind::FP16), 1e9, 8e9, 100e9), 0.0625 + 0.005, 1e-12);
  EXPECT_NEAR(codecTime(make(CodecKind::Int4), 1e9, 8e9, 100e9), 0.25 + 0.02, 1e-12);
  EXPECT_NEAR(codecTime(make(CodecKind::TopK, 0.1), 1e9, 8e9, 100e9), 0.5 + 0.04, 1e-12);
  EXPECT_EQ(codecTime(make(CodecKind::None), 1e9, 8e9, 100e9), 0);
  // The cluster file's field.
  llvm::Expected<ClusterModel> c = parseCluster(R"(
name: t
device_types:
  - {name: cpu, kind: cpu, peak_tflops: {fp32: 1}, mem_bandwidth_gbs: 10, memory_gib: 1, codec_gbs: 3}
devices:
  - {name: d0, type: cpu, host: h, site: s}
)", "t.yaml");
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  EXPECT_EQ(quantizeRate(c->types[0]), 3e9);
}

TEST(Compression, ParsesCodecsAndOverrides) {
  llvm::Expected<Codec> topk = parseCodec("topk:0.05");
  ASSERT_TRUE(!!topk);
  EXPECT_EQ(topk->kind, CodecKind::TopK);
  EXPECT_DOUBLE_EQ(topk->ratio, 0.05);
  EXPECT_EQ(formatCodec(*topk), "topk:0.05");
  EXPECT_EQ(formatCodec(make(CodecKind::TopK, 0.001)), "topk:0.001");
  Codec ef = make(CodecKind::Int8);
  ef.errorFeedback = true;
  EXPECT_EQ(formatCodec(ef, /*withFeedback=*/true), "int8+ef");
  EXPECT_EQ(llvm::toString(parseCodec("int5").takeError()),
            "unknown codec 'int5' (expected none, fp16, bf16, int8, int4, int3, int2, "
            "topk:RATIO or aqsgd:BITS)");
  EXPECT_EQ(llvm::toString(parseCodec("topk:0").takeError()),
            "topk needs a ratio in (0, 1], e.g. topk:0.01; got '0'");
  EXPECT_EQ(llvm::toString(parseCodec("int8:0.5").takeError()),
            "codec 'int8' takes no ratio (only topk:RATIO does)");
  // Top-k with quantized values: topk:R:int8 / topk:R:int4.
  llvm::Expected<Codec> q8 = parseCodec("topk:0.01:int8");
  ASSERT_TRUE(!!q8);
  EXPECT_EQ(q8->kind, CodecKind::TopK);
  EXPECT_EQ(q8->valueBits, 8u);
  EXPECT_EQ(formatCodec(*q8), "topk:0.01:int8");
  llvm::Expected<Codec> q4 = parseCodec("topk:0.5:int4");
  ASSERT_TRUE(!!q4);
  EXPECT_EQ(q4->valueBits, 4u);
  EXPECT_FALSE(*q4 == *parseCodec("topk:0.5"));
  EXPECT_EQ(llvm::toString(parseCodec("topk:0.01:fp16").takeError()),
            "topk:RATIO:VALUES quantizes the kept values to int8 or int4; got 'fp16'");
  EXPECT_EQ(llvm::toString(parseCodec("topk:0.01:").takeError()),
            "topk:RATIO:VALUES quantizes the kept values to int8 or int4; got ''");
  EXPECT_EQ(llvm::toString(parseCodec("topk::int8").takeError()),
            "topk needs a ratio in (0, 1], e.g. topk:0.01; got ''");
  EXPECT_EQ(parseLinkOverride("east:west=topk:0.1:int4")->codec.valueBits, 4u);
  auto o = parseLinkOverride("east:west=int4");
  ASSERT_TRUE(!!o);
  EXPECT_EQ(o->a, "east");
  EXPECT_EQ(o->b, "west");
  EXPECT_EQ(o->codec.kind, CodecKind::Int4);
  EXPECT_EQ(llvm::toString(parseLinkOverride("east=int4").takeError()),
            "'east=int4': expected SITE_A:SITE_B=CODEC[:RATIO]");
}

/// 1 MB of f32 over 100 MB/s with no latency, GPU codecs: 10 ms plain.
LinkTransfer link(double target, Payload payload) {
  LinkTransfer t;
  t.plainBytes = 1e6;
  t.bandwidth = 1e8;
  t.target = target;
  t.payload = payload;
  return t;
}

TEST(Compression, QuantizedTopKSizeIsTheRuntimePayloadLessItsHeader) {
  // The figures of test/Dialect/Dist (D8) and runtime/test/QuantizedTopKTest:
  // 64x64 at 1% keeps 41 values, Rice parameter 7: 41 + 4 + 47 (int8),
  // 21 + 4 + 47 (int4); 256x256 int4 at 1%: 328 + 12 + 738.
  Codec c = *parseCodec("topk:0.01:int8");
  EXPECT_DOUBLE_EQ(encodedBytes(c, 4096), 92);
  c.valueBits = 4;
  EXPECT_DOUBLE_EQ(encodedBytes(c, 4096), 72);
  EXPECT_DOUBLE_EQ(encodedBytes(c, 65536), 1078);
  // About 2.1 bytes per kept value at 1% (int8) against f32 top-k's 8.
  c.valueBits = 8;
  double n = 1 << 20;
  EXPECT_NEAR(encodedBytes(c, n) / (0.01 * n), 2.14, 0.01);
  EXPECT_DOUBLE_EQ(encodedBytes(*parseCodec("topk:0.01"), n), 10486 * 8);
}

TEST(Compression, ChoosesTheLeastLossyCodecThatFits) {
  // Plain 10 ms; fp16 5 ms; int8 ~2.5 ms; int4 ~1.3 ms (+ 0.01-0.08 ms codec).
  EXPECT_TRUE(chooseCodec(link(0.011, Payload::Activation)).isNone());
  EXPECT_EQ(chooseCodec(link(0.006, Payload::Activation)).kind, CodecKind::FP16);
  EXPECT_EQ(chooseCodec(link(0.006, Payload::ActivationGradient)).kind, CodecKind::BF16);
  EXPECT_EQ(chooseCodec(link(0.003, Payload::Activation)).kind, CodecKind::Int8);
  EXPECT_EQ(chooseCodec(link(0.0015, Payload::Activation)).kind, CodecKind::Int4);
  // Nothing fits an activation: the fastest quantization, never top-k.
  Codec act = chooseCodec(link(1e-5, Payload::Activation));
  EXPECT_EQ(act.kind, CodecKind::Int4);
  EXPECT_FALSE(act.errorFeedback);
  // Weight gradients over their target by at most 3x after int4 keep int4
  // (top-k converges more slowly), with error feedback.
  Codec q = chooseCodec(link(5e-4, Payload::WeightGradient));
  EXPECT_EQ(q.kind, CodecKind::Int4);
  EXPECT_TRUE(q.errorFeedback);
  // Further over: top-k with int8 values and the largest ratio of the grid
  // (0.2, 0.1, 0.09, ..., 0.001) that fits, with error feedback.
  LinkTransfer g = link(3e-4, Payload::WeightGradient);
  Codec topk = chooseCodec(g);
  ASSERT_EQ(topk.kind, CodecKind::TopK);
  EXPECT_EQ(topk.valueBits, 8u);
  EXPECT_TRUE(topk.errorFeedback);
  EXPECT_LE(transferTimeWith(g, topk), g.target);
  // 0.3 ms - 0.08 ms of codec leaves 22 kB: 4% of 250k values at 1.89
  // bytes each (Rice parameter 5) fit, 5% do not. f32 top-k fit 1%.
  EXPECT_DOUBLE_EQ(topk.ratio, 0.04);
  topk.ratio = 0.05;
  EXPECT_GT(transferTimeWith(g, topk), g.target);
  // Latency-bound transfers gain less than 10%: no codec.
  LinkTransfer slow = link(0, Payload::Activation);
  slow.latency = 1;
  EXPECT_TRUE(chooseCodec(slow).isNone());
}

/// Two sites of two hosts of two devices: 10 GB/s in a host, 1 GB/s in a
/// site, 10 MB/s between sites.
ClusterModel twoSites() {
  return makeUniformCluster(makeV100(), 2, 2, 2, {1e10, 1e-6, false}, {1e9, 1e-5, false},
                            {1e7, 1e-2, false});
}

TEST(Compression, IslandsCutAtTheLargestGap) {
  ClusterModel c = twoSites();
  std::vector<unsigned> all = {0, 1, 2, 3, 4, 5, 6, 7};
  auto islands = islandsOf(c, all);
  ASSERT_EQ(islands.size(), 2u); // the 100x site gap, not the 10x host gap
  for (auto &island : islands) {
    ASSERT_EQ(island.size(), 4u);
    for (unsigned d : island)
      EXPECT_EQ(c.devices[d].site, c.devices[island[0]].site);
  }
  // Inside one site the largest gap is between hosts.
  EXPECT_EQ(islandsOf(c, {0, 1, 2, 3}).size(), 2u);
  // Equal links: one island.
  EXPECT_EQ(islandsOf(c, {0, 1}).size(), 1u);
}

TEST(Compression, HierarchicalAllReduce) {
  ClusterModel c = twoSites();
  std::vector<std::vector<unsigned>> islands = {{0, 1}, {4, 5}};
  double bytes = 1e8;
  // Inside: a 2-ring at 10 GB/s; between: 2 parallel 2-rings (one per
  // member) of bytes / 2 at 10 MB/s.
  // Each 2-ring adds the received half of its bytes (1.5 x its bytes at
  // the memory bandwidth).
  double mem = memoryBandwidth(c, 0);
  double inner = 2 * (1e-6 + bytes / 2 / 1e10) + 1.5 * bytes / mem;
  double outer = 2 * (1e-2 + bytes / 2 / 2 / 1e7) + 1.5 * bytes / 2 / mem;
  EXPECT_NEAR(islandAllReduceTime(c, islands, bytes), inner + outer, 1e-9);
  double flat = ringAllReduceTime(c, {0, 1, 4, 5}, bytes);
  EXPECT_LT(islandAllReduceTime(c, islands, bytes), flat);
  // Unequal islands: one ring over the first members carries all bytes.
  std::vector<std::vector<unsigned>> unequal = {{0, 1, 2}, {4}};
  double inner3 = ringAllReduceTime(c, {0, 1, 2}, bytes);
  EXPECT_NEAR(islandAllReduceTime(c, unequal, bytes),
              inner3 + ringAllReduceTime(c, {0, 4}, bytes), 1e-9);
  // A codec shrinks the inter-island phase only.
  EXPECT_NEAR(islandAllReduceTime(c, islands, bytes, bytes / 4, 0.5),
              inner + 2 * (1e-2 + bytes / 4 / 2 / 2 / 1e7) + 1.5 * bytes / 4 / 2 / mem + 0.5,
              1e-9);
}

// Three islands of one device each on links of 1, 2.5 and 25 MB/s (8, 20
// and 200 Mbit/s): the runtime's exchange (every pair swaps bytes / 3 in a
// reduce-scatter, then in an all-gather, all pairs at once) takes
// 2 x (latency + bytes / 3 / slowest pair), half of a ring's 4 steps of
// bytes / 3 over the slowest link.
TEST(Compression, ThreeIslandsExchangeDirectly) {
  ClusterSpec spec;
  spec.name = "three-sites";
  spec.file = "<test>";
  spec.types = {makeV100()};
  spec.devices = {{"e0", "V100", "he", "east", ""},
                  {"w0", "V100", "hw", "west", ""},
                  {"s0", "V100", "hs", "south", ""}};
  spec.interSite = LinkSpec{25e6, 1e-3, false};
  spec.rules.push_back({LinkRule::Scope::Sites, "east", "south", {2.5e6, 1e-3, false}, ""});
  spec.rules.push_back({LinkRule::Scope::Sites, "west", "south", {1e6, 1e-3, false}, ""});
  llvm::Expected<ClusterModel> c = buildCluster(spec);
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  double bytes = 3e5;
  double got = islandAllReduceTime(*c, {{0}, {1}, {2}}, bytes);
  EXPECT_NEAR(got, 2 * (1e-3 + bytes / 3 / 1e6), 1e-9);
  EXPECT_LT(got, 0.6 * ringAllReduceTime(*c, {0, 1, 2}, bytes));
}

/// Two MatMul layers of 4 TFLOP each (4 samples), `paramBytes` each, joined by
/// an activation of `edgeBytes`.
CostGraph twoMatMulLayers(double paramBytes, double edgeBytes) {
  CostGraph g;
  g.batchSamples = 4;
  for (unsigned l = 0; l < 2; ++l) {
    CostNode n;
    n.kind = OpKind::MatMul;
    n.fwdFlops = 4e12;
    n.paramBytes = paramBytes;
    n.layer = l;
    g.addNode(n);
  }
  g.addEdge(0, 1, edgeBytes);
  return g;
}

/// Two stages on the two sites, one device each, a 100 MB activation.
struct TwoStage {
  ClusterModel cluster = twoSites();
  CoarseGraph graph;
  PlannerOptions options;
  PartitionPlan plan;
  TwoStage() {
    CostGraph g = twoMatMulLayers(0, 1e8);
    graph = *coarsenGraph(g, cluster, 64);
    plan = evaluateStages(graph, cluster, options, {{0, 1, {0}}, {1, 2, {4}}}, 4,
                          Schedule::OneFOneB);
  }
};

TEST(Compression, PlanAndSimulatorAccountForCodecs) {
  TwoStage f;
  CompressionOptions opts; // auto
  llvm::Expected<PlanCompression> c = compressPlan(f.plan, f.cluster, opts);
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  ASSERT_EQ(c->forward.size(), 1u);
  EXPECT_FALSE(c->forward[0].isNone());
  EXPECT_FALSE(c->backward[0].isNone());
  EXPECT_LT(c->forwardBytes[0], f.plan.stages[0].sendBytes);
  auto plain = simulatePlan(f.plan, f.cluster);
  auto compressed = simulatePlan(f.plan, f.cluster, &*c);
  ASSERT_TRUE(plain && compressed);
  EXPECT_LT(compressed->iterationTime, plain->iterationTime);
  // The simulated link carries the encoded bytes (4 micro-batches, both ways).
  double bytes = 0;
  for (const LinkUsage &l : compressed->links)
    bytes += l.bytes;
  EXPECT_NEAR(bytes, 4 * (c->forwardBytes[0] + c->backwardBytes[0]), 1);
  // none keeps the plain plan; an override names sites in either order.
  opts.mode = "none";
  c = compressPlan(f.plan, f.cluster, opts);
  ASSERT_TRUE(!!c);
  EXPECT_FALSE(c->any());
  opts.links.push_back({f.cluster.sites[1], f.cluster.sites[0], make(CodecKind::FP16), "x"});
  c = compressPlan(f.plan, f.cluster, opts);
  ASSERT_TRUE(!!c);
  EXPECT_EQ(c->forward[0].kind, CodecKind::FP16);
  EXPECT_NEAR(c->forwardBytes[0], f.plan.stages[0].sendBytes / 2, 1);
  // An override naming no link of the plan is an error naming the flag.
  opts.links = {{"nowhere", f.cluster.sites[0], make(CodecKind::Int8), "nowhere:x=int8"}};
  EXPECT_EQ(llvm::toString(compressPlan(f.plan, f.cluster, opts).takeError()),
            "--compress-link=nowhere:x=int8: no link of the plan joins 'nowhere' and '" +
                f.cluster.sites[0] + "' (sites, hosts or devices of the stages)");
}

// Compressed AdamW (straitc --compressed-adam N): the warm-up steps
// all-reduce exact f32, or a dense codec (--compressed-adam-warmup), where
// the steady steps use --compress. One stage, one replica on each site (the
// 10 MB/s link), 40 MB of gradients.
TEST(Compression, CompressedAdamWarmUpAllReducesItsOwnCodec) {
  ClusterModel cluster = twoSites();
  CostGraph g = twoMatMulLayers(2e7, 1e6);
  CoarseGraph graph = *coarsenGraph(g, cluster, 64);
  PartitionPlan plan = evaluateStages(graph, cluster, PlannerOptions(), {{0, 2, {0, 4}}}, 4,
                                      Schedule::OneFOneB);
  ASSERT_EQ(plan.stages.size(), 1u);
  double grad = plan.stages[0].gradBytes;
  ASSERT_NEAR(grad, 4e7, 1);
  CompressionOptions opts;
  opts.mode = "topk:0.03:int4";
  llvm::Expected<PlanCompression> steady = compressPlan(plan, cluster, opts);
  ASSERT_TRUE(!!steady) << llvm::toString(steady.takeError());
  ASSERT_EQ(steady->allReduce[0].kind, CodecKind::TopK);
  // Exact warm-up: the plan's own all-reduce.
  PlanCompression exact = warmupCompression(*steady, plan, cluster, Codec());
  EXPECT_TRUE(exact.allReduce[0].isNone());
  EXPECT_DOUBLE_EQ(exact.allReduceTime[0], plan.stages[0].allReduceTime);
  // int4: a 2-ring of the int4 bytes over 10 MB/s plus the codec, as
  // HierarchicalAllReduce derives it (n/2 + 4 n/256 bytes for n f32 values:
  // 7.76x fewer than f32).
  Codec int4 = make(CodecKind::Int4);
  int4.errorFeedback = true;
  PlanCompression warm = warmupCompression(*steady, plan, cluster, int4);
  EXPECT_EQ(warm.allReduce[0], int4);
  double wire = grad / 4 / 2 + 4 * std::ceil(grad / 4 / 256);
  EXPECT_NEAR(grad / wire, 7.76, 0.01);
  double rate = quantizeRate(cluster.typeOf(0));
  double ring = 2 * (1e-2 + wire / 2 / 1e7) + 1.5 * wire / memoryBandwidth(cluster, 0);
  EXPECT_NEAR(warm.allReduceTime[0], ring + codecTime(int4, grad, rate, rate), 1e-3 * ring);
  EXPECT_LT(steady->allReduceTime[0], warm.allReduceTime[0]);
  EXPECT_LT(warm.allReduceTime[0], exact.allReduceTime[0]);
  // The simulated iteration: steady < int4 warm-up < exact warm-up.
  auto tSteady = simulatePlan(plan, cluster, &*steady);
  auto tWarm = simulatePlan(plan, cluster, &warm);
  auto tExact = simulatePlan(plan, cluster, &exact);
  ASSERT_TRUE(tSteady && tWarm && tExact);
  EXPECT_LT(tSteady->iterationTime, tWarm->iterationTime);
  EXPECT_LT(tWarm->iterationTime, tExact->iterationTime);
  // A stage the steady plan leaves uncompressed stays so.
  opts.mode = "none";
  llvm::Expected<PlanCompression> none = compressPlan(plan, cluster, opts);
  ASSERT_TRUE(!!none);
  EXPECT_TRUE(warmupCompression(*none, plan, cluster, int4).allReduce[0].isNone());
}

// Error feedback keeps a residual per rank: the part of the gradient the
// rank encodes, plus the reduced chunk it encodes again over 3+ islands,
// twice under loss scaling. A residual that does not fit in the memory the
// plan leaves: auto takes bf16 without feedback (or nothing); a given
// quantizing codec is an error; a given cast goes without feedback.
TEST(Compression, ErrorFeedbackResidualsMustFitInMemory) {
  EXPECT_EQ(allReduceResidualBytes({1}, 8e6), 0);            // one island: no exchange
  EXPECT_EQ(allReduceResidualBytes({1, 1}, 8e6), 8e6);       // a swap of all of it
  EXPECT_EQ(allReduceResidualBytes({1, 1, 1, 1}, 8e6), 1e7); // + the reduced quarter
  EXPECT_EQ(allReduceResidualBytes({4, 4}, 8e6), 2e6);       // member j: chunk j of 4
  EXPECT_EQ(allReduceResidualBytes({2, 2, 2}, 6e6), 4e6);    // 3e6 + 3e6 / 3
  EXPECT_EQ(allReduceResidualBytes({3, 1}, 8e6), 8e6);       // unequal: the leaders
  EXPECT_EQ(allReduceResidualBytes({4, 4}, 8e6, true), 4e6); // loss scaling: two copies

  LinkTransfer g = link(5e-4, Payload::WeightGradient);
  g.residualBytes = 1e6;
  g.memoryLeft = 1e6; // fits exactly
  Codec q = chooseCodec(g);
  EXPECT_EQ(q.kind, CodecKind::Int4);
  EXPECT_TRUE(q.errorFeedback);
  g.memoryLeft = 5e5;
  Codec cast = chooseCodec(g); // over its target, but 2x faster than none
  EXPECT_EQ(cast.kind, CodecKind::BF16);
  EXPECT_FALSE(cast.errorFeedback);
  LinkTransfer slow = g;
  slow.latency = 1; // bf16 saves under 10%: none
  EXPECT_TRUE(chooseCodec(slow).isNone());
  // Activations keep no residual: unaffected.
  LinkTransfer a = link(0.0015, Payload::Activation);
  a.residualBytes = 1e6;
  a.memoryLeft = 0;
  EXPECT_EQ(chooseCodec(a).kind, CodecKind::Int4);

  llvm::Expected<Codec> fits =
      givenCodec(make(CodecKind::Int8), link(1, Payload::WeightGradient), "x");
  ASSERT_TRUE(!!fits);
  EXPECT_TRUE(fits->errorFeedback);
  llvm::Expected<Codec> given = givenCodec(make(CodecKind::BF16), g, "x");
  ASSERT_TRUE(!!given);
  EXPECT_EQ(given->kind, CodecKind::BF16);
  EXPECT_FALSE(given->errorFeedback);
  g.residualBytes = 3 * double(1ull << 30);
  g.memoryLeft = double(1ull << 30);
  EXPECT_EQ(llvm::toString(givenCodec(make(CodecKind::TopK, 0.01), g,
                                      "--compress=topk:0.01: "
                                      "the gradient all-reduce of stage 1")
                               .takeError()),
            "--compress=topk:0.01: the gradient all-reduce of stage 1: topk:0.01 needs error "
            "feedback, whose residual (3.00 GiB per rank) does not fit in the 1.00 GiB the plan "
            "leaves on the stage's devices; give it bf16 (no residual) or none, or more memory");

  // A plan: one stage, one replica on each site, 40 MB of gradients, whose
  // int8 residual needs 40 MB beside the stage's peak.
  ClusterModel cluster = twoSites();
  CostGraph graph = twoMatMulLayers(2e7, 1e6);
  CoarseGraph coarse = *coarsenGraph(graph, cluster, 64);
  PartitionPlan plan =
      evaluateStages(coarse, cluster, PlannerOptions(), {{0, 2, {0, 4}}}, 4, Schedule::OneFOneB);
  ASSERT_EQ(plan.stages.size(), 1u);
  StagePlan &s = plan.stages[0];
  ASSERT_GT(s.capacity, s.peakMemory + 4e7);
  CompressionOptions opts;
  opts.mode = "int8";
  llvm::Expected<PlanCompression> c = compressPlan(plan, cluster, opts);
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  EXPECT_TRUE(c->allReduce[0].errorFeedback);
  EXPECT_DOUBLE_EQ(c->residualBytes[0], 4e7);
  EXPECT_NE(formatCompression(*c, plan, cluster)
                .find("memory of stage 0: error-feedback residuals 38.15 MiB per rank beside the "
                      "plan's peak of "),
            std::string::npos)
      << formatCompression(*c, plan, cluster);
  s.peakMemory = s.capacity - 3e7; // 30 MB left
  c = compressPlan(plan, cluster, opts);
  ASSERT_FALSE(!!c);
  EXPECT_NE(llvm::toString(c.takeError())
                .find("--compress=int8: the gradient all-reduce of stage 0: int8 needs error "
                      "feedback"),
            std::string::npos);
  opts.lossScaling = true;
  s.peakMemory = s.capacity - 5e7; // 50 MB left, 80 MB needed with loss scaling
  EXPECT_FALSE(!!compressPlan(plan, cluster, opts));
  opts.lossScaling = false;
  EXPECT_TRUE(!!compressPlan(plan, cluster, opts));
  s.peakMemory = s.capacity - 3e7;
  opts.mode = "auto"; // 4 s at 10 MB/s against milliseconds of compute: int4 or top-k wanted
  c = compressPlan(plan, cluster, opts);
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  EXPECT_EQ(c->allReduce[0].kind, CodecKind::BF16);
  EXPECT_FALSE(c->allReduce[0].errorFeedback);
  EXPECT_EQ(c->residualBytes[0], 0);
  EXPECT_DOUBLE_EQ(c->droppedResidual[0], 4e7);
  EXPECT_NE(formatCompression(*c, plan, cluster)
                .find("memory of stage 0: gradients compressed without error feedback: their "
                      "38.15 MiB residual per rank does not fit in the 28.61 MiB left beside the "
                      "plan's peak"),
            std::string::npos)
      << formatCompression(*c, plan, cluster);
}

TEST(Compression, TiedGradientExchangeTakesAWeightGradientCodec) {
  // A 40 MB tied weight with a copy on each stage: each sends its partial
  // gradient once per iteration over the 10 MB/s link (4.01 s).
  TwoStage f;
  for (StagePlan &s : f.plan.stages)
    s.tiedExchangeTime = 1e-2 + 4e7 / 1e7;
  f.plan.stages[1].tiedBytes = 4e7; // the first holder counts no copy
  CompressionOptions opts;
  opts.mode = "int8";
  llvm::Expected<PlanCompression> c = compressPlan(f.plan, f.cluster, opts);
  ASSERT_TRUE(!!c) << llvm::toString(c.takeError());
  ASSERT_EQ(c->tied.size(), 2u);
  for (unsigned j : {0u, 1u}) {
    EXPECT_EQ(c->tied[j].kind, CodecKind::Int8);
    EXPECT_TRUE(c->tied[j].errorFeedback); // a gradient: the sender keeps the residual
    EXPECT_DOUBLE_EQ(c->tiedPlainBytes[j], 4e7);
    EXPECT_DOUBLE_EQ(c->tiedBytes[j], encodedBytes(c->tied[j], 1e7, 4));
    // Latency + a quarter of the bytes at the planner's bandwidth + codec time.
    EXPECT_LT(c->tiedTime[j], 1e-2 + 1.1e7 / 1e7 + 1e-1);
    EXPECT_GT(c->tiedTime[j], 1e-2 + 1e7 / 1e7);
  }
  EXPECT_NE(formatCompression(*c, f.plan, f.cluster)
                .find("tied-gradient exchange from stage 0 (per iteration): int8+ef (3.9x), "
                      "4010.00 ms -> "),
            std::string::npos)
      << formatCompression(*c, f.plan, f.cluster);
  // The simulated update waits for the shorter exchange.
  PlanCompression exact = *c;
  exact.tiedTime = {f.plan.stages[0].tiedExchangeTime, f.plan.stages[1].tiedExchangeTime};
  auto fast = simulatePlan(f.plan, f.cluster, &*c), slow = simulatePlan(f.plan, f.cluster, &exact);
  ASSERT_TRUE(fast && slow);
  EXPECT_LT(fast->iterationTime, slow->iterationTime - 1.0);
  // AQ-SGD: its GRAD codec; auto: the weight-gradient ladder (4.01 s against
  // the stages' compute of 4 micro-batches: a lossy codec that fits).
  opts.mode = "aqsgd:2:int4";
  c = compressPlan(f.plan, f.cluster, opts);
  ASSERT_TRUE(!!c);
  EXPECT_EQ(c->tied[0].kind, CodecKind::Int4);
  opts.mode = "auto";
  c = compressPlan(f.plan, f.cluster, opts);
  ASSERT_TRUE(!!c);
  EXPECT_FALSE(c->tied[0].isNone());
  EXPECT_TRUE(c->tied[0].errorFeedback);
  EXPECT_LE(c->tiedTime[0], f.plan.stages[0].tiedExchangeTime);
  // A stage without a copy has none.
  f.plan.stages[1].tiedExchangeTime = 0;
  c = compressPlan(f.plan, f.cluster, opts);
  ASSERT_TRUE(!!c);
  EXPECT_TRUE(c->tied[0].isNone() && c->tied[1].isNone());
}

} // namespace

// AQ-SGD: aqsgd:BITS[:GRAD], the delta's bits and the activation
// gradients' plain codec (default int8); the size model is the steady
// state's; activation gradients get GRAD, weight gradients nothing.
TEST(Compression, ParsesAqSgdAndResolvesItPerPayload) {
  llvm::Expected<Codec> a = parseCodec("aqsgd:2");
  ASSERT_TRUE(!!a);
  EXPECT_EQ(a->kind, CodecKind::AqSgd);
  EXPECT_EQ(a->valueBits, 2u);
  EXPECT_EQ(a->backward, CodecKind::Int8);
  EXPECT_EQ(formatCodec(*a), "aqsgd:2:int8");
  llvm::Expected<Codec> b = parseCodec("aqsgd:3:int4");
  ASSERT_TRUE(!!b);
  EXPECT_EQ(formatCodec(*b), "aqsgd:3:int4");
  EXPECT_FALSE(*a == *b);
  for (const char *bad : {"aqsgd", "aqsgd:1", "aqsgd:8", "aqsgd:x"})
    EXPECT_NE(llvm::toString(parseCodec(bad).takeError()).find("needs BITS 2, 3 or 4"),
              std::string::npos)
        << bad;
  for (const char *bad : {"aqsgd:2:topk:0.1", "aqsgd:2:aqsgd:2", "aqsgd:2:int9"})
    EXPECT_NE(llvm::toString(parseCodec(bad).takeError()).find("aqsgd:BITS:GRAD quantizes"),
              std::string::npos)
        << bad;
  // 1024 f32 in blocks of 256: 2 bits 256 + 16, int3 384 + 16.
  EXPECT_EQ(encodedBytes(*a, 1024), 256 + 16);
  EXPECT_EQ(encodedBytes(make(CodecKind::Int3), 1024), 384 + 16);
  EXPECT_EQ(encodedBytes(make(CodecKind::Int2), 1024), 256 + 16);
  EXPECT_EQ(codecForPayload(*b, Payload::Activation), *b);
  EXPECT_EQ(codecForPayload(*b, Payload::ActivationGradient).kind, CodecKind::Int4);
  EXPECT_TRUE(codecForPayload(*b, Payload::WeightGradient).isNone());
  EXPECT_EQ(codecForPayload(*b, Payload::TiedGradient).kind, CodecKind::Int4);
  EXPECT_EQ(codecForPayload(make(CodecKind::Int8), Payload::WeightGradient).kind,
            CodecKind::Int8);
}
