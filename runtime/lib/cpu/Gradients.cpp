//===- Gradients.cpp - Backward and training-step kernels -----------------===//
//
// Kernels for the compiler's training ops (include/strait/Dialect/Graph/
// GraphTrainingOps.td), same names, operand order and attributes:
// ReduceToShape, SoftmaxGrad, LogSoftmaxGrad, GeluGrad,
// LayerNormalizationGrad, BatchNormalizationTraining,
// BatchNormalizationGrad, SoftmaxCrossEntropyLossGrad, GatherGrad, SliceGrad,
// AccumulateGrad, ClipByGlobalNorm and SGD. (Conv and pooling gradients are
// in Conv.cpp, AdamW in Training.cpp.) All f32, except that
// SoftmaxCrossEntropyLossGrad also takes bf16 / f16 scores, and
// LayerNormalizationGrad's dY and AccumulateGrad's grad may be bf16 / f16
// (widened on load: the results are the f32 kernel's on Cast(to f32)).
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "SoftmaxCrossEntropy.h"

#include "strait/runtime/KernelArgs.h"

#include <cmath>
#include <cstring>

namespace strait {
namespace rt {
namespace cpu {
namespace {

StatusOr<Shape> shapeAttr(const KernelContext &ctx, const char *name) {
  if (!ctx.getAttrs().has(name))
    return ctx.error("missing attribute '" + std::string(name) + "'");
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> v, ctx.getAttrs().getInts(name, {}));
  return Shape(v.begin(), v.end());
}

/// Calls f(inputOffset, outputOffset) for every element of `in` with the
/// offset of the element of `out` it broadcasts from (serial).
template <typename F> void forEachBroadcast(const Shape &in, const Shape &out, F f) {
  std::vector<int64_t> st = broadcastStrides(out, in);
  int64_t n = numElements(in), r = static_cast<int64_t>(in.size());
  std::vector<int64_t> idx(r, 0);
  int64_t off = 0;
  for (int64_t i = 0; i < n; ++i) {
    f(i, off);
    for (int64_t d = r - 1; d >= 0; --d) {
      off += st[d];
      if (++idx[d] < in[d])
        break;
      off -= idx[d] * st[d];
      idx[d] = 0;
    }
  }
}

Status reduceToShapeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(Shape shape, shapeAttr(ctx, "shape"));
  STRAIT_ASSIGN_OR_RETURN(Shape b, broadcastShapes(ctx, shape, x->shape));
  if (b != x->shape)
    return ctx.error("shape " + shapeToString(shape) + " does not broadcast to " +
                     x->typeString());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, x->dtype));
  float *out = y->as<float>();
  const float *in = x->as<float>();
  std::fill(out, out + y->numel(), 0.0f);
  int64_t r = x->rank();
  std::vector<int64_t> st = broadcastStrides(shape, x->shape);
  if (r > 0 && st[r - 1] == 1 && x->numel() > 0) {
    // The innermost dimension is kept (bias gradients): add whole rows of X
    // into rows of Y, which vectorizes; every element of Y receives the
    // same additions in the same order as the element walk below.
    int64_t len = x->shape[r - 1];
    std::vector<int64_t> idx(r, 0);
    int64_t off = 0;
    for (int64_t i = 0; i < x->numel(); i += len) {
      float *dst = out + off;
      const float *src = in + i;
      for (int64_t j = 0; j < len; ++j)
        dst[j] += src[j];
      for (int64_t d = r - 2; d >= 0; --d) {
        off += st[d];
        if (++idx[d] < x->shape[d])
          break;
        off -= idx[d] * st[d];
        idx[d] = 0;
      }
    }
    return Status::ok();
  }
  forEachBroadcast(x->shape, shape, [&](int64_t i, int64_t o) { out[o] += in[i]; });
  return Status::ok();
}

