//===- CudaSpatial.cpp - Pooling, batch norm, reductions, slices (host) ---===//
//
// Shape and attribute checks (the CPU backend's rules and messages; the
// pools' are rt::poolArgs / poolGradArgs, shared with it) and the
// launches of Pooling.cu and Reduce.cu: MaxPool, AveragePool, the global
// pools and their gradients; BatchNormalization (inference and training
// mode), BatchNormalizationTraining and BatchNormalizationGrad; the Reduce*
// family (bf16/f16 widened to f32); Slice and SliceGrad; GatherElements;
// HardSigmoid and HardSwish.
// Also the mapping of a window (rt::convWindow, shared with the CPU
// backend) to cuDNN's descriptors for CudaConv.cpp, which is plain host code
// and tested without a GPU.
//
// Integer operands that only exist as tensors (Slice's starts/ends/axes/
// steps inputs, the axes input of the reductions) would need a stream wait
// to be read on the host, which also keeps the segment out of CUDA graphs.
// Slice reads its bound inputs on the device (launchSliceBounds, the values
// checked there against the declared output shape). A reduction whose
// declared output shape determines the reduced dims (compiled steps: the
// Conv bias gradients, global means) reads its axes input once, on its first
// run, and then takes the dims from the shapes; other reductions wait.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <algorithm>
#include <climits>

