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
// f16/bf16 operands without a bias and with a head dim of 64 or 128 take the
// flash kernels instead (FlashAttention.cu; flashAttentionApplies says when;
// STRAIT_CUDA_FLASH_ATTENTION=0 keeps everything here). They address
// permuted operands (q_perm, kt_perm, v_perm, y_perm) through their strides;
// this path gathers a permuted operand into dense scratch first and
// scatters a permuted output (Y, dQ, dKt, dV) back from scratch at the end.
//
// Scratch: the dense copies of the permuted operands and outputs, Drow
// (backward, all rows) + f32 S/dP + P of one chunk, from the backend's
// scratch block (the flash backward: Drow + an f32 dQ). The sizes follow
// from the static shapes and layouts only, so every run asks for the same
// size: the warm-up run grows the block and the captured runs of a CUDA
// graph never allocate.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"
#include "FlashAttention.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <optional>

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

/// The checked operands and sizes of one FusedAttention(+Grad) kernel; the
/// GEMMs read Q, Kt and V dense at qd, ktd, vd (the tensors, or their
/// copies in scratch when permuted).
struct AttnArgs {
  const Tensor *q = nullptr, *kt = nullptr, *v = nullptr;
  const char *qd = nullptr, *ktd = nullptr, *vd = nullptr;
  Shape batch; // b...
  int64_t entries = 1, tq = 0, tk = 0, d = 0, dv = 0;
  float scale = 1.0f;
  bool causal = false;
  AttnBias bias;
  AttnGemmTypes ty;
  ET et = ET::F32;
};