/// [outer, len, inner] split around `axis` (opset >= 13 semantics).
struct Rows {
  int64_t outer = 1, len = 1, inner = 1;
};
StatusOr<Rows> rowsAround(const KernelContext &ctx, const Shape &s, int64_t axisAttr) {
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, s.size()));
  Rows r;
  for (int64_t d = 0; d < static_cast<int64_t>(s.size()); ++d)
    (d < axis ? r.outer : d == axis ? r.len : r.inner) *= s[d];
  return r;
}

Status softmaxGradKernel(KernelContext &ctx, bool logSoftmax) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *y, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, ctx.getAttrs().getInt("axis", -1));
  if (dy->shape != y->shape)
    return ctx.error("dY and Y shapes differ");
  STRAIT_ASSIGN_OR_RETURN(Rows r, rowsAround(ctx, y->shape, axis));
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, y->shape, y->dtype));
  const float *g = dy->as<float>(), *out = y->as<float>();
  float *res = dx->as<float>();
  parallelFor(r.outer * r.inner, 64, [&](int64_t b, int64_t e) {
    for (int64_t row = b; row < e; ++row) {
      int64_t base = (row / r.inner) * r.len * r.inner + row % r.inner;
      double sum = 0;
      for (int64_t i = 0; i < r.len; ++i) {
        int64_t k = base + i * r.inner;
        sum += logSoftmax ? g[k] : double(g[k]) * out[k];
      }
      for (int64_t i = 0; i < r.len; ++i) {
        int64_t k = base + i * r.inner;
        res[k] = logSoftmax ? static_cast<float>(g[k] - std::exp(out[k]) * sum)
                            : static_cast<float>(out[k] * (g[k] - sum));
      }
    }
  });
  return Status::ok();
}

Status geluGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(std::string approx, ctx.getAttrs().getString("approximate", "none"));
  if (approx != "none" && approx != "tanh")
    return ctx.error("approximate must be 'none' or 'tanh'");
  if (dy->shape != x->shape)
    return ctx.error("dY and X shapes differ");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  bool tanhApprox = approx == "tanh";
  parallelFor(x->numel(), 16384, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      double v = x->as<float>()[i], d;
      if (tanhApprox) {
        const double k = 0.7978845608028654, c = 0.044715;
        double t = std::tanh(k * (v + c * v * v * v));
        d = 0.5 * (1 + t) + 0.5 * v * (1 - t * t) * k * (1 + 3 * c * v * v);
      } else {
        d = 0.5 * (1 + std::erf(v * 0.7071067811865476)) +
            v * std::exp(-0.5 * v * v) * 0.3989422804014327;
      }
      dx->as<float>()[i] = static_cast<float>(dy->as<float>()[i] * d);
    }
  });
  return Status::ok();
}

/// X and Scale f32; dY f32, or bf16 / f16 (each row widened exactly into a
/// scratch row that the f32 code then reads: bit for bit the f32 kernel on
/// Cast(to f32)(dY)). dX, dScale and dB f32.
Status layerNormGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0));
  if (dy->dtype != program::DTYPE_F32 && !isLowFloat(dy->dtype))
    return ctx.unsupported("dY of dtype " + dy->typeString() + " (expected f32, bf16 or f16)");
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", -1));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, x->rank()));
  int64_t len = 1;
  for (int64_t d = axis; d < x->rank(); ++d)
    len *= x->shape[d];
  if (dy->shape != x->shape || scale->numel() != len)
    return ctx.unsupported("dY/X shapes differ or Scale is not dense over the normalized dims");
  int64_t rows = x->numel() / std::max<int64_t>(len, 1);
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * ds, ctx.requireOutput(1, scale->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * db, ctx.requireOutput(2, scale->shape, x->dtype));
  std::vector<double> dScale(len, 0), dBias(len, 0);
  const float *s = scale->as<float>();
  std::vector<float> wideRow;
  for (int64_t r = 0; r < rows; ++r) {
    const float *xi = x->as<float>() + r * len, *gi = rowAsFloat(*dy, r, len, wideRow);
    double mean = 0, var = 0;
    for (int64_t i = 0; i < len; ++i)
      mean += xi[i];
    mean /= len;
    for (int64_t i = 0; i < len; ++i)
      var += (xi[i] - mean) * (xi[i] - mean);
    double inv = 1.0 / std::sqrt(var / len + eps), sumG = 0, sumGX = 0;
    for (int64_t i = 0; i < len; ++i) {
      double xhat = (xi[i] - mean) * inv, gh = double(gi[i]) * s[i];
      sumG += gh;
      sumGX += gh * xhat;
      dScale[i] += double(gi[i]) * xhat;
      dBias[i] += gi[i];
    }
    float *out = dx->as<float>() + r * len;
    for (int64_t i = 0; i < len; ++i) {
      double xhat = (xi[i] - mean) * inv, gh = double(gi[i]) * s[i];
      out[i] = static_cast<float>(inv / len * (len * gh - sumG - xhat * sumGX));
    }
  }
  for (int64_t i = 0; i < len; ++i) {
    ds->as<float>()[i] = static_cast<float>(dScale[i]);
    db->as<float>()[i] = static_cast<float>(dBias[i]);
  }
  return Status::ok();
}

