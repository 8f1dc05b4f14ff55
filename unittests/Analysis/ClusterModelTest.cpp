//===- ClusterModelTest.cpp - Cluster file parsing and validation ---------===//

#include "strait/Analysis/ClusterModel.h"
#include "strait/Analysis/Workload.h"

#include "gtest/gtest.h"

#include <chrono>
#include <cmath>

using namespace strait;

namespace {

const char *kTypes = R"(
device_types:
  - name: V100
    kind: gpu
    peak_tflops: {fp32: 15.7, fp16: 125}
    mem_bandwidth_gbs: 900
    memory_gib: 32
)";

std::string errorOf(llvm::StringRef text) {
  llvm::Expected<ClusterModel> model = parseCluster(text, "bad.yaml");
  if (model)
    return "";
  return llvm::toString(model.takeError());
}

std::string clusterPath(llvm::StringRef name) {
  return std::string(STRAIT_SOURCE_DIR) + "/examples/clusters/" + name.str();
}

TEST(ClusterModel, ParsesBundledFiles) {
  struct Case {
    const char *file;
    unsigned devices, sites;
  } cases[] = {{"dtfm-1-datacenter.yaml", 64, 1},
               {"dtfm-2-spot.yaml", 64, 1},
               {"dtfm-3-universities.yaml", 64, 2},
               {"dtfm-4-regional.yaml", 64, 4},
               {"dtfm-5-worldwide.yaml", 64, 8},
               {"fusionllm-48.yaml", 48, 3},
               {"nebula-2site.yaml", 32, 2},
               {"local-4cpu.yaml", 4, 1}};
  for (const Case &c : cases) {
    llvm::Expected<ClusterModel> model = loadClusterFile(clusterPath(c.file));
    ASSERT_TRUE(!!model) << c.file << ": " << llvm::toString(model.takeError());
    EXPECT_EQ(model->size(), c.devices) << c.file;
    EXPECT_EQ(model->sites.size(), c.sites) << c.file;
  }
}

TEST(ClusterModel, ResolvesLinksBySpecificity) {
  llvm::Expected<ClusterModel> world =
      loadClusterFile(clusterPath("dtfm-5-worldwide.yaml"));
  ASSERT_TRUE(!!world) << llvm::toString(world.takeError());
  // gpu24 is in Tokyo, gpu32 in Seoul: 1.1 Gbps, 34 ms.
  EXPECT_NEAR(world->bandwidth(24, 32), 1.1e9 / 8, 1);
  EXPECT_NEAR(world->latency(24, 32), 0.034, 1e-9);
  EXPECT_NEAR(world->bandwidth(0, 1), 2e9 / 8, 1); // inside Oregon
  llvm::Expected<ClusterModel> fusion =
      loadClusterFile(clusterPath("fusionllm-48.yaml"));
  ASSERT_TRUE(!!fusion) << llvm::toString(fusion.takeError());
  // a0 and a1 share a host; a0 and a4 are on two lab-a servers (host rule);
  // b0 and c0 cross the 8 Mbps link.
  EXPECT_NEAR(fusion->bandwidth(0, 1), 32e9 / 8, 1);
  EXPECT_NEAR(fusion->bandwidth(0, 4), 10e9 / 8, 1);
  EXPECT_NEAR(fusion->bandwidth(16, 32), 8e6 / 8, 1);
  EXPECT_TRUE(fusion->link(16, 32).shared);
  // Profiles: c3 measured, c8.. are 1080 Ti with a per-type profile.
  EXPECT_NEAR(effectiveFlops(*fusion, 35, OpKind::MatMul, DType::F16), 14e12,
              1);
  EXPECT_NEAR(effectiveFlops(*fusion, 40, OpKind::MatMul, DType::F16), 9.5e12,
              1);
  EXPECT_GE(fusion->numSpeedClasses(), 5u);
}

TEST(ClusterModel, UnknownDeviceTypeNamesLineAndField) {
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100, site: a}
  - {name: g1, type: A100, site: a}
