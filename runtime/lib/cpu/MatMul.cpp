//===- MatMul.cpp - MatMul and Gemm through OpenBLAS ----------------------===//
//
// f32 matrix products go to cblas_sgemm (OpenBLAS, multi-threaded); batched
// MatMul broadcasts the batch dimensions numpy-style and runs one sgemm per
// batch entry, in parallel over batches when the matrices are small.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"
#include "strait/runtime/Program.h"

#include <cblas.h>

#include <algorithm>
#include <map>
#include <set>

namespace strait {
namespace rt {
namespace cpu {
namespace {

struct MatMulShape {
  Shape batch, aBatch, bBatch;
  int64_t m, k, n;
  Shape out;
};

StatusOr<MatMulShape> inferMatMul(const KernelContext &ctx, const Shape &a,
                                  const Shape &b) {
  if (a.empty() || b.empty())
    return ctx.error("MatMul operands must have rank >= 1");
  Shape a2 = a, b2 = b;
  bool aVec = a.size() == 1, bVec = b.size() == 1;
  if (aVec)
    a2.insert(a2.begin(), 1);
  if (bVec)
    b2.push_back(1);
  MatMulShape r;
  r.m = a2[a2.size() - 2];
  r.k = a2.back();
  r.n = b2.back();
  if (b2[b2.size() - 2] != r.k)
    return ctx.error("inner dimensions differ: " + shapeToString(a) + " x " +
                     shapeToString(b));
  r.aBatch.assign(a2.begin(), a2.end() - 2);
  r.bBatch.assign(b2.begin(), b2.end() - 2);
  STRAIT_ASSIGN_OR_RETURN(r.batch, broadcastShapes(ctx, r.aBatch, r.bBatch));
  r.out = r.batch;
  if (!aVec)
    r.out.push_back(r.m);
  if (!bVec)
    r.out.push_back(r.n);
  return r;
}

Status matMulKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(MatMulShape s, inferMatMul(ctx, a->shape, b->shape));
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, s.out, program::DTYPE_F32));
  int64_t batches = numElements(s.batch);
  if (batches == 0 || s.m == 0 || s.n == 0)
    return Status::ok();
  std::vector<int64_t> sa = broadcastStrides(s.aBatch, s.batch);
  std::vector<int64_t> sb = broadcastStrides(s.bBatch, s.batch);
  int64_t matA = s.m * s.k, matB = s.k * s.n, matC = s.m * s.n;
  auto runOne = [&](int64_t bi) {
    int64_t offA = 0, offB = 0, rem = bi;
    for (int64_t d = static_cast<int64_t>(s.batch.size()) - 1; d >= 0; --d) {
      int64_t idx = rem % s.batch[d];
      rem /= s.batch[d];
      offA += idx * sa[d];
      offB += idx * sb[d];
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s.m, s.n, s.k, 1.0f,
                a->as<float>() + offA * matA, s.k, b->as<float>() + offB * matB,
                s.n, 0.0f, y->as<float>() + bi * matC, s.n);
  };
  // Large single products: let OpenBLAS thread internally. Many small ones:
  // spread batches over our pool with single-threaded sgemm calls.
  if (batches > 1 && matC * s.k < (1 << 18)) {
    openblas_set_num_threads(1);
    parallelFor(batches, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t bi = b0; bi < b1; ++bi)
        runOne(bi);
    });
    openblas_set_num_threads(getNumThreads());
  } else {
    for (int64_t bi = 0; bi < batches; ++bi)
      runOne(bi);
  }
  return Status::ok();
}