// The BatchNormalization loops below run 8 floats / 4 doubles wide (AVX2)
// where the CPU has it (target_clones, no FMA: both clones give the same bits).

/// sum += sum_j u[j] and dot += sum_j u[j] * v[j] in double, four lanes
/// each (the products of two floats are exact in double). Written with
/// vector types: GCC leaves the same loop over a double[4] scalar.
__attribute__((target_clones("avx2", "default"))) void
sumLanes(const float *u, const float *v, int64_t n, double &sum, double &dot) {
  typedef float F4 __attribute__((vector_size(16)));
  typedef double D4 __attribute__((vector_size(32)));
  D4 s = {0, 0, 0, 0}, t = {0, 0, 0, 0};
  int64_t j = 0;
  for (; j + 4 <= n; j += 4) {
    F4 a, b;
    std::memcpy(&a, u + j, sizeof a);
    std::memcpy(&b, v + j, sizeof b);
    D4 ad = __builtin_convertvector(a, D4), bd = __builtin_convertvector(b, D4);
    s += ad;
    t += ad * bd;
  }
  for (; j < n; ++j) {
    s[0] += u[j];
    t[0] += double(u[j]) * v[j];
  }
  sum += (s[0] + s[1]) + (s[2] + s[3]);
  dot += (t[0] + t[1]) + (t[2] + t[3]);
}

/// o[j] = q[j] * a + b.
__attribute__((target_clones("avx2", "default"))) void affineRow(const float *q, float a, float b,
                                                                  float *o, int64_t n) {
  for (int64_t j = 0; j < n; ++j)
    o[j] = q[j] * a + b;
}

/// o[j] = a * g[j] + b * (x[j] - mu) + d.
__attribute__((target_clones("avx2", "default"))) void
batchNormGradRow(const float *g, const float *x, float *o, int64_t n, float a, float b, float d,
                 float mu) {
  for (int64_t j = 0; j < n; ++j)
    o[j] = a * g[j] + b * (x[j] - mu) + d;
}

struct ChannelLayout {
  int64_t n, c, spatial;
};
StatusOr<ChannelLayout> channels(const KernelContext &ctx, const Tensor &x) {
  if (x.rank() < 2)
    return ctx.error("input must have rank >= 2, got " + x.typeString());
  return ChannelLayout{x.shape[0], x.shape[1], x.numel() / std::max<int64_t>(x.shape[0] * x.shape[1], 1)};
}

