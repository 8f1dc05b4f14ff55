//===- CudaMatMul.cpp - MatMul, Gemm and GroupedMatMul through cuBLAS -----===//
//
// Row-major products on column-major cuBLAS: Y^T = op(B)^T op(A)^T, so B is
// passed first. f32 tensors use the compute type of CudaOptions::matmul
// (exact f32, TF32 or bf16 tensor cores with f32 accumulation); f64, f16
// and bf16 tensors use their own types with f64 / f32 accumulation.
// MatMul batches: a 2-D right operand folds the left batch into M (one
// GEMM); equal or one-sided batches run as one strided-batched GEMM; other
// broadcasts loop over the batch. GroupedMatMul and its weight gradient
// (mixture of experts) read the rows' experts on the host, gather the rows
// by expert and run one GEMM per expert: the routed FLOPs only.
//
//===----------------------------------------------------------------------===//
#include "CudaKernels.h"

#include <cublasLt.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <string>
#include <map>
#include <tuple>
#include <vector>

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

/// One operand of a GEMM as stored: `rows` x `ld` elements of `es` bytes
/// per batch entry, entries `stride` elements apart (0: shared).
struct GemmOperand {
  const void *data;
  int64_t rows, ld, stride;
};

/// Tensor-core GEMM kernels want 16-byte aligned rows: a leading dimension
/// that is not (GPT-2's vocabulary, 50257) sends cuBLAS to slow kernels.
/// Large products with such an operand copy it into scratch rows padded to
/// 16 bytes (one cudaMemcpy2DAsync per operand, a few percent of the GEMM).
constexpr int64_t kPadMinWork = int64_t(1) << 30; // m * n * k

/// STRAIT_CUDA_GEMM_PAD=0 turns the padded copies off, STRAIT_CUDA_GEMM_LT=0
/// the cublasLt bias epilogue (A/B timing; read once).
bool envOn(const char *name) {
  const char *v = std::getenv(name);
  return !(v && std::string(v) == "0");
}
bool padOn() {
  static const bool on = envOn("STRAIT_CUDA_GEMM_PAD");
  return on;
}
bool ltOn() {
  static const bool on = envOn("STRAIT_CUDA_GEMM_LT");
  return on;
}

int64_t paddedLd(int64_t ld, size_t es) {
  int64_t per16 = static_cast<int64_t>(16 / es);
  return (ld + per16 - 1) / per16 * per16;
}

Status copyRows(CudaContext &c, void *dst, int64_t dstLd, const void *src, int64_t srcLd,
                int64_t cols, int64_t rows, size_t es) {
  if (!launchPitchedCopy(es, src, srcLd, dst, dstLd, cols, rows, c.stream))
    return internalError("cuda: GEMM padding copy of " + std::to_string(es) + "-byte elements");
  return cudaStatus(cudaGetLastError(), "GEMM padding copy");
}

bool tuneOn();
StatusOr<bool> gemmTunedLt(CudaContext &c, const KernelContext &ctx, cudaDataType_t dt, bool ta,
                           bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                           int64_t ldy, float alpha, const void *a, const void *b, void *y);

