//===- Executor.h - Runs the steps of a device program ----------*- C++ -*-===//
//
// The executor owns the memory of one program: an arena for activations
// (placed by the program's memory plan, or planned here by liveness when the
// program leaves offsets unset) and one buffer per persistent value
// (inputs, parameters, optimizer state, gradients, outputs, constants). It
// resolves every kernel on its backend once, then runs the step list.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_EXECUTOR_H
#define STRAIT_RUNTIME_EXECUTOR_H

#include "strait/runtime/Backend.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"
#include "strait_program.pb.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {

class Executor {
public:
  /// Validates the program, resolves kernels on the backend for its device
  /// and allocates memory. `comm` may be null when the program has no
  /// communication steps; it must outlive the executor.
  static StatusOr<std::unique_ptr<Executor>>
  create(program::Program program, const BackendRegistry &registry,
         Communicator *comm = nullptr);

  /// Initializes parameters / optimizer state from a shard file; every
  /// ROLE_PARAMETER value must be covered.
  Status loadParameters(const program::ParameterShardFile &shards);

  /// A view of a value's storage; NotFound for an unknown id.
  StatusOr<Tensor> getValue(uint32_t id) const;
  StatusOr<Tensor> getValueByName(const std::string &name) const;

  /// Runs every step once, in order; returns once the device finished
  /// (Backend::synchronize), so values can be read.
  Status run();
  /// Runs one step by index into program.steps.
  Status runStep(int index);

  const program::Program &getProgram() const { return program; }
  size_t getArenaBytes() const { return arena.size(); }

private:
  explicit Executor(program::Program program) : program(std::move(program)) {}
  Status resolveKernels(const Backend &backend);
  Status allocate(const Backend &backend);
  Status runKernel(const program::Kernel &kernel, int microBatch);
  Status runComm(const program::Step &step);
  Status annotate(Status status, int step) const;

  program::Program program;
  const Backend *backend = nullptr; // owned by the registry
  Communicator *comm = nullptr;
  Buffer arena;
  std::vector<Buffer> persistent;
  std::map<uint32_t, Tensor> values;
  std::map<uint32_t, int> kernelIndex;
  std::vector<KernelFn> kernelFns; // parallel to program.kernels()
};

/// Plans arena offsets for activations by liveness over the schedule
/// (first-fit over freed intervals). Writes offsets and arena size into the
/// program; returns the arena size.
StatusOr<uint64_t> planMemory(program::Program &program);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_EXECUTOR_H
