//===- Normalization.cpp - Softmax family and normalization layers --------===//
//
// Softmax, LogSoftmax, Hardmax, LayerNormalization, RMSNormalization (and
// its gradient), BatchNormalization (inference and training mode) and
// InstanceNormalization, all f32 (LayerNormalization's and
// RMSNormalization's Y also bf16 / f16: the f32 row rounded once;
// RMSNormalizationGrad's dY also bf16 / f16, widened on load), parallel over
// independent rows / channels, accumulating in double.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "RowMath.h"

#include <cmath>
#include <vector>

namespace strait {
namespace rt {
namespace cpu {
namespace {

/// Splits a shape into [outer, axisLen, inner] for a softmax-like op.
struct Split3 {
  int64_t outer = 1, len = 1, inner = 1;
};

StatusOr<Split3> softmaxSplit(const KernelContext &ctx, const Shape &shape) {
  bool legacy = ctx.opset() > 0 && ctx.opset() < 13;
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr,
                          ctx.getAttrs().getInt("axis", legacy ? 1 : -1));
  int64_t rank = static_cast<int64_t>(shape.size());
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, rank));
  Split3 s;
  for (int64_t d = 0; d < rank; ++d) {
    if (d < axis)
      s.outer *= shape[d];
    else if (d == axis || legacy)
      s.len *= shape[d];
    else
      s.inner *= shape[d];
  }
  return s;
}

enum class SoftmaxKind { Softmax, LogSoftmax, Hardmax };

Status softmaxKernel(KernelContext &ctx, SoftmaxKind kind) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Split3 s, softmaxSplit(ctx, x->shape));
  const float *in = x->as<float>();
  float *out = y->as<float>();
  if (s.inner == 1 && kind != SoftmaxKind::Hardmax) { // contiguous rows, vectorized
    parallelFor(s.outer, 16, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        const float *p = in + r * s.len;
        float *q = out + r * s.len;
        float mx = rowMax(p, s.len);
        if (kind == SoftmaxKind::LogSoftmax) {
          double sum = 0;
          for (int64_t i = 0; i < s.len; ++i)
            q[i] = expNonPositive(p[i] - mx); // scratch: q is overwritten below
          sum = rowSum(q, s.len);
          float lse = static_cast<float>(std::log(sum));
          for (int64_t i = 0; i < s.len; ++i)
            q[i] = p[i] - mx - lse;
          continue;
        }
        for (int64_t i = 0; i < s.len; ++i)
          q[i] = expNonPositive(p[i] - mx);
        float inv = static_cast<float>(1.0 / rowSum(q, s.len));
        for (int64_t i = 0; i < s.len; ++i)
          q[i] *= inv;
      }
    });
    return Status::ok();
  }
  parallelFor(s.outer * s.inner, 64, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t base = (r / s.inner) * s.len * s.inner + r % s.inner;
      auto at = [&](int64_t i) { return base + i * s.inner; };
      float mx = -INFINITY;
      int64_t arg = 0;
      for (int64_t i = 0; i < s.len; ++i)
        if (in[at(i)] > mx) {
          mx = in[at(i)];
          arg = i;
        }
      if (kind == SoftmaxKind::Hardmax) {
        for (int64_t i = 0; i < s.len; ++i)
          out[at(i)] = i == arg ? 1.0f : 0.0f;
        continue;
      }
      // exp once per element, in float (its error, ~1 ulp, is below the
      // float result's); the sum in double.
      double sum = 0;
      for (int64_t i = 0; i < s.len; ++i) {
        float e = std::exp(in[at(i)] - mx);
        if (kind == SoftmaxKind::Softmax)
          out[at(i)] = e;
        sum += e;
      }
      if (kind == SoftmaxKind::LogSoftmax) {
        float lse = static_cast<float>(std::log(sum));
        for (int64_t i = 0; i < s.len; ++i)
          out[at(i)] = in[at(i)] - mx - lse;
      } else {
        float inv = static_cast<float>(1.0 / sum);
        for (int64_t i = 0; i < s.len; ++i)
          out[at(i)] *= inv;
      }
    }
  });
  return Status::ok();
}

