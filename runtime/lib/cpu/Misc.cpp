//===- Misc.cpp - Less common ONNX ops ------------------------------------===//
//
// GatherND, ScatterND, Compress, NonZero, ReverseSequence, LRN,
// MeanVarianceNormalization, window generators, QuantizeLinear and
// DequantizeLinear, DynamicQuantizeLinear, Einsum. Ops whose output size
// depends on data (Compress,
// NonZero) check it against the program's static output shape.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <map>

namespace strait {
namespace rt {
namespace cpu {
namespace {

/// Offsets into `data` of the slices GatherND / ScatterND address.
StatusOr<std::vector<int64_t>> ndOffsets(const KernelContext &ctx, const Tensor &data,
                                         const Tensor &indices, int64_t batchDims,
                                         int64_t &sliceSize, Shape &prefix) {
  int64_t q = indices.rank(), r = data.rank();
  if (q < 1 || batchDims < 0 || batchDims >= std::min(q, r))
    return ctx.error("invalid indices rank or batch_dims");
  int64_t k = indices.shape[q - 1];
  if (batchDims + k > r)
    return ctx.error("indices last dim too large for data " + data.typeString());
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> idx, readInts(ctx, indices));
  std::vector<int64_t> st = rowMajorStrides(data.shape);
  sliceSize = 1;
  for (int64_t d = batchDims + k; d < r; ++d)
    sliceSize *= data.shape[d];
  prefix.assign(indices.shape.begin(), indices.shape.end() - 1);
  int64_t tuples = numElements(prefix), perBatch = 1;
  for (int64_t d = batchDims; d < q - 1; ++d)
    perBatch *= indices.shape[d];
  int64_t batchStride = batchDims ? st[batchDims - 1] : 0;
  std::vector<int64_t> offs(tuples);
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = (t / std::max<int64_t>(perBatch, 1)) * batchStride;
    for (int64_t j = 0; j < k; ++j) {
      int64_t dim = data.shape[batchDims + j], v = idx[t * k + j];
      if (v < -dim || v >= dim)
        return ctx.error("index " + std::to_string(v) + " out of range for a dim of " +
                         std::to_string(dim));
      off += (v < 0 ? v + dim : v) * st[batchDims + j];
    }
    offs[t] = off;
  }
  return offs;
}

Status gatherNDKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *ind, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(int64_t b, ctx.getAttrs().getInt("batch_dims", 0));
  int64_t slice;
  Shape prefix;
  STRAIT_ASSIGN_OR_RETURN(auto offs, ndOffsets(ctx, *x, *ind, b, slice, prefix));
  Shape out = prefix;
  int64_t k = ind->shape.back();
  out.insert(out.end(), x->shape.begin() + b + k, x->shape.end());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  size_t bytes = slice * dtypeSize(x->dtype);
  for (size_t t = 0; t < offs.size(); ++t)
    std::memcpy(y->as<char>() + t * bytes, x->as<char>() + offs[t] * dtypeSize(x->dtype),
                bytes);
  return Status::ok();
}

Status scatterNDKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *ind, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *upd, ctx.requireInput(2, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(std::string red, ctx.getAttrs().getString("reduction", "none"));
  int64_t slice;
  Shape prefix;
  STRAIT_ASSIGN_OR_RETURN(auto offs, ndOffsets(ctx, *x, *ind, 0, slice, prefix));
  if (upd->numel() != static_cast<int64_t>(offs.size()) * slice)
    return ctx.error("updates " + upd->typeString() + " do not match the indices");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  if (y->data != x->data)
    std::memcpy(y->data, x->data, x->byteSize());
  size_t es = dtypeSize(x->dtype);
  if (red == "none") {
    for (size_t t = 0; t < offs.size(); ++t)
      std::memcpy(y->as<char>() + offs[t] * es, upd->as<char>() + t * slice * es, slice * es);
    return Status::ok();
  }
  if (x->dtype != program::DTYPE_F32 || (red != "add" && red != "mul"))
    return ctx.unsupported("reduction '" + red + "' on " + x->typeString());
  for (size_t t = 0; t < offs.size(); ++t)
    for (int64_t i = 0; i < slice; ++i) {
      float &dst = y->as<float>()[offs[t] + i];
      float u = upd->as<float>()[t * slice + i];
      dst = red == "add" ? dst + u : dst * u;
    }
  return Status::ok();
}

Status compressKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *cond, ctx.requireInput(1, program::DTYPE_BOOL));
  bool flat = !ctx.getAttrs().has("axis");
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  int64_t axis = 0, outer = 1, len = x->numel(), inner = 1;
  if (!flat) {
    STRAIT_ASSIGN_OR_RETURN(axis, normalizeAxis(ctx, axisAttr, x->rank()));
    len = x->shape[axis];
    for (int64_t d = 0; d < axis; ++d)
      outer *= x->shape[d];
    inner = x->numel() / std::max<int64_t>(outer * len, 1);
  }
  std::vector<int64_t> keep;
  for (int64_t i = 0; i < std::min(len, cond->numel()); ++i)
    if (cond->as<bool>()[i])
      keep.push_back(i);
  Shape out = flat ? Shape{int64_t(keep.size())} : x->shape;
  if (!flat)
    out[axis] = static_cast<int64_t>(keep.size());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  size_t bytes = inner * dtypeSize(x->dtype);
  char *dst = y->as<char>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i : keep) {
      std::memcpy(dst, x->as<char>() + (o * len + i) * bytes, bytes);
      dst += bytes;
    }
  return Status::ok();
}