Status batchNormTrainingKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  const Tensor *p[4];
  for (int i = 0; i < 4; ++i) {
    STRAIT_ASSIGN_OR_RETURN(p[i], ctx.requireInput(1 + i, program::DTYPE_F32));
  }
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(float momentum, ctx.getAttrs().getFloat("momentum", 0.9f));
  STRAIT_ASSIGN_OR_RETURN(ChannelLayout l, channels(ctx, *x));
  Shape cs = {l.c};
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  Tensor *outs[4] = {nullptr, nullptr, nullptr, nullptr}; // all optional
  for (int i = 0; i < 4; ++i) {
    if (ctx.output(1 + i)) {
      STRAIT_ASSIGN_OR_RETURN(outs[i], ctx.requireOutput(1 + i, cs, x->dtype));
    }
    if (p[i]->numel() != l.c)
      return ctx.error("parameter " + std::to_string(i + 1) + " must have C entries");
  }
  auto put = [&](int i, int64_t ch, double v) {
    if (outs[i])
      outs[i]->as<float>()[ch] = static_cast<float>(v);
  };
  double count = double(l.n * l.spatial);
  parallelFor(l.c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double sum = 0, sq = 0;
      for (int64_t i = 0; i < l.n; ++i) {
        const float *q = x->as<float>() + (i * l.c + ch) * l.spatial;
        sumLanes(q, q, l.spatial, sum, sq);
      }
      double mean = sum / count, var = std::max(0.0, sq / count - mean * mean);
      double inv = 1.0 / std::sqrt(var + eps);
      float a = static_cast<float>(p[0]->as<float>()[ch] * inv);
      float b = static_cast<float>(p[1]->as<float>()[ch] - mean * a);
      for (int64_t i = 0; i < l.n; ++i) {
        int64_t k = (i * l.c + ch) * l.spatial;
        affineRow(x->as<float>() + k, a, b, y->as<float>() + k, l.spatial);
      }
      double unbiased = count > 1 ? var * count / (count - 1) : var;
      put(0, ch, mean);
      put(1, ch, inv);
      put(2, ch, momentum * p[2]->as<float>()[ch] + (1 - momentum) * mean);
      put(3, ch, momentum * p[3]->as<float>()[ch] + (1 - momentum) * unbiased);
    }
  });
  return Status::ok();
}

Status batchNormGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *mean, ctx.requireInput(3, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *inv, ctx.requireInput(4, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(ChannelLayout l, channels(ctx, *x));
  if (dy->shape != x->shape || scale->numel() != l.c || mean->numel() != l.c ||
      inv->numel() != l.c)
    return ctx.error("shapes do not fit X " + x->typeString());
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * ds, ctx.requireOutput(1, scale->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * db, ctx.requireOutput(2, scale->shape, x->dtype));
  double m = double(l.n * l.spatial);
  // Per channel: sum(g) and sum(g * x) in double lanes (exact products),
  // sum(g * xhat) = (sum(g * x) - mu * sum(g)) * is; then dX = f * (m * g -
  // sum(g) - xhat * sum(g * xhat)) in float as a * g + b * (x - mu) + d.
  parallelFor(l.c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double mu = mean->as<float>()[ch], is = inv->as<float>()[ch], sg = 0, sgxRaw = 0;
      for (int64_t i = 0; i < l.n; ++i) {
        int64_t k = (i * l.c + ch) * l.spatial;
        sumLanes(dy->as<float>() + k, x->as<float>() + k, l.spatial, sg, sgxRaw);
      }
      double sgx = (sgxRaw - mu * sg) * is;
      double f = scale->as<float>()[ch] * is / m;
      float a = static_cast<float>(f * m), b = static_cast<float>(-f * sgx * is),
            d = static_cast<float>(-f * sg), muf = static_cast<float>(mu);
      for (int64_t i = 0; i < l.n; ++i) {
        int64_t k = (i * l.c + ch) * l.spatial;
        batchNormGradRow(dy->as<float>() + k, x->as<float>() + k, dx->as<float>() + k, l.spatial,
                         a, b, d, muf);
      }
      ds->as<float>()[ch] = static_cast<float>(sgx);
      db->as<float>()[ch] = static_cast<float>(sg);
    }
  });
  return Status::ok();
}

