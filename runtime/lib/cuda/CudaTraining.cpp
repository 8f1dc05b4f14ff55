//===- CudaTraining.cpp - Normalization, losses, optimizers (host side) ---===//
//
// Softmax / LogSoftmax and their gradients, LayerNormalization,
// RMSNormalization and their gradients, ReduceToShape, SoftmaxCrossEntropyLoss and its gradient
// (apart, or fused: SoftmaxCrossEntropyLossWithGrad), AdamW,
// SGD, AccumulateGrad and ClipByGlobalNorm, with the CPU backend's operand
// order, attributes and semantics (runtime/lib/cpu/{Normalization,Training,
// Gradients}.cpp). All f32, except the cross-entropy and its gradient, which
// also take bf16 / f16 scores (ReduceToShape: bf16 / f16 widened), and
// LayerNormalization's and RMSNormalization's Y, LayerNormalizationGrad's and
// RMSNormalizationGrad's dY and AccumulateGrad's grad, which may be bf16 /
// f16 (rounded once / widened on load).
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include "strait/runtime/KernelArgs.h"

namespace strait {
namespace rt {
namespace cuda {
namespace {

struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
};

StatusOr<Rows> rowsAround(const KernelContext &ctx, const Shape &s, int64_t axisAttr,
                          bool legacy) {
  int64_t r = static_cast<int64_t>(s.size());
  int64_t axis = axisAttr < 0 ? axisAttr + r : axisAttr;
  if (axis < 0 || axis >= std::max<int64_t>(r, 1))
    return ctx.error("axis " + std::to_string(axisAttr) + " out of range for rank " +
                     std::to_string(r));
  Rows rows;
  for (int64_t d = 0; d < r; ++d)
    (d < axis ? rows.outer : (d == axis || legacy) ? rows.len : rows.inner) *= s[d];
  return rows;
}

Status softmaxKernel(CudaContext &c, KernelContext &ctx, bool log) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  bool legacy = ctx.opset() > 0 && ctx.opset() < 13;
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, ctx.getAttrs().getInt("axis", legacy ? 1 : -1));
  STRAIT_ASSIGN_OR_RETURN(Rows r, rowsAround(ctx, x->shape, axis, legacy));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  launchSoftmax(log, x->as<float>(), y->as<float>(), r.outer, r.len, r.inner, c.stream);
  return Status::ok();
}

Status softmaxGradKernel(CudaContext &c, KernelContext &ctx, bool log) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *y, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, ctx.getAttrs().getInt("axis", -1));
  if (dy->shape != y->shape)
    return ctx.error("dY and Y shapes differ");
  STRAIT_ASSIGN_OR_RETURN(Rows r, rowsAround(ctx, y->shape, axis, false));
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, y->shape, y->dtype));
  launchSoftmaxGrad(log, dy->as<float>(), y->as<float>(), dx->as<float>(), r.outer, r.len,
                    r.inner, c.stream);
  return Status::ok();
}

bool isLowFloat(DType t) { return t == program::DTYPE_BF16 || t == program::DTYPE_F16; }

/// X, Scale, B f32; Y f32, or bf16 / f16 (the f32 value rounded once: Cast
/// of the f32 kernel's Y, bit for bit).
Status layerNormKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  const Tensor *bias = ctx.input(2);
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", -1));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(Rows r, rowsAround(ctx, x->shape, axisAttr, true));
  DType yType = ctx.output(0) && isLowFloat(ctx.output(0)->dtype) ? ctx.output(0)->dtype
                                                                   : x->dtype;
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, yType));
  if (scale->numel() != r.len || (bias && (bias->numel() != r.len ||
                                           bias->dtype != program::DTYPE_F32)))
    return ctx.unsupported("cuda: scale/bias must be dense over the normalized dims (" +
                           std::to_string(r.len) + " elements)");
  int64_t axis = axisAttr < 0 ? axisAttr + x->rank() : axisAttr;
  Shape statShape = x->shape;
  for (int64_t d = axis; d < x->rank(); ++d)
    statShape[d] = 1;
  float *mean = nullptr, *inv = nullptr;
  if (ctx.output(1)) {
    STRAIT_ASSIGN_OR_RETURN(Tensor * m, ctx.requireOutput(1, statShape, x->dtype));
    mean = m->as<float>();
  }
  if (ctx.output(2)) {
    STRAIT_ASSIGN_OR_RETURN(Tensor * i, ctx.requireOutput(2, statShape, x->dtype));
    inv = i->as<float>();
  }
  if (!launchLayerNorm(x->as<float>(), scale->as<float>(), bias ? bias->as<float>() : nullptr,
                       elemType(yType), y->data, mean, inv, r.outer, r.len, eps, c.stream))
    return ctx.unsupported("cuda: Y " + y->typeString() + " (the kernel writes f32, bf16, f16)");
  return Status::ok();
}

