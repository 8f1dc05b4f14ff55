//===- CudaSupport.h - Which kernels run natively on CUDA -------*- C++ -*-===//
//
// The CUDA backend's static answer to "does this kernel of a program run as
// a CUDA kernel?", from the op, its operands' dtypes and shapes and its
// attributes, without a device (plain host code: the tests call it on
// machines without a GPU). A kernel that is not native runs through the
// host fallback (CudaOptions::hostFallback): a stream wait and the CPU
// kernel on managed memory. Native kernels that read an integer input on
// the host (Slice's starts/ends, a reduction's axes input) wait for the
// stream and keep their segment out of CUDA graphs; `hostWait` says so.
//
// The dtype rules here mirror the kernels' own checks (which decline with
// Unimplemented at run time, sending the kernel to the host fallback); a
// kernel family that changes what it accepts changes its rule here, and
// CudaNoDevice.EveryCudaOpHasASupportRule fails for an op without one.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_CUDASUPPORT_H
#define STRAIT_RUNTIME_LIB_CUDA_CUDASUPPORT_H

#include "strait/runtime/Tensor.h"
#include "strait_program.pb.h"

#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace cuda {

/// One operand of a kernel as the program declares it.
struct OperandType {
  bool present = false; ///< false: an omitted optional operand
  DType dtype = program::DTYPE_UNSPECIFIED;
  Shape shape;
  /// A small integer program constant: kernels read it from its host copy
  /// (Tensor::host), without a stream wait.
  bool hostConstant = false;
};

/// A kernel with its operands' static types.
struct KernelSpec {
  const program::Kernel *kernel = nullptr;
  std::vector<OperandType> inputs, outputs;
};

struct NativeSupport {
  bool native = false;
  /// Native, but waits for the stream to read an integer input on the host
  /// (no CUDA graph for its segment).
  bool hostWait = false;
  /// Why it is not native (or why it waits); empty otherwise.
  std::string reason;
};

/// Whether `spec` runs as a CUDA kernel of the backend (with cuDNN when the
/// library was built with it). Device-free.
NativeSupport nativeSupport(const KernelSpec &spec);

/// The specs of every kernel of `program`, in order (pointers into it).
std::vector<KernelSpec> kernelSpecs(const program::Program &program);

/// "Conv(bf16, bf16, bf16) -> (bf16)"; an omitted operand is "-".
std::string kernelSignature(const KernelSpec &spec);

/// The ops of the backend's kernel table (sorted), without a device.
std::vector<std::string> cudaKernelOps();
/// The ops that have a dtype rule in nativeSupport (sorted).
std::vector<std::string> cudaSupportRuleOps();

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_CUDASUPPORT_H
