//===- CudaMatMul.cpp - MatMul and Gemm through cuBLAS --------------------===//
//
// Row-major products on column-major cuBLAS: Y^T = op(B)^T op(A)^T, so B is
// passed first. f32 tensors use the compute type of CudaOptions::matmul
// (exact f32, TF32 or bf16 tensor cores with f32 accumulation); f64, f16
// and bf16 tensors use their own types with f64 / f32 accumulation.
// MatMul batches: a 2-D right operand folds the left batch into M (one
// GEMM); equal or one-sided batches run as one strided-batched GEMM; other
// broadcasts loop over the batch.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <climits>

namespace strait {
namespace rt {
namespace cuda {
namespace {

struct GemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  bool f64;
};

StatusOr<GemmTypes> gemmTypes(const CudaContext &c, const KernelContext &ctx, DType t) {
  switch (t) {
  case program::DTYPE_F32:
    return GemmTypes{CUDA_R_32F,
                     c.options.matmul == MatmulPrecision::BF16   ? CUBLAS_COMPUTE_32F_FAST_16BF
                     : c.options.matmul == MatmulPrecision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                                 : CUBLAS_COMPUTE_32F,
                     false};
  case program::DTYPE_F64:
    return GemmTypes{CUDA_R_64F, CUBLAS_COMPUTE_64F, true};
  case program::DTYPE_F16:
    return GemmTypes{CUDA_R_16F, CUBLAS_COMPUTE_32F, false};
  case program::DTYPE_BF16:
    return GemmTypes{CUDA_R_16BF, CUBLAS_COMPUTE_32F, false};
  default:
    return ctx.unsupported("cuda: " + ctx.op() + " on " + dtypeName(t));
  }
}

/// Y[b] = alpha * op(A[b]) op(B[b]) + beta * Y[b], row-major, `batch` GEMMs
/// with element strides sA, sB, sY.
Status gemm(CudaContext &c, const KernelContext &ctx, const GemmTypes &ty, bool ta, bool tb,
            int64_t m, int64_t n, int64_t k, double alpha, const void *a, int64_t sA,
            const void *b, int64_t sB, double beta, void *y, int64_t sY, int64_t batch) {
  if (m == 0 || n == 0 || batch == 0)
    return Status::ok();
  for (int64_t v : {m, n, k, batch})
    if (v > INT_MAX)
      return ctx.unsupported("cuda: GEMM dimension " + std::to_string(v) + " exceeds int");
  int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  float alphaF = static_cast<float>(alpha), betaF = static_cast<float>(beta);
  const void *pa = ty.f64 ? static_cast<const void *>(&alpha) : &alphaF;
  const void *pb = ty.f64 ? static_cast<const void *>(&beta) : &betaF;
  if (k == 0 && beta == 0.0) { // empty sum: cuBLAS may leave Y untouched
    size_t es = ty.f64 ? 8 : ty.data == CUDA_R_32F ? 4 : 2;
    return cudaStatus(cudaMemsetAsync(y, 0, es * m * n * batch, c.stream), "memset");
  }
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      c.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), pa, b, ty.data, ldb, sB, a,
      ty.data, lda, sA, pb, y, ty.data, static_cast<int>(n), sY, static_cast<int>(batch),
      ty.compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return cublasStatus(st, "GEMM " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                std::to_string(k) + " batch " + std::to_string(batch))
        .withKernel(ctx.op());
  return Status::ok();
}

Status matMulKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1, a->dtype));
  STRAIT_ASSIGN_OR_RETURN(GemmTypes ty, gemmTypes(c, ctx, a->dtype));
  if (a->rank() == 0 || b->rank() == 0)
    return ctx.error("MatMul operands must have rank >= 1");
  Shape as = a->shape, bs = b->shape;
  bool aVec = as.size() == 1, bVec = bs.size() == 1;
  if (aVec)
    as.insert(as.begin(), 1);
  if (bVec)
    bs.push_back(1);
  int64_t m = as[as.size() - 2], k = as.back(), n = bs.back();
  if (bs[bs.size() - 2] != k)
    return ctx.error("inner dimensions differ: " + a->typeString() + " x " + b->typeString());
  Shape ba(as.begin(), as.end() - 2), bb(bs.begin(), bs.end() - 2);
  size_t r = std::max(ba.size(), bb.size());
  Shape batch(r, 1);
  std::vector<int64_t> sa(r, 0), sb(r, 0);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - ba.size() ? 1 : ba[i - (r - ba.size())];
    int64_t db = i < r - bb.size() ? 1 : bb[i - (r - bb.size())];
    if (da != db && da != 1 && db != 1)
      return ctx.error("batch dimensions do not broadcast: " + a->typeString() + " x " +
                       b->typeString());
    batch[i] = da == 1 ? db : da;
  }
  Shape out = batch;
  if (!aVec)
    out.push_back(m);
  if (!bVec)
    out.push_back(n);
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, out, a->dtype));
  int64_t nb = numElements(batch), na = numElements(ba), nbb = numElements(bb);
  if (nbb == 1) // B shared: fold A's batch into M
    return gemm(c, ctx, ty, false, false, na * m, n, k, 1.0, a->data, 0, b->data, 0, 0.0,
                y->data, 0, 1);
  if (na == nb && nbb == nb && ba.size() == bb.size() && ba == bb)
    return gemm(c, ctx, ty, false, false, m, n, k, 1.0, a->data, m * k, b->data, k * n, 0.0,
                y->data, m * n, nb);
  if (na == 1 && nbb == nb)
    return gemm(c, ctx, ty, false, false, m, n, k, 1.0, a->data, 0, b->data, k * n, 0.0,
                y->data, m * n, nb);
  // General broadcast: one GEMM per output batch entry.
  size_t es = dtypeSize(a->dtype);
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < nb; ++i) {
    int64_t offA = 0, offB = 0, rem = i, strideA = 1, strideB = 1;
    for (int64_t d = static_cast<int64_t>(r) - 1; d >= 0; --d) {
      int64_t ci = rem % batch[d];
      rem /= batch[d];
      int64_t da = d < static_cast<int64_t>(r - ba.size()) ? 1 : ba[d - (r - ba.size())];
      int64_t db = d < static_cast<int64_t>(r - bb.size()) ? 1 : bb[d - (r - bb.size())];
      if (da != 1)
        offA += ci * strideA;
      if (db != 1)
        offB += ci * strideB;
      strideA *= da;
      strideB *= db;
    }
    STRAIT_RETURN_IF_ERROR(gemm(c, ctx, ty, false, false, m, n, k, 1.0,
                                a->as<char>() + offA * m * k * es, 0,
                                b->as<char>() + offB * k * n * es, 0, 0.0,
                                y->as<char>() + i * m * n * es, 0, 1));
  }
  return Status::ok();
}

