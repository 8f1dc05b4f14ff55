//===- StageCost.cpp - The cost model shared by planners and baselines ----===//

#include "StageCost.h"
#include "strait/Analysis/Compression.h"
#include "strait/Analysis/Workload.h"

#include <algorithm>
#include <cmath>

using namespace strait;
using namespace strait::detail;

double AllReduceModel::time(double bytes) const {
  if (bytes <= 0)
    return 0;
  return std::min(alpha[0] + beta[0] * bytes, alpha[1] + beta[1] * bytes);
}

PlanContext::PlanContext(const CoarseGraph &graph, const ClusterModel &cluster,
                         const PlannerOptions &options)
    : graph(graph), cluster(cluster), options(options) {
  globalBatch = options.globalBatch > 0 ? options.globalBatch
                                        : graph.batchSamples;
  unsigned n = graph.blocks.size();
  auto prefix = [n](auto value) {
    std::vector<double> p(n + 1, 0);
    for (unsigned b = 0; b < n; ++b)
      p[b + 1] = p[b] + value(b);
    return p;
  };
  for (unsigned c = 0; c < graph.fwdTime.size(); ++c) {
    fwdPrefix.push_back(prefix([&](unsigned b) { return graph.fwdTime[c][b]; }));
    bwdPrefix.push_back(prefix([&](unsigned b) { return graph.bwdTime[c][b]; }));
    updatePrefix.push_back(prefix([&](unsigned b) {
      return c < graph.updateTime.size() ? graph.updateTime[c][b] : 0.0;
    }));
  }
  paramPrefix = prefix([&](unsigned b) { return graph.blocks[b].paramBytes; });
  frozenPrefix = prefix([&](unsigned b) { return graph.blocks[b].frozenBytes; });
  actPrefix =
      prefix([&](unsigned b) { return graph.blocks[b].activationBytes; });
  // A span [from, to] is read by a stage [b0, b1) that holds one of blocks
  // from + 1 .. to: b0 <= to and b1 >= from + 2. A 2-D difference array
  // over (b0, b1), then prefix sums.
  inputTable.assign(size_t(n + 1) * (n + 1), 0);
  for (const CoarseGraph::Span &s : graph.spans) {
    if (s.to <= s.from || s.from + 2 > n)
      continue;
    inputTable[size_t(0) * (n + 1) + s.from + 2] += s.bytes;
    if (s.to + 1 <= n)
      inputTable[size_t(s.to + 1) * (n + 1) + s.from + 2] -= s.bytes;
  }
  for (unsigned b0 = 0; b0 <= n; ++b0)
    for (unsigned b1 = 1; b1 <= n; ++b1)
      inputTable[size_t(b0) * (n + 1) + b1] += inputTable[size_t(b0) * (n + 1) + b1 - 1];
  for (unsigned b0 = 1; b0 <= n; ++b0)
    for (unsigned b1 = 0; b1 <= n; ++b1)
      inputTable[size_t(b0) * (n + 1) + b1] += inputTable[size_t(b0 - 1) * (n + 1) + b1];
  std::vector<double> working, activation;
  for (const CoarseGraph::Block &blk : graph.blocks) {
    working.push_back(blk.workingBytes);
    activation.push_back(blk.activationBytes);
  }
  workingMax = RangeMax(std::move(working));
  activationMax = RangeMax(std::move(activation));
}

PlanContext::RangeMax::RangeMax(std::vector<double> values) {
  size_t n = values.size();
  table.push_back(std::move(values));
  for (unsigned k = 1; (size_t(1) << k) <= n; ++k) {
    const std::vector<double> &prev = table[k - 1];
    std::vector<double> row(n - (size_t(1) << k) + 1);
    for (size_t b = 0; b < row.size(); ++b)
      row[b] = std::max(prev[b], prev[b + (size_t(1) << (k - 1))]);
    table.push_back(std::move(row));
  }
}

