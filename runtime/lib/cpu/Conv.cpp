//===- Conv.cpp - Convolution and pooling ---------------------------------===//
//
// Conv (groups, strides, pads, dilations, auto_pad) as im2col + sgemm, a
// depthwise Conv and its gradients (one channel and one filter per group)
// directly (ConvDepthwise.cpp), and
// MaxPool / AveragePool / global pooling. 1-D and 2-D windows are handled as
// 3-D windows whose extra dimensions have size 1. The window comes from
// rt::convWindow (KernelArgs.h), shared with the CUDA backend.
//
//===----------------------------------------------------------------------===//
#include "ConvDepthwise.h"
#include "CpuKernels.h"
#include "strait/runtime/KernelArgs.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace strait {
namespace rt {
namespace cpu {
namespace {

/// Row `row` = c*K + kpos of one image's im2col matrix: dst[opos] =
/// x[c, window position kpos of output opos], 0 in the padding. Each output
/// row is a zero head, a copy of X's row (contiguous for stride 1) and a zero
/// tail: the same values as testing every position, without the test.
inline void im2colRow(const float *x, const ConvWindow &w, int64_t row, float *dst) {
  int64_t kSize = w.kSize();
  int64_t c = row / kSize, kpos = row % kSize;
  int64_t kz = kpos / (w.k[1] * w.k[2]), ky = (kpos / w.k[2]) % w.k[1], kx = kpos % w.k[2];
  const float *plane = x + c * w.inSize();
  ValidRange xs = validOutputs(w.out[2], w.in[2], w.stride[2], w.pad[2], kx * w.dil[2]);
  int64_t ix0 = xs.lo * w.stride[2] - w.pad[2] + kx * w.dil[2], sx = w.stride[2];
  for (int64_t oz = 0; oz < w.out[0]; ++oz) {
    int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
    for (int64_t oy = 0; oy < w.out[1]; ++oy, dst += w.out[2]) {
      int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
      if (iz < 0 || iz >= w.in[0] || iy < 0 || iy >= w.in[1]) {
        std::fill(dst, dst + w.out[2], 0.0f);
        continue;
      }
      std::fill(dst, dst + xs.lo, 0.0f);
      int64_t n = xs.hi - xs.lo;
      const float *src = plane + (iz * w.in[1] + iy) * w.in[2] + (n > 0 ? ix0 : 0);
      if (sx == 1)
        std::copy(src, src + n, dst + xs.lo);
      else
        for (int64_t i = 0; i < n; ++i)
          dst[xs.lo + i] = src[i * sx];
      std::fill(dst + xs.hi, dst + w.out[2], 0.0f);
    }
  }
}

/// col[(c*K + kpos) * P + opos] for one image and one group.
void im2col(const float *x, int64_t channels, const ConvWindow &w, float *col) {
  int64_t p = w.outSize();
  parallelFor(channels * w.kSize(), 4, [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row)
      im2colRow(x, w, row, col + row * p);
  });
}

/// Input planes of at most this many positions take the mapped im2col and
/// col2im of the batched paths.
constexpr int64_t kMappedPlane = 4096;

/// map[kpos * P + opos] = the position in the input plane of output opos's
/// window position kpos, or inSize where it lies in the padding: the window
/// walked once per call instead of once per image and channel.
std::vector<int32_t> windowMap(const ConvWindow &w) {
  int64_t kSize = w.kSize(), p = w.outSize(), inSize = w.inSize();
  std::vector<int32_t> map(kSize * p);
  for (int64_t kpos = 0; kpos < kSize; ++kpos) {
    int64_t kz = kpos / (w.k[1] * w.k[2]), ky = (kpos / w.k[2]) % w.k[1], kx = kpos % w.k[2];
    int32_t *m = map.data() + kpos * p;
    for (int64_t oz = 0; oz < w.out[0]; ++oz) {
      int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
      for (int64_t oy = 0; oy < w.out[1]; ++oy)
        for (int64_t ox = 0; ox < w.out[2]; ++ox) {
          int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
          int64_t ix = ox * w.stride[2] - w.pad[2] + kx * w.dil[2];
          bool in = iz >= 0 && iz < w.in[0] && iy >= 0 && iy < w.in[1] && ix >= 0 && ix < w.in[2];
          *m++ = static_cast<int32_t>(in ? (iz * w.in[1] + iy) * w.in[2] + ix : inSize);
        }
    }
  }
  return map;
}

/// A per-thread plane of inSize + 1 floats (the last one the padding's).
float *planeScratch(int64_t n) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < n)
    buffer.resize(n);
  return buffer.data();
}

