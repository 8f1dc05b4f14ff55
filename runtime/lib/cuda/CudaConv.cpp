//===- CudaConv.cpp - Conv and its gradients through cuDNN ----------------===//
//
// Conv (1-3 spatial dims, groups, strides, dilations, pads, auto_pad, bias)
// and the compiler's ConvGradInput / ConvGradWeight, with cuDNN's legacy
// convolution API (cudnnConvolutionForward / BackwardData / BackwardFilter).
// The window comes from rt::convWindow (shared with the CPU backend) and is
// mapped to cuDNN's descriptors by cudnnConvShape (1-D runs as 2-D; pads
// must be symmetric unless the end pad does not change the output size).
//
// Algorithms come from cuDNN's heuristics (the *_v7 queries, no timing
// runs), chosen once per kernel and kept; the workspace is the backend's
// scratch block. Math: FMA only (exact f32) unless CudaOptions::matmul
// allows TF32/BF16, then cuDNN may use TF32 tensor cores.
//
// bf16 and f16 operands (graph-autocast's mixed precision): X, W, dY and the
// result in that type with f32 compute (cuDNN's PSEUDO_BFLOAT16/HALF
// configurations, tensor cores allowed); the bias in that type or f32, added
// by launchChannelBias. The shapes and attributes are checked by checkConv
// (CudaSpatial.cpp, host code tested without a GPU).
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <cudnn.h>

#include <algorithm>
#include <map>
#include <mutex>

