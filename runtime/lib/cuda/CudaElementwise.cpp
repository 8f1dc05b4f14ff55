//===- CudaElementwise.cpp - Elementwise and layout kernels (host side) ---===//
//
// Shape checks and launches for the broadcasting binary ops, unary ops,
// Where, Cast, GeluGrad; and the layout ops: Reshape-like copies, Transpose,
// Expand, Concat and Split (2-D memcpy), Gather / GatherGrad.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"
#include "../cpu/DropoutMask.h"

#include <algorithm>

namespace strait {
namespace rt {
namespace cuda {
namespace {

StatusOr<Shape> broadcast(const KernelContext &ctx, const std::vector<Shape> &shapes) {
  size_t r = 0;
  for (const Shape &s : shapes)
    r = std::max(r, s.size());
  Shape out(r, 1);
  for (const Shape &s : shapes)
    for (size_t i = 0; i < s.size(); ++i) {
      int64_t &o = out[r - s.size() + i];
      int64_t d = s[i];
      if (d != o && d != 1 && o != 1)
        return ctx.error("shapes do not broadcast: " + shapeToString(shapes[0]) + " and " +
                         shapeToString(s));
      if (o == 1)
        o = d;
    }
  return out;
}

Status tooManyDims(const KernelContext &ctx, const Shape &s) {
  return ctx.unsupported("cuda: " + shapeToString(s) + " has more than " +
                         std::to_string(kMaxDims) + " non-mergeable dims");
}

Status binaryKernel(CudaContext &c, KernelContext &ctx, BinaryOp op) {
  // Variadic Max / Min with other than two operands, and Pow with an
  // exponent of another type, are the CPU kernel's (the host fallback).
  if (ctx.numInputs() != 2)
    return ctx.unsupported("cuda: " + ctx.op() + " of " + std::to_string(ctx.numInputs()) +
                           " operands (the CUDA kernel takes two)");
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1));
  if (a->dtype != b->dtype) {
    if (op == BinaryOp::Pow)
      return ctx.unsupported("cuda: Pow of " + a->typeString() + " by " + b->typeString());
    return ctx.error("operand types differ: " + a->typeString() + " and " + b->typeString());
  }
  STRAIT_ASSIGN_OR_RETURN(Shape out, broadcast(ctx, {a->shape, b->shape}));
  bool cmp = op >= BinaryOp::Equal && op != BinaryOp::And && op != BinaryOp::Or;
  DType outType = cmp ? program::DTYPE_BOOL : a->dtype;
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, outType));
  Index ix;
  if (!broadcastIndex(out, {a->shape, b->shape}, ix))
    return tooManyDims(ctx, out);
  if (!launchBinary(op, elemType(a->dtype), a->data, b->data, y->data, ix, c.stream))
    return ctx.unsupported("cuda: " + ctx.op() + " on " + a->typeString());
  return Status::ok();
}

Status unaryKernel(CudaContext &c, KernelContext &ctx, UnaryOp op) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  if (!launchUnary(op, elemType(x->dtype), x->data, y->data, x->numel(), c.stream))
    return ctx.unsupported("cuda: " + ctx.op() + " on " + x->typeString());
  return Status::ok();
}

Status geluKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(std::string approx, ctx.getAttrs().getString("approximate", "none"));
  if (approx != "none" && approx != "tanh")
    return ctx.error("approximate must be 'none' or 'tanh'");
  return unaryKernel(c, ctx, approx == "tanh" ? UnaryOp::GeluTanh : UnaryOp::GeluErf);
}

Status geluGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(std::string approx, ctx.getAttrs().getString("approximate", "none"));
  if (approx != "none" && approx != "tanh")
    return ctx.error("approximate must be 'none' or 'tanh'");
  if (dy->shape != x->shape)
    return ctx.error("dY and X shapes differ");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dx, ctx.requireOutput(0, x->shape, x->dtype));
  launchGeluGrad(approx == "tanh", dy->as<float>(), x->as<float>(), dx->as<float>(), x->numel(),
                 c.stream);
  return Status::ok();
}

/// DropoutTraining (the CPU kernel's checks and mask, DataMovement.cpp):
/// f32 here; bf16/f16 X is Unimplemented, which the host fallback runs.
Status dropoutTrainingKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  if (x->dtype != program::DTYPE_F32)
    return ctx.unsupported("cuda: DropoutTraining on " + x->typeString());
  STRAIT_ASSIGN_OR_RETURN(cpu::DropoutArgs d, cpu::readDropoutArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  launchDropoutTraining(x->as<float>(), y->as<float>(), x->numel(),
                        d.step ? d.step->as<int64_t>() : nullptr,
                        static_cast<uint64_t>(d.seed), d.key, ctx.getMicroBatch(), d.replica,
                        cpu::dropoutThreshold(d.ratio), 1.0f / (1.0f - d.ratio), c.stream);
  return Status::ok();
}