/// Operands of LayerNormalizationGrad and RMSNormalizationGrad (dY, X,
/// Scale; attributes axis and epsilon), X split into rows around axis.
struct NormGradArgs {
  const Tensor *dy = nullptr, *x = nullptr, *scale = nullptr;
  float eps = 1e-5f;
  Rows r;
};

/// dY f32, or with `lowDY` also bf16 / f16.
StatusOr<NormGradArgs> normGradArgs(const KernelContext &ctx, bool lowDY = false) {
  NormGradArgs a;
  if (lowDY) {
    STRAIT_ASSIGN_OR_RETURN(a.dy, ctx.requireInput(0));
    if (a.dy->dtype != program::DTYPE_F32 && !isLowFloat(a.dy->dtype))
      return ctx.unsupported("cuda: dY " + a.dy->typeString() + " (the kernel takes f32, bf16, f16)");
  } else {
    STRAIT_ASSIGN_OR_RETURN(a.dy, ctx.requireInput(0, program::DTYPE_F32));
  }
  STRAIT_ASSIGN_OR_RETURN(a.x, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.scale, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", -1));
  STRAIT_ASSIGN_OR_RETURN(a.eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(a.r, rowsAround(ctx, a.x->shape, axisAttr, true));
  return a;
}

/// dY f32, or bf16 / f16 widened on load (the f32 kernel on Cast(to f32)(dY)).
Status layerNormGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(NormGradArgs a, normGradArgs(ctx, /*lowDY=*/true));
  const Rows &r = a.r;
  if (a.dy->shape != a.x->shape || a.scale->numel() != r.len)
    return ctx.unsupported("dY/X shapes differ or Scale is not dense over the normalized dims");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, a.x->shape, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * ds, ctx.requireOutput(1, a.scale->shape, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * db, ctx.requireOutput(2, a.scale->shape, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(void *stats, c.getScratch(2 * sizeof(float) * r.outer));
  if (!launchLayerNormGrad(elemType(a.dy->dtype), a.dy->data, a.x->as<float>(),
                           a.scale->as<float>(), dx->as<float>(), ds->as<float>(),
                           db->as<float>(), static_cast<float *>(stats), r.outer, r.len, a.eps,
                           c.stream))
    return ctx.unsupported("cuda: dY " + a.dy->typeString());
  return Status::ok();
}

/// X and scale f32; Y f32, or bf16 / f16 (the f32 value rounded once: Cast
/// of the f32 kernel's Y, bit for bit).
Status rmsNormKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", -1));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(Rows r, rowsAround(ctx, x->shape, axisAttr, true));
  if (scale->numel() != r.len)
    return ctx.unsupported("cuda: scale " + scale->typeString() +
                           " must be dense over the normalized dims (" +
                           std::to_string(r.len) + " elements)");
  DType yType = ctx.output(0) && isLowFloat(ctx.output(0)->dtype) ? ctx.output(0)->dtype
                                                                   : x->dtype;
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, yType));
  if (!launchRMSNorm(x->as<float>(), scale->as<float>(), elemType(yType), y->data, r.outer,
                     r.len, eps, c.stream))
    return ctx.unsupported("cuda: Y " + y->typeString() + " (the kernel writes f32, bf16, f16)");
  return Status::ok();
}