links:
  intra_site: {bandwidth_gbps: 10}
)");
  EXPECT_NE(err.find("bad.yaml:10:"), std::string::npos) << err;
  EXPECT_NE(err.find("field 'type'"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown device type 'A100'"), std::string::npos) << err;
}

TEST(ClusterModel, NonPositiveBandwidth) {
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {prefix: g, count: 2, type: V100}
links:
  intra_site: {bandwidth_gbps: 0, latency_ms: 1}
)");
  EXPECT_NE(err.find("bad.yaml:11:"), std::string::npos) << err;
  EXPECT_NE(err.find("'bandwidth_gbps' must be positive"), std::string::npos)
      << err;
  err = errorOf(std::string(kTypes) + R"(devices:
  - {prefix: g, count: 2, type: V100}
links:
  intra_site: {bandwidth_mbps: -5}
)");
  EXPECT_NE(err.find("must be positive"), std::string::npos) << err;
}

// A link's measured all-reduce step latency (strait-probe --link-rank's
// allreduce_latency_ms) is its own field: unset it stays < 0 (the ring's
// steps pay the latency); negative values are refused with their line.
TEST(ClusterModel, AllReduceLatencyIsALinkField) {
  llvm::Expected<ClusterModel> model = parseCluster(std::string(kTypes) + R"(devices:
  - {prefix: g, count: 2, per_host: 1, type: V100, site: s}
links:
  intra_site: {bandwidth_gbps: 10, latency_ms: 0.05, allreduce_latency_us: 300}
  inter_site: {bandwidth_gbps: 1}
)", "ar.yaml");
  ASSERT_TRUE(!!model) << llvm::toString(model.takeError());
  EXPECT_DOUBLE_EQ(model->link(0, 1).latency, 5e-5);
  EXPECT_DOUBLE_EQ(model->link(0, 1).allReduceLatency, 3e-4);
  EXPECT_FALSE(model->link(0, 1).shared);
  llvm::Expected<ClusterModel> plain = parseCluster(std::string(kTypes) + R"(devices:
  - {prefix: g, count: 2, type: V100}
links:
  intra_site: {bandwidth_gbps: 10, latency_ms: 0.05}
)", "plain.yaml");
  ASSERT_TRUE(!!plain) << llvm::toString(plain.takeError());
  EXPECT_LT(plain->link(0, 1).allReduceLatency, 0);
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {prefix: g, count: 2, type: V100}
links:
  intra_site: {bandwidth_gbps: 10, allreduce_latency_ms: -1}
)");
  EXPECT_NE(err.find("bad.yaml:11:"), std::string::npos) << err;
  EXPECT_NE(err.find("'allreduce_latency_ms' must not be negative"), std::string::npos) << err;
}

TEST(ClusterModel, DuplicateNames) {
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
  - {name: g0, type: V100}
links:
  intra_site: {bandwidth_gbps: 10}
)");
  EXPECT_NE(err.find("bad.yaml:10:"), std::string::npos) << err;
  EXPECT_NE(err.find("duplicate device name 'g0'"), std::string::npos) << err;
}

TEST(ClusterModel, UnreachableDevices) {
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100, site: east}
  - {name: g1, type: V100, site: west}
links:
  intra_site: {bandwidth_gbps: 10}
)");
  EXPECT_NE(err.find("no path between them"), std::string::npos) << err;
  EXPECT_NE(err.find("'g0'"), std::string::npos) << err;
  EXPECT_NE(err.find("links.sites entry between 'east' and 'west'"),
            std::string::npos)
      << err;
}

// A profile's peak_tflops is what its efficiencies are fractions of, and its
// mem_bandwidth_gbs replaces the type's: strait-probe's measured rates hold
// whatever nominal numbers the device type states.
TEST(ClusterModel, ProfileStatesItsPeakAndBandwidth) {
  std::string devices = R"(devices:
  - {name: g0, type: V100}
  - {name: g1, type: V100}
links:
  intra_site: {bandwidth_gbps: 100}
profiles:
  - {device: g1, gemm_tflops: 10, peak_tflops: 2, mem_bandwidth_gbs: 100,
     efficiency: {elementwise: 0.5}}
)";
  llvm::Expected<ClusterModel> model = parseCluster(std::string(kTypes) + devices, "p.yaml");
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  // g0: the type's numbers; g1: the profile's.
  EXPECT_DOUBLE_EQ(memoryBandwidth(*model, 0), 900e9);
  EXPECT_DOUBLE_EQ(memoryBandwidth(*model, 1), 100e9);
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 1, OpKind::Elementwise, DType::F32), 0.5 * 2e12);
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 1, OpKind::MatMul, DType::F32), 10e12);
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 0, OpKind::Elementwise, DType::F32), 15.7e12);
  // A kind the profile leaves out: the type's efficiency of the type's peak.
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 1, OpKind::Norm, DType::F32), 15.7e12);
  // Different measured numbers make different speed classes.
  EXPECT_EQ(model->numSpeedClasses(), 2u);
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
profiles:
  - {device: g0, mem_bandwidth_gbs: 0}
)");
  EXPECT_NE(err.find("mem_bandwidth_gbs"), std::string::npos) << err;
}