namespace strait {
namespace rt {
namespace cuda {

StatusOr<CudnnConvShape> cudnnConvShape(const KernelContext &ctx, const ConvWindow &w,
                                        int64_t n, int64_t c, int64_t m, int64_t group) {
  CudnnConvShape s;
  int spatial = std::max(2, w.nd); // 1-D runs as 2-D with a height of 1
  s.nbDims = 2 + spatial;
  std::vector<int64_t> dims = {n, c, m, c / group};
  for (int d = 0; d < spatial; ++d) {
    int slot = 3 - spatial + d;
    if (w.pad[slot] != w.padEnd[slot]) {
      int64_t eff = (w.k[slot] - 1) * w.dil[slot] + 1;
      int64_t symOut = (w.in[slot] + 2 * w.pad[slot] - eff) / w.stride[slot] + 1;
      if (symOut != w.out[slot])
        return ctx.unsupported(
            "cuda: pads " + std::to_string(w.pad[slot]) + " (begin) and " +
            std::to_string(w.padEnd[slot]) + " (end) of spatial dim " +
            std::to_string(d - (spatial - w.nd)) +
            " differ and change the output size; cuDNN pads both sides equally");
    }
    s.x[2 + d] = static_cast<int>(w.in[slot]);
    s.w[2 + d] = static_cast<int>(w.k[slot]);
    s.y[2 + d] = static_cast<int>(w.out[slot]);
    s.pad[d] = static_cast<int>(w.pad[slot]);
    s.stride[d] = static_cast<int>(w.stride[slot]);
    s.dil[d] = static_cast<int>(w.dil[slot]);
    dims.insert(dims.end(), {w.in[slot], w.k[slot], w.out[slot], w.pad[slot],
                             w.stride[slot], w.dil[slot]});
  }
  for (int64_t v : dims)
    if (v > INT_MAX)
      return ctx.unsupported("cuda: a convolution size exceeds cuDNN's int range");
  s.x[0] = static_cast<int>(n);
  s.x[1] = static_cast<int>(c);
  s.w[0] = static_cast<int>(m);
  s.w[1] = static_cast<int>(c / group);
  s.y[0] = static_cast<int>(n);
  s.y[1] = static_cast<int>(m);
  return s;
}

namespace {

bool isLowFloat(DType t) { return t == program::DTYPE_BF16 || t == program::DTYPE_F16; }

/// A bf16/f16 convolution seen as f32: the same data, the 16-bit operands
/// relabeled f32, and the kernel's op and convolution attributes, so that
/// the shared argument checks (convArgs & co., f32 only) check its shapes
/// and attributes. Not movable (the context points into it).
struct LowView {
  program::Kernel kernel;
  std::vector<Tensor> tensors;
  std::unique_ptr<KernelContext> ctx;
  DType dtype = program::DTYPE_F32;
  LowView() = default;
  LowView(const LowView &) = delete;
  LowView &operator=(const LowView &) = delete;
};

/// Copies the attributes convWindow, convArgs and the gradients' argument
/// checks read (with their types; an attribute of another type fails here
/// as it would there).
Status copyConvAttrs(const KernelContext &ctx, program::Kernel &k) {
  const AttrReader &a = ctx.getAttrs();
  auto &attrs = *k.mutable_attrs();
  for (const char *name : {"group", "ceil_mode"})
    if (a.has(name)) {
      STRAIT_ASSIGN_OR_RETURN(int64_t v, a.getInt(name, 0));
      attrs[name].set_i(v);
    }
  for (const char *name :
       {"kernel_shape", "strides", "dilations", "pads", "input_shape", "weight_shape"})
    if (a.has(name)) {
      STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> v, a.getInts(name, {}));
      for (int64_t x : v)
        attrs[name].mutable_ints()->add_v(x);
      attrs[name].mutable_ints(); // an empty list stays a list
    }
  if (a.has("auto_pad")) {
    STRAIT_ASSIGN_OR_RETURN(std::string v, a.getString("auto_pad", "NOTSET"));
    attrs["auto_pad"].set_s(v);
  }
  return Status::ok();
}

/// The operands' type: f32, bf16 or f16, the same for the data operands and
/// the output (a bias: that type or f32). Unimplemented for other types (the
/// host fallback then runs the CPU kernel).
StatusOr<DType> convType(const KernelContext &ctx, size_t dataInputs) {
  const Tensor *x = ctx.input(0);
  if (!x)
    return ctx.error("missing input 0");
  DType t = x->dtype;
  if (t != program::DTYPE_F32 && !isLowFloat(t))
    return ctx.unsupported("cuda: " + ctx.op() + " on " + x->typeString() +
                           " (f32, bf16, f16 are supported)");
  for (size_t i = 1; i < dataInputs; ++i)
    if (ctx.input(i) && ctx.input(i)->dtype != t)
      return ctx.error("input " + std::to_string(i) + " " + ctx.input(i)->typeString() +
                       " and input 0 " + x->typeString() + " differ in type");
  if (ctx.output(0) && ctx.output(0)->dtype != t)
    return ctx.error("output 0 is declared " + ctx.output(0)->typeString() + " for " +
                     x->typeString() + " operands");
  const Tensor *bias = ctx.input(dataInputs);
  if (bias && bias->dtype != t && bias->dtype != program::DTYPE_F32)
    return ctx.error("bias " + bias->typeString() + " for " + x->typeString() + " operands");
  return t;
}

Status makeLowView(const KernelContext &ctx, DType t, LowView &v) {
  v.dtype = t;
  v.kernel.set_op(ctx.op());
  v.kernel.set_opset(ctx.opset());
  STRAIT_RETURN_IF_ERROR(copyConvAttrs(ctx, v.kernel));
  v.tensors.reserve(ctx.numInputs() + ctx.numOutputs());
  auto relabel = [&](const Tensor *x) -> Tensor * {
    if (!x)
      return nullptr;
    v.tensors.push_back(*x);
    if (isLowFloat(x->dtype))
      v.tensors.back().dtype = program::DTYPE_F32;
    return &v.tensors.back();
  };
  std::vector<const Tensor *> ins;
  std::vector<Tensor *> outs;
  for (size_t i = 0; i < ctx.numInputs(); ++i)
    ins.push_back(relabel(ctx.input(i)));
  for (size_t i = 0; i < ctx.numOutputs(); ++i)
    outs.push_back(relabel(ctx.output(i)));
  v.ctx = std::make_unique<KernelContext>(v.kernel, std::move(ins), std::move(outs));
  return Status::ok();
}

} // namespace

StatusOr<ConvCheck> checkConv(const KernelContext &ctx) {
  ConvCheck k;
  STRAIT_ASSIGN_OR_RETURN(k.dtype, convType(ctx, 2));
  const KernelContext *checked = &ctx;
  if (k.dtype != program::DTYPE_F32) {
    auto view = std::make_shared<LowView>();
    STRAIT_RETURN_IF_ERROR(makeLowView(ctx, k.dtype, *view));
    checked = view->ctx.get();
    k.view = view;
  }
  if (ctx.op() == "Conv") {
    STRAIT_ASSIGN_OR_RETURN(k.conv, convArgs(*checked));
  } else if (ctx.op() == "ConvGradInput") {
    STRAIT_ASSIGN_OR_RETURN(k.grad, convGradInputArgs(*checked));
  } else {
    STRAIT_ASSIGN_OR_RETURN(k.grad, convGradWeightArgs(*checked));
  }
  return k;
}

namespace {

/// An integer list from input `index` when present (a program constant from
/// its host copy; any other tensor on the host after the stream's queued
/// work), else from attribute `name`.
StatusOr<std::vector<int64_t>> intsInputOrAttr(CudaContext &c, const KernelContext &ctx,
                                               size_t index, const char *name,
                                               const std::vector<int64_t> &dflt) {
  const Tensor *t = ctx.input(index);
  if (!t)
    return ctx.getAttrs().getInts(name, dflt);
  return hostInts(c, ctx, *t, std::string("input '") + name + "'");
}

//===----------------------------------------------------------------------===//
// Pooling
//===----------------------------------------------------------------------===//

Status poolKernel(CudaContext &c, KernelContext &ctx, bool max) {
  STRAIT_ASSIGN_OR_RETURN(PoolArgs a, poolArgs(ctx));
  launchPool(max, a.countIncludePad, a.x->as<float>(), a.y->as<float>(),
             a.indices ? a.indices->as<int64_t>() : nullptr, a.x->shape[0] * a.x->shape[1],
             a.window, c.stream);
  return Status::ok();
}

Status globalPoolKernel(CudaContext &c, KernelContext &ctx, bool max) {
  STRAIT_ASSIGN_OR_RETURN(GlobalPoolArgs a, globalPoolArgs(ctx));
  launchGlobalPool(max, a.x->as<float>(), a.y->as<float>(), a.planes, a.size, c.stream);
  return Status::ok();
}

Status poolGradKernel(CudaContext &c, KernelContext &ctx, bool max) {
  STRAIT_ASSIGN_OR_RETURN(PoolGradArgs a, poolGradArgs(ctx, max));
  launchPoolGrad(max, a.countIncludePad, a.dy->as<float>(), a.x ? a.x->as<float>() : nullptr,
                 a.dx->as<float>(), a.xShape[0] * a.xShape[1], a.window, c.stream);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Batch normalization
//===----------------------------------------------------------------------===//

/// X [n, c, ...] and the four per-channel f32 inputs 1..4.
StatusOr<BatchNormArgs> batchNormInputs(const KernelContext &ctx, const Tensor &x,
                                        bool onnxMessages) {
  if (x.rank() < 2)
    return ctx.error("input must have rank >= 2, got " + x.typeString());
  BatchNormArgs a;
  a.n = x.shape[0];
  a.c = x.shape[1];
  a.spatial = x.numel() / std::max<int64_t>(a.n * a.c, 1);
  const float **ps[4] = {&a.scale, &a.bias, &a.inMean, &a.inVar};
  for (int i = 0; i < 4; ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *p, ctx.requireInput(1 + i, program::DTYPE_F32));
    if (p->numel() != a.c)
      return onnxMessages ? ctx.error("parameter " + std::to_string(i + 1) + " " +
                                      p->typeString() + " does not have C=" +
                                      std::to_string(a.c) + " entries")
                          : ctx.error("parameter " + std::to_string(i + 1) +
                                      " must have C entries");
    *ps[i] = p->as<float>();
  }
  STRAIT_ASSIGN_OR_RETURN(a.eps, ctx.getAttrs().getFloat("epsilon", 1e-5f));
  STRAIT_ASSIGN_OR_RETURN(a.momentum, ctx.getAttrs().getFloat("momentum", 0.9f));
  return a;
}

/// ONNX BatchNormalization: inference, or training_mode=1 with the running
/// statistics (population variance) in outputs 1 and 2.
Status batchNormKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(BatchNormArgs a, batchNormInputs(ctx, *x, true));
  STRAIT_ASSIGN_OR_RETURN(int64_t training, ctx.getAttrs().getInt("training_mode", 0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  a.batchStats = training != 0;
  if (a.batchStats) {
    Shape cs = {a.c};
    if (ctx.output(1)) {
      STRAIT_ASSIGN_OR_RETURN(Tensor * rm, ctx.requireOutput(1, cs, x->dtype));
      a.runMean = rm->as<float>();
    }
    if (ctx.output(2)) {
      STRAIT_ASSIGN_OR_RETURN(Tensor * rv, ctx.requireOutput(2, cs, x->dtype));
      a.runVar = rv->as<float>();
    }
  }
  launchBatchNorm(x->as<float>(), y->as<float>(), a, c.stream);
  return Status::ok();
}

/// The compiler's BatchNormalizationTraining: Y and the optional saved mean,
/// saved inverse std, running mean and running variance (unbiased).
Status batchNormTrainingKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(BatchNormArgs a, batchNormInputs(ctx, *x, false));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  float **outs[4] = {&a.mean, &a.invStd, &a.runMean, &a.runVar};
  for (int i = 0; i < 4; ++i)
    if (ctx.output(1 + i)) {
      STRAIT_ASSIGN_OR_RETURN(Tensor * o, ctx.requireOutput(1 + i, Shape{a.c}, x->dtype));
      *outs[i] = o->as<float>();
    }
  a.batchStats = true;
  a.unbiasedVar = true;
  launchBatchNorm(x->as<float>(), y->as<float>(), a, c.stream);
  return Status::ok();
}

Status batchNormGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *scale, ctx.requireInput(2, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *mean, ctx.requireInput(3, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *inv, ctx.requireInput(4, program::DTYPE_F32));
  if (x->rank() < 2)
    return ctx.error("input must have rank >= 2, got " + x->typeString());
  int64_t n = x->shape[0], ch = x->shape[1];
  int64_t spatial = x->numel() / std::max<int64_t>(n * ch, 1);
  if (dy->shape != x->shape || scale->numel() != ch || mean->numel() != ch ||
      inv->numel() != ch)
    return ctx.error("shapes do not fit X " + x->typeString());
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * ds, ctx.requireOutput(1, scale->shape, x->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * db, ctx.requireOutput(2, scale->shape, x->dtype));
  launchBatchNormGrad(dy->as<float>(), x->as<float>(), scale->as<float>(), mean->as<float>(),
                      inv->as<float>(), dx->as<float>(), ds->as<float>(), db->as<float>(), n,
                      ch, spatial, c.stream);
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

} // namespace

bool reducedDimsFromShapes(const Shape &in, const Shape &out, bool keepdims,
                           std::vector<bool> &reduced) {
  size_t rank = in.size();
  if (rank > static_cast<size_t>(kMaxDims))
    return false;
  if (keepdims) {
    if (out.size() != rank)
      return false;
    reduced.assign(rank, false);
    for (size_t d = 0; d < rank; ++d) {
      if (out[d] == in[d])
        continue;
      if (out[d] != 1)
        return false;
      reduced[d] = true;
    }
    return true;
  }
  if (out.size() > rank)
    return false;
  // Every choice of removed dims that leaves `out`; they must agree on the
  // dims longer than 1 (which size-1 dims go moves no data).
  bool found = false;
  unsigned effective = 0;
  for (unsigned mask = 0; mask < (1u << rank); ++mask) {
    if (static_cast<size_t>(__builtin_popcount(mask)) != rank - out.size())
      continue;
    Shape kept;
    unsigned eff = 0;
    for (size_t d = 0; d < rank; ++d) {
      if (mask & (1u << d)) {
        if (in[d] != 1)
          eff |= 1u << d;
      } else {
        kept.push_back(in[d]);
      }
    }
    if (kept != out)
      continue;
    if (!found) {
      found = true;
      effective = eff;
      reduced.assign(rank, false);
      for (size_t d = 0; d < rank; ++d)
        reduced[d] = (mask >> d) & 1u;
    } else if (eff != effective) {
      return false;
    }
  }
  return found;
}

namespace {

Status reduceKernel(CudaContext &c, KernelContext &ctx, ReduceOp op, int tag) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t keep, ctx.getAttrs().getInt("keepdims", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t noop, ctx.getAttrs().getInt("noop_with_empty_axes", 0));
  int64_t rank = x->rank();
  if (rank > kMaxDims)
    return ctx.unsupported("cuda: " + ctx.op() + " of rank " + std::to_string(rank) +
                           " (at most " + std::to_string(kMaxDims) + ")");
  // An axes input is read on the host (a stream wait, no CUDA graph) only
  // until it has been checked once against the declared output shape, when
  // that shape determines the reduced dims (compiled programs: a Conv bias
  // gradient, a global mean); later runs take the dims from the shapes.
  std::vector<bool> reduced;
  const Tensor *yDecl = ctx.output(0);
  bool derived = ctx.input(1) && yDecl &&
                 reducedDimsFromShapes(x->shape, yDecl->shape, keep != 0, reduced);
  bool checked = derived && c.shapeChecked(tag);
  if (!checked) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes,
                            intsInputOrAttr(c, ctx, 1, "axes", {}));
    reduced.assign(rank, axes.empty() && noop == 0);
    for (int64_t a : axes) {
      STRAIT_ASSIGN_OR_RETURN(int64_t ax, normalizeAxis(ctx, a, rank));
      reduced[ax] = true;
    }
  }
  ReducePlan p;
  Shape out;
  int64_t stride = 1;
  std::vector<int64_t> strides(rank);
  for (int64_t d = rank - 1; d >= 0; --d) {
    strides[d] = stride;
    stride *= x->shape[d];
  }
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      p.redDims[p.red] = x->shape[d];
      p.redStrides[p.red++] = strides[d];
      p.redCount *= x->shape[d];
      if (keep)
        out.push_back(1);
    } else {
      p.keptDims[p.kept] = x->shape[d];
      p.keptStrides[p.kept++] = strides[d];
      p.outCount *= x->shape[d];
      out.push_back(x->shape[d]);
    }
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  // The axes read agree with the output shape: for these shapes the dims
  // from the shapes are the same reduction.
  if (derived && !checked)
    c.setShapeChecked(tag);
  if (x->dtype == program::DTYPE_BF16 || x->dtype == program::DTYPE_F16) {
    // Mixed precision (a Conv bias gradient under graph-autocast): widened
    // to f32 in scratch memory (exact), reduced with double accumulation,
    // rounded back to nearest even once, as the CPU backend.
    size_t inBytes = ((x->numel() * sizeof(float) + 255) / 256) * 256;
    STRAIT_ASSIGN_OR_RETURN(void *scratch, c.getScratch(inBytes + y->numel() * sizeof(float)));
    float *wideX = static_cast<float *>(scratch);
    float *wideY = reinterpret_cast<float *>(static_cast<char *>(scratch) + inBytes);
    ET et = elemType(x->dtype);
    if (!launchCast(et, ET::F32, x->data, wideX, x->numel(), c.stream) ||
        !launchReduce(op, ET::F32, wideX, wideY, p, c.stream) ||
        !launchCast(ET::F32, et, wideY, y->data, y->numel(), c.stream))
      return ctx.unsupported("dtype " + x->typeString());
    return Status::ok();
  }
  if (!launchReduce(op, elemType(x->dtype), x->data, y->data, p, c.stream))
    return ctx.unsupported("dtype " + x->typeString());
  return Status::ok();
}