/// Offset into a tensor broadcast to `shape` (element strides `strides`,
/// from broadcastStrides) of the element at row-major index i of `shape`.
int64_t broadcastIndex(int64_t i, const Shape &shape, const std::vector<int64_t> &strides) {
  int64_t off = 0;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    off += (i % shape[d]) * strides[d];
    i /= shape[d];
  }
  return off;
}

/// X, Scale and B f32; Y f32, or bf16 / f16: each row is computed in f32 by
/// the same code (into a scratch row) and rounded once to nearest even, so Y
/// is Cast(to T) of the f32 kernel's Y, bit for bit.
Status layerNormKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  const Tensor *bias = ctx.input(2);
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", -1));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, x->rank()));
  DType yType = ctx.output(0) && isLowFloat(ctx.output(0)->dtype) ? ctx.output(0)->dtype
                                                                   : x->dtype;
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, yType));
  bool lowY = yType != x->dtype;
  Shape normShape(x->shape.begin() + axis, x->shape.end());
  int64_t len = numElements(normShape), rows = x->numel() / std::max<int64_t>(len, 1);
  STRAIT_ASSIGN_OR_RETURN(Shape sb, broadcastShapes(ctx, scale->shape, normShape));
  if (sb != normShape || (bias && bias->numel() != scale->numel()))
    return ctx.error("scale/bias do not match the normalized shape " +
                     shapeToString(normShape));
  Shape statShape = x->shape;
  for (int64_t d = axis; d < x->rank(); ++d)
    statShape[d] = 1;
  Tensor *meanOut = nullptr, *invOut = nullptr;
  if (ctx.output(1)) {
    STRAIT_ASSIGN_OR_RETURN(meanOut, ctx.requireOutput(1, statShape, x->dtype));
  }
  if (ctx.output(2)) {
    STRAIT_ASSIGN_OR_RETURN(invOut, ctx.requireOutput(2, statShape, x->dtype));
  }
  std::vector<int64_t> sstr = broadcastStrides(scale->shape, normShape);
  bool denseScale = scale->numel() == len;
  parallelFor(rows, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> lowRow(lowY ? len : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const float *in = x->as<float>() + r * len;
      float *out = lowY ? lowRow.data() : y->as<float>() + r * len;
      // Shifted by the first element: the sums stay small when the row's
      // mean is large against its spread.
      float shift = len > 0 ? in[0] : 0.0f;
      double mean = shift + rowSum(in, len, shift) / len;
      double var = rowSumSquaredDeviation(in, len, static_cast<float>(mean)) / len;
      double inv = 1.0 / std::sqrt(var + eps);
      if (denseScale) { // the common case, vectorized
        float m = static_cast<float>(mean), s = static_cast<float>(inv);
        const float *g = scale->as<float>();
        const float *b = bias ? bias->as<float>() : nullptr;
        if (b)
          for (int64_t i = 0; i < len; ++i)
            out[i] = (in[i] - m) * s * g[i] + b[i];
        else
          for (int64_t i = 0; i < len; ++i)
            out[i] = (in[i] - m) * s * g[i];
      }
      for (int64_t i = 0; i < len && !denseScale; ++i) {
        int64_t si = broadcastIndex(i, normShape, sstr);
        float v = static_cast<float>((in[i] - mean) * inv) * scale->as<float>()[si];
        out[i] = bias ? v + bias->as<float>()[si] : v;
      }
      if (lowY) {
        uint16_t *low = y->as<uint16_t>() + r * len;
        for (int64_t i = 0; i < len; ++i)
          low[i] = floatToLow(yType, out[i]);
      }
      if (meanOut)
        meanOut->as<float>()[r] = static_cast<float>(mean);
      if (invOut)
        invOut->as<float>()[r] = static_cast<float>(inv);
    }
  });
  return Status::ok();
}

/// Rows of an op normalized over the dims from `axis`: len elements each.
struct NormRows {
  Shape normShape;
  int64_t len = 1, rows = 1;
};

StatusOr<NormRows> normRows(const KernelContext &ctx, const Tensor &x) {
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", -1));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, x.rank()));
  NormRows r;
  r.normShape.assign(x.shape.begin() + axis, x.shape.end());
  r.len = numElements(r.normShape);
  r.rows = x.numel() / std::max<int64_t>(r.len, 1);
  return r;
}

