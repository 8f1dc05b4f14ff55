//===- Grouping.h - OP-Fence-like bandwidth islands ------------*- C++ -*-===//
//
// Groups devices into islands joined by fast links: single-linkage
// agglomerative clustering on the bandwidth matrix (a maximum spanning tree
// built with Prim's algorithm in O(n^2)), cut wherever consecutive merge
// bandwidths differ by at least a gap ratio. Each cut is one level of the
// hierarchy, finest first.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_GROUPING_H
#define STRAIT_ANALYSIS_GROUPING_H

#include "strait/Analysis/ClusterModel.h"

#include <vector>

namespace strait {

struct GroupingOptions {
  /// Two merge bandwidths further apart than this ratio start a new level.
  double minGapRatio = 1.5;
};

struct IslandLevel {
  /// Links at or above this bandwidth (bytes/s) are inside islands.
  double threshold = 0;
  /// Islands, each a list of devices in spanning-tree order (neighbours in
  /// the list are joined by fast links, so contiguous chunks stay local).
  std::vector<std::vector<unsigned>> islands;
};

struct DeviceGrouping {
  /// Finest first; the last level is always the whole cluster as one island.
  std::vector<IslandLevel> levels;
  /// All devices in spanning-tree order.
  std::vector<unsigned> order;
};

DeviceGrouping groupDevices(const ClusterModel &cluster,
                            const GroupingOptions &options = {});

} // namespace strait

#endif // STRAIT_ANALYSIS_GROUPING_H