//===----------------------------------------------------------------------===//
// Slice, SliceGrad
//===----------------------------------------------------------------------===//

/// Per-dim start and step of a slice of `shape` and the sliced shape.
struct SliceMap {
  std::vector<int64_t> start, step;
  Shape out;
};

StatusOr<SliceMap> sliceMap(const KernelContext &ctx, const Shape &shape,
                            const std::vector<int64_t> &starts, const std::vector<int64_t> &ends,
                            std::vector<int64_t> axes, const std::vector<int64_t> &steps,
                            bool namedStepAxis) {
  int64_t rank = static_cast<int64_t>(shape.size());
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i)
      axes.push_back(static_cast<int64_t>(i));
  if (ends.size() != starts.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return ctx.error("starts/ends/axes/steps lengths differ");
  SliceMap m{std::vector<int64_t>(rank, 0), std::vector<int64_t>(rank, 1), shape};
  for (size_t i = 0; i < axes.size(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(int64_t a, normalizeAxis(ctx, axes[i], rank));
    int64_t dim = shape[a], s = steps[i];
    if (s == 0)
      return ctx.error(namedStepAxis ? "step 0 on axis " + std::to_string(a) : "step 0");
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i];
    int64_t e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (s > 0) {
      b = std::clamp<int64_t>(b, 0, dim);
      e = std::clamp<int64_t>(e, 0, dim);
      m.out[a] = e > b ? (e - b + s - 1) / s : 0;
    } else {
      b = std::clamp<int64_t>(b, 0, dim - 1);
      e = std::clamp<int64_t>(e, -1, dim - 1);
      m.out[a] = b > e ? (b - e - s - 1) / -s : 0;
    }
    m.start[a] = b;
    m.step[a] = s;
  }
  return m;
}