namespace strait {
namespace rt {
namespace cuda {
namespace {

/// The backend's cuDNN handle (on its stream) and the algorithm chosen for
/// each conv kernel (by tag).
struct CudnnState {
  cudnnHandle_t handle = nullptr;
  std::mutex mutex; // guards algos
  /// (algorithm, cuDNN's math type for it) by kernel tag.
  std::map<int, std::pair<int, int>> algos;
  ~CudnnState() {
    if (handle)
      cudnnDestroy(handle);
  }
};

Status cudnnStatus(cudnnStatus_t err, const std::string &what) {
  if (err == CUDNN_STATUS_SUCCESS)
    return Status::ok();
  return internalError("cuda: " + what + ": cuDNN status " + std::to_string(int(err)) + " (" +
                       cudnnGetErrorString(err) + ")");
}

/// The status of running a chosen algorithm: CUDNN_STATUS_NOT_SUPPORTED (a
/// configuration the heuristics offered but cannot run, e.g. for 16-bit
/// types) is Unimplemented, so the host fallback runs the CPU kernel instead
/// (nothing was launched).
Status cudnnRunStatus(cudnnStatus_t err, const std::string &what) {
  if (err == CUDNN_STATUS_NOT_SUPPORTED)
    return unimplemented("cuda: " + what + ": cuDNN does not support this configuration");
  return cudnnStatus(err, what);
}

StatusOr<CudnnState *> cudnnState(CudaContext &c) {
  std::lock_guard<std::mutex> lock(c.mutex);
  if (!c.cudnn) {
    auto state = std::make_shared<CudnnState>();
    STRAIT_RETURN_IF_ERROR(cudnnStatus(cudnnCreate(&state->handle), "cudnnCreate"));
    STRAIT_RETURN_IF_ERROR(cudnnStatus(cudnnSetStream(state->handle, c.stream), "cudnnSetStream"));
    c.cudnn = state;
  }
  return static_cast<CudnnState *>(c.cudnn.get());
}

/// The four descriptors of one convolution, destroyed with it.
struct ConvDescs {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  ~ConvDescs() {
    if (x) cudnnDestroyTensorDescriptor(x);
    if (y) cudnnDestroyTensorDescriptor(y);
    if (w) cudnnDestroyFilterDescriptor(w);
    if (conv) cudnnDestroyConvolutionDescriptor(conv);
  }
};

void packedStrides(int nb, const int *dims, int *strides) {
  strides[nb - 1] = 1;
  for (int d = nb - 2; d >= 0; --d)
    strides[d] = strides[d + 1] * dims[d + 1];
}

/// cuDNN's data type of the operands (F32, F16, BF16).
cudnnDataType_t cudnnType(DType t) {
  return t == program::DTYPE_BF16  ? CUDNN_DATA_BFLOAT16
         : t == program::DTYPE_F16 ? CUDNN_DATA_HALF
                                   : CUDNN_DATA_FLOAT;
}

bool isLow(DType t) { return t == program::DTYPE_BF16 || t == program::DTYPE_F16; }

Status makeDescs(CudaContext &c, const CudnnConvShape &s, int64_t group, DType dtype,
                 ConvDescs &d) {
  cudnnDataType_t data = cudnnType(dtype);
  int nb = s.nbDims, xs[5], ys[5];
  packedStrides(nb, s.x, xs);
  packedStrides(nb, s.y, ys);
  STRAIT_RETURN_IF_ERROR(cudnnStatus(cudnnCreateTensorDescriptor(&d.x), "descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(cudnnCreateTensorDescriptor(&d.y), "descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(cudnnCreateFilterDescriptor(&d.w), "descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(cudnnCreateConvolutionDescriptor(&d.conv), "descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(
      cudnnSetTensorNdDescriptor(d.x, data, nb, s.x, xs), "X descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(
      cudnnSetTensorNdDescriptor(d.y, data, nb, s.y, ys), "Y descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(
      cudnnSetFilterNdDescriptor(d.w, data, CUDNN_TENSOR_NCHW, nb, s.w),
      "W descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(
      cudnnSetConvolutionNdDescriptor(d.conv, nb - 2, s.pad, s.stride, s.dil,
                                      CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
      "convolution descriptor"));
  STRAIT_RETURN_IF_ERROR(cudnnStatus(
      cudnnSetConvolutionGroupCount(d.conv, static_cast<int>(group)), "group count"));
  // 16-bit operands: f32 compute (above) on tensor cores; f32 operands:
  // exact FMA unless the options allow TF32.
  cudnnMathType_t math = isLow(dtype)                                ? CUDNN_TENSOR_OP_MATH
                         : c.options.matmul == MatmulPrecision::F32 ? CUDNN_FMA_MATH
                                                                    : CUDNN_DEFAULT_MATH;
  STRAIT_RETURN_IF_ERROR(cudnnStatus(cudnnSetConvolutionMathType(d.conv, math), "math type"));
  // cuDNN's own output size must be the window's (they agree by construction).
  int out[5];
  STRAIT_RETURN_IF_ERROR(cudnnStatus(
      cudnnGetConvolutionNdForwardOutputDim(d.conv, d.x, d.w, nb, out), "output size"));
  for (int i = 0; i < nb; ++i)
    if (out[i] != s.y[i])
      return internalError("cuda: cuDNN's convolution output size differs from the window's");
  return Status::ok();
}

enum class ConvPass { Forward, Data, Filter };

/// The heuristics' first algorithm that ran without error, cached by tag.
/// For 16-bit operands the descriptor takes the math type the heuristics
/// paired with the algorithm (tensor cores or not), as cuDNN asks.
template <typename Perf, typename Query>
StatusOr<int> chooseAlgo(CudnnState &st, int tag, DType dtype, cudnnConvolutionDescriptor_t conv,
                         Query query, const char *what) {
  std::lock_guard<std::mutex> lock(st.mutex);
  auto it = st.algos.find(tag);
  if (it == st.algos.end()) {
    Perf perf[16];
    int count = 0;
    STRAIT_RETURN_IF_ERROR(cudnnStatus(query(perf, 16, &count), what));
    for (int i = 0; i < count && it == st.algos.end(); ++i)
      if (perf[i].status == CUDNN_STATUS_SUCCESS)
        it = st.algos
                 .emplace(tag, std::make_pair(static_cast<int>(perf[i].algo),
                                              static_cast<int>(perf[i].mathType)))
                 .first;
    if (it == st.algos.end())
      return internalError(std::string("cuda: cuDNN offers no ") + what + " algorithm");
  }
  if (isLow(dtype))
    STRAIT_RETURN_IF_ERROR(cudnnStatus(
        cudnnSetConvolutionMathType(conv, static_cast<cudnnMathType_t>(it->second.second)),
        "math type"));
  return it->second.first;
}

Status runConv(CudaContext &c, const KernelContext &ctx, int tag, ConvPass pass,
               const CudnnConvShape &s, int64_t group, DType dtype, const void *a,
               const void *b, void *out) {
  STRAIT_ASSIGN_OR_RETURN(CudnnState * st, cudnnState(c));
  ConvDescs d;
  STRAIT_RETURN_IF_ERROR(makeDescs(c, s, group, dtype, d).withKernel(ctx.op()));
  cudnnHandle_t h = st->handle;
  const float one = 1.0f, zero = 0.0f;
  size_t ws = 0;
  if (pass == ConvPass::Forward) {
    STRAIT_ASSIGN_OR_RETURN(int algo, (chooseAlgo<cudnnConvolutionFwdAlgoPerf_t>(
        *st, tag, dtype, d.conv, [&](auto *p, int n, int *k) {
          return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, k, p);
        }, "forward")));
    auto al = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
    STRAIT_RETURN_IF_ERROR(cudnnRunStatus(
        cudnnGetConvolutionForwardWorkspaceSize(h, d.x, d.w, d.conv, d.y, al, &ws), "workspace"));
    STRAIT_ASSIGN_OR_RETURN(void *w, c.getScratch(ws));
    return cudnnRunStatus(cudnnConvolutionForward(h, &one, d.x, a, d.w, b, d.conv, al, w, ws,
                                                  &zero, d.y, out),
                          "cudnnConvolutionForward");
  }
  if (pass == ConvPass::Data) { // a = dY, b = W, out = dX
    STRAIT_ASSIGN_OR_RETURN(int algo, (chooseAlgo<cudnnConvolutionBwdDataAlgoPerf_t>(
        *st, tag, dtype, d.conv, [&](auto *p, int n, int *k) {
          return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, k, p);
        }, "backward-data")));
    auto al = static_cast<cudnnConvolutionBwdDataAlgo_t>(algo);
    STRAIT_RETURN_IF_ERROR(cudnnRunStatus(
        cudnnGetConvolutionBackwardDataWorkspaceSize(h, d.w, d.y, d.conv, d.x, al, &ws),
        "workspace"));
    STRAIT_ASSIGN_OR_RETURN(void *w, c.getScratch(ws));
    return cudnnRunStatus(cudnnConvolutionBackwardData(h, &one, d.w, b, d.y, a, d.conv, al, w,
                                                       ws, &zero, d.x, out),
                          "cudnnConvolutionBackwardData");
  }
  // a = dY, b = X, out = dW
  STRAIT_ASSIGN_OR_RETURN(int algo, (chooseAlgo<cudnnConvolutionBwdFilterAlgoPerf_t>(
      *st, tag, dtype, d.conv, [&](auto *p, int n, int *k) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, k, p);
      }, "backward-filter")));
  auto al = static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo);
  STRAIT_RETURN_IF_ERROR(cudnnRunStatus(
      cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d.x, d.y, d.conv, d.w, al, &ws),
      "workspace"));
  STRAIT_ASSIGN_OR_RETURN(void *w, c.getScratch(ws));
  return cudnnRunStatus(cudnnConvolutionBackwardFilter(h, &one, d.x, b, d.y, a, d.conv, al, w,
                                                       ws, &zero, d.w, out),
                        "cudnnConvolutionBackwardFilter");
}

/// Adds bias[m] to every [n, m, spatial...] element of Y.
Status addBias(CudaContext &c, const CudnnConvShape &s, const float *bias, float *y) {
  STRAIT_ASSIGN_OR_RETURN(CudnnState * st, cudnnState(c));
  cudnnTensorDescriptor_t bd = nullptr, yd = nullptr;
  int bdims[5] = {1, s.y[1], 1, 1, 1}, bs[5], ys[5];
  packedStrides(s.nbDims, bdims, bs);
  packedStrides(s.nbDims, s.y, ys);
  Status status = cudnnStatus(cudnnCreateTensorDescriptor(&bd), "descriptor");
  if (status.isOk())
    status = cudnnStatus(cudnnCreateTensorDescriptor(&yd), "descriptor");
  if (status.isOk())
    status = cudnnStatus(cudnnSetTensorNdDescriptor(bd, CUDNN_DATA_FLOAT, s.nbDims, bdims, bs),
                         "bias descriptor");
  if (status.isOk())
    status = cudnnStatus(cudnnSetTensorNdDescriptor(yd, CUDNN_DATA_FLOAT, s.nbDims, s.y, ys),
                         "Y descriptor");
  const float one = 1.0f;
  if (status.isOk())
    status = cudnnStatus(cudnnAddTensor(st->handle, &one, bd, bias, &one, yd, y), "bias");
  if (bd)
    cudnnDestroyTensorDescriptor(bd);
  if (yd)
    cudnnDestroyTensorDescriptor(yd);
  return status;
}

Status convKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(ConvCheck k, checkConv(ctx));
  const ConvArgs &a = k.conv;
  if (a.y->numel() == 0)
    return Status::ok();
  STRAIT_ASSIGN_OR_RETURN(CudnnConvShape s, cudnnConvShape(ctx, a.window, a.x->shape[0],
                                                           a.x->shape[1], a.w->shape[0], a.group));
  STRAIT_RETURN_IF_ERROR(runConv(c, ctx, tag, ConvPass::Forward, s, a.group, k.dtype, a.x->data,
                                 a.w->data, a.y->data)
                             .withKernel(ctx.op()));
  if (!a.bias)
    return Status::ok();
  if (k.dtype == program::DTYPE_F32)
    return addBias(c, s, a.bias->as<float>(), a.y->as<float>()).withKernel(ctx.op());
  // The view relabeled a 16-bit bias: its real type is the kernel's input 2.
  const Tensor *bias = ctx.input(2);
  int64_t n = a.y->shape[0], m = a.y->shape[1];
  if (!launchChannelBias(elemType(k.dtype), a.y->data, elemType(bias->dtype), bias->data, n, m,
                         a.y->numel() / std::max<int64_t>(n * m, 1), c.stream))
    return ctx.unsupported("cuda: Conv bias " + bias->typeString());
  return Status::ok();
}

