//===- Workload.cpp - Roofline and communication time estimates -----------===//

#include "strait/Analysis/Workload.h"

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/STLExtras.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace strait;

/// The curve's rate at `intensity`: linear in log-log between the measured
/// points, the end points' rates outside them.
static double curveRate(llvm::ArrayRef<std::pair<double, double>> curve,
                        double intensity) {
  if (intensity <= curve.front().first)
    return curve.front().second;
  if (intensity >= curve.back().first)
    return curve.back().second;
  auto hi = std::upper_bound(curve.begin(), curve.end(), intensity,
                             [](double x, const std::pair<double, double> &p) {
                               return x < p.first;
                             });
  auto lo = hi - 1;
  if (intensity == lo->first)
    return lo->second;
  double t = std::log(intensity / lo->first) / std::log(hi->first / lo->first);
  return std::exp(std::log(lo->second) + t * std::log(hi->second / lo->second));
}

double strait::effectiveFlops(const ClusterModel &cluster, unsigned device,
                              OpKind kind, DType dtype, double intensity) {
  const Device &dev = cluster.devices[device];
  const DeviceType &type = cluster.types[dev.type];
  unsigned k = unsigned(kind);
  double peak = type.peakFlops[unsigned(dtype)];
  if (!(peak > 0))
    peak = type.peakFlops[unsigned(DType::F32)];
  bool gemm = kind == OpKind::MatMul || kind == OpKind::Conv;
  // A measured GEMM rate is taken as measured in the op's dtype. The curve
  // and the GEMM rate are MatMul's; a convolution takes its own measured
  // efficiency when the profile has one (im2col and the gradients' loops
  // cost a CPU a third of the GEMM rate), else the GEMM rate.
  if (kind == OpKind::MatMul && intensity > 0 && !dev.profile.gemmCurve.empty())
    return curveRate(dev.profile.gemmCurve, intensity);
  if (kind == OpKind::Conv && dev.profile.efficiency[k] > 0 && dev.profile.peakFlops > 0)
    return dev.profile.peakFlops * dev.profile.efficiency[k];
  if (gemm && dev.profile.gemmFlops > 0)
    return dev.profile.gemmFlops;
  // A profile's efficiencies are fractions of the profile's peak when it
  // states one (strait-probe's measured rates), else of the type's.
  if (dev.profile.efficiency[k] > 0)
    return (dev.profile.peakFlops > 0 ? dev.profile.peakFlops : peak) * dev.profile.efficiency[k];
  return peak * type.efficiency[k];
}

double strait::memoryBandwidth(const ClusterModel &cluster, unsigned device) {
  const Device &dev = cluster.devices[device];
  return dev.profile.memBandwidth > 0 ? dev.profile.memBandwidth
                                      : cluster.types[dev.type].memBandwidth;
}

double strait::termTime(const CostTerm &term, const ClusterModel &cluster,
                        unsigned device) {
  const DeviceProfile &profile = cluster.devices[device].profile;
  // A kernel of this job measured on the device (strait-probe --kernels).
  if (!term.kernel.empty() && profile.kernelTimes)
    if (auto it = profile.kernelTimes->find(term.kernel); it != profile.kernelTimes->end())
      return it->second;
  if (!term.op.empty() && !profile.opBandwidth.empty())
    if (auto it = profile.opBandwidth.find(term.op); it != profile.opBandwidth.end())
      return term.bytes / it->second;
  if (!term.op.empty() && term.flops > 0 && !profile.opFlops.empty())
    if (auto it = profile.opFlops.find(term.op); it != profile.opFlops.end())
      return std::max(term.flops / it->second, term.bytes / memoryBandwidth(cluster, device));
  double intensity = term.bytes > 0 ? term.flops / term.bytes : 0;
  double compute =
      term.flops > 0
          ? term.flops / effectiveFlops(cluster, device, term.kind, term.dtype, intensity)
          : 0;
  return std::max(compute, term.bytes / memoryBandwidth(cluster, device));
}

double strait::nodeTime(const CostNode &node, const ClusterModel &cluster,
                        unsigned device, bool backward) {
  double bytes = node.bytesRead + node.bytesWritten;
  if (!backward)
    return termTime({node.kind, node.dtype, node.fwdFlops, bytes, node.op, node.kernel}, cluster,
                    device);
  // A training step's op that no backward op differentiates (bwdFlops set
  // to 0, no terms) has no backward.
  if (node.bwdTerms.empty() && node.bwdFlops == 0)
    return 0;
  if (node.bwdTerms.empty())
    return termTime({node.kind, node.dtype, node.backwardFlops(), 2 * bytes}, cluster,
                    device);
  double t = 0;
  for (const CostTerm &term : node.bwdTerms)
    t += termTime(term, cluster, device);
  return t;
}

double strait::nodeUpdateTime(const CostNode &node, const ClusterModel &cluster,
                              unsigned device) {
  double t = 0;
  for (const CostTerm &term : node.updateTerms)
    t += termTime(term, cluster, device);
  return t;
}