Status nonZeroKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  size_t es = dtypeSize(x->dtype);
  std::vector<char> zero(es, 0);
  std::vector<int64_t> hits;
  for (int64_t i = 0; i < x->numel(); ++i)
    if (std::memcmp(x->as<char>() + i * es, zero.data(), es) != 0)
      hits.push_back(i);
  int64_t nnz = static_cast<int64_t>(hits.size());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, {x->rank(), nnz}, program::DTYPE_I64));
  for (int64_t j = 0; j < nnz; ++j) {
    int64_t rem = hits[j];
    for (int64_t d = x->rank() - 1; d >= 0; --d) {
      y->as<int64_t>()[d * nnz + j] = rem % x->shape[d];
      rem /= x->shape[d];
    }
  }
  return Status::ok();
}

Status reverseSequenceKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *lens, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(int64_t batchAxis, ctx.getAttrs().getInt("batch_axis", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t timeAxis, ctx.getAttrs().getInt("time_axis", 0));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> l, readInts(ctx, *lens));
  if (x->rank() < 2 || (batchAxis != 0 && batchAxis != 1) || timeAxis != 1 - batchAxis ||
      static_cast<int64_t>(l.size()) != x->shape[batchAxis])
    return ctx.error("invalid axes or sequence_lens");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  std::vector<int64_t> st = rowMajorStrides(x->shape);
  size_t bytes = st[1] * dtypeSize(x->dtype);
  for (int64_t b = 0; b < x->shape[batchAxis]; ++b)
    for (int64_t t = 0; t < x->shape[timeAxis]; ++t) {
      int64_t src = t < l[b] ? l[b] - 1 - t : t;
      int64_t dOff = batchAxis ? t * st[0] + b * st[1] : b * st[0] + t * st[1];
      int64_t sOff = batchAxis ? src * st[0] + b * st[1] : b * st[0] + src * st[1];
      std::memcpy(y->as<char>() + dOff * dtypeSize(x->dtype),
                  x->as<char>() + sOff * dtypeSize(x->dtype), bytes);
    }
  return Status::ok();
}

Status lrnKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(float alpha, ctx.getAttrs().getFloat("alpha", 1e-4f));
  STRAIT_ASSIGN_OR_RETURN(float beta, ctx.getAttrs().getFloat("beta", 0.75f));
  STRAIT_ASSIGN_OR_RETURN(float bias, ctx.getAttrs().getFloat("bias", 1.0f));
  STRAIT_ASSIGN_OR_RETURN(int64_t size, ctx.getAttrs().getInt("size", 0));
  if (x->rank() < 3 || size < 1)
    return ctx.error("needs an [N, C, ...] input and size >= 1");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  int64_t n = x->shape[0], c = x->shape[1], sp = x->numel() / (n * c);
  int64_t lo = (size - 1) / 2, hi = (size - 1) - lo; // floor / ceil halves
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t s = 0; s < sp; ++s) {
        double sq = 0;
        for (int64_t j = std::max<int64_t>(0, ch - lo); j <= std::min(c - 1, ch + hi); ++j) {
          float v = x->as<float>()[(i * c + j) * sp + s];
          sq += double(v) * v;
        }
        int64_t off = (i * c + ch) * sp + s;
        y->as<float>()[off] = static_cast<float>(
            x->as<float>()[off] / std::pow(bias + alpha / size * sq, double(beta)));
      }
  return Status::ok();
}

