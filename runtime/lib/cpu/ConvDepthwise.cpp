//===- ConvDepthwise.cpp - Direct depthwise convolution and gradients ------===//
//
// MobileNet's depthwise convolutions (one input channel and one filter per
// group) as direct loops instead of im2col + a GEMM with one row per group:
// with C groups the GEMM path makes C tiny sgemm calls and C im2col / col2im
// passes per image, which cost MobileNetV3-large's training step more than
// its dense convolutions (docs/benchmarks.md, "Real-sized training steps").
// 1-D and 2-D windows run on flat, zero-padded phase planes (FlatGrid): one
// long contiguous axpy or dot per window position and plane. 3-D ones
// walk whole output rows, one window position at a time, with the positions
// in the padding found once per row (validOutputs).
//
//===----------------------------------------------------------------------===//
#include "ConvDepthwise.h"
#include "CpuKernels.h"

#include <vector>

namespace strait {
namespace rt {
namespace cpu {
namespace {

/// Per window column kx, the output columns whose input column is inside X.
std::vector<ValidRange> columnRanges(const ConvWindow &w) {
  std::vector<ValidRange> xr(w.k[2]);
  for (int64_t kx = 0; kx < w.k[2]; ++kx)
    xr[kx] = validOutputs(w.out[2], w.in[2], w.stride[2], w.pad[2], kx * w.dil[2]);
  return xr;
}

/// lanes[i % 8] += a[i] * b[i * sb]: eight float lanes, kept in registers
/// (vectorized for sb == 1).
inline void dotLanes(const float *a, const float *b, int64_t n, int64_t sb, float *lanes) {
  float acc[8];
  for (int k = 0; k < 8; ++k)
    acc[k] = lanes[k];
  int64_t i = 0;
  if (sb == 1)
    for (; i + 8 <= n; i += 8)
      for (int k = 0; k < 8; ++k)
        acc[k] += a[i + k] * b[i + k];
  for (; i < n; ++i)
    acc[i & 7] += a[i] * b[i * sb];
  for (int k = 0; k < 8; ++k)
    lanes[k] = acc[k];
}

// The per-plane loops below run 8 floats wide (AVX2) where the CPU has it
// and 4 wide (the baseline) elsewhere: target_clones without FMA, so both
// clones compute the same bits.

/// The window positions that read output row (oz, oy) of the plane from
/// inside X: fn(kpos, r, src) for each (kz, ky, kx) whose input row is inside
/// X and whose valid output columns r are not empty, src the input under
/// output column r.lo (forwardPlane and gradWeightPlane walk it alike).
template <typename Fn>
inline __attribute__((always_inline)) void forEachTap(const float *plane, const ConvWindow &w,
                                                      const ValidRange *xr, int64_t oz,
                                                      int64_t oy, Fn &&fn) {
  for (int64_t kz = 0; kz < w.k[0]; ++kz) {
    int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
    if (iz < 0 || iz >= w.in[0])
      continue;
    for (int64_t ky = 0; ky < w.k[1]; ++ky) {
      int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
      if (iy < 0 || iy >= w.in[1])
        continue;
      const float *row = plane + (iz * w.in[1] + iy) * w.in[2];
      for (int64_t kx = 0; kx < w.k[2]; ++kx) {
        ValidRange r = xr[kx];
        if (r.lo < r.hi)
          fn((kz * w.k[1] + ky) * w.k[2] + kx, r,
             row + r.lo * w.stride[2] - w.pad[2] + kx * w.dil[2]);
      }
    }
  }
}

/// One (image, channel) plane of depthwiseConv: each output row zeroed, then
/// for each window position (z, y, x order) += w[kpos] * the input row over
/// the outputs whose input is inside X, then + bias.
__attribute__((target_clones("avx2", "default"))) void
forwardPlane(const float *plane, const float *k, const float *bias, float *out, const ConvWindow &w,
             const ValidRange *xr) {
  int64_t sx = w.stride[2];
  for (int64_t oz = 0; oz < w.out[0]; ++oz)
    for (int64_t oy = 0; oy < w.out[1]; ++oy) {
      float *dst = out + (oz * w.out[1] + oy) * w.out[2];
      std::fill(dst, dst + w.out[2], 0.0f);
      forEachTap(plane, w, xr, oz, oy, [&](int64_t kpos, ValidRange r, const float *src) {
        float kw = k[kpos];
        float *d = dst + r.lo;
        int64_t len = r.hi - r.lo;
        if (sx == 1)
          for (int64_t i = 0; i < len; ++i)
            d[i] += kw * src[i];
        else
          for (int64_t i = 0; i < len; ++i)
            d[i] += kw * src[i * sx];
      });
      if (bias)
        for (int64_t i = 0; i < w.out[2]; ++i)
          dst[i] += *bias;
    }
}

/// One plane of depthwiseGradInput: zeroed, then for each window position
/// and each output row whose input row is inside X, dx[input row] +=
/// w[kpos] * dy[output row] over the row's positions inside X.
__attribute__((target_clones("avx2", "default"))) void gradInputPlane(const float *g,
                                                                      const float *k, float *plane,
                                                                      const ConvWindow &w,
                                                                      const ValidRange *xr) {
  int64_t sx = w.stride[2];
  std::fill(plane, plane + w.inSize(), 0.0f);
  for (int64_t kz = 0; kz < w.k[0]; ++kz)
    for (int64_t ky = 0; ky < w.k[1]; ++ky)
      for (int64_t kx = 0; kx < w.k[2]; ++kx) {
        float kw = k[(kz * w.k[1] + ky) * w.k[2] + kx];
        ValidRange r = xr[kx];
        int64_t len = r.hi - r.lo, ix0 = r.lo * sx - w.pad[2] + kx * w.dil[2];
        if (len <= 0)
          continue;
        for (int64_t oz = 0; oz < w.out[0]; ++oz) {
          int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
          if (iz < 0 || iz >= w.in[0])
            continue;
          for (int64_t oy = 0; oy < w.out[1]; ++oy) {
            int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
            if (iy < 0 || iy >= w.in[1])
              continue;
            const float *src = g + (oz * w.out[1] + oy) * w.out[2] + r.lo;
            float *d = plane + (iz * w.in[1] + iy) * w.in[2] + ix0;
            if (sx == 1)
              for (int64_t i = 0; i < len; ++i)
                d[i] += kw * src[i];
            else
              for (int64_t i = 0; i < len; ++i)
                d[i * sx] += kw * src[i];
          }
        }
      }
}

/// One plane of depthwiseGradWeight: lanes[kpos * 8 + l] += the products of
/// dY with the input under window position kpos, row by row.
__attribute__((target_clones("avx2", "default"))) void
gradWeightPlane(const float *g, const float *plane, float *lanes, const ConvWindow &w,
                const ValidRange *xr) {
  int64_t sx = w.stride[2];
  for (int64_t oz = 0; oz < w.out[0]; ++oz)
    for (int64_t oy = 0; oy < w.out[1]; ++oy) {
      const float *grow = g + (oz * w.out[1] + oy) * w.out[2];
      forEachTap(plane, w, xr, oz, oy, [&](int64_t kpos, ValidRange r, const float *src) {
        dotLanes(grow + r.lo, src, r.hi - r.lo, sx, lanes + kpos * 8);
      });
    }
}

/// A 1-D or 2-D window seen on flat, zero-padded phase planes. X's plane,
/// padded, is split by (row mod sy, column mod sx) into sy * sx phase
/// planes of Hp x Wq floats; output j = oy * Wq + ox (Wq >= Wo columns, the
/// ones past Wo computed and dropped) under window position kpos then reads
/// phase plane element j + off[kpos]: each window position is one long
/// contiguous axpy (or dot) over Ho * Wq outputs instead of one short one
/// per output row (MobileNet's 7x7 and 14x14 planes have rows of 7 and 14
/// floats; its stride-2 rows are strided).
struct FlatGrid {
  int64_t sy = 1, sx = 1, h = 0, wd = 0, padT = 0, padL = 0, ho = 0, wo = 0, wq = 0, hp = 0;
  int64_t size = 0;         ///< all phase planes
  std::vector<int64_t> off; ///< per window position (y, x order)
  int64_t outputs() const { return ho * wq; }
  /// Index in the buffer of padded position (R, C).
  int64_t at(int64_t r, int64_t c) const {
    return ((r % sy * sx + c % sx) * hp + r / sy) * wq + c / sx;
  }
};

bool flatGrid(const ConvWindow &w, FlatGrid &g) {
  if (w.k[0] != 1 || w.in[0] != 1 || w.out[0] != 1)
    return false;
  g.sy = w.stride[1];
  g.sx = w.stride[2];
  g.h = w.in[1];
  g.wd = w.in[2];
  g.padT = w.pad[1];
  g.padL = w.pad[2];
  g.ho = w.out[1];
  g.wo = w.out[2];
  int64_t qy = (w.k[1] - 1) * w.dil[1] / g.sy, qx = (w.k[2] - 1) * w.dil[2] / g.sx;
  g.wq = std::max(g.wo + qx, (g.padL + g.wd + g.sx - 1) / g.sx);
  // One row more than the outputs read: output j < Ho * Wq plus an offset
  // of up to qy * Wq + qx stays inside its phase plane.
  g.hp = std::max(g.ho + qy + 1, (g.padT + g.h + g.sy - 1) / g.sy);
  g.size = g.sy * g.sx * g.hp * g.wq;
  g.off.clear();
  for (int64_t ky = 0; ky < w.k[1]; ++ky)
    for (int64_t kx = 0; kx < w.k[2]; ++kx)
      g.off.push_back(g.at(ky * w.dil[1], kx * w.dil[2]));
  return true;
}

/// Calls f(phase plane row, X row offset, first column, count): X row iy's
/// columns first, first + sx, ... (count of them) lie consecutively in one
/// phase plane row, for each of the sx column phases.
template <typename F> inline void forEachPhaseRun(const FlatGrid &g, F &&f) {
  for (int64_t iy = 0; iy < g.h; ++iy)
    for (int64_t b = 0; b < g.sx; ++b) {
      int64_t ix0 = ((b - g.padL) % g.sx + g.sx) % g.sx;
      if (ix0 < g.wd)
        f(g.at(iy + g.padT, ix0 + g.padL), iy * g.wd, ix0, (g.wd - ix0 + g.sx - 1) / g.sx);
    }
}

/// buf = X's plane, padded, split into the phase planes (zero elsewhere).
inline void fillPadded(const float *plane, const FlatGrid &g, float *buf) {
  std::fill(buf, buf + g.size, 0.0f);
  int64_t sx = g.sx;
  forEachPhaseRun(g, [&](int64_t at, int64_t row, int64_t ix0, int64_t count) {
    const float *src = plane + row + ix0;
    float *dst = buf + at;
    for (int64_t i = 0; i < count; ++i)
      dst[i] = src[i * sx];
  });
}

/// The inverse of fillPadded: dx = the phase planes' elements at X.
inline void readPadded(const float *buf, const FlatGrid &g, float *dx) {
  int64_t sx = g.sx;
  forEachPhaseRun(g, [&](int64_t at, int64_t row, int64_t ix0, int64_t count) {
    const float *src = buf + at;
    float *dst = dx + row + ix0;
    for (int64_t i = 0; i < count; ++i)
      dst[i * sx] = src[i];
  });
}

/// gq = dY's plane on the Wq-wide output grid, zero in the dropped columns.
inline void fillGrid(const float *dy, const FlatGrid &g, float *gq) {
  for (int64_t oy = 0; oy < g.ho; ++oy) {
    std::copy(dy + oy * g.wo, dy + (oy + 1) * g.wo, gq + oy * g.wq);
    std::fill(gq + oy * g.wq + g.wo, gq + (oy + 1) * g.wq, 0.0f);
  }
}

__attribute__((target_clones("avx2", "default"))) void
flatForwardPlane(const float *plane, const float *k, const float *bias, float *out,
                 const FlatGrid &g, float *buf, float *acc) {
  fillPadded(plane, g, buf);
  int64_t n = g.outputs();
  std::fill(acc, acc + n, 0.0f);
  for (size_t kpos = 0; kpos < g.off.size(); ++kpos) {
    float kw = k[kpos];
    const float *src = buf + g.off[kpos];
    for (int64_t j = 0; j < n; ++j)
      acc[j] += kw * src[j];
  }
  float b = bias ? *bias : 0.0f;
  for (int64_t oy = 0; oy < g.ho; ++oy)
    for (int64_t ox = 0; ox < g.wo; ++ox)
      out[oy * g.wo + ox] = bias ? acc[oy * g.wq + ox] + b : acc[oy * g.wq + ox];
}

__attribute__((target_clones("avx2", "default"))) void flatGradInputPlane(const float *dy,
                                                                          const float *k, float *dx,
                                                                          const FlatGrid &g,
                                                                          float *buf, float *gq) {
  fillGrid(dy, g, gq);
  std::fill(buf, buf + g.size, 0.0f);
  int64_t n = g.outputs();
  for (size_t kpos = 0; kpos < g.off.size(); ++kpos) {
    float kw = k[kpos];
    float *dst = buf + g.off[kpos];
    for (int64_t j = 0; j < n; ++j)
      dst[j] += kw * gq[j];
  }
  readPadded(buf, g, dx);
}

__attribute__((target_clones("avx2", "default"))) void
flatGradWeightPlane(const float *dy, const float *plane, float *lanes, const FlatGrid &g,
                    float *buf, float *gq) {
  fillPadded(plane, g, buf);
  fillGrid(dy, g, gq);
  for (size_t kpos = 0; kpos < g.off.size(); ++kpos)
    dotLanes(gq, buf + g.off[kpos], g.outputs(), 1, lanes + kpos * 8);
}

} // namespace

/// y[o] = sum over the window positions (z, y, x order) of w[kpos] *
/// x[o * stride - pad + kpos * dil], positions in the padding skipped, then
/// + bias; one (image, channel) plane per task, one output row at a time (it
/// stays in L1). With several filters per channel (digits-cnn's first layer:
/// 1 channel, 16 filters) im2col + GEMM is faster (40% on that layer) and
/// stays in use.
void depthwiseConv(const float *x, const float *wt, const float *bias, float *y, int64_t n,
                   int64_t c, const ConvWindow &w) {
  FlatGrid g;
  if (flatGrid(w, g)) {
    parallelFor(n * c, 1, [&](int64_t p0, int64_t p1) {
      std::vector<float> buf(g.size + g.outputs());
      for (int64_t pl = p0; pl < p1; ++pl)
        flatForwardPlane(x + pl * w.inSize(), wt + (pl % c) * w.kSize(),
                         bias ? bias + pl % c : nullptr, y + pl * w.outSize(), g, buf.data(),
                         buf.data() + g.size);
    });
    return;
  }
  std::vector<ValidRange> xr = columnRanges(w);
  parallelFor(n * c, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl)
      forwardPlane(x + pl * w.inSize(), wt + (pl % c) * w.kSize(), bias ? bias + pl % c : nullptr,
                   y + pl * w.outSize(), w, xr.data());
  });
}

/// One (image, channel) plane per task. Each dX element gets its
/// contributions in window-position order, as col2im adds the GEMM path's
/// columns.
void depthwiseGradInput(const float *dy, const float *wt, float *dx, int64_t n, int64_t c,
                        const ConvWindow &w) {
  FlatGrid g;
  if (flatGrid(w, g)) {
    parallelFor(n * c, 1, [&](int64_t p0, int64_t p1) {
      std::vector<float> buf(g.size + g.outputs());
      for (int64_t pl = p0; pl < p1; ++pl)
        flatGradInputPlane(dy + pl * w.outSize(), wt + (pl % c) * w.kSize(), dx + pl * w.inSize(),
                           g, buf.data(), buf.data() + g.size);
    });
    return;
  }
  std::vector<ValidRange> xr = columnRanges(w);
  parallelFor(n * c, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl)
      gradInputPlane(dy + pl * w.outSize(), wt + (pl % c) * w.kSize(), dx + pl * w.inSize(), w,
                     xr.data());
  });
}

