//===- Indexing.cpp - Gather, scatter, Trilu, OneHot, TopK ----------------===//
//
// Kernels driven by index tensors (i32 or i64, negative indices count from
// the end; out-of-range indices are errors, never memory reads).
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <type_traits>

namespace strait {
namespace rt {
namespace cpu {
namespace {

StatusOr<std::vector<int64_t>> readIndices(const KernelContext &ctx,
                                           const Tensor &t, int64_t dim) {
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> idx, readInts(ctx, t));
  for (int64_t &i : idx) {
    if (i < -dim || i >= dim)
      return ctx.error("index " + std::to_string(i) + " out of range for a dim of " +
                       std::to_string(dim));
    if (i < 0)
      i += dim;
  }
  return idx;
}

Status gatherKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *ind, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, x->rank()));
  STRAIT_ASSIGN_OR_RETURN(auto idx, readIndices(ctx, *ind, x->shape[axis]));
  Shape out(x->shape.begin(), x->shape.begin() + axis);
  out.insert(out.end(), ind->shape.begin(), ind->shape.end());
  out.insert(out.end(), x->shape.begin() + axis + 1, x->shape.end());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, x->dtype));
  int64_t outer = 1, inner = 1, len = x->shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= x->shape[d];
  for (int64_t d = axis + 1; d < x->rank(); ++d)
    inner *= x->shape[d];
  size_t bytes = inner * dtypeSize(x->dtype);
  int64_t n = static_cast<int64_t>(idx.size());
  parallelFor(outer * n, 64, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      int64_t o = r / n, i = r % n;
      std::memcpy(y->as<char>() + r * bytes,
                  x->as<char>() + (o * len + idx[i]) * bytes, bytes);
    }
  });
  return Status::ok();
}

/// Shared by GatherElements and ScatterElements: the data offset of every
/// element of the index tensor.
StatusOr<std::vector<int64_t>> elementOffsets(const KernelContext &ctx,
                                              const Tensor &data,
                                              const Tensor &ind, int64_t axis) {
  if (ind.rank() != data.rank())
    return ctx.error("indices rank differs from data rank");
  STRAIT_ASSIGN_OR_RETURN(auto idx, readIndices(ctx, ind, data.shape[axis]));
  std::vector<int64_t> st = rowMajorStrides(data.shape), offs(idx.size());
  for (size_t i = 0; i < idx.size(); ++i) {
    int64_t rem = static_cast<int64_t>(i), off = 0;
    for (int64_t d = ind.rank() - 1; d >= 0; --d) {
      int64_t c = rem % ind.shape[d];
      rem /= ind.shape[d];
      off += (d == axis ? idx[i] : c) * st[d];
    }
    offs[i] = off;
  }
  return offs;
}

Status gatherElementsKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(ElementsArgs a, gatherElementsArgs(ctx));
  const Tensor *x = a.x;
  Tensor *y = a.y;
  STRAIT_ASSIGN_OR_RETURN(auto offs, elementOffsets(ctx, *x, *a.indices, a.axis));
  size_t es = dtypeSize(x->dtype);
  for (size_t i = 0; i < offs.size(); ++i)
    std::memcpy(y->as<char>() + i * es, x->as<char>() + offs[i] * es, es);
  return Status::ok();
}

Status scatterElementsKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(ElementsArgs a, scatterElementsArgs(ctx));
  const Tensor *x = a.x, *upd = a.updates;
  Tensor *y = a.y;
  const std::string &red = a.reduction;
  STRAIT_ASSIGN_OR_RETURN(auto offs, elementOffsets(ctx, *x, *a.indices, a.axis));
  if (y->data != x->data)
    std::memcpy(y->data, x->data, x->byteSize());
  if (red == "none") {
    size_t es = dtypeSize(x->dtype);
    for (size_t i = 0; i < offs.size(); ++i)
      std::memcpy(y->as<char>() + offs[i] * es, upd->as<char>() + i * es, es);
    return Status::ok();
  }
  if (x->dtype != program::DTYPE_F32 || (red != "add" && red != "mul"))
    return ctx.unsupported("reduction '" + red + "' on " + x->typeString());
  for (size_t i = 0; i < offs.size(); ++i) {
    float &dst = y->as<float>()[offs[i]];
    dst = red == "add" ? dst + upd->as<float>()[i] : dst * upd->as<float>()[i];
  }
  return Status::ok();
}