/// dScores for scores read by `in` (widened to f32), stored by `out(i, v)`
/// from the f32 value v.
template <typename Load, typename Store>
void sceGradRows(const Tensor &dl, const std::string &red, const std::vector<int64_t> &labels,
                 const std::vector<double> &w, double scale, int64_t n, int64_t c, int64_t d,
                 Load in, Store out) {
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < d; ++j) {
      int64_t row = i * d + j;
      double g = (red == "none" ? dl.as<float>()[row] : dl.as<float>()[0]) * w[row] * scale;
      auto at = [&](int64_t k) { return (i * c + k) * d + j; };
      sceGradRow(in, at, c, sceRowStats(in, at, c), g, labels[row], out);
    }
}

/// f32 scores, or bf16 / f16 scores (an f32 dLoss as for f32 scores): each
/// 16-bit score is widened exactly, the math is the f32 kernel's, and the
/// f32 gradient is rounded once to the scores' type (nearest even), so the
/// result is Cast(to T) of the f32 kernel on Cast(to f32) scores.
Status sceGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dl, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1));
  if (x->dtype != program::DTYPE_F32 && !isLowFloat(x->dtype))
    return ctx.unsupported("scores of dtype " + x->typeString() +
                           " (expected f32, bf16 or f16)");
  STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(2));
  const Tensor *weight = ctx.input(3);
  STRAIT_ASSIGN_OR_RETURN(std::string red, ctx.getAttrs().getString("reduction", "mean"));
  bool hasIgnore = ctx.getAttrs().has("ignore_index");
  STRAIT_ASSIGN_OR_RETURN(int64_t ignore, ctx.getAttrs().getInt("ignore_index", 0));
  if (x->rank() < 2 || t->rank() != x->rank() - 1)
    return ctx.error("scores " + x->typeString() + " / labels " + t->typeString());
  int64_t n = x->shape[0], c = x->shape[1], d = x->numel() / std::max<int64_t>(n * c, 1);
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> labels, readInts(ctx, *t));
  if (red != "none" && dl->numel() != 1)
    return ctx.error("dLoss must be a scalar for reduction '" + red + "'");
  if (red == "none" && dl->numel() != n * d)
    return ctx.error("dLoss must have the labels' shape for reduction 'none'");
  if (weight && (weight->numel() != c || weight->dtype != program::DTYPE_F32))
    return ctx.error("weights must be f32 with C entries");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  std::vector<double> w(n * d);
  double weightSum = 0;
  for (int64_t i = 0; i < n * d; ++i) {
    int64_t label = labels[i];
    if (hasIgnore && label == ignore)
      continue;
    if (label < 0 || label >= c)
      return ctx.error("label " + std::to_string(label) + " outside [0, " + std::to_string(c) + ")");
    w[i] = weight ? weight->as<float>()[label] : 1.0;
    weightSum += w[i];
  }
  double scale = red == "mean" ? (weightSum == 0 ? 0.0 : 1.0 / weightSum) : 1.0;
  if (x->dtype == program::DTYPE_F32) {
    const float *xs = x->as<float>();
    float *ys = dx->as<float>();
    sceGradRows(*dl, red, labels, w, scale, n, c, d, [&](int64_t k) { return xs[k]; },
                [&](int64_t k, float v) { ys[k] = v; });
    return Status::ok();
  }
  DType low = x->dtype;
  const uint16_t *xs = x->as<uint16_t>();
  uint16_t *ys = dx->as<uint16_t>();
  sceGradRows(*dl, red, labels, w, scale, n, c, d,
              [&](int64_t k) { return lowToFloat(low, xs[k]); },
              [&](int64_t k, float v) { ys[k] = floatToLow(low, v); });
  return Status::ok();
}