Status mvnKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(auto axes, ctx.getAttrs().getInts("axes", {0, 2, 3}));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  std::vector<bool> red(x->rank(), false);
  for (int64_t a : axes) {
    STRAIT_ASSIGN_OR_RETURN(int64_t ax, normalizeAxis(ctx, a, x->rank()));
    red[ax] = true;
  }
  // Group elements by their kept coordinates.
  std::vector<int64_t> st = rowMajorStrides(x->shape), group(x->numel());
  int64_t groups = 1;
  std::vector<int64_t> keptStride(x->rank(), 0);
  for (int64_t d = x->rank() - 1; d >= 0; --d)
    if (!red[d]) {
      keptStride[d] = groups;
      groups *= x->shape[d];
    }
  std::vector<double> sum(groups, 0), sq(groups, 0);
  std::vector<int64_t> cnt(groups, 0);
  for (int64_t i = 0; i < x->numel(); ++i) {
    int64_t g = 0;
    for (int64_t d = 0; d < x->rank(); ++d)
      g += ((i / st[d]) % x->shape[d]) * keptStride[d];
    group[i] = g;
    double v = x->as<float>()[i];
    sum[g] += v;
    sq[g] += v * v;
    ++cnt[g];
  }
  for (int64_t i = 0; i < x->numel(); ++i) {
    int64_t g = group[i];
    double mean = sum[g] / cnt[g], var = sq[g] / cnt[g] - mean * mean;
    y->as<float>()[i] =
        static_cast<float>((x->as<float>()[i] - mean) / (std::sqrt(std::max(var, 0.0)) + 1e-9));
  }
  return Status::ok();
}

enum class WindowKind { Hann, Hamming, Blackman };

Status windowKernel(KernelContext &ctx, WindowKind kind) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *sizeT, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(auto sv, readInts(ctx, *sizeT));
  STRAIT_ASSIGN_OR_RETURN(int64_t periodic, ctx.getAttrs().getInt("periodic", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t dt, ctx.getAttrs().getInt("output_datatype", 1));
  if (sv.size() != 1 || sv[0] < 0 || dt != program::DTYPE_F32)
    return ctx.unsupported("size must be a scalar and output_datatype f32");
  int64_t n = sv[0];
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, {n}, program::DTYPE_F32));
  double denom = periodic ? double(n) : double(n - 1);
  for (int64_t i = 0; i < n; ++i) {
    double a = 2 * M_PI * i / denom, v;
    if (kind == WindowKind::Hann)
      v = 0.5 - 0.5 * std::cos(a);
    else if (kind == WindowKind::Hamming)
      v = 25.0 / 46.0 - 21.0 / 46.0 * std::cos(a);
    else
      v = 0.42 - 0.5 * std::cos(a) + 0.08 * std::cos(2 * a);
    y->as<float>()[i] = static_cast<float>(v);
  }
  return Status::ok();
}

/// Per-element scale / zero point index for per-tensor or per-axis params.
int64_t paramIndex(int64_t i, const Tensor &x, int64_t axis, int64_t count) {
  if (count == 1)
    return 0;
  int64_t inner = 1;
  for (int64_t d = axis + 1; d < x.rank(); ++d)
    inner *= x.shape[d];
  return (i / inner) % x.shape[axis];
}

Status quantizeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  const Tensor *zp = ctx.input(2);
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 1));
  DType out = zp ? zp->dtype : program::DTYPE_U8;
  if (out != program::DTYPE_U8 && out != program::DTYPE_I8)
    return ctx.unsupported("output type " + dtypeName(out));
  int64_t axis = 0;
  if (scale->numel() > 1) {
    STRAIT_ASSIGN_OR_RETURN(axis, normalizeAxis(ctx, axisAttr, x->rank()));
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, out));
  double lo = out == program::DTYPE_U8 ? 0 : -128, hi = out == program::DTYPE_U8 ? 255 : 127;
  for (int64_t i = 0; i < x->numel(); ++i) {
    int64_t p = paramIndex(i, *x, axis, scale->numel());
    double z = !zp ? 0 : out == program::DTYPE_U8 ? zp->as<uint8_t>()[p] : zp->as<int8_t>()[p];
    double q = std::nearbyint(x->as<float>()[i] / scale->as<float>()[p]) + z;
    q = std::min(hi, std::max(lo, q));
    if (out == program::DTYPE_U8)
      y->as<uint8_t>()[i] = static_cast<uint8_t>(q);
    else
      y->as<int8_t>()[i] = static_cast<int8_t>(q);
  }
  return Status::ok();
}

