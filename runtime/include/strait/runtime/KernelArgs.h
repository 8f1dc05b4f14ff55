//===- KernelArgs.h - Operand checks shared by the backends -----*- C++ -*-===//
//
// A training op's contract (operand count, dtypes, shapes, attributes and
// their defaults) is the same on every device; only the arithmetic differs.
// Each backend's kernel for these ops starts with the checker here, so the
// CPU, CUDA and future NPU kernels accept and reject the same programs with
// the same messages.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_KERNELARGS_H
#define STRAIT_RUNTIME_KERNELARGS_H

#include "strait/runtime/Backend.h"
#include "strait/runtime/ConvWindow.h"

#include <cstddef>
#include <string>
#include <vector>

namespace strait {
namespace rt {

/// Maps a possibly negative axis into [0, rank) (rank 0 takes axis 0 or -1);
/// an error naming the axis and the rank when out of range.
StatusOr<int64_t> normalizeAxis(const KernelContext &ctx, int64_t axis, int64_t rank);

/// GatherElements and ScatterElements: data X, indices, `axis` (default 0,
/// normalized). GatherElements: Y of the indices' shape and X's dtype.
/// ScatterElements: updates of the indices' shape and X's dtype,
/// `reduction` (default "none"; which ones a backend supports is its own
/// check), Y of X's shape and dtype.
struct ElementsArgs {
  const Tensor *x = nullptr, *indices = nullptr, *updates = nullptr;
  Tensor *y = nullptr;
  int64_t axis = 0;
  std::string reduction;
};
StatusOr<ElementsArgs> gatherElementsArgs(const KernelContext &ctx);
StatusOr<ElementsArgs> scatterElementsArgs(const KernelContext &ctx);

/// TopK of X (input 0) along `axis` (default -1), `largest` (default 1),
/// given the values of input 1 (K), which each backend reads its own way:
/// one k in [0, X's dim]; X viewed as [outer, len, inner]; values of X's
/// dtype and i64 indices, X's shape with k along the axis.
struct TopKArgs {
  const Tensor *x = nullptr;
  Tensor *values = nullptr, *indices = nullptr;
  int64_t k = 0, outer = 1, len = 0, inner = 1, axis = 0;
  bool largest = true;
};
StatusOr<TopKArgs> topKArgs(const KernelContext &ctx, const std::vector<int64_t> &k);

/// AccumulateGrad: total = mean over `micro_batches` of grad; micro-batch 0
/// (or a step without one) overwrites, later ones add. The grad is f32,
/// bf16 or f16 (widened exactly); the total is f32.
struct AccumulateGradArgs {
  const Tensor *grad = nullptr;
  Tensor *total = nullptr;
  float scale = 1;   ///< 1 / micro_batches
  bool first = true; ///< overwrite instead of add
};
StatusOr<AccumulateGradArgs> accumulateGradArgs(const KernelContext &ctx);

/// SGD: inputs lr (f32 scalar), param, grad, velocity; outputs param and
/// velocity; attributes momentum, weight_decay, nesterov. Everything f32,
/// except that grad may be bf16 / f16 (widened on load: the exporter hands a
/// one-micro-batch step's gradient to the optimizer without AccumulateGrad).
/// An optional fifth input found_inf (f32 scalar, loss scaling's flag):
/// nonzero skips the update (the outputs keep the inputs).
struct SgdArgs {
  const Tensor *lr = nullptr, *param = nullptr, *grad = nullptr, *velocity = nullptr;
  const Tensor *foundInf = nullptr;
  Tensor *paramOut = nullptr, *velocityOut = nullptr;
  float momentum = 0, weightDecay = 0;
  bool nesterov = false;
};
StatusOr<SgdArgs> sgdArgs(const KernelContext &ctx);

/// Multi-tensor optimizers (Adagrad, Momentum, Adam, AdamW): inputs lr,
/// step, then `groups` groups of n f32 tensors, each of the shape of the
/// first group's; outputs `outGroups` groups mirroring the first. The
/// tensors of group `lowGroup` (if any; AdamW's gradients) may also be bf16
/// or f16. With `copyGroup`, the outputs may have one more group: 16-bit
/// copies (bf16 or f16, of the parameter's shape; an entry may be absent)
/// that AdamW writes of each new parameter, the products' weights for the
/// next step. With `foundInf`, one more trailing input may follow the
/// groups: loss scaling's found_inf flag (f32 scalar; nonzero: the update
/// is skipped), returned there (null when absent). Returns n. Reads no
/// tensor data (lr and step may live on a device).
constexpr size_t kNoLowGroup = ~size_t(0);
StatusOr<size_t> optimizerGroups(const KernelContext &ctx, size_t groups, size_t outGroups,
                                 size_t lowGroup = kNoLowGroup, bool copyGroup = false,
                                 const Tensor **foundInf = nullptr);

/// UnscaleGradients (loss scaling): inputs scale (f32 scalar), then n f32
/// gradients; outputs found_inf (f32 scalar) and the n unscaled gradients
/// (shapes of the inputs).
struct UnscaleArgs {
  const Tensor *scale = nullptr;
  Tensor *found = nullptr;
  size_t n = 0;
};
StatusOr<UnscaleArgs> unscaleArgs(const KernelContext &ctx);
/// GradScaler's f32 reciprocal of the scale: (float)(1 / (double)scale).
inline float inverseScale(float scale) { return static_cast<float>(1.0 / double(scale)); }

/// AdamW's attributes (defaults as in the graph dialect's AdamW).
/// freezeVarianceAfter = N > 0 (compressed AdamW, docs/training.md): from
/// step N + 1 on, V is not updated and its bias correction stays 1 - beta2^N.
struct AdamWAttrs {
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f, weightDecay = 0.01f;
  int64_t freezeVarianceAfter = 0;
  /// Whether `step` updates V (false once frozen) and the step count of V's
  /// bias correction.
  bool updatesVariance(int64_t step) const {
    return freezeVarianceAfter <= 0 || step <= freezeVarianceAfter;
  }
  int64_t varianceStep(int64_t step) const {
    return updatesVariance(step) ? step : freezeVarianceAfter;
  }
};
StatusOr<AdamWAttrs> adamWAttrs(const KernelContext &ctx);

/// The window of Conv, MaxPool, AveragePool and their gradients over X of
/// shape `x` ([N, C, 1-3 spatial dims]) with `kernel` (the spatial kernel
/// shape): attributes strides, dilations (default 1), pads (default 0),
/// auto_pad (NOTSET, SAME_UPPER, SAME_LOWER, VALID) and, for `pooling` only,
/// ceil_mode (a last window that would start past the input is dropped, as
/// onnxruntime does). Errors: a rank past 3 spatial dims (unimplemented),
/// list lengths that differ from the spatial rank, a non-positive stride,
/// dilation or kernel size, an unknown auto_pad, an empty output.
StatusOr<ConvWindow> convWindow(const KernelContext &ctx, const Shape &x,
                                const std::vector<int64_t> &kernel, bool pooling);
/// [n, c, out...] of a window (the output shape of Conv and the pools).
Shape windowOutputShape(int64_t n, int64_t c, const ConvWindow &w);

/// Conv: X [N, C, spatial...], W [M, C / group, kernel...] and the optional
/// bias [M] (f32); attributes group, kernel_shape (W's if absent, else equal
/// to it) and the window's; Y [N, M, out...] f32.
struct ConvArgs {
  const Tensor *x = nullptr, *w = nullptr, *bias = nullptr;
  Tensor *y = nullptr;
  int64_t group = 1;
  ConvWindow window;
};
StatusOr<ConvArgs> convArgs(const KernelContext &ctx);

/// The compiler's ConvGradInput (dY, W; attribute input_shape; output dX)
/// and ConvGradWeight (dY, X; attribute weight_shape; output dW), f32: the
/// forward window from the same attributes as the Conv; dY must have the
/// forward output's shape.
struct ConvGradArgs {
  const Tensor *dy = nullptr;
  const Tensor *operand = nullptr; ///< W (ConvGradInput) or X (ConvGradWeight)
  Tensor *out = nullptr;           ///< dX or dW
  Shape xShape, wShape;
  int64_t group = 1;
  ConvWindow window;
};
StatusOr<ConvGradArgs> convGradInputArgs(const KernelContext &ctx);
StatusOr<ConvGradArgs> convGradWeightArgs(const KernelContext &ctx);

/// MaxPool / AveragePool: X [N, C, spatial...] f32; attributes kernel_shape,
/// count_include_pad, storage_order (0 only, when Indices is requested) and
/// the window's; Y and MaxPool's optional Indices (i64, flat into X).
struct PoolArgs {
  const Tensor *x = nullptr;
  Tensor *y = nullptr, *indices = nullptr;
  bool countIncludePad = false;
  ConvWindow window;
};
StatusOr<PoolArgs> poolArgs(const KernelContext &ctx);

/// GlobalMaxPool / GlobalAveragePool: X [N, C, spatial...] f32 (rank >= 3);
/// Y [N, C, 1, ...]; `planes` = N * C rows of `size` elements each.
struct GlobalPoolArgs {
  const Tensor *x = nullptr;
  Tensor *y = nullptr;
  int64_t planes = 0, size = 0;
};
StatusOr<GlobalPoolArgs> globalPoolArgs(const KernelContext &ctx);

/// MaxPoolGrad (dY, X) and AveragePoolGrad (dY; attribute input_shape), f32:
/// the forward pool's attributes; dY must have the forward output's shape;
/// output dX. `x` is null for AveragePoolGrad.
struct PoolGradArgs {
  const Tensor *dy = nullptr, *x = nullptr;
  Tensor *dx = nullptr;
  Shape xShape;
  bool countIncludePad = false;
  ConvWindow window;
};
StatusOr<PoolGradArgs> poolGradArgs(const KernelContext &ctx, bool max);

/// FusedAttention (Q, Kt, V [, Bias] -> Y, LSE) and FusedAttentionGrad (dY,
/// Q, Kt, V, Y, LSE [, Bias] -> dQ, dKt, dV); docs/runtime.md "Fused
/// attention". Q [b..., Tq, D], Kt [b..., D, Tk], V [b..., Tk, Dv] share one
/// dtype (f32, bf16 or f16) and the batch dims b...; Bias (f32 or Q's dtype)
/// broadcasts to the scores [b..., Tq, Tk]; attributes scale (required) and
/// causal (0 or 1). Y and dY are [b..., Tq, Dv] of Q's dtype, LSE f32
/// [b..., Tq]; the gradients have their operand's type. Reads no tensor data.
///
/// Each of Q, Kt, V and Y may be a permuted tensor: the optional attributes
/// q_perm, kt_perm, v_perm and y_perm (a permutation of the rank) say that
/// logical dimension i of the operand is dimension perm[i] of its tensor,
/// i.e. the operand is Transpose(tensor, perm) (graph-fuse-attention folds
/// the transposes of [b, T, h, d] heads this way). The shapes above are the
/// logical ones; y_perm lays out Y and dY, and each gradient has its
/// operand's tensor type (dQ in Q's layout, ...). LSE is always dense.
/// Kernels address the operands through AttnLayout.
///
/// Each of Q, Kt and V may also be one slice of a packed tensor: the
/// optional attributes q_select, kt_select, v_select = [axis, index] say
/// that the operand's tensor has one dimension more (axis), and that the
/// operand is its slice at `index` there (the dimension removed), before
/// the permutation applies (GPT-2's Q, K and V read out of one [B, T, 3, H,
/// D] projection: they alias one buffer). The gradients have the slice's
/// shape, laid out by the permutation: dqL, dktL, dvL. With the attribute
/// packed_grad = 1 (Q, Kt, V of one shape, selecting 0, 1, 2 of one axis of
/// size 3), FusedAttentionGrad has one output instead, dQKV of that shape:
/// out[0..2] all point at it and dqL, dktL, dvL are qL, ktL, vL.
struct AttnLayout {
  /// Element offset of the operand in its tensor (its select's slice).
  int64_t base = 0;
  /// Element strides in the tensor of the logical batch dims, the rows
  /// (Tq, D, Tk or Tq for Q, Kt, V, Y) and the columns (D, Tk, Dv, Dv).
  std::vector<int64_t> batch;
  int64_t row = 0, col = 1;

