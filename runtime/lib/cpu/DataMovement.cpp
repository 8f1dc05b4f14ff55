//===- DataMovement.cpp - Shape and layout kernels ------------------------===//
//
// Kernels that move elements without arithmetic, written over bytes so they
// serve every dtype: Identity, Reshape, Flatten, Squeeze, Unsqueeze,
// Transpose, Concat, Split, Slice, Expand, Tile, Pad, DepthToSpace,
// SpaceToDepth; plus Cast and Clip; Dropout (the identity) and
// DropoutTraining (seeded, DropoutMask.h).
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "DropoutMask.h"

#include <cmath>
#include <cstdint>
#include <cstring>

namespace strait {
namespace rt {
namespace cpu {
namespace {

/// dst[i] = src[base + sum(idx_d * strides_d)] over the row-major `out` shape.
void stridedCopy(const char *src, int64_t base, const std::vector<int64_t> &strides,
                 const Shape &out, char *dst, size_t es) {
  std::array<std::vector<int64_t>, 1> st = {strides};
  broadcastRows<1>(out, st, [&](int64_t o, std::array<int64_t, 1> off, int64_t n,
                                std::array<int64_t, 1> s) {
    const char *from = src + (base + off[0]) * es;
    char *to = dst + o * es;
    if (s[0] == 1) {
      std::memcpy(to, from, n * es);
      return;
    }
    // Typed element moves: a memcpy call of a run-time size per element is
    // an order of magnitude slower (Transpose ran at ~1 GB/s).
    auto gather = [&](auto *d, const auto *f) {
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(d + i, f + i * s[0], sizeof(*d));
    };
    switch (es) {
    case 1:
      gather(reinterpret_cast<uint8_t *>(to), reinterpret_cast<const uint8_t *>(from));
      return;
    case 2:
      gather(reinterpret_cast<uint16_t *>(to), reinterpret_cast<const uint16_t *>(from));
      return;
    case 4:
      gather(reinterpret_cast<uint32_t *>(to), reinterpret_cast<const uint32_t *>(from));
      return;
    case 8:
      gather(reinterpret_cast<uint64_t *>(to), reinterpret_cast<const uint64_t *>(from));
      return;
    default:
      for (int64_t i = 0; i < n; ++i)
        std::memcpy(to + i * es, from + i * s[0] * es, es);
    }
  });
}

Status copyKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  if (y->data != x->data)
    std::memcpy(y->data, x->data, x->byteSize());
  return Status::ok();
}

/// Reinterprets the input with a new shape; `shape` was computed by the op.
Status reshapeTo(KernelContext &ctx, const Tensor &x, const Shape &shape) {
  if (numElements(shape) != x.numel())
    return ctx.error("cannot reshape " + x.typeString() + " to " +
                     shapeToString(shape));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, x.dtype));
  if (y->data != x.data)
    std::memcpy(y->data, x.data, x.byteSize());
  return Status::ok();
}

Status dropoutKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  if (const Tensor *training = ctx.input(2))
    if (training->dtype == program::DTYPE_BOOL && training->as<bool>()[0])
      return ctx.unsupported("training_mode=true (use the training op set)");
  STRAIT_RETURN_IF_ERROR(copyKernel(ctx));
  if (ctx.output(1)) {
    STRAIT_ASSIGN_OR_RETURN(Tensor * mask, ctx.requireOutput(1, x->shape, program::DTYPE_BOOL));
    std::memset(mask->data, 1, mask->byteSize());
  }
  return Status::ok();
}