TEST(ClusterModel, UnknownFieldAndSyntaxErrors) {
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100, colour: red}
)");
  EXPECT_NE(err.find("bad.yaml:9:"), std::string::npos) << err;
  EXPECT_NE(err.find("unknown field 'colour'"), std::string::npos) << err;
  err = errorOf("devices: [ {name: g0\n");
  EXPECT_NE(err.find("bad.yaml:"), std::string::npos) << err;
  err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100, site: a}
links:
  sites:
    - {between: [a, nowhere], bandwidth_gbps: 1}
)");
  EXPECT_NE(err.find("unknown site 'nowhere'"), std::string::npos) << err;
  EXPECT_NE(err.find("bad.yaml:12:"), std::string::npos) << err;
}

// Device types and profiles read `efficiency` through one parser: an unknown
// op kind or a non-positive factor names the field, in either place.
TEST(ClusterModel, EfficiencyErrorsNameTheOpKind) {
  std::string err = errorOf(R"(device_types:
  - {name: T, kind: gpu, peak_tflops: {fp32: 1}, mem_bandwidth_gbs: 1, memory_gib: 1,
     efficiency: {matmul: 0.5, warp: 1}}
devices:
  - {name: g0, type: T}
)");
  EXPECT_NE(err.find("unknown op kind 'warp' in 'efficiency'"), std::string::npos) << err;
  err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
profiles:
  - {device: g0, efficiency: {conv: -2}}
)");
  EXPECT_NE(err.find("efficiency.conv"), std::string::npos) << err;
}

TEST(ClusterModel, ThousandDevicesBuildFastWithConstantLookups) {
  auto start = std::chrono::steady_clock::now();
  ClusterModel model = makeUniformCluster(
      makeA100(), 8, 16, 8, {600e9, 2e-6, false}, {25e9, 1e-5, false},
      {1.25e9, 0.03, true});
  double seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - start)
                       .count();
  ASSERT_EQ(model.size(), 1024u);
  EXPECT_LT(seconds, 2.0);
  EXPECT_EQ(model.bandwidth(0, 1), 600e9);
  EXPECT_EQ(model.bandwidth(0, 8), 25e9);
  EXPECT_EQ(model.bandwidth(0, 1023), 1.25e9);
  EXPECT_EQ(model.numSpeedClasses(), 1u);
}

} // namespace

// strait-probe's gemm_curve: a GEMM's rate at its own arithmetic intensity,
// linear in log-log between the measured points and the end points' rates
// beyond them; without an intensity (or without a curve), gemm_tflops.
TEST(ClusterModel, GemmCurveGivesTheRateAtTheOpsIntensity) {
  std::string text = std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
  - {name: g1, type: V100}
links:
  intra_site: {bandwidth_gbps: 100}
profiles:
  - {device: g1, gemm_tflops: 8, gemm_curve: {64: 8, 4: 1, 16: 4}}
)";
  llvm::Expected<ClusterModel> model = parseCluster(text, "p.yaml");
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  const auto &curve = model->devices[1].profile.gemmCurve;
  ASSERT_EQ(curve.size(), 3u); // sorted by intensity
  EXPECT_DOUBLE_EQ(curve[0].first, 4);
  EXPECT_DOUBLE_EQ(curve[2].second, 8e12);
  auto at = [&](double intensity) {
    return effectiveFlops(*model, 1, OpKind::MatMul, DType::F32, intensity);
  };
  EXPECT_DOUBLE_EQ(at(4), 1e12);
  EXPECT_NEAR(at(8), 2e12, 1e3);                   // halfway in log: sqrt(1 * 4)
  EXPECT_NEAR(at(32), std::sqrt(4e12 * 8e12), 1e3); // sqrt(4 * 8)
  EXPECT_DOUBLE_EQ(at(1), 1e12);                    // clamped below
  EXPECT_DOUBLE_EQ(at(1000), 8e12);                 // and above
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 1, OpKind::MatMul, DType::F32), 8e12);
  // The curve is MatMul's: a convolution takes the GEMM rate, or its own
  // measured efficiency (of the profile's peak) when the profile has one.
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 1, OpKind::Conv, DType::F32, 16), 8e12);
  model->devices[1].profile.peakFlops = 8e12;
  model->devices[1].profile.efficiency[unsigned(OpKind::Conv)] = 0.25;
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 1, OpKind::Conv, DType::F32, 16), 2e12);
  // Other kinds and devices without a curve ignore the intensity.
  EXPECT_DOUBLE_EQ(effectiveFlops(*model, 0, OpKind::MatMul, DType::F32, 4), 15.7e12);
  // A term's roofline takes its intensity from its FLOPs and bytes.
  CostTerm t{OpKind::MatMul, DType::F32, 8e9, 1e9};
  EXPECT_NEAR(termTime(t, *model, 1), 8e9 / 2e12, 1e-12);
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
profiles:
  - {device: g0, gemm_curve: {wide: 3}}
)");
  EXPECT_NE(err.find("'gemm_curve' key 'wide' is not a positive intensity"), std::string::npos)
      << err;
  err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
