//===- KernelArgs.cpp - Operand checks shared by the backends -------------===//

#include "strait/runtime/KernelArgs.h"

#include <algorithm>
#include <string>

namespace strait {
namespace rt {

StatusOr<int64_t> normalizeAxis(const KernelContext &ctx, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= std::max<int64_t>(rank, 1))
    return ctx.error("axis " + std::to_string(axis) + " out of range for rank " +
                     std::to_string(rank));
  return a;
}

namespace {

StatusOr<ElementsArgs> elementsArgs(const KernelContext &ctx) {
  ElementsArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(a.indices, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, ctx.getAttrs().getInt("axis", 0));
  STRAIT_ASSIGN_OR_RETURN(a.axis, normalizeAxis(ctx, axis, a.x->rank()));
  return a;
}

} // namespace

StatusOr<ElementsArgs> gatherElementsArgs(const KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(ElementsArgs a, elementsArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(a.y, ctx.requireOutput(0, a.indices->shape, a.x->dtype));
  return a;
}

StatusOr<ElementsArgs> scatterElementsArgs(const KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(ElementsArgs a, elementsArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(a.updates, ctx.requireInput(2, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(a.reduction, ctx.getAttrs().getString("reduction", "none"));
  if (a.updates->shape != a.indices->shape)
    return ctx.error("updates and indices shapes differ");
  STRAIT_ASSIGN_OR_RETURN(a.y, ctx.requireOutput(0, a.x->shape, a.x->dtype));
  return a;
}

StatusOr<TopKArgs> topKArgs(const KernelContext &ctx, const std::vector<int64_t> &k) {
  TopKArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, ctx.getAttrs().getInt("axis", -1));
  STRAIT_ASSIGN_OR_RETURN(int64_t largest, ctx.getAttrs().getInt("largest", 1));
  STRAIT_ASSIGN_OR_RETURN(a.axis, normalizeAxis(ctx, axis, a.x->rank()));
  a.largest = largest != 0;
  a.len = a.x->rank() ? a.x->shape[a.axis] : 1;
  if (k.size() != 1 || k[0] < 0 || k[0] > a.len)
    return ctx.error("k out of range");
  a.k = k[0];
  for (int64_t d = 0; d < a.axis; ++d)
    a.outer *= a.x->shape[d];
  for (int64_t d = a.axis + 1; d < a.x->rank(); ++d)
    a.inner *= a.x->shape[d];
  Shape out = a.x->shape;
  if (!out.empty())
    out[a.axis] = a.k;
  STRAIT_ASSIGN_OR_RETURN(a.values, ctx.requireOutput(0, out, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(a.indices, ctx.requireOutput(1, out, program::DTYPE_I64));
  return a;
}

StatusOr<AccumulateGradArgs> accumulateGradArgs(const KernelContext &ctx) {
  AccumulateGradArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.grad, ctx.requireInput(0));
  DType g = a.grad->dtype;
  if (g != program::DTYPE_F32 && g != program::DTYPE_BF16 && g != program::DTYPE_F16)
    return ctx.unsupported("grad of dtype " + a.grad->typeString() +
                           " (expected f32, bf16 or f16)");
  STRAIT_ASSIGN_OR_RETURN(int64_t mbs, ctx.getAttrs().getInt("micro_batches", 1));
  if (mbs < 1)
    return ctx.error("micro_batches must be positive");
  int mb = ctx.getMicroBatch();
  if (mbs > 1 && mb < 0)
    return ctx.error("AccumulateGrad over " + std::to_string(mbs) +
                     " micro-batches must run in a step with micro_batch set");
  if (mb >= mbs)
    return ctx.error("micro_batch " + std::to_string(mb) + " >= micro_batches " +
                     std::to_string(mbs));
  // The total is f32 (a 16-bit gradient is widened exactly on load).
  STRAIT_ASSIGN_OR_RETURN(a.total, ctx.requireOutput(0, a.grad->shape, program::DTYPE_F32));
  a.scale = 1.0f / static_cast<float>(mbs);
  a.first = mb <= 0;
  return a;
}

StatusOr<SgdArgs> sgdArgs(const KernelContext &ctx) {
  SgdArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.lr, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.param, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.grad, ctx.requireInput(2));
  if (a.grad->dtype != program::DTYPE_F32 && a.grad->dtype != program::DTYPE_BF16 &&
      a.grad->dtype != program::DTYPE_F16)
    return ctx.unsupported("grad " + a.grad->typeString() + " (f32, bf16 or f16)");
  STRAIT_ASSIGN_OR_RETURN(a.velocity, ctx.requireInput(3, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.momentum, ctx.getAttrs().getFloat("momentum", 0));
  STRAIT_ASSIGN_OR_RETURN(a.weightDecay, ctx.getAttrs().getFloat("weight_decay", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t nesterov, ctx.getAttrs().getInt("nesterov", 0));
  a.nesterov = nesterov != 0;
  if (a.lr->numel() != 1 || a.grad->shape != a.param->shape || a.velocity->shape != a.param->shape)
    return ctx.error("lr must be a scalar and param/grad/velocity shapes equal");
  STRAIT_ASSIGN_OR_RETURN(a.paramOut, ctx.requireOutput(0, a.param->shape, a.param->dtype));
  STRAIT_ASSIGN_OR_RETURN(a.velocityOut, ctx.requireOutput(1, a.param->shape, a.param->dtype));
  if (ctx.numInputs() == 5) {
    STRAIT_ASSIGN_OR_RETURN(a.foundInf, ctx.requireInput(4, program::DTYPE_F32));
    if (a.foundInf->numel() != 1)
      return ctx.error("found_inf must be an f32 scalar");
  }
  return a;
}

StatusOr<UnscaleArgs> unscaleArgs(const KernelContext &ctx) {
  UnscaleArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.scale, ctx.requireInput(0, program::DTYPE_F32));
  if (a.scale->numel() != 1)
    return ctx.error("scale must be an f32 scalar, got " + a.scale->typeString());
  if (ctx.numInputs() < 2 || ctx.numOutputs() != ctx.numInputs())
    return ctx.error("needs a scale and n gradients in, found_inf and n gradients out");
  a.n = ctx.numInputs() - 1;
  STRAIT_ASSIGN_OR_RETURN(a.found, ctx.requireOutput(0, {}, program::DTYPE_F32));
  for (size_t i = 1; i <= a.n; ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *g, ctx.requireInput(i, program::DTYPE_F32));
    STRAIT_RETURN_IF_ERROR(ctx.requireOutput(i, g->shape, g->dtype).getStatus());
  }
  return a;
}

StatusOr<size_t> optimizerGroups(const KernelContext &ctx, size_t groups, size_t outGroups,
                                 size_t lowGroup, bool copyGroup, const Tensor **foundInf) {
  STRAIT_RETURN_IF_ERROR(ctx.requireInput(0).getStatus());
  STRAIT_RETURN_IF_ERROR(ctx.requireInput(1).getStatus());
  size_t rest = ctx.numInputs() - 2;
  if (foundInf) {
    *foundInf = nullptr;
    if (rest % groups == 1) {
      STRAIT_ASSIGN_OR_RETURN(*foundInf, ctx.requireInput(ctx.numInputs() - 1, program::DTYPE_F32));
      if ((*foundInf)->numel() != 1)
        return ctx.error("the trailing found_inf input must be an f32 scalar");
      --rest;
    }
  }
  if (rest == 0 || rest % groups)
    return ctx.error(std::to_string(rest) + " tensor inputs do not form " + std::to_string(groups) +
                     " equal groups");
  size_t n = rest / groups;
  bool copies = copyGroup && ctx.numOutputs() == n * (outGroups + 1);
  if (ctx.numOutputs() != n * outGroups && !copies)
    return ctx.error("expected " + std::to_string(n * outGroups) + " outputs" +
                     (copyGroup ? " (or " + std::to_string(n * (outGroups + 1)) +
                                      " with the parameters' 16-bit copies)"
                                : std::string()) +
                     ", got " + std::to_string(ctx.numOutputs()));
  for (size_t i = 0; i < n; ++i) {
    const Tensor *x = ctx.input(2 + i);
    for (size_t g = 0; g < groups; ++g) {
      const Tensor *in = ctx.input(2 + g * n + i);
      bool low = g == lowGroup && in &&
                 (in->dtype == program::DTYPE_BF16 || in->dtype == program::DTYPE_F16);
      if (!in || (in->dtype != program::DTYPE_F32 && !low) || in->shape != x->shape)
        return ctx.unsupported("optimizer tensors must be f32 of equal shapes" +
                               std::string(lowGroup == kNoLowGroup ? "" : " (gradients may be "
                                                                          "bf16 or f16)") +
                               "; input " + std::to_string(2 + g * n + i) + " is " +
                               (in ? in->typeString() : std::string("absent")) + ", input " +
                               std::to_string(2 + i) + " " + x->typeString());
    }
    for (size_t g = 0; g < outGroups; ++g)
      STRAIT_RETURN_IF_ERROR(ctx.requireOutput(g * n + i, x->shape, x->dtype).getStatus());
    const Tensor *copy = copies ? ctx.output(outGroups * n + i) : nullptr;
    if (copy && (copy->shape != x->shape || (copy->dtype != program::DTYPE_BF16 &&
                                             copy->dtype != program::DTYPE_F16)))
      return ctx.error("output " + std::to_string(outGroups * n + i) + ", the 16-bit copy of input " +
                       std::to_string(2 + i) + " " + x->typeString() + ", is " +
                       copy->typeString() + " (bf16 or f16 of the parameter's shape)");
  }
  return n;
}

StatusOr<AdamWAttrs> adamWAttrs(const KernelContext &ctx) {
  AdamWAttrs a;
  const AttrReader &at = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(a.beta1, at.getFloat("beta1", a.beta1));
  STRAIT_ASSIGN_OR_RETURN(a.beta2, at.getFloat("beta2", a.beta2));
  STRAIT_ASSIGN_OR_RETURN(a.epsilon, at.getFloat("epsilon", a.epsilon));
  STRAIT_ASSIGN_OR_RETURN(a.weightDecay, at.getFloat("weight_decay", a.weightDecay));
  STRAIT_ASSIGN_OR_RETURN(a.freezeVarianceAfter, at.getInt("freeze_variance_after", 0));
  if (a.freezeVarianceAfter < 0)
    return ctx.error("freeze_variance_after must be >= 0 (0: never), got " +
                     std::to_string(a.freezeVarianceAfter));
  return a;
}

StatusOr<ConvWindow> convWindow(const KernelContext &ctx, const Shape &x,
                                const std::vector<int64_t> &kernel, bool pooling) {
  ConvWindow w;
  w.nd = static_cast<int>(x.size()) - 2;
  if (w.nd < 1 || w.nd > 3)
    return ctx.unsupported("only 1-3 spatial dimensions, got input " + shapeToString(x));
  if (static_cast<int>(kernel.size()) != w.nd)
    return ctx.error("kernel_shape has " + std::to_string(kernel.size()) + " entries for " +
                     std::to_string(w.nd) + " spatial dims");
  const AttrReader &attrs = ctx.getAttrs();
  std::vector<int64_t> ones(w.nd, 1), zeros(2 * w.nd, 0);
  STRAIT_ASSIGN_OR_RETURN(auto strides, attrs.getInts("strides", ones));
  STRAIT_ASSIGN_OR_RETURN(auto dils, attrs.getInts("dilations", ones));
  STRAIT_ASSIGN_OR_RETURN(auto pads, attrs.getInts("pads", zeros));
  STRAIT_ASSIGN_OR_RETURN(std::string autoPad, attrs.getString("auto_pad", "NOTSET"));
  STRAIT_ASSIGN_OR_RETURN(int64_t ceilMode, attrs.getInt("ceil_mode", 0));
  if (static_cast<int>(strides.size()) != w.nd || static_cast<int>(dils.size()) != w.nd ||
      static_cast<int>(pads.size()) != 2 * w.nd)
    return ctx.error("strides/dilations/pads do not match the spatial rank");
  bool ceil = ceilMode != 0 && pooling;
  for (int d = 0; d < w.nd; ++d) {
    // A zero stride would divide by zero below; a zero dilation or kernel
    // size is no window.
    for (auto [name, v] : {std::pair<const char *, int64_t>{"strides", strides[d]},
                           {"dilations", dils[d]},
                           {"kernel_shape", kernel[d]}})
      if (v < 1)
        return ctx.error(std::string(name) + " must be positive, got " + std::to_string(v) +
                         " along spatial dim " + std::to_string(d));
    int64_t in = x[2 + d], s = strides[d], eff = (kernel[d] - 1) * dils[d] + 1;
    int64_t pb = pads[d], pe = pads[d + w.nd], out;
    if (autoPad == "SAME_UPPER" || autoPad == "SAME_LOWER") {
      out = (in + s - 1) / s;
      int64_t total = std::max<int64_t>(0, (out - 1) * s + eff - in);
      pb = autoPad == "SAME_UPPER" ? total / 2 : total - total / 2;
      pe = total - pb;
    } else if (autoPad == "VALID") {
      pb = pe = 0;
      out = (in - eff) / s + 1;
    } else if (autoPad == "NOTSET") {
      int64_t span = in + pb + pe - eff;
      out = (ceil ? (span + s - 1) / s : span / s) + 1;
      if (ceil && (out - 1) * s >= in + pb)
        --out;
    } else {
      return ctx.error("unknown auto_pad '" + autoPad + "'");
    }
    if (out <= 0)
      return ctx.error("empty output along spatial dim " + std::to_string(d));
    int slot = 3 - w.nd + d;
    w.in[slot] = in;
    w.out[slot] = out;
    w.k[slot] = kernel[d];
    w.stride[slot] = s;
    w.dil[slot] = dils[d];
    w.pad[slot] = pb;
    w.padEnd[slot] = pe;
  }
  return w;
}

Shape windowOutputShape(int64_t n, int64_t c, const ConvWindow &w) {
  Shape s = {n, c};
  for (int d = 3 - w.nd; d < 3; ++d)
    s.push_back(w.out[d]);
  return s;
}

namespace {

/// A shape attribute that must be present and non-empty.
StatusOr<Shape> shapeAttr(const KernelContext &ctx, const char *name) {
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> v, ctx.getAttrs().getInts(name, {}));
  if (v.empty())
    return ctx.error("missing attribute '" + std::string(name) + "'");
  return Shape(v.begin(), v.end());
}

} // namespace

StatusOr<ConvArgs> convArgs(const KernelContext &ctx) {
  ConvArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.w, ctx.requireInput(1, program::DTYPE_F32));
  a.bias = ctx.input(2);
  STRAIT_ASSIGN_OR_RETURN(a.group, ctx.getAttrs().getInt("group", 1));
  const Tensor &x = *a.x, &wt = *a.w;
  if (x.rank() < 3 || wt.rank() != x.rank())
    return ctx.error("X " + x.typeString() + " and W " + wt.typeString() +
                     " ranks do not fit a convolution");
  int64_t c = x.shape[1], m = wt.shape[0];
  if (a.group < 1 || c % a.group || m % a.group || wt.shape[1] != c / a.group)
    return ctx.error("channels " + std::to_string(c) + " / W " + wt.typeString() +
                     " do not fit group " + std::to_string(a.group));
  std::vector<int64_t> kshape(wt.shape.begin() + 2, wt.shape.end());
  STRAIT_ASSIGN_OR_RETURN(auto kattr, ctx.getAttrs().getInts("kernel_shape", kshape));
  if (kattr != kshape)
    return ctx.error("kernel_shape attribute disagrees with W " + wt.typeString());
  STRAIT_ASSIGN_OR_RETURN(a.window, convWindow(ctx, x.shape, kshape, false));
  STRAIT_ASSIGN_OR_RETURN(
      a.y, ctx.requireOutput(0, windowOutputShape(x.shape[0], m, a.window), program::DTYPE_F32));
  if (a.bias && (a.bias->dtype != program::DTYPE_F32 || a.bias->numel() != m))
    return ctx.error("bias " + a.bias->typeString() + " does not have " + std::to_string(m) +
                     " f32 entries");
  return a;
}

StatusOr<ConvGradArgs> convGradInputArgs(const KernelContext &ctx) {
  ConvGradArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.operand, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.xShape, shapeAttr(ctx, "input_shape"));
  STRAIT_ASSIGN_OR_RETURN(a.group, ctx.getAttrs().getInt("group", 1));
  const Tensor &dy = *a.dy, &wt = *a.operand;
  const Shape &xs = a.xShape;
  if (xs.size() < 3 || xs.size() != dy.shape.size() || wt.rank() != dy.rank() || a.group < 1 ||
      xs[1] % a.group || wt.shape[0] != dy.shape[1] || wt.shape[1] * a.group != xs[1])
    return ctx.error("dY " + dy.typeString() + ", W " + wt.typeString() + " and input_shape " +
                     shapeToString(xs) + " do not fit");
  a.wShape = wt.shape;
  std::vector<int64_t> kshape(wt.shape.begin() + 2, wt.shape.end());
  STRAIT_ASSIGN_OR_RETURN(a.window, convWindow(ctx, xs, kshape, false));
  if (windowOutputShape(xs[0], wt.shape[0], a.window) != dy.shape)
    return ctx.error("dY " + dy.typeString() + " is not the forward output shape");
  STRAIT_ASSIGN_OR_RETURN(a.out, ctx.requireOutput(0, xs, program::DTYPE_F32));
  return a;
}

StatusOr<ConvGradArgs> convGradWeightArgs(const KernelContext &ctx) {
  ConvGradArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.operand, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(a.wShape, shapeAttr(ctx, "weight_shape"));
  STRAIT_ASSIGN_OR_RETURN(a.group, ctx.getAttrs().getInt("group", 1));
  const Tensor &dy = *a.dy, &x = *a.operand;
  const Shape &ws = a.wShape;
  if (x.rank() < 3 || ws.size() != x.shape.size() || dy.rank() != x.rank() || a.group < 1 ||
      x.shape[1] % a.group || ws[1] * a.group != x.shape[1] || ws[0] != dy.shape[1])
    return ctx.error("dY " + dy.typeString() + ", X " + x.typeString() + " and weight_shape " +
                     shapeToString(ws) + " do not fit");
  a.xShape = x.shape;
  std::vector<int64_t> kshape(ws.begin() + 2, ws.end());
  STRAIT_ASSIGN_OR_RETURN(a.window, convWindow(ctx, x.shape, kshape, false));
  if (windowOutputShape(x.shape[0], ws[0], a.window) != dy.shape)
    return ctx.error("dY " + dy.typeString() + " is not the forward output shape");
  STRAIT_ASSIGN_OR_RETURN(a.out, ctx.requireOutput(0, ws, program::DTYPE_F32));
  return a;
}

StatusOr<PoolArgs> poolArgs(const KernelContext &ctx) {
  PoolArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.x, ctx.requireInput(0, program::DTYPE_F32));
  std::vector<int64_t> none;
  STRAIT_ASSIGN_OR_RETURN(auto kshape, ctx.getAttrs().getInts("kernel_shape", none));
  STRAIT_ASSIGN_OR_RETURN(int64_t includePad, ctx.getAttrs().getInt("count_include_pad", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t storageOrder, ctx.getAttrs().getInt("storage_order", 0));
  a.countIncludePad = includePad != 0;
  if (a.x->rank() < 3)
    return ctx.error("input must have rank >= 3, got " + a.x->typeString());
  STRAIT_ASSIGN_OR_RETURN(a.window, convWindow(ctx, a.x->shape, kshape, true));
  Shape outShape = windowOutputShape(a.x->shape[0], a.x->shape[1], a.window);
  STRAIT_ASSIGN_OR_RETURN(a.y, ctx.requireOutput(0, outShape, program::DTYPE_F32));
  if (ctx.output(1)) {
    STRAIT_ASSIGN_OR_RETURN(a.indices, ctx.requireOutput(1, outShape, program::DTYPE_I64));
    if (storageOrder != 0)
      return ctx.unsupported("storage_order=1 for Indices");
  }
  return a;
}

StatusOr<GlobalPoolArgs> globalPoolArgs(const KernelContext &ctx) {
  GlobalPoolArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.x, ctx.requireInput(0, program::DTYPE_F32));
  if (a.x->rank() < 3)
    return ctx.error("input must have rank >= 3, got " + a.x->typeString());
  Shape outShape(a.x->shape.size(), 1);
  outShape[0] = a.x->shape[0];
  outShape[1] = a.x->shape[1];
  STRAIT_ASSIGN_OR_RETURN(a.y, ctx.requireOutput(0, outShape, program::DTYPE_F32));
  a.planes = a.x->shape[0] * a.x->shape[1];
  a.size = a.x->numel() / std::max<int64_t>(a.planes, 1);
  return a;
}

