//===- Workload.h - Roofline and communication time estimates --*- C++ -*-===//
//
// The workload estimator: time of an op on a device (roofline over peak
// FLOP/s per dtype, scaled by per-kind efficiency or a measured profile, and
// memory bandwidth), time of a transfer over a link, and all-reduce models.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_WORKLOAD_H
#define STRAIT_ANALYSIS_WORKLOAD_H

#include "strait/Analysis/ClusterModel.h"
#include "strait/Analysis/CostGraph.h"

namespace strait {

/// Sustained FLOP/s of `device` for ops of `kind` in `dtype`. `intensity`
/// (FLOPs per byte moved, when known) picks a GEMM's rate off the profile's
/// measured curve (DeviceProfile::gemmCurve).
double effectiveFlops(const ClusterModel &cluster, unsigned device,
                      OpKind kind, DType dtype, double intensity = 0);
/// Memory bandwidth of `device` (bytes/s): its profile's measured one, else
/// its type's.
double memoryBandwidth(const ClusterModel &cluster, unsigned device);

/// Time of one op: its measured time when the device's profile has its
/// kernel signature (`kernel_times`), else the roofline: max(FLOPs /
/// sustained FLOP/s at its kind and intensity, bytes / memory bandwidth).
double termTime(const CostTerm &term, const ClusterModel &cluster,
                unsigned device);

/// Roofline time of the op on the device for the graph's whole batch. The
/// backward is the sum of its backward ops' own times (CostNode::bwdTerms);
/// without them it is estimated at the forward's kind, moving twice the
/// forward bytes (input and weight gradients).
double nodeTime(const CostNode &node, const ClusterModel &cluster,
                unsigned device, bool backward);

/// Time of the node's once-per-iteration optimizer-step ops.
double nodeUpdateTime(const CostNode &node, const ClusterModel &cluster,
                      unsigned device);

/// latency + bytes / bandwidth.
inline double transferTime(const LinkSpec &link, double bytes) {
  return bytes <= 0 ? 0 : link.latency + bytes / link.bandwidth;
}

/// Ring parameters of a device sequence: the slowest hop's bandwidth (hops
/// crossing one shared link k times get 1/k of it) and the largest per-step
/// latency (Link::allReduceLatency where measured, else the link's latency).
struct RingCost {
  double bandwidth = 1e30, latency = 0;
};
RingCost ringCost(const ClusterModel &cluster, llvm::ArrayRef<unsigned> ring);

/// How many buckets an all-reduce of `bytes` is sent in
/// (ClusterModel::allReduceBucketBytes; at least 1).
double allReduceBuckets(const ClusterModel &cluster, double bytes);

/// The all-reduce's local work outside its rings on each member: the
/// executor copies a bucket's gradients into one buffer and back, and
/// scales the sum to the mean: 6 x bytes at the slowest member's memory
/// bandwidth (0 for fewer than two devices).
double allReduceLocalTime(const ClusterModel &cluster,
                          llvm::ArrayRef<unsigned> devices, double bytes);

/// Ring all-reduce: 2(p-1) steps of bytes/p each, the latency paid once a
/// step per bucket (`buckets` < 0: allReduceBuckets(bytes); a phase of a
/// hierarchical all-reduce passes its whole all-reduce's count), plus the
/// reduce-scatter's sums at the slowest member's memory bandwidth (3 (p-1)/p
/// x bytes: two chunks read, one written, per step), as the runtime's ring
/// adds each received chunk into its own.
double ringAllReduceTime(const ClusterModel &cluster,
                         llvm::ArrayRef<unsigned> devices, double bytes,
                         double buckets = -1);

/// Hierarchical all-reduce: reduce-scatter inside each group, ring
/// all-reduce of the 1/g shards across groups (g parallel rings), then
/// all-gather inside each group. Groups must have equal sizes.
double hierarchicalAllReduceTime(const ClusterModel &cluster,
                                 llvm::ArrayRef<std::vector<unsigned>> groups,
                                 double bytes);

/// Best of flat ring and hierarchical (grouped by site, else by host).
double allReduceTime(const ClusterModel &cluster,
                     llvm::ArrayRef<unsigned> devices, double bytes);

} // namespace strait

#endif // STRAIT_ANALYSIS_WORKLOAD_H
