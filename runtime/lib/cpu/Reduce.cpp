//===- Reduce.cpp - Reductions, ArgMax/ArgMin and CumSum ------------------===//
//
// The Reduce* family (axes from the attribute before opset 18 and from the
// second input after; ReduceSum since opset 13), arg reductions and cumulative
// sums. Accumulation is in double for floating point types.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include <cmath>
#include <limits>

namespace strait {
namespace rt {
namespace cpu {
namespace {

enum class ReduceKind { Sum, Mean, Max, Min, Prod, L1, L2, LogSum, LogSumExp, SumSquare };

struct ReducePlan {
  Shape outShape;                     // with or without kept dims
  std::vector<int64_t> keptDims, keptStrides, redDims, redStrides;
  int64_t outCount = 1, redCount = 1;
};

StatusOr<ReducePlan> planReduce(const KernelContext &ctx, const Shape &in,
                                std::vector<int64_t> axes, bool keepDims,
                                bool noopEmpty) {
  int64_t rank = static_cast<int64_t>(in.size());
  std::vector<bool> reduced(rank, axes.empty() && !noopEmpty);
  for (int64_t a : axes) {
    STRAIT_ASSIGN_OR_RETURN(int64_t ax, normalizeAxis(ctx, a, rank));
    reduced[ax] = true;
  }
  std::vector<int64_t> strides = rowMajorStrides(in);
  ReducePlan p;
  for (int64_t d = 0; d < rank; ++d) {
    if (reduced[d]) {
      p.redDims.push_back(in[d]);
      p.redStrides.push_back(strides[d]);
      p.redCount *= in[d];
      if (keepDims)
        p.outShape.push_back(1);
    } else {
      p.keptDims.push_back(in[d]);
      p.keptStrides.push_back(strides[d]);
      p.outCount *= in[d];
      p.outShape.push_back(in[d]);
    }
  }
  return p;
}

/// Steps `idx`, a position over the first `dims` reduced dims, to the next
/// one in row-major order (wrapping to 0), and `off` by their strides.
inline void nextReduced(const ReducePlan &p, int64_t dims, std::vector<int64_t> &idx,
                        int64_t &off) {
  for (int64_t d = dims - 1; d >= 0; --d) {
    off += p.redStrides[d];
    if (++idx[d] < p.redDims[d])
      return;
    off -= idx[d] * p.redStrides[d];
    idx[d] = 0;
  }
}

/// A sum or mean whose last reduced dim is followed by kept dims (a bias
/// gradient over [rows, n, d], a sum over a middle axis): each output row of
/// `inner` = the last reduced dim's stride contiguous elements is the sum of
/// whole input rows, added row by row into double accumulators. Every output
/// element gets the same additions in the same order as runReduce's walk.
template <typename T>
void runRowSums(const T *in, T *out, const ReducePlan &p, bool mean) {
  int64_t nr = p.redDims.size(), inner = p.redStrides[nr - 1];
  // The kept dims before the trailing inner block index the output rows.
  size_t outerDims = 0;
  while (outerDims < p.keptStrides.size() && p.keptStrides[outerDims] >= inner)
    ++outerDims;
  int64_t rows = p.outCount / inner;
  parallelFor(rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(p.redCount * inner, 1)),
              [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(static_cast<size_t>(inner));
    std::vector<int64_t> idx(nr);
    for (int64_t r = r0; r < r1; ++r) {
      int64_t base = 0, rem = r;
      for (int64_t d = static_cast<int64_t>(outerDims) - 1; d >= 0; --d) {
        base += (rem % p.keptDims[d]) * p.keptStrides[d];
        rem /= p.keptDims[d];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      std::fill(idx.begin(), idx.end(), 0);
      for (int64_t i = 0, off = base; i < p.redCount; ++i) {
        const T *row = in + off;
        for (int64_t j = 0; j < inner; ++j)
          acc[j] += static_cast<double>(row[j]);
        nextReduced(p, nr, idx, off);
      }
      T *o = out + r * inner;
      for (int64_t j = 0; j < inner; ++j)
        o[j] = static_cast<T>(mean ? acc[j] / static_cast<double>(p.redCount) : acc[j]);
    }
  });
}

template <typename T>
void runReduce(const Tensor &x, Tensor &y, const ReducePlan &p, ReduceKind k) {
  const T *in = x.as<T>();
  T *out = y.as<T>();
  int64_t nk = p.keptDims.size(), nr = p.redDims.size();
  bool sum = k == ReduceKind::Sum || k == ReduceKind::Mean;
  if (sum && nr > 0 && p.redStrides[nr - 1] > 1 && p.redCount > 0) {
    runRowSums(in, out, p, k == ReduceKind::Mean);
    return;
  }
  parallelFor(p.outCount, std::max<int64_t>(1, 4096 / std::max<int64_t>(p.redCount, 1)),
              [&](int64_t o0, int64_t o1) {
    std::vector<int64_t> idx(nr);
    for (int64_t o = o0; o < o1; ++o) {
      int64_t base = 0, rem = o;
      for (int64_t d = nk - 1; d >= 0; --d) {
        base += (rem % p.keptDims[d]) * p.keptStrides[d];
        rem /= p.keptDims[d];
      }
      double acc = k == ReduceKind::Prod ? 1.0
                   : k == ReduceKind::Max ? -std::numeric_limits<double>::infinity()
                   : k == ReduceKind::Min ? std::numeric_limits<double>::infinity()
                                          : 0.0;
      double mx = -std::numeric_limits<double>::infinity();
      if (k == ReduceKind::LogSumExp) {
        std::fill(idx.begin(), idx.end(), 0);
        for (int64_t i = 0, off = base; i < p.redCount; ++i) {
          mx = std::max<double>(mx, in[off]);
          nextReduced(p, nr, idx, off);
        }
      }
      bool summing = k == ReduceKind::Sum || k == ReduceKind::Mean;
      if (summing && nr > 0 && p.redStrides[nr - 1] == 1) {
        // A sum whose innermost reduced dimension is contiguous (bias
        // gradients, global means): whole runs of it, the same additions
        // in the same order as the walk below, without its per-element
        // switch and index carry.
        int64_t len = p.redDims[nr - 1];
        std::fill(idx.begin(), idx.end(), 0);
        for (int64_t i = 0, off = base; i < p.redCount; i += len) {
          const T *run = in + off;
          for (int64_t j = 0; j < len; ++j)
            acc += static_cast<double>(run[j]);
          nextReduced(p, nr - 1, idx, off);
        }
        if (k == ReduceKind::Mean)
          acc /= static_cast<double>(p.redCount);
        out[o] = static_cast<T>(acc);
        continue;
      }
      std::fill(idx.begin(), idx.end(), 0);
      for (int64_t i = 0, off = base; i < p.redCount; ++i) {
        double v = static_cast<double>(in[off]);
        switch (k) {
        case ReduceKind::Sum: case ReduceKind::Mean: case ReduceKind::LogSum:
          acc += v; break;
        case ReduceKind::Max: acc = std::max(acc, v); break;
        case ReduceKind::Min: acc = std::min(acc, v); break;
        case ReduceKind::Prod: acc *= v; break;
        case ReduceKind::L1: acc += std::abs(v); break;
        case ReduceKind::L2: case ReduceKind::SumSquare: acc += v * v; break;
        case ReduceKind::LogSumExp: acc += std::exp(v - mx); break;
        }
        nextReduced(p, nr, idx, off);
      }
      if (k == ReduceKind::Mean) acc /= static_cast<double>(p.redCount);
      if (k == ReduceKind::L2) acc = std::sqrt(acc);
      if (k == ReduceKind::LogSum) acc = std::log(acc);
      if (k == ReduceKind::LogSumExp) acc = std::log(acc) + mx;
      out[o] = static_cast<T>(acc);
    }
  });
}

Status reduceKernel(KernelContext &ctx, ReduceKind kind) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> axes, ctx.getAttrs().getInts("axes", {}));
  if (const Tensor *axesIn = ctx.input(1)) {
    STRAIT_ASSIGN_OR_RETURN(axes, readInts(ctx, *axesIn));
  }
  STRAIT_ASSIGN_OR_RETURN(int64_t keep, ctx.getAttrs().getInt("keepdims", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t noop, ctx.getAttrs().getInt("noop_with_empty_axes", 0));
  STRAIT_ASSIGN_OR_RETURN(ReducePlan p, planReduce(ctx, x->shape, axes, keep != 0, noop != 0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, p.outShape, x->dtype));
#define STRAIT_REDUCE_CASE(T)                                                  \
  runReduce<T>(*x, *y, p, kind);                                               \
  return Status::ok();
  STRAIT_DISPATCH_NUMERIC(x->dtype, STRAIT_REDUCE_CASE)
#undef STRAIT_REDUCE_CASE
  return ctx.unsupported("dtype " + x->typeString());
}

template <typename T>
void runArg(const Tensor &x, Tensor &y, int64_t axis, bool isMax, bool last) {
  int64_t outer = 1, len = x.shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d)
    inner *= x.shape[d];
  const T *in = x.as<T>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      int64_t best = 0;
      const T *p = in + o * len * inner + i;
      for (int64_t j = 1; j < len; ++j) {
        T v = p[j * inner], b = p[best * inner];
        bool better = isMax ? (v > b || (last && v == b))
                            : (v < b || (last && v == b));
        if (better)
          best = j;
      }
      y.as<int64_t>()[o * inner + i] = best;
    }
}

Status argKernel(KernelContext &ctx, bool isMax) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axisAttr, ctx.getAttrs().getInt("axis", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t keep, ctx.getAttrs().getInt("keepdims", 1));
  STRAIT_ASSIGN_OR_RETURN(int64_t last, ctx.getAttrs().getInt("select_last_index", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisAttr, x->rank()));
  Shape out = x->shape;
  if (keep)
    out[axis] = 1;
  else
    out.erase(out.begin() + axis);
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, program::DTYPE_I64));
#define STRAIT_ARG_CASE(T)                                                     \
  runArg<T>(*x, *y, axis, isMax, last != 0);                                   \
  return Status::ok();
  STRAIT_DISPATCH_NUMERIC(x->dtype, STRAIT_ARG_CASE)