Status triluKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t upper, ctx.getAttrs().getInt("upper", 1));
  int64_t k = 0;
  if (const Tensor *kt = ctx.input(1)) {
    STRAIT_ASSIGN_OR_RETURN(auto kv, readInts(ctx, *kt));
    if (kv.size() != 1)
      return ctx.error("k must be a scalar");
    k = kv[0];
  }
  if (x->rank() < 2)
    return ctx.error("input must have rank >= 2");
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
  int64_t rows = x->shape[x->rank() - 2], cols = x->shape[x->rank() - 1];
  size_t es = dtypeSize(x->dtype);
  int64_t mats = x->numel() / std::max<int64_t>(rows * cols, 1);
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) {
        int64_t off = (m * rows + i) * cols + j;
        bool keep = upper ? j - i >= k : j - i <= k;
        if (keep)
          std::memcpy(y->as<char>() + off * es, x->as<char>() + off * es, es);
        else
          std::memset(y->as<char>() + off * es, 0, es);
      }
  return Status::ok();
}

Status oneHotKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *ind, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *depthT, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *vals, ctx.requireInput(2));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", -1));
  if (vals->numel() != 2)
    return ctx.error("values must hold [off, on]");
  int64_t depth = 0;
  if (depthT->dtype == program::DTYPE_F32)
    depth = static_cast<int64_t>(depthT->as<float>()[0]);
  else {
    STRAIT_ASSIGN_OR_RETURN(auto dv, readInts(ctx, *depthT));
    depth = dv.at(0);
  }
  std::vector<int64_t> idx;
  if (ind->dtype == program::DTYPE_F32)
    for (int64_t i = 0; i < ind->numel(); ++i)
      idx.push_back(static_cast<int64_t>(ind->as<float>()[i]));
  else {
    STRAIT_ASSIGN_OR_RETURN(idx, readInts(ctx, *ind));
  }
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, ind->rank() + 1));
  Shape out = ind->shape;
  out.insert(out.begin() + axis, depth);
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, vals->dtype));
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= out[d];
  for (size_t d = axis + 1; d < out.size(); ++d)
    inner *= out[d];
  size_t es = dtypeSize(vals->dtype);
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < depth; ++c)
      for (int64_t i = 0; i < inner; ++i) {
        int64_t v = idx[o * inner + i];
        if (v < 0)
          v += depth;
        std::memcpy(y->as<char>() + ((o * depth + c) * inner + i) * es,
                    vals->as<char>() + (v == c ? es : 0), es);
      }
  return Status::ok();
}

template <typename T> bool isNaN(T v) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(v);
  else
    return false;
}

template <typename T> void runTopK(const TopKArgs &a) {
  int64_t k = a.k, len = a.len, inner = a.inner;
  std::vector<int64_t> order(len);
  for (int64_t o = 0; o < a.outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T *in = a.x->as<T>() + o * len * inner + i;
      std::iota(order.begin(), order.end(), 0);
      // NaN counts as larger than every number (PyTorch's and NumPy's
      // order), so the order is total: NaNs first with `largest`, last
      // without, among themselves by index. The CUDA kernel's topKBefore.
      auto cmp = [&](int64_t x, int64_t y) {
        T vx = in[x * inner], vy = in[y * inner];
        bool nx = isNaN(vx), ny = isNaN(vy);
        if (nx || ny)
          return nx && ny ? x < y : a.largest ? nx : ny;
        if (vx != vy)
          return a.largest ? vx > vy : vx < vy;
        return x < y;
      };
      std::partial_sort(order.begin(), order.begin() + k, order.end(), cmp);
      for (int64_t j = 0; j < k; ++j) {
        int64_t off = (o * k + j) * inner + i;
        a.values->as<T>()[off] = in[order[j] * inner];
        a.indices->as<int64_t>()[off] = order[j];
      }
    }
}

Status topKKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *kt, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(auto kv, readInts(ctx, *kt));
  STRAIT_ASSIGN_OR_RETURN(TopKArgs a, topKArgs(ctx, kv));
#define STRAIT_TOPK_CASE(T)                                                    \
  runTopK<T>(a);                                                               \
  return Status::ok();
  STRAIT_DISPATCH_NUMERIC(a.x->dtype, STRAIT_TOPK_CASE)
#undef STRAIT_TOPK_CASE
  return ctx.unsupported("dtype " + a.x->typeString());
}

} // namespace

void addIndexingKernels(KernelTable &table) {
  table.add("Gather", gatherKernel);
  table.add("GatherElements", gatherElementsKernel);
  table.add("ScatterElements", scatterElementsKernel);
  table.add("Trilu", triluKernel);
  table.add("OneHot", oneHotKernel);
  table.add("TopK", topKKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
