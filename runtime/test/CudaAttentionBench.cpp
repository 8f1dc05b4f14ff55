//===- CudaAttentionBench.cpp - FusedAttention vs the composed ops on a GPU ===//
//
//   strait-cuda-attention-bench [--b 8] [--h 12] [--t 1024] [--d 64] [--iters 20]
//                               [--precision f32|tf32|bf16] [--graphs on|off]
//
// Times one causal self-attention forward + backward of Q, Kt, V [b, h, t, d]
// (f32 tensors; --precision sets CudaOptions::matmul, default bf16 tensor
// cores) on cuda:0 in two programs:
//   fused:    FusedAttention(Q, Kt, V) {causal} + FusedAttentionGrad
//   composed: MatMul, Mul (scale), Add ([t, t] finfo.min mask), Softmax,
//             MatMul; Transposes, MatMuls, SoftmaxGrad, Mul for the gradient
// (what graph-fuse-attention replaces), with the same inputs, and prints the
// mean ms per iteration of each, the speedup, and the largest difference of
// Y, dQ, dKt, dV between the two (relative to the largest |composed| value).
// With --precision bf16 it also times the fused program on bf16 tensors
// twice: on the flash kernels (FlashAttention.cu) and with them switched off
// (the cuBLAS path; what STRAIT_CUDA_FLASH_ATTENTION=0 does for a whole
// run), and checks both against the composed f32 outputs; and the flash
// kernels on GPT-2's layout: Q, V, dY, Y, dQ, dV as [b, t, h, d] tensors and
// K untransposed [b, t, h, d] (q/v/y_perm [0,2,1,3], kt_perm [0,2,3,1]: no
// Transpose kernels), checked against the dense bf16 flash outputs.
// Exit 77 without a GPU, 1 when the outputs differ by more than --tolerance
// (default 2e-2, for bf16 tensor cores).
//
//===----------------------------------------------------------------------===//
#include "../lib/cuda/FlashAttention.h"
#include "TestUtil.h"
#include "strait/runtime/Cuda.h"

#include <algorithm>
#include <cfloat>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>

using namespace strait;
using namespace strait::rt;
using namespace strait::rt::test;