Status convGradInputKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(ConvCheck k, checkConv(ctx));
  const ConvGradArgs &a = k.grad;
  if (a.out->numel() == 0)
    return Status::ok();
  STRAIT_ASSIGN_OR_RETURN(CudnnConvShape s, cudnnConvShape(ctx, a.window, a.xShape[0],
                                                           a.xShape[1], a.wShape[0], a.group));
  return runConv(c, ctx, tag, ConvPass::Data, s, a.group, k.dtype, a.dy->data, a.operand->data,
                 a.out->data)
      .withKernel(ctx.op());
}

Status convGradWeightKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(ConvCheck k, checkConv(ctx));
  const ConvGradArgs &a = k.grad;
  if (a.out->numel() == 0)
    return Status::ok();
  if (a.operand->numel() == 0) // no image: the gradient is zero
    return cudaStatus(cudaMemsetAsync(a.out->data, 0, ctx.output(0)->byteSize(), c.stream),
                      "memset"); // the output's own size (the view's is f32)
  STRAIT_ASSIGN_OR_RETURN(CudnnConvShape s, cudnnConvShape(ctx, a.window, a.xShape[0],
                                                           a.xShape[1], a.wShape[0], a.group));
  return runConv(c, ctx, tag, ConvPass::Filter, s, a.group, k.dtype, a.dy->data,
                 a.operand->data, a.out->data)
      .withKernel(ctx.op());
}

} // namespace

void addConvKernels(CudaKernelTable &t) {
  t.add("Conv", convKernel);
  t.add("ConvGradInput", convGradInputKernel);
  t.add("ConvGradWeight", convGradWeightKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
