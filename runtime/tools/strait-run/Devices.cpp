//===- Devices.cpp - Which backend and which transport a rank uses --------===//
//
// straitc writes each rank's device into its program and the manifest:
// "cpu", or "cuda:N" (the N-th GPU of its host) for a cluster device of kind
// gpu. strait-run runs that device unless --device says otherwise, and on
// GPUs joins the ranks of one host through NCCL (a hybrid communicator: NCCL
// inside the host, Gloo between hosts and sites), unless --comm gloo.
//
//===----------------------------------------------------------------------===//
#include "Devices.h"

#ifdef STRAIT_HAVE_CUDA
#include "strait/runtime/Cuda.h"
#endif

#include <cstdlib>
#include <map>

namespace strait {
namespace run {

using namespace strait::rt;

StatusOr<DeviceSpec> parseDevice(const std::string &device) {
  DeviceSpec d;
  size_t colon = device.find(':');
  d.kind = device.substr(0, colon);
  if (d.kind != "cpu" && d.kind != "cuda")
    return invalidArgument("unknown device '" + device + "' (cpu, cuda or cuda:N)");
  if (colon != std::string::npos) {
    std::string n = device.substr(colon + 1);
    char *end = nullptr;
    long v = n.empty() ? -1 : std::strtol(n.c_str(), &end, 10);
    if (d.kind == "cpu" || v < 0 || !end || *end != '\0' || v > 1 << 20)
      return invalidArgument("unknown device '" + device + "' (cpu, cuda or cuda:N)");
    d.ordinal = static_cast<int>(v);
  }
  return d;
}

StatusOr<DeviceSpec> chooseDevice(const std::string &programDevice, const std::string &flag,
                                  bool cudaBuilt, int cudaDevices,
                                  const std::string &cudaReason) {
  STRAIT_ASSIGN_OR_RETURN(DeviceSpec planned, parseDevice(programDevice.empty()
                                                              ? std::string("cpu")
                                                              : programDevice));
  DeviceSpec d = planned;
  if (flag != "auto") {
    STRAIT_ASSIGN_OR_RETURN(d, parseDevice(flag));
    // --device cuda keeps the planned GPU of a GPU program.
    if (d.kind == "cuda" && flag == "cuda")
      d.ordinal = planned.kind == "cuda" ? planned.ordinal : 0;
  }
  if (d.kind == "cpu")
    return d;
  std::string hint = flag == "auto" ? " (the program was compiled for " + programDevice +
                                          "; --device cpu runs it on the CPU)"
                                    : "";
  // Not Unavailable: a worker exits 3 on that, which means "lost a peer".
  if (!cudaBuilt)
    return unimplemented("device " + d.str() +
                       " needs the CUDA backend, and this strait-run was built without it "
                       "(STRAIT_ENABLE_CUDA)" + hint);
  if (cudaDevices == 0)
    return notFound("device " + d.str() + " is not usable: " + cudaReason + hint);
  if (d.ordinal >= cudaDevices)
    return notFound("device " + d.str() + " does not exist: this machine has " +
                       std::to_string(cudaDevices) + " CUDA device" +
                       (cudaDevices == 1 ? "" : "s") + hint);
  return d;
}

std::vector<int> gpuDomains(const program::PlanManifest &m) {
  int world = m.world_size();
  std::vector<int> domainOf(world);
  for (int r = 0; r < world; ++r)
    domainOf[r] = world + r; // a domain of its own
  std::map<std::string, int> hosts;
  for (const auto &e : m.ranks()) {
    if (e.rank() < 0 || e.rank() >= world || e.device().rfind("cuda", 0) != 0)
      continue;
    auto it = hosts.emplace(e.host(), static_cast<int>(hosts.size())).first;
    domainOf[e.rank()] = it->second;
  }
  return domainOf;
}

StatusOr<std::unique_ptr<Communicator>>
joinFastTransport(std::unique_ptr<Communicator> gloo, const program::PlanManifest &m,
                  const DeviceSpec &device, const RunOptions &o, std::string &description) {
  description = "gloo";
  if (device.kind != "cuda")
    return std::move(gloo);
#ifdef STRAIT_HAVE_CUDA
  // Codecs of transfers from GPU memory run on the GPU (the same payload
  // bytes as the host's: CPU peers decode them).
  STRAIT_ASSIGN_OR_RETURN(gloo, createCudaCodecCommunicator(std::move(gloo), device.ordinal));
  description = "gloo (codecs on the GPU)";
#endif
  std::vector<int> domainOf = gpuDomains(m);
  std::vector<int> mine;
  for (int r = 0; r < static_cast<int>(domainOf.size()); ++r)
    if (domainOf[r] == domainOf[o.rank])
      mine.push_back(r);
  if (mine.size() < 2 || o.comm == "gloo")
    return std::move(gloo);
#ifdef STRAIT_HAVE_CUDA
  NcclOptions n;
  n.device = device.ordinal;
  n.timeout = std::chrono::milliseconds(o.timeoutMs);
  n.ranks = mine;
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> nccl,
                          createNcclCommunicator(*gloo, n));
  description = "nccl inside the host (ranks";
  for (int r : mine)
    description += " " + std::to_string(r);
  description += "), gloo between hosts (codecs on the GPU)";
  return createHybridCommunicator(std::move(gloo), std::move(nccl), std::move(domainOf));
#else
  return std::move(gloo);
#endif
}

Status registerBackend(BackendRegistry &registry, const DeviceSpec &device,
                       const RunOptions &o, std::string &description) {
  registerCpuBackend(registry);
  description = "cpu (OpenBLAS " + blasCoreName() + ")";
  if (device.kind != "cuda")
    return Status::ok();
#ifdef STRAIT_HAVE_CUDA
  CudaOptions c;
  c.device = device.ordinal;
  if (o.matmulPrecision == "f32")
    c.matmul = MatmulPrecision::F32;
  else if (o.matmulPrecision == "tf32")
    c.matmul = MatmulPrecision::TF32;
  else
    c.matmul = MatmulPrecision::BF16;
  STRAIT_RETURN_IF_ERROR(registerCudaBackend(registry, c));
  description = device.str() + ", matmul " + o.matmulPrecision;
  return Status::ok();
#else
  (void)o;
  return unimplemented("device " + device.str() + ": strait-run was built without CUDA");
#endif
}

bool cudaBuilt() {
#ifdef STRAIT_HAVE_CUDA
  return true;
#else
  return false;
#endif
}

int cudaDevices(std::string &reason) {
#ifdef STRAIT_HAVE_CUDA
  int n = cudaDeviceCount();
  if (n == 0)
    reason = cudaUnavailableReason();
  return n;
#else
  reason = "built without CUDA";
  return 0;
#endif
}

std::string backendNote(const BackendRegistry &registry, const DeviceSpec &device,
                        const program::Program &program) {
#ifdef STRAIT_HAVE_CUDA
  if (device.kind == "cuda") {
    // The static verdict (dtypes and shapes) covers kernels that have a CUDA
    // kernel for other dtypes; the backend's own note, the ops it has none for.
    std::string note = cudaSupportNote(program);
    StatusOr<const Backend *> b = registry.forDevice(device.str());
    if (note.empty() && b.isOk())
      note = cudaHostFallbackNote(**b);
    return note;
  }
#else
  (void)registry;
  (void)device;
  (void)program;
#endif
  return "";
}

} // namespace run
} // namespace strait
