//===- ClusterModel.h - Devices, links and their costs ---------*- C++ -*-===//
//
// The cluster model: device types (peak FLOP/s per dtype, memory bandwidth and
// capacity), devices placed on hosts and sites, and the links between every
// pair of devices. Built from a YAML file (see docs/planner.md) or
// programmatically through ClusterSpec; lookups are O(1) through a dense
// matrix of link ids, which stays small (4 bytes a pair) at 1000+ devices.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_CLUSTERMODEL_H
#define STRAIT_ANALYSIS_CLUSTERMODEL_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace strait {

enum class DeviceKind { GPU, NPU, CPU };
enum class DType { F32, F16, BF16, I8 };
constexpr unsigned kNumDTypes = 4;

/// Op families the workload estimator distinguishes (efficiency is per kind).
enum class OpKind { MatMul, Conv, Elementwise, Norm, Softmax, Embedding, Other };
constexpr unsigned kNumOpKinds = 7;

llvm::StringRef stringifyDeviceKind(DeviceKind kind);
llvm::StringRef stringifyDType(DType type);
llvm::StringRef stringifyOpKind(OpKind kind);
std::optional<DType> symbolizeDType(llvm::StringRef name);
std::optional<OpKind> symbolizeOpKind(llvm::StringRef name);
unsigned dtypeBytes(DType type);

struct DeviceType {
  std::string name;
  DeviceKind kind = DeviceKind::GPU;
  /// Peak FLOP/s per dtype; 0 means "not given" (falls back to F32).
  std::array<double, kNumDTypes> peakFlops{};
  double memBandwidth = 0; ///< bytes/s
  double memCapacity = 0;  ///< bytes
  /// Achievable fraction of peak per op kind (1 = pure roofline).
  std::array<double, kNumOpKinds> efficiency{1, 1, 1, 1, 1, 1, 1};
  /// Input bytes/s the device quantizes a transfer to int8 at (cluster
  /// field `codec_gbs`; other codecs scale from it); 0: the default of its
  /// kind (Compression.h).
  double codecBandwidth = 0;
};

/// Measured numbers for one device (or every device of a type); they
/// override the type's peaks. Negative values mean "not measured".
struct DeviceProfile {
  double gemmFlops = -1; ///< measured GEMM FLOP/s (MatMul and Conv)
  std::array<double, kNumOpKinds> efficiency{-1, -1, -1, -1, -1, -1, -1};
  /// The FLOP/s the profile's efficiencies are fractions of (strait-probe
  /// writes the rate it divided by); unset: the type's peak.
  double peakFlops = -1;
  /// Measured memory bandwidth (bytes/s); unset: the type's.
  double memBandwidth = -1;
  /// Measured GEMM rate by arithmetic intensity: (FLOPs per byte moved,
  /// FLOP/s), sorted by intensity (cluster field `gemm_curve`, written by
  /// strait-probe). A GEMM with a small dimension (a 64-wide head, a weight
  /// gradient with few output rows) runs far below a square one's rate;
  /// when set, MatMul and Conv ops take the rate at their own intensity
  /// (interpolated in log-log, clamped at the ends) instead of gemmFlops.
  std::vector<std::pair<double, double>> gemmCurve;
  /// Measured rates of single op types (the compiler's fused kernels, whose
  /// speed the per-kind efficiencies do not predict), by op type without
  /// dialect: FLOP/s counted as the cost model counts the op's FLOPs
  /// (cluster field `op_tflops`), or bytes/s of its operands and results
  /// (`op_gbs`, memory-bound kernels: the op's time is its bytes over it).
  std::map<std::string, double> opFlops, opBandwidth;
  /// Measured seconds of single kernels of one job (cluster field
  /// `kernel_times`, written by `strait-probe --kernels`), by the kernel
  /// signature the compiler gives each op (CostTerm::kernel): an op whose
  /// signature is here takes this time instead of the roofline, for the
  /// batch its shapes hold. Shared between the devices of a profile.
  std::shared_ptr<const llvm::StringMap<double>> kernelTimes;
  bool operator==(const DeviceProfile &o) const {
    bool sameKernels = kernelTimes == o.kernelTimes ||
                       (kernelTimes && o.kernelTimes && *kernelTimes == *o.kernelTimes);
    return gemmFlops == o.gemmFlops && efficiency == o.efficiency &&
           peakFlops == o.peakFlops && memBandwidth == o.memBandwidth &&
           gemmCurve == o.gemmCurve && opFlops == o.opFlops &&
           opBandwidth == o.opBandwidth && sameKernels;
  }
};

struct Device {
  std::string name;
  unsigned type = 0;
  unsigned host = 0; ///< index into ClusterModel::hosts
  unsigned site = 0; ///< index into ClusterModel::sites
  DeviceProfile profile;
  /// Speed class: devices with equal type and profile share one, so costs
  /// are computed once per class rather than once per device.
  unsigned speedClass = 0;
};

