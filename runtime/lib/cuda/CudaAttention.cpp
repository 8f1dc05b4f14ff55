//===- CudaAttention.cpp - FusedAttention and its gradient on cuBLAS ------===//
//
// graph.FusedAttention(Q, Kt, V [, Bias]) {scale, causal} -> (Y, LSE) and
// FusedAttentionGrad(dY, Q, Kt, V, Y, LSE [, Bias]) -> (dQ, dKt, dV), the
// contract of docs/runtime-cuda.md "Fused attention". Tensor cores through
// cuBLAS, not a hand-written flash kernel: per chunk of the flattened batch
// the scores S = scale * Q Kt are one strided-batched GEMM into f32 scratch,
// a row kernel (Attention.cu) adds the bias, masks, and writes P (in Q's
// dtype) and LSE, and Y = P V is a second GEMM. The backward recomputes S
// and P, then dV = P^T dY, dP = dY V^T, dS = P * (dP - Drow) (in place of
// P), dQ = scale * dS Kt^T, dKt = scale * Q^T dS.
//
// Scratch: Drow (backward, all rows) + f32 S/dP + P of one chunk, from the
// backend's scratch block. The chunk size follows from the static shapes
// only, so every run asks for the same size: the warm-up run grows the block
// and the captured runs of a CUDA graph never allocate.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <algorithm>
#include <atomic>
#include <climits>