/// The im2col matrices of `images` images side by side, one GEMM operand
/// with B*P columns: col[(c*K + kpos) * (B*P) + b*P + opos]. Image b's
/// channels start at x + b * imageStride. Small planes are copied next to
/// a zero and gathered through windowMap (no per-row bounds, no calls);
/// larger ones take im2colRow.
void im2colBlock(const float *x, int64_t imageStride, int64_t images, int64_t channels,
                 const ConvWindow &w, float *col) {
  int64_t kSize = w.kSize(), rows = channels * kSize, p = w.outSize(), ld = images * p;
  int64_t inSize = w.inSize();
  if (inSize <= kMappedPlane) {
    std::vector<int32_t> map = windowMap(w);
    parallelFor(images * channels, 1, [&](int64_t q0, int64_t q1) {
      float *padded = planeScratch(inSize + 1);
      for (int64_t q = q0; q < q1; ++q) {
        int64_t b = q / channels, c = q % channels;
        const float *plane = x + b * imageStride + c * inSize;
        std::copy(plane, plane + inSize, padded);
        padded[inSize] = 0.0f;
        float *dst = col + c * kSize * ld + b * p;
        for (int64_t kpos = 0; kpos < kSize; ++kpos) {
          const int32_t *m = map.data() + kpos * p;
          float *d = dst + kpos * ld;
          for (int64_t o = 0; o < p; ++o)
            d[o] = padded[m[o]];
        }
      }
    });
    return;
  }
  parallelFor(images * rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      int64_t b = r / rows, row = r % rows;
      im2colRow(x + b * imageStride, w, row, col + row * ld + b * p);
    }
  });
}

/// Output planes of at most this many positions take the batched paths
/// (one im2col and one GEMM over a block of images): below it a GEMM per
/// image is too small for the BLAS kernels to pay off (digits-cnn's 8x8 and
/// 4x4 planes, ResNet's and MobileNet's 7x7 and 14x14 ones).
constexpr int64_t kBatchedPlane = 256;
/// A block's GEMM gets about this many columns (B * P) ...
constexpr int64_t kBlockColumns = 1024;
/// ... and its im2col matrix at most this many floats (it stays in L2).
constexpr int64_t kBlockFloats = int64_t(1) << 18;

/// Images per block for the batched paths; 1 (the per-image path) for
/// larger planes or a batch of one.
int64_t imageBlock(int64_t n, int64_t p, int64_t kdim) {
  if (p > kBatchedPlane || n < 2)
    return 1;
  int64_t b = std::max<int64_t>(1, kBlockColumns / std::max<int64_t>(p, 1));
  b = std::min(b, std::max<int64_t>(1, kBlockFloats / std::max<int64_t>(kdim * p, 1)));
  return std::min(b, n);
}

/// dst[r * (B*P) + b*P + o] = src[b * imageStride + r * P + o] for r < rows:
/// `rows` channels of B images side by side (dY as a GEMM operand).
void gatherBlock(const float *src, int64_t imageStride, int64_t images, int64_t rows, int64_t p,
                 float *dst) {
  int64_t ld = images * p;
  for (int64_t b = 0; b < images; ++b)
    for (int64_t r = 0; r < rows; ++r)
      std::copy(src + b * imageStride + r * p, src + b * imageStride + (r + 1) * p,
                dst + r * ld + b * p);
}

/// A growing per-thread scratch buffer for im2col columns: allocating (and
/// page-faulting) a fresh one per call cost MobileNetV3 5% of its forward.
float *scratch(int64_t n) {
  thread_local std::vector<float> buffer;
  if (static_cast<int64_t>(buffer.size()) < n)
    buffer.resize(n);
  return buffer.data();
}

/// Adjoint of im2colRow for one channel: plane[ipos] += col[kpos * ld +
/// opos] over its kernel positions in order, each row's positions inside X
/// found once (validOutputs) instead of tested one by one: the same sums in
/// the same order.
inline void col2imPlane(const float *col, int64_t ld, const ConvWindow &w, float *plane) {
  int64_t kSize = w.kSize(), sx = w.stride[2];
  for (int64_t kpos = 0; kpos < kSize; ++kpos) {
    int64_t kz = kpos / (w.k[1] * w.k[2]), ky = (kpos / w.k[2]) % w.k[1], kx = kpos % w.k[2];
    ValidRange xs = validOutputs(w.out[2], w.in[2], sx, w.pad[2], kx * w.dil[2]);
    int64_t len = xs.hi - xs.lo;
    if (len <= 0)
      continue;
    int64_t ix0 = xs.lo * sx - w.pad[2] + kx * w.dil[2];
    const float *src = col + kpos * ld + xs.lo;
    for (int64_t oz = 0; oz < w.out[0]; ++oz) {
      int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
      for (int64_t oy = 0; oy < w.out[1]; ++oy, src += w.out[2]) {
        int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
        if (iz < 0 || iz >= w.in[0] || iy < 0 || iy >= w.in[1])
          continue;
        float *dst = plane + (iz * w.in[1] + iy) * w.in[2] + ix0;
        if (sx == 1)
          for (int64_t i = 0; i < len; ++i)
            dst[i] += src[i];
        else
          for (int64_t i = 0; i < len; ++i)
            dst[i * sx] += src[i];
      }
    }
  }
}

/// Adjoint of im2col: img[c, ipos] += col[(c*K + kpos) * P + opos]. Serial
/// over kernel positions of one channel so that no two threads add into the
/// same image element.
void col2im(const float *col, int64_t channels, const ConvWindow &w, float *img) {
  int64_t kSize = w.kSize(), p = w.outSize();
  parallelFor(channels, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c)
      col2imPlane(col + c * kSize * p, p, w, img + c * w.inSize());
  });
}

