//===- Program.h - Loading and validating device programs -------*- C++ -*-===//
//
// Reads the protobuf files of the program format (strait_program.proto) and
// checks the constraints listed in docs/program-format.md. Every error names
// the offending field ("kernels[3].inputs[1]: unknown value id 17").
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_PROGRAM_H
#define STRAIT_RUNTIME_PROGRAM_H

#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"
#include "strait_program.pb.h"

#include <string>

namespace strait {
namespace rt {

/// Value id that marks an omitted optional kernel operand.
constexpr uint32_t kAbsentValue = 0xFFFFFFFFu;

/// Whether values of this role live in the step's activation arena (at
/// Value.arena_offset, placed by the memory plan): activations, and gradient
/// accumulators, which the first micro-batch of every step overwrites (so
/// nothing of them outlives the step). Every other role has its own
/// persistent buffer.
inline bool inArena(program::ValueRole role) {
  return role == program::ROLE_ACTIVATION || role == program::ROLE_GRADIENT;
}

/// Format versions this runtime reads.
bool isSupportedFormatVersion(int version);

/// Checks constraints P1..P12 of docs/program-format.md.
Status validateProgram(const program::Program &program);
Status validateManifest(const program::PlanManifest &manifest);

/// Parses (binary wire format) and validates.
StatusOr<program::Program> parseProgram(const std::string &bytes);
StatusOr<program::Program> loadProgram(const std::string &path);
StatusOr<program::PlanManifest> loadManifest(const std::string &path);
StatusOr<program::ParameterShardFile> loadShardFile(const std::string &path);

/// Writes any message in binary wire format.
Status writeMessage(const google::protobuf::Message &message,
                    const std::string &path);

/// Copies inline tensor data into `out` (whose dtype and shape must match).
Status copyTensorData(const program::TensorData &data, const Tensor &out,
                      const std::string &what);

/// Fills `out` following a ParameterEntry (data or init scheme).
Status initializeParameter(const program::ParameterEntry &entry,
                           const Tensor &out);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_PROGRAM_H
