//===- Cuda.h - The CUDA backend and the NCCL communicator ------*- C++ -*-===//
//
// Public entry points of strait_rt_cuda (built when STRAIT_ENABLE_CUDA is on;
// STRAIT_HAVE_CUDA is then defined for its users). No CUDA header leaks from
// here: vendor headers stay in lib/cuda.
//
// Memory model: every value lives in CUDA managed memory, so the executor,
// the launcher and the tools keep writing inputs and parameters and reading
// outputs through plain pointers; kernels run asynchronously on one stream
// per backend, and Backend::synchronize() (called by the executor before
// communication and at the end of Executor::run) is the only host wait.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_CUDA_H
#define STRAIT_RUNTIME_CUDA_H

#include "strait/runtime/Backend.h"
#include "strait/runtime/Communicator.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {

/// How MatMul/Gemm use the tensor cores on f32 tensors (cuBLAS compute type):
/// F32 exact (CUBLAS_COMPUTE_32F), TF32 (CUBLAS_COMPUTE_32F_FAST_TF32), BF16
/// (CUBLAS_COMPUTE_32F_FAST_16BF: inputs rounded to bf16, f32 accumulate and
/// f32 outputs, so weights and optimizer state stay f32 "master" copies).
enum class MatmulPrecision { F32, TF32, BF16 };

struct CudaOptions {
  /// CUDA device ordinal the backend runs on (LOCAL_RANK for one GPU per rank).
  int device = 0;
  MatmulPrecision matmul = MatmulPrecision::F32;
  /// Debugging: wait after every kernel so an asynchronous error names it.
  bool syncEachKernel = false;
  /// Ops without a CUDA kernel (and CUDA kernels that decline a dtype or an
  /// attribute combination with Unimplemented) run the CPU backend's kernel
  /// on the same managed memory after waiting for the stream. Off: such ops
  /// fail at load with Unimplemented, as before.
  bool hostFallback = true;
  /// CUDA graphs: each run of kernels between two host synchronization
  /// points of the executor (a KernelSegment) runs directly once, is captured
  /// on its second run and replayed with one cudaGraphLaunch afterwards.
  /// Segments that cannot be captured run directly (one warning).
  bool graphs = true;
  /// Profiling: every kernel launched outside a graph capture is bracketed
  /// by two CUDA events on the backend stream; cudaKernelProfile() sums the
  /// device time per op. Use with graphs off (captured kernels are not seen).
  bool profile = false;
};

/// Device time of one op's kernels (cudaKernelProfile).
struct CudaOpTime {
  std::string op;
  std::string operands; ///< "f32[8x768], bf16[768] -> bf16[8x768]" (up to 3 inputs)
  int64_t launches = 0;
  double ms = 0;
  /// Bytes the launches read and wrote (distinct inputs + outputs, summed
  /// over launches): bytes / ms is the bandwidth the op reached.
  double bytes = 0;
};

/// What the CUDA graphs of a backend did so far (cudaGraphStats).
struct CudaGraphStats {
  int64_t captured = 0; // segments captured into a graph
  int64_t replays = 0;  // graph launches
  int64_t direct = 0;   // segment runs launched kernel by kernel
  int64_t disabled = 0; // segments whose capture failed for good
};

/// Number of CUDA devices; 0 without a driver or a device (never an error).
int cudaDeviceCount();
/// Why cudaDeviceCount() is 0 ("no CUDA driver", "no device", ...).
std::string cudaUnavailableReason();

/// The CUDA backend ("cuda"); Unavailable when the device cannot be used.
StatusOr<std::unique_ptr<Backend>> createCudaBackend(const CudaOptions &options = {});
/// Adds the CUDA backend to `registry` beside the CPU backend.
Status registerCudaBackend(BackendRegistry &registry, const CudaOptions &options = {});

/// Kernels that a CUDA backend ran or will run on the host (hostFallback):
/// per op, the number of kernels resolved to the CPU kernel at load or whose
/// CUDA kernel declined at run time (counted once). Empty for another backend.
std::map<std::string, int64_t> cudaHostFallbackCounts(const Backend &backend);
/// "cuda: N kernels of ops [A, B] run on the host (no CUDA kernel)", or ""
/// when every kernel so far ran on the GPU.
std::string cudaHostFallbackNote(const Backend &backend);

/// What the CUDA backend will do with `program`'s kernels, decided from their
/// ops, dtypes and shapes alone (no device needed): "cuda: N of M kernels
/// will run on the host (...): Op(dtypes) -> (dtypes) xK: reason; ..." and
/// the kernels that wait for the stream to read an integer input (no CUDA
/// graph for their segment); "" when every kernel is native and none waits.
std::string cudaSupportNote(const program::Program &program);

/// Graph counters of a CUDA backend (zeros for another backend).
CudaGraphStats cudaGraphStats(const Backend &backend);

/// With CudaOptions::profile: waits for the stream and returns the device
/// time per op and operand types of the kernels launched since the last
/// call, longest first
/// (empty for another backend or without profiling).
std::vector<CudaOpTime> cudaKernelProfile(const Backend &backend);

/// A communicator that runs the codecs of sendCoded / recvCoded on GPU
/// `device` for f32 tensors in device or managed memory (the payload bytes
/// of lib/codec's encode, sent as the inner communicator's plain message:
/// wire-compatible with the Gloo communicator's own sendCoded / recvCoded,
/// so GPU and CPU ranks interoperate); everything else goes to `inner`.
/// Fixed-size codecs (int8/int4/fp16/bf16) decode on the GPU and need the
/// same block size on both ends; a top-k receive decodes on the host.
/// docs/runtime-cuda.md, "Device codecs".
StatusOr<std::unique_ptr<Communicator>>
createCudaCodecCommunicator(std::unique_ptr<Communicator> inner, int device = 0);

/// A communicator over NCCL between the GPUs of one cluster. `bootstrap` (a
/// Gloo communicator, connected through the job's rendezvous) carries the
/// ncclUniqueId from rank 0, and later the ids of group communicators; it
/// must outlive the NCCL communicator. Operations are blocking; one that does
/// not finish within `timeout` aborts the communicator (DeadlineExceeded).
struct NcclOptions {
  int device = 0;
  std::chrono::milliseconds timeout{60000};
  /// The ranks this communicator joins (sorted, containing this rank; empty:
  /// every rank), e.g. the GPUs of one host under a hybrid communicator.
  /// Transfers name global ranks; a peer outside is an InvalidArgument.
  std::vector<int> ranks;
};
StatusOr<std::unique_ptr<Communicator>>
createNcclCommunicator(Communicator &bootstrap, const NcclOptions &options = {});

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_CUDA_H