namespace strait {
namespace rt {
namespace cuda {
namespace {

constexpr size_t kDefaultChunkBytes = size_t(1) << 30;
std::atomic<size_t> chunkBytesLimit{kDefaultChunkBytes};

/// The GEMM types of the attention products: f32 tensors use the compute
/// type of CudaOptions::matmul (as CudaMatMul.cpp), f16/bf16 tensors f32
/// compute. Scores and dP are written in f32 whatever the operands.
struct AttnGemmTypes {
  cudaDataType_t data;
  cublasComputeType_t compute;
  size_t elemSize;
};

AttnGemmTypes attnGemmTypes(const CudaContext &c, DType t) {
  switch (t) {
  case program::DTYPE_F16: return {CUDA_R_16F, CUBLAS_COMPUTE_32F, 2};
  case program::DTYPE_BF16: return {CUDA_R_16BF, CUBLAS_COMPUTE_32F, 2};
  default:
    return {CUDA_R_32F,
            c.options.matmul == MatmulPrecision::BF16   ? CUBLAS_COMPUTE_32F_FAST_16BF
            : c.options.matmul == MatmulPrecision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                                        : CUBLAS_COMPUTE_32F,
            4};
  }
}

/// Y[b] = alpha * op(A[b]) op(B[b]) for b < batch, row-major, element
/// strides sA, sB, sY. A and B of type ty.data, Y of type yType (ty.data or
/// f32). Row-major on column-major cuBLAS: Y^T = op(B)^T op(A)^T.
Status attnGemm(CudaContext &c, const KernelContext &ctx, const AttnGemmTypes &ty, bool ta,
                bool tb, int64_t m, int64_t n, int64_t k, float alpha, const void *a, int64_t sA,
                const void *b, int64_t sB, cudaDataType_t yType, void *y, int64_t sY,
                int64_t batch) {
  if (m == 0 || n == 0 || batch == 0)
    return Status::ok();
  size_t yElem = yType == CUDA_R_32F ? 4 : 2;
  if (k == 0) // empty sum: cuBLAS may leave Y untouched
    return cudaStatus(cudaMemsetAsync(y, 0, yElem * size_t(m * n * batch), c.stream), "memset");
  for (int64_t v : {m, n, k, batch})
    if (v > INT_MAX)
      return ctx.unsupported("cuda: GEMM dimension " + std::to_string(v) + " exceeds int");
  int lda = static_cast<int>(ta ? m : k), ldb = static_cast<int>(tb ? k : n);
  float beta = 0.0f;
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      c.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), &alpha, b, ty.data, ldb, sB,
      a, ty.data, lda, sA, &beta, y, yType, static_cast<int>(n), sY, static_cast<int>(batch),
      ty.compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return cublasStatus(st, "GEMM " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                std::to_string(k) + " batch " + std::to_string(batch))
        .withKernel(ctx.op());
  return Status::ok();
}

/// The checked operands and sizes of one FusedAttention(+Grad) kernel.
struct AttnArgs {
  const Tensor *q = nullptr, *kt = nullptr, *v = nullptr;
  Shape batch; // b...
  int64_t entries = 1, tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1.0f;
  bool causal = false;
  AttnBias bias;
  AttnGemmTypes ty;
  ET et = ET::F32;
};

Shape withBatch(const Shape &batch, std::initializer_list<int64_t> tail) {
  Shape s = batch;
  s.insert(s.end(), tail.begin(), tail.end());
  return s;
}

/// Checks Q, Kt, V (at inputs first..first+2), the optional Bias at input
/// `biasIndex` and the attributes; the messages name the operand and shapes.
StatusOr<AttnArgs> attnArgs(const CudaContext &c, const KernelContext &ctx, size_t first,
                            size_t biasIndex) {
  AttnArgs a;
  const AttrReader &at = ctx.getAttrs();
  if (!at.has("scale"))
    return ctx.error("attribute 'scale' is required");
  STRAIT_ASSIGN_OR_RETURN(a.scale, at.getFloat("scale", 1.0f));
  STRAIT_ASSIGN_OR_RETURN(int64_t causal, at.getInt("causal", 0));
  if (causal != 0 && causal != 1)
    return ctx.error("attribute 'causal' must be 0 or 1, got " + std::to_string(causal));
  a.causal = causal == 1;
  STRAIT_ASSIGN_OR_RETURN(a.q, ctx.requireInput(first));
  STRAIT_ASSIGN_OR_RETURN(a.kt, ctx.requireInput(first + 1));
  STRAIT_ASSIGN_OR_RETURN(a.v, ctx.requireInput(first + 2));
  DType t = a.q->dtype;
  if (t != program::DTYPE_F32 && t != program::DTYPE_BF16 && t != program::DTYPE_F16)
    return ctx.unsupported("cuda: " + ctx.op() + " on Q " + a.q->typeString() +
                           " (f32, bf16 or f16)");
  if (a.kt->dtype != t || a.v->dtype != t)
    return ctx.error("Q, Kt and V must have one dtype: Q " + a.q->typeString() + ", Kt " +
                     a.kt->typeString() + ", V " + a.v->typeString());
  size_t r = a.q->rank();
  if (r < 2)
    return ctx.error("Q " + a.q->typeString() + " must have rank >= 2 ([b..., Tq, D])");
  if (a.kt->rank() != r || a.v->rank() != r)
    return ctx.error("Kt " + a.kt->typeString() + " and V " + a.v->typeString() +
                     " must have Q's rank (Q " + a.q->typeString() + ")");
  a.batch.assign(a.q->shape.begin(), a.q->shape.end() - 2);
  a.tq = a.q->shape[r - 2];
  a.d = a.q->shape[r - 1];
  a.tk = a.kt->shape[r - 1];
  a.dv = a.v->shape[r - 1];
  if (Shape(a.kt->shape.begin(), a.kt->shape.end() - 2) != a.batch ||
      a.kt->shape[r - 2] != a.d)
    return ctx.error("Kt " + a.kt->typeString() + " must be " +
                     shapeToString(withBatch(a.batch, {a.d, a.tk})) + " ([b..., D, Tk] for Q " +
                     a.q->typeString() + ")");
  if (Shape(a.v->shape.begin(), a.v->shape.end() - 2) != a.batch || a.v->shape[r - 2] != a.tk)
    return ctx.error("V " + a.v->typeString() + " must be " +
                     shapeToString(withBatch(a.batch, {a.tk, a.dv})) + " ([b..., Tk, Dv] for Q " +
                     a.q->typeString() + ", Kt " + a.kt->typeString() + ")");
  if (a.batch.size() > size_t(kMaxDims))
    return ctx.unsupported("cuda: " + ctx.op() + " with more than " + std::to_string(kMaxDims) +
                           " batch dims: Q " + a.q->typeString());
  a.entries = numElements(a.batch);
  a.ty = attnGemmTypes(c, t);
  a.et = elemType(t);

  const Tensor *bias = ctx.input(biasIndex);
  if (!bias)
    return a;
  Shape full = withBatch(a.batch, {a.tq, a.tk});
  if (bias->dtype != program::DTYPE_F32 && bias->dtype != t)
    return ctx.error("Bias " + bias->typeString() + " must be f32 or Q's dtype (Q " +
                     a.q->typeString() + ")");
  if (bias->rank() > r)
    return ctx.error("Bias " + bias->typeString() + " has a higher rank than Q " +
                     a.q->typeString());
  // Contiguous strides of the bias, right-aligned to [b..., Tq, Tk]; 0 on
  // dims it broadcasts.
  std::vector<int64_t> stride(r, 0);
  int64_t acc = 1;
  for (size_t k = 0; k < bias->rank(); ++k) {
    size_t bd = bias->rank() - 1 - k, od = r - 1 - k;
    int64_t dim = bias->shape[bd];
    if (dim != 1 && dim != full[od])
      return ctx.error("Bias " + bias->typeString() + " does not broadcast to the scores " +
                       shapeToString(full) + " (dim " + std::to_string(bd) + ")");
    stride[od] = dim == 1 ? 0 : acc;
    acc *= dim;
  }
  a.bias.data = bias->data;
  a.bias.dtype = elemType(bias->dtype);
  a.bias.batchRank = static_cast<int>(a.batch.size());
  for (size_t k = 0; k < a.batch.size(); ++k) {
    a.bias.batchShape[k] = a.batch[k];
    a.bias.batchStride[k] = stride[k];
  }
  a.bias.rowStride = stride[r - 2];
  a.bias.colStride = stride[r - 1];
  return a;
}

/// Batch entries per chunk: the f32 scores and P of a chunk stay under the
/// limit (at least one entry).
int64_t chunkEntries(const AttnArgs &a) {
  size_t perEntry = size_t(std::max<int64_t>(a.tq * a.tk, 1)) * (4 + a.ty.elemSize);
  size_t n = chunkBytesLimit.load() / perEntry;
  return std::max<int64_t>(1, std::min<int64_t>(int64_t(n), std::max<int64_t>(a.entries, 1)));
}

size_t align256(size_t n) { return (n + 255) & ~size_t(255); }

/// The chunk's scratch: [drow (drowFloats)] [S / dP f32] [P].
struct AttnScratch {
  float *drow = nullptr, *s = nullptr;
  void *p = nullptr;
};
StatusOr<AttnScratch> attnScratch(CudaContext &c, const AttnArgs &a, int64_t chunk,
                                  size_t drowFloats) {
  size_t scores = size_t(chunk) * size_t(a.tq) * size_t(a.tk);
  size_t dBytes = align256(drowFloats * 4), sBytes = align256(scores * 4);
  size_t pBytes = align256(scores * a.ty.elemSize);
  size_t total = std::max<size_t>(dBytes + sBytes + pBytes, 256);
  STRAIT_ASSIGN_OR_RETURN(void *base, c.getScratch(total));
  char *p = static_cast<char *>(base);
  return AttnScratch{reinterpret_cast<float *>(p), reinterpret_cast<float *>(p + dBytes),
                     p + dBytes + sBytes};
}

/// The chunk's scores S = scale * Q Kt (f32) for entries [b0, b0 + nb).
Status scores(CudaContext &c, const KernelContext &ctx, const AttnArgs &a, int64_t b0,
              int64_t nb, float *s) {
  size_t es = a.ty.elemSize;
  return attnGemm(c, ctx, a.ty, false, false, a.tq, a.tk, a.d, a.scale,
                  a.q->as<char>() + size_t(b0 * a.tq * a.d) * es, a.tq * a.d,
                  a.kt->as<char>() + size_t(b0 * a.d * a.tk) * es, a.d * a.tk, CUDA_R_32F, s,
                  a.tq * a.tk, nb);
}

AttnRows chunkRows(const AttnArgs &a, int64_t b0, int64_t nb) {
  AttnRows rows;
  rows.b0 = b0;
  rows.nb = nb;
  rows.tq = a.tq;
  rows.tk = a.tk;
  rows.causal = a.causal;
  rows.bias = a.bias;
  return rows;
}

Status fusedAttentionKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(AttnArgs a, attnArgs(c, ctx, 0, 3));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y,
                          ctx.requireOutput(0, withBatch(a.batch, {a.tq, a.dv}), a.q->dtype));
  Shape lseShape = withBatch(a.batch, {a.tq});
  STRAIT_ASSIGN_OR_RETURN(Tensor * lse, ctx.requireOutput(1, lseShape, program::DTYPE_F32));
  if (a.entries == 0 || a.tq == 0)
    return Status::ok();
  int64_t chunk = chunkEntries(a);
  STRAIT_ASSIGN_OR_RETURN(AttnScratch sc, attnScratch(c, a, chunk, 0));
  size_t es = a.ty.elemSize;
  for (int64_t b0 = 0; b0 < a.entries; b0 += chunk) {
    int64_t nb = std::min(chunk, a.entries - b0);
    STRAIT_RETURN_IF_ERROR(scores(c, ctx, a, b0, nb, sc.s));
    if (!launchAttentionSoftmax(sc.s, chunkRows(a, b0, nb), a.et, sc.p,
                                lse->as<float>() + b0 * a.tq, c.stream))
      return ctx.unsupported("cuda: " + ctx.op() + " on " + a.q->typeString());
    STRAIT_RETURN_IF_ERROR(checkLaunch(ctx));
    // Y = P V
    STRAIT_RETURN_IF_ERROR(attnGemm(c, ctx, a.ty, false, false, a.tq, a.dv, a.tk, 1.0f, sc.p,
                                    a.tq * a.tk, a.v->as<char>() + size_t(b0 * a.tk * a.dv) * es,
                                    a.tk * a.dv, a.ty.data,
                                    y->as<char>() + size_t(b0 * a.tq * a.dv) * es, a.tq * a.dv,
                                    nb));
  }
  return Status::ok();
}

Status fusedAttentionGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(AttnArgs a, attnArgs(c, ctx, 1, 6));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *dy, ctx.requireInput(0));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *y, ctx.requireInput(4));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *lse, ctx.requireInput(5));
  Shape yShape = withBatch(a.batch, {a.tq, a.dv}), lseShape = withBatch(a.batch, {a.tq});
  if (y->dtype != a.q->dtype || y->shape != yShape)
    return ctx.error("Y " + y->typeString() + " must be " + dtypeName(a.q->dtype) +
                     shapeToString(yShape) + " (Q " + a.q->typeString() + ", V " +
                     a.v->typeString() + ")");
  if (dy->dtype != y->dtype || dy->shape != y->shape)
    return ctx.error("dY " + dy->typeString() + " must have Y's type " + y->typeString());
  if (lse->dtype != program::DTYPE_F32 || lse->shape != lseShape)
    return ctx.error("LSE " + lse->typeString() + " must be f32" + shapeToString(lseShape) +
                     " (Q " + a.q->typeString() + ")");
  STRAIT_ASSIGN_OR_RETURN(Tensor * dq, ctx.requireOutput(0, a.q->shape, a.q->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * dkt, ctx.requireOutput(1, a.kt->shape, a.kt->dtype));
  STRAIT_ASSIGN_OR_RETURN(Tensor * dv, ctx.requireOutput(2, a.v->shape, a.v->dtype));
  if (a.entries == 0)
    return Status::ok();
  int64_t chunk = chunkEntries(a);
  int64_t rows = a.entries * a.tq;
  STRAIT_ASSIGN_OR_RETURN(AttnScratch sc, attnScratch(c, a, chunk, size_t(rows)));
  if (!launchAttentionDrow(a.et, dy->data, y->data, sc.drow, rows, a.dv, c.stream))
    return ctx.unsupported("cuda: " + ctx.op() + " on " + y->typeString());
  STRAIT_RETURN_IF_ERROR(checkLaunch(ctx));
  size_t es = a.ty.elemSize;
  for (int64_t b0 = 0; b0 < a.entries; b0 += chunk) {
    int64_t nb = std::min(chunk, a.entries - b0);
    const char *qc = a.q->as<char>() + size_t(b0 * a.tq * a.d) * es;
    const char *ktc = a.kt->as<char>() + size_t(b0 * a.d * a.tk) * es;
    const char *vc = a.v->as<char>() + size_t(b0 * a.tk * a.dv) * es;
    const char *dyc = dy->as<char>() + size_t(b0 * a.tq * a.dv) * es;
    AttnRows rowsOf = chunkRows(a, b0, nb);
    STRAIT_RETURN_IF_ERROR(scores(c, ctx, a, b0, nb, sc.s));
    if (!launchAttentionProbs(sc.s, lse->as<float>() + b0 * a.tq, rowsOf, a.et, sc.p, c.stream))
      return ctx.unsupported("cuda: " + ctx.op() + " on " + a.q->typeString());
    STRAIT_RETURN_IF_ERROR(checkLaunch(ctx));
    // dV = P^T dY: [Tk, Dv] = [Tq, Tk]^T [Tq, Dv]
    STRAIT_RETURN_IF_ERROR(attnGemm(c, ctx, a.ty, true, false, a.tk, a.dv, a.tq, 1.0f, sc.p,
                                    a.tq * a.tk, dyc, a.tq * a.dv, a.ty.data,
                                    dv->as<char>() + size_t(b0 * a.tk * a.dv) * es, a.tk * a.dv,
                                    nb));
    // dP = dY V^T (f32, over S): [Tq, Tk] = [Tq, Dv] [Tk, Dv]^T
    STRAIT_RETURN_IF_ERROR(attnGemm(c, ctx, a.ty, false, true, a.tq, a.tk, a.dv, 1.0f, dyc,
                                    a.tq * a.dv, vc, a.tk * a.dv, CUDA_R_32F, sc.s, a.tq * a.tk,
                                    nb));
    // dS = P * (dP - Drow), over P
    if (!launchAttentionDscores(sc.s, sc.drow + b0 * a.tq, a.et, sc.p, nb * a.tq, a.tk,
                                c.stream))
      return ctx.unsupported("cuda: " + ctx.op() + " on " + a.q->typeString());
    STRAIT_RETURN_IF_ERROR(checkLaunch(ctx));
    // dQ = scale * dS Kt^T: [Tq, D] = [Tq, Tk] [D, Tk]^T
    STRAIT_RETURN_IF_ERROR(attnGemm(c, ctx, a.ty, false, true, a.tq, a.d, a.tk, a.scale, sc.p,
                                    a.tq * a.tk, ktc, a.d * a.tk, a.ty.data,
                                    dq->as<char>() + size_t(b0 * a.tq * a.d) * es, a.tq * a.d,
                                    nb));
    // dKt = scale * Q^T dS: [D, Tk] = [Tq, D]^T [Tq, Tk]
    STRAIT_RETURN_IF_ERROR(attnGemm(c, ctx, a.ty, true, false, a.d, a.tk, a.tq, a.scale, qc,
                                    a.tq * a.d, sc.p, a.tq * a.tk, a.ty.data,
                                    dkt->as<char>() + size_t(b0 * a.d * a.tk) * es, a.d * a.tk,
                                    nb));
  }
  return Status::ok();
}

} // namespace

void setAttentionChunkBytes(size_t bytes) {
  chunkBytesLimit.store(bytes ? bytes : kDefaultChunkBytes);
}

void addAttentionKernels(CudaKernelTable &t) {
  t.add("FusedAttention", fusedAttentionKernel);
  t.add("FusedAttentionGrad", fusedAttentionGradKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