Status gemmKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1, a->dtype));
  STRAIT_ASSIGN_OR_RETURN(GemmTypes ty, gemmTypes(c, ctx, a->dtype));
  const AttrReader &at = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(float alpha, at.getFloat("alpha", 1.0f));
  STRAIT_ASSIGN_OR_RETURN(float beta, at.getFloat("beta", 1.0f));
  STRAIT_ASSIGN_OR_RETURN(int64_t ta, at.getInt("transA", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t tb, at.getInt("transB", 0));
  if (a->rank() != 2 || b->rank() != 2)
    return ctx.error("Gemm operands must be 2-D: " + a->typeString() + ", " + b->typeString());
  int64_t m = ta ? a->shape[1] : a->shape[0], k = ta ? a->shape[0] : a->shape[1];
  int64_t kb = tb ? b->shape[1] : b->shape[0], n = tb ? b->shape[0] : b->shape[1];
  if (k != kb)
    return ctx.error("inner dimensions differ: " + a->typeString() + " x " + b->typeString());
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, {m, n}, a->dtype));
  const Tensor *cIn = ctx.input(2);
  double betaEff = 0.0;
  if (cIn && beta != 0.0f) {
    if (cIn->dtype != a->dtype)
      return ctx.error("C " + cIn->typeString() + " must have A's type");
    Index ix;
    Shape out = {m, n};
    if (cIn->rank() > 2 || !broadcastIndex(out, {cIn->shape}, ix))
      return ctx.error("C " + cIn->typeString() + " does not broadcast to [" +
                       std::to_string(m) + "x" + std::to_string(n) + "]");
    for (size_t d = 0; d < cIn->shape.size(); ++d) {
      int64_t want = out[out.size() - cIn->shape.size() + d];
      if (cIn->shape[d] != 1 && cIn->shape[d] != want)
        return ctx.error("C " + cIn->typeString() + " does not broadcast to the output");
    }
    if (!launchStridedCopy(dtypeSize(a->dtype), cIn->data, y->data, ix, c.stream))
      return ctx.unsupported("cuda: Gemm bias of " + cIn->typeString());
    betaEff = beta;
  }
  return gemm(c, ctx, ty, ta != 0, tb != 0, m, n, k, alpha, a->data, 0, b->data, 0, betaEff,
              y->data, 0, 1);
}

} // namespace

void addMatMulKernels(CudaKernelTable &t) {
  t.add("MatMul", matMulKernel);
  t.add("Gemm", gemmKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