/// The device view of the shared checks' result (fusedAttentionArgs /
/// fusedAttentionGradArgs, KernelArgs.h): GEMM types and the bias strides.
StatusOr<AttnArgs> attnArgs(const CudaContext &c, const KernelContext &ctx,
                            const AttentionArgs &s) {
  AttnArgs a;
  a.q = s.q;
  a.kt = s.kt;
  a.v = s.v;
  a.qd = s.q->as<char>();
  a.ktd = s.kt->as<char>();
  a.vd = s.v->as<char>();
  a.batch = s.batch;
  a.entries = s.nBatch;
  a.tq = s.tq;
  a.tk = s.tk;
  a.d = s.d;
  a.dv = s.dv;
  a.scale = s.scale;
  a.causal = s.causal;
  if (a.batch.size() > size_t(kMaxDims))
    return ctx.unsupported("cuda: " + ctx.op() + " with more than " + std::to_string(kMaxDims) +
                           " batch dims: Q " + a.q->typeString());
  a.ty = attnGemmTypes(c, s.dtype);
  a.et = elemType(s.dtype);
  if (!s.bias)
    return a;
  size_t r = s.biasStrides.size(); // the scores' rank: batch dims + 2
  a.bias.data = s.bias->data;
  a.bias.dtype = elemType(s.bias->dtype);
  a.bias.batchRank = static_cast<int>(a.batch.size());
  for (size_t k = 0; k < a.batch.size(); ++k) {
    a.bias.batchShape[k] = a.batch[k];
    a.bias.batchStride[k] = s.biasStrides[k];
  }
  a.bias.rowStride = s.biasStrides[r - 2];
  a.bias.colStride = s.biasStrides[r - 1];
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

/// An operand or output of the cuBLAS path as the dense [b..., rows, cols]
/// its GEMMs read or write: the tensor itself, or, when its layout is not
/// the dense one (a permutation attribute), a copy in scratch.
struct DenseView {
  Tensor *t = nullptr;
  const AttnLayout *l = nullptr;
  int64_t rows = 0, cols = 0;
  bool strided = false;
  char *data = nullptr;
};

DenseView denseView(const AttentionArgs &s, const Tensor *t, const AttnLayout &l, int64_t rows,
                    int64_t cols) {
  DenseView v;
  v.t = const_cast<Tensor *>(t);
  v.l = &l;
  v.rows = rows;
  v.cols = cols;
  v.strided = !l.dense(s.batch, rows, cols);
  v.data = v.t->as<char>(); // dense: base 0
  return v;
}

/// Scratch bytes of the views' dense copies.
size_t copyBytes(const AttentionArgs &s, std::initializer_list<const DenseView *> views) {
  size_t n = 0;
  for (const DenseView *v : views)
    if (v->strided)
      n += align256(size_t(s.nBatch * v->rows * v->cols) * dtypeSize(v->t->dtype));
  return n;
}

/// Points the strided views at their copies in scratch from `base` on.
void placeCopies(const AttentionArgs &s, std::initializer_list<DenseView *> views, char *base) {
  for (DenseView *v : views)
    if (v->strided) {
      v->data = base;
      base += align256(size_t(s.nBatch * v->rows * v->cols) * dtypeSize(v->t->dtype));
    }
}

/// Gathers a strided view's tensor into its dense copy (toDense) or
/// scatters the copy into the tensor; nothing for a dense view.
Status copyView(CudaContext &c, const KernelContext &ctx, const AttentionArgs &s,
                const DenseView &v, bool toDense) {
  if (!v.strided || v.t->numel() == 0)
    return Status::ok();
  Shape logical = s.batch;
  logical.push_back(v.rows);
  logical.push_back(v.cols);
  std::vector<int64_t> strides = v.l->batch;
  strides.push_back(v.l->row);
  strides.push_back(v.l->col);
  Index ix;
  if (!stridedIndex(logical, strides, ix))
    return ctx.unsupported("cuda: " + ctx.op() + " cannot address the permuted " +
                           v.t->typeString() + " (more than " + std::to_string(kMaxDims) +
                           " dims after merging)");
  size_t es = dtypeSize(v.t->dtype);
  char *at = v.t->as<char>() + size_t(v.l->base) * es; // a select's slice
  bool ok = toDense ? launchStridedCopy(es, at, v.data, ix, c.stream)
                    : launchStridedScatter(es, v.data, at, ix, c.stream);
  if (!ok)
    return ctx.unsupported("cuda: " + ctx.op() + " copy of the permuted " + v.t->typeString());
  return checkLaunch(ctx);
}

/// The scratch: [dense copies (copyBytes)] [drow (drowFloats)] [S / dP f32]
/// [P] of a chunk.
struct AttnScratch {
  char *copies = nullptr;
  float *drow = nullptr, *s = nullptr;
  void *p = nullptr;
};
StatusOr<AttnScratch> attnScratch(CudaContext &c, const AttnArgs &a, int64_t chunk,
                                  size_t drowFloats, size_t copies) {
  size_t scores = size_t(chunk) * size_t(a.tq) * size_t(a.tk);
  size_t dBytes = align256(drowFloats * 4), sBytes = align256(scores * 4);
  size_t pBytes = align256(scores * a.ty.elemSize);
  size_t total = std::max<size_t>(copies + dBytes + sBytes + pBytes, 256);
  STRAIT_ASSIGN_OR_RETURN(void *base, c.getScratch(total));
  char *p = static_cast<char *>(base);
  char *d = p + copies;
  return AttnScratch{p, reinterpret_cast<float *>(d), reinterpret_cast<float *>(d + dBytes),
                     d + dBytes + sBytes};
}

/// The chunk's scores S = scale * Q Kt (f32) for entries [b0, b0 + nb).
Status scores(CudaContext &c, const KernelContext &ctx, const AttnArgs &a, int64_t b0,
              int64_t nb, float *s) {
  size_t es = a.ty.elemSize;
  return attnGemm(c, ctx, a.ty, false, false, a.tq, a.tk, a.d, a.scale,
                  a.qd + size_t(b0 * a.tq * a.d) * es, a.tq * a.d,
                  a.ktd + size_t(b0 * a.d * a.tk) * es, a.d * a.tk, CUDA_R_32F, s, a.tq * a.tk,
                  nb);
}

/// Where Drow's kernel reads Y and dY (y_perm's layout).
AttnRowLayout rowLayout(const AttentionArgs &s) {
  AttnRowLayout l;
  l.dense = s.yL.dense(s.batch, s.tq, s.dv);
  l.batchRank = static_cast<int>(s.batch.size()); // <= kMaxDims (attnArgs)
  for (size_t k = 0; k < s.batch.size() && k < size_t(kMaxDims); ++k) {
    l.batchShape[k] = s.batch[k];
    l.batchStride[k] = s.yL.batch[k];
  }
  l.tq = std::max<int64_t>(s.tq, 1);
  l.rowStride = s.yL.row;
  l.colStride = s.yL.col;
  return l;
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

/// The flash kernels' problem when they apply, else nullopt.
std::optional<FlashProblem> flashProblem(const AttentionArgs &s) {
  if (s.nBatch == 0 || !flashAttentionApplies(flashQueryOf(s, flashAttentionEnabled())))
    return std::nullopt;
  return flashProblemOf(s);
}

/// Where an operand's slice starts (its select's base offset).
const char *sliceOf(const Tensor *t, const AttnLayout &l) {
  return t->as<char>() + size_t(l.base) * dtypeSize(t->dtype);
}

Status flashForward(CudaContext &c, KernelContext &ctx, const FlashProblem &p, const AttnArgs &a,
                    const AttentionArgs &s) {
  Tensor *y = s.out[0], *lse = s.out[1];
  if (!launchFlashAttentionForward(p, sliceOf(a.q, s.qL), sliceOf(a.kt, s.ktL),
                                   sliceOf(a.v, s.vL), y->data, lse->as<float>(), c.stream))
    return ctx.unsupported("cuda: " + ctx.op() + " (flash) on " + a.q->typeString());
  return checkLaunch(ctx);
}

Status flashBackward(CudaContext &c, KernelContext &ctx, const FlashProblem &p,
                     const AttnArgs &a, const AttentionArgs &s) {
  int64_t rows = a.entries * a.tq;
  size_t dBytes = align256(size_t(rows) * 4);
  size_t qBytes = align256(size_t(rows) * size_t(a.d) * 4);
  STRAIT_ASSIGN_OR_RETURN(void *base, c.getScratch(dBytes + qBytes));
  float *drow = static_cast<float *>(base);
  float *dqAcc = reinterpret_cast<float *>(static_cast<char *>(base) + dBytes);
  if (!launchAttentionDrow(a.et, s.dy->data, s.y->data, rowLayout(s), drow, rows, a.dv,
                           c.stream))
    return ctx.unsupported("cuda: " + ctx.op() + " on " + s.y->typeString());
  STRAIT_RETURN_IF_ERROR(checkLaunch(ctx));
  // The gradients at their slices too (packed_grad: one dQKV tensor).
  auto out = [&](int k, const AttnLayout &l) { return const_cast<char *>(sliceOf(s.out[k], l)); };
  if (!launchFlashAttentionBackward(p, s.dy->data, sliceOf(a.q, s.qL), sliceOf(a.kt, s.ktL),
                                    sliceOf(a.v, s.vL), s.lse->as<float>(), drow, dqAcc,
                                    out(0, s.dqL), out(1, s.dktL), out(2, s.dvL), c.stream))
    return ctx.unsupported("cuda: " + ctx.op() + " (flash) on " + a.q->typeString());
  return checkLaunch(ctx);
}

Status fusedAttentionKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(AttentionArgs shared, fusedAttentionArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(AttnArgs a, attnArgs(c, ctx, shared));
  Tensor *lse = shared.out[1];
  if (a.entries == 0 || a.tq == 0)
    return Status::ok();
  if (std::optional<FlashProblem> fp = flashProblem(shared))
    return flashForward(c, ctx, *fp, a, shared);
  DenseView q = denseView(shared, a.q, shared.qL, a.tq, a.d),
            kt = denseView(shared, a.kt, shared.ktL, a.d, a.tk),
            v = denseView(shared, a.v, shared.vL, a.tk, a.dv),
            y = denseView(shared, shared.out[0], shared.yL, a.tq, a.dv);
  int64_t chunk = chunkEntries(a);
  STRAIT_ASSIGN_OR_RETURN(AttnScratch sc,
                          attnScratch(c, a, chunk, 0, copyBytes(shared, {&q, &kt, &v, &y})));
  placeCopies(shared, {&q, &kt, &v, &y}, sc.copies);
  for (const DenseView *in : {&q, &kt, &v})
    STRAIT_RETURN_IF_ERROR(copyView(c, ctx, shared, *in, true));
  a.qd = q.data;
  a.ktd = kt.data;
  a.vd = v.data;
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
                                    a.tq * a.tk, a.vd + size_t(b0 * a.tk * a.dv) * es,
                                    a.tk * a.dv, a.ty.data,
                                    y.data + size_t(b0 * a.tq * a.dv) * es, a.tq * a.dv, nb));
  }
  return copyView(c, ctx, shared, y, false);
}