StatusOr<PoolGradArgs> poolGradArgs(const KernelContext &ctx, bool max) {
  PoolGradArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.dy, ctx.requireInput(0, program::DTYPE_F32));
  if (max) {
    STRAIT_ASSIGN_OR_RETURN(a.x, ctx.requireInput(1, program::DTYPE_F32));
    a.xShape = a.x->shape;
  } else {
    STRAIT_ASSIGN_OR_RETURN(a.xShape, shapeAttr(ctx, "input_shape"));
  }
  std::vector<int64_t> none;
  STRAIT_ASSIGN_OR_RETURN(auto kshape, ctx.getAttrs().getInts("kernel_shape", none));
  STRAIT_ASSIGN_OR_RETURN(int64_t includePad, ctx.getAttrs().getInt("count_include_pad", 0));
  a.countIncludePad = includePad != 0;
  if (a.xShape.size() < 3)
    return ctx.error("input must have rank >= 3");
  STRAIT_ASSIGN_OR_RETURN(a.window, convWindow(ctx, a.xShape, kshape, true));
  if (windowOutputShape(a.xShape[0], a.xShape[1], a.window) != a.dy->shape)
    return ctx.error("dY " + a.dy->typeString() + " is not the forward output shape");
  STRAIT_ASSIGN_OR_RETURN(a.dx, ctx.requireOutput(0, a.xShape, program::DTYPE_F32));
  return a;
}