/// 1 / sqrt(mean(p^2) + eps) over a row (f32 lanes, combined in double).
double invRms(const float *p, int64_t len, float eps) {
  return 1.0 / std::sqrt(rowSumSquaredDeviation(p, len, 0.0f) / std::max<int64_t>(len, 1) + eps);
}

/// RMSNormalization (opset 23): Y = X / sqrt(mean(X^2) + epsilon) * scale
/// over the dims from axis; scale broadcasts to those dims. X and scale f32;
/// Y f32, or bf16 / f16: each row is computed in f32 by the same code (into
/// a scratch row) and rounded once to nearest even, so Y is Cast(to T) of the
/// f32 kernel's Y, bit for bit.
Status rmsNormKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(NormRows nr, normRows(ctx, *x));
  STRAIT_ASSIGN_OR_RETURN(Shape sb, broadcastShapes(ctx, scale->shape, nr.normShape));
  if (sb != nr.normShape)
    return ctx.error("scale " + scale->typeString() +
                     " does not broadcast to the normalized shape " +
                     shapeToString(nr.normShape));
  DType yType = ctx.output(0) && isLowFloat(ctx.output(0)->dtype) ? ctx.output(0)->dtype
                                                                   : x->dtype;
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, yType));
  bool lowY = yType != x->dtype;
  // A broadcast scale is expanded once to a dense row.
  std::vector<float> dense;
  const float *g = scale->as<float>();
  if (scale->numel() != nr.len) {
    dense.resize(nr.len);
    std::vector<int64_t> sstr = broadcastStrides(scale->shape, nr.normShape);
    for (int64_t i = 0; i < nr.len; ++i)
      dense[i] = g[broadcastIndex(i, nr.normShape, sstr)];
    g = dense.data();
  }
  int64_t len = nr.len;
  parallelFor(nr.rows, 8, [&](int64_t r0, int64_t r1) {
    std::vector<float> lowRow(lowY ? len : 0);
    for (int64_t r = r0; r < r1; ++r) {
      const float *in = x->as<float>() + r * len;
      float *out = lowY ? lowRow.data() : y->as<float>() + r * len;
      float inv = static_cast<float>(invRms(in, len, eps));
      for (int64_t i = 0; i < len; ++i)
        out[i] = in[i] * inv * g[i];
      if (lowY) {
        uint16_t *low = y->as<uint16_t>() + r * len;
        for (int64_t i = 0; i < len; ++i)
          low[i] = floatToLow(yType, out[i]);
      }
    }
  });
  return Status::ok();
}

/// RMSNormalizationGrad (dY, X, scale -> dX, dScale): with r the inverse
/// RMS of a row and Xhat = X * r,
///   dX = r * (dY * scale - Xhat * sum(dY * scale * Xhat) / len),
///   dScale = sum over rows of dY * Xhat.
/// Rows go in fixed blocks (independent of the thread count), each block
/// summing its dScale in double; the blocks are then added in block order,
/// so the result is the same for any number of threads. X and scale f32; dY
/// f32, or bf16 / f16 (each row widened exactly into a scratch row that the
/// f32 code then reads: bit for bit the f32 kernel on Cast(to f32)(dY)). dX
/// and dScale f32.
Status rmsNormGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0));
  if (dy->dtype != program::DTYPE_F32 && !isLowFloat(dy->dtype))
    return ctx.unsupported("dY of dtype " + dy->typeString() + " (expected f32, bf16 or f16)");
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(NormRows nr, normRows(ctx, *x));
  if (dy->shape != x->shape)
    return ctx.error("dY " + dy->typeString() + " and X " + x->typeString() +
                     " have different shapes");
  if (scale->numel() != nr.len)
    return ctx.unsupported("scale " + scale->typeString() +
                           " is not dense over the normalized shape " +
                           shapeToString(nr.normShape));
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * ds, ctx.requireOutput(1, scale->shape, x->dtype));
  const int64_t len = nr.len, rows = nr.rows;
  const int64_t blocks = std::min<int64_t>(rows, 64);
  std::vector<double> partial(static_cast<size_t>(std::max<int64_t>(blocks, 1) * len), 0.0);
  const float *s = scale->as<float>();
  parallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
    std::vector<float> wideRow;
    for (int64_t blk = b0; blk < b1; ++blk) {
      double *acc = partial.data() + blk * len;
      for (int64_t r = blk * rows / blocks; r < (blk + 1) * rows / blocks; ++r) {
        const float *xi = x->as<float>() + r * len, *gi = rowAsFloat(*dy, r, len, wideRow);
        double inv = invRms(xi, len, eps), sumGX = 0;
        for (int64_t i = 0; i < len; ++i) {
          double xhat = xi[i] * inv;
          sumGX += double(gi[i]) * s[i] * xhat;
          acc[i] += double(gi[i]) * xhat;
        }
        double c = sumGX / len;
        float *out = dx->as<float>() + r * len;
        for (int64_t i = 0; i < len; ++i)
          out[i] = static_cast<float>(inv * (double(gi[i]) * s[i] - xi[i] * inv * c));
      }
    }
  });
  parallelFor(len, 256, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      double sum = 0;
      for (int64_t blk = 0; blk < blocks; ++blk)
        sum += partial[blk * len + i];
      ds->as<float>()[i] = static_cast<float>(sum);
    }
  });
  return Status::ok();
}

