//===- Backend.h - Device backends and their kernels ------------*- C++ -*-===//
//
// A Backend executes kernels on one kind of device. Backends are registered
// explicitly into a BackendRegistry (no static registrars): the CPU backend
// through registerCpuBackend(), a CUDA or NPU backend beside it through its
// own function. The executor resolves every kernel of a program to a
// KernelFn once, at load time, so that no op-name lookup happens per step.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_BACKEND_H
#define STRAIT_RUNTIME_BACKEND_H

#include "strait/runtime/Attributes.h"
#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {

/// What a kernel sees: its attributes, inputs and preallocated outputs whose
/// static shapes come from the program. Kernels check those shapes against
/// what the op computes and report mismatches.
class KernelContext {
public:
  KernelContext(const program::Kernel &kernel, std::vector<const Tensor *> ins,
                std::vector<Tensor *> outs)
      : kernel(kernel), attrs(kernel.attrs()), ins(std::move(ins)),
        outs(std::move(outs)) {}

  const std::string &op() const { return kernel.op(); }
  /// Opset version of the kernel's attributes; 0 means "latest".
  int64_t opset() const { return kernel.opset(); }
  const AttrReader &getAttrs() const { return attrs; }
  size_t numInputs() const { return ins.size(); }
  size_t numOutputs() const { return outs.size(); }
  /// nullptr for an omitted optional input or an index past the end.
  const Tensor *input(size_t i) const {
    return i < ins.size() ? ins[i] : nullptr;
  }
  Tensor *output(size_t i) const { return i < outs.size() ? outs[i] : nullptr; }

  /// Micro-batch index of the step running the kernel (Step.micro_batch;
  /// -1 when the step is not per micro-batch).
  int getMicroBatch() const { return microBatch; }
  void setMicroBatch(int mb) { microBatch = mb; }

  /// InvalidArgument error naming the kernel.
  Status error(const std::string &message) const;
  /// Unimplemented error naming the kernel.
  Status unsupported(const std::string &message) const;
  /// Checks input i exists (and has the given dtype unless unspecified).
  StatusOr<const Tensor *> requireInput(size_t i,
                                        DType dtype = program::DTYPE_UNSPECIFIED)
      const;
  /// Checks output i exists and has exactly `shape` and `dtype`.
  StatusOr<Tensor *> requireOutput(size_t i, const Shape &shape,
                                   DType dtype) const;
  /// The bytes the kernel reads and writes at least: each distinct input
  /// buffer once (a packed QKV read through three operands counts once),
  /// plus every output (what bench/runtime/program_bytes.py counts).
  int64_t trafficBytes() const;

private:
  const program::Kernel &kernel;
  AttrReader attrs;
  std::vector<const Tensor *> ins;
  std::vector<Tensor *> outs;
  int microBatch = -1;
};

using KernelFn = std::function<Status(KernelContext &)>;

/// A table from op type to kernel function, filled by explicit calls.
class KernelTable {
public:
  void add(const std::string &op, KernelFn fn) { table[op] = std::move(fn); }
  const KernelFn *lookup(const std::string &op) const;
  std::vector<std::string> ops() const;

private:
  std::map<std::string, KernelFn> table;
};

/// A maximal run of kernel launches between two host synchronization points
/// of the executor (communication steps, waits for a transfer, the end of
/// run()). The executor launches it the same way every run(): the same
/// kernels on the same memory, with no host reads in between. The default
/// launches the kernels each time; the CUDA backend records them once into
/// a CUDA graph and replays it. Owned by one executor and used by one thread
/// at a time; it may keep device state until it is destroyed.
class KernelSegment {
public:
  virtual ~KernelSegment() = default;
  /// Runs the segment. `launch` calls the segment's kernel functions in
  /// order; an implementation may call it (possibly more than once, e.g.
  /// after a failed capture) or replay what an earlier call launched.
  virtual Status run(const std::function<Status()> &launch) { return launch(); }
};