namespace {

struct Options {
  int64_t b = 8, h = 12, t = 1024, d = 64;
  int iters = 20, warmup = 3;
  std::string precision = "bf16";
  bool graphs = true;
  double tolerance = 2e-2;
};

const char *kOutputs[] = {"y", "dq", "dkt", "dv"};

/// The inputs and outputs every variant shares (names as in kOutputs).
struct Values {
  uint32_t q, kt, v, dy, y, dq, dkt, dv;
};

/// `bthd`: every tensor [b, t, h, d] (GPT-2's heads, fusedProgram's perms).
Values addCommon(ProgramBuilder &b, const Options &o, DType dtype = program::DTYPE_F32,
                 bool bthd = false) {
  auto val = [&](const char *n, Shape s, program::ValueRole role) {
    return b.addValue(n, dtype, s, role);
  };
  Shape qs = {o.b, o.h, o.t, o.d}, kts = {o.b, o.h, o.d, o.t};
  if (bthd)
    qs = kts = {o.b, o.t, o.h, o.d};
  return {val("q", qs, program::ROLE_INPUT),    val("kt", kts, program::ROLE_INPUT),
          val("v", qs, program::ROLE_INPUT),    val("dy", qs, program::ROLE_INPUT),
          val("y", qs, program::ROLE_OUTPUT),   val("dq", qs, program::ROLE_OUTPUT),
          val("dkt", kts, program::ROLE_OUTPUT), val("dv", qs, program::ROLE_OUTPUT)};
}

/// The fused program; `bthd`: on GPT-2's [b, t, h, d] tensors through the
/// permutation attributes.
program::Program fusedProgram(const Options &o, DType dtype = program::DTYPE_F32,
                              bool withGrad = true, bool bthd = false) {
  ProgramBuilder b;
  b.get().set_device("cuda:0");
  Values x = addCommon(b, o, dtype, bthd);
  uint32_t lse = b.addValue("lse", program::DTYPE_F32, {o.b, o.h, o.t}, program::ROLE_ACTIVATION);
  float scale = 1.0f / std::sqrt(float(o.d));
  auto attrs = [&](program::Kernel &k) {
    setFloat(k, "scale", scale);
    setInt(k, "causal", 1);
    if (bthd) {
      for (const char *name : {"q_perm", "v_perm", "y_perm"})
        setInts(k, name, {0, 2, 1, 3});
      setInts(k, "kt_perm", {0, 2, 3, 1});
    }
  };
  attrs(b.addKernel("FusedAttention", {x.q, x.kt, x.v}, {x.y, lse}));
  if (!withGrad) {
    b.addRunStep();
    return b.get();
  }
  attrs(b.addKernel("FusedAttentionGrad", {x.dy, x.q, x.kt, x.v, x.y, lse},
                    {x.dq, x.dkt, x.dv}));
  b.addRunStep();
  return b.get();
}

program::Program composedProgram(const Options &o) {
  ProgramBuilder b;
  b.get().set_device("cuda:0");
  Values x = addCommon(b, o);
  Shape ss = {o.b, o.h, o.t, o.t}, qs = {o.b, o.h, o.t, o.d}, kts = {o.b, o.h, o.d, o.t};
  auto act = [&](const char *n, Shape s) {
    return b.addValue(n, program::DTYPE_F32, s, program::ROLE_ACTIVATION);
  };
  std::vector<float> mask(o.t * o.t, 0.0f);
  for (int64_t i = 0; i < o.t; ++i)
    for (int64_t j = i + 1; j < o.t; ++j)
      mask[i * o.t + j] = -FLT_MAX;
  uint32_t scale = b.addConstant("scale", {1.0f / std::sqrt(float(o.d))}, {});
  uint32_t bias = b.addConstant("mask", mask, {o.t, o.t});
  uint32_t s0 = act("s0", ss), s1 = act("s1", ss), s2 = act("s2", ss), p = act("p", ss);
  b.addKernel("MatMul", {x.q, x.kt}, {s0});
  b.addKernel("Mul", {s0, scale}, {s1});
  b.addKernel("Add", {s1, bias}, {s2});
  setInt(b.addKernel("Softmax", {s2}, {p}), "axis", -1);
  b.addKernel("MatMul", {p, x.v}, {x.y});
  // Gradient: dV = P^T dY, dP = dY V^T, dS = softmax'(dP) * scale,
  // dQ = dS Kt^T, dKt = Q^T dS.
  uint32_t pt = act("pt", ss), vt = act("vt", kts), dp = act("dp", ss), ds0 = act("ds0", ss),
           ds = act("ds", ss), ktt = act("ktt", qs), qt = act("qt", kts);
  auto transpose = [&](uint32_t in, uint32_t out) {
    setInts(b.addKernel("Transpose", {in}, {out}), "perm", {0, 1, 3, 2});
  };
  transpose(p, pt);
  b.addKernel("MatMul", {pt, x.dy}, {x.dv});
  transpose(x.v, vt);
  b.addKernel("MatMul", {x.dy, vt}, {dp});
  setInt(b.addKernel("SoftmaxGrad", {dp, p}, {ds0}), "axis", -1);
  b.addKernel("Mul", {ds0, scale}, {ds});
  transpose(x.kt, ktt);
  b.addKernel("MatMul", {ds, ktt}, {x.dq});
  transpose(x.q, qt);
  b.addKernel("MatMul", {qt, ds}, {x.dkt});
  b.addRunStep();
  return b.get();
}

/// Where element k of value `name` in its logical layout ([b, h, t, d], Kt
/// and dKt [b, h, d, t]) sits in its tensor: k itself, or with `bthd` in the
/// [b, t, h, d] tensor.
int64_t offsetOf(const Options &o, const std::string &name, bool bthd, int64_t k) {
  if (!bthd)
    return k;
  bool kt = name == "kt" || name == "dkt";
  int64_t c = kt ? k / o.t % o.d : k % o.d, i = kt ? k % o.t : k / o.d % o.t;
  int64_t bh = k / (o.t * o.d); // b * h + head
  return ((bh / o.h * o.t + i) * o.h + bh % o.h) * o.d + c;
}

/// Mean ms per run() of `p` over o.iters runs after o.warmup; fills the
/// outputs of the last run (logical order; `bthd`: p's tensors are
/// [b, t, h, d], filled and read through offsetOf).
StatusOr<double> timeProgram(const program::Program &p, const BackendRegistry &reg,
                             const Options &o, std::vector<std::vector<float>> &outputs,
                             bool bthd = false) {
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::create(p, reg));
  uint32_t seed = 1;
  for (const char *name : {"q", "kt", "v", "dy"}) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValueByName(name));
    std::vector<float> x = pseudoRandom(t.numel(), seed++);
    for (int64_t k = 0; k < t.numel(); ++k) {
      int64_t at = offsetOf(o, name, bthd, k);
      if (t.dtype == program::DTYPE_BF16)
        t.as<uint16_t>()[at] = bf16Bits(x[k]);
      else
        t.as<float>()[at] = x[k];
    }
  }
  for (int i = 0; i < o.warmup; ++i)
    STRAIT_RETURN_IF_ERROR(exec->run());
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < o.iters; ++i)
    STRAIT_RETURN_IF_ERROR(exec->run());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count() / std::max(1, o.iters);
  outputs.clear();
  for (const char *name : kOutputs) {
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec->getValueByName(name));
    std::vector<float> f(t.numel());
    for (int64_t k = 0; k < t.numel(); ++k) {
      int64_t at = offsetOf(o, name, bthd, k);
      f[k] = t.dtype == program::DTYPE_BF16 ? bf16Value(t.as<uint16_t>()[at]) : t.as<float>()[at];
    }
    outputs.push_back(std::move(f));
  }
  return ms;
}

