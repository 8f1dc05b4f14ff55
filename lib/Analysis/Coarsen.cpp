//===- Coarsen.cpp - Layer coarsening of the cost graph -------------------===//
//
// Groups ops into blocks by layer id (ops without one join the latest block
// of their producers, or without producers the block of the op before them
// in topological order; a graph without layer ids is cut
// into equal-FLOP chunks), merges blocks down to maxBlocks, computes the
// bytes crossing each cut and the per-sample time of each block for every
// speed class of the cluster.
//
//===----------------------------------------------------------------------===//

#include "strait/Analysis/Partitioner.h"
#include "strait/Analysis/Workload.h"

#include "llvm/ADT/DenseMap.h"

#include <algorithm>
#include <map>

using namespace strait;

/// Block index of every node (in topological order of first appearance).
static std::vector<unsigned> assignLayers(const CostGraph &graph,
                                          llvm::ArrayRef<unsigned> order,
                                          unsigned maxBlocks) {
  std::vector<unsigned> blockOf(graph.nodes.size(), 0);
  bool anyLayer = llvm::any_of(graph.nodes,
                               [](const CostNode &n) { return n.layer >= 0; });
  if (!anyLayer) {
    double total = 0, running = 0;
    for (const CostNode &n : graph.nodes)
      total += n.fwdFlops + n.backwardFlops();
    unsigned chunks = std::max(1u, std::min<unsigned>(maxBlocks, order.size()));
    for (unsigned v : order) {
      const CostNode &n = graph.nodes[v];
      unsigned b = total > 0 ? unsigned(running / total * chunks) : 0;
      blockOf[v] = std::min(b, chunks - 1);
      running += n.fwdFlops + n.backwardFlops();
    }
    return blockOf;
  }
  // An op without a layer joins the latest layer of its producers: the op
  // before it in topological order may belong to a later layer (a bf16 job's
  // weight casts have no producers and sort early), which would put, e.g.,
  // GPT-2's position-embedding Add behind block 0 and send the hidden state
  // forth and back over the cut. Without producers it follows that op.
  std::vector<std::vector<unsigned>> producers(graph.nodes.size());
  for (const CostEdge &e : graph.edges)
    producers[e.dst].push_back(e.src);
  std::vector<int> resolved(graph.nodes.size(), -1);
  llvm::DenseMap<int, unsigned> index;
  int current = -1;
  for (unsigned v : order) {
    int layer = graph.nodes[v].layer;
    if (layer < 0)
      for (unsigned p : producers[v])
        layer = std::max(layer, resolved[p]);
    if (layer < 0)
      layer = current < 0 ? 0 : current;
    resolved[v] = layer;
    current = layer;
    auto it = index.try_emplace(layer, index.size()).first;
    blockOf[v] = it->second;
  }
  return blockOf;
}

/// Merges consecutive layers into at most maxBlocks groups of ~equal FLOPs.
static std::vector<unsigned> mergeLayers(const std::vector<double> &work,
                                         unsigned maxBlocks) {
  unsigned n = work.size();
  std::vector<unsigned> groupOf(n);
  if (n <= maxBlocks) {
    for (unsigned i = 0; i < n; ++i)
      groupOf[i] = i;
    return groupOf;
  }
  double total = 0;
  for (double w : work)
    total += w;
  double running = 0;
  unsigned group = 0;
  for (unsigned i = 0; i < n; ++i) {
    // Never put more layers in a group than needed to stay within budget.
    unsigned byWork = total > 0 ? unsigned(running / total * maxBlocks) : 0;
    group = std::max(group, std::min(byWork, maxBlocks - 1));
    group = std::max(group, unsigned(i + maxBlocks >= n ? maxBlocks - (n - i)
                                                        : 0));
    groupOf[i] = group;
    running += work[i];
  }
  // A heavy layer can make the target jump; renumber densely.
  unsigned next = 0;
  for (unsigned i = 0; i < n; ++i) {
    unsigned g = groupOf[i];
    groupOf[i] = next;
    if (i + 1 < n && groupOf[i + 1] != g)
      ++next;
  }
  return groupOf;
}