/// Base offset (elements) and strides of the slice's elements in `shape`.
int64_t sliceStrides(const Shape &shape, const SliceMap &m, std::vector<int64_t> &strides) {
  int64_t rank = static_cast<int64_t>(shape.size()), base = 0, st = 1;
  strides.assign(rank, 0);
  for (int64_t d = rank - 1; d >= 0; --d) {
    base += m.start[d] * st;
    strides[d] = st * m.step[d];
    st *= shape[d];
  }
  return base;
}

/// Slice with its bounds as tensors, read on the device (launchSliceBounds):
/// the static checks here, the bounds' values checked by the kernel against
/// the declared output shape.
Status sliceOnDevice(CudaContext &c, KernelContext &ctx, int tag, const Tensor &x) {
  SliceBounds b;
  b.rank = static_cast<int>(x.rank());
  const Tensor *starts = ctx.input(1);
  b.n = static_cast<int>(starts->numel());
  const void **ptrs[4] = {&b.starts, &b.ends, &b.axes, &b.steps};
  bool *wide[4] = {&b.starts64, &b.ends64, &b.axes64, &b.steps64};
  for (int i = 0; i < 4; ++i) {
    const Tensor *t = ctx.input(1 + i);
    if (!t)
      continue;
    if (t->dtype != program::DTYPE_I64 && t->dtype != program::DTYPE_I32)
      return ctx.unsupported("expected an integer tensor, got " + t->typeString());
    if (t->rank() != 1 || t->numel() != b.n)
      return ctx.error("starts/ends/axes/steps lengths differ");
    *ptrs[i] = t->data;
    *wide[i] = t->dtype == program::DTYPE_I64;
  }
  Tensor *y = ctx.output(0);
  if (!y)
    return ctx.error("missing output 0");
  if (y->rank() != x.rank())
    return ctx.error("output 0 is declared " + y->typeString() + " for a slice of " +
                     x.typeString());
  STRAIT_RETURN_IF_ERROR(ctx.requireOutput(0, y->shape, x.dtype).getStatus());
  for (int d = 0; d < b.rank; ++d) {
    b.inShape[d] = x.shape[d];
    b.outShape[d] = y->shape[d];
  }
  b.nOut = y->numel();
  if (!launchSliceBounds(dtypeSize(x.dtype), x.data, y->data, b, c.errorFlag, tag, c.stream))
    return ctx.unsupported("cuda: Slice of " + x.typeString());
  return Status::ok();
}

} // namespace