profiles:
  - {device: g0, gemm_curve: {8: -1}}
)");
  EXPECT_NE(err.find("gemm_curve.8"), std::string::npos) << err;
}

// op_tflops / op_gbs: measured rates of single op types. A term of such an
// op is timed by them (FLOPs over the op's FLOP rate, bounded below by the
// memory roofline; or bytes over the op's byte rate); other ops keep their
// kind's rate.
TEST(ClusterModel, OpRatesTimeTheirOpTypes) {
  std::string text = std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
profiles:
  - {device: g0, gemm_tflops: 10, op_tflops: {FusedAttention: 2},
     op_gbs: {LayerNormalizationGrad: 50}}
)";
  llvm::Expected<ClusterModel> model = parseCluster(text, "p.yaml");
  ASSERT_TRUE(bool(model)) << llvm::toString(model.takeError());
  CostTerm attention{OpKind::MatMul, DType::F32, 4e9, 1e6, "FusedAttention"};
  EXPECT_DOUBLE_EQ(termTime(attention, *model, 0), 4e9 / 2e12);
  attention.bytes = 9e9; // memory-bound at the device's bandwidth
  EXPECT_DOUBLE_EQ(termTime(attention, *model, 0), 9e9 / 900e9);
  CostTerm grad{OpKind::Norm, DType::F32, 1e12, 5e8, "LayerNormalizationGrad"};
  EXPECT_DOUBLE_EQ(termTime(grad, *model, 0), 5e8 / 50e9);
  CostTerm gemm{OpKind::MatMul, DType::F32, 4e9, 1e6, "Gemm"};
  EXPECT_DOUBLE_EQ(termTime(gemm, *model, 0), 4e9 / 10e12);
  // A node's forward is timed under its op type too.
  CostNode n;
  n.op = "FusedAttention";
  n.kind = OpKind::MatMul;
  n.fwdFlops = 4e9;
  EXPECT_DOUBLE_EQ(nodeTime(n, *model, 0, false), 4e9 / 2e12);
  std::string err = errorOf(std::string(kTypes) + R"(devices:
  - {name: g0, type: V100}
profiles:
  - {device: g0, op_gbs: {AdamW: 0}}
)");
  EXPECT_NE(err.find("op_gbs.AdamW"), std::string::npos) << err;
}