#undef STRAIT_ARG_CASE
  return ctx.unsupported("dtype " + x->typeString());
}

template <typename T>
void runCumSum(const Tensor &x, Tensor &y, int64_t axis, bool exclusive,
               bool reverse) {
  int64_t outer = 1, len = x.shape[axis], inner = 1;
  for (int64_t d = 0; d < axis; ++d)
    outer *= x.shape[d];
  for (int64_t d = axis + 1; d < x.rank(); ++d)
    inner *= x.shape[d];
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const T *in = x.as<T>() + o * len * inner + i;
      T *out = y.as<T>() + o * len * inner + i;
      T acc = 0;
      for (int64_t s = 0; s < len; ++s) {
        int64_t j = reverse ? len - 1 - s : s;
        if (exclusive) {
          out[j * inner] = acc;
          acc += in[j * inner];
        } else {
          acc += in[j * inner];
          out[j * inner] = acc;
        }
      }
    }
}

Status cumSumKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *x, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *axisT, ctx.requireInput(1));
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> axisV, readInts(ctx, *axisT));
  if (axisV.size() != 1)
    return ctx.error("axis must hold one value");
  STRAIT_ASSIGN_OR_RETURN(int64_t axis, normalizeAxis(ctx, axisV[0], x->rank()));
  STRAIT_ASSIGN_OR_RETURN(int64_t excl, ctx.getAttrs().getInt("exclusive", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t rev, ctx.getAttrs().getInt("reverse", 0));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, x->shape, x->dtype));