/// Adjoint of im2colBlock: image b's channels (at img + b * imageStride)
/// += its columns of col; one (image, channel) plane per task.
void col2imBlock(const float *col, int64_t images, int64_t channels, const ConvWindow &w,
                 float *img, int64_t imageStride) {
  int64_t kSize = w.kSize(), p = w.outSize(), ld = images * p, inSize = w.inSize();
  if (inSize <= kMappedPlane) {
    // For each input position, its column in kernel position kpos's row
    // (P where none): the sums gathered in a register, kernel positions in
    // order as col2imPlane adds them (adding +0 for the others leaves
    // every sum's bits as they are), then added to the image.
    std::vector<int32_t> map = windowMap(w), inv(kSize * inSize, static_cast<int32_t>(p));
    for (int64_t kpos = 0; kpos < kSize; ++kpos)
      for (int64_t o = 0; o < p; ++o)
        if (map[kpos * p + o] < inSize)
          inv[kpos * inSize + map[kpos * p + o]] = static_cast<int32_t>(o);
    parallelFor(images * channels, 1, [&](int64_t q0, int64_t q1) {
      for (int64_t q = q0; q < q1; ++q) {
        int64_t b = q / channels, c = q % channels;
        const float *src = col + c * kSize * ld + b * p;
        float *plane = img + b * imageStride + c * inSize;
        for (int64_t i = 0; i < inSize; ++i) {
          float acc = 0.0f;
          for (int64_t kpos = 0; kpos < kSize; ++kpos) {
            int32_t o = inv[kpos * inSize + i];
            float v = src[kpos * ld + (o < p ? o : 0)];
            acc += o < p ? v : 0.0f;
          }
          plane[i] += acc;
        }
      }
    });
    return;
  }
  parallelFor(images * channels, 1, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      int64_t b = q / channels, c = q % channels;
      col2imPlane(col + c * kSize * ld + b * p, ld, w, img + b * imageStride + c * w.inSize());
    }
  });
}

/// A 1x1 window with stride 1 and no padding: X's planes are the im2col
/// matrix itself.
bool isPointwise(const ConvWindow &w) {
  return w.kSize() == 1 && w.inSize() == w.outSize() && w.stride[0] == 1 && w.stride[1] == 1 &&
         w.stride[2] == 1 && w.pad[0] == 0 && w.pad[1] == 0 && w.pad[2] == 0;
}

/// dst[b * imageStride + r * P + o] = src[r * (B*P) + b*P + o]: the inverse
/// of gatherBlock.
void scatterBlock(const float *src, int64_t images, int64_t rows, int64_t p, float *dst,
                  int64_t imageStride) {
  int64_t ld = images * p;
  for (int64_t b = 0; b < images; ++b)
    for (int64_t r = 0; r < rows; ++r)
      std::copy(src + r * ld + b * p, src + r * ld + (b + 1) * p, dst + b * imageStride + r * p);
}

Status convKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(ConvArgs a, convArgs(ctx));
  const Tensor *x = a.x, *wt = a.w, *bias = a.bias;
  Tensor *y = a.y;
  const ConvWindow &w = a.window;
  int64_t group = a.group, n = x->shape[0], c = x->shape[1], m = wt->shape[0];
  int64_t cg = c / group, mg = m / group, kdim = cg * w.kSize(), p = w.outSize();
  if (isDepthwise(c, m, group, w)) {
    depthwiseConv(x->as<float>(), wt->as<float>(), bias ? bias->as<float>() : nullptr,
                  y->as<float>(), n, c, w);
    return Status::ok();
  }
  bool direct = isPointwise(w);
  int64_t block = imageBlock(n, p, kdim);
  if (block > 1) {
    // Batched: per block of B images and group, X's columns side by side
    // (im2col, or a copy for 1x1), one [mg x B*P] GEMM, its rows copied
    // to Y's planes with the bias added.
    float *col = scratch((kdim + mg) * block * p), *out = col + kdim * block * p;
    const float *bv = bias ? bias->as<float>() : nullptr;
    for (int64_t i0 = 0; i0 < n; i0 += block) {
      int64_t nb = std::min(block, n - i0), ld = nb * p;
      for (int64_t g = 0; g < group; ++g) {
        const float *xg = x->as<float>() + (i0 * c + g * cg) * w.inSize();
        if (direct)
          gatherBlock(xg, c * p, nb, cg, p, col);
        else
          im2colBlock(xg, c * w.inSize(), nb, cg, w, col);
        sgemmRowMajor(mg, ld, kdim, wt->as<float>() + g * mg * kdim, col, out, false);
        for (int64_t b = 0; b < nb; ++b)
          for (int64_t oc = 0; oc < mg; ++oc) {
            const float *src = out + oc * ld + b * p;
            float *dst = y->as<float>() + ((i0 + b) * m + g * mg + oc) * p;
            float bo = bv ? bv[g * mg + oc] : 0.0f;
            for (int64_t i = 0; i < p; ++i)
              dst[i] = src[i] + bo;
          }
      }
    }
    return Status::ok();
  }
  float *col = direct ? nullptr : scratch(kdim * p);
  for (int64_t img = 0; img < n; ++img) {
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = x->as<float>() + (img * c + g * cg) * w.inSize();
      const float *colp = xg;
      if (!direct) {
        im2col(xg, cg, w, col);
        colp = col;
      }
      float *yg = y->as<float>() + (img * m + g * mg) * p;
      sgemmRowMajor(mg, p, kdim, wt->as<float>() + g * mg * kdim, colp, yg,
                    false);
    }
    if (bias)
      for (int64_t oc = 0; oc < m; ++oc) {
        float *row = y->as<float>() + (img * m + oc) * p;
        float b = bias->as<float>()[oc];
        for (int64_t i = 0; i < p; ++i)
          row[i] += b;
      }
  }
  return Status::ok();
}