// --- FusedAttention ----------------------------------------------------------

int64_t AttentionArgs::keyEnd(int64_t i) const {
  if (!causal)
    return tk;
  return std::clamp<int64_t>(i + 1 + (tk - tq), 0, tk);
}

int64_t AttentionArgs::biasOffset(int64_t b) const {
  int64_t off = 0;
  for (int64_t dim = static_cast<int64_t>(batch.size()) - 1; dim >= 0; --dim) {
    off += (b % batch[dim]) * biasStrides[dim];
    b /= batch[dim];
  }
  return off;
}

int64_t AttnLayout::offset(int64_t b, const Shape &dims) const {
  int64_t off = base;
  for (int64_t dim = static_cast<int64_t>(dims.size()) - 1; dim >= 0; --dim) {
    off += (b % dims[dim]) * batch[dim];
    b /= dims[dim];
  }
  return off;
}

bool AttnLayout::dense(const Shape &dims, int64_t rows, int64_t cols) const {
  if (base != 0 || col != 1 || row != cols)
    return false;
  int64_t stride = rows * cols;
  for (int64_t dim = static_cast<int64_t>(dims.size()) - 1; dim >= 0; --dim) {
    if (dims[dim] != 1 && batch[dim] != stride)
      return false;
    stride *= dims[dim];
  }
  return true;
}