/// Y[b] = alpha * op(A[b]) op(B[b]) + beta * Y[b], row-major, `batch` GEMMs
/// with element strides sA, sB, sY; Y of type yType (ty.data, or f32 for
/// 16-bit operands). The first `scratchInUse` bytes of the scratch block
/// are the caller's.
Status gemm(CudaContext &c, const KernelContext &ctx, const GemmTypes &ty, bool ta, bool tb,
            int64_t m, int64_t n, int64_t k, double alpha, const void *a, int64_t sA,
            const void *b, int64_t sB, double beta, void *y, int64_t sY, int64_t batch,
            cudaDataType_t yType, size_t scratchInUse) {
  if (m == 0 || n == 0 || batch == 0)
    return Status::ok();
  for (int64_t v : {m, n, k, batch})
    if (v > INT_MAX)
      return ctx.unsupported("cuda: GEMM dimension " + std::to_string(v) + " exceeds int");
  size_t es = ty.f64 ? 8 : ty.data == CUDA_R_32F ? 4 : 2;
  size_t yes = yType == CUDA_R_32F ? 4 : yType == CUDA_R_64F ? 8 : 2;
  int64_t lda = ta ? m : k, ldb = tb ? k : n, ldy = n;
  float alphaF = static_cast<float>(alpha), betaF = static_cast<float>(beta);
  const void *pa = ty.f64 ? static_cast<const void *>(&alpha) : &alphaF;
  const void *pb = ty.f64 ? static_cast<const void *>(&beta) : &betaF;
  if (k == 0 && beta == 0.0) // empty sum: cuBLAS may leave Y untouched
    return cudaStatus(cudaMemsetAsync(y, 0, yes * m * n * batch, c.stream), "memset");
  bool low = ty.data == CUDA_R_16BF || ty.data == CUDA_R_16F;
  if (tuneOn() && low && yType == ty.data && beta == 0.0 && batch == 1 &&
      double(m) * double(n) * double(k) >= double(kPadMinWork)) {
    STRAIT_ASSIGN_OR_RETURN(bool done, gemmTunedLt(c, ctx, ty.data, ta, tb, m, n, k, lda, ldb,
                                                   ldy, alphaF, a, b, y));
    if (done)
      return Status::ok();
  }
  // Padded copies of misaligned operands (see kPadMinWork).
  GemmOperand ops[3] = {{a, ta ? k : m, lda, sA}, {b, tb ? n : k, ldb, sB}, {y, m, ldy, sY}};
  size_t opEs[3] = {es, es, yes};
  bool pad[3] = {false, false, false};
  int64_t padLd[3] = {lda, ldb, ldy};
  size_t padBytes[3] = {0, 0, 0}, total = 0;
  if (!ty.f64 && padOn() && double(m) * double(n) * double(k) >= double(kPadMinWork))
    for (int i = 0; i < 3; ++i) {
      const GemmOperand &o = ops[i];
      int64_t entries = o.stride == 0 ? 1 : batch;
      int64_t ld = paddedLd(o.ld, opEs[i]);
      // Only dense batches (stride = rows * ld) are copied as one block.
      if (ld == o.ld || (o.stride != 0 && o.stride != o.rows * o.ld))
        continue;
      pad[i] = true;
      padLd[i] = ld;
      padBytes[i] = static_cast<size_t>(entries * o.rows * ld) * opEs[i];
      total += (padBytes[i] + 255) / 256 * 256;
    }
  void *padded[3] = {nullptr, nullptr, nullptr};
  if (total) {
    scratchInUse = (scratchInUse + 255) / 256 * 256;
    STRAIT_ASSIGN_OR_RETURN(void *block, c.getScratch(scratchInUse + total));
    char *next = static_cast<char *>(block) + scratchInUse;
    for (int i = 0; i < 3; ++i)
      if (pad[i]) {
        padded[i] = next;
        next += (padBytes[i] + 255) / 256 * 256;
        const GemmOperand &o = ops[i];
        int64_t rows = o.rows * (o.stride == 0 ? 1 : batch);
        if (i < 2 || beta != 0.0)
          STRAIT_RETURN_IF_ERROR(copyRows(c, padded[i], padLd[i], o.data, o.ld, o.ld, rows,
                                          opEs[i]));
      }
  }
  auto strideOf = [&](int i) { return ops[i].stride == 0 ? 0 : ops[i].rows * padLd[i]; };
  const void *ga = pad[0] ? padded[0] : a;
  const void *gb = pad[1] ? padded[1] : b;
  void *gy = pad[2] ? padded[2] : y;
  cublasStatus_t st = cublasGemmStridedBatchedEx(
      c.blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N,
      static_cast<int>(n), static_cast<int>(m), static_cast<int>(k), pa, gb, ty.data,
      static_cast<int>(padLd[1]), strideOf(1), ga, ty.data, static_cast<int>(padLd[0]),
      strideOf(0), pb, gy, yType, static_cast<int>(padLd[2]), strideOf(2),
      static_cast<int>(batch), ty.compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    return cublasStatus(st, "GEMM " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                                std::to_string(k) + " batch " + std::to_string(batch))
        .withKernel(ctx.op());
  if (pad[2])
    return copyRows(c, y, ldy, padded[2], padLd[2], ldy,
                    m * (sY == 0 ? 1 : batch), yes);
  return Status::ok();
}

Status gemm(CudaContext &c, const KernelContext &ctx, const GemmTypes &ty, bool ta, bool tb,
            int64_t m, int64_t n, int64_t k, double alpha, const void *a, int64_t sA,
            const void *b, int64_t sB, double beta, void *y, int64_t sY, int64_t batch) {
  return gemm(c, ctx, ty, ta, tb, m, n, k, alpha, a, sA, b, sB, beta, y, sY, batch, ty.data, 0);
}

/// cublasLt state of a backend: the handle and, per product shape, the
/// descriptors and the algorithm its heuristic chose (planned once, so a
/// captured or replayed step only launches).
struct LtPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  bool ok = false;
};
struct LtState {
  cublasLtHandle_t handle = nullptr;
  /// By (kind: 0 bias epilogue, 1 tuned plain product; dtype, ta, tb, m, n,
  /// k, lda, ldb, ldy).
  std::map<std::tuple<int, int, bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>,
           LtPlan>
      plans;
  ~LtState() {
    for (auto &e : plans) {
      LtPlan &p = e.second;
      if (p.desc)
        cublasLtMatmulDescDestroy(p.desc);
      for (cublasLtMatrixLayout_t l : {p.a, p.b, p.d})
        if (l)
          cublasLtMatrixLayoutDestroy(l);
    }
    if (handle)
      cublasLtDestroy(handle);
  }
};