/// ConvTranspose's window seen from the adjoint convolution: `in` is the
/// ConvTranspose output, `out` its input.
StatusOr<ConvWindow> transposeWindow(const KernelContext &ctx, const Shape &x,
                                     const std::vector<int64_t> &kernel) {
  ConvWindow w;
  w.nd = static_cast<int>(x.size()) - 2;
  if (w.nd < 1 || w.nd > 3 || static_cast<int>(kernel.size()) != w.nd)
    return ctx.unsupported("only 1-3 spatial dimensions");
  const AttrReader &attrs = ctx.getAttrs();
  std::vector<int64_t> ones(w.nd, 1), zeros(w.nd, 0), zeros2(2 * w.nd, 0), none;
  STRAIT_ASSIGN_OR_RETURN(auto strides, attrs.getInts("strides", ones));
  STRAIT_ASSIGN_OR_RETURN(auto dils, attrs.getInts("dilations", ones));
  STRAIT_ASSIGN_OR_RETURN(auto pads, attrs.getInts("pads", zeros2));
  STRAIT_ASSIGN_OR_RETURN(auto outPad, attrs.getInts("output_padding", zeros));
  STRAIT_ASSIGN_OR_RETURN(auto outShape, attrs.getInts("output_shape", none));
  STRAIT_ASSIGN_OR_RETURN(std::string autoPad, attrs.getString("auto_pad", "NOTSET"));
  if (static_cast<int>(strides.size()) != w.nd || static_cast<int>(dils.size()) != w.nd ||
      static_cast<int>(pads.size()) != 2 * w.nd || static_cast<int>(outPad.size()) != w.nd)
    return ctx.error("strides/dilations/pads/output_padding do not match the spatial rank");
  if (!outShape.empty() && static_cast<int>(outShape.size()) != w.nd)
    outShape.erase(outShape.begin(), outShape.end() - w.nd); // [N, C, ...] form
  for (int d = 0; d < w.nd; ++d) {
    int64_t in = x[2 + d], eff = (kernel[d] - 1) * dils[d] + 1;
    int64_t full = strides[d] * (in - 1) + outPad[d] + eff;
    int64_t pb = pads[d], pe = pads[d + w.nd], out;
    bool same = autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER";
    if (!outShape.empty() || same) {
      out = outShape.empty() ? in * strides[d] : outShape[d];
      int64_t total = full - out; // may be negative: extra zeros at the end
      int64_t half = total >= 0 ? total / 2 : -((-total + 1) / 2); // floor
      pb = autoPad == "SAME_UPPER" ? half : total - half;
    } else {
      out = full - pb - pe;
    }
    int slot = 3 - w.nd + d;
    w.in[slot] = out;
    w.out[slot] = in;
    w.k[slot] = kernel[d];
    w.stride[slot] = strides[d];
    w.dil[slot] = dils[d];
    w.pad[slot] = pb;
  }
  return w;
}

Status convTransposeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *wt, ctx.requireInput(1, program::DTYPE_F32));
  const Tensor *bias = ctx.input(2);
  STRAIT_ASSIGN_OR_RETURN(int64_t group, ctx.getAttrs().getInt("group", 1));
  if (x->rank() < 3 || wt->rank() != x->rank() || group < 1 ||
      wt->shape[0] != x->shape[1] || x->shape[1] % group)
    return ctx.error("X " + x->typeString() + " and W " + wt->typeString() +
                     " do not fit a transposed convolution with group " +
                     std::to_string(group));
  int64_t n = x->shape[0], c = x->shape[1], mg = wt->shape[1], m = mg * group;
  std::vector<int64_t> kshape(wt->shape.begin() + 2, wt->shape.end());
  STRAIT_ASSIGN_OR_RETURN(ConvWindow w, transposeWindow(ctx, x->shape, kshape));
  Shape outShape = {n, m};
  for (int d = 3 - w.nd; d < 3; ++d)
    outShape.push_back(w.in[d]);
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, outShape, program::DTYPE_F32));
  if (bias && (bias->dtype != program::DTYPE_F32 || bias->numel() != m))
    return ctx.error("bias must have M=" + std::to_string(m) + " f32 entries");
  int64_t cg = c / group, kdim = mg * w.kSize(), p = w.outSize(), img = w.inSize();
  std::vector<float> col(kdim * p);
  std::fill(y->as<float>(), y->as<float>() + y->numel(), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < group; ++g) {
      // col[(mg*K), P] = W_g^T [(mg*K) x cg] * X_g [cg x P]
      sgemm(true, false, kdim, p, cg, 1.0f, wt->as<float>() + g * cg * kdim, kdim,
            x->as<float>() + (i * c + g * cg) * p, p, 0.0f, col.data(), p);
      col2im(col.data(), mg, w, y->as<float>() + (i * m + g * mg) * img);
    }
  if (bias)
    for (int64_t i = 0; i < n * m; ++i) {
      float b = bias->as<float>()[i % m];
      float *row = y->as<float>() + i * img;
      for (int64_t j = 0; j < img; ++j)
        row[j] += b;
    }
  return Status::ok();
}