/// dY f32, or bf16 / f16 widened on load (the f32 kernel on Cast(to f32)(dY)).
Status rmsNormGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(NormGradArgs a, normGradArgs(ctx, /*lowDY=*/true));
  const Rows &r = a.r;
  if (a.dy->shape != a.x->shape)
    return ctx.error("dY " + a.dy->typeString() + " and X " + a.x->typeString() +
                     " have different shapes");
  if (a.scale->numel() != r.len)
    return ctx.unsupported("cuda: scale " + a.scale->typeString() +
                           " must be dense over the normalized dims");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, a.x->shape, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * ds, ctx.requireOutput(1, a.scale->shape, a.x->dtype));
  size_t floats = static_cast<size_t>(r.outer + rmsNormGradChunks(r.outer) * r.len);
  STRAIT_ASSIGN_OR_RETURN(void *scratch, c.getScratch(sizeof(float) * std::max<size_t>(floats, 1)));
  if (!launchRMSNormGrad(elemType(a.dy->dtype), a.dy->data, a.x->as<float>(),
                         a.scale->as<float>(), dx->as<float>(), ds->as<float>(),
                         static_cast<float *>(scratch), r.outer, r.len, a.eps, c.stream))
    return ctx.unsupported("cuda: dY " + a.dy->typeString());
  return Status::ok();
}

Status reduceToShapeKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  // bf16/f16: the gradient of a Gemm bias under graph-autocast (mixed
  // precision), summed in f32 straight from the 16-bit input and rounded back.
  bool low = x->dtype == program::DTYPE_BF16 || x->dtype == program::DTYPE_F16;
  if (x->dtype != program::DTYPE_F32 && !low)
    return ctx.unsupported("cuda: ReduceToShape of " + x->typeString() +
                           " (f32, bf16 and f16 are supported)");
  if (!ctx.getAttrs().has("shape"))
    return ctx.error("missing attribute 'shape'");
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> shape, ctx.getAttrs().getInts("shape", {}));
  if (shape.size() > x->shape.size())
    return ctx.error("shape " + shapeToString(shape) + " does not broadcast to " +
                     x->typeString());
  Shape aligned(x->shape.size() - shape.size(), 1);
  aligned.insert(aligned.end(), shape.begin(), shape.end());
  for (size_t d = 0; d < aligned.size(); ++d)
    if (aligned[d] != 1 && aligned[d] != x->shape[d])
      return ctx.error("shape " + shapeToString(shape) + " does not broadcast to " +
                       x->typeString());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, Shape(shape.begin(), shape.end()),
                                                        x->dtype));
  if (low) {
    STRAIT_ASSIGN_OR_RETURN(void *scratch, c.getScratch(y->numel() * sizeof(float)));
    float *wideY = static_cast<float *>(scratch);
    ET et = elemType(x->dtype);
    if (!launchReduceToShape(et, x->data, x->shape, wideY, aligned, c.stream) ||
        !launchCast(ET::F32, et, wideY, y->data, y->numel(), c.stream))
      return ctx.unsupported("cuda: ReduceToShape of " + x->typeString() + " has too many dims");
    return Status::ok();
  }
  if (!launchReduceToShape(ET::F32, x->data, x->shape, y->as<float>(), aligned, c.stream))
    return ctx.unsupported("cuda: ReduceToShape of " + x->typeString() + " has too many dims");
  return Status::ok();
}