bool parse(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (i + 1 >= argc)
      return false;
    std::string v = argv[++i];
    if (a == "--b") o.b = std::stoll(v);
    else if (a == "--h") o.h = std::stoll(v);
    else if (a == "--t") o.t = std::stoll(v);
    else if (a == "--d") o.d = std::stoll(v);
    else if (a == "--iters") o.iters = std::stoi(v);
    else if (a == "--precision") o.precision = v;
    else if (a == "--graphs") o.graphs = v == "on";
    else if (a == "--tolerance") o.tolerance = std::stod(v);
    else return false;
  }
  return o.precision == "f32" || o.precision == "tf32" || o.precision == "bf16";
}

/// Prints the largest difference of each output of `got` from `want`
/// (relative to the largest |want|); false when one exceeds `tolerance`.
bool compare(const char *what, const std::vector<std::vector<float>> &got,
             const std::vector<std::vector<float>> &want, double tolerance) {
  bool ok = true;
  for (size_t k = 0; k < got.size(); ++k) {
    double maxRef = 0, maxDiff = 0;
    for (size_t e = 0; e < got[k].size(); ++e) {
      maxRef = std::max(maxRef, double(std::abs(want[k][e])));
      double diff = std::abs(double(got[k][e]) - want[k][e]);
      maxDiff = std::isnan(diff) ? INFINITY : std::max(maxDiff, diff);
    }
    double rel = maxDiff / std::max(maxRef, 1e-30);
    std::cout << "  " << kOutputs[k] << ": max |" << what << "| = " << maxDiff
              << " (relative to max " << maxRef << ": " << rel << ")\n";
    ok &= rel <= tolerance;
  }
  return ok;
}

/// The flash kernels on GPT-2's [b, t, h, d] tensors (perm attributes)
/// next to the dense [b, h, t, d] ones (`dense`, its times); the outputs
/// must agree with the dense flash outputs.
bool benchGpt2Layout(const Options &o, const BackendRegistry &reg,
                     const std::vector<std::vector<float>> &dense, double denseMs,
                     double denseFwdMs) {
  std::vector<std::vector<float>> perm, unused;
  cuda::setFlashAttentionEnabled(1);
  StatusOr<double> t =
      timeProgram(fusedProgram(o, program::DTYPE_BF16, true, true), reg, o, perm, true);
  StatusOr<double> f =
      timeProgram(fusedProgram(o, program::DTYPE_BF16, false, true), reg, o, unused, true);
  cuda::setFlashAttentionEnabled(-1);
  for (const StatusOr<double> *r : {&t, &f})
    if (!r->isOk()) {
      std::cerr << "bf16 [b, t, h, d] tensors: " << r->getStatus().toString() << "\n";
      return false;
    }
  std::cout << "bf16 flash on [b, t, h, d] tensors (GPT-2's perms): fwd+bwd " << *t
            << " ms (dense " << denseMs << " ms), forward only " << *f << " ms (dense "
            << denseFwdMs << " ms)\n";
  return compare("[b, t, h, d] - dense flash", perm, dense, o.tolerance);
}