enum class PoolKind { Max, Average };

/// MaxPool (Max) or AveragePool over one plane: rt::poolWindow for every
/// output (same positions, same order, same ties, same padding count),
/// with the output coordinates walked by loops instead of divided out of
/// the flat index, and the z/y bounds tested once per window row.
/// The outputs whose whole window lies inside X: [lo[d], hi[d]) per dim.
struct InsideBox {
  int64_t lo[3], hi[3];
  bool contains(int64_t oz, int64_t oy, int64_t ox) const {
    return oz >= lo[0] && oz < hi[0] && oy >= lo[1] && oy < hi[1] && ox >= lo[2] && ox < hi[2];
  }
};
InsideBox insideBox(const ConvWindow &w) {
  InsideBox b;
  for (int d = 0; d < 3; ++d) {
    ValidRange first = validOutputs(w.out[d], w.in[d], w.stride[d], w.pad[d], 0);
    ValidRange last = validOutputs(w.out[d], w.in[d], w.stride[d], w.pad[d], (w.k[d] - 1) * w.dil[d]);
    b.lo[d] = std::max(first.lo, last.lo);
    b.hi[d] = std::max(b.lo[d], std::min(first.hi, last.hi));
  }
  return b;
}

template <bool Max>
void poolPlane(const ConvWindow &w, const float *in, float *out, int64_t *argmaxOut,
               int64_t argmaxBase, bool includePad, const InsideBox *skip) {
  int64_t o = 0;
  for (int64_t oz = 0; oz < w.out[0]; ++oz)
    for (int64_t oy = 0; oy < w.out[1]; ++oy)
      for (int64_t ox = 0; ox < w.out[2]; ++ox, ++o) {
        if (skip && skip->contains(oz, oy, ox))
          continue; // poolPlaneInside's
        float best = -INFINITY, sum = 0;
        int64_t count = 0, padded = 0, argmax = 0;
        for (int64_t kz = 0; kz < w.k[0]; ++kz) {
          int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
          bool zIn = iz >= 0 && iz < w.in[0], zPad = iz < w.in[0] + w.padEnd[0];
          for (int64_t ky = 0; ky < w.k[1]; ++ky) {
            int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
            bool rowIn = zIn && iy >= 0 && iy < w.in[1];
            bool rowPad = zPad && iy < w.in[1] + w.padEnd[1];
            int64_t rowBase = (iz * w.in[1] + iy) * w.in[2];
            for (int64_t kx = 0; kx < w.k[2]; ++kx) {
              int64_t ix = ox * w.stride[2] - w.pad[2] + kx * w.dil[2];
              if (rowIn && ix >= 0 && ix < w.in[2]) {
                float v = in[rowBase + ix];
                if (Max) {
                  if (v > best) {
                    best = v;
                    argmax = rowBase + ix;
                  }
                } else {
                  sum += v;
                  ++count;
                }
              } else if (!Max) {
                padded += rowPad && ix < w.in[2] + w.padEnd[2];
              }
            }
          }
        }
        if (Max) {
          out[o] = best;
          if (argmaxOut)
            argmaxOut[o] = argmaxBase + argmax;
        } else {
          int64_t denom = includePad ? count + padded : count;
          out[o] = denom ? sum / denom : 0.0f;
        }
      }
}

/// Whether every window of w lies inside X (no padding reached, no
/// ceil-mode overhang).
bool windowsInside(const ConvWindow &w) {
  for (int d = 0; d < 3; ++d)
    if (w.pad[d] != 0 || (w.out[d] - 1) * w.stride[d] + (w.k[d] - 1) * w.dil[d] >= w.in[d])
      return false;
  return true;
}

/// poolPlane without bounds tests or an argmax for the outputs of `box`,
/// whose windows lie inside X: the same values in the same order (the
/// maximum as a select, the sum divided by the window size). 8x faster on
/// digits-cnn's 2x2 MaxPool, where poolPlane's data-dependent branch
/// mispredicts; ResNet's padded 3x3 MaxPool takes it for all but its border.
/// KY, KX > 0: the window's y and x extents w.k[1], w.k[2] as constants
/// (the loops over them unrolled; 2x2 and 3x3 are the common windows), 0:
/// read from w.
template <bool Max, int KY, int KX>
void poolPlaneInside(const ConvWindow &w, const float *in, float *out, const InsideBox &box) {
  const int64_t kyN = KY ? KY : w.k[1], kxN = KX ? KX : w.k[2];
  for (int64_t oz = box.lo[0]; oz < box.hi[0]; ++oz)
    for (int64_t oy = box.lo[1]; oy < box.hi[1]; ++oy)
      for (int64_t ox = box.lo[2]; ox < box.hi[2]; ++ox) {
        float best = -INFINITY, sum = 0;
        for (int64_t kz = 0; kz < w.k[0]; ++kz)
          for (int64_t ky = 0; ky < kyN; ++ky) {
            int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0],
                    iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
            const float *row = in + (iz * w.in[1] + iy) * w.in[2] + ox * w.stride[2] - w.pad[2];
            for (int64_t kx = 0; kx < kxN; ++kx) {
              float v = row[kx * w.dil[2]];
              if (Max)
                best = v > best ? v : best;
              else
                sum += v;
            }
          }
        out[(oz * w.out[1] + oy) * w.out[2] + ox] = Max ? best : sum / w.kSize();
      }
}