struct LinkSpec {
  double bandwidth = 0; ///< bytes/s for one flow
  double latency = 0;   ///< seconds
  /// A shared link is one physical resource for every device pair it
  /// connects (a WAN uplink); otherwise each pair has this bandwidth alone.
  bool shared = false;
  /// Seconds per ring step of an all-reduce over this link, when measured
  /// (cluster field `allreduce_latency_ms`, strait-probe --link-rank fits it
  /// from all-reduces of several sizes): a step posts a send and a receive
  /// and waits for both, so it pays the wake-ups and the communicator's
  /// per-message work, which one ping-pong's latency does not. < 0: latency.
  double allReduceLatency = -1;
};

struct Link : LinkSpec {
  std::string origin; ///< which rule produced it ("sites Ohio-Virginia")
};

class ClusterModel {
public:
  std::string name;
  std::vector<DeviceType> types;
  std::vector<Device> devices;
  std::vector<std::string> hosts, sites;
  std::vector<Link> links;
  /// One representative device per speed class.
  std::vector<unsigned> classRepresentative;
  /// The job's gradient all-reduces go in buckets of this many bytes
  /// (dist-bucket-all-reduces; straitc --all-reduce-bucket-mib), each a
  /// ring of its own that pays the link latency: an all-reduce of B bytes
  /// pays it ceil(B / bucket) times. Not a property of the cluster file:
  /// the passes that plan set it from their option.
  double allReduceBucketBytes = kDefaultAllReduceBucketBytes;
  static constexpr double kDefaultAllReduceBucketBytes = 256.0 * 1048576;

  unsigned size() const { return devices.size(); }
  unsigned linkId(unsigned a, unsigned b) const {
    return linkIds[size_t(a) * devices.size() + b];
  }
  const Link &link(unsigned a, unsigned b) const { return links[linkId(a, b)]; }
  double bandwidth(unsigned a, unsigned b) const { return link(a, b).bandwidth; }
  double latency(unsigned a, unsigned b) const { return link(a, b).latency; }
  const DeviceType &typeOf(unsigned dev) const {
    return types[devices[dev].type];
  }
  unsigned numSpeedClasses() const { return classRepresentative.size(); }

  /// Dense pair -> link id matrix (row-major); filled by buildCluster.
  std::vector<uint32_t> linkIds;
};

//===----------------------------------------------------------------------===//
// Specification (what a file or a generator describes) and its resolution.
//===----------------------------------------------------------------------===//

struct DeviceSpec {
  std::string name, type, host, site;
  std::string where; ///< "file:line:col" for error messages
};

struct ProfileSpec {
  std::string device, type; ///< exactly one is set
  DeviceProfile profile;
  std::string where;
};

struct LinkRule {
  enum class Scope { Devices, Hosts, Sites };
  Scope scope = Scope::Sites;
  std::string a, b;
  LinkSpec spec;
  std::string where;
};

struct ClusterSpec {
  std::string name;
  std::string file; ///< for messages that have no better location
  std::vector<DeviceType> types;
  std::vector<std::string> typeWhere;
  std::vector<DeviceSpec> devices;
  std::vector<ProfileSpec> profiles;
  std::optional<LinkSpec> intraHost, intraSite, interSite;
  std::vector<LinkRule> rules;
};

/// Resolves names, applies link rules (device pair > host pair > site pair >
/// defaults) and validates: unknown types/hosts/sites, duplicate names,
/// non-positive bandwidth, device pairs without any link.
llvm::Expected<ClusterModel> buildCluster(const ClusterSpec &spec);

/// Parses the YAML cluster format; errors read "file:line:col: message".
llvm::Expected<ClusterSpec> parseClusterSpec(llvm::StringRef text,
                                             llvm::StringRef fileName);
llvm::Expected<ClusterModel> parseCluster(llvm::StringRef text,
                                          llvm::StringRef fileName);
llvm::Expected<ClusterModel> loadClusterFile(llvm::StringRef path);

/// A synthetic homogeneous cluster: `sites` sites of `hostsPerSite` hosts of
/// `devicesPerHost` devices of `type`, with the given default links.
ClusterModel makeUniformCluster(const DeviceType &type, unsigned sites,
                                unsigned hostsPerSite, unsigned devicesPerHost,
                                LinkSpec intraHost, LinkSpec intraSite,
                                LinkSpec interSite);

/// Common device types (A100-80GB, V100-32GB, ...), for generators and tests.
DeviceType makeA100();
DeviceType makeV100();
DeviceType makeCpuType();

} // namespace strait

#endif // STRAIT_ANALYSIS_CLUSTERMODEL_H