  /// Offset of batch slice b (row-major over the batch dims `dims`), base
  /// included.
  int64_t offset(int64_t b, const Shape &dims) const;
  /// Whether the tensor is the logical operand itself: the dense row-major
  /// [b..., rows, cols] at base 0 (then slice b starts at b * rows * cols).
  bool dense(const Shape &dims, int64_t rows, int64_t cols) const;
};

struct AttentionArgs {
  const Tensor *q = nullptr, *kt = nullptr, *v = nullptr, *bias = nullptr;
  const Tensor *dy = nullptr, *y = nullptr, *lse = nullptr; ///< the gradient's
  /// Y, LSE (FusedAttention) or dQ, dKt, dV (FusedAttentionGrad).
  Tensor *out[3] = {nullptr, nullptr, nullptr};
  DType dtype = program::DTYPE_F32;
  Shape batch;
  int64_t nBatch = 1, tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1;
  bool causal = false;
  /// Element strides of Bias broadcast to [b..., Tq, Tk] (0 on broadcast
  /// dims); empty without Bias.
  std::vector<int64_t> biasStrides;
  /// Where Q, Kt, V and Y (also dY) sit in their tensors, and where
  /// FusedAttentionGrad's dQ, dKt, dV do (their operands' layouts without
  /// the select: equal to qL, ktL, vL when there is none).
  AttnLayout qL, ktL, vL, yL;
  AttnLayout dqL, dktL, dvL;
  /// The tensor shapes of dQ, dKt, dV (their operands' with the select axis
  /// removed).
  Shape dqShape, dktShape, dvShape;
  /// y_perm (the identity without it) and the tensor shape of Y and dY.
  std::vector<int64_t> yPerm;
  Shape yShape;

