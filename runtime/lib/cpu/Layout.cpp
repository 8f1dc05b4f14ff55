//===- Layout.cpp - Slice, Expand, Tile, Pad, Cast, Clip ------------------===//
//
// More data-movement kernels (see DataMovement.cpp), the dtype conversion
// Cast and the clamp Clip.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include <cmath>
#include <cstring>
#include <limits>

namespace strait {
namespace rt {
namespace cpu {
namespace {

StatusOr<std::vector<int64_t>> intsInputOrAttr(const KernelContext &ctx,
                                               size_t input, const char *attr,
                                               std::vector<int64_t> dflt) {
  if (const Tensor *t = ctx.input(input))
    return readInts(ctx, *t);
  return ctx.getAttrs().getInts(attr, dflt);
}

Status sliceKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  int64_t rank = x->rank();
  STRAIT_ASSIGN_OR_RETURN(auto starts, intsInputOrAttr(ctx, 1, "starts", {}));
  STRAIT_ASSIGN_OR_RETURN(auto ends, intsInputOrAttr(ctx, 2, "ends", {}));
  std::vector<int64_t> allAxes;
  for (size_t i = 0; i < starts.size(); ++i)
    allAxes.push_back(static_cast<int64_t>(i));
  STRAIT_ASSIGN_OR_RETURN(auto axes, intsInputOrAttr(ctx, 3, "axes", allAxes));
  std::vector<int64_t> ones(starts.size(), 1);
  STRAIT_ASSIGN_OR_RETURN(auto steps, intsInputOrAttr(ctx, 4, "steps", ones));
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return ctx.error("starts/ends/axes/steps lengths differ");
  std::vector<int64_t> start(rank, 0), step(rank, 1);
  Shape out = x->shape;
  for (size_t i = 0; i < axes.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(int64_t a, normalizeAxis(ctx, axes[i], rank));
    int64_t dim = x->shape[a], s = steps[i];
    if (s == 0)
      return ctx.error("step 0 on axis " + std::to_string(a));
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      out[a] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      out[a] = b > e ? (b - e - s - 1) / -s : 0;
    }
    start[a] = b;
    step[a] = s;
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  std::vector<int64_t> inStrides = rowMajorStrides(x->shape), strides(rank);
  int64_t base = 0;
  for (int64_t d = 0; d < rank; ++d) {
    base += start[d] * inStrides[d];
    strides[d] = inStrides[d] * step[d];
  }
  if (y->numel())
    stridedCopyBytes(x->as<char>(), base, strides, out, y->as<char>(),
                     dtypeSize(x->dtype));
  return Status::ok();
}

Status expandKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *s, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(Shape shape, readInts(ctx, *s));
  STRAIT_ASSIGN_OR_RETURN(Shape out, broadcastShapes(ctx, x->shape, shape));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  stridedCopyBytes(x->as<char>(), 0, broadcastStrides(x->shape, out), out,
                   y->as<char>(), dtypeSize(x->dtype));
  return Status::ok();
}

/// Visits every output element with its multi-index; used by Tile and Pad.
template <typename F> void forEachIndex(const Shape &out, const F &f) {
  int64_t n = numElements(out), r = static_cast<int64_t>(out.size());
  parallelFor(n, 4096, [&](int64_t b, int64_t e) {
    std::vector<int64_t> idx(r);
    for (int64_t i = b; i < e; ++i) {
      int64_t rem = i;
      for (int64_t d = r - 1; d >= 0; --d) {
        idx[d] = rem % out[d];
        rem /= out[d];
      }
      f(i, idx);
    }
  });
}

Status tileKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *r, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> reps, readInts(ctx, *r));
  if (static_cast<int64_t>(reps.size()) != x->rank())
    return ctx.error("repeats has " + std::to_string(reps.size()) +
                     " entries for " + x->typeString());
  Shape out = x->shape;
  for (size_t d = 0; d < reps.size(); ++d)
    out[d] *= reps[d];
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  if (y->numel() == 0)
    return Status::ok();
  // Output dim d of size reps[d] * n[d] is the pair (copy k, index j) of
  // row-major dims [reps[d], n[d]]: a strided copy over [r0, n0, r1, n1, ...]
  // with stride 0 for the copies (whole rows at a time, as Expand).
  std::vector<int64_t> st = rowMajorStrides(x->shape), strides;
  Shape view;
  for (size_t d = 0; d < reps.size(); ++d) {
    view.insert(view.end(), {reps[d], x->shape[d]});
    strides.insert(strides.end(), {0, st[d]});
  }
  stridedCopyBytes(x->as<char>(), 0, strides, view, y->as<char>(), dtypeSize(x->dtype));
  return Status::ok();
}