/// One channel per task: per image, each window position's products summed
/// in eight float lanes over the plane (as a GEMM sums one image's K = P
/// products in float), the images' sums added in double.
void depthwiseGradWeight(const float *dy, const float *x, float *dw, int64_t n, int64_t c,
                         const ConvWindow &w) {
  int64_t kSize = w.kSize();
  std::vector<ValidRange> xr = columnRanges(w);
  FlatGrid g;
  bool flat = flatGrid(w, g);
  parallelFor(c, 1, [&](int64_t c0, int64_t c1) {
    std::vector<float> lanes(kSize * 8), buf(flat ? g.size + g.outputs() : 0);
    std::vector<double> acc(kSize);
    for (int64_t ch = c0; ch < c1; ++ch) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t img = 0; img < n; ++img) {
        std::fill(lanes.begin(), lanes.end(), 0.0f);
        const float *gy = dy + (img * c + ch) * w.outSize(), *xp = x + (img * c + ch) * w.inSize();
        if (flat)
          flatGradWeightPlane(gy, xp, lanes.data(), g, buf.data(), buf.data() + g.size);
        else
          gradWeightPlane(gy, xp, lanes.data(), w, xr.data());
        for (int64_t kpos = 0; kpos < kSize; ++kpos) {
          const float *l = lanes.data() + kpos * 8;
          acc[kpos] += ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
        }
      }
      for (int64_t kpos = 0; kpos < kSize; ++kpos)
        dw[ch * kSize + kpos] = static_cast<float>(acc[kpos]);
    }
  });
}

} // namespace cpu
} // namespace rt
} // namespace strait
