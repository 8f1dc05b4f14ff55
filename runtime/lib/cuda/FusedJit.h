//===- FusedJit.h - FusedElementwise compiled through NVRTC -----*- C++ -*-===//
//
// The fast path of FusedElementwise: CUDA C++ source for one straight-line
// kernel per (program, input/output dtypes, input access kinds, index width,
// vector width), compiled at its first launch with NVRTC for the device's
// architecture (SASS), loaded with cudaLibraryLoadData and launched with
// cudaLaunchKernel (runtime API only: no libcuda symbol is linked). Compiled
// kernels are cached process-wide by architecture and source. Arithmetic is
// the CPU kernel's (runtime/lib/cpu/Fused.cpp) with FMA contraction off.
// When the JIT is unavailable (NVRTC missing or failing, unknown arch), the
// caller runs the interpreter (Fused.cu) after one warning per process.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_FUSEDJIT_H
#define STRAIT_RUNTIME_LIB_CUDA_FUSEDJIT_H

#include "strait/runtime/FusedProgram.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace cuda {

struct CudaContext;

/// How the kernel reads one input at output element e.
enum class FusedAccess : uint8_t {
  Contiguous, ///< the output's shape: index e
  Scalar,     ///< one element: index 0
  Broadcast,  ///< index from e with the shapes baked in as constants
};
/// The access kind of an input of shape `input` broadcast to `shape`.
FusedAccess fusedAccess(const Shape &input, const Shape &shape);

/// Everything a generated kernel is specialized on besides the program.
struct FusedJitSpec {
  Shape shape; ///< the iteration (output) shape
  std::vector<Shape> inputShapes;
  /// How each input and output is stored: f32, bf16, f16 or bool.
  std::vector<DType> inputTypes, outputTypes;
  /// Four elements a thread through float4 / ushort4 / uchar4 loads and stores. Only
  /// when no input is Broadcast and numElements(shape) % 4 == 0; the
  /// launcher also checks the pointers' alignment.
  bool vec4 = false;
};

/// The name of the one kernel in every generated source.
constexpr const char *kFusedJitKernel = "strait_fused";

/// The generated source (pure function; no CUDA call): extern "C"
/// __global__ strait_fused(const in0, ..., out0, ..., n) where n is the
/// element count (vec4: the count of 4-element groups), 32-bit unsigned
/// unless numElements(spec.shape) >= 2^31.
std::string fusedJitSource(const FusedProgram &p, const FusedJitSpec &spec);

/// The NVRTC compile options for sm_<arch> (arch = 10 * major + minor).
std::vector<std::string> fusedJitOptions(int arch);
/// Compiles `source` with NVRTC for sm_<arch> into `cubin`. Errors carry
/// NVRTC's message and log. Needs no GPU and no driver.
Status compileFusedJit(const std::string &source, int arch, std::string &cubin);
/// NVRTC's version ("13.0"), or an error when NVRTC does not answer.
StatusOr<std::string> nvrtcVersionString();

/// Runs the FusedElementwise kernel `f` through a compiled kernel on
/// c.stream. False: the caller runs the interpreter (JIT switched off,
/// unavailable, or a capture in progress meets a kernel not compiled yet).
bool launchFusedJit(CudaContext &c, const FusedArgs &f);

/// Whether the JIT is used: STRAIT_CUDA_FUSED_JIT=0 switches it off;
/// setFusedJitMode overrides (0 off, 1 on, -1 back to the environment).
bool fusedJitEnabled();
void setFusedJitMode(int mode);

/// Process-wide counts, for tests and benchmarks.
struct FusedJitCounters {
  int64_t launches = 0;     ///< kernels run through the JIT
  int64_t vec4Launches = 0; ///< of which four elements a thread
  int64_t compiles = 0;     ///< sources compiled and loaded
  int64_t fallbacks = 0;    ///< launches left to the interpreter while enabled
};
FusedJitCounters fusedJitCounters();

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_FUSEDJIT_H