namespace {

/// The permutation attribute `attr` of an operand of rank `rank` (the
/// identity when absent).
StatusOr<std::vector<int64_t>> attentionPerm(const KernelContext &ctx, const char *attr,
                                             size_t rank) {
  std::vector<int64_t> id(rank);
  for (size_t i = 0; i < rank; ++i)
    id[i] = static_cast<int64_t>(i);
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ctx.getAttrs().getInts(attr, id));
  std::vector<bool> seen(rank, false);
  bool ok = perm.size() == rank;
  for (int64_t p : perm) {
    ok = ok && p >= 0 && p < static_cast<int64_t>(rank) && !seen[p];
    if (ok)
      seen[p] = true;
  }
  if (!ok) {
    std::string list;
    for (int64_t p : perm)
      list += (list.empty() ? "" : ",") + std::to_string(p);
    return ctx.error(std::string("attribute ") + attr + " [" + list + "] is not a permutation of " +
                     std::to_string(rank) + " dimensions");
  }
  return perm;
}

/// Row-major element strides of `shape`.
std::vector<int64_t> denseStrides(const Shape &shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t k = shape.size(); k-- > 1;)
    strides[k - 1] = strides[k] * shape[k];
  return strides;
}

/// The logical shape (dimension i is the tensor's perm[i]) and layout of
/// an operand of shape `shape` at element `strides` of its tensor.
Shape permutedLayout(const Shape &shape, const std::vector<int64_t> &strides,
                     const std::vector<int64_t> &perm, AttnLayout &l) {
  size_t r = shape.size();
  Shape logical(r);
  l.batch.assign(r - 2, 0);
  for (size_t i = 0; i < r; ++i) {
    logical[i] = shape[perm[i]];
    int64_t st = strides[perm[i]];
    if (i + 2 < r)
      l.batch[i] = st;
    else if (i + 2 == r)
      l.row = st;
    else
      l.col = st;
  }
  return logical;
}
Shape permutedLayout(const Shape &shape, const std::vector<int64_t> &perm, AttnLayout &l) {
  return permutedLayout(shape, denseStrides(shape), perm, l);
}

/// An operand selected out of a packed tensor: its shape, strides and
/// base offset there.
struct Selected {
  Shape shape;
  std::vector<int64_t> strides;
  int64_t base = 0;
};