StatusOr<LossArgs> lossArgs(const KernelContext &ctx, const Tensor &x, const Tensor &t,
                            const Tensor *weight) {
  if (x.rank() < 2 || t.rank() != x.rank() - 1 || t.shape[0] != x.shape[0])
    return ctx.error("input " + x.typeString() + " and target " + t.typeString() +
                     " do not fit [N, C, d...] / [N, d...]");
  LossArgs a;
  a.n = x.shape[0];
  a.c = x.shape[1];
  for (int64_t i = 2; i < x.rank(); ++i) {
    if (t.shape[i - 1] != x.shape[i])
      return ctx.error("target " + t.typeString() + " does not match input " + x.typeString());
    a.d *= x.shape[i];
  }
  if (t.dtype != program::DTYPE_I64 && t.dtype != program::DTYPE_I32)
    return ctx.unsupported("cuda: labels must be i32 or i64, got " + t.typeString());
  a.labels = t.data;
  a.labels64 = t.dtype == program::DTYPE_I64;
  if (weight) {
    if (weight->numel() != a.c || weight->dtype != program::DTYPE_F32)
      return ctx.error("weight " + weight->typeString() + " must be f32 with C entries");
    a.weights = weight->as<float>();
  }
  STRAIT_ASSIGN_OR_RETURN(std::string red, ctx.getAttrs().getString("reduction", "mean"));
  if (red != "mean" && red != "sum" && red != "none")
    return ctx.error("unknown reduction '" + red + "'");
  a.reduction = red == "mean" ? 0 : red == "sum" ? 1 : 2;
  a.hasIgnore = ctx.getAttrs().has("ignore_index");
  STRAIT_ASSIGN_OR_RETURN(a.ignore, ctx.getAttrs().getInt("ignore_index", 0));
  return a;
}

bool isScoreType(DType t) {
  return t == program::DTYPE_F32 || t == program::DTYPE_BF16 || t == program::DTYPE_F16;
}

/// Scores f32, bf16 or f16; the loss is f32, log_prob f32 or the scores'
/// type. 16-bit scores are widened on load: the loss is the f32 kernel's on
/// the scores cast to f32, bit for bit.
Status sceKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  if (!isScoreType(x->dtype))
    return ctx.unsupported("cuda: scores " + x->typeString() + " (the kernel takes f32, bf16, f16)");
  STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(LossArgs a, lossArgs(ctx, *x, *t, ctx.input(2)));
  Shape lossShape = a.reduction == 2 ? t->shape : Shape{};
  STRAIT_ASSIGN_OR_RETURN(Tensor * loss, ctx.requireOutput(0, lossShape, program::DTYPE_F32));
  void *logProb = nullptr;
  DType logProbType = program::DTYPE_F32;
  if (Tensor *lp = ctx.output(1)) {
    logProbType = lp->dtype == x->dtype ? x->dtype : program::DTYPE_F32;
    STRAIT_ASSIGN_OR_RETURN(lp, ctx.requireOutput(1, x->shape, logProbType));
    logProb = lp->data;
  }
  STRAIT_ASSIGN_OR_RETURN(void *scratch, c.getScratch(2 * sizeof(float) * a.n * a.d));
  if (!launchSoftmaxCrossEntropy(elemType(x->dtype), x->data, a, loss->as<float>(),
                                 elemType(logProbType), logProb, static_cast<float *>(scratch),
                                 c.errorFlag, tag, c.stream))
    return ctx.unsupported("cuda: scores " + x->typeString());
  return Status::ok();
}

/// dScores of the scores' type (f32, bf16 or f16) from an f32 dLoss: the f32
/// gradient of the widened scores, rounded once to nearest even.
Status sceGradKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dl, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1));
  if (!isScoreType(x->dtype))
    return ctx.unsupported("cuda: scores " + x->typeString() + " (the kernel takes f32, bf16, f16)");
  STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(2));
  STRAIT_ASSIGN_OR_RETURN(LossArgs a, lossArgs(ctx, *x, *t, ctx.input(3)));
  if (a.reduction != 2 && dl->numel() != 1)
    return ctx.error("dLoss must be a scalar for a reduced loss");
  if (a.reduction == 2 && dl->numel() != a.n * a.d)
    return ctx.error("dLoss must have the labels' shape for reduction 'none'");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(void *scratch, c.getScratch(sizeof(float)));
  if (!launchSoftmaxCrossEntropyGrad(elemType(x->dtype), dl->as<float>(), x->data, a, dx->data,
                                     static_cast<float *>(scratch), c.errorFlag, tag, c.stream))
    return ctx.unsupported("cuda: scores " + x->typeString());
  return Status::ok();
}