bool sliceBoundsOnDevice(bool startsEndsInputs, bool boundAttrs, int64_t rank, int64_t n) {
  return startsEndsInputs && !boundAttrs && rank <= kMaxDims && n <= kMaxDims;
}

namespace {

Status sliceKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  const AttrReader &attrs = ctx.getAttrs();
  if (sliceBoundsOnDevice(ctx.input(1) && ctx.input(2),
                          attrs.has("starts") || attrs.has("ends") || attrs.has("axes") ||
                              attrs.has("steps"),
                          x->rank(), ctx.input(1) ? ctx.input(1)->numel() : 0))
    return sliceOnDevice(c, ctx, tag, *x);
  STRAIT_ASSIGN_OR_RETURN(auto starts, intsInputOrAttr(c, ctx, 1, "starts", {}));
  STRAIT_ASSIGN_OR_RETURN(auto ends, intsInputOrAttr(c, ctx, 2, "ends", {}));
  std::vector<int64_t> allAxes;
  for (size_t i = 0; i < starts.size(); ++i)
    allAxes.push_back(static_cast<int64_t>(i));
  STRAIT_ASSIGN_OR_RETURN(auto axes, intsInputOrAttr(c, ctx, 3, "axes", allAxes));
  std::vector<int64_t> ones(starts.size(), 1);
  STRAIT_ASSIGN_OR_RETURN(auto steps, intsInputOrAttr(c, ctx, 4, "steps", ones));
  STRAIT_ASSIGN_OR_RETURN(SliceMap m, sliceMap(ctx, x->shape, starts, ends, axes, steps, true));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, m.out, x->dtype));
  std::vector<int64_t> strides;
  int64_t base = sliceStrides(x->shape, m, strides);
  if (y->numel() == 0)
    return Status::ok();
  Index ix;
  if (!stridedIndex(m.out, strides, ix))
    return ctx.unsupported("cuda: Slice to " + shapeToString(m.out) + " has more than " +
                           std::to_string(kMaxDims) + " non-mergeable dims");
  size_t es = dtypeSize(x->dtype);
  if (!launchStridedCopy(es, x->as<char>() + base * es, y->data, ix, c.stream))
    return ctx.unsupported("cuda: Slice of " + x->typeString());
  return Status::ok();
}

