//===- Training.cpp - Losses and optimizer updates ------------------------===//
//
// Forward losses (NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss with the
// optional log_prob output) and optimizer updates: ONNX's preview training
// ops Adagrad, Momentum and Adam, and Strait's AdamW (domain "strait",
// decoupled weight decay). Optimizer outputs may alias their inputs (the
// compiler updates parameters in place).
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "SoftmaxCrossEntropy.h"

#include "strait/runtime/KernelArgs.h"

#include "../codec/CodecLayout.h"

#include <atomic>
#include <cmath>
#include <cstring>

namespace strait {
namespace rt {
namespace cpu {
namespace {

//===----------------------------------------------------------------------===//
// Losses
//===----------------------------------------------------------------------===//

struct LossShape {
  int64_t n, c, d; // batch, classes, product of the extra dims
};

StatusOr<LossShape> lossShape(const KernelContext &ctx, const Tensor &x,
                              const Tensor &target) {
  if (x.rank() < 2 || target.rank() != x.rank() - 1 || target.shape[0] != x.shape[0])
    return ctx.error("input " + x.typeString() + " and target " +
                     target.typeString() + " do not fit [N, C, d...] / [N, d...]");
  LossShape s{x.shape[0], x.shape[1], 1};
  for (int64_t i = 2; i < x.rank(); ++i) {
    if (target.shape[i - 1] != x.shape[i])
      return ctx.error("target " + target.typeString() + " does not match input " +
                       x.typeString());
    s.d *= x.shape[i];
  }
  return s;
}

/// NLL over log-probabilities `logp` laid out [N, C, D].
template <typename T>
Status nllLoss(KernelContext &ctx, const T *logp, const LossShape &s,
               const Tensor &target, const Tensor *weight, Tensor &out,
               const Shape &noneShape) {
  STRAIT_ASSIGN_OR_RETURN(std::string reduction, ctx.getAttrs().getString("reduction", "mean"));
  bool hasIgnore = ctx.getAttrs().has("ignore_index");
  STRAIT_ASSIGN_OR_RETURN(int64_t ignore, ctx.getAttrs().getInt("ignore_index", 0));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> labels, readInts(ctx, target));
  if (weight && (weight->numel() != s.c || weight->dtype != out.dtype))
    return ctx.error("weight " + weight->typeString() + " must have C entries");
  if (reduction == "none") {
    if (out.shape != noneShape)
      return ctx.error("output is declared " + out.typeString() + ", expected " +
                       shapeToString(noneShape));
  } else if (reduction != "mean" && reduction != "sum") {
    return ctx.error("unknown reduction '" + reduction + "'");
  } else if (out.numel() != 1) {
    return ctx.error("reduced loss must be a scalar, declared " + out.typeString());
  }
  double total = 0, weightSum = 0;
  T *o = out.as<T>();
  for (int64_t n = 0; n < s.n; ++n)
    for (int64_t d = 0; d < s.d; ++d) {
      int64_t label = labels[n * s.d + d];
      double w = 0, l = 0;
      if (!(hasIgnore && label == ignore)) {
        if (label < 0 || label >= s.c)
          return ctx.error("target " + std::to_string(label) + " outside [0, " +
                           std::to_string(s.c) + ")");
        w = weight ? static_cast<double>(weight->as<T>()[label]) : 1.0;
        l = -static_cast<double>(logp[(n * s.c + label) * s.d + d]) * w;
      }
      if (reduction == "none")
        o[n * s.d + d] = static_cast<T>(l);
      total += l;
      weightSum += w;
    }
  if (reduction == "sum")
    o[0] = static_cast<T>(total);
  else if (reduction == "mean")
    o[0] = static_cast<T>(weightSum == 0 ? 0.0 : total / weightSum);
  return Status::ok();
}

Status nllKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(LossShape s, lossShape(ctx, *x, *t));
  Tensor *out = ctx.output(0);
  if (!out || out->dtype != x->dtype)
    return ctx.error("output 0 must have the input's dtype");
  if (x->dtype == program::DTYPE_F32)
    return nllLoss<float>(ctx, x->as<float>(), s, *t, ctx.input(2), *out, t->shape);
  if (x->dtype == program::DTYPE_F64)
    return nllLoss<double>(ctx, x->as<double>(), s, *t, ctx.input(2), *out, t->shape);
  return ctx.unsupported("dtype " + x->typeString());
}

/// Score loaders: the element at an index, widened to the compute type
/// (bf16 / f16 exactly, as a Cast to f32 would).
template <typename T> struct PlainScores {
  const T *p;
  T operator()(int64_t i) const { return p[i]; }
};
struct Bf16Scores {
  const uint16_t *p;
  float operator()(int64_t i) const {
    uint32_t bits = uint32_t(p[i]) << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
};
struct F16Scores {
  const uint16_t *p;
  float operator()(int64_t i) const { return codec::halfToFloat(p[i]); }
};

/// Softmax cross-entropy in T (the loss's type) over scores read by `in`.
/// bf16 / f16 scores compute exactly as f32 scores holding the same values:
/// the loss (and a log_prob output declared f32) is f32; a log_prob output
/// of the scores' 16-bit type is the f32 one rounded to nearest even.
template <typename T, typename Load>
Status runSce(KernelContext &ctx, const Tensor &x, Load in, const Tensor &t,
              const LossShape &s) {
  std::vector<T> scratch;
  T *logp;
  Tensor *lowLogp = nullptr;
  if (Tensor *lp = ctx.output(1)) {
    bool low = isLowFloat(x.dtype) && lp->dtype == x.dtype;
    STRAIT_ASSIGN_OR_RETURN(lp, ctx.requireOutput(1, x.shape, low ? x.dtype : ctx.output(0)->dtype));
    if (low) {
      lowLogp = lp;
      scratch.resize(x.numel());
      logp = scratch.data();
    } else {
      logp = lp->as<T>();
    }
  } else {
    scratch.resize(x.numel());
    logp = scratch.data();
  }
  parallelFor(s.n * s.d, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t n = r / s.d, d = r % s.d;
      auto at = [&](int64_t c) { return (n * s.c + c) * s.d + d; };
      double lse = sceRowStats(in, at, s.c).logSumExp();
      for (int64_t c = 0; c < s.c; ++c)
        logp[at(c)] = static_cast<T>(in(at(c)) - lse);
    }
  });
  if (lowLogp)
    for (int64_t i = 0; i < x.numel(); ++i)
      lowLogp->as<uint16_t>()[i] = floatToLow(x.dtype, static_cast<float>(logp[i]));
  return nllLoss<T>(ctx, logp, s, t, ctx.input(2), *ctx.output(0), t.shape);
}

/// Scores f32 or f64 (loss of that type), or bf16 / f16 (f32 loss).
Status sceKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(LossShape s, lossShape(ctx, *x, *t));
  DType lossType = isLowFloat(x->dtype) ? program::DTYPE_F32 : x->dtype;
  if (!ctx.output(0) || ctx.output(0)->dtype != lossType)
    return ctx.error("output 0 must be " + std::string(dtypeName(lossType)) + " for scores " +
                     x->typeString());
  switch (x->dtype) {
  case program::DTYPE_F32:
    return runSce<float>(ctx, *x, PlainScores<float>{x->as<float>()}, *t, s);
  case program::DTYPE_F64:
    return runSce<double>(ctx, *x, PlainScores<double>{x->as<double>()}, *t, s);
  case program::DTYPE_BF16:
    return runSce<float>(ctx, *x, Bf16Scores{x->as<uint16_t>()}, *t, s);
  case program::DTYPE_F16:
    return runSce<float>(ctx, *x, F16Scores{x->as<uint16_t>()}, *t, s);
  default:
    return ctx.unsupported("scores of dtype " + x->typeString() +
                           " (expected f32, f64, bf16 or f16)");
  }
}

