//===- CudaGraph.cpp - Executor segments as CUDA graphs -------------------===//
//
// The executor launches the kernels between two host synchronization points
// as one KernelSegment (strait/runtime/Backend.h), identically every run().
// A CudaGraphSegment runs its first call directly (warm-up: the scratch block
// grows to its final size, cuBLAS picks its kernels), captures the second on
// the backend stream (cudaStreamCaptureModeThreadLocal: the communication
// thread may keep using CUDA meanwhile), instantiates the graph and launches
// it, and from then on only calls cudaGraphLaunch: one launch instead of one
// per kernel.
//
// What cannot be captured falls back to direct launches, never to an error:
// a capture that fails (a kernel that synchronizes the stream, such as the
// host fallback, an API call that capture forbids, an instantiation error)
// ends the capture, launches the kernels directly (nothing of the capture
// ran) and disables the graph of that segment, with one warning per backend.
// Scratch growth during a capture refuses (CudaContext::refusal = Retry) and
// the next run captures again. Off with CudaOptions::graphs = false or
// syncEachKernel.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <iostream>

namespace strait {
namespace rt {
namespace cuda {

namespace {

/// cuBLAS recommends 32 MiB of workspace on Hopper (cuBLAS docs,
/// cublasSetWorkspace); a fixed one keeps GEMMs from allocating inside a
/// capture.
constexpr size_t kBlasWorkspaceBytes = 32u << 20;

class CudaGraphSegment : public KernelSegment {
public:
  explicit CudaGraphSegment(CudaContext &c) : c(c) {}
  ~CudaGraphSegment() override {
    if (exec) {
      cudaSetDevice(c.options.device);
      cudaGraphExecDestroy(exec);
    }
  }

  Status run(const std::function<Status()> &launch) override {
    if (disabled || !c.options.graphs || c.options.syncEachKernel) {
      c.graphStats.direct++;
      return launch();
    }
    if (exec) {
      cudaSetDevice(c.options.device);
      c.graphStats.replays++;
      return cudaStatus(cudaGraphLaunch(exec, c.stream), "graph launch");
    }
    if (runs++ == 0) { // warm-up
      c.graphStats.direct++;
      return launch();
    }
    return capture(launch);
  }

private:
  Status capture(const std::function<Status()> &launch) {
    cudaSetDevice(c.options.device);
    c.refusal = CudaContext::Refusal::None;
    cudaError_t begin = cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal);
    if (begin != cudaSuccess) {
      cudaGetLastError();
      return fallBack(launch, std::string("cudaStreamBeginCapture: ") + cudaGetErrorName(begin),
                      true);
    }
    Status s = launch();
    cudaGraph_t graph = nullptr;
    cudaError_t end = cudaStreamEndCapture(c.stream, &graph);
    std::string why;
    if (s.isOk() && end == cudaSuccess && graph) {
      cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      if (inst == cudaSuccess) {
        c.graphStats.captured++;
        c.graphStats.replays++;
        return cudaStatus(cudaGraphLaunch(exec, c.stream), "graph launch");
      }
      exec = nullptr;
      why = std::string("cudaGraphInstantiate: ") + cudaGetErrorName(inst);
    } else {
      if (graph)
        cudaGraphDestroy(graph);
      why = !s.isOk() ? s.getMessage()
                      : std::string("cudaStreamEndCapture: ") + cudaGetErrorName(end);
    }
    cudaGetLastError(); // the capture's error is not sticky: clear it
    bool never = c.refusal != CudaContext::Refusal::Retry;
    c.refusal = CudaContext::Refusal::None;
    return fallBack(launch, why, never);
  }

  /// Nothing of a failed capture ran: launch the kernels directly.
  Status fallBack(const std::function<Status()> &launch, const std::string &why, bool never) {
    if (never) {
      disabled = true;
      c.graphStats.disabled++;
      if (!c.graphWarned) {
        c.graphWarned = true;
        std::cerr << "warning: cuda:" << c.options.device
                  << ": a kernel segment runs without a CUDA graph (" << why
                  << "); further such segments are counted, not reported\n";
      }
    } else {
      runs = 1; // the direct launch below grows the scratch: capture next run
    }
    c.graphStats.direct++;
    return launch();
  }

  CudaContext &c;
  int runs = 0;
  bool disabled = false;
  cudaGraphExec_t exec = nullptr;
};

} // namespace

bool CudaContext::capturing() const {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status != cudaStreamCaptureStatusNone;
}

Status CudaContext::hostSync(const std::string &why) {
  if (capturing()) {
    refusal = Refusal::Never;
    return unavailable("cuda: " + why + " waits for the stream, which a CUDA graph capture "
                       "forbids (the segment runs without a graph)");
  }
  return cudaStatus(cudaStreamSynchronize(stream), why);
}

Status setupGraphs(CudaContext &c) {
  STRAIT_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&c.blasWorkspace, kBlasWorkspaceBytes),
                                    "cuBLAS workspace"));
  return cublasStatus(cublasSetWorkspace(c.blas, c.blasWorkspace, kBlasWorkspaceBytes),
                      "cublasSetWorkspace");
}

void releaseGraphs(CudaContext &c) {
  for (void *p : c.retiredScratch)
    cudaFree(p);
  c.retiredScratch.clear();
  if (c.blasWorkspace)
    cudaFree(c.blasWorkspace);
  c.blasWorkspace = nullptr;
}

std::unique_ptr<KernelSegment> createGraphSegment(CudaContext &c) {
  return std::make_unique<CudaGraphSegment>(c);
}

} // namespace cuda
} // namespace rt
} // namespace strait
