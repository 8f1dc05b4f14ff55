//===- CudaGemmBench.cpp - bf16 MatMul rates of chosen shapes on a GPU ----===//
//
//   strait-cuda-gemm-bench [--shapes MxKxN,...] [--iters 20] [--dtype bf16|f32]
//
// Times MatMul(A [M, K], B [K, N]) -> Y [M, N] through the CUDA backend (one
// kernel per program, CUDA graphs on, as in a training step) for each shape
// and prints ms and TFLOP/s. The default shapes are GPT-2 small's LM head at
// 8 x 1024 tokens (forward, input gradient, weight gradient; N or K = 50257,
// rows that are not 16-byte aligned), one of its layers' products for
// comparison, and the LM head as straitc --pad-classes computes it (50304
// classes: aligned rows). Run it under the backend's switches to time them apart:
// STRAIT_CUDA_GEMM_PAD=0 (no padded copies), STRAIT_CUDA_GEMM_SPLITK_16=1
// (cuBLAS may reduce split-K partial sums in 16 bits; the default forbids
// it), STRAIT_CUDA_GEMM_TUNE=1 (cublasLt, the fastest of its heuristic's
// first 8 candidates timed at the first call). Each shape's result is checked against a double-precision dot
// product at 64 sampled elements (exit 1 above 2 % of the row's scale).
// Exit 77 without a GPU.
//
//===----------------------------------------------------------------------===//
#include "TestUtil.h"
#include "strait/runtime/Cuda.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <iostream>
#include <sstream>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

struct Shape3 {
  int64_t m, k, n;
};

struct Options {
  std::vector<Shape3> shapes = {{8192, 768, 50257}, {8192, 50257, 768}, {768, 8192, 50257},
                                {8192, 768, 3072},  {8192, 768, 50304}, {8192, 50304, 768},
                                {768, 8192, 50304}};
  int iters = 20, warmup = 3;
  DType dtype = program::DTYPE_BF16;
};

float valueAt(const Tensor &t, int64_t i) {
  return t.dtype == program::DTYPE_BF16 ? bf16Value(t.as<uint16_t>()[i]) : t.as<float>()[i];
}

/// Runs one shape: mean ms per run and the largest sampled error relative to
/// the row's sum of |products|.
StatusOr<std::pair<double, double>> timeShape(const Shape3 &s, const Options &o,
                                              const BackendRegistry &reg) {
  ProgramBuilder b;
  uint32_t a = b.addValue("a", o.dtype, {s.m, s.k}, program::ROLE_INPUT);
  uint32_t w = b.addValue("b", o.dtype, {s.k, s.n}, program::ROLE_INPUT);
  uint32_t y = b.addValue("y", o.dtype, {s.m, s.n}, program::ROLE_OUTPUT);
  b.addKernel("MatMul", {a, w}, {y});
  b.addRunStep();
  program::Program p = b.get();
  p.set_device("cuda:0");
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::create(p, reg));
  uint32_t seed = 3;
  for (uint32_t id : {a, w}) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValue(id));
    std::vector<float> x = pseudoRandom(t.numel(), seed++);
    for (int64_t i = 0; i < t.numel(); ++i)
      if (o.dtype == program::DTYPE_BF16)
        t.as<uint16_t>()[i] = bf16Bits(x[i]);
      else
        t.as<float>()[i] = x[i];
  }
  for (int i = 0; i < o.warmup; ++i)
    STRAIT_RETURN_IF_ERROR(exec->run());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i)
    STRAIT_RETURN_IF_ERROR(exec->run());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count() / o.iters;
  STRAIT_ASSIGN_OR_RETURN(Tensor ta, exec->getValue(a));
  STRAIT_ASSIGN_OR_RETURN(Tensor tb, exec->getValue(w));
  STRAIT_ASSIGN_OR_RETURN(Tensor ty, exec->getValue(y));
  double worst = 0;
  for (int e = 0; e < 64; ++e) {
    int64_t i = (e * 7919) % s.m, j = (e * 104729 + s.n / 3) % s.n;
    double ref = 0, scale = 1e-30;
    for (int64_t q = 0; q < s.k; ++q) {
      double pr = double(valueAt(ta, i * s.k + q)) * valueAt(tb, q * s.n + j);
      ref += pr;
      scale += std::abs(pr);
    }
    worst = std::max(worst, std::abs(valueAt(ty, i * s.n + j) - ref) / scale);
  }
  return std::make_pair(ms, worst);
}

bool parse(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (i + 1 >= argc)
      return false;
    std::string v = argv[++i];
    if (arg == "--iters") {
      o.iters = std::max(1, std::stoi(v));
    } else if (arg == "--dtype") {
      if (v != "bf16" && v != "f32")
        return false;
      o.dtype = v == "bf16" ? program::DTYPE_BF16 : program::DTYPE_F32;
    } else if (arg == "--shapes") {
      o.shapes.clear();
      std::stringstream list(v);
      std::string item;
      while (std::getline(list, item, ',')) {
        Shape3 s{};
        if (std::sscanf(item.c_str(), "%ldx%ldx%ld", &s.m, &s.k, &s.n) != 3 || s.m <= 0 ||
            s.k <= 0 || s.n <= 0)
          return false;
        o.shapes.push_back(s);
      }
    } else {
      return false;
    }
  }
  return !o.shapes.empty();
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::cerr << "usage: strait-cuda-gemm-bench [--shapes MxKxN,...] [--iters N] "
                 "[--dtype bf16|f32]\n";
    return 2;
  }
  if (cudaDeviceCount() == 0) {
    std::cout << "skipped: " << cudaUnavailableReason() << "\n";
    return 77;
  }
  CudaOptions co;
  co.matmul = MatmulPrecision::BF16;
  BackendRegistry reg;
  registerCpuBackend(reg);
  Status st = registerCudaBackend(reg, co);
  if (!st.isOk()) {
    std::cerr << st.toString() << "\n";
    return 1;
  }
  int rc = 0;
  for (const Shape3 &s : o.shapes) {
    StatusOr<std::pair<double, double>> r = timeShape(s, o, reg);
    if (!r.isOk()) {
      std::cerr << s.m << "x" << s.k << "x" << s.n << ": " << r.getStatus().toString() << "\n";
      return 1;
    }
    double tflops = 2.0 * s.m * s.n * s.k / (r->first / 1e3) / 1e12;
    std::cout << "gemm " << s.m << "x" << s.k << "x" << s.n << " "
              << (o.dtype == program::DTYPE_BF16 ? "bf16" : "f32") << ": " << r->first
              << " ms, " << tflops << " TFLOP/s, sampled error " << r->second
              << " of the products' scale\n";
    if (!(r->second <= 2e-2))
      rc = 1;
  }
  return rc;
}