RingCost strait::ringCost(const ClusterModel &cluster,
                          llvm::ArrayRef<unsigned> ring) {
  RingCost cost;
  if (ring.size() < 2)
    return cost;
  llvm::DenseMap<unsigned, unsigned> sharedUses;
  for (size_t i = 0; i < ring.size(); ++i) {
    unsigned id = cluster.linkId(ring[i], ring[(i + 1) % ring.size()]);
    if (cluster.links[id].shared)
      ++sharedUses[id];
  }
  for (size_t i = 0; i < ring.size(); ++i) {
    unsigned id = cluster.linkId(ring[i], ring[(i + 1) % ring.size()]);
    const Link &link = cluster.links[id];
    double bw = link.bandwidth;
    if (link.shared)
      bw /= std::max(1u, sharedUses[id] / 2); // full duplex
    cost.bandwidth = std::min(cost.bandwidth, bw);
    cost.latency = std::max(cost.latency, link.allReduceLatency >= 0
                                              ? link.allReduceLatency
                                              : link.latency);
  }
  return cost;
}

/// The slowest memory of `devices` (bytes/s).
static double slowestMemory(const ClusterModel &cluster,
                            llvm::ArrayRef<unsigned> devices) {
  double bw = INFINITY;
  for (unsigned d : devices)
    bw = std::min(bw, memoryBandwidth(cluster, d));
  return bw > 0 ? bw : INFINITY;
}

double strait::allReduceLocalTime(const ClusterModel &cluster,
                                  llvm::ArrayRef<unsigned> devices,
                                  double bytes) {
  if (devices.size() < 2 || !(bytes > 0))
    return 0;
  return 6 * bytes / slowestMemory(cluster, devices);
}

double strait::allReduceBuckets(const ClusterModel &cluster, double bytes) {
  if (!(cluster.allReduceBucketBytes > 0) || !(bytes > 0))
    return 1;
  return std::max(1.0, std::ceil(bytes / cluster.allReduceBucketBytes));
}

double strait::ringAllReduceTime(const ClusterModel &cluster,
                                 llvm::ArrayRef<unsigned> ring, double bytes,
                                 double buckets) {
  size_t p = ring.size();
  if (p < 2 || bytes <= 0)
    return 0;
  if (buckets < 0)
    buckets = allReduceBuckets(cluster, bytes);
  RingCost cost = ringCost(cluster, ring);
  double steps = 2.0 * (p - 1);
  // Each of the p - 1 reduce-scatter steps adds the chunk it received into
  // its own: reads two chunks of bytes / p and writes one.
  double sums = 3.0 * (p - 1) / p * bytes / slowestMemory(cluster, ring);
  return steps * (cost.latency * buckets + bytes / p / cost.bandwidth) + sums;
}

double strait::hierarchicalAllReduceTime(
    const ClusterModel &cluster, llvm::ArrayRef<std::vector<unsigned>> groups,
    double bytes) {
  if (groups.empty() || bytes <= 0)
    return 0;
  size_t local = groups.front().size();
  double buckets = allReduceBuckets(cluster, bytes);
  double inner = 0;
  for (const std::vector<unsigned> &g : groups)
    inner = std::max(inner, ringAllReduceTime(cluster, g, bytes, buckets));
  // Cross-group rings: ring r links the r-th device of every group and
  // carries 1/local of the bytes. Rings crossing a shared link split it, so
  // then the traffic is as if one ring carried all the bytes.
  bool shared = false;
  std::vector<unsigned> ring(groups.size());
  double outer = 0;
  for (size_t r = 0; r < local; ++r) {
    for (size_t g = 0; g < groups.size(); ++g) {
      ring[g] = groups[g][r];
      shared |= cluster.link(ring[g], groups[(g + 1) % groups.size()][r]).shared;
    }
    outer = std::max(outer, ringAllReduceTime(cluster, ring, bytes / local, buckets));
  }
  if (shared) {
    for (size_t g = 0; g < groups.size(); ++g)
      ring[g] = groups[g][0];
    outer = ringAllReduceTime(cluster, ring, bytes, buckets);
  }
  return inner + outer;
}

/// Splits devices into equal-size groups by `key`; empty if sizes differ.
template <typename KeyFn>
static std::vector<std::vector<unsigned>>
groupBy(llvm::ArrayRef<unsigned> devices, KeyFn key) {
  std::map<unsigned, std::vector<unsigned>> byKey;
  for (unsigned d : devices)
    byKey[key(d)].push_back(d);
  std::vector<std::vector<unsigned>> groups;
  for (auto &[k, g] : byKey) {
    if (!groups.empty() && g.size() != groups.front().size())
      return {};
    groups.push_back(std::move(g));
  }
  return groups;
}

double strait::allReduceTime(const ClusterModel &cluster,
                             llvm::ArrayRef<unsigned> devices, double bytes) {
  double best = ringAllReduceTime(cluster, devices, bytes);
  auto bySite = groupBy(devices, [&](unsigned d) {
    return cluster.devices[d].site;
  });
  auto byHost = groupBy(devices, [&](unsigned d) {
    return cluster.devices[d].host;
  });
  // hierarchicalAllReduceTime takes the r-th device of every group: equal
  // groups only (sites of 2, 2 and 1 devices read past the last group).
  auto equal = [](const std::vector<std::vector<unsigned>> &groups) {
    return llvm::all_of(groups,
                        [&](const auto &g) { return g.size() == groups.front().size(); });
  };
  for (auto *groups : {&bySite, &byHost})
    if (groups->size() > 1 && groups->front().size() > 1 && equal(*groups))
      best = std::min(best,
                      hierarchicalAllReduceTime(cluster, *groups, bytes));
  return best;
}
