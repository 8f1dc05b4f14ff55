//===- CudaBackend.cpp - The CUDA backend: memory, stream, kernel table ---===//
//
// One backend per device ordinal. Values live in managed memory (see
// strait/runtime/Cuda.h), zeroed at allocation; kernels run on the backend's
// stream; device-side argument errors raise a flag that synchronize() turns
// into a Status naming the kernel. Ops without a CUDA kernel run the CPU
// backend's kernel on the same managed memory after waiting for the stream
// (CudaOptions::hostFallback, listed by cudaHostFallbackNote), or fail at
// load with Unimplemented naming the op and "cuda" when that is off.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>

namespace strait {
namespace rt {
namespace cuda {

Status cudaStatus(cudaError_t err, const std::string &what) {
  if (err == cudaSuccess)
    return Status::ok();
  std::string message = "cuda: " + what + ": " + cudaGetErrorName(err) + " (" +
                        cudaGetErrorString(err) + ")";
  return err == cudaErrorMemoryAllocation ? unavailable(message) : internalError(message);
}

Status cublasStatus(cublasStatus_t err, const std::string &what) {
  if (err == CUBLAS_STATUS_SUCCESS)
    return Status::ok();
  return internalError("cuda: " + what + ": cuBLAS status " + std::to_string(int(err)) +
                       " (" + cublasGetStatusString(err) + ")");
}

Status checkLaunch(const KernelContext &ctx) {
  cudaError_t err = cudaGetLastError();
  if (err == cudaSuccess)
    return Status::ok();
  return internalError(std::string("cuda: kernel launch failed: ") + cudaGetErrorName(err) +
                       " (" + cudaGetErrorString(err) + ")")
      .withKernel(ctx.op());
}

ET elemType(DType dtype) {
  switch (dtype) {
  case program::DTYPE_F32: return ET::F32;
  case program::DTYPE_F64: return ET::F64;
  case program::DTYPE_F16: return ET::F16;
  case program::DTYPE_BF16: return ET::BF16;
  case program::DTYPE_I32: return ET::I32;
  case program::DTYPE_I64: return ET::I64;
  case program::DTYPE_BOOL: return ET::Bool;
  default: return ET::Other;
  }
}

namespace {

/// Merges adjacent dims where every operand is contiguous across them and
/// drops dims of size 1. `st[k][d]` are operand k's strides over `out`.
bool mergeInto(const Shape &out, const std::vector<std::vector<int64_t>> &st, Index &ix) {
  size_t ops = st.size();
  ix = Index();
  ix.n = numElements(out);
  ix.small = ix.n < (int64_t(1) << 32);
  for (size_t d = 0; d < out.size(); ++d) {
    if (out[d] == 1)
      continue;
    if (ix.rank > 0) {
      int p = ix.rank - 1;
      bool mergeable = true;
      for (size_t k = 0; k < ops; ++k)
        mergeable &= ix.stride[k][p] == st[k][d] * out[d];
      if (mergeable) {
        ix.shape[p] *= out[d];
        for (size_t k = 0; k < ops; ++k)
          ix.stride[k][p] = st[k][d];
        continue;
      }
    }
    if (ix.rank == kMaxDims)
      return false;
    ix.shape[ix.rank] = out[d];
    for (size_t k = 0; k < ops; ++k)
      ix.stride[k][ix.rank] = st[k][d];
    ++ix.rank;
  }
  return true;
}

} // namespace

bool broadcastIndex(const std::vector<int64_t> &out,
                    const std::vector<std::vector<int64_t>> &ins, Index &ix) {
  std::vector<std::vector<int64_t>> st;
  for (const Shape &in : ins) {
    if (in.size() > out.size())
      return false;
    std::vector<int64_t> s(out.size(), 0);
    size_t shift = out.size() - in.size();
    int64_t acc = 1;
    for (int64_t d = static_cast<int64_t>(in.size()) - 1; d >= 0; --d) {
      s[d + shift] = in[d] == 1 ? 0 : acc;
      acc *= in[d];
    }
    st.push_back(s);
  }
  if (!mergeInto(out, st, ix))
    return false;
  for (size_t k = 0; k < ins.size(); ++k)
    ix.dense[k] = numElements(ins[k]) == ix.n;
  return true;
}

bool stridedIndex(const std::vector<int64_t> &out, const std::vector<int64_t> &strides,
                  Index &ix) {
  return mergeInto(out, {strides}, ix);
}

StatusOr<void *> CudaContext::getScratch(size_t bytes) {
  if (bytes <= scratchBytes)
    return scratch;
  // A CUDA graph capture cannot allocate: it fails, the segment runs
  // directly (growing the block) and captures on its next run.
  if (capturing()) {
    refusal = Refusal::Retry;
    return unavailable("cuda: the scratch block must grow to " + std::to_string(bytes) +
                       " bytes inside a CUDA graph capture");
  }
  // Kernels queued earlier may still use the old block, and captured graphs
  // point into it: it is kept until the backend goes (at most the size of
  // the new one in all, as blocks at least double).
  STRAIT_RETURN_IF_ERROR(cudaStatus(cudaStreamSynchronize(stream), "synchronize"));
  if (scratch)
    retiredScratch.push_back(scratch);
  scratch = nullptr;
  size_t rounded = std::max<size_t>({bytes, 2 * scratchBytes, size_t(1) << 20});
  scratchBytes = 0;
  STRAIT_RETURN_IF_ERROR(cudaStatus(cudaMalloc(&scratch, rounded),
                                    "scratch of " + std::to_string(rounded) + " bytes"));
  scratchBytes = rounded;
  return scratch;
}

StatusOr<std::vector<int64_t>> hostInts(CudaContext &c, const KernelContext &ctx,
                                        const Tensor &t, const std::string &what) {
  if (t.dtype != program::DTYPE_I64 && t.dtype != program::DTYPE_I32)
    return ctx.unsupported(what + ": expected an integer tensor, got " + t.typeString());
  const void *src = t.host;
  if (!src) {
    STRAIT_RETURN_IF_ERROR(c.hostSync("reading " + what));
    src = t.data;
  }
  std::vector<int64_t> v(t.numel());
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = t.dtype == program::DTYPE_I64 ? static_cast<const int64_t *>(src)[i]
                                         : static_cast<const int32_t *>(src)[i];
  return v;
}

int CudaContext::addTag(const std::string &name) {
  std::lock_guard<std::mutex> lock(mutex);
  tags.push_back(name);
  return static_cast<int>(tags.size());
}

cudaEvent_t CudaContext::takeEvent() {
  cudaEvent_t e = nullptr;
  if (!eventPool.empty()) {
    e = eventPool.back();
    eventPool.pop_back();
  } else {
    cudaEventCreate(&e);
  }
  return e;
}

void addAllKernels(CudaKernelTable &t) {
  addElementwiseKernels(t);
  addLayoutKernels(t);
  addMatMulKernels(t);
  addNormKernels(t);
  addTrainingKernels(t);
  addFusedKernels(t);
  addAttentionKernels(t);
  addRotaryKernels(t);
  addSpatialKernels(t);
#ifdef STRAIT_HAVE_CUDNN
  addConvKernels(t);
#endif
}

namespace {

void releaseManaged(void *p) { cudaFree(p); }

const char *deviceErrorText(int code) {
  switch (code) {
  case kErrIndexOutOfRange: return "an index is out of range";
  case kErrLabelOutOfRange: return "a label is outside [0, C) and not ignore_index";
  case kErrBadStep: return "the step count must start at 1";
  case kErrSliceBounds:
    return "the starts/ends/axes/steps inputs do not give the declared output shape (or a "
           "step is 0, an axis out of range)";
  default: return "unknown device error";
  }
}

class CudaBackend : public Backend {
public:
  explicit CudaBackend(std::unique_ptr<CudaContext> ctx) : ctx(std::move(ctx)) {
    CudaKernelTable t;
    addAllKernels(t);
    for (auto &e : t.entries)
      table[e.first] = e.second;
    readsOnHost = t.readsOnHost;
    if (this->ctx->options.hostFallback)
      cpu = createCpuBackend();
  }
  ~CudaBackend() override {
    cudaSetDevice(ctx->options.device);
    if (ctx->stream)
      cudaStreamSynchronize(ctx->stream);
    if (ctx->blas)
      cublasDestroy(ctx->blas);
    ctx->cudnn.reset();
    if (ctx->scratch)
      cudaFree(ctx->scratch);
    releaseGraphs(*ctx);
    for (const CudaContext::ProfileMark &m : ctx->profileMarks)
      ctx->eventPool.insert(ctx->eventPool.end(), {m.start, m.end});
    for (cudaEvent_t e : ctx->eventPool)
      cudaEventDestroy(e);
    if (ctx->errorFlag)
      cudaFree(ctx->errorFlag);
    if (ctx->stream)
      cudaStreamDestroy(ctx->stream);
    if (ctx->commStream)
      cudaStreamDestroy(ctx->commStream);
  }