/// The cuBLAS workspace (CudaGraph.cpp) size, also given to cublasLt.
constexpr size_t kLtWorkspaceBytes = 32u << 20;

/// The backend's cublasLt state, created on first use. Without a handle
/// (cublasLtCreate failed) no plan gets an algorithm and the callers take
/// the cuBLAS paths.
LtState &ltState(CudaContext &c) {
  if (!c.blasLt) {
    auto st = std::make_shared<LtState>();
    if (cublasLtCreate(&st->handle) != CUBLAS_STATUS_SUCCESS)
      st->handle = nullptr;
    c.blasLt = st;
  }
  return *static_cast<LtState *>(c.blasLt.get());
}

/// Creates plan `p` for Y = op(A) op(B) [+ bias[n] through the bias
/// epilogue: added to the f32 accumulator, then one rounding to Y's type],
/// 16-bit operands, f32 compute, split-K sums in f32 only (as
/// DISALLOW_REDUCED_PRECISION_REDUCTION for the plain GEMMs). Row-major on
/// column-major: cuBLAS's A is our B; stored shapes: our B is n x k (k x n
/// transposed) with ld ldb, our A k x m (m x k) with lda, D n x m with ldy.
/// Returns up to `want` candidate algorithms, best first by the heuristic.
StatusOr<std::vector<cublasLtMatmulHeuristicResult_t>>
createLtPlan(LtState &st, LtPlan &p, cudaDataType_t dt, bool ta, bool tb, int64_t m, int64_t n,
             int64_t k, int64_t lda, int64_t ldb, int64_t ldy, bool bias, int want) {
  if (!st.handle)
    return std::vector<cublasLtMatmulHeuristicResult_t>();
  cublasOperation_t opA = tb ? CUBLAS_OP_T : CUBLAS_OP_N, opB = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  auto check = [](cublasStatus_t s, const char *what) { return cublasStatus(s, what); };
  STRAIT_RETURN_IF_ERROR(
      check(cublasLtMatmulDescCreate(&p.desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "Lt desc"));
  STRAIT_RETURN_IF_ERROR(check(cublasLtMatmulDescSetAttribute(
                                   p.desc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)),
                               "Lt transa"));
  STRAIT_RETURN_IF_ERROR(check(cublasLtMatmulDescSetAttribute(
                                   p.desc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)),
                               "Lt transb"));
  if (bias) {
    cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    int32_t biasType = static_cast<int32_t>(dt);
    STRAIT_RETURN_IF_ERROR(check(cublasLtMatmulDescSetAttribute(
                                     p.desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)),
                                 "Lt epilogue"));
    STRAIT_RETURN_IF_ERROR(
        check(cublasLtMatmulDescSetAttribute(p.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                                             &biasType, sizeof(biasType)),
              "Lt bias type"));
  }
  STRAIT_RETURN_IF_ERROR(
      check(cublasLtMatrixLayoutCreate(&p.a, dt, tb ? k : n, tb ? n : k, ldb), "Lt layout"));
  STRAIT_RETURN_IF_ERROR(
      check(cublasLtMatrixLayoutCreate(&p.b, dt, ta ? m : k, ta ? k : m, lda), "Lt layout"));
  STRAIT_RETURN_IF_ERROR(check(cublasLtMatrixLayoutCreate(&p.d, dt, n, m, ldy), "Lt layout"));
  cublasLtMatmulPreference_t pref = nullptr;
  STRAIT_RETURN_IF_ERROR(check(cublasLtMatmulPreferenceCreate(&pref), "Lt preference"));
  size_t ws = kLtWorkspaceBytes;
  uint32_t schemes = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                       sizeof(ws));
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK,
                                       &schemes, sizeof(schemes));
  std::vector<cublasLtMatmulHeuristicResult_t> results(want);
  int count = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(st.handle, p.desc, p.a, p.b, p.d, p.d, pref,
                                                     want, results.data(), &count);
  cublasLtMatmulPreferenceDestroy(pref);
  results.resize(hs == CUBLAS_STATUS_SUCCESS ? count : 0);
  results.erase(std::remove_if(results.begin(), results.end(),
                               [](const cublasLtMatmulHeuristicResult_t &r) {
                                 return r.state != CUBLAS_STATUS_SUCCESS;
                               }),
                results.end());
  if (!results.empty()) {
    p.algo = results[0].algo;
    p.ok = true;
  }
  return results;
}