Status dequantizeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(1, program::DTYPE_F32));
  const Tensor *zp = ctx.input(2);
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 1));
  int64_t axis = 0;
  if (scale->numel() > 1) {
    STRAIT_ASSIGN_OR_RETURN(axis, normalizeAxis(ctx, axisAttr, x->rank()));
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, program::DTYPE_F32));
  for (int64_t i = 0; i < x->numel(); ++i) {
    int64_t p = paramIndex(i, *x, axis, scale->numel());
    double v, z = 0;
    switch (x->dtype) {
    case program::DTYPE_U8: v = x->as<uint8_t>()[i]; if (zp) z = zp->as<uint8_t>()[p]; break;
    case program::DTYPE_I8: v = x->as<int8_t>()[i]; if (zp) z = zp->as<int8_t>()[p]; break;
    case program::DTYPE_I32: v = x->as<int32_t>()[i]; if (zp) z = zp->as<int32_t>()[p]; break;
    default: return ctx.unsupported("input type " + x->typeString());
    }
    y->as<float>()[i] = static_cast<float>((v - z) * scale->as<float>()[p]);
  }
  return Status::ok();
}

Status dynamicQuantizeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, program::DTYPE_U8));
  STRAIT_ASSIGN_OR_RETURN(Tensor * scaleOut, ctx.requireOutput(1, {}, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(Tensor * zpOut, ctx.requireOutput(2, {}, program::DTYPE_U8));
  float lo = 0, hi = 0;
  for (int64_t i = 0; i < x->numel(); ++i) {
    lo = std::min(lo, x->as<float>()[i]);
    hi = std::max(hi, x->as<float>()[i]);
  }
  float scale = (hi - lo) / 255.0f;
  float zp = scale == 0 ? 0 : std::min(255.0f, std::max(0.0f, std::nearbyint(-lo / scale)));
  for (int64_t i = 0; i < x->numel(); ++i) {
    float q = scale == 0 ? zp : std::nearbyint(x->as<float>()[i] / scale) + zp;
    y->as<uint8_t>()[i] = static_cast<uint8_t>(std::min(255.0f, std::max(0.0f, q)));
  }
  scaleOut->as<float>()[0] = scale;
  zpOut->as<uint8_t>()[0] = static_cast<uint8_t>(zp);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Einsum: a direct loop over all index letters (correct for every equation,
// including diagonals, ellipses and implicit outputs; not a fast path).
//===----------------------------------------------------------------------===//

struct EinsumPlan {
  std::vector<std::string> terms; // per operand, ellipsis expanded to letters
  std::string output;
  std::map<char, int64_t> sizes;
};

StatusOr<EinsumPlan> planEinsum(const KernelContext &ctx, std::string eq) {
  eq.erase(std::remove(eq.begin(), eq.end(), ' '), eq.end());
  size_t arrow = eq.find("->");
  std::string lhs = eq.substr(0, arrow);
  EinsumPlan p;
  std::vector<std::string> raw;
  for (size_t start = 0;;) {
    size_t comma = lhs.find(',', start);
    raw.push_back(lhs.substr(start, comma - start));
    if (comma == std::string::npos)
      break;
    start = comma + 1;
  }
  if (raw.size() != ctx.numInputs())
    return ctx.error("equation has " + std::to_string(raw.size()) + " operands, kernel has " +
                     std::to_string(ctx.numInputs()));
  const std::string ellipsisLetters = "ABCDEFGHIJKLMNOPQRSTUVWXYZ";
  int64_t ellRank = 0;
  for (size_t i = 0; i < raw.size(); ++i) {
    size_t dots = raw[i].find("...");
    int64_t explicitDims = static_cast<int64_t>(raw[i].size()) - (dots == std::string::npos ? 0 : 3);
    if (dots != std::string::npos)
      ellRank = std::max(ellRank, ctx.input(i)->rank() - explicitDims);
  }
  std::string ell = ellipsisLetters.substr(0, ellRank);
  for (size_t i = 0; i < raw.size(); ++i) {
    const Tensor *t = ctx.input(i);
    std::string term = raw[i];
    size_t dots = term.find("...");
    if (dots != std::string::npos) {
      int64_t mine = t->rank() - static_cast<int64_t>(term.size() - 3);
      term.replace(dots, 3, ell.substr(ellRank - mine));
    }
    if (static_cast<int64_t>(term.size()) != t->rank())
      return ctx.error("term '" + raw[i] + "' does not match " + t->typeString());
    for (size_t d = 0; d < term.size(); ++d) {
      int64_t &size = p.sizes[term[d]];
      if (size > 1 && t->shape[d] != 1 && t->shape[d] != size)
        return ctx.error("dimension '" + std::string(1, term[d]) + "' sizes differ");
      size = std::max(size, t->shape[d]);
    }
    p.terms.push_back(term);
  }
  if (arrow != std::string::npos) {
    p.output = eq.substr(arrow + 2);
    size_t dots = p.output.find("...");
    if (dots != std::string::npos)
      p.output.replace(dots, 3, ell);
  } else {
    std::map<char, int> count;
    for (const auto &t : p.terms)
      for (char c : t)
        ++count[c];
    p.output = ell;
    for (const auto &e : count)
      if (e.second == 1 && ell.find(e.first) == std::string::npos)
        p.output += e.first;
  }
  for (char c : p.output)
    if (!p.sizes.count(c))
      return ctx.error("output letter '" + std::string(1, c) + "' not in any operand");
  return p;
}

template <typename T> Status runEinsum(KernelContext &ctx, const EinsumPlan &p) {
  std::string letters = p.output;
  for (const auto &e : p.sizes)
    if (letters.find(e.first) == std::string::npos)
      letters += e.first;
  Shape outShape;
  for (char c : p.output)
    outShape.push_back(p.sizes.at(c));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, outShape, ctx.input(0)->dtype));
  size_t nl = letters.size(), nOps = p.terms.size();
  std::vector<int64_t> size(nl);
  std::vector<std::vector<int64_t>> stride(nOps, std::vector<int64_t>(nl, 0));
  for (size_t l = 0; l < nl; ++l)
    size[l] = p.sizes.at(letters[l]);
  for (size_t o = 0; o < nOps; ++o) {
    const Tensor *t = ctx.input(o);
    std::vector<int64_t> st = rowMajorStrides(t->shape);
    for (size_t d = 0; d < p.terms[o].size(); ++d)
      if (t->shape[d] != 1)
        stride[o][letters.find(p.terms[o][d])] += st[d];
  }
  int64_t outCount = numElements(outShape), inner = 1;
  for (size_t l = p.output.size(); l < nl; ++l)
    inner *= size[l];
  std::vector<int64_t> idx(nl, 0), off(nOps, 0);
  T *out = y->as<T>();
  for (int64_t i = 0; i < outCount; ++i) {
    double acc = 0;
    for (int64_t j = 0; j < inner; ++j) {
      double prod = 1;
      for (size_t o = 0; o < nOps; ++o)
        prod *= ctx.input(o)->as<T>()[off[o]];
      acc += prod;
      for (int64_t l = static_cast<int64_t>(nl) - 1; l >= 0; --l) { // odometer
        for (size_t o = 0; o < nOps; ++o)
          off[o] += stride[o][l];
        if (++idx[l] < size[l])
          break;
        for (size_t o = 0; o < nOps; ++o)
          off[o] -= idx[l] * stride[o][l];
        idx[l] = 0;
      }
    }
    out[i] = static_cast<T>(acc);
  }
  return Status::ok();
}

Status einsumKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(std::string eq, ctx.getAttrs().getString("equation", ""));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
  for (size_t i = 1; i < ctx.numInputs(); ++i)
    STRAIT_RETURN_IF_ERROR(ctx.requireInput(i, a->dtype).getStatus());
  STRAIT_ASSIGN_OR_RETURN(EinsumPlan p, planEinsum(ctx, eq));
  if (a->dtype == program::DTYPE_F32)
    return runEinsum<float>(ctx, p);
  if (a->dtype == program::DTYPE_F64)
    return runEinsum<double>(ctx, p);
  return ctx.unsupported("dtype " + a->typeString());
}

