//===- CudaLaunch.h - Launchers of the CUDA kernels -------------*- C++ -*-===//
//
// The interface between the host-side kernel functions (*.cpp) and the
// device code (*.cu). Plain types only (no protobuf), so nvcc compiles the
// .cu files without the program format's headers.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_CUDALAUNCH_H
#define STRAIT_RUNTIME_LIB_CUDA_CUDALAUNCH_H

#include "strait/runtime/ConvWindow.h"

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace strait {
namespace rt {
namespace cuda {

/// Device error codes written to the error flag's second word.
enum DeviceError : int {
  kErrNone = 0,
  kErrIndexOutOfRange = 1,
  kErrLabelOutOfRange = 2,
  kErrBadStep = 3,
  kErrSliceBounds = 4,
};

/// Element types of the launchers.
enum class ET { F32, F64, F16, BF16, I32, I64, Bool, Other };

/// A row-major index map over up to kMaxDims output dims: for every output
/// element, the offset into up to three operands (stride 0 on broadcast dims).
constexpr int kMaxDims = 8;
struct Index {
  int rank = 0;
  int64_t n = 0;
  int64_t shape[kMaxDims] = {};
  int64_t stride[3][kMaxDims] = {};
  /// Operand k is laid out exactly like the output (fast path).
  bool dense[3] = {false, false, false};
  /// n < 2^32: the unravelling may use 32-bit division.
  bool small = false;
};

/// Builds an Index over `out` for operands of shapes `ins` broadcast to it;
/// merges adjacent dims where all operands are contiguous. False if the rank
/// exceeds kMaxDims after merging.
bool broadcastIndex(const std::vector<int64_t> &out, const std::vector<std::vector<int64_t>> &ins, Index &ix);
/// An Index over `out` where operand 0 has explicit element strides.
bool stridedIndex(const std::vector<int64_t> &out, const std::vector<int64_t> &strides, Index &ix);

enum class BinaryOp { Add, Sub, Mul, Div, Pow, Max, Min, Mod,
                      Equal, Less, LessOrEqual, Greater, GreaterOrEqual, And, Or };
enum class UnaryOp { Neg, Abs, Exp, Log, Sqrt, Reciprocal, Tanh, Sigmoid, Relu, Erf,
                     Sin, Cos, Floor, Ceil, GeluErf, GeluTanh, Not };

/// out = a op b. dtype: of a and b (f32, f64, i32, i64; bool for And/Or);
/// comparisons write bool (u8).
bool launchBinary(BinaryOp op, ET dtype, const void *a, const void *b, void *out,
                  const Index &ix, cudaStream_t s);
bool launchUnary(UnaryOp op, ET dtype, const void *x, void *y, int64_t n, cudaStream_t s);
/// out = cond ? x : y, elements of `elemSize` bytes.
bool launchWhere(size_t elemSize, const uint8_t *cond, const void *x, const void *y,
                 void *out, const Index &ix, cudaStream_t s);
/// out[i] = in[offset of operand 0] (Transpose, Expand), `elemSize` bytes.
bool launchStridedCopy(size_t elemSize, const void *in, void *out, const Index &ix,
                       cudaStream_t s);
/// f32 out = dy * gelu'(x).
void launchGeluGrad(bool tanhApprox, const float *dy, const float *x, float *dx, int64_t n,
                    cudaStream_t s);
/// DropoutTraining on f32 (cpu/DropoutMask.h's mask); `step` is the device
/// copy of the iteration, null for 0.
void launchDropoutTraining(const float *x, float *y, int64_t n, const int64_t *step,
                           uint64_t seed, int64_t key, int64_t microBatch, int64_t replica,
                           uint64_t threshold, float scale, cudaStream_t s);

/// Gather along an axis: out[o, i, k] = data[o, idx[i], k]; `elemSize` bytes.
void launchGather(size_t elemSize, const void *data, const void *indices, bool idx64,
                  void *out, int64_t outer, int64_t len, int64_t n, int64_t inner,
                  int *errorFlag, int tag, cudaStream_t s);
/// dData (zeroed by the launcher) += dY scattered by indices.
void launchGatherGrad(const float *dy, const void *indices, bool idx64, float *dd,
                      int64_t outer, int64_t len, int64_t n, int64_t inner,
                      int *errorFlag, int tag, cudaStream_t s);
/// Sums `in` (shape inShape) into `out` (inShape with some dims set to 1,
/// same rank) in f32; `out` is zeroed by the launcher. `in` is f32, bf16 or
/// f16 (false for another type).
bool launchReduceToShape(ET inType, const void *in, const std::vector<int64_t> &inShape, float *out,
                         const std::vector<int64_t> &outShape, cudaStream_t s);

/// Softmax / LogSoftmax over [outer, len, inner] (axis in the middle).
void launchSoftmax(bool log, const float *x, float *y, int64_t outer, int64_t len,
                   int64_t inner, cudaStream_t s);
void launchSoftmaxGrad(bool log, const float *dy, const float *y, float *dx, int64_t outer,
                       int64_t len, int64_t inner, cudaStream_t s);
/// Rows of `len` elements; mean / invStd may be null. y of type `yType`:
/// f32, or bf16 / f16 (the f32 value rounded once to nearest even); false
/// (nothing launched) for another type.
bool launchLayerNorm(const float *x, const float *scale, const float *bias, ET yType, void *y,
                     float *mean, float *invStd, int64_t rows, int64_t len, float eps,
                     cudaStream_t s);
/// dX per row; dScale, dBias (zeroed by the launcher) accumulated over rows.
/// dy of type `dyType`: f32, or bf16 / f16 widened on load; false (nothing
/// launched) for another type. `stats` is scratch of 2 * rows floats.
bool launchLayerNormGrad(ET dyType, const void *dy, const float *x, const float *scale,
                         float *dx, float *dScale, float *dBias, float *stats, int64_t rows,
                         int64_t len, float eps, cudaStream_t s);

/// RMSNormalization over rows of `len` elements (scale dense over a row). y
/// of type `yType`: f32, or bf16 / f16 (the f32 value rounded once to nearest
/// even); false (nothing launched) for another type.
bool launchRMSNorm(const float *x, const float *scale, ET yType, void *y, int64_t rows,
                   int64_t len, float eps, cudaStream_t s);
/// Chunks of rows whose dScale partials launchRMSNormGrad keeps.
int64_t rmsNormGradChunks(int64_t rows);
/// dX per row and dScale (summed over rows in a fixed order); `scratch` holds
/// rows + rmsNormGradChunks(rows) * len floats. dy of type `dyType`: f32, or
/// bf16 / f16 widened on load; false (nothing launched) for another type.
bool launchRMSNormGrad(ET dyType, const void *dy, const float *x, const float *scale,
                       float *dx, float *dScale, float *scratch, int64_t rows, int64_t len,
                       float eps, cudaStream_t s);

/// Cross entropy of scores [n, c, d] against labels [n, d].
struct LossArgs {
  int64_t n = 0, c = 0, d = 1;
  const void *labels = nullptr;
  bool labels64 = true;
  const float *weights = nullptr; // [c] or null
  bool hasIgnore = false;
  int64_t ignore = 0;
  int reduction = 0; // 0 mean, 1 sum, 2 none
};
/// Scores x of type `scores` (f32, bf16 or f16: widened on load, f32 math);
/// loss (f32): scalar (mean/sum) or [n, d] (none); logProb [n, c, d] of type
/// f32 or `scores`, or null. `scratch` holds 2 * n * d floats. False (nothing
/// launched) for other types.
bool launchSoftmaxCrossEntropy(ET scores, const void *x, const LossArgs &a, float *loss,
                               ET logProbType, void *logProb, float *scratch, int *errorFlag,
                               int tag, cudaStream_t s);
/// dx of type `scores`: the f32 gradient rounded once. `scratch` holds 1
/// float. False (nothing launched) for scores other than f32, bf16, f16.
bool launchSoftmaxCrossEntropyGrad(ET scores, const float *dLoss, const void *x,
                                   const LossArgs &a, void *dx, float *scratch, int *errorFlag,
                                   int tag, cudaStream_t s);
/// SoftmaxCrossEntropyLossWithGrad: the loss (as launchSoftmaxCrossEntropy,
/// no log_prob) and dx (as launchSoftmaxCrossEntropyGrad) from one read of
/// each row, bit for bit the two launches' results. `scratch` holds
/// 2 * n * d + 1 floats. False (nothing launched) for scores other than
/// f32, bf16, f16.
bool launchSoftmaxCrossEntropyWithGrad(ET scores, const float *dLoss, const void *x,
                                       const LossArgs &a, float *loss, void *dx, float *scratch,
                                       int *errorFlag, int tag, cudaStream_t s);

/// AdamW on one tensor; lr (f32) and step (i64 or i32) are read on the device.
/// One tensor of an AdamW update: f32 parameter x, moments m, v and their
/// outputs; the gradient g of type gType (f32, or bf16 / f16 widened on
/// load); optionally `low`, a 16-bit copy (lowType BF16 or F16) of the new
/// x.
struct AdamWTensor {
  const float *x = nullptr;
  const void *g = nullptr;
  const float *m = nullptr, *v = nullptr;
  float *xo = nullptr, *mo = nullptr, *vo = nullptr;
  int64_t n = 0;
  ET gType = ET::F32;
  void *low = nullptr;
  ET lowType = ET::BF16;
};
/// AdamW over `count` tensors in a few launches (up to 24 tensors each, one
/// block per 4096 elements of a tensor). False (nothing launched) for a
/// gradient of another type. freezeAfter > 0: V frozen after that step
/// (AdamWAttrs::freezeVarianceAfter). `skip` (device f32 scalar, or null):
/// loss scaling's found_inf; nonzero leaves every tensor as it was.
bool launchAdamW(const float *lr, const void *step, bool step64, const AdamWTensor *tensors,
                 size_t count, float b1, float b2, float eps, float wd, int64_t freezeAfter,
                 const float *skip, int *errorFlag, int tag, cudaStream_t s);
/// SGD over f32 parameters and state; the gradient g of type `gType` (f32,
/// or bf16 / f16 widened on load). False (nothing launched) for another
/// type. `skip` as launchAdamW's.
bool launchSgd(const float *lr, const float *p, ET gType, const void *g, const float *v,
               float *po, float *vo, int64_t n, float momentum, float wd, bool nesterov,
               const float *skip, cudaStream_t s);
/// total = (first ? 0 : total) + g * f.
void launchAccumulate(const float *g, float *total, int64_t n, float f, bool first,
                      cudaStream_t s);
/// The same for g of type `gType` (f32, or bf16 / f16 widened on load) and
/// an f32 total; false (nothing launched) for another type.
bool launchAccumulate(ET gType, const void *g, float *total, int64_t n, float f, bool first,
                      cudaStream_t s);
/// *sumSq += sum(g^2) (double accumulator).
void launchSumSquares(const float *g, int64_t n, double *sumSq, cudaStream_t s);
/// out = g * min(1, maxNorm / (sqrt(*sumSq) + 1e-6)).
void launchClipScale(const float *g, float *out, int64_t n, const double *sumSq,
                     float maxNorm, cudaStream_t s);
/// *norm = sqrt(*sumSq).
void launchWriteNorm(const double *sumSq, float *norm, cudaStream_t s);
/// UnscaleGradients for one f32 gradient: out = g * (1/scale[0]); sets
/// found[0] = 1 when an element is inf or nan (the caller zeroes it first).
void launchUnscale(const float *g, float *out, int64_t n, const float *scale, float *found,
                   cudaStream_t s);
/// y = cast(x) between f32, f64, f16, bf16, i32, i64, bool.
bool launchCast(ET from, ET to, const void *x, void *y, int64_t n, cudaStream_t s);
/// Copies `rows` rows of `cols` elements of es bytes from rows srcLd
/// elements apart to rows dstLd apart (cudaMemcpy2D is slow for pitches
/// that are not multiples of 4 bytes: GPT-2's 50257 bf16 columns).
bool launchPitchedCopy(size_t es, const void *src, int64_t srcLd, void *dst, int64_t dstLd,
                       int64_t cols, int64_t rows, cudaStream_t s);

// --- Spatial and reduction kernels (Pooling.cu, Reduce.cu) ------------------

// The window (rt::ConvWindow, computed by rt::convWindow) is plain data and
// passed to the pooling kernels by value.

/// MaxPool / AveragePool over `planes` = N * C planes (f32). `indices` (i64,
/// may be null): flat index of each maximum into X, as ONNX's MaxPool.
void launchPool(bool max, bool countIncludePad, const float *x, float *y, int64_t *indices,
                int64_t planes, const ConvWindow &w, cudaStream_t s);
/// dX (zeroed by the launcher) of MaxPool (x needed) / AveragePool (x null).
void launchPoolGrad(bool max, bool countIncludePad, const float *dy, const float *x, float *dx,
                    int64_t planes, const ConvWindow &w, cudaStream_t s);
/// GlobalMaxPool / GlobalAveragePool: one value per plane of `size` elements.
void launchGlobalPool(bool max, const float *x, float *y, int64_t planes, int64_t size,
                      cudaStream_t s);

/// Batch normalization over X [n, c, spatial] (f32). Training (`batchStats`):
/// statistics of the batch; `mean`/`invStd` (may be null) receive them,
/// `runMean`/`runVar` (may be null) the momentum update of `inMean`/`inVar`
/// with the population (`unbiasedVar` false) or unbiased batch variance.
/// Inference: normalizes with `inMean`/`inVar`.
struct BatchNormArgs {
  int64_t n = 0, c = 0, spatial = 0;
  float eps = 1e-5f, momentum = 0.9f;
  bool batchStats = false, unbiasedVar = false;
  const float *scale = nullptr, *bias = nullptr, *inMean = nullptr, *inVar = nullptr;
  float *mean = nullptr, *invStd = nullptr, *runMean = nullptr, *runVar = nullptr;
};
void launchBatchNorm(const float *x, float *y, const BatchNormArgs &a, cudaStream_t s);
/// BatchNormalizationGrad: dX, dScale, dBias from the saved mean / invStd.
void launchBatchNormGrad(const float *dy, const float *x, const float *scale, const float *mean,
                         const float *invStd, float *dx, float *dScale, float *dBias, int64_t n,
                         int64_t c, int64_t spatial, cudaStream_t s);

/// Y [n, m, spatial] += bias [m] (ConvBias.cu): Y f32, f16 or bf16, the bias
/// Y's type or f32; the sum in f32, rounded once. False for other types.
bool launchChannelBias(ET yType, void *y, ET biasType, const void *bias, int64_t n, int64_t m,
                       int64_t spatial, cudaStream_t s);
/// The Reduce* family; accumulation in double as the CPU backend.
enum class ReduceOp { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };
/// Kept dims (in order, they enumerate the outputs) and reduced dims of X,
/// each with its element stride in X.
struct ReducePlan {
  int kept = 0, red = 0;
  int64_t keptDims[kMaxDims] = {}, keptStrides[kMaxDims] = {};
  int64_t redDims[kMaxDims] = {}, redStrides[kMaxDims] = {};
  int64_t outCount = 1, redCount = 1;
};
/// f32, f64, i32, i64; false for another type.
bool launchReduce(ReduceOp op, ET dtype, const void *x, void *y, const ReducePlan &p,
                  cudaStream_t s);
/// out[offset of element i in operand 0 of ix] = in[i] (the adjoint of
/// launchStridedCopy, for SliceGrad); elements of `elemSize` bytes.
bool launchStridedScatter(size_t elemSize, const void *in, void *out, const Index &ix,
                          cudaStream_t s);
/// Slice with its bounds in device memory: `starts`, `ends` and the optional
/// `axes`, `steps` are i32/i64 tensors of `n` entries (absent: all axes in
/// order, steps of 1). Every thread derives each dim's start and step as the
/// host's sliceMap does (negative values wrap, clamping) and checks the
/// sliced extents against the declared output shape (dims not sliced keep
/// their size); on a mismatch, a step of 0 or an axis out of range the error
/// flag gets kErrSliceBounds and nothing is written. No host wait.
struct SliceBounds {
  int rank = 0, n = 0;
  int64_t inShape[kMaxDims] = {}, outShape[kMaxDims] = {};
  const void *starts = nullptr, *ends = nullptr, *axes = nullptr, *steps = nullptr;
  bool starts64 = true, ends64 = true, axes64 = true, steps64 = true;
  int64_t nOut = 0;
};
/// Elements of `elemSize` (1, 2, 4, 8) bytes; false for another size.
bool launchSliceBounds(size_t elemSize, const void *x, void *y, const SliceBounds &b,
                       int *errorFlag, int tag, cudaStream_t s);
/// GatherElements: out[i] = data[offset of index i with its axis coordinate
/// replaced by indices[i]] (negative indices wrap; out of range raises the
/// error flag). `shape`: the indices' shape, `stride`: data's strides.
struct ElementsIndex {
  int rank = 0, axis = 0;
  int64_t len = 0, n = 0;
  int64_t shape[kMaxDims] = {}, stride[kMaxDims] = {};
};
bool launchGatherElements(size_t elemSize, const void *data, const void *indices, bool idx64,
                          void *out, const ElementsIndex &ix, int *errorFlag, int tag,
                          cudaStream_t s);
/// ScatterElements into `out` (already a copy of the data): the element of
/// updates[i] at the offset GatherElements would read, replaced (elements of
/// `elemSize` bytes; with duplicate indices which update lands is
/// unspecified, as in ONNX) or, with `addF32`, added (f32, atomically: the
/// order of the additions, and so the rounding, is not fixed). Out-of-range
/// indices raise the error flag. False for an element size it lacks.
bool launchScatterElements(size_t elemSize, bool addF32, const void *updates,
                           const void *indices, bool idx64, void *out, const ElementsIndex &ix,
                           int *errorFlag, int tag, cudaStream_t s);
/// TopK along the middle dim of [outer, len, inner]: the k first elements in
/// order (largest or smallest values first, ties by the lower index) into
/// vals and inds [outer, k, inner]. f32, f64, f16, bf16, i32, i64.
bool launchTopK(ET dtype, const void *x, void *vals, int64_t *inds, int64_t outer, int64_t len,
                int64_t inner, int64_t k, bool largest, cudaStream_t s);
/// HardSigmoid max(0, min(1, alpha x + beta)) and HardSwish x * HardSigmoid
/// with alpha 1/6, beta 1/2 (f32).
void launchHardSigmoid(bool swish, float alpha, float beta, const float *x, float *y, int64_t n,
                       cudaStream_t s);

// --- FusedAttention(+Grad) row kernels (Attention.cu) ------------------------

/// The additive bias of a fused attention, broadcast over [b..., Tq, Tk]:
/// element (batch entry g, row i, key j) is at
/// sum_d coord_d(g) * batchStride[d] + i * rowStride + j * colStride, where
/// coord_d(g) are g's coordinates over batchShape (row-major). Strides are 0
/// on broadcast dims. dtype F32, F16 or BF16; data null: no bias.
struct AttnBias {
  const void *data = nullptr;
  ET dtype = ET::F32;
  int batchRank = 0;
  int64_t batchShape[kMaxDims] = {};
  int64_t batchStride[kMaxDims] = {};
  int64_t rowStride = 0, colStride = 0;
};
/// A chunk of nb batch entries starting at entry b0: nb * tq rows of tk
/// f32 scores (already scaled), causal: key j masked for query i when
/// j > i + (tk - tq).
struct AttnRows {
  int64_t b0 = 0, nb = 0, tq = 0, tk = 0;
  bool causal = false;
  AttnBias bias;
};
/// Per row: + bias, mask, LSE = log sum exp (f32, -inf for a row without a
/// finite score) and P = exp(score - LSE) (0 where masked or LSE = -inf) in
/// `pType` (F32, F16, BF16; false otherwise). `lse`: nb * tq floats of the
/// chunk.
bool launchAttentionSoftmax(const float *s, const AttnRows &a, ET pType, void *p, float *lse,
                            cudaStream_t st);
/// The backward's recomputation: P = exp(score - LSE), 0 where masked or
/// LSE = -inf.
bool launchAttentionProbs(const float *s, const float *lse, const AttnRows &a, ET pType, void *p,
                          cudaStream_t st);
/// Where rows r = entry * tq + i of Y and dY ([b..., Tq, Dv], y_perm's
/// AttnLayout) sit in their tensors: dense, at r * dv; else element c of
/// row r at sum_d coord_d(entry) * batchStride[d] + i * rowStride +
/// c * colStride (coord_d over batchShape, row-major).
struct AttnRowLayout {
  bool dense = true;
  int batchRank = 0;
  int64_t batchShape[kMaxDims] = {};
  int64_t batchStride[kMaxDims] = {};
  int64_t tq = 1, rowStride = 0, colStride = 1;
};
/// drow[r] = sum_c dy[r, c] * y[r, c] over rows of dv elements (f32 sum),
/// dY and Y laid out by `l`; drow dense.
bool launchAttentionDrow(ET type, const void *dy, const void *y, const AttnRowLayout &l,
                         float *drow, int64_t rows, int64_t dv, cudaStream_t st);
/// p[r, j] = p[r, j] * (dp[r, j] - drow[r]) in place (dS over P).
bool launchAttentionDscores(const float *dp, const float *drow, ET pType, void *p, int64_t rows,
                            int64_t tk, cudaStream_t st);

// --- FusedRotaryEmbedding (Rotary.cu) ------------------------------------------

/// X viewed as [rows, D] (h = D / 2), its leading dims (merged where Cos and
/// Sin allow) `shape` with the element strides of Cos and Sin broadcast to
/// them (0 on broadcast dims); cosStep / sinStep: their stride along D (0
/// for a last dim of 1, else 1).
struct RotaryPlan {
  int rank = 0;
  int64_t shape[kMaxDims] = {};
  int64_t cosStride[kMaxDims] = {}, sinStride[kMaxDims] = {};
  int64_t cosStep = 1, sinStep = 1;
  int64_t rows = 0, h = 0;
  bool adjoint = false;
};
/// y = FusedRotaryEmbedding(x, cos, sin) (docs/runtime.md "Rotary
/// embedding"): one thread per (row, c < h) pair, f32 math with every
/// product and sum rounded separately (__fmul_rn, __fadd_rn), the result
/// rounded once to X's type. x and y of `xType` (F32, BF16, F16), cos and
/// sin each F32 or `xType`; false (nothing launched) for other types.
bool launchRotary(ET xType, const void *x, ET cosType, const void *cos, ET sinType,
                  const void *sin, void *y, const RotaryPlan &p, cudaStream_t s);

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_CUDALAUNCH_H