/// y = x * mask / (1 - ratio), mask from DropoutMask.h's hash of the
/// attributes seed, key and replica, input 1 (the i64 "step", the
/// iteration; 0 when absent) and the step's micro-batch. The gradient is
/// this kernel on dY with the forward's key (graph-build-training-step).
Status dropoutTrainingKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  if (x->dtype != program::DTYPE_F32 && !isLowFloat(x->dtype))
    return ctx.error("X must be f32, bf16 or f16, got " + x->typeString());
  STRAIT_ASSIGN_OR_RETURN(DropoutArgs d, readDropoutArgs(ctx));
  int64_t iteration = d.step ? d.step->as<int64_t>()[0] : 0;
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  uint64_t stream = dropoutStream(static_cast<uint64_t>(d.seed), d.key, iteration,
                                  ctx.getMicroBatch(), d.replica);
  uint64_t threshold = dropoutThreshold(d.ratio);
  float scale = 1.0f / (1.0f - d.ratio);
  int64_t n = x->numel();
  if (x->dtype == program::DTYPE_F32) {
    const float *in = x->as<float>();
    float *out = y->as<float>();
    for (int64_t i = 0; i < n; ++i)
      out[i] = dropoutKeeps(stream, i, threshold) ? in[i] * scale : 0.0f;
    return Status::ok();
  }
  const uint16_t *in = x->as<uint16_t>();
  uint16_t *out = y->as<uint16_t>();
  for (int64_t i = 0; i < n; ++i)
    out[i] = floatToLow(x->dtype, dropoutKeeps(stream, i, threshold)
                                      ? lowToFloat(x->dtype, in[i]) * scale
                                      : 0.0f);
  return Status::ok();
}

Status reshapeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *s, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(Shape shape, readInts(ctx, *s));
  STRAIT_ASSIGN_OR_RETURN(int64_t allowZero, ctx.getAttrs().getInt("allowzero", 0));
  int64_t known = 1, inferAt = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0 && !allowZero) {
      if (i >= x->shape.size())
        return ctx.error("shape entry 0 at " + std::to_string(i) + " has no input dim");
      shape[i] = x->shape[i];
    }
    if (shape[i] == -1) {
      if (inferAt >= 0)
        return ctx.error("more than one -1 in shape");
      inferAt = static_cast<int64_t>(i);
    } else if (shape[i] < 0 || __builtin_mul_overflow(known, shape[i], &known)) {
      // (A hostile shape constant: the product used to overflow, which is
      // undefined, found by the program fuzzer's UBSan build.)
      return ctx.error("shape entry " + std::to_string(shape[i]) + " at " + std::to_string(i) +
                       (shape[i] < 0 ? " is negative" : " overflows the element count"));
    }
  }
  if (inferAt >= 0)
    shape[inferAt] = known ? x->numel() / known : 0;
  return reshapeTo(ctx, *x, shape);
}

Status flattenKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, ctx.getAttrs().getInt("axis", 1));
  if (axis < 0)
    axis += x->rank();
  if (axis < 0 || axis > x->rank())
    return ctx.error("axis out of range");
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x->shape[d];
  return reshapeTo(ctx, *x, {outer, outer ? x->numel() / outer : 0});
}

StatusOr<std::vector<int64_t>> axesOf(const KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, ctx.getAttrs().getInts("axes", {}));
  if (const Tensor *t = ctx.input(1)) {
    STRAIT_ASSIGN_OR_RETURN(axes, readInts(ctx, *t));
  }
  return axes;
}

Status squeezeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axesOf(ctx));
  std::vector<bool> drop(x->rank(), axes.empty());
  for (int64_t a : axes) {
    STRAIT_ASSIGN_OR_RETURN(int64_t ax, normalizeAxis(ctx, a, x->rank()));
    if (x->shape[ax] != 1)
      return ctx.error("cannot squeeze dim " + std::to_string(ax) + " of " +
                       x->typeString());
    drop[ax] = true;
  }
  Shape out;
  for (int64_t d = 0; d < x->rank(); ++d)
    if (!(drop[d] && x->shape[d] == 1))
      out.push_back(x->shape[d]);
  return reshapeTo(ctx, *x, out);
}

Status unsqueezeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, axesOf(ctx));
  int64_t rank = x->rank() + static_cast<int64_t>(axes.size());
  std::vector<bool> inserted(rank, false);
  for (int64_t a : axes) {
    STRAIT_ASSIGN_OR_RETURN(int64_t ax, normalizeAxis(ctx, a, rank));
    if (inserted[ax])
      return ctx.error("duplicate axis " + std::to_string(a));
    inserted[ax] = true;
  }
  Shape out;
  size_t next = 0;
  for (int64_t d = 0; d < rank; ++d)
    out.push_back(inserted[d] ? 1 : x->shape[next++]);
  return reshapeTo(ctx, *x, out);
}