/// The operand that tensor `t` stands for under the select attribute
/// `attr` ([axis, index]; absent: the tensor itself).
StatusOr<Selected> selectedOperand(const KernelContext &ctx, const char *name, const char *attr,
                                   const Tensor &t) {
  Selected s{t.shape, denseStrides(t.shape), 0};
  if (!ctx.getAttrs().has(attr))
    return s;
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> sel, ctx.getAttrs().getInts(attr, {}));
  int64_t r = static_cast<int64_t>(t.rank());
  if (sel.size() != 2 || sel[0] < 0 || sel[0] >= r || sel[1] < 0 || sel[1] >= t.shape[sel[0]]) {
    std::string list;
    for (int64_t v : sel)
      list += (list.empty() ? "" : ",") + std::to_string(v);
    return ctx.error(std::string("attribute ") + attr + " [" + list + "] is not an [axis, index] of " +
                     name + " " + t.typeString());
  }
  s.base = sel[1] * s.strides[sel[0]];
  s.shape.erase(s.shape.begin() + sel[0]);
  s.strides.erase(s.strides.begin() + sel[0]);
  return s;
}

/// The tensor shape of a logical operand `logical` laid out by `perm`.
Shape unpermuted(const Shape &logical, const std::vector<int64_t> &perm) {
  Shape s(logical.size());
  for (size_t i = 0; i < logical.size(); ++i)
    s[perm[i]] = logical[i];
  return s;
}

/// " (tensor shape S, <attr> [p...])" when the operand is permuted.
std::string permNote(const Tensor &t, const char *attr, const std::vector<int64_t> &perm) {
  bool identity = true;
  for (size_t i = 0; i < perm.size(); ++i)
    identity = identity && perm[i] == static_cast<int64_t>(i);
  if (identity)
    return "";
  std::string list;
  for (int64_t p : perm)
    list += (list.empty() ? "" : ",") + std::to_string(p);
  return " (logical shape of tensor " + t.typeString() + " under " + attr + " [" + list + "])";
}

Shape withTail(const Shape &batch, std::initializer_list<int64_t> tail) {
  Shape s = batch;
  s.insert(s.end(), tail);
  return s;
}

/// Output `i` named `name` must be declared `dtype` `shape`.
StatusOr<Tensor *> attentionOutput(const KernelContext &ctx, size_t i, const char *name,
                                   const Shape &shape, DType dtype) {
  Tensor *t = ctx.output(i);
  if (!t)
    return ctx.error(std::string("missing output ") + name);
  if (t->shape != shape || t->dtype != dtype)
    return ctx.error(std::string("output ") + name + " is declared " + t->typeString() +
                     " but the op computes " + dtypeName(dtype) + shapeToString(shape));
  return t;
}

/// Bias: f32 or Q's dtype, rank <= rank of the scores, broadcastable to
/// them; sets a.biasStrides.
Status checkAttentionBias(const KernelContext &ctx, AttentionArgs &a) {
  const Tensor &b = *a.bias;
  Shape scores = withTail(a.batch, {a.tq, a.tk});
  size_t r = scores.size();
  if (b.dtype != program::DTYPE_F32 && b.dtype != a.dtype)
    return ctx.unsupported("Bias " + b.typeString() + " must be f32 or " + dtypeName(a.dtype) +
                           " (the dtype of Q)");
  std::string broadcast = "Bias " + b.typeString() + " does not broadcast to the scores " +
                          shapeToString(scores) + " ([b..., Tq, Tk])";
  if (b.rank() > r)
    return ctx.error(broadcast);
  a.biasStrides.assign(r, 0);
  int64_t stride = 1;
  for (size_t k = 0; k < b.rank(); ++k) {
    size_t bd = b.rank() - 1 - k, od = r - 1 - k;
    int64_t dim = b.shape[bd];
    if (dim != 1 && dim != scores[od])
      return ctx.error(broadcast);
    a.biasStrides[od] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  return Status::ok();
}

/// Q, Kt, V at qIndex.., the optional Bias at biasIndex and the attributes;
/// the layouts of Q, Kt, V and Y (y_perm checked against Q's rank).
StatusOr<AttentionArgs> attentionOperands(const KernelContext &ctx, size_t qIndex,
                                          size_t biasIndex) {
  AttentionArgs a;
  const char *names[3] = {"Q", "Kt", "V"};
  const char *permAttrs[3] = {"q_perm", "kt_perm", "v_perm"};
  const Tensor *t[3];
  for (size_t k = 0; k < 3; ++k) {
    t[k] = ctx.input(qIndex + k);
    if (!t[k])
      return ctx.error(std::string("missing operand ") + names[k]);
  }
  a.q = t[0];
  a.kt = t[1];
  a.v = t[2];
  DType dt = a.q->dtype;
  if (dt != program::DTYPE_F32 && dt != program::DTYPE_BF16 && dt != program::DTYPE_F16)
    return ctx.unsupported("Q " + a.q->typeString() + ": expected f32, bf16 or f16");
  for (size_t k = 1; k < 3; ++k)
    if (t[k]->dtype != dt)
      return ctx.error(std::string("dtype mix: ") + names[k] + " " + t[k]->typeString() +
                       " with Q " + a.q->typeString() + " (Q, Kt and V must share one dtype)");
  a.dtype = dt;
  // The selected operands (q_select, ...): shapes, strides, base offsets.
  const char *selectAttrs[3] = {"q_select", "kt_select", "v_select"};
  Selected sel[3];
  for (size_t k = 0; k < 3; ++k) {
    STRAIT_ASSIGN_OR_RETURN(sel[k], selectedOperand(ctx, names[k], selectAttrs[k], *t[k]));
  }
  auto selNote = [&](size_t k) {
    return ctx.getAttrs().has(selectAttrs[k])
               ? " (" + std::string(selectAttrs[k]) + " of " + t[k]->typeString() + ")"
               : std::string();
  };
  size_t r = sel[0].shape.size();
  if (r < 2)
    return ctx.error("Q " + shapeToString(sel[0].shape) + selNote(0) +
                     " must have rank >= 2 ([b..., Tq, D])");
  for (size_t k = 1; k < 3; ++k)
    if (sel[k].shape.size() != r)
      return ctx.error(std::string(names[k]) + " " + shapeToString(sel[k].shape) + selNote(k) +
                       " must have the rank of Q " + shapeToString(sel[0].shape) + selNote(0));
  // Logical shapes (under the operands' permutations) and their layouts;
  // the gradients' layouts are the operands' without the select.
  AttnLayout *layouts[3] = {&a.qL, &a.ktL, &a.vL}, *gradLayouts[3] = {&a.dqL, &a.dktL, &a.dvL};
  Shape *gradShapes[3] = {&a.dqShape, &a.dktShape, &a.dvShape};
  Shape l[3];
  std::string desc[3];
  for (size_t k = 0; k < 3; ++k) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> perm, attentionPerm(ctx, permAttrs[k], r));
    l[k] = permutedLayout(sel[k].shape, sel[k].strides, perm, *layouts[k]);
    layouts[k]->base = sel[k].base;
    permutedLayout(sel[k].shape, perm, *gradLayouts[k]);
    *gradShapes[k] = sel[k].shape;
    desc[k] = std::string(names[k]) + " " + dtypeName(dt) + shapeToString(l[k]) +
              permNote(*t[k], permAttrs[k], perm) + selNote(k);
  }
  STRAIT_ASSIGN_OR_RETURN(a.yPerm, attentionPerm(ctx, "y_perm", r));
  a.batch.assign(l[0].begin(), l[0].end() - 2);
  a.nBatch = numElements(a.batch);
  a.tq = l[0][r - 2];
  a.d = l[0][r - 1];
  a.tk = l[1][r - 1];
  a.dv = l[2][r - 1];
  Shape ktWant = withTail(a.batch, {a.d, a.tk}), vWant = withTail(a.batch, {a.tk, a.dv});
  for (size_t k = 1; k < 3; ++k)
    if (!std::equal(a.batch.begin(), a.batch.end(), l[k].begin()))
      return ctx.error(desc[k] + " has other batch dims than " + desc[0] + " (must be " +
                       shapeToString(k == 1 ? ktWant : vWant) + ")");
  if (l[1][r - 2] != a.d)
    return ctx.error(desc[1] + " must be " + shapeToString(ktWant) +
                     " ([b..., D, Tk]): D=" + std::to_string(l[1][r - 2]) + " but " + desc[0] +
                     " has D=" + std::to_string(a.d));
  if (l[2][r - 2] != a.tk)
    return ctx.error(desc[2] + " must be " + shapeToString(vWant) +
                     " ([b..., Tk, Dv]): " + std::to_string(l[2][r - 2]) + " rows but " + desc[1] +
                     " has Tk=" + std::to_string(a.tk));
  a.yShape = unpermuted(withTail(a.batch, {a.tq, a.dv}), a.yPerm);
  permutedLayout(a.yShape, a.yPerm, a.yL);
  a.bias = ctx.input(biasIndex);
  if (a.bias)
    STRAIT_RETURN_IF_ERROR(checkAttentionBias(ctx, a));
  if (!ctx.getAttrs().has("scale"))
    return ctx.error("missing required attribute 'scale'");
  STRAIT_ASSIGN_OR_RETURN(a.scale, ctx.getAttrs().getFloat("scale", 1.0f));
  STRAIT_ASSIGN_OR_RETURN(int64_t causal, ctx.getAttrs().getInt("causal", 0));
  if (causal != 0 && causal != 1)
    return ctx.error("attribute causal must be 0 or 1, got " + std::to_string(causal));
  a.causal = causal == 1;
  return a;
}