Status sliceGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0));
  if (!ctx.getAttrs().has("input_shape"))
    return ctx.error("missing attribute 'input_shape'");
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> xsv, ctx.getAttrs().getInts("input_shape", {}));
  Shape xs(xsv.begin(), xsv.end());
  STRAIT_ASSIGN_OR_RETURN(auto starts, ctx.getAttrs().getInts("starts", {}));
  STRAIT_ASSIGN_OR_RETURN(auto ends, ctx.getAttrs().getInts("ends", {}));
  STRAIT_ASSIGN_OR_RETURN(auto axes, ctx.getAttrs().getInts("axes", {}));
  std::vector<int64_t> ones(starts.size(), 1);
  STRAIT_ASSIGN_OR_RETURN(auto steps, ctx.getAttrs().getInts("steps", ones));
  STRAIT_ASSIGN_OR_RETURN(SliceMap m, sliceMap(ctx, xs, starts, ends, axes, steps, false));
  if (m.out != dy->shape)
    return ctx.error("dY " + dy->typeString() + " is not the slice's shape " +
                     shapeToString(m.out));
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, xs, dy->dtype));
  if (dx->byteSize())
    STRAIT_RETURN_IF_ERROR(
        cudaStatus(cudaMemsetAsync(dx->data, 0, dx->byteSize(), c.stream), "memset"));
  if (dy->numel() == 0)
    return Status::ok();
  std::vector<int64_t> strides;
  int64_t base = sliceStrides(xs, m, strides);
  Index ix;
  if (!stridedIndex(m.out, strides, ix))
    return ctx.unsupported("cuda: SliceGrad of " + dy->typeString() + " has more than " +
                           std::to_string(kMaxDims) + " non-mergeable dims");
  size_t es = dtypeSize(dy->dtype);
  if (!launchStridedScatter(es, dy->data, dx->as<char>() + base * es, ix, c.stream))
    return ctx.unsupported("cuda: SliceGrad of " + dy->typeString());
  return Status::ok();
}

