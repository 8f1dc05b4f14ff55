//===- Grouping.cpp - OP-Fence-like bandwidth islands ---------------------===//

#include "strait/Analysis/Grouping.h"

#include <algorithm>
#include <numeric>

using namespace strait;

namespace {
struct TreeEdge {
  unsigned a, b;
  double bandwidth;
};

struct UnionFind {
  std::vector<unsigned> parent;
  explicit UnionFind(unsigned n) : parent(n) {
    std::iota(parent.begin(), parent.end(), 0);
  }
  unsigned find(unsigned x) {
    while (parent[x] != x)
      x = parent[x] = parent[parent[x]];
    return x;
  }
  void merge(unsigned a, unsigned b) { parent[find(a)] = find(b); }
};
} // namespace

/// Prim's maximum spanning tree on the dense bandwidth matrix, O(n^2).
/// Also returns the order in which devices joined the tree.
static std::vector<TreeEdge> maxSpanningTree(const ClusterModel &cluster,
                                             std::vector<unsigned> &order) {
  unsigned n = cluster.size();
  std::vector<double> best(n, -1);
  std::vector<unsigned> from(n, 0);
  std::vector<char> inTree(n, 0);
  std::vector<TreeEdge> edges;
  unsigned current = 0;
  inTree[0] = 1;
  order.assign(1, 0);
  for (unsigned step = 1; step < n; ++step) {
    for (unsigned v = 0; v < n; ++v) {
      if (inTree[v])
        continue;
      double bw = cluster.bandwidth(current, v);
      if (bw > best[v]) {
        best[v] = bw;
        from[v] = current;
      }
    }
    unsigned next = n;
    for (unsigned v = 0; v < n; ++v)
      if (!inTree[v] && (next == n || best[v] > best[next]))
        next = v;
    inTree[next] = 1;
    edges.push_back({from[next], next, best[next]});
    order.push_back(next);
    current = next;
  }
  return edges;
}

/// Islands of the tree edges with bandwidth >= threshold, each listed in
/// tree order.
static std::vector<std::vector<unsigned>>
islandsAbove(const std::vector<TreeEdge> &edges,
             const std::vector<unsigned> &order, unsigned n,
             double threshold) {
  UnionFind uf(n);
  for (const TreeEdge &e : edges)
    if (e.bandwidth >= threshold)
      uf.merge(e.a, e.b);
  std::vector<int> islandOf(n, -1);
  std::vector<std::vector<unsigned>> islands;
  for (unsigned v : order) {
    unsigned root = uf.find(v);
    if (islandOf[root] < 0) {
      islandOf[root] = islands.size();
      islands.emplace_back();
    }
    islands[islandOf[root]].push_back(v);
  }
  return islands;
}

DeviceGrouping strait::groupDevices(const ClusterModel &cluster,
                                    const GroupingOptions &options) {
  DeviceGrouping result;
  unsigned n = cluster.size();
  if (n == 0)
    return result;
  std::vector<TreeEdge> edges = maxSpanningTree(cluster, result.order);
  std::vector<double> levels;
  for (const TreeEdge &e : edges)
    levels.push_back(e.bandwidth);
  std::sort(levels.begin(), levels.end(), std::greater<double>());
  levels.erase(std::unique(levels.begin(), levels.end()), levels.end());
  // A gap between consecutive distinct merge bandwidths cuts a level.
  for (size_t i = 0; i + 1 < levels.size(); ++i) {
    if (levels[i] / levels[i + 1] < options.minGapRatio)
      continue;
    IslandLevel level;
    level.threshold = levels[i];
    level.islands = islandsAbove(edges, result.order, n, levels[i]);
    result.levels.push_back(std::move(level));
  }
  IslandLevel all;
  all.threshold = levels.empty() ? 0 : levels.back();
  all.islands.push_back(result.order);
  result.levels.push_back(std::move(all));
  return result;
}
