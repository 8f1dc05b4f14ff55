//===- CudaGraph.cpp - Executor segments as CUDA graphs -------------------===//
//
// The executor launches the kernels between two host synchronization points
// as one KernelSegment (strait/runtime/Backend.h), identically every run().
// A GraphSegment<CudaGraphApi> runs its first call directly (warm-up: the scratch block
// grows to its final size, cuBLAS picks its kernels), captures the second on
// the backend stream (cudaStreamCaptureModeThreadLocal: the communication
// thread may keep using CUDA meanwhile), instantiates the graph and launches
// it, and from then on only calls cudaGraphLaunch: one launch instead of one
// per kernel. The policy (GraphSegment.h) has no CUDA call and is tested on
// the CPU; this file holds the CUDA side.
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
#include "GraphSegment.h"

#include <iostream>

namespace strait {
namespace rt {
namespace cuda {

namespace {

/// cuBLAS recommends 32 MiB of workspace on Hopper (cuBLAS docs,
/// cublasSetWorkspace); a fixed one keeps GEMMs from allocating inside a
/// capture.
constexpr size_t kBlasWorkspaceBytes = 32u << 20;

/// The CUDA side of GraphSegment (GraphSegment.h holds the policy).
class CudaGraphApi {
public:
  explicit CudaGraphApi(CudaContext &c) : c(c) {}
  CudaGraphApi(CudaGraphApi &&o) noexcept : c(o.c), exec(o.exec) { o.exec = nullptr; }
  CudaGraphApi(const CudaGraphApi &) = delete;
  ~CudaGraphApi() {
    if (exec) {
      cudaSetDevice(c.options.device);
      cudaGraphExecDestroy(exec);
    }
  }

  bool enabled() const { return c.options.graphs && !c.options.syncEachKernel; }
  bool begin(std::string &why) {
    cudaSetDevice(c.options.device);
    c.refusal = CudaContext::Refusal::None;
    cudaError_t err = cudaStreamBeginCapture(c.stream, cudaStreamCaptureModeThreadLocal);
    if (err == cudaSuccess)
      return true;
    cudaGetLastError();
    why = std::string("cudaStreamBeginCapture: ") + cudaGetErrorName(err);
    return false;
  }
  bool end(std::string &why) {
    cudaGraph_t graph = nullptr;
    cudaError_t err = cudaStreamEndCapture(c.stream, &graph);
    if (err == cudaSuccess && graph) {
      err = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      if (err == cudaSuccess)
        return true;
      exec = nullptr;
      why = std::string("cudaGraphInstantiate: ") + cudaGetErrorName(err);
    } else {
      if (graph)
        cudaGraphDestroy(graph);
      why = std::string("cudaStreamEndCapture: ") + cudaGetErrorName(err);
    }
    cudaGetLastError(); // a capture's error is not sticky: clear it
    return false;
  }
  Status replay() {
    cudaSetDevice(c.options.device);
    return cudaStatus(cudaGraphLaunch(exec, c.stream), "graph launch");
  }
  bool takeRetryable() {
    bool retry = c.refusal == CudaContext::Refusal::Retry;
    c.refusal = CudaContext::Refusal::None;
    return retry;
  }
  void warn(const std::string &why) {
    if (c.graphWarned)
      return;
    c.graphWarned = true;
    std::cerr << "warning: cuda:" << c.options.device
              << ": a kernel segment runs without a CUDA graph (" << why
              << "); further such segments are counted, not reported\n";
  }
  CudaGraphStats &stats() { return c.graphStats; }

private:
  CudaContext &c;
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
  return std::make_unique<GraphSegment<CudaGraphApi>>(CudaGraphApi(c));
}

} // namespace cuda
} // namespace rt
} // namespace strait