Status padKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  int64_t rank = x->rank();
  STRAIT_ASSIGN_OR_RETURN(auto pads, intsInputOrAttr(ctx, 1, "pads", {}));
  STRAIT_ASSIGN_OR_RETURN(std::string mode, ctx.getAttrs().getString("mode", "constant"));
  if (ctx.input(3))
    return ctx.unsupported("the axes input");
  if (static_cast<int64_t>(pads.size()) != 2 * rank)
    return ctx.error("pads has " + std::to_string(pads.size()) +
                     " entries for " + x->typeString());
  if (mode != "constant" && mode != "reflect" && mode != "edge")
    return ctx.unsupported("mode '" + mode + "'");
  Shape out = x->shape;
  for (int64_t d = 0; d < rank; ++d)
    out[d] += pads[d] + pads[d + rank];
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  size_t es = dtypeSize(x->dtype);
  std::vector<char> fill(es, 0);
  if (const Tensor *cv = ctx.input(2)) {
    if (cv->dtype != x->dtype)
      return ctx.error("constant_value type differs from the input");
    std::memcpy(fill.data(), cv->data, es);
  } else if (x->dtype == program::DTYPE_F32) {
    STRAIT_ASSIGN_OR_RETURN(float v, ctx.getAttrs().getFloat("value", 0.0f));
    std::memcpy(fill.data(), &v, es);
  }
  std::vector<int64_t> st = rowMajorStrides(x->shape);
  forEachIndex(out, [&](int64_t i, const std::vector<int64_t> &idx) {
    int64_t off = 0;
    for (int64_t d = 0; d < rank; ++d) {
      int64_t c = idx[d] - pads[d], n = x->shape[d];
      if (c < 0 || c >= n) {
        if (mode == "constant" || n == 0) {
          std::memcpy(y->as<char>() + i * es, fill.data(), es);
          return;
        }
        if (mode == "edge")
          c = c < 0 ? 0 : n - 1;
        else { // reflect
          int64_t period = 2 * (n - 1);
          c = period ? ((c % period) + period) % period : 0;
          if (c >= n)
            c = period - c;
        }
      }
      off += c * st[d];
    }
    std::memcpy(y->as<char>() + i * es, x->as<char>() + off * es, es);
  });
  return Status::ok();
}

Status depthSpaceKernel(KernelContext &ctx, bool toSpace) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t b, ctx.getAttrs().getInt("blocksize", 0));
  STRAIT_ASSIGN_OR_RETURN(std::string mode, ctx.getAttrs().getString("mode", "DCR"));
  if (x->rank() != 4 || b <= 0)
    return ctx.error("needs a 4-D input and blocksize > 0");
  int64_t n = x->shape[0], c = x->shape[1], h = x->shape[2], w = x->shape[3];
  // Express both ops as a 6-D transpose of a reshaped input.
  Shape in6, perm;
  if (toSpace) {
    if (c % (b * b))
      return ctx.error("channels not divisible by blocksize^2");
    int64_t cc = c / (b * b);
    if (mode == "DCR") {
      in6 = {n, b, b, cc, h, w};
      perm = {0, 3, 4, 1, 5, 2};
    } else {
      in6 = {n, cc, b, b, h, w};
      perm = {0, 1, 4, 2, 5, 3};
    }
  } else {
    if (h % b || w % b)
      return ctx.error("spatial dims not divisible by blocksize");
    in6 = {n, c, h / b, b, w / b, b};
    perm = {0, 3, 5, 1, 2, 4};
  }
  Shape out = toSpace ? Shape{n, c / (b * b), h * b, w * b}
                      : Shape{n, c * b * b, h / b, w / b};
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  std::vector<int64_t> st6 = rowMajorStrides(in6), strides;
  Shape out6;
  for (int64_t p : perm) {
    out6.push_back(in6[p]);
    strides.push_back(st6[p]);
  }
  stridedCopyBytes(x->as<char>(), 0, strides, out6, y->as<char>(), dtypeSize(x->dtype));
  return Status::ok();
}

template <typename From, typename To> void convert(const Tensor &x, Tensor &y) {
  const From *in = x.as<From>();
  To *out = y.as<To>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    if constexpr (std::is_same<To, bool>::value)
      out[i] = in[i] != From(0);
    else if constexpr (std::is_floating_point<From>::value &&
                       !std::is_floating_point<To>::value)
      out[i] = std::isfinite(in[i]) ? static_cast<To>(in[i]) : To(0);
    else
      out[i] = static_cast<To>(in[i]);
  }
}

template <typename From> bool convertFrom(const Tensor &x, Tensor &y) {
#define STRAIT_CAST_TO(T)                                                      \
  convert<From, T>(x, y);                                                      \
  return true;
  STRAIT_DISPATCH_NUMERIC(y.dtype, STRAIT_CAST_TO)
  if (y.dtype == program::DTYPE_BOOL) {
    STRAIT_CAST_TO(bool)
  }
#undef STRAIT_CAST_TO
  return false;
}