/// Mean and (population) variance per channel over N and spatial dims.
void channelStats(const Tensor &x, std::vector<double> &mean,
                  std::vector<double> &var) {
  int64_t n = x.shape[0], c = x.shape[1];
  int64_t spatial = x.numel() / std::max<int64_t>(n * c, 1);
  mean.assign(c, 0.0);
  var.assign(c, 0.0);
  parallelFor(c, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t ch = c0; ch < c1; ++ch) {
      double s = 0, sq = 0;
      for (int64_t i = 0; i < n; ++i) {
        const float *p = x.as<float>() + (i * c + ch) * spatial;
        for (int64_t j = 0; j < spatial; ++j) {
          s += p[j];
          sq += double(p[j]) * p[j];
        }
      }
      double cnt = double(n * spatial);
      mean[ch] = s / cnt;
      var[ch] = std::max(0.0, sq / cnt - mean[ch] * mean[ch]);
    }
  });
}

Status batchNormKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  const Tensor *params[4];
  for (int i = 0; i < 4; ++i) {
    STRAIT_ASSIGN_OR_RETURN(params[i], ctx.requireInput(1 + i, program::DTYPE_F32));
  }
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(float momentum, ctx.getAttrs().getFloat("momentum", 0.9f));
  STRAIT_ASSIGN_OR_RETURN(int64_t training, ctx.getAttrs().getInt("training_mode", 0));
  if (x->rank() < 2)
    return ctx.error("input must have rank >= 2, got " + x->typeString());
  int64_t n = x->shape[0], c = x->shape[1];
  for (int i = 0; i < 4; ++i)
    if (params[i]->numel() != c)
      return ctx.error("parameter " + std::to_string(i + 1) + " " +
                       params[i]->typeString() + " does not have C=" +
                       std::to_string(c) + " entries");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  std::vector<double> mean(c), var(c);
  for (int64_t ch = 0; ch < c; ++ch) {
    mean[ch] = params[2]->as<float>()[ch];
    var[ch] = params[3]->as<float>()[ch];
  }
  if (training) {
    std::vector<double> bm, bv;
    channelStats(*x, bm, bv);
    Shape cs = {c};
    if (ctx.output(1)) {
      STRAIT_ASSIGN_OR_RETURN(Tensor * rm, ctx.requireOutput(1, cs, x->dtype));
      for (int64_t ch = 0; ch < c; ++ch)
        rm->as<float>()[ch] = static_cast<float>(mean[ch] * momentum + bm[ch] * (1 - momentum));
    }
    if (ctx.output(2)) {
      STRAIT_ASSIGN_OR_RETURN(Tensor * rv, ctx.requireOutput(2, cs, x->dtype));
      for (int64_t ch = 0; ch < c; ++ch)
        rv->as<float>()[ch] = static_cast<float>(var[ch] * momentum + bv[ch] * (1 - momentum));
    }
    mean = bm;
    var = bv;
  }
  int64_t spatial = x->numel() / std::max<int64_t>(n * c, 1);
  parallelFor(n * c, 4, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      int64_t ch = pl % c;
      double inv = 1.0 / std::sqrt(var[ch] + eps);
      float a = static_cast<float>(params[0]->as<float>()[ch] * inv);
      float b = static_cast<float>(params[1]->as<float>()[ch] - mean[ch] * a);
      const float *in = x->as<float>() + pl * spatial;
      float *out = y->as<float>() + pl * spatial;
      for (int64_t j = 0; j < spatial; ++j)
        out[j] = in[j] * a + b;
    }
  });
  return Status::ok();
}