/// SoftmaxCrossEntropyLossWithGrad: SoftmaxCrossEntropyLoss and
/// SoftmaxCrossEntropyLossGrad in one pass over the scores, bit for bit: each
/// row's statistics (SoftmaxCrossEntropy.h, as both kernels compute them)
/// give its loss term (the loss kernel's f32 log-probability of the label
/// times the weight) and its dScores (the gradient kernel's); the terms are
/// then reduced in row order in double, as nllLoss does.
Status sceWithGradKernel(KernelContext &ctx) {
  using Reduction = SoftmaxCrossEntropyArgs::Reduction;
  STRAIT_ASSIGN_OR_RETURN(SoftmaxCrossEntropyArgs a, softmaxCrossEntropyWithGradArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> labels, readInts(ctx, *a.labels));
  int64_t rows = a.n * a.d, c = a.c, d = a.d;
  // Row weights (0 for ignored labels) and their sum, as the gradient kernel.
  std::vector<double> w(rows, 0.0);
  std::vector<char> ignored(rows, 0);
  double weightSum = 0;
  for (int64_t r = 0; r < rows; ++r) {
    int64_t label = labels[r];
    if (a.hasIgnore && label == a.ignore) {
      ignored[r] = 1;
      continue;
    }
    if (label < 0 || label >= c)
      return ctx.error("label " + std::to_string(label) + " at row " + std::to_string(r) +
                       " outside [0, " + std::to_string(c) + ")");
    w[r] = a.weights ? a.weights->as<float>()[label] : 1.0;
    weightSum += w[r];
  }
  bool none = a.reduction == Reduction::None;
  double scale = a.reduction == Reduction::Mean ? (weightSum == 0 ? 0.0 : 1.0 / weightSum) : 1.0;
  const float *dl = a.dLoss->as<float>();
  std::vector<double> term(rows, 0.0);
  auto run = [&](auto in, auto store) {
    parallelFor(rows, 4, [&](int64_t r0, int64_t r1) {
      std::vector<double> e(c);
      for (int64_t r = r0; r < r1; ++r) {
        int64_t i = r / d, j = r % d;
        auto at = [&](int64_t k) { return (i * c + k) * d + j; };
        SceRowStats st = sceRowStatsKeep(in, at, c, e.data());
        if (!ignored[r])
          term[r] = -static_cast<double>(static_cast<float>(in(at(labels[r])) - st.logSumExp())) *
                    w[r];
        double g = (none ? dl[r] : dl[0]) * w[r] * scale;
        sceGradRowKept(at, c, st, e.data(), g, labels[r], store);
      }
    });
  };
  DType t = a.scores->dtype;
  if (t == program::DTYPE_F32) {
    const float *xs = a.scores->as<float>();
    float *ys = a.dScores->as<float>();
    run([xs](int64_t k) { return xs[k]; }, [ys](int64_t k, float v) { ys[k] = v; });
  } else {
    const uint16_t *xs = a.scores->as<uint16_t>();
    uint16_t *ys = a.dScores->as<uint16_t>();
    run([xs, t](int64_t k) { return lowToFloat(t, xs[k]); },
        [ys, t](int64_t k, float v) { ys[k] = floatToLow(t, v); });
  }
  float *loss = a.loss->as<float>();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    if (none)
      loss[r] = static_cast<float>(term[r]);
    total += term[r];
  }
  if (a.reduction == Reduction::Sum)
    loss[0] = static_cast<float>(total);
  else if (a.reduction == Reduction::Mean)
    loss[0] = static_cast<float>(weightSum == 0 ? 0.0 : total / weightSum);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Optimizers