/// packed_grad = 1: one output, the gradient of the packed tensor Q, Kt and V
/// are slices 0, 1, 2 of (one axis of size 3, tensors of one shape); dQ,
/// dKt and dV are its slices, laid out as their operands.
StatusOr<AttentionArgs> packedGradOutput(const KernelContext &ctx, AttentionArgs &a) {
  const char *attrs[3] = {"q_select", "kt_select", "v_select"};
  std::vector<int64_t> sel[3];
  bool seen[3] = {false, false, false};
  bool ok = a.q->shape == a.kt->shape && a.q->shape == a.v->shape;
  for (size_t k = 0; k < 3 && ok; ++k) {
    ok = ctx.getAttrs().has(attrs[k]);
    if (!ok)
      break;
    STRAIT_ASSIGN_OR_RETURN(sel[k], ctx.getAttrs().getInts(attrs[k], {}));
    ok = sel[k].size() == 2 && sel[k][0] == sel[0][0] && sel[k][1] >= 0 && sel[k][1] < 3 &&
         !seen[sel[k][1]] && a.q->shape[sel[k][0]] == 3;
    if (ok)
      seen[sel[k][1]] = true;
  }
  if (!ok)
    return ctx.error("packed_grad needs Q, Kt and V of one shape (Q " + a.q->typeString() +
                     ", Kt " + a.kt->typeString() + ", V " + a.v->typeString() +
                     ") with q_select, kt_select and v_select taking indices 0, 1, 2 of one "
                     "axis of size 3");
  STRAIT_ASSIGN_OR_RETURN(a.out[0], attentionOutput(ctx, 0, "dQKV", a.q->shape, a.dtype));
  if (ctx.output(1))
    return ctx.error("packed_grad has one output (dQKV), got more");
  a.out[1] = a.out[2] = a.out[0];
  a.dqL = a.qL;
  a.dktL = a.ktL;
  a.dvL = a.vL;
  return a;
}

} // namespace

StatusOr<AttentionArgs> fusedAttentionArgs(const KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(AttentionArgs a, attentionOperands(ctx, 0, 3));
  STRAIT_ASSIGN_OR_RETURN(a.out[0], attentionOutput(ctx, 0, "Y", a.yShape, a.dtype));
  STRAIT_ASSIGN_OR_RETURN(
      a.out[1], attentionOutput(ctx, 1, "LSE", withTail(a.batch, {a.tq}), program::DTYPE_F32));
  return a;
}

StatusOr<AttentionArgs> fusedAttentionGradArgs(const KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(AttentionArgs a, attentionOperands(ctx, 1, 6));
  const Shape &yShape = a.yShape;
  Shape lseShape = withTail(a.batch, {a.tq});
  a.dy = ctx.input(0);
  a.y = ctx.input(4);
  a.lse = ctx.input(5);
  if (!a.dy || !a.y || !a.lse)
    return ctx.error(std::string("missing operand ") + (!a.dy ? "dY" : !a.y ? "Y" : "LSE"));
  if (a.dy->shape != yShape || a.dy->dtype != a.dtype)
    return ctx.error("dY " + a.dy->typeString() + " must be " + dtypeName(a.dtype) +
                     shapeToString(yShape) + " (the type of Y)");
  if (a.y->shape != yShape || a.y->dtype != a.dtype)
    return ctx.error("Y " + a.y->typeString() + " must be " + dtypeName(a.dtype) +
                     shapeToString(yShape) +
                     " ([b..., Tq, Dv] laid out by y_perm, the dtype of Q)");
  if (a.lse->shape != lseShape || a.lse->dtype != program::DTYPE_F32)
    return ctx.error("LSE " + a.lse->typeString() + " must be f32" + shapeToString(lseShape) +
                     " ([b..., Tq])");
  STRAIT_ASSIGN_OR_RETURN(int64_t packed, ctx.getAttrs().getInt("packed_grad", 0));
  if (packed != 0 && packed != 1)
    return ctx.error("attribute packed_grad must be 0 or 1, got " + std::to_string(packed));
  if (packed == 1)
    return packedGradOutput(ctx, a);
  STRAIT_ASSIGN_OR_RETURN(a.out[0], attentionOutput(ctx, 0, "dQ", a.dqShape, a.dtype));
  STRAIT_ASSIGN_OR_RETURN(a.out[1], attentionOutput(ctx, 1, "dKt", a.dktShape, a.dtype));
  STRAIT_ASSIGN_OR_RETURN(a.out[2], attentionOutput(ctx, 2, "dV", a.dvShape, a.dtype));
  return a;
}