Status whereKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *cond, ctx.requireInput(0, program::DTYPE_BOOL));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *y, ctx.requireInput(2));
  if (x->dtype != y->dtype)
    return ctx.error("X and Y types differ");
  STRAIT_ASSIGN_OR_RETURN(Shape out, broadcast(ctx, {cond->shape, x->shape, y->shape}));
  STRAIT_ASSIGN_OR_RETURN(Tensor * o, ctx.requireOutput(0, out, x->dtype));
  Index ix;
  if (!broadcastIndex(out, {cond->shape, x->shape, y->shape}, ix))
    return tooManyDims(ctx, out);
  if (!launchWhere(dtypeSize(x->dtype), cond->as<uint8_t>(), x->data, y->data, o->data, ix,
                   c.stream))
    return ctx.unsupported("cuda: Where on " + x->typeString());
  return Status::ok();
}

Status castKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t to, ctx.getAttrs().getInt("to", 0));
  if (!program::DType_IsValid(static_cast<int>(to)))
    return ctx.error("unknown target type " + std::to_string(to));
  DType target = static_cast<DType>(to);
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, target));
  if (x->dtype == target)
    return cudaStatus(cudaMemcpyAsync(y->data, x->data, x->byteSize(), cudaMemcpyDefault,
                                      c.stream),
                      "copy");
  if (!launchCast(elemType(x->dtype), elemType(target), x->data, y->data, x->numel(), c.stream))
    return ctx.unsupported("cuda: Cast from " + x->typeString() + " to " + dtypeName(target));
  return Status::ok();
}

/// Reshape, Flatten, Squeeze, Unsqueeze, Identity: the output's declared
/// shape is the result; the data is copied unless it aliases.
Status copyKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  Tensor *y = ctx.output(0);
  if (!y)
    return ctx.error("missing output 0");
  if (y->dtype != x->dtype || y->numel() != x->numel())
    return ctx.error("output " + y->typeString() + " does not hold the " + x->typeString() +
                     " input");
  if (y->data == x->data || x->byteSize() == 0)
    return Status::ok();
  return cudaStatus(
      cudaMemcpyAsync(y->data, x->data, x->byteSize(), cudaMemcpyDefault, c.stream), "copy");
}

Status transposeKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  int64_t r = x->rank();
  std::vector<int64_t> dflt(r);
  for (int64_t i = 0; i < r; ++i)
    dflt[i] = r - 1 - i;
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> perm, ctx.getAttrs().getInts("perm", dflt));
  if (static_cast<int64_t>(perm.size()) != r)
    return ctx.error("perm has " + std::to_string(perm.size()) + " entries for rank " +
                     std::to_string(r));
  std::vector<int64_t> inStrides(r, 1);
  for (int64_t d = r - 2; d >= 0; --d)
    inStrides[d] = inStrides[d + 1] * x->shape[d + 1];
  Shape out(r);
  std::vector<int64_t> strides(r);
  std::vector<bool> seen(r, false);
  for (int64_t d = 0; d < r; ++d) {
    int64_t p = perm[d] < 0 ? perm[d] + r : perm[d];
    if (p < 0 || p >= r || seen[p])
      return ctx.error("perm is not a permutation");
    seen[p] = true;
    out[d] = x->shape[p];
    strides[d] = inStrides[p];
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  Index ix;
  if (!stridedIndex(out, strides, ix))
    return tooManyDims(ctx, out);
  if (!launchStridedCopy(dtypeSize(x->dtype), x->data, y->data, ix, c.stream))
    return ctx.unsupported("cuda: Transpose of " + x->typeString());
  return Status::ok();
}

Status expandKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  Tensor *y = ctx.output(0);
  if (!y || y->dtype != x->dtype)
    return ctx.error("output 0 must have the input's type");
  // The output's static shape is broadcast(x, shape input); check x fits it.
  STRAIT_ASSIGN_OR_RETURN(Shape out, broadcast(ctx, {x->shape, y->shape}));
  if (out != y->shape)
    return ctx.error(x->typeString() + " does not expand to " + y->typeString());
  Index ix;
  if (!broadcastIndex(out, {x->shape}, ix))
    return tooManyDims(ctx, out);
  if (!launchStridedCopy(dtypeSize(x->dtype), x->data, y->data, ix, c.stream))
    return ctx.unsupported("cuda: Expand of " + x->typeString());
  return Status::ok();
}