/// Det: one determinant per trailing [M, M] matrix, LU with partial
/// pivoting in double.
template <typename T> void determinants(const Tensor &x, Tensor &y, int64_t m) {
  int64_t count = y.numel();
  const T *in = x.as<T>();
  T *out = y.as<T>();
  std::vector<double> a(m * m);
  for (int64_t b = 0; b < count; ++b) {
    for (int64_t i = 0; i < m * m; ++i)
      a[i] = in[b * m * m + i];
    double det = 1.0;
    for (int64_t c = 0; c < m && det != 0.0; ++c) {
      int64_t p = c;
      for (int64_t r = c + 1; r < m; ++r)
        if (std::fabs(a[r * m + c]) > std::fabs(a[p * m + c]))
          p = r;
      if (a[p * m + c] == 0.0) {
        det = 0.0;
        break;
      }
      if (p != c) {
        for (int64_t k = 0; k < m; ++k)
          std::swap(a[p * m + k], a[c * m + k]);
        det = -det;
      }
      det *= a[c * m + c];
      for (int64_t r = c + 1; r < m; ++r) {
        double f = a[r * m + c] / a[c * m + c];
        for (int64_t k = c + 1; k < m; ++k)
          a[r * m + k] -= f * a[c * m + k];
      }
    }
    out[b] = static_cast<T>(det);
  }
}