/// The fused program on bf16 tensors, flash kernels on and off; compared
/// with the composed f32 outputs. False on an error or a mismatch.
bool benchBf16Tensors(const Options &o, const BackendRegistry &reg,
                      const std::vector<std::vector<float>> &composed, double composedMs) {
  std::vector<std::vector<float>> flash, cublas, unused;
  cuda::setFlashAttentionEnabled(1);
  StatusOr<double> tFlash = timeProgram(fusedProgram(o, program::DTYPE_BF16), reg, o, flash);
  StatusOr<double> fFlash =
      timeProgram(fusedProgram(o, program::DTYPE_BF16, false), reg, o, unused);
  cuda::setFlashAttentionEnabled(0);
  StatusOr<double> tCublas = timeProgram(fusedProgram(o, program::DTYPE_BF16), reg, o, cublas);
  StatusOr<double> fCublas =
      timeProgram(fusedProgram(o, program::DTYPE_BF16, false), reg, o, unused);
  cuda::setFlashAttentionEnabled(-1);
  for (const StatusOr<double> *t : {&tFlash, &fFlash, &tCublas, &fCublas})
    if (!t->isOk()) {
      std::cerr << "bf16 tensors: " << t->getStatus().toString() << "\n";
      return false;
    }
  std::cout << "bf16 tensors, fused fwd+bwd: flash " << *tFlash << " ms, cuBLAS path "
            << *tCublas << " ms (flash speedup " << *tCublas / *tFlash << "), composed f32 "
            << composedMs << " ms\n";
  std::cout << "bf16 tensors, forward only: flash " << *fFlash << " ms, cuBLAS path "
            << *fCublas << " ms\n";
  bool ok = compare("flash - composed", flash, composed, o.tolerance);
  ok &= compare("cuBLAS path - composed", cublas, composed, o.tolerance);
  ok &= compare("flash - cuBLAS path", flash, cublas, o.tolerance);
  return ok && benchGpt2Layout(o, reg, flash, *tFlash, *fFlash);
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  if (!parse(argc, argv, o)) {
    std::cerr << "usage: strait-cuda-attention-bench [--b N] [--h N] [--t N] [--d N] "
                 "[--iters N] [--precision f32|tf32|bf16] [--graphs on|off] [--tolerance X]\n";
    return 2;
  }
  if (cudaDeviceCount() == 0) {
    std::cout << "skipped: " << cudaUnavailableReason() << "\n";
    return 77;
  }
  CudaOptions co;
  co.graphs = o.graphs;
  co.matmul = o.precision == "bf16"   ? MatmulPrecision::BF16
              : o.precision == "tf32" ? MatmulPrecision::TF32
                                      : MatmulPrecision::F32;
  BackendRegistry reg;
  Status s = registerCudaBackend(reg, co);
  if (!s.isOk()) {
    std::cerr << s.toString() << "\n";
    return 1;
  }
  std::vector<std::vector<float>> fused, composed;
  StatusOr<double> tf = timeProgram(fusedProgram(o), reg, o, fused);
  if (!tf.isOk()) {
    std::cerr << "fused: " << tf.getStatus().toString() << "\n";
    return 1;
  }
  StatusOr<double> tc = timeProgram(composedProgram(o), reg, o, composed);
  if (!tc.isOk()) {
    std::cerr << "composed: " << tc.getStatus().toString() << "\n";
    return 1;
  }
  std::cout << "attention fwd+bwd b=" << o.b << " h=" << o.h << " t=" << o.t << " d=" << o.d
            << " causal, matmul " << o.precision << ", graphs " << (o.graphs ? "on" : "off")
            << ": fused " << *tf << " ms, composed " << *tc << " ms, speedup " << *tc / *tf
            << "\n";
  bool ok = compare("fused - composed", fused, composed, o.tolerance);
  if (o.precision == "bf16")
    ok &= benchBf16Tensors(o, reg, composed, *tc);
  if (!ok)
    std::cout << "FAIL: outputs differ by more than " << o.tolerance << "\n";
  return ok ? 0 : 1;
}