/// The bias-epilogue plan of a product with dense operands (see createLtPlan).
StatusOr<LtPlan *> ltPlan(CudaContext &c, cudaDataType_t dt, bool ta, bool tb, int64_t m,
                          int64_t n, int64_t k) {
  LtState &st = ltState(c);
  auto key = std::make_tuple(0, static_cast<int>(dt), ta, tb, m, n, k, int64_t(0), int64_t(0),
                             int64_t(0));
  auto found = st.plans.find(key);
  if (found != st.plans.end())
    return &found->second;
  LtPlan &p = st.plans[key];
  STRAIT_RETURN_IF_ERROR(
      createLtPlan(st, p, dt, ta, tb, m, n, k, ta ? m : k, tb ? k : n, n, true, 1).getStatus());
  return &p;
}

/// STRAIT_CUDA_GEMM_TUNE=1: large 16-bit products go through cublasLt with
/// the fastest of its heuristic's first candidates, timed once per shape
/// (an experiment for GPT-2's LM head, which cuBLAS ran at 70-90 TFLOP/s on
/// an H200; off by default until measured: strait-cuda-gemm-bench).
bool tuneOn() {
  static const bool on = [] {
    const char *v = std::getenv("STRAIT_CUDA_GEMM_TUNE");
    return v && std::string(v) == "1";
  }();
  return on;
}