//===----------------------------------------------------------------------===//

/// Reads the scalar learning rate (input 0) and step count (input 1) and
/// checks that the remaining inputs form `groups` groups of n tensors with
/// matching f32 shapes, and that outputs mirror them.
struct OptimizerArgs {
  float lr = 0;
  int64_t step = 0;
  size_t n = 0;
  bool skip = false; ///< loss scaling's found_inf input is nonzero
};

StatusOr<OptimizerArgs> optimizerArgs(const KernelContext &ctx, size_t groups,
                                      size_t outGroups, size_t lowGroup = kNoLowGroup,
                                      bool copyGroup = false, bool foundInf = false) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *r, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(1));
  OptimizerArgs a;
  if (r->numel() != 1 || (r->dtype != program::DTYPE_F32 && r->dtype != program::DTYPE_F64))
    return ctx.error("learning rate must be a float scalar");
  a.lr = r->dtype == program::DTYPE_F32 ? r->as<float>()[0]
                                        : static_cast<float>(r->as<double>()[0]);
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> tv, readInts(ctx, *t));
  if (tv.size() != 1)
    return ctx.error("step count must be a scalar");
  a.step = tv[0];
  const Tensor *flag = nullptr;
  STRAIT_ASSIGN_OR_RETURN(a.n, optimizerGroups(ctx, groups, outGroups, lowGroup, copyGroup,
                                               foundInf ? &flag : nullptr));
  a.skip = flag && flag->as<float>()[0] != 0;
  return a;
}