Status instanceNormKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *bias, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  if (x->rank() < 3 || scale->numel() != x->shape[1] || bias->numel() != x->shape[1])
    return ctx.error("X " + x->typeString() + " with scale " +
                     scale->typeString() + " and bias " + bias->typeString());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  int64_t c = x->shape[1], planes = x->shape[0] * c;
  int64_t spatial = x->numel() / std::max<int64_t>(planes, 1);
  parallelFor(planes, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float *in = x->as<float>() + pl * spatial;
      float *out = y->as<float>() + pl * spatial;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < spatial; ++j)
        mean += in[j];
      mean /= spatial;
      for (int64_t j = 0; j < spatial; ++j)
        var += (in[j] - mean) * (in[j] - mean);
      var /= spatial;
      double inv = 1.0 / std::sqrt(var + eps);
      float s = scale->as<float>()[pl % c], b = bias->as<float>()[pl % c];
      for (int64_t j = 0; j < spatial; ++j)
        out[j] = static_cast<float>((in[j] - mean) * inv) * s + b;
    }
  });
  return Status::ok();
}

/// GroupNormalization (opset 21: scale and bias per channel): statistics per
/// sample and group of C / num_groups channels.
Status groupNormKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *bias, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(float eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(int64_t groups, ctx.getAttrs().getInt("num_groups", 0));
  if (x->rank() < 2 || groups < 1 || x->shape[1] % groups != 0 ||
      scale->numel() != x->shape[1] || bias->numel() != x->shape[1])
    return ctx.error("X " + x->typeString() + " with " + std::to_string(groups) +
                     " groups, scale " + scale->typeString() + " and bias " +
                     bias->typeString() + " (scale and bias per channel)");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  int64_t c = x->shape[1], n = x->shape[0];
  int64_t spatial = x->numel() / std::max<int64_t>(n * c, 1);
  int64_t perGroup = (c / groups) * spatial;
  parallelFor(n * groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t gi = g0; gi < g1; ++gi) {
      const float *in = x->as<float>() + gi * perGroup;
      float *out = y->as<float>() + gi * perGroup;
      double mean = 0, var = 0;
      for (int64_t j = 0; j < perGroup; ++j)
        mean += in[j];
      mean /= perGroup;
      for (int64_t j = 0; j < perGroup; ++j)
        var += (in[j] - mean) * (in[j] - mean);
      var /= perGroup;
      double inv = 1.0 / std::sqrt(var + eps);
      int64_t firstChannel = (gi % groups) * (c / groups);
      for (int64_t j = 0; j < perGroup; ++j) {
        int64_t ch = firstChannel + j / spatial;
        out[j] = static_cast<float>((in[j] - mean) * inv) * scale->as<float>()[ch] +
                 bias->as<float>()[ch];
      }
    }
  });
  return Status::ok();
}

} // namespace

void addNormalizationKernels(KernelTable &table) {
  table.add("Softmax", [](KernelContext &ctx) {
    return softmaxKernel(ctx, SoftmaxKind::Softmax);
  });
  table.add("LogSoftmax", [](KernelContext &ctx) {
    return softmaxKernel(ctx, SoftmaxKind::LogSoftmax);
  });
  table.add("Hardmax", [](KernelContext &ctx) {
    return softmaxKernel(ctx, SoftmaxKind::Hardmax);
  });
  table.add("LayerNormalization", layerNormKernel);
  table.add("RMSNormalization", rmsNormKernel);
  table.add("RMSNormalizationGrad", rmsNormGradKernel);
  table.add("BatchNormalization", batchNormKernel);
  table.add("InstanceNormalization", instanceNormKernel);
  table.add("GroupNormalization", groupNormKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