/// The element map of GatherElements and ScatterElements over `ind`'s
/// shape into `x` (the CPU's checks, plus indices no larger than data off
/// the axis); the indices' values are checked on the device.
StatusOr<ElementsIndex> elementsIndex(const KernelContext &ctx, const Tensor &x,
                                      const Tensor &ind, int64_t axis) {
  if (ind.rank() != x.rank())
    return ctx.error("indices rank differs from data rank");
  if (ind.dtype != program::DTYPE_I64 && ind.dtype != program::DTYPE_I32)
    return ctx.unsupported("expected an integer tensor, got " + ind.typeString());
  if (x.rank() > kMaxDims)
    return ctx.unsupported("cuda: " + ctx.op() + " of rank " + std::to_string(x.rank()));
  ElementsIndex ix;
  ix.rank = static_cast<int>(x.rank());
  ix.axis = static_cast<int>(axis);
  ix.len = x.shape[axis];
  ix.n = ind.numel();
  int64_t st = 1;
  for (int d = ix.rank - 1; d >= 0; --d) {
    if (d != axis && ind.shape[d] > x.shape[d])
      return ctx.error("indices " + ind.typeString() + " exceed data " + x.typeString() +
                       " on dim " + std::to_string(d));
    ix.shape[d] = ind.shape[d];
    ix.stride[d] = st;
    st *= x.shape[d];
  }
  return ix;
}

Status gatherElementsKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(ElementsArgs a, gatherElementsArgs(ctx));
  const Tensor *x = a.x, *ind = a.indices;
  Tensor *y = a.y;
  STRAIT_ASSIGN_OR_RETURN(ElementsIndex ix, elementsIndex(ctx, *x, *ind, a.axis));
  if (!launchGatherElements(dtypeSize(x->dtype), x->data, ind->data,
                            ind->dtype == program::DTYPE_I64, y->data, ix, c.errorFlag, tag,
                            c.stream))
    return ctx.unsupported("cuda: GatherElements of " + x->typeString());
  return Status::ok();
}

/// ScatterElements: Y = X with the updates written (reduction none, any
/// element size) or added (reduction add, f32) at the GatherElements
/// positions of the indices; reduction mul and add on other dtypes are
/// Unimplemented (the host fallback runs the CPU kernel).
Status scatterElementsKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(ElementsArgs a, scatterElementsArgs(ctx));
  const Tensor *x = a.x, *ind = a.indices, *upd = a.updates;
  Tensor *y = a.y;
  bool add = a.reduction == "add";
  if (a.reduction != "none" && !(add && x->dtype == program::DTYPE_F32))
    return ctx.unsupported("cuda: reduction '" + a.reduction + "' on " + x->typeString());
  STRAIT_ASSIGN_OR_RETURN(ElementsIndex ix, elementsIndex(ctx, *x, *ind, a.axis));
  size_t es = dtypeSize(x->dtype);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return ctx.unsupported("cuda: ScatterElements of " + x->typeString());
  if (y->data != x->data)
    STRAIT_RETURN_IF_ERROR(cudaStatus(
        cudaMemcpyAsync(y->data, x->data, x->byteSize(), cudaMemcpyDeviceToDevice, c.stream),
        "ScatterElements copy"));
  launchScatterElements(es, add, upd->data, ind->data, ind->dtype == program::DTYPE_I64,
                        y->data, ix, c.errorFlag, tag, c.stream);
  return Status::ok();
}