/// A skipped update (loss scaling found inf/nan): every output group keeps
/// its input (the exporter aliases them, so this copies nothing).
void keepInputs(const KernelContext &ctx, const OptimizerArgs &a, size_t outGroups,
                const size_t *inGroupOf) {
  for (size_t g = 0; g < outGroups; ++g)
    for (size_t i = 0; i < a.n; ++i) {
      const Tensor *src = ctx.input(2 + inGroupOf[g] * a.n + i);
      Tensor *dst = ctx.output(g * a.n + i);
      if (dst->data != src->data)
        std::memcpy(dst->data, src->data, src->byteSize());
    }
}

const float *in(const KernelContext &ctx, const OptimizerArgs &a, size_t group, size_t i) {
  return ctx.input(2 + group * a.n + i)->as<float>();
}
float *out(const KernelContext &ctx, const OptimizerArgs &a, size_t group, size_t i) {
  return ctx.output(group * a.n + i)->as<float>();
}

Status adagradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(OptimizerArgs a, optimizerArgs(ctx, 3, 2));
  const AttrReader &at = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(float decay, at.getFloat("decay_factor", 0));
  STRAIT_ASSIGN_OR_RETURN(float eps, at.getFloat("epsilon", 1e-6f));
  STRAIT_ASSIGN_OR_RETURN(float norm, at.getFloat("norm_coefficient", 0));
  float r = a.lr / (1 + a.step * decay);
  for (size_t i = 0; i < a.n; ++i) {
    const float *x = in(ctx, a, 0, i), *g = in(ctx, a, 1, i), *h = in(ctx, a, 2, i);
    float *xo = out(ctx, a, 0, i), *ho = out(ctx, a, 1, i);
    for (int64_t k = 0; k < ctx.input(2 + i)->numel(); ++k) {
      float gr = norm * x[k] + g[k];
      float hn = h[k] + gr * gr;
      xo[k] = x[k] - r * gr / (std::sqrt(hn) + eps);
      ho[k] = hn;
    }
  }
  return Status::ok();
}

Status momentumKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(OptimizerArgs a, optimizerArgs(ctx, 3, 2));
  const AttrReader &at = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(float alpha, at.getFloat("alpha", 0));
  STRAIT_ASSIGN_OR_RETURN(float beta, at.getFloat("beta", 0));
  STRAIT_ASSIGN_OR_RETURN(float norm, at.getFloat("norm_coefficient", 0));
  STRAIT_ASSIGN_OR_RETURN(std::string mode, at.getString("mode", "standard"));
  if (mode != "standard" && mode != "nesterov")
    return ctx.error("unknown mode '" + mode + "'");
  float b = a.step > 0 ? beta : 1.0f;
  for (size_t i = 0; i < a.n; ++i) {
    const float *x = in(ctx, a, 0, i), *g = in(ctx, a, 1, i), *v = in(ctx, a, 2, i);
    float *xo = out(ctx, a, 0, i), *vo = out(ctx, a, 1, i);
    for (int64_t k = 0; k < ctx.input(2 + i)->numel(); ++k) {
      float gr = norm * x[k] + g[k];
      float vn = alpha * v[k] + b * gr;
      xo[k] = mode == "standard" ? x[k] - a.lr * vn : x[k] - a.lr * (gr + alpha * vn);
      vo[k] = vn;
    }
  }
  return Status::ok();
}