Status fusedAttentionGradKernel(CudaContext &c, KernelContext &ctx, int) {
  STRAIT_ASSIGN_OR_RETURN(AttentionArgs shared, fusedAttentionGradArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(AttnArgs a, attnArgs(c, ctx, shared));
  const Tensor *lse = shared.lse;
  if (a.entries == 0)
    return Status::ok();
  if (std::optional<FlashProblem> fp = flashProblem(shared))
    return flashBackward(c, ctx, *fp, a, shared);
  // Dense views: Q, Kt, V, dY in; dQ, dKt, dV out in their layouts (their
  // operands' without a select; Y is read by Drow's kernel in place).
  DenseView q = denseView(shared, a.q, shared.qL, a.tq, a.d),
            kt = denseView(shared, a.kt, shared.ktL, a.d, a.tk),
            v = denseView(shared, a.v, shared.vL, a.tk, a.dv),
            dy = denseView(shared, shared.dy, shared.yL, a.tq, a.dv),
            dq = denseView(shared, shared.out[0], shared.dqL, a.tq, a.d),
            dkt = denseView(shared, shared.out[1], shared.dktL, a.d, a.tk),
            dv = denseView(shared, shared.out[2], shared.dvL, a.tk, a.dv);
  int64_t chunk = chunkEntries(a);
  int64_t rows = a.entries * a.tq;
  STRAIT_ASSIGN_OR_RETURN(
      AttnScratch sc,
      attnScratch(c, a, chunk, size_t(rows),
                  copyBytes(shared, {&q, &kt, &v, &dy, &dq, &dkt, &dv})));
  placeCopies(shared, {&q, &kt, &v, &dy, &dq, &dkt, &dv}, sc.copies);
  for (const DenseView *in : {&q, &kt, &v, &dy})
    STRAIT_RETURN_IF_ERROR(copyView(c, ctx, shared, *in, true));
  a.qd = q.data;
  a.ktd = kt.data;
  a.vd = v.data;
  if (!launchAttentionDrow(a.et, shared.dy->data, shared.y->data, rowLayout(shared), sc.drow,
                           rows, a.dv, c.stream))
    return ctx.unsupported("cuda: " + ctx.op() + " on " + shared.y->typeString());
  STRAIT_RETURN_IF_ERROR(checkLaunch(ctx));
  size_t es = a.ty.elemSize;
  for (int64_t b0 = 0; b0 < a.entries; b0 += chunk) {
    int64_t nb = std::min(chunk, a.entries - b0);
    const char *qc = a.qd + size_t(b0 * a.tq * a.d) * es;
    const char *ktc = a.ktd + size_t(b0 * a.d * a.tk) * es;
    const char *vc = a.vd + size_t(b0 * a.tk * a.dv) * es;
    const char *dyc = dy.data + size_t(b0 * a.tq * a.dv) * es;
    AttnRows rowsOf = chunkRows(a, b0, nb);
    STRAIT_RETURN_IF_ERROR(scores(c, ctx, a, b0, nb, sc.s));
    if (!launchAttentionProbs(sc.s, lse->as<float>() + b0 * a.tq, rowsOf, a.et, sc.p, c.stream))
      return ctx.unsupported("cuda: " + ctx.op() + " on " + a.q->typeString());
    STRAIT_RETURN_IF_ERROR(checkLaunch(ctx));
    // dV = P^T dY: [Tk, Dv] = [Tq, Tk]^T [Tq, Dv]
    STRAIT_RETURN_IF_ERROR(attnGemm(c, ctx, a.ty, true, false, a.tk, a.dv, a.tq, 1.0f, sc.p,
                                    a.tq * a.tk, dyc, a.tq * a.dv, a.ty.data,
                                    dv.data + size_t(b0 * a.tk * a.dv) * es, a.tk * a.dv, nb));
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
                                    dq.data + size_t(b0 * a.tq * a.d) * es, a.tq * a.d, nb));
    // dKt = scale * Q^T dS: [D, Tk] = [Tq, D]^T [Tq, Tk]
    STRAIT_RETURN_IF_ERROR(attnGemm(c, ctx, a.ty, true, false, a.d, a.tk, a.tq, a.scale, qc,
                                    a.tq * a.d, sc.p, a.tq * a.tk, a.ty.data,
                                    dkt.data + size_t(b0 * a.d * a.tk) * es, a.d * a.tk, nb));
  }
  for (const DenseView *out : {&dq, &dkt, &dv})
    STRAIT_RETURN_IF_ERROR(copyView(c, ctx, shared, *out, false));
  return Status::ok();
}

} // namespace