/// Copies `rows` rows of `width` bytes between pitched layouts; nothing
/// where the bytes are already in place (the memory plan puts a Concat's
/// inputs in its output and a Split's outputs in its input).
Status copy2D(CudaContext &c, void *dst, size_t dpitch, const void *src, size_t spitch,
              size_t width, size_t rows) {
  if (width == 0 || rows == 0 || (dst == src && (rows == 1 || dpitch == spitch)))
    return Status::ok();
  if (rows == 1 || (dpitch == width && spitch == width)) // contiguous: no pitch limit
    return cudaStatus(cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDefault, c.stream), "copy");
  return cudaStatus(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, rows, cudaMemcpyDefault,
                                      c.stream),
                    "2-D copy");
}

Status concatKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *first, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  int64_t r = first->rank(), axis = axisAttr < 0 ? axisAttr + r : axisAttr;
  if (axis < 0 || axis >= r)
    return ctx.error("axis " + std::to_string(axisAttr) + " out of range");
  Shape out = first->shape;
  out[axis] = 0;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(i, first->dtype));
    for (int64_t d = 0; d < r; ++d)
      if (t->rank() != r || (d != axis && t->shape[d] != first->shape[d]))
        return ctx.error("input " + std::to_string(i) + " " + t->typeString() +
                         " does not fit " + first->typeString());
    out[axis] += t->shape[axis];
  }
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, first->dtype));
  int64_t outer = 1, inner = dtypeSize(first->dtype);
  for (int64_t d = 0; d < axis; ++d)
    outer *= out[d];
  for (int64_t d = axis + 1; d < r; ++d)
    inner *= out[d];
  size_t offset = 0, pitch = out[axis] * inner;
  for (size_t i = 0; i < ctx.numInputs(); ++i) {
    const Tensor *t = ctx.input(i);
    size_t w = t->shape[axis] * inner;
    STRAIT_RETURN_IF_ERROR(copy2D(c, y->as<char>() + offset, pitch, t->data, w, w, outer));
    offset += w;
  }
  return Status::ok();
}

/// Split: the outputs' declared shapes give the pieces (checked against the
/// input and the `split` attribute or input when present).
Status splitKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  int64_t r = x->rank(), axis = axisAttr < 0 ? axisAttr + r : axisAttr;
  if (axis < 0 || axis >= r)
    return ctx.error("axis " + std::to_string(axisAttr) + " out of range");
  int64_t total = 0;
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    Tensor *o = ctx.output(i);
    if (!o || o->dtype != x->dtype || o->rank() != r)
      return ctx.error("output " + std::to_string(i) + " does not fit the input");
    for (int64_t d = 0; d < r; ++d)
      if (d != axis && o->shape[d] != x->shape[d])
        return ctx.error("output " + std::to_string(i) + " " + o->typeString() +
                         " does not fit " + x->typeString());
    total += o->shape[axis];
  }
  if (total != x->shape[axis])
    return ctx.error("outputs add up to " + std::to_string(total) + " along axis " +
                     std::to_string(axis) + ", input has " + std::to_string(x->shape[axis]));
  int64_t outer = 1, inner = dtypeSize(x->dtype);
  for (int64_t d = 0; d < axis; ++d)
    outer *= x->shape[d];
  for (int64_t d = axis + 1; d < r; ++d)
    inner *= x->shape[d];
  size_t offset = 0, pitch = x->shape[axis] * inner;
  for (size_t i = 0; i < ctx.numOutputs(); ++i) {
    Tensor *o = ctx.output(i);
    size_t w = o->shape[axis] * inner;
    STRAIT_RETURN_IF_ERROR(copy2D(c, o->data, w, x->as<char>() + offset, pitch, w, outer));
    offset += w;
  }
  return Status::ok();
}