/// TopK along `axis` (k read on the host: a program constant's host copy,
/// else after a stream wait); values of X's dtype, indices i64.
Status topKKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *kt, ctx.requireInput(1));
  ET et = elemType(x->dtype);
  if (et == ET::Other || et == ET::Bool)
    return ctx.unsupported("cuda: TopK of " + x->typeString());
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> kv, hostInts(c, ctx, *kt, "input 'K'"));
  STRAIT_ASSIGN_OR_RETURN(TopKArgs a, topKArgs(ctx, kv));
  if (!launchTopK(et, x->data, a.values->data, a.indices->as<int64_t>(), a.outer, a.len,
                  a.inner, a.k, a.largest, c.stream))
    return ctx.unsupported("cuda: TopK of " + x->typeString());
  return Status::ok();
}

Status hardSigmoidKernel(CudaContext &c, KernelContext &ctx, bool swish) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(float alpha, ctx.getAttrs().getFloat("alpha", 0.2f));
  STRAIT_ASSIGN_OR_RETURN(float beta, ctx.getAttrs().getFloat("beta", 0.5f));
  if (x->dtype != program::DTYPE_F32)
    return ctx.unsupported("cuda: " + ctx.op() + " on " + x->typeString());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  launchHardSigmoid(swish, alpha, beta, x->as<float>(), y->as<float>(), x->numel(), c.stream);
  return Status::ok();
}

} // namespace

void addSpatialKernels(CudaKernelTable &t) {
  t.add("MaxPool", [](CudaContext &c, KernelContext &k, int) { return poolKernel(c, k, true); });
  t.add("AveragePool",
        [](CudaContext &c, KernelContext &k, int) { return poolKernel(c, k, false); });
  t.add("GlobalMaxPool",
        [](CudaContext &c, KernelContext &k, int) { return globalPoolKernel(c, k, true); });
  t.add("GlobalAveragePool",
        [](CudaContext &c, KernelContext &k, int) { return globalPoolKernel(c, k, false); });
  t.add("MaxPoolGrad",
        [](CudaContext &c, KernelContext &k, int) { return poolGradKernel(c, k, true); });
  t.add("AveragePoolGrad",
        [](CudaContext &c, KernelContext &k, int) { return poolGradKernel(c, k, false); });
  t.add("BatchNormalization", batchNormKernel);
  t.add("BatchNormalizationTraining", batchNormTrainingKernel);
  t.add("BatchNormalizationGrad", batchNormGradKernel);
  t.add("Slice", sliceKernel);
  t.add("SliceGrad", sliceGradKernel);
  t.add("GatherElements", gatherElementsKernel);
  t.add("ScatterElements", scatterElementsKernel);
  t.add("TopK", topKKernel);
  t.add("HardSigmoid",
        [](CudaContext &c, KernelContext &k, int) { return hardSigmoidKernel(c, k, false); });
  t.add("HardSwish",
        [](CudaContext &c, KernelContext &k, int) { return hardSigmoidKernel(c, k, true); });
#define STRAIT_REDUCE(NAME, OP)                                                          \
  t.add(NAME, [](CudaContext &c, KernelContext &k, int tag) {                          \
    return reduceKernel(c, k, OP, tag);                                                \
  });
  STRAIT_REDUCE("ReduceSum", ReduceOp::Sum)
  STRAIT_REDUCE("ReduceMean", ReduceOp::Mean)
  STRAIT_REDUCE("ReduceMax", ReduceOp::Max)
  STRAIT_REDUCE("ReduceMin", ReduceOp::Min)
  STRAIT_REDUCE("ReduceProd", ReduceOp::Prod)
  STRAIT_REDUCE("ReduceL1", ReduceOp::L1)
  STRAIT_REDUCE("ReduceL2", ReduceOp::L2)
  STRAIT_REDUCE("ReduceLogSum", ReduceOp::LogSum)
  STRAIT_REDUCE("ReduceLogSumExp", ReduceOp::LogSumExp)
  STRAIT_REDUCE("ReduceSumSquare", ReduceOp::SumSquare)
#undef STRAIT_REDUCE
}

} // namespace cuda
} // namespace rt
} // namespace strait