void setAttentionChunkBytes(size_t bytes) {
  chunkBytesLimit.store(bytes ? bytes : kDefaultChunkBytes);
}

namespace {

/// Batch dims as the flash kernels address them, with the strides of Q,
/// Kt, V, Y, dQ, dKt and dV: size-1 dims dropped; a dim merged into the one
/// before it where every operand's outer stride is the inner stride times
/// the inner size.
constexpr int kFlatLayouts = 7;
struct FlatBatch {
  std::vector<int64_t> size;
  std::vector<std::array<int64_t, kFlatLayouts>> stride;
};

FlatBatch flattenBatch(const AttentionArgs &a) {
  const AttnLayout *ls[kFlatLayouts] = {&a.qL, &a.ktL, &a.vL, &a.yL, &a.dqL, &a.dktL, &a.dvL};
  FlatBatch f;
  for (size_t d = 0; d < a.batch.size(); ++d) {
    int64_t n = a.batch[d];
    if (n == 1)
      continue;
    std::array<int64_t, kFlatLayouts> st;
    bool merge = !f.size.empty();
    for (int k = 0; k < kFlatLayouts; ++k) {
      st[k] = ls[k]->batch[d];
      merge = merge && f.stride.back()[k] == st[k] * n;
    }
    if (merge) {
      f.size.back() *= n;
      f.stride.back() = st;
    } else {
      f.size.push_back(n);
      f.stride.push_back(st);
    }
  }
  return f;
}

} // namespace