/// Y = op(A) op(B) (16-bit, f32 compute) through a tuned cublasLt plan;
/// false (nothing launched) when cublasLt has no algorithm for it.
StatusOr<bool> gemmTunedLt(CudaContext &c, const KernelContext &ctx, cudaDataType_t dt, bool ta,
                           bool tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                           int64_t ldy, float alpha, const void *a, const void *b, void *y) {
  if (!c.blasWorkspace)
    return false;
  LtState &st = ltState(c);
  auto key = std::make_tuple(1, static_cast<int>(dt), ta, tb, m, n, k, lda, ldb, ldy);
  bool fresh = st.plans.find(key) == st.plans.end();
  LtPlan &p = st.plans[key];
  float beta = 0.0f;
  if (fresh) {
    STRAIT_ASSIGN_OR_RETURN(std::vector<cublasLtMatmulHeuristicResult_t> results,
                            createLtPlan(st, p, dt, ta, tb, m, n, k, lda, ldb, ldy, false, 8));
    // Time each candidate twice (outside a capture only: events and a host
    // wait); the output is overwritten by the real product below.
    if (!c.capturing() && results.size() > 1) {
      cudaEvent_t e0, e1;
      cudaEventCreate(&e0);
      cudaEventCreate(&e1);
      float best = 0;
      for (const cublasLtMatmulHeuristicResult_t &r : results) {
        cublasLtMatmul(st.handle, p.desc, &alpha, b, p.a, a, p.b, &beta, y, p.d, y, p.d, &r.algo,
                       c.blasWorkspace, kLtWorkspaceBytes, c.stream);
        cudaEventRecord(e0, c.stream);
        cublasStatus_t rs = CUBLAS_STATUS_SUCCESS;
        for (int i = 0; i < 2 && rs == CUBLAS_STATUS_SUCCESS; ++i)
          rs = cublasLtMatmul(st.handle, p.desc, &alpha, b, p.a, a, p.b, &beta, y, p.d, y, p.d,
                              &r.algo, c.blasWorkspace, kLtWorkspaceBytes, c.stream);
        cudaEventRecord(e1, c.stream);
        cudaEventSynchronize(e1);
        float ms = 0;
        if (rs != CUBLAS_STATUS_SUCCESS || cudaEventElapsedTime(&ms, e0, e1) != cudaSuccess)
          continue;
        if (best == 0 || ms < best) {
          best = ms;
          p.algo = r.algo;
        }
      }
      cudaEventDestroy(e0);
      cudaEventDestroy(e1);
      cudaGetLastError();
    }
  }
  if (!p.ok)
    return false;
  cublasStatus_t s = cublasLtMatmul(st.handle, p.desc, &alpha, b, p.a, a, p.b, &beta, y, p.d, y,
                                    p.d, &p.algo, c.blasWorkspace, kLtWorkspaceBytes, c.stream);
  if (s != CUBLAS_STATUS_SUCCESS)
    return cublasStatus(s, "cublasLt GEMM " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                               std::to_string(k))
        .withKernel(ctx.op());
  return true;
}

/// Y = alpha * op(A) op(B) + bias (bias[n] over the rows) for 16-bit
/// operands through cublasLt's bias epilogue; false (nothing launched) when
/// cublasLt offers no algorithm for the shape.
StatusOr<bool> gemmBiasLt(CudaContext &c, const KernelContext &ctx, cudaDataType_t dt, bool ta,
                          bool tb, int64_t m, int64_t n, int64_t k, float alpha,
                          const void *a, const void *b, const void *bias, void *y) {
  if (!c.blasWorkspace || !ltOn())
    return false;
  STRAIT_ASSIGN_OR_RETURN(LtPlan * p, ltPlan(c, dt, ta, tb, m, n, k));
  if (!p->ok)
    return false;
  STRAIT_RETURN_IF_ERROR(cublasStatus(
      cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias,
                                     sizeof(bias)),
      "Lt bias pointer"));
  float beta = 0.0f;
  LtState &st = *static_cast<LtState *>(c.blasLt.get());
  cublasStatus_t s = cublasLtMatmul(st.handle, p->desc, &alpha, b, p->a, a, p->b, &beta, y, p->d,
                                    y, p->d, &p->algo, c.blasWorkspace, kLtWorkspaceBytes,
                                    c.stream);
  if (s != CUBLAS_STATUS_SUCCESS)
    return cublasStatus(s, "cublasLt GEMM " + std::to_string(m) + "x" + std::to_string(n) +
                               "x" + std::to_string(k) + " with bias")
        .withKernel(ctx.op());
  return true;
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
    // cuBLAS rounds alpha * A B to 16 bits before adding beta * C (seen on
    // an H200: a bf16 Gemm whose bias cancels most of the product was off by
    // a rounding of the product). The CPU backend rounds the f32 sum once:
    // so does this, with cublasLt's bias epilogue for a bias over the rows
    // (a Linear layer's), else (below) through an f32 result in scratch.
    bool low = a->dtype == program::DTYPE_BF16 || a->dtype == program::DTYPE_F16;
    if (low && beta == 1.0f && numElements(cIn->shape) == n &&
        (cIn->rank() == 1 || cIn->shape[0] == 1)) {
      STRAIT_ASSIGN_OR_RETURN(bool done,
                              gemmBiasLt(c, ctx, ty.data, ta != 0, tb != 0, m, n, k, alpha,
                                         a->data, b->data, cIn->data, y->data));
      if (done)
        return Status::ok();
    }
    if (!launchStridedCopy(dtypeSize(a->dtype), cIn->data, y->data, ix, c.stream))
      return ctx.unsupported("cuda: Gemm bias of " + cIn->typeString());
    betaEff = beta;
  }
  if (betaEff != 0.0 && (a->dtype == program::DTYPE_BF16 || a->dtype == program::DTYPE_F16)) {
    ET et = elemType(a->dtype);
    int64_t mn = m * n;
    STRAIT_ASSIGN_OR_RETURN(void *block, c.getScratch(static_cast<size_t>(mn) * 4));
    if (!launchCast(et, ET::F32, y->data, block, mn, c.stream))
      return ctx.unsupported("cuda: Gemm bias of " + cIn->typeString());
    STRAIT_RETURN_IF_ERROR(gemm(c, ctx, ty, ta != 0, tb != 0, m, n, k, alpha, a->data, 0,
                                b->data, 0, betaEff, block, 0, 1, CUDA_R_32F,
                                static_cast<size_t>(mn) * 4));
    if (!launchCast(ET::F32, et, block, y->data, mn, c.stream))
      return ctx.unsupported("cuda: Gemm result of " + y->typeString());
    return Status::ok();
  }
  return gemm(c, ctx, ty, ta != 0, tb != 0, m, n, k, alpha, a->data, 0, b->data, 0, betaEff,
              y->data, 0, 1);
}