llvm::Expected<CoarseGraph> strait::coarsenGraph(const CostGraph &graph,
                                                 const ClusterModel &cluster,
                                                 unsigned maxBlocks) {
  llvm::Expected<std::vector<unsigned>> order = graph.topologicalOrder();
  if (!order)
    return order.takeError();
  if (graph.nodes.empty())
    return llvm::createStringError(llvm::inconvertibleErrorCode(),
                                   "cost graph '" + graph.name +
                                       "' has no nodes");
  maxBlocks = std::max(1u, maxBlocks);
  std::vector<unsigned> layerOf = assignLayers(graph, *order, maxBlocks);
  unsigned numLayers = 0;
  for (unsigned l : layerOf)
    numLayers = std::max(numLayers, l + 1);
  std::vector<double> work(numLayers, 0);
  for (unsigned v = 0; v < graph.nodes.size(); ++v)
    work[layerOf[v]] += graph.nodes[v].fwdFlops + graph.nodes[v].backwardFlops();
  std::vector<unsigned> groupOf = mergeLayers(work, maxBlocks);
  unsigned numBlocks = groupOf.empty() ? 1 : groupOf.back() + 1;

  CoarseGraph result;
  result.numLayers = numLayers;
  result.batchSamples = graph.batchSamples > 0 ? graph.batchSamples : 1;
  double perSample = 1.0 / result.batchSamples;
  result.blocks.resize(numBlocks);
  unsigned classes = cluster.numSpeedClasses();
  result.fwdTime.assign(classes, std::vector<double>(numBlocks, 0));
  result.bwdTime.assign(classes, std::vector<double>(numBlocks, 0));
  result.updateTime.assign(classes, std::vector<double>(numBlocks, 0));
  std::vector<unsigned> blockOf(graph.nodes.size());
  for (unsigned v : *order) {
    unsigned b = groupOf[layerOf[v]];
    blockOf[v] = b;
    const CostNode &n = graph.nodes[v];
    CoarseGraph::Block &blk = result.blocks[b];
    blk.nodes.push_back(v);
    blk.fwdFlops += n.fwdFlops;
    blk.bwdFlops += n.backwardFlops();
    blk.paramBytes += n.paramBytes;
    blk.frozenBytes += n.frozenBytes;
    blk.activationBytes += n.activationBytes * perSample;
    blk.workingBytes = std::max(blk.workingBytes, 2 * n.bytesWritten * perSample);
    for (unsigned c = 0; c < classes; ++c) {
      unsigned dev = cluster.classRepresentative[c];
      result.fwdTime[c][b] += nodeTime(n, cluster, dev, false) * perSample;
      result.bwdTime[c][b] += nodeTime(n, cluster, dev, true) * perSample;
      result.updateTime[c][b] += nodeUpdateTime(n, cluster, dev);
    }
  }
  // Edges crossing cuts, by a difference array over block indices.
  std::vector<double> diff(numBlocks + 1, 0);
  // A value with several users beyond a cut crosses it once: its span runs
  // from its producer's block to its last user's.
  std::map<std::pair<unsigned, int>, CostEdge> spans;
  for (const CostEdge &e : graph.edges) {
    if (e.value < 0 || blockOf[e.dst] < blockOf[e.src])
      continue;
    auto [it, inserted] = spans.try_emplace({e.src, e.value}, e);
    if (!inserted && blockOf[e.dst] > blockOf[it->second.dst])
      it->second.dst = e.dst;
  }
  std::vector<CostEdge> crossing;
  for (const CostEdge &e : graph.edges)
    if (e.value < 0 || blockOf[e.dst] < blockOf[e.src])
      crossing.push_back(e);
  for (auto &[key, e] : spans)
    crossing.push_back(e);
  for (const CostEdge &e : crossing) {
    unsigned a = blockOf[e.src], b = blockOf[e.dst];
    if (a == b)
      continue;
    if (a > b)
      std::swap(a, b);
    result.spans.push_back({a, b, e.bytes * perSample});
    diff[a] += e.bytes * perSample;
    diff[b] -= e.bytes * perSample;
  }
  for (const SharedWeight &w : graph.sharedWeights) {
    std::vector<unsigned> blocks;
    for (unsigned v : w.nodes)
      if (v < blockOf.size())
        blocks.push_back(blockOf[v]);
    std::sort(blocks.begin(), blocks.end());
    blocks.erase(std::unique(blocks.begin(), blocks.end()), blocks.end());
    if (blocks.size() < 2)
      continue;
    // The original lives in the first block; later blocks hold copies.
    if (w.owner < blockOf.size() && blockOf[w.owner] != blocks.front()) {
      result.blocks[blockOf[w.owner]].paramBytes -= w.bytes;
      result.blocks[blocks.front()].paramBytes += w.bytes;
      if (w.frozen) {
        result.blocks[blockOf[w.owner]].frozenBytes -= w.bytes;
        result.blocks[blocks.front()].frozenBytes += w.bytes;
      }
    }
    result.tied.push_back({w.name, w.bytes, std::move(blocks), w.frozen});
  }
  result.cutBytes.assign(numBlocks > 0 ? numBlocks - 1 : 0, 0);
  double running = 0;
  for (unsigned i = 0; i + 1 < numBlocks; ++i) {
    running += diff[i];
    result.cutBytes[i] = running;
  }
  return result;
}
