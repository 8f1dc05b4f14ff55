//===- CudaRotary.cpp - FusedRotaryEmbedding on CUDA (host side) ----------===//
//
// graph.FusedRotaryEmbedding(X, Cos, Sin) {adjoint} -> Y: the shared operand
// checks (fusedRotaryEmbeddingArgs, KernelArgs.h), then one launch of
// Rotary.cu's kernel over X's leading dims. Dims of size 1 are dropped and
// adjacent dims merged where Cos and Sin are both contiguous across them
// (or both broadcast), so the usual [B, H, T, D] X with [T, D] tables is a
// [B * H, T] walk. More than kMaxDims leading dims left after merging is
// an Unimplemented error.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

namespace strait {
namespace rt {
namespace cuda {
namespace {

/// X's leading dims and the tables' strides over them, merged; false when
/// more than kMaxDims remain.
bool rotaryPlan(const RotaryArgs &a, RotaryPlan &p) {
  p.rows = a.rows;
  p.h = a.h;
  p.adjoint = a.adjoint;
  p.cosStep = a.cosStrides.back();
  p.sinStep = a.sinStrides.back();
  std::vector<int64_t> shape, cs, ss;
  for (size_t dim = 0; dim + 1 < a.x->shape.size(); ++dim) {
    int64_t n = a.x->shape[dim];
    if (n == 1)
      continue;
    int64_t c = a.cosStrides[dim], s = a.sinStrides[dim];
    // The previous dim folds into this one when stepping it once equals
    // stepping this one n times, in both tables.
    if (!shape.empty() && cs.back() == c * n && ss.back() == s * n) {
      shape.back() *= n;
      cs.back() = c;
      ss.back() = s;
      continue;
    }
    shape.push_back(n);
    cs.push_back(c);
    ss.push_back(s);
  }
  if (shape.size() > static_cast<size_t>(kMaxDims))
    return false;
  p.rank = static_cast<int>(shape.size());
  for (int d = 0; d < p.rank; ++d) {
    p.shape[d] = shape[d];
    p.cosStride[d] = cs[d];
    p.sinStride[d] = ss[d];
  }
  return true;
}

Status fusedRotaryEmbeddingKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(RotaryArgs a, fusedRotaryEmbeddingArgs(ctx));
  if (a.rows == 0)
    return Status::ok();
  RotaryPlan p;
  if (!rotaryPlan(a, p))
    return ctx.unsupported("cuda: X " + a.x->typeString() + " has more than " +
                           std::to_string(kMaxDims) + " leading dims after merging");
  if (!launchRotary(elemType(a.x->dtype), a.x->data, elemType(a.cos->dtype), a.cos->data,
                    elemType(a.sin->dtype), a.sin->data, a.y->data, p, c.stream))
    return ctx.unsupported("cuda: X " + a.x->typeString() + ", Cos " + a.cos->typeString() +
                           ", Sin " + a.sin->typeString());
  return checkLaunch(ctx);
}

} // namespace

void addRotaryKernels(CudaKernelTable &t) {
  t.add("FusedRotaryEmbedding", fusedRotaryEmbeddingKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