//===----------------------------------------------------------------------===//
// Grouped expert products (mixture of experts)
//===----------------------------------------------------------------------===//

/// Device scratch of a grouped product: the rows ordered by expert and the
/// inverse order (i64), X's rows in that order and Y's (or dY's).
struct GroupedScratch {
  int64_t *rows = nullptr, *inverse = nullptr;
  char *x = nullptr, *y = nullptr;
  size_t bytes = 0; ///< in use, for gemm's padded copies after it
};

/// Reads the rows' experts on the host (a wait for the stream: the executor
/// runs these kernels outside the CUDA graphs, CudaKernelTable::readsOnHost),
/// routes them (KernelArgs.h, the CPU kernels' routing) and gathers X's rows
/// (and dY's) by expert into scratch.
StatusOr<GroupedScratch> groupRows(CudaContext &c, const KernelContext &ctx, int tag,
                                   const GroupedMatMulArgs &a, const ExpertRouting &r,
                                   const Tensor *second, int64_t secondWidth) {
  size_t es = dtypeSize(a.x->dtype);
  auto aligned = [](size_t b) { return (b + 255) / 256 * 256; };
  size_t idxBytes = aligned(sizeof(int64_t) * a.s);
  size_t xBytes = aligned(es * a.s * a.i), yBytes = aligned(es * a.s * a.o);
  GroupedScratch g;
  g.bytes = 2 * idxBytes + xBytes + yBytes;
  STRAIT_ASSIGN_OR_RETURN(void *block, c.getScratch(g.bytes));
  char *p = static_cast<char *>(block);
  g.rows = reinterpret_cast<int64_t *>(p);
  g.inverse = reinterpret_cast<int64_t *>(p + idxBytes);
  g.x = p + 2 * idxBytes;
  g.y = g.x + xBytes;
  std::vector<int64_t> inverse(r.rows.size());
  for (size_t j = 0; j < r.rows.size(); ++j)
    inverse[r.rows[j]] = static_cast<int64_t>(j);
  // From pageable memory: each copy returns once its source is staged.
  size_t n = sizeof(int64_t) * r.rows.size();
  STRAIT_RETURN_IF_ERROR(cudaStatus(
      cudaMemcpyAsync(g.rows, r.rows.data(), n, cudaMemcpyHostToDevice, c.stream), "rows"));
  STRAIT_RETURN_IF_ERROR(cudaStatus(
      cudaMemcpyAsync(g.inverse, inverse.data(), n, cudaMemcpyHostToDevice, c.stream),
      "inverse rows"));
  launchGather(es, a.x->data, g.rows, true, g.x, 1, a.s, a.s, a.i, c.errorFlag, tag, c.stream);
  if (second)
    launchGather(es, second->data, g.rows, true, g.y, 1, a.s, a.s, secondWidth, c.errorFlag,
                 tag, c.stream);
  return g;
}