// --- FusedRotaryEmbedding ----------------------------------------------------

int64_t RotaryArgs::rowOffset(const std::vector<int64_t> &strides, int64_t row) const {
  const Shape &shape = x->shape;
  int64_t off = 0;
  for (int64_t dim = static_cast<int64_t>(shape.size()) - 2; dim >= 0; --dim) {
    off += (row % shape[dim]) * strides[dim];
    row /= shape[dim];
  }
  return off;
}

namespace {

/// Cos or Sin (operand `name`): f32 or X's dtype, broadcastable to X's
/// shape without widening it; its broadcast strides.
StatusOr<std::vector<int64_t>> rotaryTableStrides(const KernelContext &ctx, const char *name,
                                                 const Tensor *t, const Tensor &x) {
  if (!t)
    return ctx.error(std::string("missing operand ") + name);
  if (t->dtype != program::DTYPE_F32 && t->dtype != x.dtype)
    return ctx.unsupported(std::string(name) + " " + t->typeString() + " must be f32 or " +
                           dtypeName(x.dtype) + " (the dtype of X)");
  int64_t r = x.rank();
  std::string broadcast = std::string(name) + " " + t->typeString() +
                          " does not broadcast to X " + x.typeString() +
                          " (each dim 1 or X's, aligned from the right, rank <= X's)";
  if (t->rank() > r)
    return ctx.error(broadcast);
  std::vector<int64_t> strides(r, 0);
  int64_t stride = 1;
  for (int64_t k = 0; k < t->rank(); ++k) {
    int64_t td = t->rank() - 1 - k, xd = r - 1 - k;
    int64_t dim = t->shape[td];
    if (dim != 1 && dim != x.shape[xd])
      return ctx.error(broadcast);
    strides[xd] = dim == 1 ? 0 : stride;
    stride *= dim;
  }
  return strides;
}

} // namespace

StatusOr<RotaryArgs> fusedRotaryEmbeddingArgs(const KernelContext &ctx) {
  RotaryArgs a;
  a.x = ctx.input(0);
  if (!a.x)
    return ctx.error("missing operand X");
  const Tensor &x = *a.x;
  DType dt = x.dtype;
  if (dt != program::DTYPE_F32 && dt != program::DTYPE_BF16 && dt != program::DTYPE_F16)
    return ctx.unsupported("X " + x.typeString() + ": expected f32, bf16 or f16");
  if (x.rank() < 1)
    return ctx.error("X " + x.typeString() + " must have rank >= 1 ([..., D])");
  a.d = x.shape.back();
  if (a.d <= 0 || a.d % 2)
    return ctx.error("X " + x.typeString() + " has last dim D=" + std::to_string(a.d) +
                     " (must be even and > 0: the two halves rotate together)");
  a.h = a.d / 2;
  a.rows = x.numel() / a.d;
  STRAIT_ASSIGN_OR_RETURN(a.cosStrides, rotaryTableStrides(ctx, "Cos", ctx.input(1), x));
  a.cos = ctx.input(1);
  STRAIT_ASSIGN_OR_RETURN(a.sinStrides, rotaryTableStrides(ctx, "Sin", ctx.input(2), x));
  a.sin = ctx.input(2);
  STRAIT_ASSIGN_OR_RETURN(int64_t adjoint, ctx.getAttrs().getInt("adjoint", 0));
  if (adjoint != 0 && adjoint != 1)
    return ctx.error("attribute adjoint must be 0 or 1, got " + std::to_string(adjoint));
  a.adjoint = adjoint == 1;
  a.y = ctx.output(0);
  if (!a.y)
    return ctx.error("missing output Y");
  if (a.y->shape != x.shape || a.y->dtype != dt)
    return ctx.error("output Y is declared " + a.y->typeString() + " but the op computes " +
                     x.typeString() + " (the type of X)");
  return a;
}