Status transposeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  std::vector<int64_t> rev;
  for (int64_t d = x->rank() - 1; d >= 0; --d)
    rev.push_back(d);
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ctx.getAttrs().getInts("perm", rev));
  if (static_cast<int64_t>(perm.size()) != x->rank())
    return ctx.error("perm has " + std::to_string(perm.size()) +
                     " entries for " + x->typeString());
  std::vector<int64_t> inStrides = rowMajorStrides(x->shape), strides;
  Shape out;
  std::vector<bool> seen(x->rank(), false);
  for (int64_t p : perm) {
    if (p < 0 || p >= x->rank() || seen[p])
      return ctx.error("perm is not a permutation");
    seen[p] = true;
    out.push_back(x->shape[p]);
    strides.push_back(inStrides[p]);
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  stridedCopy(x->as<char>(), 0, strides, out, y->as<char>(), dtypeSize(x->dtype));
  return Status::ok();
}

Status concatKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *first, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, first->rank()));
  Shape out = first->shape;
  out[axis] = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(i, first->dtype));
    for (int64_t d = 0; d < first->rank(); ++d)
      if (d != axis && (t->rank() != first->rank() || t->shape[d] != first->shape[d]))
        return ctx.error("input " + std::to_string(i) + " " + t->typeString() +
                         " does not match " + first->typeString());
    out[axis] += t->shape[axis];
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, first->dtype));
  size_t es = dtypeSize(first->dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= out[d];
  for (int64_t d = axis + 1; d < first->rank(); ++d)
    inner *= out[d];
  int64_t rowOut = out[axis] * inner, pos = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor *t = ctx.input(i);
    int64_t row = t->shape[axis] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      char *dst = y->as<char>() + (o * rowOut + pos) * es;
      const char *src = t->as<char>() + o * row * es;
      if (dst != src) // else computed in place (the memory plan's Concat rule)
        std::memcpy(dst, src, row * es);
    }
    pos += row;
  }
  return Status::ok();
}

Status splitKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, x->rank()));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> sizes, ctx.getAttrs().getInts("split", {}));
  if (const Tensor *s = ctx.input(1)) {
    STRAIT_ASSIGN_OR_RETURN(sizes, readInts(ctx, *s));
  }
  int64_t parts = static_cast<int64_t>(ctx.numOutputs()), len = x->shape[axis];
  if (sizes.empty()) {
    int64_t chunk = (len + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i)
      sizes.push_back(std::min(chunk, len - i * chunk));
  }
  int64_t total = 0;
  for (int64_t s : sizes)
    total += s;
  if (static_cast<int64_t>(sizes.size()) != parts || total != len)
    return ctx.error("split sizes do not cover dim " + std::to_string(axis) +
                     " of " + x->typeString() + " in " + std::to_string(parts) +
                     " outputs");
  size_t es = dtypeSize(x->dtype);
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x->shape[d];
  for (int64_t d = axis + 1; d < x->rank(); ++d)
    inner *= x->shape[d];
  int64_t pos = 0;
  for (int64_t i = 0; i < parts; ++i) {
    Shape s = x->shape;
    s[axis] = sizes[i];
    STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(i, s, x->dtype));
    int64_t row = sizes[i] * inner;
    for (int64_t o = 0; o < outer; ++o) {
      char *dst = y->as<char>() + o * row * es;
      const char *src = x->as<char>() + (o * len * inner + pos) * es;
      if (dst != src) // else a view of the input (the memory plan's Split rule)
        std::memcpy(dst, src, row * es);
    }
    pos += row;
  }
  return Status::ok();
}

} // namespace

void addDataMovementKernels(KernelTable &table) {
  table.add("Identity", copyKernel);
  table.add("Dropout", dropoutKernel);
  table.add("DropoutTraining", dropoutTrainingKernel);
  table.add("Reshape", reshapeKernel);
  table.add("Flatten", flattenKernel);
  table.add("Squeeze", squeezeKernel);
  table.add("Unsqueeze", unsqueezeKernel);
  table.add("Transpose", transposeKernel);
  table.add("Concat", concatKernel);
  table.add("Split", splitKernel);
  addLayoutKernels(table);
}

void stridedCopyBytes(const char *src, int64_t base,
                      const std::vector<int64_t> &strides, const Shape &out,
                      char *dst, size_t es) {
  stridedCopy(src, base, strides, out, dst, es);
}

} // namespace cpu
} // namespace rt
} // namespace strait