  Status scale(const Tensor &t, float factor) const override {
    if (t.dtype != program::DTYPE_F32)
      return unimplemented("cuda: scale of " + t.typeString() + " (f32 only)");
    STRAIT_ASSIGN_OR_RETURN(cudaStream_t s, commStream());
    std::lock_guard<std::mutex> lock(ctx->commMutex);
    launchAccumulate(t.as<float>(), t.as<float>(), t.numel(), factor, /*first=*/true, s);
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaGetLastError(), "scale launch"));
    return cudaStatus(cudaStreamSynchronize(s), "scale");
  }

  Status copy(void *dst, const void *src, size_t bytes) const override {
    if (!bytes)
      return Status::ok();
    STRAIT_ASSIGN_OR_RETURN(cudaStream_t s, commStream());
    std::lock_guard<std::mutex> lock(ctx->commMutex);
    STRAIT_RETURN_IF_ERROR(
        cudaStatus(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s), "copy"));
    return cudaStatus(cudaStreamSynchronize(s), "copy");
  }

  std::string name() const override { return "cuda"; }

  StatusOr<cudaStream_t> commStream() const {
    std::lock_guard<std::mutex> lock(ctx->commMutex);
    cudaSetDevice(ctx->options.device);
    if (!ctx->commStream)
      STRAIT_RETURN_IF_ERROR(cudaStatus(
          cudaStreamCreateWithFlags(&ctx->commStream, cudaStreamNonBlocking), "comm stream"));
    return ctx->commStream;
  }