StatusOr<SoftmaxCrossEntropyArgs> softmaxCrossEntropyWithGradArgs(const KernelContext &ctx) {
  using Reduction = SoftmaxCrossEntropyArgs::Reduction;
  SoftmaxCrossEntropyArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.dLoss, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(a.scores, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(a.labels, ctx.requireInput(2));
  a.weights = ctx.input(3);
  const Tensor &x = *a.scores, &t = *a.labels;
  if (x.dtype != program::DTYPE_F32 && x.dtype != program::DTYPE_BF16 &&
      x.dtype != program::DTYPE_F16)
    return ctx.unsupported("scores of dtype " + x.typeString() + " (expected f32, bf16 or f16)");
  if (t.dtype != program::DTYPE_I64 && t.dtype != program::DTYPE_I32)
    return ctx.unsupported("labels of dtype " + t.typeString() + " (expected i64 or i32)");
  if (x.rank() < 2 || t.rank() != x.rank() - 1 || t.shape[0] != x.shape[0])
    return ctx.error("scores " + x.typeString() + " and labels " + t.typeString() +
                     " do not fit [N, C, d...] / [N, d...]");
  a.n = x.shape[0];
  a.c = x.shape[1];
  for (int64_t i = 2; i < x.rank(); ++i) {
    if (t.shape[i - 1] != x.shape[i])
      return ctx.error("labels " + t.typeString() + " do not match scores " + x.typeString());
    a.d *= x.shape[i];
  }
  if (a.weights && (a.weights->dtype != program::DTYPE_F32 || a.weights->numel() != a.c))
    return ctx.error("weights " + a.weights->typeString() + " must be f32 with C = " +
                     std::to_string(a.c) + " entries");
  STRAIT_ASSIGN_OR_RETURN(std::string red, ctx.getAttrs().getString("reduction", "mean"));
  if (red != "mean" && red != "sum" && red != "none")
    return ctx.error("unknown reduction '" + red + "' (expected mean, sum or none)");
  a.reduction = red == "mean" ? Reduction::Mean : red == "sum" ? Reduction::Sum : Reduction::None;
  a.hasIgnore = ctx.getAttrs().has("ignore_index");
  STRAIT_ASSIGN_OR_RETURN(a.ignore, ctx.getAttrs().getInt("ignore_index", 0));
  bool none = a.reduction == Reduction::None;
  if (a.dLoss->dtype != program::DTYPE_F32 ||
      (none ? a.dLoss->shape != t.shape : a.dLoss->numel() != 1))
    return ctx.error("dLoss " + a.dLoss->typeString() + " must be f32 with " +
                     (none ? "the labels' shape for reduction 'none'"
                           : std::string("one element for reduction '") + red + "'"));
  Shape lossShape = none ? t.shape : Shape{};
  a.loss = ctx.output(0);
  a.dScores = ctx.output(1);
  if (!a.loss || !a.dScores)
    return ctx.error(std::string("missing output ") + (a.loss ? "1 (dScores)" : "0 (loss)"));
  if (a.loss->shape != lossShape || a.loss->dtype != program::DTYPE_F32)
    return ctx.error("output 0 (loss) is declared " + a.loss->typeString() +
                     " but the op computes f32" + shapeToString(lossShape));
  if (a.dScores->shape != x.shape || a.dScores->dtype != x.dtype)
    return ctx.error("output 1 (dScores) is declared " + a.dScores->typeString() +
                     " but the op computes " + x.typeString() + " (the scores' type)");
  return a;
}

namespace {

StatusOr<const Tensor *> floatOperand(const KernelContext &ctx, size_t index, DType dtype) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(index));
  if (t->dtype != program::DTYPE_F32 && t->dtype != program::DTYPE_BF16 &&
      t->dtype != program::DTYPE_F16)
    return ctx.unsupported("operand " + std::to_string(index) + " of dtype " + t->typeString() +
                           " (expected f32, bf16 or f16)");
  if (dtype != program::DTYPE_UNSPECIFIED && t->dtype != dtype)
    return ctx.error("operand " + std::to_string(index) + " is " + t->typeString() +
                     ", operand 0 " + dtypeName(dtype) + ": the operands share one dtype");
  return t;
}

StatusOr<const Tensor *> rowExperts(const KernelContext &ctx, int64_t s) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *idx, ctx.requireInput(2));
  if (idx->dtype != program::DTYPE_I64 && idx->dtype != program::DTYPE_I32)
    return ctx.unsupported("indices of dtype " + idx->typeString() + " (expected i64 or i32)");
  if (idx->rank() != 1 || idx->shape[0] != s)
    return ctx.error("indices " + idx->typeString() + " must be [" + std::to_string(s) +
                     "], one expert per row");
  return idx;
}

} // namespace

StatusOr<GroupedMatMulArgs> groupedMatMulArgs(const KernelContext &ctx) {
  GroupedMatMulArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.x, floatOperand(ctx, 0, program::DTYPE_UNSPECIFIED));
  STRAIT_ASSIGN_OR_RETURN(a.w, floatOperand(ctx, 1, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(int64_t transB, ctx.getAttrs().getInt("transB", 1));
  a.transB = transB != 0;
  if (a.x->rank() != 2 || a.w->rank() != 3)
    return ctx.error("X must be [S, I] and W [E, O, I] or [E, I, O], got " +
                     a.x->typeString() + " and " + a.w->typeString());
  a.s = a.x->shape[0];
  a.i = a.x->shape[1];
  a.e = a.w->shape[0];
  int64_t wi = a.transB ? a.w->shape[2] : a.w->shape[1];
  a.o = a.transB ? a.w->shape[1] : a.w->shape[2];
  if (wi != a.i)
    return ctx.error("inner dimensions differ: X " + a.x->typeString() + ", W " +
                     a.w->typeString() + " (transB " + std::to_string(transB) + ")");
  STRAIT_ASSIGN_OR_RETURN(a.idx, rowExperts(ctx, a.s));
  STRAIT_ASSIGN_OR_RETURN(a.out, ctx.requireOutput(0, Shape{a.s, a.o}, a.x->dtype));
  return a;
}

StatusOr<GroupedMatMulArgs> groupedMatMulGradWeightArgs(const KernelContext &ctx) {
  GroupedMatMulArgs a;
  STRAIT_ASSIGN_OR_RETURN(a.x, floatOperand(ctx, 0, program::DTYPE_UNSPECIFIED));
  STRAIT_ASSIGN_OR_RETURN(a.dy, floatOperand(ctx, 1, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(a.e, ctx.getAttrs().getInt("num_experts", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t transB, ctx.getAttrs().getInt("transB", 1));
  a.transB = transB != 0;
  if (a.e < 1)
    return ctx.error("num_experts must be at least 1, got " + std::to_string(a.e));
  if (a.x->rank() != 2 || a.dy->rank() != 2 || a.dy->shape[0] != a.x->shape[0])
    return ctx.error("X must be [S, I] and dY [S, O], got " + a.x->typeString() + " and " +
                     a.dy->typeString());
  a.s = a.x->shape[0];
  a.i = a.x->shape[1];
  a.o = a.dy->shape[1];
  STRAIT_ASSIGN_OR_RETURN(a.idx, rowExperts(ctx, a.s));
  Shape shape = a.transB ? Shape{a.e, a.o, a.i} : Shape{a.e, a.i, a.o};
  STRAIT_ASSIGN_OR_RETURN(a.out, ctx.requireOutput(0, shape, a.x->dtype));
  return a;
}

StatusOr<ExpertRouting> routeExperts(const KernelContext &ctx, std::vector<int64_t> ids,
                                     int64_t e) {
  ExpertRouting r;
  r.offset.assign(static_cast<size_t>(e) + 1, 0);
  int64_t s = static_cast<int64_t>(ids.size());
  for (int64_t k = 0; k < s; ++k) {
    int64_t v = ids[k];
    if (v < -e || v >= e)
      return ctx.error("index " + std::to_string(v) + " of row " + std::to_string(k) +
                       " is outside [-" + std::to_string(e) + ", " + std::to_string(e) +
                       ") for " + std::to_string(e) + " experts");
    ids[k] = v < 0 ? v + e : v;
    ++r.offset[ids[k] + 1];
  }
  for (int64_t x = 0; x < e; ++x)
    r.offset[x + 1] += r.offset[x];
  r.rows.resize(static_cast<size_t>(s));
  std::vector<int64_t> next(r.offset.begin(), r.offset.end() - 1);
  for (int64_t k = 0; k < s; ++k)
    r.rows[next[ids[k]]++] = k;
  return r;
}

} // namespace rt
} // namespace strait