Status gatherGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *ind, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(Shape ds, shapeAttr(ctx, "data_shape"));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, ds.size()));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> idx, readInts(ctx, *ind));
  int64_t outer = 1, inner = 1, len = ds[axis], n = static_cast<int64_t>(idx.size());
  for (int64_t d = 0; d < axis; ++d)
    outer *= ds[d];
  for (size_t d = axis + 1; d < ds.size(); ++d)
    inner *= ds[d];
  if (dy->numel() != outer * n * inner)
    return ctx.error("dY " + dy->typeString() + " does not match indices and data_shape");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dd, ctx.requireOutput(0, ds, program::DTYPE_F32));
  std::fill(dd->as<float>(), dd->as<float>() + dd->numel(), 0.0f);
  for (int64_t i = 0; i < n; ++i) {
    if (idx[i] < -len || idx[i] >= len)
      return ctx.error("index " + std::to_string(idx[i]) + " out of range");
    if (idx[i] < 0)
      idx[i] += len;
  }
  parallelFor(outer, 1, [&](int64_t o0, int64_t o1) { // rows of one o never collide
    for (int64_t o = o0; o < o1; ++o)
      for (int64_t i = 0; i < n; ++i) {
        float *dst = dd->as<float>() + (o * len + idx[i]) * inner;
        const float *src = dy->as<float>() + (o * n + i) * inner;
        for (int64_t k = 0; k < inner; ++k)
          dst[k] += src[k];
      }
  });
  return Status::ok();
}

Status sliceGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Shape xs, shapeAttr(ctx, "input_shape"));
  STRAIT_ASSIGN_OR_RETURN(auto starts, ctx.getAttrs().getInts("starts", {}));
  STRAIT_ASSIGN_OR_RETURN(auto ends, ctx.getAttrs().getInts("ends", {}));
  STRAIT_ASSIGN_OR_RETURN(auto axes, ctx.getAttrs().getInts("axes", {}));
  std::vector<int64_t> ones(starts.size(), 1);
  STRAIT_ASSIGN_OR_RETURN(auto steps, ctx.getAttrs().getInts("steps", ones));
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size())
    return ctx.error("starts/ends/axes/steps lengths differ");
  int64_t rank = static_cast<int64_t>(xs.size());
  std::vector<int64_t> start(rank, 0), step(rank, 1);
  Shape sliced = xs;
  for (size_t i = 0; i < axes.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(int64_t a, normalizeAxis(ctx, axes[i], rank));
    int64_t dim = xs[a], s = steps[i];
    if (s == 0)
      return ctx.error("step 0");
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      sliced[a] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      sliced[a] = b > e ? (b - e - s - 1) / -s : 0;
    }
    start[a] = b;
    step[a] = s;
  }
  if (sliced != dy->shape)
    return ctx.error("dY " + dy->typeString() + " is not the slice's shape " +
                     shapeToString(sliced));
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, xs, dy->dtype));
  std::memset(dx->data, 0, dx->byteSize());
  if (dy->numel() == 0)
    return Status::ok();
  if (rank == 0) {
    std::memcpy(dx->data, dy->data, dx->byteSize());
    return Status::ok();
  }
  // dY's rows (its last dim) go to dX's rows: one copy per row where the
  // last axis steps by 1, else one element at a time along it.
  std::vector<int64_t> st = rowMajorStrides(xs);
  size_t es = dtypeSize(dy->dtype);
  int64_t len = sliced[rank - 1], rows = dy->numel() / len;
  int64_t lastStep = step[rank - 1] * st[rank - 1];
  char *out = dx->as<char>() + start[rank - 1] * st[rank - 1] * es;
  const char *in = dy->as<char>();
  parallelFor(rows, std::max<int64_t>(1, 16384 / len), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t off = 0, rem = r;
      for (int64_t d = rank - 2; d >= 0; --d) {
        off += (start[d] + (rem % sliced[d]) * step[d]) * st[d];
        rem /= sliced[d];
      }
      const char *from = in + r * len * es;
      char *to = out + off * es;
      if (lastStep == 1) {
        std::memcpy(to, from, len * es);
        continue;
      }
      for (int64_t j = 0; j < len; ++j)
        std::memcpy(to + j * lastStep * es, from + j * es, es);
    }
  });
  return Status::ok();
}

