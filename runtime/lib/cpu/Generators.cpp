//===- Generators.cpp - Shape, Size, Constant*, Range, EyeLike, Resize ----===//
//
// Kernels whose outputs come from shapes or attributes rather than input
// data, and Resize (nearest / linear, the common coordinate modes).
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "strait/runtime/Program.h"

#include <cmath>
#include <cstring>

namespace strait {
namespace rt {
namespace cpu {
namespace {

Status shapeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  int64_t r = x->rank();
  STRAIT_ASSIGN_OR_RETURN(int64_t start, ctx.getAttrs().getInt("start", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t end, ctx.getAttrs().getInt("end", r));
  start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
  end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
  int64_t n = std::max<int64_t>(0, end - start);
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, {n}, program::DTYPE_I64));
  for (int64_t i = 0; i < n; ++i)
    y->as<int64_t>()[i] = x->shape[start + i];
  return Status::ok();
}

Status sizeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, {}, program::DTYPE_I64));
  y->as<int64_t>()[0] = x->numel();
  return Status::ok();
}

Status constantOfShapeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *s, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(Shape shape, readInts(ctx, *s));
  STRAIT_ASSIGN_OR_RETURN(const program::TensorData *value,
                          ctx.getAttrs().getTensor("value"));
  DType dtype = value ? value->dtype() : program::DTYPE_F32;
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, shape, dtype));
  OwnedTensor scalar(dtype, Shape(value ? value->shape_size() : 0, 1));
  if (value)
    STRAIT_RETURN_IF_ERROR(copyTensorData(*value, scalar.tensor, "attribute 'value'"));
  if (scalar.tensor.numel() != 1)
    return ctx.error("value must hold one element");
  size_t es = dtypeSize(dtype);
  for (int64_t i = 0; i < y->numel(); ++i)
    std::memcpy(y->as<char>() + i * es, scalar.buffer.data(), es);
  return Status::ok();
}

Status constantKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const program::TensorData *value,
                          ctx.getAttrs().getTensor("value"));
  Tensor *y = ctx.output(0);
  if (!y)
    return ctx.error("missing output 0");
  if (value)
    return copyTensorData(*value, *y, "attribute 'value'");
  if (ctx.getAttrs().has("value_float")) {
    STRAIT_ASSIGN_OR_RETURN(Tensor * out, ctx.requireOutput(0, {}, program::DTYPE_F32));
    STRAIT_ASSIGN_OR_RETURN(float v, ctx.getAttrs().getFloat("value_float", 0));
    out->as<float>()[0] = v;
    return Status::ok();
  }
  if (ctx.getAttrs().has("value_floats")) {
    STRAIT_ASSIGN_OR_RETURN(auto v, ctx.getAttrs().getFloats("value_floats", {}));
    STRAIT_ASSIGN_OR_RETURN(Tensor * out, ctx.requireOutput(0, {int64_t(v.size())}, program::DTYPE_F32));
    std::copy(v.begin(), v.end(), out->as<float>());
    return Status::ok();
  }
  if (ctx.getAttrs().has("value_int")) {
    STRAIT_ASSIGN_OR_RETURN(Tensor * out, ctx.requireOutput(0, {}, program::DTYPE_I64));
    STRAIT_ASSIGN_OR_RETURN(int64_t v, ctx.getAttrs().getInt("value_int", 0));
    out->as<int64_t>()[0] = v;
    return Status::ok();
  }
  if (ctx.getAttrs().has("value_ints")) {
    STRAIT_ASSIGN_OR_RETURN(auto v, ctx.getAttrs().getInts("value_ints", {}));
    STRAIT_ASSIGN_OR_RETURN(Tensor * out, ctx.requireOutput(0, {int64_t(v.size())}, program::DTYPE_I64));
    std::copy(v.begin(), v.end(), out->as<int64_t>());
    return Status::ok();
  }
  return ctx.unsupported("Constant without a tensor, float(s) or int(s) value");
}

template <typename T> Status runRange(KernelContext &ctx) {
  T start = ctx.input(0)->as<T>()[0], limit = ctx.input(1)->as<T>()[0],
    delta = ctx.input(2)->as<T>()[0];
  if (delta == T(0))
    return ctx.error("delta is 0");
  int64_t n = std::max<int64_t>(
      0, static_cast<int64_t>(std::ceil(double(limit - start) / double(delta))));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, {n}, ctx.input(0)->dtype));
  for (int64_t i = 0; i < n; ++i)
    y->as<T>()[i] = static_cast<T>(start + T(i) * delta);
  return Status::ok();
}

Status rangeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *s, ctx.requireInput(0));
  for (size_t i = 0; i < 3; ++i) {
    STRAIT_ASSIGN_OR_RETURN(const Tensor *t, ctx.requireInput(i, s->dtype));
    if (t->numel() != 1)
      return ctx.error("input " + std::to_string(i) + " must be a scalar");
  }
#define STRAIT_RANGE_CASE(T) return runRange<T>(ctx);
  STRAIT_DISPATCH_NUMERIC(s->dtype, STRAIT_RANGE_CASE)
#undef STRAIT_RANGE_CASE
  return ctx.unsupported("dtype " + s->typeString());
}

Status eyeLikeKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t k, ctx.getAttrs().getInt("k", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t dt, ctx.getAttrs().getInt("dtype", x->dtype));
  if (x->rank() != 2 || !program::DType_IsValid(static_cast<int>(dt)))
    return ctx.error("needs a 2-D input and a valid dtype");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, static_cast<DType>(dt)));
  std::memset(y->data, 0, y->byteSize());
  for (int64_t i = 0; i < x->shape[0]; ++i) {
    int64_t j = i + k;
    if (j < 0 || j >= x->shape[1])
      continue;
    int64_t off = i * x->shape[1] + j;
#define STRAIT_EYE_CASE(T)                                                     \
  y->as<T>()[off] = T(1);                                                      \
  break;
    STRAIT_DISPATCH_NUMERIC(y->dtype, STRAIT_EYE_CASE)
#undef STRAIT_EYE_CASE
    if (y->dtype == program::DTYPE_BOOL)
      y->as<bool>()[off] = true;
  }
  return Status::ok();
}

} // namespace

void addGeneratorKernels(KernelTable &table) {
  table.add("Shape", shapeKernel);
  table.add("Size", sizeKernel);
  table.add("ConstantOfShape", constantOfShapeKernel);
  table.add("Constant", constantKernel);
  table.add("Range", rangeKernel);
  table.add("EyeLike", eyeLikeKernel);
  addResizeKernels(table);
}

} // namespace cpu
} // namespace rt
} // namespace strait