Status adamKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(OptimizerArgs a, optimizerArgs(ctx, 4, 3));
  const AttrReader &at = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(float alpha, at.getFloat("alpha", 0.9f));
  STRAIT_ASSIGN_OR_RETURN(float beta, at.getFloat("beta", 0.999f));
  STRAIT_ASSIGN_OR_RETURN(float eps, at.getFloat("epsilon", 1e-6f));
  STRAIT_ASSIGN_OR_RETURN(float norm, at.getFloat("norm_coefficient", 0));
  STRAIT_ASSIGN_OR_RETURN(float post, at.getFloat("norm_coefficient_post", 0));
  double r = a.lr;
  if (a.step > 0)
    r = a.lr * std::sqrt(1 - std::pow(double(beta), double(a.step))) /
        (1 - std::pow(double(alpha), double(a.step)));
  for (size_t i = 0; i < a.n; ++i) {
    const float *x = in(ctx, a, 0, i), *g = in(ctx, a, 1, i);
    const float *v = in(ctx, a, 2, i), *h = in(ctx, a, 3, i);
    float *xo = out(ctx, a, 0, i), *vo = out(ctx, a, 1, i), *ho = out(ctx, a, 2, i);
    for (int64_t k = 0; k < ctx.input(2 + i)->numel(); ++k) {
      float gr = norm * x[k] + g[k];
      float vn = alpha * v[k] + (1 - alpha) * gr;
      float hn = beta * h[k] + (1 - beta) * gr * gr;
      float xn = x[k] - static_cast<float>(r) * (vn / (std::sqrt(hn) + eps));
      xo[k] = (1 - post) * xn;
      vo[k] = vn;
      ho[k] = hn;
    }
  }
  return Status::ok();
}

/// One AdamW update of elements [0, n): the scalars of the step, then the
/// arrays. The outputs may be their inputs' buffers (in place: element k is
/// read before it is written); no other overlap.
struct AdamWSpan {
  float lr, b1, b2, eps, wd, c1, c2;
  bool updateV;
};

/// The element update, shared by the f32 loop and the widening one.
template <bool UpdateV>
inline void adamWElement(const AdamWSpan &s, float gk, const float *x, const float *m,
                         const float *v, float *xo, float *mo, float *vo, int64_t k) {
  float mn = s.b1 * m[k] + (1 - s.b1) * gk;
  float vn = UpdateV ? s.b2 * v[k] + (1 - s.b2) * gk * gk : v[k];
  float update = (mn / s.c1) / (std::sqrt(vn / s.c2) + s.eps);
  xo[k] = x[k] - s.lr * (update + s.wd * x[k]);
  mo[k] = mn;
  vo[k] = vn;
}

/// The f32-gradient loop, 8 floats wide (AVX2) where the CPU has it: divide
/// and square root are correctly rounded in every width and no FMA is
/// enabled, so both clones give the scalar loop's bits. `ivdep`: the only
/// overlap (in place) is at the same index, no dependence between elements;
/// without it GCC gives up on the run-time alias checks seven arrays need.
__attribute__((target_clones("avx2", "default"))) void
adamWF32(const AdamWSpan &s, const float *g, const float *x, const float *m, const float *v,
         float *xo, float *mo, float *vo, int64_t n) {
  if (s.updateV) {
#pragma GCC ivdep
    for (int64_t k = 0; k < n; ++k)
      adamWElement<true>(s, g[k], x, m, v, xo, mo, vo, k);
  } else {
#pragma GCC ivdep
    for (int64_t k = 0; k < n; ++k)
      adamWElement<false>(s, g[k], x, m, v, xo, mo, vo, k);
  }
}