/// total = mean over micro-batches: overwritten by micro-batch 0, added to
/// by the others (Step.micro_batch tells which). total is f32; grad f32, or
/// bf16 / f16 widened exactly on load (the f32 kernel on Cast(to f32)(grad)).
Status accumulateGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(AccumulateGradArgs a, accumulateGradArgs(ctx));
  float *total = a.total->as<float>();
  withFloatLoader(*a.grad, [&](auto g) {
    parallelFor(a.grad->numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i)
        total[i] = (a.first ? 0.0f : total[i]) + g(i) * a.scale;
    });
  });
  return Status::ok();
}

Status clipByGlobalNormKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(float maxNorm, ctx.getAttrs().getFloat("max_norm", 0));
  if (ctx.numOutputs() != ctx.numInputs() + 1 || ctx.numInputs() == 0)
    return ctx.error("needs n gradients and 1 + n outputs");
  double sq = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *g, ctx.requireInput(i, program::DTYPE_F32));
    STRAIT_RETURN_IF_ERROR(ctx.requireOutput(i + 1, g->shape, g->dtype).getStatus());
    for (int64_t k = 0; k < g->numel(); ++k)
      sq += double(g->as<float>()[k]) * g->as<float>()[k];
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * norm, ctx.requireOutput(0, {}, program::DTYPE_F32));
  double n = std::sqrt(sq);
  float f = static_cast<float>(std::min(1.0, maxNorm / (n + 1e-6)));
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor *g = ctx.input(i);
    Tensor *o = ctx.output(i + 1);
    for (int64_t k = 0; k < g->numel(); ++k)
      o->as<float>()[k] = g->as<float>()[k] * f;
  }
  norm->as<float>()[0] = static_cast<float>(n);
  return Status::ok();
}

Status sgdKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(SgdArgs a, sgdArgs(ctx));
  float rate = a.lr->as<float>()[0], mom = a.momentum, wd = a.weightDecay;
  const float *p = a.param->as<float>(), *v = a.velocity->as<float>();
  float *po = a.paramOut->as<float>(), *vo = a.velocityOut->as<float>();
  if (a.foundInf && a.foundInf->as<float>()[0] != 0) { // loss scaling: skipped
    if (po != p)
      std::memcpy(po, p, a.param->byteSize());
    if (vo != v)
      std::memcpy(vo, v, a.velocity->byteSize());
    return Status::ok();
  }
  withFloatLoader(*a.grad, [&](auto g) {
    parallelFor(a.param->numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        float gr = g(i) + wd * p[i];
        float vn = mom * v[i] + gr;
        po[i] = p[i] - rate * (a.nesterov ? gr + mom * vn : vn);
        vo[i] = vn;
      }
    });
  });
  return Status::ok();
}

} // namespace

void addGradientKernels(KernelTable &table) {
  table.add("ReduceToShape", reduceToShapeKernel);
  table.add("SoftmaxGrad", [](KernelContext &c) { return softmaxGradKernel(c, false); });
  table.add("LogSoftmaxGrad", [](KernelContext &c) { return softmaxGradKernel(c, true); });
  table.add("GeluGrad", geluGradKernel);
  table.add("LayerNormalizationGrad", layerNormGradKernel);
  table.add("BatchNormalizationTraining", batchNormTrainingKernel);
  table.add("BatchNormalizationGrad", batchNormGradKernel);
  table.add("SoftmaxCrossEntropyLossGrad", sceGradKernel);
  table.add("GatherGrad", gatherGradKernel);
  table.add("SliceGrad", sliceGradKernel);
  table.add("AccumulateGrad", accumulateGradKernel);
  table.add("ClipByGlobalNorm", clipByGlobalNormKernel);
  table.add("SGD", sgdKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
