//===- Resize.cpp - Resize (nearest and linear) ---------------------------===//
//
// ONNX Resize for f32 with modes nearest and linear, coordinate modes
// half_pixel, pytorch_half_pixel, align_corners, asymmetric and
// tf_half_pixel_for_nn, and all four nearest rounding modes. The output shape
// is the program's static one; scales default to out/in per dimension.
// ResizeGrad (the training step's gradient) scatters dY back with the same
// taps.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include <algorithm>
#include <cmath>

namespace strait {
namespace rt {
namespace cpu {
namespace {

enum class CoordMode { HalfPixel, PytorchHalfPixel, AlignCorners, Asymmetric, TfHalfPixelNN };

StatusOr<CoordMode> parseCoordMode(const KernelContext &ctx, const std::string &s) {
  if (s == "half_pixel")
    return CoordMode::HalfPixel;
  if (s == "pytorch_half_pixel")
    return CoordMode::PytorchHalfPixel;
  if (s == "align_corners")
    return CoordMode::AlignCorners;
  if (s == "asymmetric")
    return CoordMode::Asymmetric;
  if (s == "tf_half_pixel_for_nn")
    return CoordMode::TfHalfPixelNN;
  return ctx.unsupported("coordinate_transformation_mode '" + s + "'");
}

/// `outLen` is in * scale, unrounded, as the ONNX reference uses it.
double originalCoord(CoordMode mode, int64_t x, double scale, int64_t inLen,
                     double outLen) {
  switch (mode) {
  case CoordMode::HalfPixel:
    return (x + 0.5) / scale - 0.5;
  case CoordMode::PytorchHalfPixel:
    return outLen > 1 ? (x + 0.5) / scale - 0.5 : 0.0;
  case CoordMode::AlignCorners:
    return outLen == 1 ? 0.0 : double(x) * (inLen - 1) / (outLen - 1);
  case CoordMode::Asymmetric:
    return x / scale;
  case CoordMode::TfHalfPixelNN:
    return (x + 0.5) / scale;
  }
  return 0.0;
}

int64_t nearestIndex(const std::string &mode, double x) {
  double f = std::floor(x);
  if (mode == "floor")
    return static_cast<int64_t>(f);
  if (mode == "ceil")
    return static_cast<int64_t>(std::ceil(x));
  if (x - f == 0.5)
    return static_cast<int64_t>(mode == "round_prefer_ceil" ? f + 1 : f);
  return static_cast<int64_t>(std::round(x));
}

/// Per output coordinate of one dim: two source indices and a weight.
struct Tap {
  int64_t i0, i1;
  float w1;
};

/// Calls fn(offset, weight) for each of the 2^r corners of one output
/// element's interpolation (its tap per dim in t, input strides st) whose
/// weight is non-zero: Resize gathers from them, ResizeGrad scatters to them.
template <typename Fn>
void forEachCorner(const std::vector<const Tap *> &t, const std::vector<int64_t> &st, Fn fn) {
  int64_t r = static_cast<int64_t>(t.size());
  for (int64_t corner = 0; corner < (int64_t(1) << r); ++corner) {
    float w = 1;
    int64_t off = 0;
    for (int64_t d = 0; d < r && w != 0; ++d) {
      bool hi = (corner >> d) & 1;
      w *= hi ? t[d]->w1 : 1 - t[d]->w1;
      off += (hi ? t[d]->i1 : t[d]->i0) * st[d];
    }
    if (w != 0)
      fn(off, w);
  }
}

/// The interpolation attributes shared by Resize and ResizeGrad.
struct ResizeAttrs {
  std::string mode, nearestMode;
  CoordMode coord;
};

StatusOr<ResizeAttrs> readResizeAttrs(KernelContext &ctx) {
  const AttrReader &attrs = ctx.getAttrs();
  ResizeAttrs a;
  STRAIT_ASSIGN_OR_RETURN(a.mode, attrs.getString("mode", "nearest"));
  STRAIT_ASSIGN_OR_RETURN(std::string cm, attrs.getString("coordinate_transformation_mode", "half_pixel"));
  STRAIT_ASSIGN_OR_RETURN(a.nearestMode, attrs.getString("nearest_mode", "round_prefer_floor"));
  STRAIT_ASSIGN_OR_RETURN(int64_t antialias, attrs.getInt("antialias", 0));
  if ((a.mode != "nearest" && a.mode != "linear") || antialias || attrs.has("axes"))
    return ctx.unsupported("mode '" + a.mode + "' / antialias / axes");
  STRAIT_ASSIGN_OR_RETURN(a.coord, parseCoordMode(ctx, cm));
  return a;
}

/// Per dim, the taps of every output coordinate for input shape `in` and
/// output shape `out` with the given scales.
std::vector<std::vector<Tap>> resizeTaps(const ResizeAttrs &a, const Shape &in,
                                         const Shape &out, const std::vector<double> &scales) {
  std::vector<std::vector<Tap>> taps(in.size());
  for (size_t d = 0; d < in.size(); ++d)
    for (int64_t o = 0; o < out[d]; ++o) {
      double c = originalCoord(a.coord, o, scales[d], in[d], in[d] * scales[d]);
      int64_t last = in[d] - 1;
      if (a.mode == "nearest") {
        int64_t i = std::clamp<int64_t>(nearestIndex(a.nearestMode, c), 0, last);
        taps[d].push_back({i, i, 0.0f});
      } else {
        c = std::clamp(c, 0.0, double(last));
        int64_t i0 = static_cast<int64_t>(std::floor(c));
        taps[d].push_back({i0, std::min(i0 + 1, last), float(c - i0)});
      }
    }
  return taps;
}

Status resizeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  Tensor *y = ctx.output(0);
  if (!y || y->rank() != x->rank() || y->dtype != x->dtype)
    return ctx.error("output must be an f32 tensor of the input's rank");
  STRAIT_ASSIGN_OR_RETURN(ResizeAttrs a, readResizeAttrs(ctx));
  int64_t r = x->rank();
  std::vector<double> scales(r);
  const Tensor *scalesIn = ctx.input(2);
  bool haveScales = scalesIn && scalesIn->numel() > 0;
  if (haveScales && (scalesIn->dtype != program::DTYPE_F32 || scalesIn->numel() != r))
    return ctx.error("scales must be f32 with one entry per dim");
  for (int64_t d = 0; d < r; ++d) {
    scales[d] = haveScales ? scalesIn->as<float>()[d]
                           : double(y->shape[d]) / double(x->shape[d]);
    if (haveScales && y->shape[d] != static_cast<int64_t>(std::floor(x->shape[d] * scales[d])))
      return ctx.error("declared output dim " + std::to_string(d) +
                       " differs from floor(input * scale)");
  }
  std::vector<std::vector<Tap>> taps = resizeTaps(a, x->shape, y->shape, scales);
  std::vector<int64_t> st = rowMajorStrides(x->shape);
  const float *in = x->as<float>();
  float *out = y->as<float>();
  parallelFor(y->numel(), 1024, [&](int64_t b, int64_t e) {
    std::vector<const Tap *> t(r);
    for (int64_t i = b; i < e; ++i) {
      int64_t rem = i;
      for (int64_t d = r - 1; d >= 0; --d) {
        t[d] = &taps[d][rem % y->shape[d]];
        rem /= y->shape[d];
      }
      float acc = 0;
      forEachCorner(t, st, [&](int64_t off, float w) { acc += w * in[off]; });
      out[i] = acc;
    }
  });
  return Status::ok();
}

/// ResizeGrad (strait domain): dX (the output's static shape, the forward
/// input's) is zero plus every dY entry times its taps' weights, scattered
/// to the positions the forward Resize read; scales are dY / dX per dim.
Status resizeGradKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  Tensor *dx = ctx.output(0);
  if (!dx || dx->rank() != dy->rank() || dx->dtype != dy->dtype)
    return ctx.error("output must be an f32 tensor of dY's rank");
  STRAIT_ASSIGN_OR_RETURN(ResizeAttrs a, readResizeAttrs(ctx));
  int64_t r = dy->rank();
  std::vector<double> scales(r);
  for (int64_t d = 0; d < r; ++d) {
    if (dx->shape[d] <= 0)
      return ctx.error("empty input dim " + std::to_string(d));
    scales[d] = double(dy->shape[d]) / double(dx->shape[d]);
  }
  std::vector<std::vector<Tap>> taps = resizeTaps(a, dx->shape, dy->shape, scales);
  std::vector<int64_t> st = rowMajorStrides(dx->shape);
  const float *g = dy->as<float>();
  float *out = dx->as<float>();
  std::fill(out, out + dx->numel(), 0.0f);
  // Leading dims that Resize leaves alone (batch, channels) split the work
  // into independent slices; inside a slice the scatter-add is sequential,
  // as different dY entries share dX positions.
  int64_t lead = 0, slices = 1;
  auto identity = [&](int64_t d) {
    if (dy->shape[d] != dx->shape[d])
      return false;
    for (int64_t o = 0; o < dy->shape[d]; ++o)
      if (taps[d][o].i0 != o || taps[d][o].w1 != 0)
        return false;
    return true;
  };
  while (lead < r && identity(lead))
    slices *= dy->shape[lead++];
  int64_t perSlice = dy->numel() / std::max<int64_t>(slices, 1);
  parallelFor(slices, 1, [&](int64_t s0, int64_t s1) {
    std::vector<const Tap *> t(r);
    for (int64_t i = s0 * perSlice; i < s1 * perSlice; ++i) {
      int64_t rem = i;
      for (int64_t d = r - 1; d >= 0; --d) {
        t[d] = &taps[d][rem % dy->shape[d]];
        rem /= dy->shape[d];
      }
      forEachCorner(t, st, [&](int64_t off, float w) { out[off] += w * g[i]; });
    }
  });
  return Status::ok();
}

} // namespace

void addResizeKernels(KernelTable &table) {
  table.add("Resize", resizeKernel);
  table.add("ResizeGrad", resizeGradKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