Status gatherKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *data, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *ind, ctx.requireInput(1));
  if (ind->dtype != program::DTYPE_I64 && ind->dtype != program::DTYPE_I32)
    return ctx.unsupported("cuda: indices must be i32 or i64, got " + ind->typeString());
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  int64_t r = data->rank(), axis = axisAttr < 0 ? axisAttr + r : axisAttr;
  if (axis < 0 || axis >= r)
    return ctx.error("axis " + std::to_string(axisAttr) + " out of range");
  Shape out(data->shape.begin(), data->shape.begin() + axis);
  out.insert(out.end(), ind->shape.begin(), ind->shape.end());
  out.insert(out.end(), data->shape.begin() + axis + 1, data->shape.end());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, data->dtype));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= data->shape[d];
  for (int64_t d = axis + 1; d < r; ++d)
    inner *= data->shape[d];
  size_t es = dtypeSize(data->dtype);
  if (es != 1 && es != 2 && es != 4 && es != 8)
    return ctx.unsupported("cuda: Gather of " + data->typeString());
  launchGather(es, data->data, ind->data, ind->dtype == program::DTYPE_I64, y->data, outer,
               data->shape[axis], ind->numel(), inner, c.errorFlag, tag, c.stream);
  return Status::ok();
}

Status gatherGradKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *ind, ctx.requireInput(1));
  if (ind->dtype != program::DTYPE_I64 && ind->dtype != program::DTYPE_I32)
    return ctx.unsupported("cuda: indices must be i32 or i64, got " + ind->typeString());
  if (!ctx.getAttrs().has("data_shape"))
    return ctx.error("missing attribute 'data_shape'");
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> ds, ctx.getAttrs().getInts("data_shape", {}));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  int64_t r = static_cast<int64_t>(ds.size()), axis = axisAttr < 0 ? axisAttr + r : axisAttr;
  if (axis < 0 || axis >= r)
    return ctx.error("axis " + std::to_string(axisAttr) + " out of range");
  int64_t outer = 1, inner = 1, n = ind->numel();
  for (int64_t d = 0; d < axis; ++d)
    outer *= ds[d];
  for (int64_t d = axis + 1; d < r; ++d)
    inner *= ds[d];
  if (dy->numel() != outer * n * inner)
    return ctx.error("dY " + dy->typeString() + " does not match indices and data_shape");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dd, ctx.requireOutput(0, Shape(ds.begin(), ds.end()),
                                                         program::DTYPE_F32));
  launchGatherGrad(dy->as<float>(), ind->data, ind->dtype == program::DTYPE_I64, dd->as<float>(),
                   outer, ds[axis], n, inner, c.errorFlag, tag, c.stream);
  return Status::ok();
}

#define BIN(OP) [](CudaContext &c, KernelContext &k, int) { return binaryKernel(c, k, BinaryOp::OP); }
#define UN(OP) [](CudaContext &c, KernelContext &k, int) { return unaryKernel(c, k, UnaryOp::OP); }

} // namespace

void addElementwiseKernels(CudaKernelTable &t) {
  t.add("Add", BIN(Add));
  t.add("Sub", BIN(Sub));
  t.add("Mul", BIN(Mul));
  t.add("Div", BIN(Div));
  t.add("Pow", BIN(Pow));
  t.add("Max", BIN(Max));
  t.add("Min", BIN(Min));
  t.add("Equal", BIN(Equal));
  t.add("Less", BIN(Less));
  t.add("LessOrEqual", BIN(LessOrEqual));
  t.add("Greater", BIN(Greater));
  t.add("GreaterOrEqual", BIN(GreaterOrEqual));
  t.add("And", BIN(And));
  t.add("Or", BIN(Or));
  t.add("Neg", UN(Neg));
  t.add("Abs", UN(Abs));
  t.add("Exp", UN(Exp));
  t.add("Log", UN(Log));
  t.add("Sqrt", UN(Sqrt));
  t.add("Reciprocal", UN(Reciprocal));
  t.add("Tanh", UN(Tanh));
  t.add("Sigmoid", UN(Sigmoid));
  t.add("Relu", UN(Relu));
  t.add("Erf", UN(Erf));
  t.add("Sin", UN(Sin));
  t.add("Cos", UN(Cos));
  t.add("Floor", UN(Floor));
  t.add("Ceil", UN(Ceil));
  t.add("Not", UN(Not));
  t.add("Gelu", geluKernel);
  t.add("GeluGrad", geluGradKernel);
  t.add("DropoutTraining", dropoutTrainingKernel);
  t.add("Where", whereKernel);
  t.add("Cast", castKernel);
}

void addLayoutKernels(CudaKernelTable &t) {
  for (const char *op : {"Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})
    t.add(op, copyKernel);
  t.add("Transpose", transposeKernel);
  t.add("Expand", expandKernel);
  t.add("Concat", concatKernel);
  t.add("Split", splitKernel);
  t.add("Gather", gatherKernel);
  t.add("GatherGrad", gatherGradKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