double PlanContext::RangeMax::operator()(unsigned b0, unsigned b1) const {
  if (b1 <= b0)
    return 0;
  unsigned k = 31 - __builtin_clz(b1 - b0);
  return std::max(table[k][b0], table[k][b1 - (1u << k)]);
}

double PlanContext::keptBytes(unsigned b0, unsigned b1, bool recompute) const {
  if (!recompute)
    return rangeSum(actPrefix, b0, b1);
  return inputTable[size_t(b0) * (numBlocks() + 1) + b1];
}

double PlanContext::workingBytes(unsigned b0, unsigned b1, bool recompute) const {
  // Recomputing, the backward of one block holds that block's activations
  // again (the stage's largest) while it runs.
  return workingMax(b0, b1) + (recompute ? activationMax(b0, b1) : 0);
}

Chunk PlanContext::makeChunk(std::vector<unsigned> devices) const {
  Chunk chunk;
  std::vector<unsigned> counts(cluster.numSpeedClasses(), 0);
  for (unsigned d : devices)
    ++counts[cluster.devices[d].speedClass];
  for (unsigned c = 0; c < counts.size(); ++c)
    if (counts[c])
      chunk.classes.push_back({c, counts[c]});
  // The all-reduce time is affine in the bytes for the ring and for the
  // hierarchical algorithm; sample each at two sizes.
  const double s1 = 1e6, s2 = 2e6;
  double ring1 = ringAllReduceTime(cluster, devices, s1);
  double ring2 = ringAllReduceTime(cluster, devices, s2);
  double best1 = allReduceTime(cluster, devices, s1);
  double best2 = allReduceTime(cluster, devices, s2);
  // Hierarchical over the replicas' own bandwidth islands (any sizes), as
  // dist-insert-comm marks the all-reduce and the runtime runs it.
  std::vector<std::vector<unsigned>> islands = islandsOf(cluster, devices);
  if (islands.size() > 1) {
    double share = 1.0 / std::max(1u, options.localSteps);
    double h1 = islandAllReduceTime(cluster, islands, s1, -1, 0, share);
    double h2 = islandAllReduceTime(cluster, islands, s2, -1, 0, share);
    if (h2 < best2) {
      best1 = h1;
      best2 = h2;
    }
  }
  // The executor's copies into and out of the bucket and its mean's scale
  // run once, whichever algorithm sums.
  double local1 = allReduceLocalTime(cluster, devices, s1);
  double local2 = allReduceLocalTime(cluster, devices, s2);
  ring1 += local1;
  ring2 += local2;
  best1 += local1;
  best2 += local2;
  chunk.allReduce.beta[0] = (ring2 - ring1) / (s2 - s1);
  chunk.allReduce.alpha[0] = ring1 - chunk.allReduce.beta[0] * s1;
  chunk.allReduce.beta[1] = (best2 - best1) / (s2 - s1);
  chunk.allReduce.alpha[1] = best1 - chunk.allReduce.beta[1] * s1;
  chunk.devices = std::move(devices);
  return chunk;
}

double PlanContext::shareOf(unsigned b0, unsigned b1, const Chunk &chunk,
                            unsigned cls) const {
  double total = 0, mine = 0;
  for (auto [c, count] : chunk.classes) {
    double t = rangeSum(fwdPrefix[c], b0, b1) + rangeSum(bwdPrefix[c], b0, b1);
    double rate = t > 0 ? 1 / t : 1;
    total += rate * count;
    if (c == cls)
      mine = rate;
  }
  return total > 0 ? mine / total : 0;
}