  StatusOr<KernelFn> resolve(const program::Kernel &kernel) const override {
    if (!kernel.domain().empty() && kernel.domain() != "ai.onnx" &&
        kernel.domain() != "strait" && kernel.domain() != "ai.onnx.preview.training")
      return unimplemented("cuda backend: unknown op domain '" + kernel.domain() + "'");
    auto it = table.find(kernel.op());
    // The host fallback: the CPU backend's kernel, null without one.
    KernelFn host;
    if (cpu) {
      StatusOr<KernelFn> h = cpu->resolve(kernel);
      if (h.isOk())
        host = h.takeValue();
    }
    if (it == table.end() && !host)
      return unimplemented("cuda backend has no kernel for op '" + kernel.op() + "'" +
                           (cpu ? " (nor the CPU backend, for the host fallback)" : ""));
    CudaContext *c = ctx.get();
    int tag = c->addTag(kernel.op() + " '" + kernel.name() + "'");
    const CudaBackend *self = this;
    if (it == table.end()) {
      noteHostKernel(kernel.op(), tag);
      return KernelFn([c, host](KernelContext &k) -> Status {
        cudaSetDevice(c->options.device);
        STRAIT_RETURN_IF_ERROR(c->hostSync("a host kernel").withKernel(k.op()));
        return host(k);
      });
    }
    CudaKernelFn fn = it->second;
    return KernelFn([c, fn, tag, self, host](KernelContext &k) -> Status {
      cudaSetDevice(c->options.device);
      bool mark = c->options.profile && !c->capturing();
      cudaEvent_t start = nullptr;
      if (mark) {
        start = c->takeEvent();
        cudaEventRecord(start, c->stream);
      }
      Status s = fn(*c, k, tag);
      if (mark) {
        cudaEvent_t end = c->takeEvent();
        cudaEventRecord(end, c->stream);
        std::string operands;
        for (size_t i = 0; i < k.numInputs() && i < 3; ++i)
          operands += (i ? ", " : "") + (k.input(i) ? k.input(i)->typeString() : "-");
        operands += " -> " + (k.output(0) ? k.output(0)->typeString() : "-");
        c->profileMarks.push_back({k.op(), operands, start, end, k.trafficBytes()});
      }
      if (!s.isOk() && s.getCode() == StatusCode::Unimplemented && host) {
        // The CUDA kernel declined (a dtype, an attribute combination)
        // before launching anything: run the CPU kernel instead.
        self->noteHostKernel(k.op(), tag);
        STRAIT_RETURN_IF_ERROR(c->hostSync("a host kernel").withKernel(k.op()));
        return host(k);
      }
      STRAIT_RETURN_IF_ERROR(s);
      STRAIT_RETURN_IF_ERROR(checkLaunch(k));
      if (c->options.syncEachKernel)
        return self->synchronize();
      return Status::ok();
    });
  }

  /// The ops with a CUDA kernel (the host fallback's are not listed).
  std::vector<std::string> supportedOps() const override {
    std::vector<std::string> ops;
    for (const auto &e : table)
      ops.push_back(e.first);
    return ops;
  }