Status gemmKernel(KernelContext &ctx) {
  STRAIT_ASSIGN_OR_RETURN(const Tensor *a, ctx.requireInput(0, program::DTYPE_F32));
  STRAIT_ASSIGN_OR_RETURN(const Tensor *b, ctx.requireInput(1, program::DTYPE_F32));
  const Tensor *c = ctx.input(2);
  const AttrReader &attrs = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(float alpha, attrs.getFloat("alpha", 1.0f));
  STRAIT_ASSIGN_OR_RETURN(float beta, attrs.getFloat("beta", 1.0f));
  STRAIT_ASSIGN_OR_RETURN(int64_t transA, attrs.getInt("transA", 0));
  STRAIT_ASSIGN_OR_RETURN(int64_t transB, attrs.getInt("transB", 0));
  if (a->rank() != 2 || b->rank() != 2)
    return ctx.error("Gemm operands must be 2-D, got " + a->typeString() +
                     " and " + b->typeString());
  int64_t m = transA ? a->shape[1] : a->shape[0];
  int64_t k = transA ? a->shape[0] : a->shape[1];
  int64_t kb = transB ? b->shape[1] : b->shape[0];
  int64_t n = transB ? b->shape[0] : b->shape[1];
  if (k != kb)
    return ctx.error("inner dimensions differ: " + a->typeString() + " x " +
                     b->typeString());
  Shape outShape = {m, n};
  STRAIT_ASSIGN_OR_RETURN(Tensor * y, ctx.requireOutput(0, outShape, program::DTYPE_F32));
  float *py = y->as<float>();
  float betaUsed = 0.0f;
  // A weight gradient accumulated over micro-batches in place
  // (fuseGemmAccumulation): AccumulateGrad's total = (first ? 0 : total) +
  // g / M, with g the product.
  STRAIT_ASSIGN_OR_RETURN(int64_t accumulate, attrs.getInt("accumulate_micro_batches", 0));
  if (accumulate > 0) {
    int mb = ctx.getMicroBatch();
    if (c || (accumulate > 1 && mb < 0) || mb >= accumulate)
      return ctx.error("accumulate_micro_batches " + std::to_string(accumulate) +
                       " needs no C and a step with micro_batch below it (micro_batch " +
                       std::to_string(mb) + ")");
    alpha /= static_cast<float>(accumulate);
    betaUsed = mb <= 0 ? 0.0f : 1.0f;
  } else if (c && beta != 0.0f) {
    if (c->dtype != program::DTYPE_F32)
      return ctx.unsupported("C has type " + c->typeString());
    STRAIT_ASSIGN_OR_RETURN(Shape bs, broadcastShapes(ctx, c->shape, outShape));
    if (bs != outShape)
      return ctx.error("C " + c->typeString() + " does not broadcast to " +
                       shapeToString(outShape));
    std::vector<int64_t> st = broadcastStrides(c->shape, outShape);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        py[i * n + j] = c->as<float>()[i * st[0] + j * st[1]];
    betaUsed = beta;
  }
  if (m == 0 || n == 0)
    return Status::ok();
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha,
              a->as<float>(), a->shape[1], b->as<float>(), b->shape[1],
              betaUsed, py, n);
  return Status::ok();
}

} // namespace

