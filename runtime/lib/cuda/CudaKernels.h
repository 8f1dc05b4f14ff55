//===- CudaKernels.h - Internal interface of the CUDA backend ---*- C++ -*-===//
//
// Host side (*.cpp, compiled by the C++ compiler): kernel functions that read
// attributes, check shapes and call the launchers. Device side (*.cu, nvcc):
// the __global__ kernels behind the launch* functions declared here. Shape
// checks happen on the host from the static shapes; checks that need data
// (indices, labels, the optimizer step) happen on the device and raise the
// backend's error flag with the kernel's tag, reported by synchronize().
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_CUDAKERNELS_H
#define STRAIT_RUNTIME_LIB_CUDA_CUDAKERNELS_H

#include "strait/runtime/Backend.h"
#include "strait/runtime/Cuda.h"
#include "strait/runtime/KernelArgs.h"
#include "CudaLaunch.h"

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace cuda {

/// State shared by the kernels of one backend.
struct CudaContext {
  CudaOptions options;
  cudaStream_t stream = nullptr;
  /// For the executor's communication steps (Backend::scale / copy), which
  /// may run while `stream` is under a graph capture; created on first use.
  cudaStream_t commStream = nullptr;
  std::mutex commMutex;
  cublasHandle_t blas = nullptr;
  /// [0]: tag of the first kernel that failed on the device, [1]: its code.
  int *errorFlag = nullptr;
  /// Scratch device memory for reductions (grows, never shrinks).
  void *scratch = nullptr;
  size_t scratchBytes = 0;
  /// Kernel names by tag (tag = index + 1).
  std::vector<std::string> tags;
  std::mutex mutex;

  /// cuDNN handle and per-kernel algorithm choices (CudaConv.cpp), created
  /// on first use; type-erased so that this header needs no cuDNN header.
  std::shared_ptr<void> cudnn;
  /// cublasLt handle and planned matmuls (CudaMatMul.cpp), created on first use.
  std::shared_ptr<void> blasLt;

  StatusOr<void *> getScratch(size_t bytes);
  int addTag(const std::string &name);
  /// Kernels (by tag) whose integer input was read once and agreed with the
  /// static shapes, so later runs take what it says from the shapes (no
  /// stream wait; see reducedDimsFromShapes).
  bool shapeChecked(int tag) {
    std::lock_guard<std::mutex> lock(mutex);
    return checkedTags.count(tag) != 0;
  }
  void setShapeChecked(int tag) {
    std::lock_guard<std::mutex> lock(mutex);
    checkedTags.insert(tag);
  }
  std::set<int> checkedTags;

  /// CudaOptions::profile: events around each kernel launched outside a
  /// capture (op name, start, end), and events ready for reuse.
  struct ProfileMark {
    std::string op, operands;
    cudaEvent_t start, end;
    /// KernelContext::trafficBytes of the launch.
    int64_t bytes = 0;
  };
  std::vector<ProfileMark> profileMarks;
  std::vector<cudaEvent_t> eventPool;
  cudaEvent_t takeEvent();

  // --- CUDA graphs of executor segments (CudaGraph.cpp) ---------------------
  /// Why the capture in progress must fail: Retry (the scratch block must
  /// grow first; the next run captures again) or Never (a kernel waits for
  /// the stream: the segment always runs without a graph).
  enum class Refusal { None, Retry, Never } refusal = Refusal::None;
  /// Scratch blocks replaced by a larger one, freed with the backend:
  /// captured graphs may still point into them.
  std::vector<void *> retiredScratch;
  /// The fixed cuBLAS workspace (cublasSetWorkspace), so that no GEMM
  /// allocates inside a capture.
  void *blasWorkspace = nullptr;
  CudaGraphStats graphStats;
  bool graphWarned = false;
  /// Whether the backend stream is being captured (by this thread).
  bool capturing() const;
  /// Waits for the stream so host code can read device results (host
  /// kernels). Inside a capture it refuses (Unavailable, refusal = Never):
  /// the segment then runs without a graph.
  Status hostSync(const std::string &why);
};

/// Allocates the cuBLAS workspace (createCudaBackend, after cublasCreate).
Status setupGraphs(CudaContext &c);
/// Frees the retired scratch blocks and the cuBLAS workspace.
void releaseGraphs(CudaContext &c);
/// The backend's KernelSegment: a CUDA graph captured on the second run.
std::unique_ptr<KernelSegment> createGraphSegment(CudaContext &c);

/// Status from a CUDA runtime error, naming `what` and the backend.
Status cudaStatus(cudaError_t err, const std::string &what);
Status cublasStatus(cublasStatus_t err, const std::string &what);
/// Checks the last launch error (cheap, no synchronization).
Status checkLaunch(const KernelContext &ctx);
/// The launchers' element type of a program dtype (ET::Other if none).
ET elemType(DType dtype);

// Kernel families (host side), registered by the backend.
using CudaKernelFn = Status (*)(CudaContext &, KernelContext &, int tag);
struct CudaKernelTable {
  std::vector<std::pair<std::string, CudaKernelFn>> entries;
  /// Ops whose kernel reads data on the host before it launches (a wait for
  /// the stream): the executor runs them outside the CUDA graphs it
  /// captures (Backend::runsOnHost), so the kernels around them still are.
  std::set<std::string> readsOnHost;
  void add(const std::string &op, CudaKernelFn fn) { entries.push_back({op, fn}); }
  void addReadingOnHost(const std::string &op, CudaKernelFn fn) {
    add(op, fn);
    readsOnHost.insert(op);
  }
};

/// The values of an integer tensor (i64 or i32) on the host: a program
/// constant's host copy, else the device values after the stream's queued
/// work (a wait, which a CUDA graph capture refuses). `what` names it in
/// errors.
StatusOr<std::vector<int64_t>> hostInts(CudaContext &c, const KernelContext &ctx,
                                        const Tensor &t, const std::string &what);
void addElementwiseKernels(CudaKernelTable &table);
void addLayoutKernels(CudaKernelTable &table);
void addMatMulKernels(CudaKernelTable &table);
void addNormKernels(CudaKernelTable &table);
void addTrainingKernels(CudaKernelTable &table);
/// Every family above and below: the backend's table (no device needed;
/// CudaSupport.cpp builds it too).
void addAllKernels(CudaKernelTable &table);

// --- FusedElementwise (CudaFused.cpp, Fused.cu) ------------------------------
/// The fused elementwise programs of graph-fuse-elementwise: one thread per
/// element, the program in kernel-parameter memory.
void addFusedKernels(CudaKernelTable &table);

// --- FusedAttention(+Grad) (CudaAttention.cpp, Attention.cu) --------------
/// Attention through cuBLAS GEMMs and row kernels, chunked over the batch.
void addAttentionKernels(CudaKernelTable &table);
/// The f32 scores plus P of one chunk stay under `bytes` (at least one batch
/// entry per chunk); 0 restores the default (1 GiB). Process-wide; for tests
/// that exercise the chunk loop with small shapes.
void setAttentionChunkBytes(size_t bytes);

// --- FusedRotaryEmbedding (CudaRotary.cpp, Rotary.cu) ------------------------
/// The rotate-half rotary embedding, one elementwise kernel.
void addRotaryKernels(CudaKernelTable &table);

// --- Spatial ops, reductions, slices (CudaSpatial.cpp, CudaConv.cpp) --------
/// Pooling (native kernels), BatchNormalization(+Training, +Grad),
/// Reduce*, Slice, SliceGrad, GatherElements, HardSigmoid, HardSwish.
void addSpatialKernels(CudaKernelTable &table);
/// The dims a reduction of `in` to the declared `out` reduces, when the
/// shapes determine them up to dims of size 1 (whose reduction moves no
/// data): with keepdims the dims where `out` is 1 and `in` is not; without,
/// the one way (up to size-1 dims) of removing dims of `in` that leaves
/// `out`. False when the shapes do not fit or leave a choice ([3, 3] to [3]).
/// Host code; a reduction whose axes input they determine reads that input
/// only on its first run.
bool reducedDimsFromShapes(const Shape &in, const Shape &out, bool keepdims,
                           std::vector<bool> &reduced);
/// The checked operands of a Conv, ConvGradInput or ConvGradWeight kernel:
/// f32, bf16 or f16 (the data operands and the output of one type; a bias of
/// that type or f32); for 16-bit operands the shared f32 argument checks
/// (convArgs, convGradInputArgs, convGradWeightArgs) run on an f32-typed
/// view of them (same data, the kernel's convolution attributes copied), so
/// `conv`/`grad` point to tensors labeled f32 whose real type is `dtype`.
/// Unimplemented for other types; InvalidArgument for mixed ones. Host code.
struct ConvCheck {
  DType dtype = program::DTYPE_F32;
  ConvArgs conv;     ///< Conv
  ConvGradArgs grad; ///< ConvGradInput, ConvGradWeight
  std::shared_ptr<void> view; ///< keeps the f32 view alive
};
StatusOr<ConvCheck> checkConv(const KernelContext &ctx);
/// Whether Slice reads its bounds on the device (no stream wait): starts and
/// ends given as inputs, no bound attribute, rank and bound count at most
/// kMaxDims. Otherwise bounds given as inputs are read on the host.
bool sliceBoundsOnDevice(bool startsEndsInputs, bool boundAttrs, int64_t rank, int64_t n);
/// Conv, ConvGradInput, ConvGradWeight through cuDNN (STRAIT_HAVE_CUDNN only).
void addConvKernels(CudaKernelTable &table);

/// cuDNN's view of a convolution: 4-D (1-D and 2-D convolutions) or 5-D
/// tensors, one symmetric pad per spatial dim.
struct CudnnConvShape {
  int nbDims = 4;
  int x[5] = {}, w[5] = {}, y[5] = {};
  int pad[3] = {}, stride[3] = {}, dil[3] = {};
};
/// Maps a Conv (X [n, c, ...], W [m, c / group, ...]) to cuDNN's
/// descriptors. Unimplemented when cuDNN cannot express it: pads that differ
/// between the two sides of a dim and change the output size, or sizes past
/// int range.
StatusOr<CudnnConvShape> cudnnConvShape(const KernelContext &ctx, const ConvWindow &w,
                                        int64_t n, int64_t c, int64_t m, int64_t group);

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_CUDAKERNELS_H
