//===- ClusterDevices.cpp - The plan's devices in a cluster model ---------===//

#include "ClusterDevices.h"

#include "strait/Analysis/Compression.h"

#include "llvm/ADT/StringMap.h"

#include <map>

using namespace mlir;
using namespace strait;
using namespace strait::dist;

FailureOr<ClusterModel> strait::dist::detail::loadClusterFor(Operation *anchor, StringRef file,
                                               StringRef pass) {
  llvm::Expected<ClusterModel> cluster = loadClusterFile(file);
  if (!cluster)
    return anchor->emitError() << pass << ": " << llvm::toString(cluster.takeError());
  return std::move(*cluster);
}

FailureOr<std::vector<std::vector<unsigned>>>
strait::dist::detail::stageDevices(Operation *anchor, PlanAttr plan, const ClusterModel &cluster,
                     StringRef file) {
  llvm::StringMap<unsigned> byName;
  for (auto [i, d] : llvm::enumerate(cluster.devices))
    byName[d.name] = i;
  std::vector<std::vector<unsigned>> out;
  for (int64_t s = 0; s < plan.getNumStages(); ++s) {
    std::vector<unsigned> devices;
    for (Attribute a : plan.getStage(s).getDevices()) {
      StringRef name = cast<StringAttr>(a).getValue();
      auto it = byName.find(name);
      if (it == byName.end())
        return anchor->emitError() << "device '" << name << "' of stage " << s
                                   << " is not in cluster file '" << file << "'";
      devices.push_back(it->second);
    }
    out.push_back(std::move(devices));
  }
  return out;
}

/// The ranks of each group of devices, each sorted, the groups by first rank.
static std::vector<std::vector<int64_t>>
rankGroups(ArrayRef<std::vector<unsigned>> groups, ArrayRef<unsigned> devices,
           ArrayRef<int64_t> ranks) {
  std::vector<std::vector<int64_t>> out;
  for (const std::vector<unsigned> &island : groups) {
    std::vector<int64_t> group;
    for (unsigned d : island)
      group.push_back(ranks[llvm::find(devices, d) - devices.begin()]);
    llvm::sort(group);
    out.push_back(std::move(group));
  }
  llvm::sort(out, [](const auto &a, const auto &b) { return a.front() < b.front(); });
  return out;
}

std::vector<std::vector<int64_t>> strait::dist::detail::rankIslands(const ClusterModel &cluster,
                                                      ArrayRef<unsigned> devices,
                                                      ArrayRef<int64_t> ranks) {
  std::vector<std::vector<unsigned>> islands = islandsOf(cluster, devices);
  if (islands.size() < 2 ||
      llvm::all_of(islands, [](const auto &i) { return i.size() == 1; }))
    return {};
  return rankGroups(islands, devices, ranks);
}

std::vector<std::vector<int64_t>>
strait::dist::detail::localStepIslands(const ClusterModel &cluster, ArrayRef<unsigned> devices,
                                       ArrayRef<int64_t> ranks) {
  std::vector<std::vector<int64_t>> out = rankIslands(cluster, devices, ranks);
  if (!out.empty())
    return out;
  std::vector<std::vector<unsigned>> islands = islandsOf(cluster, devices);
  if (islands.size() < 2) { // no bandwidth gap: the sites
    std::map<unsigned, std::vector<unsigned>> bySite;
    for (unsigned d : devices)
      bySite[cluster.devices[d].site].push_back(d);
    if (bySite.size() < 2)
      return {};
    islands.clear();
    for (auto &[site, group] : bySite)
      islands.push_back(std::move(group));
  }
  return rankGroups(islands, devices, ranks);
}
