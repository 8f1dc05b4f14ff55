//===- CpuBackend.cpp - The CPU backend and shared kernel helpers ---------===//
//
// Builds the CPU kernel table from the explicit add*Kernels calls and
// implements the helpers of CpuKernels.h.
//
//===----------------------------------------------------------------------===//
#include "CpuKernels.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <set>

namespace strait {
namespace rt {
namespace cpu {

StatusOr<Shape> broadcastShapes(const KernelContext &ctx, const Shape &a,
                                const Shape &b) {
  size_t r = std::max(a.size(), b.size());
  Shape out(r);
  for (size_t i = 0; i < r; ++i) {
    int64_t da = i < r - a.size() ? 1 : a[i - (r - a.size())];
    int64_t db = i < r - b.size() ? 1 : b[i - (r - b.size())];
    if (da != db && da != 1 && db != 1)
      return ctx.error("shapes " + shapeToString(a) + " and " +
                       shapeToString(b) + " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> rowMajorStrides(const Shape &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int64_t i = static_cast<int64_t>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

std::vector<int64_t> broadcastStrides(const Shape &in, const Shape &out) {
  std::vector<int64_t> inStrides = rowMajorStrides(in);
  std::vector<int64_t> s(out.size(), 0);
  size_t shift = out.size() - in.size();
  for (size_t i = 0; i < in.size(); ++i)
    s[i + shift] = in[i] == 1 ? 0 : inStrides[i];
  return s;
}

StatusOr<std::vector<int64_t>> readInts(const KernelContext &ctx,
                                        const Tensor &t) {
  std::vector<int64_t> v(t.numel());
  if (t.dtype == program::DTYPE_I64)
    std::copy(t.as<int64_t>(), t.as<int64_t>() + v.size(), v.begin());
  else if (t.dtype == program::DTYPE_I32)
    std::copy(t.as<int32_t>(), t.as<int32_t>() + v.size(), v.begin());
  else
    return ctx.unsupported("expected an integer tensor, got " + t.typeString());
  return v;
}

namespace {

/// bf16/f16 support of an f32 kernel (mixed precision, graph-autocast):
/// 16-bit float inputs are widened to f32 (exact), the f32 kernel runs
/// (f32 accumulation) on f32 outputs, and each 16-bit output is rounded to
/// nearest even on store. Kernels without 16-bit operands run unchanged.
/// The inner context needs the kernel proto: `kernel` is the one resolve()
/// got, kept alive by the returned function.
KernelFn widenLowFloats(KernelFn fn, std::shared_ptr<const program::Kernel> kernel) {
  return [fn, kernel](KernelContext &ctx) -> Status {
    bool low = false;
    for (size_t i = 0; i < ctx.numInputs(); ++i)
      low |= ctx.input(i) && isLowFloat(ctx.input(i)->dtype);
    for (size_t i = 0; i < ctx.numOutputs(); ++i)
      low |= ctx.output(i) && isLowFloat(ctx.output(i)->dtype);
    if (!low)
      return fn(ctx);
    std::vector<OwnedTensor> wide;
    wide.reserve(ctx.numInputs() + ctx.numOutputs());
    std::vector<const Tensor *> ins;
    for (size_t i = 0; i < ctx.numInputs(); ++i) {
      const Tensor *x = ctx.input(i);
      if (!x || !isLowFloat(x->dtype)) {
        ins.push_back(x);
        continue;
      }
      wide.emplace_back(program::DTYPE_F32, x->shape);
      float *w = wide.back().tensor.as<float>();
      const uint16_t *v = x->as<uint16_t>();
      DType t = x->dtype;
      parallelFor(x->numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k)
          w[k] = lowToFloat(t, v[k]);
      });
      ins.push_back(&wide.back().tensor);
    }
    std::vector<Tensor *> outs;
    for (size_t i = 0; i < ctx.numOutputs(); ++i) {
      Tensor *y = ctx.output(i);
      if (!y || !isLowFloat(y->dtype)) {
        outs.push_back(y);
        continue;
      }
      wide.emplace_back(program::DTYPE_F32, y->shape);
      outs.push_back(&wide.back().tensor);
    }
    KernelContext inner(*kernel, std::move(ins), outs);
    inner.setMicroBatch(ctx.getMicroBatch());
    STRAIT_RETURN_IF_ERROR(fn(inner));
    for (size_t i = 0; i < ctx.numOutputs(); ++i) {
      Tensor *y = ctx.output(i);
      if (!y || !isLowFloat(y->dtype))
        continue;
      const float *w = outs[i]->as<float>();
      uint16_t *v = y->as<uint16_t>();
      DType t = y->dtype;
      parallelFor(y->numel(), 16384, [&](int64_t b, int64_t e) {
        for (int64_t k = b; k < e; ++k)
          v[k] = floatToLow(t, w[k]);
      });
    }
    return Status::ok();
  };
}

class CpuBackend : public Backend {
public:
  CpuBackend() {
    addElementwiseKernels(table);
    addMatMulKernels(table);
    addConvKernels(table);
    addNormalizationKernels(table);
    addReduceKernels(table);
    addDataMovementKernels(table);
    addIndexingKernels(table);
    addGeneratorKernels(table);
    addTrainingKernels(table);
    addMiscKernels(table);
    addGradientKernels(table);
    addFusedKernels(table);
    addAttentionKernels(table);
    addRotaryKernels(table);
    addGroupedMatMulKernels(table);
  }
  std::string name() const override { return "cpu"; }
  /// STRAIT_CPU_FOLD_GEMM=0 turns the fold off (bench/runtime/dp_step.py).
  void foldKernels(program::Program &program) const override {
    const char *off = std::getenv("STRAIT_CPU_FOLD_GEMM");
    if (!off || std::string(off) != "0")
      fuseGemmAccumulation(program);
  }
  StatusOr<KernelFn> resolve(const program::Kernel &kernel) const override {
    if (!kernel.domain().empty() && kernel.domain() != "ai.onnx" &&
        kernel.domain() != "strait" &&
        kernel.domain() != "ai.onnx.preview.training")
      return unimplemented("cpu backend: unknown op domain '" +
                           kernel.domain() + "'");
    const KernelFn *fn = table.lookup(kernel.op());
    if (!fn)
      return unimplemented("cpu backend has no kernel for op '" + kernel.op() +
                           "'");
    // Mixed precision (graph-autocast): the products and the gradient ops
    // autodiff emits for them take bf16/f16 operands (TopK too: a bf16
    // router's logits; its values are the input's, so widening is exact). Reshape, Transpose
    // and the other data-movement kernels copy bytes of any dtype.
    static const std::set<std::string> widened = {"MatMul",        "Gemm",
                                                  "Conv",          "ConvTranspose",
                                                  "ConvGradInput", "ConvGradWeight",
                                                  "ReduceToShape", "ReduceSum",
                                                  "GroupedMatMul", "GroupedMatMulGradWeight",
                                                  "TopK"};
    if (widened.count(kernel.op()))
      return widenLowFloats(*fn, std::make_shared<const program::Kernel>(kernel));
    return *fn;
  }
  std::vector<std::string> supportedOps() const override { return table.ops(); }
  StatusOr<Buffer> allocate(size_t bytes) const override {
    try {
      return Buffer(bytes);
    } catch (const std::bad_alloc &) {
      return unavailable("cpu backend: cannot allocate " +
                         std::to_string(bytes) + " bytes");
    }
  }

private:
  KernelTable table;
};

} // namespace
} // namespace cpu

std::unique_ptr<Backend> createCpuBackend() {
  return std::make_unique<cpu::CpuBackend>();
}

void registerCpuBackend(BackendRegistry &registry) {
  registry.add(createCpuBackend());
}

} // namespace rt
} // namespace strait