Status detKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  if (x->shape.size() < 2 || x->shape.back() != x->shape[x->shape.size() - 2])
    return ctx.error("X must be [..., M, M], got " + x->typeString());
  Shape batch(x->shape.begin(), x->shape.end() - 2);
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, batch, x->dtype));
  int64_t m = x->shape.back();
  if (x->dtype == program::DTYPE_F32)
    determinants<float>(*x, *y, m);
  else if (x->dtype == program::DTYPE_F64)
    determinants<double>(*x, *y, m);
  else
    return ctx.unsupported("dtype " + x->typeString());
  return Status::ok();
}

/// RoiAlign (ONNX opset 16, the reference's sampling): per ROI and bin, the
/// average or maximum of bilinear samples on a grid, positions in double.
template <typename T>
void roiAlign(const Tensor &x, const float *rois, const int64_t *batch, Tensor &y, bool maxMode,
              bool halfPixel, int64_t oh, int64_t ow, int64_t ratio, double scale) {
  int64_t nr = y.shape[0], c = x.shape[1], h = x.shape[2], w = x.shape[3];
  const T *in = x.as<T>();
  T *out = y.as<T>();
  for (int64_t r = 0; r < nr; ++r) {
    double off = halfPixel ? 0.5 : 0.0;
    double sw = rois[r * 4] * scale - off, sh = rois[r * 4 + 1] * scale - off;
    double rw = rois[r * 4 + 2] * scale - off - sw, rh = rois[r * 4 + 3] * scale - off - sh;
    if (!halfPixel)
      rw = std::max(rw, 1.0), rh = std::max(rh, 1.0);
    double bh = rh / oh, bw = rw / ow;
    int64_t gh = ratio > 0 ? ratio : (int64_t)std::ceil(rh / oh);
    int64_t gw = ratio > 0 ? ratio : (int64_t)std::ceil(rw / ow);
    double count = std::max<int64_t>(gh * gw, 1);
    for (int64_t ch = 0; ch < c; ++ch) {
      const T *plane = in + (batch[r] * c + ch) * h * w;
      for (int64_t ph = 0; ph < oh; ++ph)
        for (int64_t pw = 0; pw < ow; ++pw) {
          double acc = 0.0;
          bool first = true;
          for (int64_t iy = 0; iy < gh; ++iy)
            for (int64_t ix = 0; ix < gw; ++ix) {
              double yy = sh + ph * bh + (iy + 0.5) * bh / gh;
              double xx = sw + pw * bw + (ix + 0.5) * bw / gw;
              double v[4] = {0, 0, 0, 0};
              if (!(yy < -1.0 || yy > h || xx < -1.0 || xx > w)) {
                yy = std::max(yy, 0.0), xx = std::max(xx, 0.0);
                int64_t yl = (int64_t)yy, xl = (int64_t)xx, yh, xh;
                if (yl >= h - 1)
                  yh = yl = h - 1, yy = yl;
                else
                  yh = yl + 1;
                if (xl >= w - 1)
                  xh = xl = w - 1, xx = xl;
                else
                  xh = xl + 1;
                double ly = yy - yl, lx = xx - xl, hy = 1.0 - ly, hx = 1.0 - lx;
                v[0] = hy * hx * plane[yl * w + xl];
                v[1] = hy * lx * plane[yl * w + xh];
                v[2] = ly * hx * plane[yh * w + xl];
                v[3] = ly * lx * plane[yh * w + xh];
              }
              if (!maxMode) {
                acc += v[0] + v[1] + v[2] + v[3];
              } else {
                double m = std::max(std::max(v[0], v[1]), std::max(v[2], v[3]));
                acc = first ? m : std::max(acc, m);
                first = false;
              }
            }
          out[((r * c + ch) * oh + ph) * ow + pw] = static_cast<T>(maxMode ? acc : acc / count);
        }
    }
  }
}