int fuseGemmAccumulation(program::Program &p) {
  std::map<uint32_t, int> kernelAt; // id -> index
  for (int k = 0; k < p.kernels_size(); ++k)
    kernelAt[p.kernels(k).id()] = k;
  // Readers of every value (kernel inputs and communication steps).
  std::map<uint32_t, int> readers;
  for (const auto &k : p.kernels())
    for (uint32_t id : k.inputs())
      if (id != kAbsentValue)
        ++readers[id];
  for (const auto &step : p.steps()) {
    if (step.has_send())
      readers[step.send().value_id()] += 2;
    if (step.has_all_reduce())
      for (uint32_t id : step.all_reduce().value_ids())
        readers[id] += 2;
  }
  auto isF32 = [&](uint32_t id, program::ValueRole role) {
    return id < static_cast<uint32_t>(p.values_size()) && p.values(id).id() == id &&
           p.values(id).dtype() == program::DTYPE_F32 && p.values(id).role() == role;
  };
  // Candidates: AccumulateGrad A of g = Gemm(a, b), g read by A alone.
  std::map<uint32_t, uint32_t> gemmOfAccumulate; // A id -> Gemm id
  std::map<uint32_t, uint32_t> producer;         // value -> kernel id writing it
  for (const auto &k : p.kernels())
    for (uint32_t id : k.outputs())
      producer[id] = k.id();
  for (const auto &k : p.kernels()) {
    if (k.op() != "AccumulateGrad" || k.inputs_size() != 1 || k.outputs_size() != 1)
      continue;
    uint32_t g = k.inputs(0), total = k.outputs(0);
    auto prod = producer.find(g);
    if (prod == producer.end() || readers[g] != 1 || !isF32(g, program::ROLE_ACTIVATION) ||
        !isF32(total, program::ROLE_GRADIENT))
      continue;
    const program::Kernel &gemm = p.kernels(kernelAt[prod->second]);
    bool noC =
        gemm.inputs_size() == 2 || (gemm.inputs_size() == 3 && gemm.inputs(2) == kAbsentValue);
    if (gemm.op() != "Gemm" || (!gemm.domain().empty() && gemm.domain() != "ai.onnx") || !noC ||
        gemm.outputs_size() != 1)
      continue;
    gemmOfAccumulate[k.id()] = gemm.id();
  }
  // In every run step, the Gemm comes before its AccumulateGrad with no
  // kernel touching the accumulator in between, and neither runs alone.
  std::set<uint32_t> rejected;
  for (const auto &step : p.steps()) {
    if (!step.has_run())
      continue;
    std::map<uint32_t, int> pos;
    const auto &ids = step.run().kernel_ids();
    for (int i = 0; i < ids.size(); ++i)
      pos[ids[i]] = i;
    for (const auto &[acc, gemm] : gemmOfAccumulate) {
      bool hasA = pos.count(acc), hasG = pos.count(gemm);
      if (!hasA && !hasG)
        continue;
      if (hasA != hasG || pos[gemm] > pos[acc]) {
        rejected.insert(acc);
        continue;
      }
      uint32_t total = p.kernels(kernelAt[acc]).outputs(0);
      for (int i = pos[gemm] + 1; i < pos[acc]; ++i) {
        const program::Kernel &k = p.kernels(kernelAt[ids[i]]);
        for (uint32_t id : k.inputs())
          if (id == total)
            rejected.insert(acc);
        for (uint32_t id : k.outputs())
          if (id == total)
            rejected.insert(acc);
      }
    }
  }
  int folded = 0;
  std::set<uint32_t> gone;
  for (const auto &[acc, gemmId] : gemmOfAccumulate) {
    if (rejected.count(acc))
      continue;
    const program::Kernel &a = p.kernels(kernelAt[acc]);
    int64_t m = 1;
    if (auto it = a.attrs().find("micro_batches"); it != a.attrs().end() && it->second.i() > 0)
      m = it->second.i();
    program::Kernel *gemm = p.mutable_kernels(kernelAt[gemmId]);
    gemm->set_outputs(0, a.outputs(0));
    (*gemm->mutable_attrs())["accumulate_micro_batches"].set_i(m);
    gone.insert(acc);
    ++folded;
  }
  if (gone.empty())
    return 0;
  for (auto &step : *p.mutable_steps()) {
    if (!step.has_run())
      continue;
    auto *ids = step.mutable_run()->mutable_kernel_ids();
    auto keep =
        std::remove_if(ids->begin(), ids->end(), [&](uint32_t id) { return gone.count(id); });
    ids->Truncate(static_cast<int>(keep - ids->begin()));
  }
  return folded;
}

/// Exposed for Conv: C[m,n] = A[m,k] * B[k,n] (+ C when accumulate).
void sgemmRowMajor(int64_t m, int64_t n, int64_t k, const float *a,
                   const float *b, float *c, bool accumulate) {
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, n, k, 1.0f, a, k,
              b, n, accumulate ? 1.0f : 0.0f, c, n);
}

void sgemm(bool transA, bool transB, int64_t m, int64_t n, int64_t k,
           float alpha, const float *a, int64_t lda, const float *b,
           int64_t ldb, float beta, float *c, int64_t ldc) {
  cblas_sgemm(CblasRowMajor, transA ? CblasTrans : CblasNoTrans,
              transB ? CblasTrans : CblasNoTrans, m, n, k, alpha, a, lda, b,
              ldb, beta, c, ldc);
}

void addMatMulKernels(KernelTable &table) {
  table.add("MatMul", matMulKernel);
  table.add("Gemm", gemmKernel);
}

} // namespace cpu
} // namespace rt
} // namespace strait