// exclude_hosts (strait-run --on-host-loss appends it): the hosts' devices go,
// with the link rules and profiles that name them; a group's generated hosts
// too; the remaining links are as before.
TEST(ClusterModel, ExcludeHostsLeavesTheirDevicesAndRulesOut) {
  std::string base = std::string(kTypes) + R"(devices:
  - {name: a0, type: V100, host: a, site: east}
  - {name: b0, type: V100, host: b, site: east}
  - {prefix: g, count: 4, per_host: 2, host_prefix: n, type: V100, site: west}
profiles:
  - {device: b0, gemm_tflops: 50}
links:
  intra_site: {bandwidth_gbps: 10}
  inter_site: {bandwidth_gbps: 1}
  hosts: [{between: [a, b], bandwidth_gbps: 5}, {between: [a, n1], bandwidth_gbps: 2}]
  devices: [{between: [b0, g0], bandwidth_gbps: 3}]
  sites: [{between: [east, west], bandwidth_gbps: 4}]
)";
  llvm::Expected<ClusterModel> all = parseCluster(base, "c.yaml");
  ASSERT_TRUE(!!all) << llvm::toString(all.takeError());
  EXPECT_EQ(all->size(), 6u);
  llvm::Expected<ClusterModel> noB = parseCluster(base + "exclude_hosts: [b, n0]\n", "c.yaml");
  ASSERT_TRUE(!!noB) << llvm::toString(noB.takeError());
  ASSERT_EQ(noB->size(), 3u);
  EXPECT_EQ(noB->devices[0].name, "a0");
  EXPECT_EQ(noB->devices[1].name, "g2");
  EXPECT_EQ(noB->devices[2].name, "g3");
  EXPECT_NEAR(noB->bandwidth(0, 1), 2e9 / 8, 1); // a-n1's host rule stays
  // Two lists add up; a site whose devices all go takes its site rules along.
  llvm::Expected<ClusterModel> west =
      parseCluster(base + "exclude_hosts: [b]\nexclude_hosts: [a]\n", "c.yaml");
  ASSERT_TRUE(!!west) << llvm::toString(west.takeError());
  EXPECT_EQ(west->size(), 4u);
  EXPECT_EQ(west->sites.size(), 1u);
  EXPECT_NEAR(west->bandwidth(0, 2), 10e9 / 8, 1);
  EXPECT_EQ(errorOf(base + "exclude_hosts: [a, x]\n"),
            "bad.yaml:20:20: field 'exclude_hosts' names 'x', which is no device's host");
  EXPECT_NE(errorOf(base + "exclude_hosts: [a, b, n0, n1]\n").find("the cluster has no devices"),
            std::string::npos);
}

// strait-run --on-host-join appends `include_hosts: [H]` to a cluster file
// that left H out (a standby host, or one lost earlier): the lists apply in
// the file's order, so H comes back, and an exclusion after it wins again.
TEST(ClusterModel, IncludeHostsBringsBackAnExcludedHost) {
  std::string base = std::string(kTypes) + R"(devices:
  - {name: a0, type: V100, host: a, site: east}
  - {name: b0, type: V100, host: b, site: east}
  - {name: c0, type: V100, host: c, site: east}
links:
  intra_site: {bandwidth_gbps: 10}
  hosts: [{between: [a, c], bandwidth_gbps: 2}]
)";
  llvm::Expected<ClusterModel> standby = parseCluster(base + "exclude_hosts: [c]\n", "c.yaml");
  ASSERT_TRUE(!!standby) << llvm::toString(standby.takeError());
  EXPECT_EQ(standby->size(), 2u);
  llvm::Expected<ClusterModel> joined =
      parseCluster(base + "exclude_hosts: [c]\ninclude_hosts: [c]\n", "c.yaml");
  ASSERT_TRUE(!!joined) << llvm::toString(joined.takeError());
  ASSERT_EQ(joined->size(), 3u);
  EXPECT_EQ(joined->devices[2].name, "c0");
  EXPECT_NEAR(joined->bandwidth(0, 2), 2e9 / 8, 1); // a-c's host rule is back too
  // Lost again after joining: the later exclusion wins.
  llvm::Expected<ClusterModel> again = parseCluster(
      base + "exclude_hosts: [c]\ninclude_hosts: [c]\nexclude_hosts: [c, b]\n", "c.yaml");
  ASSERT_TRUE(!!again) << llvm::toString(again.takeError());
  ASSERT_EQ(again->size(), 1u);
  EXPECT_EQ(again->devices[0].name, "a0");
  // Bringing back a host nothing left out changes nothing.
  llvm::Expected<ClusterModel> noop = parseCluster(base + "include_hosts: [b]\n", "c.yaml");
  ASSERT_TRUE(!!noop) << llvm::toString(noop.takeError());
  EXPECT_EQ(noop->size(), 3u);
  EXPECT_EQ(errorOf(base + "include_hosts: [x]\n"),
            "bad.yaml:15:17: field 'include_hosts' names 'x', which is no device's host");
}