StageCost PlanContext::stageCost(unsigned b0, unsigned b1, const Chunk &chunk,
                                 double m, bool recompute) const {
  StageCost cost;
  double total = 0;
  for (auto [c, count] : chunk.classes) {
    double t = rangeSum(fwdPrefix[c], b0, b1) + rangeSum(bwdPrefix[c], b0, b1);
    total += (t > 0 ? 1 / t : 1) * count;
  }
  cost.maxInFlight = 1e30;
  cost.paramBytes = paramBytes(b0, b1);
  cost.gradBytes = gradBytes(b0, b1);
  double state = stateBytes(b0, b1);
  double act = keptBytes(b0, b1, recompute);
  double work = workingBytes(b0, b1, recompute);
  for (auto [c, count] : chunk.classes) {
    double f = rangeSum(fwdPrefix[c], b0, b1), b = rangeSum(bwdPrefix[c], b0, b1);
    // The micro-batch split follows speed without recomputation, as the
    // exporter slices it; recomputing adds one forward to every backward.
    double share = (f + b > 0 ? 1 / (f + b) : 1) / total;
    cost.fwd = std::max(cost.fwd, m * share * f);
    cost.bwd = std::max(cost.bwd, m * share * (recompute ? b + f : b));
    cost.update = std::max(cost.update, rangeSum(updatePrefix[c], b0, b1));
    double room = capacity(c) - state - work * m * share;
    double perMicro = act * m * share;
    double fit = room < 0 ? -1 : perMicro > 0 ? room / perMicro : 1e30;
    if (fit < cost.maxInFlight) {
      cost.maxInFlight = fit;
      cost.worstClass = c;
    }
  }
  cost.allReduce = cost.gradBytes > 0 ? chunk.allReduce.time(cost.gradBytes) : 0;
  return cost;
}

double PlanContext::stateBytes(unsigned b0, unsigned b1) const {
  const MemoryOptions &mem = options.memory;
  return paramBytes(b0, b1) +
         gradBytes(b0, b1) * (mem.gradBytesPerParamByte + mem.optimizerBytesPerParamByte);
}

double PlanContext::tiedCopyBytes(unsigned b0, unsigned b1, bool frozenOnly) const {
  double bytes = 0;
  for (const CoarseGraph::TiedWeight &w : graph.tied)
    if ((!frozenOnly || w.frozen) && w.blocks.front() < b0 &&
        llvm::any_of(w.blocks, [&](unsigned b) { return b >= b0 && b < b1; }))
      bytes += w.bytes;
  return bytes;
}

double PlanContext::capacity(unsigned cls) const {
  const DeviceType &type =
      cluster.typeOf(cluster.classRepresentative[cls]);
  return type.memCapacity * (1 - options.memory.reserveFraction);
}

double PlanContext::memory(unsigned b0, unsigned b1, const Chunk &chunk,
                           unsigned cls, double m, double inFlight,
                           bool recompute) const {
  double state = stateBytes(b0, b1);
  // What the in-flight micro-batches keep, plus one block's working set.
  return state + (keptBytes(b0, b1, recompute) * inFlight +
                   workingBytes(b0, b1, recompute)) *
                      m * shareOf(b0, b1, chunk, cls);
}

CommCost PlanContext::comm(const Chunk &from, const Chunk &to) const {
  CommCost cost;
  size_t pairs = std::min(from.devices.size(), to.devices.size());
  // Pair replica i with replica i; pairs on one shared link split it.
  std::vector<std::pair<unsigned, unsigned>> uses;
  for (size_t i = 0; i < pairs; ++i) {
    unsigned id = cluster.linkId(from.devices[i], to.devices[i]);
    auto it = llvm::find_if(uses, [&](auto &u) { return u.first == id; });
    if (it == uses.end())
      uses.push_back({id, 1});
    else
      ++it->second;
  }
  double slowest = 1e30;
  for (auto [id, count] : uses) {
    const Link &link = cluster.links[id];
    double bw = link.shared ? link.bandwidth / count : link.bandwidth;
    if (bw < slowest) {
      slowest = bw;
      cost.link = id;
    }
    cost.latency = std::max(cost.latency, link.latency);
  }
  cost.bandwidth = slowest * pairs;
  return cost;
}

double PlanContext::commTime(const CommCost &c, unsigned cutAfter,
                             double m) const {
  if (cutAfter >= graph.cutBytes.size())
    return 0;
  double bytes = graph.cutBytes[cutAfter] * m;
  return bytes > 0 ? c.latency + bytes / c.bandwidth : 0;
}