class Backend {
public:
  virtual ~Backend() = default;
  /// "cpu", "cuda"; matched against the device prefix of a program.
  virtual std::string name() const = 0;
  /// Resolves a kernel to its function, or Unimplemented naming op and
  /// backend.
  virtual StatusOr<KernelFn> resolve(const program::Kernel &kernel) const = 0;
  /// Folds kernels of a validated program into forms only this backend's
  /// kernels know, before the executor plans its memory (the CPU backend:
  /// a weight gradient's product accumulated in place,
  /// fuseGemmAccumulation). The result computes the same values.
  virtual void foldKernels(program::Program &program) const { (void)program; }
  /// Ops this backend implements (sorted).
  virtual std::vector<std::string> supportedOps() const = 0;
  /// Device memory; the CPU backend returns host memory.
  virtual StatusOr<Buffer> allocate(size_t bytes) const = 0;
  /// Waits for the work kernels queued on the device (a GPU backend runs
  /// them asynchronously on a stream). The executor calls it before host
  /// code touches values: before communication steps and at the end of
  /// run(). The CPU backend runs kernels synchronously: nothing to wait for.
  virtual Status synchronize() const { return Status::ok(); }
  /// A new segment for an executor (see KernelSegment).
  virtual std::unique_ptr<KernelSegment> createSegment() const {
    return std::make_unique<KernelSegment>();
  }
  /// Whether the kernel waits for the device on the host (a GPU backend's
  /// host fallback, or a kernel that reads data on the host before it
  /// launches, as the CUDA GroupedMatMul reads the rows' experts). The
  /// executor launches such a kernel on its own, outside any segment, so
  /// that the kernels around it can still be recorded.
  virtual bool runsOnHost(const program::Kernel &kernel) const {
    (void)kernel;
    return false;
  }
  /// For the executor's communication steps, which may run on its
  /// communication thread while kernels are queued: `t *= factor` on an f32
  /// tensor of this backend's memory (an all-reduce's mean), and a copy
  /// between two such buffers (all-reduce buckets), both finished on return.
  /// The CPU backend loops on the host; a GPU backend works on the device,
  /// on a stream of its own (not the kernels' stream, which may be under a
  /// graph capture), instead of migrating managed pages to the host.
  virtual Status scale(const Tensor &t, float factor) const;
  virtual Status copy(void *dst, const void *src, size_t bytes) const;
};

class BackendRegistry {
public:
  void add(std::unique_ptr<Backend> backend);
  /// Finds the backend for a device string "cpu", "cuda:1", ...
  StatusOr<const Backend *> forDevice(const std::string &device) const;

private:
  std::vector<std::unique_ptr<Backend>> backends;
};

/// Adds the CPU backend to `registry`.
void registerCpuBackend(BackendRegistry &registry);
/// The CPU backend alone (tests, tools).
std::unique_ptr<Backend> createCpuBackend();

/// The kernels OpenBLAS runs the CPU backend's GEMMs on ("SkylakeX", ...).
std::string blasCoreName();
/// The OpenBLAS core this CPU should use when OpenBLAS fell back to its
/// SSE-only kernels on a CPU it does not know (an old OpenBLAS on a newer
/// CPU: 4x slower GEMMs) and OPENBLAS_CORETYPE is unset; "" otherwise.
std::string nativeBlasCore();
/// Threads OpenBLAS runs a GEMM on (its default: every core), as
/// setNumThreads sets the CPU backend's own pool; n <= 0: unchanged.
void setBlasThreads(int n);
/// At the top of main(): when nativeBlasCore() names a core, sets
/// OPENBLAS_CORETYPE to it and re-executes the program (OpenBLAS reads the
/// variable only when it loads). Returns when there is nothing to do or the
/// exec failed.
void reexecWithNativeBlasCore(char **argv);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_BACKEND_H