  std::unique_ptr<KernelSegment> createSegment() const override {
    return createGraphSegment(*ctx);
  }
  /// Ops without a CUDA kernel (the host fallback) and kernels that read
  /// data on the host first (CudaKernelTable::readsOnHost): the executor
  /// keeps them out of the segments it captures into graphs.
  bool runsOnHost(const program::Kernel &kernel) const override {
    return (cpu && table.find(kernel.op()) == table.end()) || readsOnHost.count(kernel.op());
  }
  CudaGraphStats graphStats() const { return ctx->graphStats; }

  std::vector<CudaOpTime> kernelProfile() const {
    cudaSetDevice(ctx->options.device);
    cudaStreamSynchronize(ctx->stream);
    std::map<std::pair<std::string, std::string>, CudaOpTime> byOp;
    for (const CudaContext::ProfileMark &m : ctx->profileMarks) {
      float ms = 0;
      cudaEventElapsedTime(&ms, m.start, m.end);
      CudaOpTime &t = byOp[{m.op, m.operands}];
      t.op = m.op;
      t.operands = m.operands;
      ++t.launches;
      t.ms += ms;
      t.bytes += static_cast<double>(m.bytes);
      ctx->eventPool.push_back(m.start);
      ctx->eventPool.push_back(m.end);
    }
    ctx->profileMarks.clear();
    std::vector<CudaOpTime> out;
    for (auto &e : byOp)
      out.push_back(e.second);
    std::sort(out.begin(), out.end(),
              [](const CudaOpTime &a, const CudaOpTime &b) { return a.ms > b.ms; });
    return out;
  }

  /// Kernels (by tag) per op that run on the host.
  std::map<std::string, int64_t> hostFallbackCounts() const {
    std::lock_guard<std::mutex> lock(hostMutex);
    std::map<std::string, int64_t> counts;
    for (const auto &e : hostKernels)
      counts[e.first] = static_cast<int64_t>(e.second.size());
    return counts;
  }

  StatusOr<Buffer> allocate(size_t bytes) const override {
    cudaSetDevice(ctx->options.device);
    size_t rounded = std::max<size_t>((bytes + 255) / 256 * 256, 256);
    // Managed memory beyond what the device has free can hang the GPU
    // instead of failing: refuse it here, keeping a reserve for the
    // cuBLAS/cuDNN workspaces and NCCL's buffers.
    size_t freeBytes = 0, totalBytes = 0;
    constexpr size_t kReserve = size_t(512) << 20;
    if (cudaMemGetInfo(&freeBytes, &totalBytes) == cudaSuccess &&
        rounded + kReserve > freeBytes)
      return unavailable("cuda backend: " + std::to_string(bytes) +
                         " bytes requested on device " + std::to_string(ctx->options.device) +
                         " with " + std::to_string(freeBytes) + " of " +
                         std::to_string(totalBytes) +
                         " bytes free (512 MiB are kept for library workspaces); the plan "
                         "does not fit this GPU");
    cudaGetLastError();
    void *p = nullptr;
    cudaError_t err = cudaMallocManaged(&p, rounded);
    if (err != cudaSuccess) {
      cudaGetLastError();
      return unavailable("cuda backend: cannot allocate " + std::to_string(bytes) +
                         " bytes of managed memory on device " +
                         std::to_string(ctx->options.device) + ": " + cudaGetErrorString(err));
    }
    Buffer buffer = Buffer::adopt(p, bytes, releaseManaged);
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaMemsetAsync(p, 0, rounded, ctx->stream), "memset"));
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaStreamSynchronize(ctx->stream), "memset"));
    return buffer;
  }

  Status synchronize() const override {
    cudaSetDevice(ctx->options.device);
    if (ctx->capturing()) // a kernel of a segment being captured
      return ctx->hostSync("synchronize");
    STRAIT_RETURN_IF_ERROR(cudaStatus(cudaStreamSynchronize(ctx->stream), "stream synchronize")
                               .withDevice("cuda:" + std::to_string(ctx->options.device)));
    int tag = ctx->errorFlag[0];
    if (tag == 0)
      return Status::ok();
    int code = ctx->errorFlag[1];
    ctx->errorFlag[0] = ctx->errorFlag[1] = 0;
    std::string kernel = "?";
    {
      std::lock_guard<std::mutex> lock(ctx->mutex);
      if (tag > 0 && tag <= static_cast<int>(ctx->tags.size()))
        kernel = ctx->tags[tag - 1];
    }
    return invalidArgument(std::string("cuda: ") + deviceErrorText(code) +
                           " (detected on the device)")
        .withKernel(kernel);
  }