/// AdamW (Loshchilov & Hutter): inputs lr, step (1-based), X..., G..., M...,
/// V...; outputs X..., M..., V...; attributes beta1, beta2, epsilon,
/// weight_decay, freeze_variance_after (N > 0: from step N + 1 on V stays as
/// it is and its bias correction 1 - beta2^N; compressed AdamW, docs/
/// training.md). Bias-corrected moments, decoupled weight decay. G may be
/// bf16 / f16 (widened on load, as AccumulateGrad would). An optional
/// fourth output group holds 16-bit copies of the new X (entries may be
/// absent): each the new X rounded to nearest even, as Cast would give.
Status adamWKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(OptimizerArgs a, optimizerArgs(ctx, 4, 3, /*lowGroup=*/1,
                                                        /*copyGroup=*/true, /*foundInf=*/true));
  STRAIT_ASSIGN_OR_RETURN(AdamWAttrs attrs, adamWAttrs(ctx));
  if (a.skip) { // X, M, V (and X's 16-bit copy) as they were
    const size_t from[3] = {0, 2, 3};
    keepInputs(ctx, a, 3, from);
    return Status::ok();
  }
  if (a.step < 1)
    return ctx.error("AdamW step count must start at 1, got " + std::to_string(a.step));
  AdamWSpan span{a.lr,
                 attrs.beta1,
                 attrs.beta2,
                 attrs.epsilon,
                 attrs.weightDecay,
                 1 - static_cast<float>(std::pow(double(attrs.beta1), double(a.step))),
                 1 - static_cast<float>(std::pow(double(attrs.beta2),
                                                 double(attrs.varianceStep(a.step)))),
                 attrs.updatesVariance(a.step)};
  for (size_t i = 0; i < a.n; ++i) {
    const float *x = in(ctx, a, 0, i);
    const float *m = in(ctx, a, 2, i), *v = in(ctx, a, 3, i);
    float *xo = out(ctx, a, 0, i), *mo = out(ctx, a, 1, i), *vo = out(ctx, a, 2, i);
    Tensor *copy = ctx.numOutputs() == 4 * a.n ? ctx.output(3 * a.n + i) : nullptr;
    uint16_t *low = copy ? copy->as<uint16_t>() : nullptr;
    const Tensor &grad = *ctx.input(2 + a.n + i);
    int64_t count = ctx.input(2 + i)->numel();
    parallelFor(count, 16384, [&](int64_t k0, int64_t k1) {
      if (!isLowFloat(grad.dtype)) {
        adamWF32(span, grad.as<float>() + k0, x + k0, m + k0, v + k0, xo + k0, mo + k0,
                 vo + k0, k1 - k0);
      } else {
        const uint16_t *g = grad.as<uint16_t>();
        for (int64_t k = k0; k < k1; ++k) {
          float gk = lowToFloat(grad.dtype, g[k]);
          if (span.updateV)
            adamWElement<true>(span, gk, x, m, v, xo, mo, vo, k);
          else
            adamWElement<false>(span, gk, x, m, v, xo, mo, vo, k);
        }
      }
      if (low) // the new X's 16-bit copy, from the chunk still in cache
        for (int64_t k = k0; k < k1; ++k)
          low[k] = floatToLow(copy->dtype, xo[k]);
    });
  }
  return Status::ok();
}

/// Loss scaling (GradScaler's _amp_foreach_non_finite_check_and_unscale_):
/// g * (1/S) for every gradient, found_inf = 1 when any element is inf/nan.
Status unscaleGradientsKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(UnscaleArgs a, unscaleArgs(ctx));
  float inv = inverseScale(a.scale->as<float>()[0]);
  bool found = false;
  for (size_t i = 1; i <= a.n; ++i) {
    const float *g = ctx.input(i)->as<float>();
    float *o = ctx.output(i)->as<float>();
    int64_t count = ctx.input(i)->numel();
    std::atomic<bool> bad{false};
    parallelFor(count, 16384, [&](int64_t k0, int64_t k1) {
      bool local = false;
      for (int64_t k = k0; k < k1; ++k) {
        local |= !std::isfinite(g[k]);
        o[k] = g[k] * inv;
      }
      if (local)
        bad.store(true, std::memory_order_relaxed);
    });
    found |= bad.load();
  }
  a.found->as<float>()[0] = found ? 1.0f : 0.0f;
  return Status::ok();
}

} // namespace

void addTrainingKernels(KernelTable &table) {
  table.add("NegativeLogLikelihoodLoss", nllKernel);
  table.add("SoftmaxCrossEntropyLoss", sceKernel);
  table.add("SoftmaxCrossEntropyLossWithGrad", sceWithGradKernel);
  table.add("Adagrad", adagradKernel);
  table.add("Momentum", momentumKernel);
  table.add("Adam", adamKernel);
  table.add("AdamW", adamWKernel);
  table.add("UnscaleGradients", unscaleGradientsKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
