//===- FusedLaunch.h - The FusedElementwise launcher ------------*- C++ -*-===//
//
// Plain types shared by CudaFused.cpp (host: decoding through
// strait/runtime/FusedProgram.h) and Fused.cu (device). The whole program
// travels as one kernel parameter (about 2 KB, under the 4 KB limit).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_FUSEDLAUNCH_H
#define STRAIT_RUNTIME_LIB_CUDA_FUSEDLAUNCH_H

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strait {
namespace rt {
namespace cuda {

enum FusedInputKind : uint8_t { kFusedContiguous = 0, kFusedScalar = 1, kFusedStrided = 2 };

/// How an input or output element is stored.
enum FusedStorage : uint8_t { kFusedF32 = 0, kFusedBool = 1, kFusedBF16 = 2, kFusedF16 = 3 };

/// The decoded program (limits as kFused* in FusedProgram.h).
struct FusedDeviceProgram {
  static constexpr int kInputs = 16, kOutputs = 8, kInstructions = 64, kConstants = 64,
                       kRank = 8;
  int numInputs = 0, numInstructions = 0, numOutputs = 0, rank = 0;
  int64_t n = 0;
  int64_t shape[kRank] = {};
  /// Element strides of each input over the output dims (0: broadcast).
  int64_t stride[kInputs][kRank] = {};
  /// How each input is read (FusedInputKind), chosen on the host: the
  /// offset is the output index (same shape), 0 (one element) or computed
  /// from the strides.
  uint8_t inputKind[kInputs] = {};
  const void *inputs[kInputs] = {};
  uint8_t inputType[kInputs] = {}; ///< FusedStorage
  void *outputs[kOutputs] = {};
  uint8_t outputType[kOutputs] = {}; ///< FusedStorage
  int16_t outputReg[kOutputs] = {};
  uint8_t op[kInstructions] = {}; ///< rt::FusedOp values
  int8_t powInt[kInstructions] = {};
  int16_t a[kInstructions] = {}, b[kInstructions] = {}, c[kInstructions] = {};
  float constants[kConstants] = {};
};

/// One thread per output element (32-bit index math when n < 2^31). False
/// if the launch was refused.
bool launchFused(const FusedDeviceProgram &p, cudaStream_t s);

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_FUSEDLAUNCH_H