private:
  void noteHostKernel(const std::string &op, int tag) const {
    std::lock_guard<std::mutex> lock(hostMutex);
    hostKernels[op].insert(tag);
  }

  std::unique_ptr<CudaContext> ctx;
  std::map<std::string, CudaKernelFn> table;
  /// Ops whose kernel reads data on the host first (runsOnHost).
  std::set<std::string> readsOnHost;
  /// The CPU backend behind the host fallback (null when it is off).
  std::unique_ptr<Backend> cpu;
  mutable std::mutex hostMutex;
  mutable std::map<std::string, std::set<int>> hostKernels;
};

} // namespace
} // namespace cuda

int cudaDeviceCount() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

std::string cudaUnavailableReason() {
  int n = 0;
  cudaError_t err = cudaGetDeviceCount(&n);
  cudaGetLastError();
  if (err != cudaSuccess)
    return std::string("no usable CUDA driver/device: ") + cudaGetErrorName(err) + " (" +
           cudaGetErrorString(err) + ")";
  if (n == 0)
    return "no CUDA device";
  return "";
}

StatusOr<std::unique_ptr<Backend>> createCudaBackend(const CudaOptions &options) {
  using namespace cuda;
  int count = cudaDeviceCount();
  if (options.device < 0 || options.device >= count)
    return unavailable("cuda backend: device " + std::to_string(options.device) +
                       " not available (" +
                       (count ? std::to_string(count) + " devices" : cudaUnavailableReason()) +
                       ")");
  auto ctx = std::make_unique<CudaContext>();
  ctx->options = options;
  STRAIT_RETURN_IF_ERROR(cudaStatus(cudaSetDevice(options.device), "set device"));
  STRAIT_RETURN_IF_ERROR(
      cudaStatus(cudaStreamCreateWithFlags(&ctx->stream, cudaStreamNonBlocking), "stream"));
  STRAIT_RETURN_IF_ERROR(
      cudaStatus(cudaMallocManaged(reinterpret_cast<void **>(&ctx->errorFlag), 2 * sizeof(int)), "error flag"));
  ctx->errorFlag[0] = ctx->errorFlag[1] = 0;
  STRAIT_RETURN_IF_ERROR(cublasStatus(cublasCreate(&ctx->blas), "cublasCreate"));
  STRAIT_RETURN_IF_ERROR(cublasStatus(cublasSetStream(ctx->blas, ctx->stream), "cublasSetStream"));
  // Split-K GEMMs with bf16/f16 results otherwise add their partial sums in
  // 16 bits (seen on an H200: a bf16 256x512x8201 product off by 5 ulps):
  // f32 compute must mean f32 accumulation throughout, as on the CPU.
  // STRAIT_CUDA_GEMM_SPLITK_16=1 allows them again (for timing the two).
  const char *splitK16 = std::getenv("STRAIT_CUDA_GEMM_SPLITK_16");
  bool allow16 = splitK16 && std::string(splitK16) == "1";
  STRAIT_RETURN_IF_ERROR(cublasStatus(
      cublasSetMathMode(ctx->blas,
                        static_cast<cublasMath_t>(
                            CUBLAS_DEFAULT_MATH |
                            (allow16 ? 0 : CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION))),
      "cublasSetMathMode"));
  STRAIT_RETURN_IF_ERROR(setupGraphs(*ctx));
  return std::unique_ptr<Backend>(new CudaBackend(std::move(ctx)));
}

CudaGraphStats cudaGraphStats(const Backend &backend) {
  if (backend.name() != "cuda")
    return {};
  return static_cast<const cuda::CudaBackend &>(backend).graphStats();
}

std::vector<CudaOpTime> cudaKernelProfile(const Backend &backend) {
  if (backend.name() != "cuda")
    return {};
  return static_cast<const cuda::CudaBackend &>(backend).kernelProfile();
}

std::map<std::string, int64_t> cudaHostFallbackCounts(const Backend &backend) {
  if (backend.name() != "cuda")
    return {};
  return static_cast<const cuda::CudaBackend &>(backend).hostFallbackCounts();
}

std::string cudaHostFallbackNote(const Backend &backend) {
  std::map<std::string, int64_t> counts = cudaHostFallbackCounts(backend);
  if (counts.empty())
    return "";
  int64_t kernels = 0;
  std::string ops;
  for (const auto &e : counts) {
    kernels += e.second;
    ops += (ops.empty() ? "" : ", ") + e.first;
  }
  return "cuda: " + std::to_string(kernels) + " kernel" + (kernels == 1 ? "" : "s") +
         " of ops [" + ops + "] run on the host (no CUDA kernel)";
}

Status registerCudaBackend(BackendRegistry &registry, const CudaOptions &options) {
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, createCudaBackend(options));
  registry.add(std::move(backend));
  return Status::ok();
}

} // namespace rt
} // namespace strait