#define STRAIT_CUMSUM_CASE(T)                                                  \
  runCumSum<T>(*x, *y, axis, excl != 0, rev != 0);                             \
  return Status::ok();
  STRAIT_DISPATCH_NUMERIC(x->dtype, STRAIT_CUMSUM_CASE)
#undef STRAIT_CUMSUM_CASE
  return ctx.unsupported("dtype " + x->typeString());
}

} // namespace

void addReduceKernels(KernelTable &table) {
  const std::pair<const char *, ReduceKind> kinds[] = {
      {"ReduceSum", ReduceKind::Sum},       {"ReduceMean", ReduceKind::Mean},
      {"ReduceMax", ReduceKind::Max},       {"ReduceMin", ReduceKind::Min},
      {"ReduceProd", ReduceKind::Prod},     {"ReduceL1", ReduceKind::L1},
      {"ReduceL2", ReduceKind::L2},         {"ReduceLogSum", ReduceKind::LogSum},
      {"ReduceLogSumExp", ReduceKind::LogSumExp},
      {"ReduceSumSquare", ReduceKind::SumSquare}};
  for (const auto &entry : kinds) {
    ReduceKind kind = entry.second;
    table.add(entry.first,
              [kind](KernelContext &ctx) { return reduceKernel(ctx, kind); });
  }
  table.add("ArgMax", [](KernelContext &ctx) { return argKernel(ctx, true); });
  table.add("ArgMin", [](KernelContext &ctx) { return argKernel(ctx, false); });
  table.add("CumSum", cumSumKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