  /// Keys visible to query row i: [0, keyEnd(i)) (all Tk without causal).
  int64_t keyEnd(int64_t i) const;
  /// Offset in Bias of batch slice b's [Tq, Tk] scores.
  int64_t biasOffset(int64_t b) const;
};
StatusOr<AttentionArgs> fusedAttentionArgs(const KernelContext &ctx);
StatusOr<AttentionArgs> fusedAttentionGradArgs(const KernelContext &ctx);

/// FusedRotaryEmbedding(X, Cos, Sin) {adjoint} -> Y, the rotate-half rotary
/// position embedding; docs/runtime.md "Rotary embedding". X f32, bf16 or
/// f16, rank >= 1, last dim D even and > 0 (h = D / 2); Cos and Sin each f32
/// or X's dtype, rank <= X's, numpy-broadcastable to X's shape without
/// widening it (each dim 1 or X's, aligned from the right; the last one 1
/// or D); attribute adjoint (0 or 1, default 0); Y of X's shape and dtype.
/// With partner p(i) = i +- h and sign r(i) = -1 below h, +1 from h on:
/// adjoint 0: Y_i = X_i c_i + (r(i) X_p(i)) s_i; adjoint 1 (the gradient
/// w.r.t. X of adjoint 0): Y_i = X_i c_i + (-r(i) X_p(i)) s_p(i). Reads no
/// tensor data.
struct RotaryArgs {
  const Tensor *x = nullptr, *cos = nullptr, *sin = nullptr;
  Tensor *y = nullptr;
  int64_t d = 0, h = 0;
  /// numel(X) / D: X viewed as [rows, D].
  int64_t rows = 0;
  bool adjoint = false;
  /// Element strides of Cos and Sin broadcast to X's shape (0 on broadcast
  /// dims), one per dim of X; the last is 0 (a last dim of 1) or 1.
  std::vector<int64_t> cosStrides, sinStrides;