FlashQuery flashQueryOf(const AttentionArgs &a, bool enabled) {
  FlashQuery q;
  q.dtype = a.dtype;
  q.d = a.d;
  q.dv = a.dv;
  q.tq = a.tq;
  q.tk = a.tk;
  q.hasBias = a.bias != nullptr;
  q.enabled = enabled;
  q.qCol = a.qL.col;
  q.vCol = a.vL.col;
  q.yCol = a.yL.col;
  q.ktRow = a.ktL.row;
  q.ktCol = a.ktL.col;
  q.batchRank = static_cast<int>(flattenBatch(a).size.size());
  return q;
}

FlashProblem flashProblemOf(const AttentionArgs &a) {
  FlashProblem p;
  p.entries = a.nBatch;
  p.tq = a.tq;
  p.tk = a.tk;
  p.d = a.d;
  p.scale = a.scale;
  p.causal = a.causal;
  p.bf16 = a.dtype == program::DTYPE_BF16;
  FlatBatch f = flattenBatch(a);
  p.batchRank = static_cast<int>(f.size.size());
  for (size_t k = 0; k < f.size.size() && k < size_t(kFlashMaxBatch); ++k) {
    p.batch[k] = f.size[k];
    p.q.batch[k] = f.stride[k][0];
    p.k.batch[k] = f.stride[k][1];
    p.v.batch[k] = f.stride[k][2];
    p.y.batch[k] = f.stride[k][3];
    p.dq.batch[k] = f.stride[k][4];
    p.dk.batch[k] = f.stride[k][5];
    p.dv.batch[k] = f.stride[k][6];
  }
  p.q.row = a.qL.row;
  p.v.row = a.vL.row;
  p.y.row = a.yL.row;
  // Tk contiguous: the Kt form (the D index's stride between rows); else
  // the K rows form (the key index's stride between rows).
  p.kRows = a.ktL.col != 1;
  p.k.row = p.kRows ? a.ktL.col : a.ktL.row;
  // The gradients: their operands' forms (a select only moves the base and
  // the strides of the dims around D).
  p.dq.row = a.dqL.row;
  p.dv.row = a.dvL.row;
  p.dk.row = p.kRows ? a.dktL.col : a.dktL.row;
  return p;
}

void addAttentionKernels(CudaKernelTable &t) {
  t.add("FusedAttention", fusedAttentionKernel);
  t.add("FusedAttentionGrad", fusedAttentionGradKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