/// SoftmaxCrossEntropyLossWithGrad: the loss of sceKernel and the dScores of
/// sceGradKernel from one pass over each row (operand checks shared with the
/// CPU kernel, KernelArgs.h).
Status sceWithGradKernel(CudaContext &c, KernelContext &ctx, int tag) {
  using Reduction = SoftmaxCrossEntropyArgs::Reduction;
  STRAIT_ASSIGN_OR_RETURN(SoftmaxCrossEntropyArgs sa, softmaxCrossEntropyWithGradArgs(ctx));
  LossArgs a;
  a.n = sa.n;
  a.c = sa.c;
  a.d = sa.d;
  a.labels = sa.labels->data;
  a.labels64 = sa.labels->dtype == program::DTYPE_I64;
  a.weights = sa.weights ? sa.weights->as<float>() : nullptr;
  a.hasIgnore = sa.hasIgnore;
  a.ignore = sa.ignore;
  a.reduction = sa.reduction == Reduction::Mean ? 0 : sa.reduction == Reduction::Sum ? 1 : 2;
  STRAIT_ASSIGN_OR_RETURN(void *scratch, c.getScratch(sizeof(float) * (2 * a.n * a.d + 1)));
  if (!launchSoftmaxCrossEntropyWithGrad(elemType(sa.scores->dtype), sa.dLoss->as<float>(),
                                         sa.scores->data, a, sa.loss->as<float>(),
                                         sa.dScores->data, static_cast<float *>(scratch),
                                         c.errorFlag, tag, c.stream))
    return ctx.unsupported("cuda: scores " + sa.scores->typeString());
  return Status::ok();
}

Status adamWKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *lr, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *step, ctx.requireInput(1));
  if (lr->numel() != 1)
    return ctx.error("learning rate must be a float scalar");
  if (step->numel() != 1 ||
      (step->dtype != program::DTYPE_I64 && step->dtype != program::DTYPE_I32))
    return ctx.error("step count must be an integer scalar");
  // The gradients may be bf16 / f16 (widened on load); a fourth output
  // group may hold 16-bit copies of the new parameters.
  const Tensor *foundInf = nullptr;
  STRAIT_ASSIGN_OR_RETURN(size_t n, optimizerGroups(ctx, 4, 3, /*lowGroup=*/1,
                                                    /*copyGroup=*/true, &foundInf));
  STRAIT_ASSIGN_OR_RETURN(AdamWAttrs attrs, adamWAttrs(ctx));
  float b1 = attrs.beta1, b2 = attrs.beta2, eps = attrs.epsilon, wd = attrs.weightDecay;
  std::vector<AdamWTensor> tensors(n);
  for (size_t i = 0; i < n; ++i) {
    const Tensor *x = ctx.input(2 + i), *g = ctx.input(2 + n + i);
    tensors[i] = {x->as<float>(),
                  g->data,
                  ctx.input(2 + 2 * n + i)->as<float>(),
                  ctx.input(2 + 3 * n + i)->as<float>(),
                  ctx.output(i)->as<float>(),
                  ctx.output(n + i)->as<float>(),
                  ctx.output(2 * n + i)->as<float>(),
                  x->numel(),
                  elemType(g->dtype)};
    if (Tensor *copy = ctx.numOutputs() == 4 * n ? ctx.output(3 * n + i) : nullptr) {
      tensors[i].low = copy->data;
      tensors[i].lowType = elemType(copy->dtype);
    }
  }
  if (!launchAdamW(lr->as<float>(), step->data, step->dtype == program::DTYPE_I64,
                   tensors.data(), n, b1, b2, eps, wd, attrs.freezeVarianceAfter,
                   foundInf ? foundInf->as<float>() : nullptr, c.errorFlag, tag, c.stream))
    return ctx.unsupported("cuda: AdamW gradients of another type than f32, bf16, f16");
  return Status::ok();
}

Status sgdKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(SgdArgs a, sgdArgs(ctx));
  if (!launchSgd(a.lr->as<float>(), a.param->as<float>(), elemType(a.grad->dtype), a.grad->data,
                 a.velocity->as<float>(), a.paramOut->as<float>(), a.velocityOut->as<float>(),
                 a.param->numel(), a.momentum, a.weightDecay, a.nesterov,
                 a.foundInf ? a.foundInf->as<float>() : nullptr, c.stream))
    return ctx.unsupported("cuda: grad " + a.grad->typeString());
  return Status::ok();
}