Status poolKernel(KernelContext &ctx, PoolKind kind) {
  STRAIT_ASSIGN_OR_RETURN(PoolArgs a, poolArgs(ctx));
  const Tensor *x = a.x;
  Tensor *y = a.y, *indices = a.indices;
  const ConvWindow &w = a.window;
  bool includePad = a.countIncludePad;
  int64_t planes = x->shape[0] * x->shape[1];
  InsideBox box = insideBox(w);
  const InsideBox *skip = indices ? nullptr : &box; // Indices: poolPlane's argmax
  bool allInside = skip && windowsInside(w);
  bool isMax = kind == PoolKind::Max;
  bool k22 = w.k[1] == 2 && w.k[2] == 2, k33 = w.k[1] == 3 && w.k[2] == 3;
  auto insideFn = k22   ? (isMax ? poolPlaneInside<true, 2, 2> : poolPlaneInside<false, 2, 2>)
                  : k33 ? (isMax ? poolPlaneInside<true, 3, 3> : poolPlaneInside<false, 3, 3>)
                        : (isMax ? poolPlaneInside<true, 0, 0> : poolPlaneInside<false, 0, 0>);
  parallelFor(planes, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float *in = x->as<float>() + pl * w.inSize();
      float *out = y->as<float>() + pl * w.outSize();
      if (allInside)
        ; // poolPlaneInside's, all of them
      else if (kind == PoolKind::Max)
        poolPlane<true>(w, in, out, indices ? indices->as<int64_t>() + pl * w.outSize() : nullptr,
                        pl * w.inSize(), includePad, skip);
      else
        poolPlane<false>(w, in, out, nullptr, 0, includePad, skip);
      if (skip)
        insideFn(w, in, out, box);
    }
  });
  return Status::ok();
}

Status globalPoolKernel(KernelContext &ctx, PoolKind kind) {
  STRAIT_ASSIGN_OR_RETURN(GlobalPoolArgs a, globalPoolArgs(ctx));
  const int64_t size = a.size;
  parallelFor(a.planes, 16, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float *in = a.x->as<float>() + pl * size;
      double acc = kind == PoolKind::Max ? -INFINITY : 0.0;
      for (int64_t i = 0; i < size; ++i)
        acc = kind == PoolKind::Max ? std::max<double>(acc, in[i]) : acc + in[i];
      a.y->as<float>()[pl] =
          static_cast<float>(kind == PoolKind::Max ? acc : acc / size);
    }
  });
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Gradients (the compiler's graph.ConvGradInput, ConvGradWeight,
// MaxPoolGrad, AveragePoolGrad): the forward window comes from the same
// attributes as the forward op plus the forward input shape (KernelArgs).
//===----------------------------------------------------------------------===//

Status convGradInputKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(ConvGradArgs a, convGradInputArgs(ctx));
  const Tensor *dy = a.dy, *wt = a.operand;
  Tensor *dx = a.out;
  const ConvWindow &w = a.window;
  const Shape &xShape = a.xShape;
  int64_t group = a.group;
  int64_t n = xShape[0], c = xShape[1], m = wt->shape[0], cg = c / group, mg = m / group;
  int64_t kdim = cg * w.kSize(), p = w.outSize();
  if (isDepthwise(c, m, group, w)) {
    depthwiseGradInput(dy->as<float>(), wt->as<float>(), dx->as<float>(), n, c, w);
    return Status::ok();
  }
  // 1x1 stride 1: W_g^T dY is dX itself (col2im would be a copy).
  bool direct = isPointwise(w);
  // With few products per column (digits-cnn's first layer would have 9 x
  // 16) gathering dY costs more than the per-image GEMMs save.
  int64_t block = kdim * mg >= 512 ? imageBlock(n, p, kdim) : 1;
  if (block > 1) {
    // Batched: per block of B images and group, dY's planes side by side,
    // one [kdim x B*P] = W_g^T dY GEMM, col2im into each image's planes
    // (zeroed per block, while they are in cache).
    float *col = scratch((kdim + mg) * block * p), *dyb = col + kdim * block * p;
    for (int64_t i0 = 0; i0 < n; i0 += block) {
      int64_t nb = std::min(block, n - i0), ld = nb * p;
      float *dxb = dx->as<float>() + i0 * c * w.inSize();
      if (!direct)
        std::fill(dxb, dxb + nb * c * w.inSize(), 0.0f);
      for (int64_t g = 0; g < group; ++g) {
        gatherBlock(dy->as<float>() + (i0 * m + g * mg) * p, m * p, nb, mg, p, dyb);
        sgemm(true, false, kdim, ld, mg, 1.0f, wt->as<float>() + g * mg * kdim, kdim, dyb, ld,
              0.0f, col, ld);
        if (direct)
          scatterBlock(col, nb, cg, p, dxb + g * cg * p, c * p);
        else
          col2imBlock(col, nb, cg, w, dxb + g * cg * w.inSize(), c * w.inSize());
      }
    }
    return Status::ok();
  }
  float *col = direct ? nullptr : scratch(kdim * p);
  if (!direct)
    std::fill(dx->as<float>(), dx->as<float>() + dx->numel(), 0.0f);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t g = 0; g < group; ++g) {
      float *dxg = dx->as<float>() + (i * c + g * cg) * w.inSize();
      sgemm(true, false, kdim, p, mg, 1.0f, wt->as<float>() + g * mg * kdim, kdim,
            dy->as<float>() + (i * m + g * mg) * p, p, 0.0f, direct ? dxg : col, p);
      if (!direct)
        col2im(col, cg, w, dxg);
    }
  return Status::ok();
}