bool convertAny(const Tensor &x, Tensor &y) {
#define STRAIT_CAST_ANY(T) return convertFrom<T>(x, y);
  STRAIT_DISPATCH_NUMERIC(x.dtype, STRAIT_CAST_ANY)
#undef STRAIT_CAST_ANY
  if (x.dtype == program::DTYPE_BOOL)
    return convertFrom<bool>(x, y);
  return false;
}

Status castViaF32(KernelContext &ctx, const Tensor &x, Tensor &y) {
  OwnedTensor mid(program::DTYPE_F32, x.shape);
  bool ok = true;
  if (isLowFloat(x.dtype)) {
    for (int64_t i = 0; i < x.numel(); ++i)
      mid.as<float>()[i] = lowToFloat(x.dtype, x.as<uint16_t>()[i]);
  } else {
    ok = convertAny(x, mid.tensor);
  }
  if (isLowFloat(y.dtype)) {
    for (int64_t i = 0; ok && i < x.numel(); ++i)
      y.as<uint16_t>()[i] = floatToLow(y.dtype, mid.as<float>()[i]);
  } else {
    ok = ok && convertFrom<float>(mid.tensor, y);
  }
  if (!ok)
    return ctx.unsupported("cast " + x.typeString() + " to " + y.typeString());
  return Status::ok();
}

Status castTo(KernelContext &ctx, const Tensor *x, int64_t to) {
  if (!program::DType_IsValid(static_cast<int>(to)) ||
      dtypeSize(static_cast<DType>(to)) == 0)
    return ctx.unsupported("target type " + std::to_string(to));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape,
                                                        static_cast<DType>(to)));
  // f16 and bf16 go through f32 (exact for every 16-bit float value).
  if (x->dtype == program::DTYPE_F16 || y->dtype == program::DTYPE_F16 ||
      x->dtype == program::DTYPE_BF16 || y->dtype == program::DTYPE_BF16)
    return castViaF32(ctx, *x, *y);
  bool done = false;
#define STRAIT_CAST_FROM(T)                                                    \
  done = convertFrom<T>(*x, *y);                                               \
  break;
  STRAIT_DISPATCH_NUMERIC(x->dtype, STRAIT_CAST_FROM)
  if (x->dtype == program::DTYPE_BOOL)
    done = convertFrom<bool>(*x, *y);
#undef STRAIT_CAST_FROM
  if (!done)
    return ctx.unsupported("cast " + x->typeString() + " to " + y->typeString());
  return Status::ok();
}

Status castKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t to, ctx.getAttrs().getInt("to", 0));
  return castTo(ctx, x, to);
}

Status castLikeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *like, ctx.requireInput(1));
  return castTo(ctx, x, like->dtype);
}

template <typename T>
Status runClip(KernelContext &ctx, const Tensor &x, Tensor &y) {
  T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  if (const Tensor *m = ctx.input(1))
    lo = m->as<T>()[0];
  else if (ctx.getAttrs().has("min")) {
    STRAIT_ASSIGN_OR_RETURN(float v, ctx.getAttrs().getFloat("min", 0));
    lo = static_cast<T>(v);
  }
  if (const Tensor *m = ctx.input(2))
    hi = m->as<T>()[0];
  else if (ctx.getAttrs().has("max")) {
    STRAIT_ASSIGN_OR_RETURN(float v, ctx.getAttrs().getFloat("max", 0));
    hi = static_cast<T>(v);
  }
  const T *in = x.as<T>();
  T *out = y.as<T>();
  for (int64_t i = 0; i < x.numel(); ++i)
    out[i] = std::min(hi, std::max(lo, in[i]));
  return Status::ok();
}

Status clipKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  for (size_t i = 1; i < 3; ++i)
    if (ctx.input(i) && (ctx.input(i)->dtype != x->dtype || ctx.input(i)->numel() != 1))
      return ctx.error("min/max must be scalars of the input type");
#define STRAIT_CLIP_CASE(T) return runClip<T>(ctx, *x, *y);
  STRAIT_DISPATCH_NUMERIC(x->dtype, STRAIT_CLIP_CASE)
#undef STRAIT_CLIP_CASE
  return ctx.unsupported("dtype " + x->typeString());
}

} // namespace

void addLayoutKernels(KernelTable &table) {
  table.add("Slice", sliceKernel);
  table.add("Expand", expandKernel);
  table.add("Tile", tileKernel);
  table.add("Pad", padKernel);
  table.add("DepthToSpace",
            [](KernelContext &ctx) { return depthSpaceKernel(ctx, true); });
  table.add("SpaceToDepth",
            [](KernelContext &ctx) { return depthSpaceKernel(ctx, false); });
  table.add("Cast", castKernel);
  table.add("CastLike", castLikeKernel);
  table.add("Clip", clipKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