/// grad f32, or bf16 / f16 widened on load into the f32 total.
Status accumulateGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(AccumulateGradArgs a, accumulateGradArgs(ctx));
  if (!launchAccumulate(elemType(a.grad->dtype), a.grad->data, a.total->as<float>(),
                        a.grad->numel(), a.scale, a.first, c.stream))
    return ctx.unsupported("cuda: grad " + a.grad->typeString());
  return Status::ok();
}

Status clipByGlobalNormKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(float maxNorm, ctx.getAttrs().getFloat("max_norm", 0));
  if (ctx.numOutputs() != ctx.numInputs() + 1 || ctx.numInputs() == 0)
    return ctx.error("needs n gradients and 1 + n outputs");
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *g, ctx.requireInput(i, program::DTYPE_F32));
    STRAIT_RETURN_IF_ERROR(ctx.requireOutput(i + 1, g->shape, g->dtype).getStatus());
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * norm, ctx.requireOutput(0, {}, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(void *scratch, c.getScratch(sizeof(double)));
  double *sumSq = static_cast<double *>(scratch);
  STRAIT_RETURN_IF_ERROR(
      cudaStatus(cudaMemsetAsync(sumSq, 0, sizeof(double), c.stream), "memset"));
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    launchSumSquares(ctx.input(i)->as<float>(), ctx.input(i)->numel(), sumSq, c.stream);
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    launchClipScale(ctx.input(i)->as<float>(), ctx.output(i + 1)->as<float>(),
                    ctx.input(i)->numel(), sumSq, maxNorm, c.stream);
  launchWriteNorm(sumSq, norm->as<float>(), c.stream);
  return Status::ok();
}

/// Loss scaling's unscale and inf/nan check, on the device (the flag stays
/// there for the optimizers that read it).
Status unscaleGradientsKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(UnscaleArgs a, unscaleArgs(ctx));
  float *found = a.found->as<float>();
  STRAIT_RETURN_IF_ERROR(
      cudaStatus(cudaMemsetAsync(found, 0, sizeof(float), c.stream), "memset"));
  for (size_t i = 1; i <= a.n; ++i)
    launchUnscale(ctx.input(i)->as<float>(), ctx.output(i)->as<float>(), ctx.input(i)->numel(),
                  a.scale->as<float>(), found, c.stream);
  return Status::ok();
}

} // namespace

void addNormKernels(CudaKernelTable &t) {
  t.add("Softmax", [](CudaContext &c, KernelContext &k, int) { return softmaxKernel(c, k, false); });
  t.add("LogSoftmax", [](CudaContext &c, KernelContext &k, int) { return softmaxKernel(c, k, true); });
  t.add("SoftmaxGrad",
        [](CudaContext &c, KernelContext &k, int) { return softmaxGradKernel(c, k, false); });
  t.add("LogSoftmaxGrad",
        [](CudaContext &c, KernelContext &k, int) { return softmaxGradKernel(c, k, true); });
  t.add("LayerNormalization", layerNormKernel);
  t.add("LayerNormalizationGrad", layerNormGradKernel);
  t.add("RMSNormalization", rmsNormKernel);
  t.add("RMSNormalizationGrad", rmsNormGradKernel);
  t.add("ReduceToShape", reduceToShapeKernel);
}

void addTrainingKernels(CudaKernelTable &t) {
  t.add("SoftmaxCrossEntropyLoss", sceKernel);
  t.add("SoftmaxCrossEntropyLossGrad", sceGradKernel);
  t.add("SoftmaxCrossEntropyLossWithGrad", sceWithGradKernel);
  t.add("AdamW", adamWKernel);
  t.add("SGD", sgdKernel);
  t.add("AccumulateGrad", accumulateGradKernel);
  t.add("ClipByGlobalNorm", clipByGlobalNormKernel);
  t.add("UnscaleGradients", unscaleGradientsKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