StatusOr<ExpertRouting> routeOnHost(CudaContext &c, const KernelContext &ctx,
                                    const GroupedMatMulArgs &a) {
  STRAIT_ASSIGN_OR_RETURN(std::vector<int64_t> ids, hostInts(c, ctx, *a.idx, "the rows' experts"));
  return routeExperts(ctx, std::move(ids), a.e);
}

/// Y[s] = X[s] W[idx[s]]^T (transB) or X[s] W[idx[s]]: one GEMM per expert
/// over its rows, in the operands' dtype with f32 accumulation (gemmTypes),
/// then Y's rows back in row order.
Status groupedMatMulKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(GroupedMatMulArgs a, groupedMatMulArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(GemmTypes ty, gemmTypes(c, ctx, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(ExpertRouting r, routeOnHost(c, ctx, a));
  if (a.s == 0 || a.o == 0)
    return Status::ok();
  STRAIT_ASSIGN_OR_RETURN(GroupedScratch g, groupRows(c, ctx, tag, a, r, nullptr, 0));
  size_t es = dtypeSize(a.x->dtype);
  const char *w = a.w->as<char>();
  for (int64_t ex = 0; ex < a.e; ++ex) {
    int64_t begin = r.offset[ex], n = r.offset[ex + 1] - begin;
    STRAIT_RETURN_IF_ERROR(gemm(c, ctx, ty, false, a.transB, n, a.o, a.i, 1.0,
                                g.x + begin * a.i * es, 0, w + ex * a.o * a.i * es, 0, 0.0,
                                g.y + begin * a.o * es, 0, 1, ty.data, g.bytes));
  }
  launchGather(es, g.y, g.inverse, true, a.out->data, 1, a.s, a.s, a.o, c.errorFlag, tag,
               c.stream);
  return Status::ok();
}

/// dW[e] = dY_e^T X_e (transB) or X_e^T dY_e over expert e's rows; an
/// expert without rows gets zeros (gemm's empty sum).
Status groupedMatMulGradWeightKernel(CudaContext &c, KernelContext &ctx, int tag) {
  STRAIT_ASSIGN_OR_RETURN(GroupedMatMulArgs a, groupedMatMulGradWeightArgs(ctx));
  STRAIT_ASSIGN_OR_RETURN(GemmTypes ty, gemmTypes(c, ctx, a.x->dtype));
  STRAIT_ASSIGN_OR_RETURN(ExpertRouting r, routeOnHost(c, ctx, a));
  size_t es = dtypeSize(a.x->dtype);
  if (a.s == 0)
    return cudaStatus(cudaMemsetAsync(a.out->data, 0, es * a.e * a.o * a.i, c.stream),
                      "memset");
  STRAIT_ASSIGN_OR_RETURN(GroupedScratch g, groupRows(c, ctx, tag, a, r, a.dy, a.o));
  char *dw = a.out->as<char>();
  for (int64_t ex = 0; ex < a.e; ++ex) {
    int64_t begin = r.offset[ex], n = r.offset[ex + 1] - begin;
    const char *xb = g.x + begin * a.i * es, *db = g.y + begin * a.o * es;
    char *out = dw + ex * a.o * a.i * es;
    if (a.transB) // [O, I] = dY_e^T X_e
      STRAIT_RETURN_IF_ERROR(gemm(c, ctx, ty, true, false, a.o, a.i, n, 1.0, db, 0, xb, 0, 0.0,
                                  out, 0, 1, ty.data, g.bytes));
    else // [I, O] = X_e^T dY_e
      STRAIT_RETURN_IF_ERROR(gemm(c, ctx, ty, true, false, a.i, a.o, n, 1.0, xb, 0, db, 0, 0.0,
                                  out, 0, 1, ty.data, g.bytes));
  }
  return Status::ok();
}

} // namespace

void addMatMulKernels(CudaKernelTable &t) {
  t.add("MatMul", matMulKernel);
  t.add("Gemm", gemmKernel);
  t.addReadingOnHost("GroupedMatMul", groupedMatMulKernel);
  t.addReadingOnHost("GroupedMatMulGradWeight", groupedMatMulGradWeightKernel);
}

} // namespace cuda
} // namespace rt
} // namespace strait