Status convGradWeightKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(ConvGradArgs a, convGradWeightArgs(ctx));
  const Tensor *dy = a.dy, *x = a.operand;
  Tensor *dw = a.out;
  const ConvWindow &w = a.window;
  int64_t group = a.group;
  int64_t n = x->shape[0], c = x->shape[1], m = a.wShape[0], cg = c / group, mg = m / group;
  int64_t kdim = cg * w.kSize(), p = w.outSize();
  if (n == 0) {
    std::fill(dw->as<float>(), dw->as<float>() + dw->numel(), 0.0f);
    return Status::ok();
  }
  if (isDepthwise(c, m, group, w)) {
    depthwiseGradWeight(dy->as<float>(), x->as<float>(), dw->as<float>(), n, c, w);
    return Status::ok();
  }
  bool direct = isPointwise(w); // X's planes are the columns: no im2col copy
  // Batched (block > 1): the sum over a block's images folded into the
  // GEMM's K = B*P (X's columns and dY's planes side by side), blocks
  // accumulated into dW in order.
  int64_t block = imageBlock(n, p, kdim);
  float *col = scratch((kdim + (block > 1 ? mg : 0)) * block * p),
        *dyb = col + kdim * block * p;
  for (int64_t i0 = 0; i0 < n; i0 += block) {
    int64_t nb = std::min(block, n - i0), ld = nb * p;
    for (int64_t g = 0; g < group; ++g) {
      const float *xg = x->as<float>() + (i0 * c + g * cg) * w.inSize();
      const float *dyg = dy->as<float>() + (i0 * m + g * mg) * p;
      const float *cols = col;
      if (nb > 1) {
        if (direct)
          gatherBlock(xg, c * p, nb, cg, p, col);
        else
          im2colBlock(xg, c * w.inSize(), nb, cg, w, col);
        gatherBlock(dyg, m * p, nb, mg, p, dyb);
        dyg = dyb;
      } else if (direct) {
        cols = xg;
      } else {
        im2col(xg, cg, w, col);
      }
      sgemm(false, true, mg, kdim, ld, 1.0f, dyg, ld, cols, ld, i0 == 0 ? 0.0f : 1.0f,
            dw->as<float>() + g * mg * kdim, kdim);
    }
  }
  return Status::ok();
}

/// Calls inside(index into the plane) for each position of the window of
/// output (oz, oy, ox) inside X, in (z, y, x) order, and returns the number
/// of positions in the padding: rt::walkWindow without dividing the output
/// index into coordinates.
template <typename F>
inline int64_t walkWindowAt(const ConvWindow &w, int64_t oz, int64_t oy, int64_t ox, F &&inside) {
  int64_t padded = 0;
  for (int64_t kz = 0; kz < w.k[0]; ++kz) {
    int64_t iz = oz * w.stride[0] - w.pad[0] + kz * w.dil[0];
    bool zIn = iz >= 0 && iz < w.in[0], zPad = iz < w.in[0] + w.padEnd[0];
    for (int64_t ky = 0; ky < w.k[1]; ++ky) {
      int64_t iy = oy * w.stride[1] - w.pad[1] + ky * w.dil[1];
      bool rowIn = zIn && iy >= 0 && iy < w.in[1], rowPad = zPad && iy < w.in[1] + w.padEnd[1];
      int64_t rowBase = (iz * w.in[1] + iy) * w.in[2];
      for (int64_t kx = 0; kx < w.k[2]; ++kx) {
        int64_t ix = ox * w.stride[2] - w.pad[2] + kx * w.dil[2];
        if (rowIn && ix >= 0 && ix < w.in[2])
          inside(rowBase + ix);
        else
          padded += rowPad && ix < w.in[2] + w.padEnd[2];
      }
    }
  }
  return padded;
}