Status roiAlignKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *rois, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *idx, ctx.requireInput(2, program::DTYPE_I64));
  STRAIT_ASSIGN_OR_RETURN(int64_t maxMode, ctx.getAttrs().getInt("max_mode", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t half, ctx.getAttrs().getInt("half_pixel", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t oh, ctx.getAttrs().getInt("output_height", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t ow, ctx.getAttrs().getInt("output_width", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t ratio, ctx.getAttrs().getInt("sampling_ratio", 0));
  STRAIT_ASSIGN_OR_RETURN(float scale, ctx.getAttrs().getFloat("spatial_scale", 1.0f));
  if (x->shape.size() != 4 || rois->shape.size() != 2 || rois->shape[1] != 4 ||
      idx->shape.size() != 1 || idx->shape[0] != rois->shape[0] || oh <= 0 || ow <= 0)
    return ctx.error("needs X [N, C, H, W], rois [R, 4], batch_indices [R] and positive output "
                     "sizes, got " + x->typeString() + ", " + rois->typeString() + ", " +
                     idx->typeString());
  for (int64_t r = 0; r < idx->shape[0]; ++r)
    if (idx->as<int64_t>()[r] < 0 || idx->as<int64_t>()[r] >= x->shape[0])
      return ctx.error("batch_indices[" + std::to_string(r) + "] = " +
                       std::to_string(idx->as<int64_t>()[r]) + " is outside the batch");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y,
                          ctx.requireOutput(0, {rois->shape[0], x->shape[1], oh, ow}, x->dtype));
  if (x->dtype == program::DTYPE_F32)
    roiAlign<float>(*x, rois->as<float>(), idx->as<int64_t>(), *y, maxMode, half, oh, ow, ratio,
                    scale);
  else if (x->dtype == program::DTYPE_F64)
    roiAlign<double>(*x, rois->as<float>(), idx->as<int64_t>(), *y, maxMode, half, oh, ow, ratio,
                     scale);
  else
    return ctx.unsupported("dtype " + x->typeString());
  return Status::ok();
}

} // namespace

void addMiscKernels(KernelTable &table) {
  table.add("RoiAlign", roiAlignKernel);
  table.add("Det", detKernel);
  table.add("DynamicQuantizeLinear", dynamicQuantizeKernel);
  table.add("Einsum", einsumKernel);
  table.add("GatherND", gatherNDKernel);
  table.add("ScatterND", scatterNDKernel);
  table.add("Compress", compressKernel);
  table.add("NonZero", nonZeroKernel);
  table.add("ReverseSequence", reverseSequenceKernel);
  table.add("LRN", lrnKernel);
  table.add("MeanVarianceNormalization", mvnKernel);
  table.add("HannWindow", [](KernelContext &c) { return windowKernel(c, WindowKind::Hann); });
  table.add("HammingWindow",
            [](KernelContext &c) { return windowKernel(c, WindowKind::Hamming); });
  table.add("BlackmanWindow",
            [](KernelContext &c) { return windowKernel(c, WindowKind::Blackman); });
  table.add("QuantizeLinear", quantizeKernel);
  table.add("DequantizeLinear", dequantizeKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