  /// Offset in a table with broadcast strides `strides` of the first
  /// element of row `row` of X viewed as [rows, D].
  int64_t rowOffset(const std::vector<int64_t> &strides, int64_t row) const;
};
StatusOr<RotaryArgs> fusedRotaryEmbeddingArgs(const KernelContext &ctx);

/// SoftmaxCrossEntropyLossWithGrad (dLoss, scores, labels [, weights] ->
/// loss, dScores): SoftmaxCrossEntropyLoss and SoftmaxCrossEntropyLossGrad
/// in one kernel, with their operands and attributes; docs/program-format.md.
/// Scores [N, C, d...] f32, bf16 or f16; labels [N, d...] i64 or i32;
/// weights f32 [C]; dLoss f32 with one element (reduction mean / sum) or
/// the labels' shape (none); attributes reduction ("mean", the default,
/// "sum" or "none") and ignore_index (optional). Outputs: the loss, f32, a
/// scalar or (none) the labels' shape, and dScores of the scores' shape and
/// dtype. Reads no tensor data (a label outside [0, C) is the kernel's
/// error).
struct SoftmaxCrossEntropyArgs {
  enum class Reduction { Mean, Sum, None };
  const Tensor *dLoss = nullptr, *scores = nullptr, *labels = nullptr, *weights = nullptr;
  Tensor *loss = nullptr, *dScores = nullptr;
  /// The scores viewed as [n, c, d]: n * d rows of c classes.
  int64_t n = 0, c = 0, d = 1;
  Reduction reduction = Reduction::Mean;
  bool hasIgnore = false;
  int64_t ignore = 0;
};
StatusOr<SoftmaxCrossEntropyArgs> softmaxCrossEntropyWithGradArgs(const KernelContext &ctx);

/// GroupedMatMul(X [S, I], W, idx [S]) {transB} -> Y [S, O]: row s times
/// expert idx[s]'s weight, W [E, O, I] (transB 1, the default) or [E, I, O].
/// GroupedMatMulGradWeight(X [S, I], dY [S, O], idx [S]) {num_experts,
/// transB} -> dW, W's shape: expert e's rows' dY^T X (X^T dY). X and W / dY
/// share one float dtype (f32, bf16, f16), which the output has.
struct GroupedMatMulArgs {
  const Tensor *x = nullptr, *w = nullptr, *dy = nullptr, *idx = nullptr;
  Tensor *out = nullptr;
  int64_t s = 0, i = 0, o = 0, e = 0;
  bool transB = true;
};
StatusOr<GroupedMatMulArgs> groupedMatMulArgs(const KernelContext &ctx);
StatusOr<GroupedMatMulArgs> groupedMatMulGradWeightArgs(const KernelContext &ctx);

/// The rows of each expert, contiguous: rows[offset[e] .. offset[e + 1]) are
/// the rows routed to expert e, in row order (a stable counting sort).
struct ExpertRouting {
  std::vector<int64_t> offset; ///< E + 1
  std::vector<int64_t> rows;   ///< S
};
/// Routes `ids` (one expert per row, -E <= id < E; negative ids count from
/// the end) over `e` experts; an id out of range is an error naming the row.
StatusOr<ExpertRouting> routeExperts(const KernelContext &ctx, std::vector<int64_t> ids,
                                     int64_t e);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_KERNELARGS_H
