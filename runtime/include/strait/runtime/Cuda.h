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
#include <memory>
#include <string>

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
};

/// Number of CUDA devices; 0 without a driver or a device (never an error).
int cudaDeviceCount();
/// Why cudaDeviceCount() is 0 ("no CUDA driver", "no device", ...).
std::string cudaUnavailableReason();

/// The CUDA backend ("cuda"); Unavailable when the device cannot be used.
StatusOr<std::unique_ptr<Backend>> createCudaBackend(const CudaOptions &options = {});
/// Adds the CUDA backend to `registry` beside the CPU backend.
Status registerCudaBackend(BackendRegistry &registry, const CudaOptions &options = {});

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
