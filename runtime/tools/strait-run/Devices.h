//===- Devices.h - Which backend and which transport a rank uses -*- C++ -*-===//
#ifndef STRAIT_RUNTIME_TOOLS_DEVICES_H
#define STRAIT_RUNTIME_TOOLS_DEVICES_H

#include "StraitRun.h"
#include "strait/runtime/Backend.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Program.h"

#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace run {

/// "cpu" or "cuda:N".
struct DeviceSpec {
  std::string kind = "cpu";
  int ordinal = 0;
  std::string str() const { return kind == "cpu" ? kind : kind + ":" + std::to_string(ordinal); }
};

/// Parses "cpu", "cuda" (ordinal 0) or "cuda:N".
rt::StatusOr<DeviceSpec> parseDevice(const std::string &device);

/// The device a rank runs: the program's (`programDevice`, as straitc wrote
/// it) under --device `flag` ("auto": the program's; "cpu"; "cuda": the
/// program's GPU, or GPU 0 for a CPU program; "cuda:N"). Unavailable, with
/// the way out, when the CUDA backend is not built or the GPU is missing.
rt::StatusOr<DeviceSpec> chooseDevice(const std::string &programDevice,
                                      const std::string &flag, bool cudaBuilt,
                                      int cudaDevices, const std::string &cudaReason);

/// Fast-transport domains of the manifest's ranks: ranks with a "cuda"
/// device on one host share a domain; every other rank has its own.
std::vector<int> gpuDomains(const program::PlanManifest &m);

/// Wraps the Gloo communicator in a hybrid one with NCCL among this rank's
/// host GPUs when the rank runs on CUDA, shares its host with other GPU
/// ranks and --comm is not "gloo"; else returns `gloo`. `description` says
/// which.
rt::StatusOr<std::unique_ptr<rt::Communicator>>
joinFastTransport(std::unique_ptr<rt::Communicator> gloo, const program::PlanManifest &m,
                  const DeviceSpec &device, const RunOptions &o, std::string &description);

/// Registers the CPU backend and, for a CUDA device, the CUDA backend.
rt::Status registerBackend(rt::BackendRegistry &registry, const DeviceSpec &device,
                           const RunOptions &o, std::string &description);

/// What the device's backend says after loading `program`: for CUDA, the
/// kernels that will run on the host or wait on it, from their ops, dtypes
/// and shapes ("" when every kernel runs natively on the GPU).
std::string backendNote(const rt::BackendRegistry &registry, const DeviceSpec &device,
                        const program::Program &program);

/// Whether this strait-run has the CUDA backend, and how many GPUs it sees
/// (0 with the reason when none).
bool cudaBuilt();
int cudaDevices(std::string &reason);

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_DEVICES_H