/// MaxPoolGrad routes each dY to the first maximum of its window (the
/// window's first position when none is greater, e.g. all NaN);
/// AveragePoolGrad spreads it over the window. Outputs in order, positions
/// in (z, y, x) order: the sums into dX are those of a walk over
/// rt::walkWindow, without its per-output index list and divisions.
Status poolGradKernel(KernelContext &ctx, PoolKind kind) {
  STRAIT_ASSIGN_OR_RETURN(PoolGradArgs a, poolGradArgs(ctx, kind == PoolKind::Max));
  const Tensor *dy = a.dy, *x = a.x;
  Tensor *dx = a.dx;
  const ConvWindow &w = a.window;
  const Shape &xShape = a.xShape;
  bool includePad = a.countIncludePad;
  std::fill(dx->as<float>(), dx->as<float>() + dx->numel(), 0.0f);
  int64_t planes = xShape[0] * xShape[1];
  bool inside = windowsInside(w);
  bool inside2x2 = inside && w.k[0] == 1 && w.k[1] == 2 && w.k[2] == 2;
  // Outputs whose window lies inside X (all but the border of ResNet's
  // padded 3x3 MaxPool) take the select path below.
  InsideBox box = insideBox(w);
  parallelFor(planes, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t pl = p0; pl < p1; ++pl) {
      const float *in = x ? x->as<float>() + pl * w.inSize() : nullptr;
      float *out = dx->as<float>() + pl * w.inSize();
      const float *g = dy->as<float>() + pl * w.outSize();
      int64_t o = 0;
      for (int64_t oz = 0; oz < w.out[0]; ++oz)
        for (int64_t oy = 0; oy < w.out[1]; ++oy)
          for (int64_t ox = 0; ox < w.out[2]; ++ox, ++o) {
            if (kind == PoolKind::Max && inside2x2) {
              // The 2x2 window's first maximum by selects, the index by a
              // mask (GCC turns `gt ? idx : best` into a branch here).
              int64_t i0 = (oz * w.stride[0] * w.in[1] + oy * w.stride[1]) * w.in[2] +
                           ox * w.stride[2];
              int64_t i1 = i0 + w.dil[2], i2 = i0 + w.dil[1] * w.in[2], i3 = i2 + w.dil[2];
              int64_t best = i0;
              float bv = in[i0];
              for (int64_t idx : {i1, i2, i3}) {
                float v = in[idx];
                int64_t mask = -static_cast<int64_t>(v > bv);
                best = (idx & mask) | (best & ~mask);
                bv = v > bv ? v : bv;
              }
              out[best] += g[o];
              continue;
            }
            if (kind == PoolKind::Max && (inside || box.contains(oz, oy, ox))) {
              // The first maximum by selects: no mispredicted branch on
              // the data (a NaN at the first position stays, as below).
              const float *first =
                  in +
                  ((oz * w.stride[0] - w.pad[0]) * w.in[1] + oy * w.stride[1] - w.pad[1]) *
                      w.in[2] +
                  ox * w.stride[2] - w.pad[2];
              int64_t best = first - in;
              float bv = *first;
              for (int64_t kz = 0; kz < w.k[0]; ++kz)
                for (int64_t ky = 0; ky < w.k[1]; ++ky) {
                  int64_t row = (kz * w.dil[0] * w.in[1] + ky * w.dil[1]) * w.in[2];
                  for (int64_t kx = 0; kx < w.k[2]; ++kx) {
                    int64_t idx = (first - in) + row + kx * w.dil[2];
                    float v = in[idx];
                    bool gt = v > bv;
                    best = gt ? idx : best;
                    bv = gt ? v : bv;
                  }
                }
              out[best] += g[o];
              continue;
            }
            if (kind == PoolKind::Max) {
              int64_t best = -1;
              walkWindowAt(w, oz, oy, ox, [&](int64_t idx) {
                if (best < 0 || in[idx] > in[best])
                  best = idx;
              });
              if (best >= 0)
                out[best] += g[o];
              continue;
            }
            int64_t count = 0;
            int64_t padded = walkWindowAt(w, oz, oy, ox, [&](int64_t) { ++count; });
            if (count == 0)
              continue;
            int64_t denom = count + (includePad ? padded : 0);
            walkWindowAt(w, oz, oy, ox, [&](int64_t idx) { out[idx] += g[o] / denom; });
          }
    }
  });
  return Status::ok();
}

} // namespace

void addConvKernels(KernelTable &table) {
  table.add("ConvGradInput", convGradInputKernel);
  table.add("ConvGradWeight", convGradWeightKernel);
  table.add("MaxPoolGrad",
            [](KernelContext &ctx) { return poolGradKernel(ctx, PoolKind::Max); });
  table.add("AveragePoolGrad",
            [](KernelContext &ctx) { return poolGradKernel(ctx, PoolKind::Average); });
  table.add("Conv", convKernel);
  table.add("ConvTranspose", convTransposeKernel);
  table.add("MaxPool",
            [](KernelContext &ctx) { return poolKernel(ctx, PoolKind::Max); });
  table.add("AveragePool", [](KernelContext &ctx) {
    return poolKernel(ctx, PoolKind::Average);
  });
  table.add("GlobalAveragePool", [](KernelContext &ctx) {
    return globalPoolKernel(ctx, PoolKind::Average);
  });
  table.add("GlobalMaxPool", [](KernelContext &ctx) {
    return globalPoolKernel(ctx, PoolKind::Max);
  });
}

} // namespace cpu
} // namespace rt
} // namespace strait
