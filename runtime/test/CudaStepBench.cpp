//===- CudaStepBench.cpp - Training steps of a compiled program on a GPU --===//
//
//   strait-cuda-step-bench JOB_DIR [--steps N] [--warmup W] [--precision f32|tf32|bf16]
//                          [--compare-cpu K] [--flops-per-step F] [--peak-tflops P]
//                          [--graphs on|off] [--profile N]
//
// Loads rank 0 of a job written by straitc (a one-rank training step), runs it
// on cuda:0 with random tokens in [0, vocab) for the i64 inputs (input_ids,
// labels), uniform values in [-1, 1) for f32 inputs (images), `step` = iteration and `lr` = 1e-4, and prints the mean step time,
// tokens/s (elements of input_ids per step) and, given the FLOPs of a step and
// the peak, the MFU. --compare-cpu K first runs K steps on the CPU and on the
// GPU from the same parameters and batches and prints both loss sequences and
// their largest relative difference (exit 1 above --tolerance, default 2e-2).
// --graphs (default on) sets CudaOptions::graphs: the kernels between host
// synchronization points are captured into CUDA graphs on the second step and
// replayed afterwards; the counters of captured / replayed / direct segments
// are printed after the timed steps. --profile N (graphs off) then runs N
// more steps with CUDA events around every kernel and prints the device time
// per op, longest first, the share of the step's wall time it covers, and
// the bytes its kernels read and wrote per step with the bandwidth that
// reached (distinct inputs + outputs, as bench/runtime/program_bytes.py
// counts them: the memory-bound ops' distance from the probe's Add rate).
// Exit 77 without a GPU.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Cuda.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <cmath>
#include <cstring>
#include <iostream>
#include <random>

using namespace strait;
using namespace strait::rt;

namespace {

struct Options {
  std::string dir;
  int steps = 20, warmup = 3, compareCpu = 0;
  std::string precision = "bf16";
  double flopsPerStep = 0, peakTflops = 989, tolerance = 2e-2;
  int64_t vocab = 50257;
  bool graphs = true;
  int profile = 0;
};

/// Fills the i64 data inputs with tokens in [0, vocab) (labels too), f32 data
/// inputs with uniform values, `step` and `lr`.
Status feed(Executor &exec, const program::Program &p, int iteration, std::mt19937_64 &rng,
            int64_t vocab) {
  for (const auto &v : p.values()) {
    if (v.role() != program::ROLE_INPUT)
      continue;
    STRAIT_ASSIGN_OR_RETURN(Tensor t, exec.getValue(v.id()));
    if (v.name() == "step" && t.numel() == 1)
      t.dtype == program::DTYPE_I64 ? void(t.as<int64_t>()[0] = iteration)
                                    : void(t.as<int32_t>()[0] = iteration);
    else if (v.name() == "lr" && t.numel() == 1)
      t.as<float>()[0] = 1e-4f;
    else if (t.dtype == program::DTYPE_I64)
      for (int64_t i = 0; i < t.numel(); ++i)
        t.as<int64_t>()[i] = static_cast<int64_t>(rng() % vocab);
    else if (t.dtype == program::DTYPE_F32) // images, features: uniform in [-1, 1)
      for (int64_t i = 0; i < t.numel(); ++i)
        t.as<float>()[i] = static_cast<float>(rng() >> 40) / float(1 << 23) - 1.0f;
  }
  return Status::ok();
}

StatusOr<std::unique_ptr<Executor>> load(const Options &o, const std::string &device,
                                         const BackendRegistry &reg) {
  STRAIT_ASSIGN_OR_RETURN(program::Program p, loadProgram(o.dir + "/rank0.program.pb"));
  STRAIT_ASSIGN_OR_RETURN(program::ParameterShardFile shards,
                          loadShardFile(o.dir + "/rank0.params.pb"));
  p.set_device(device);
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, Executor::create(p, reg));
  STRAIT_RETURN_IF_ERROR(exec->loadParameters(shards));
  return exec;
}

StatusOr<std::vector<float>> losses(const Options &o, const std::string &device,
                                    const BackendRegistry &reg, int steps) {
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Executor> exec, load(o, device, reg));
  STRAIT_ASSIGN_OR_RETURN(Tensor loss, exec->getValueByName("loss"));
  std::mt19937_64 rng(7);
  std::vector<float> out;
  for (int i = 1; i <= steps; ++i) {
    STRAIT_RETURN_IF_ERROR(feed(*exec, exec->getProgram(), i, rng, o.vocab));
    STRAIT_RETURN_IF_ERROR(exec->run());
    out.push_back(loss.as<float>()[0]);
  }
  return out;
}

int run(const Options &o) {
  if (cudaDeviceCount() == 0) {
    std::cout << "skipped: " << cudaUnavailableReason() << "\n";
    return 77;
  }
  CudaOptions co;
  co.graphs = o.graphs && o.profile == 0;
  co.profile = o.profile > 0;
  co.matmul = o.precision == "f32" ? MatmulPrecision::F32
              : o.precision == "tf32" ? MatmulPrecision::TF32 : MatmulPrecision::BF16;
  BackendRegistry reg;
  registerCpuBackend(reg);
  Status s = registerCudaBackend(reg, co);
  if (!s.isOk()) {
    std::cerr << s.toString() << "\n";
    return 1;
  }
  if (o.compareCpu > 0) {
    StatusOr<std::vector<float>> cpu = losses(o, "cpu", reg, o.compareCpu);
    StatusOr<std::vector<float>> gpu = losses(o, "cuda:0", reg, o.compareCpu);
    if (!cpu.isOk() || !gpu.isOk()) {
      std::cerr << (cpu.isOk() ? gpu.getStatus() : cpu.getStatus()).toString() << "\n";
      return 1;
    }
    double worst = 0;
    for (size_t i = 0; i < cpu->size(); ++i) {
      double rel = std::abs((*cpu)[i] - (*gpu)[i]) / std::max(1e-6f, std::abs((*cpu)[i]));
      worst = std::max(worst, rel);
      std::cout << "step " << i + 1 << " loss cpu " << (*cpu)[i] << " cuda " << (*gpu)[i] << "\n";
    }
    std::cout << "compare-cpu: max relative loss difference " << worst << " (tolerance "
              << o.tolerance << ", matmul " << o.precision << ")\n";
    if (!(worst <= o.tolerance))
      return 1;
  }
  StatusOr<std::unique_ptr<Executor>> exec = load(o, "cuda:0", reg);
  if (!exec.isOk()) {
    std::cerr << exec.getStatus().toString() << "\n";
    return 1;
  }
  const program::Program &p = (*exec)->getProgram();
  int64_t tokens = 0;
  for (const auto &v : p.values())
    if (v.name() == "input_ids")
      tokens = numElements(Shape(v.shape().begin(), v.shape().end()));
  StatusOr<Tensor> loss = (*exec)->getValueByName("loss");
  std::mt19937_64 rng(11);
  double total = 0;
  for (int i = 1; i <= o.warmup + o.steps; ++i) {
    s = feed(**exec, p, i, rng, o.vocab);
    auto t0 = std::chrono::steady_clock::now();
    if (s.isOk())
      s = (*exec)->run();
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (!s.isOk()) {
      std::cerr << "step " << i << ": " << s.toString() << "\n";
      return 1;
    }
    if (i > o.warmup)
      total += ms;
    if (i == 1 || i == o.warmup + o.steps)
      std::cout << "step " << i << " " << ms << " ms loss "
                << (loss.isOk() ? loss->as<float>()[0] : NAN) << "\n";
  }
  double ms = total / o.steps;
  std::cout << "strait-cuda: " << ms << " ms/step, " << tokens / (ms / 1e3) << " tokens/s"
            << " (matmul " << o.precision << ", arena " << (*exec)->getArenaBytes() / 1048576
            << " MiB, graphs " << (o.graphs ? "on" : "off") << ")\n";
  CudaGraphStats g = cudaGraphStats(*reg.forDevice("cuda:0").takeValue());
  std::cout << "strait-cuda: graphs: " << g.captured << " segments captured, " << g.replays
            << " graph launches, " << g.direct << " direct segment runs, " << g.disabled
            << " segments not capturable\n";
  if (o.profile > 0) {
    cudaKernelProfile(*reg.forDevice("cuda:0").takeValue()); // drop the timed steps'
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < o.profile && s.isOk(); ++i) {
      s = feed(**exec, p, 1000 + i, rng, o.vocab);
      if (s.isOk())
        s = (*exec)->run();
    }
    double wall = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                      .count() / o.profile;
    if (!s.isOk()) {
      std::cerr << "profile: " << s.toString() << "\n";
      return 1;
    }
    std::vector<CudaOpTime> kernels = cudaKernelProfile(*reg.forDevice("cuda:0").takeValue());
    std::map<std::string, CudaOpTime> byOp;
    double device = 0;
    for (const CudaOpTime &t : kernels) {
      device += t.ms / o.profile;
      CudaOpTime &sum = byOp[t.op];
      sum.op = t.op;
      sum.launches += t.launches;
      sum.ms += t.ms;
      sum.bytes += t.bytes;
    }
    std::vector<CudaOpTime> ops;
    for (auto &e : byOp)
      ops.push_back(e.second);
    std::sort(ops.begin(), ops.end(),
              [](const CudaOpTime &a, const CudaOpTime &b) { return a.ms > b.ms; });
    std::cout << "profile: " << wall << " ms/step wall, " << device
              << " ms/step in kernels (" << 100 * device / wall << " %), per op:\n";
    // GB/s: the bytes the op's kernels read and wrote over their device
    // time (memory-bound kernels should approach the probe's Add rate).
    auto gbps = [](const CudaOpTime &t) { return t.ms > 0 ? t.bytes / (t.ms * 1e6) : 0.0; };
    for (const CudaOpTime &t : ops)
      std::cout << "profile: " << t.op << " " << t.launches / o.profile << " launches "
                << t.ms / o.profile << " ms/step (" << 100 * t.ms / o.profile / wall << " %), "
                << t.bytes / o.profile / 1073741824.0 << " GiB/step, " << gbps(t) << " GB/s\n";
    std::cout << "profile: the 25 longest kernels by operand types:\n";
    for (size_t i = 0; i < kernels.size() && i < 25; ++i)
      std::cout << "kernel: " << kernels[i].op << "(" << kernels[i].operands << ") "
                << kernels[i].launches / o.profile << "x "
                << kernels[i].ms / kernels[i].launches << " ms = "
                << kernels[i].ms / o.profile << " ms/step, " << gbps(kernels[i]) << " GB/s\n";
  }
  if (o.flopsPerStep > 0)
    std::cout << "strait-cuda: MFU " << 100.0 * o.flopsPerStep / (ms / 1e3) / (o.peakTflops * 1e12)
              << " % of " << o.peakTflops << " TFLOP/s\n";
  return 0;
}

} // namespace

int main(int argc, char **argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--steps") o.steps = std::stoi(next());
    else if (a == "--warmup") o.warmup = std::stoi(next());
    else if (a == "--precision") o.precision = next();
    else if (a == "--compare-cpu") o.compareCpu = std::stoi(next());
    else if (a == "--flops-per-step") o.flopsPerStep = std::stod(next());
    else if (a == "--peak-tflops") o.peakTflops = std::stod(next());
    else if (a == "--tolerance") o.tolerance = std::stod(next());
    else if (a == "--vocab") o.vocab = std::stoll(next());
    else if (a == "--profile") o.profile = std::stoi(next());
    else if (a == "--graphs" && (i + 1 < argc) &&
             (std::string(argv[i + 1]) == "on" || std::string(argv[i + 1]) == "off"))
      o.graphs = next() == "on";
    else if (a.rfind("--", 0) == 0 || !o.dir.empty()) {
      std::cerr << "usage: strait-cuda-step-bench JOB_DIR [--steps N] [--warmup W] "
                   "[--precision f32|tf32|bf16] [--compare-cpu K] [--tolerance T] "
                   "[--flops-per-step F] [--peak-tflops P] [--vocab V] [--graphs on|off] [--profile N]\n";
      return 2;
    } else o.dir = a;
  }
  if (o.dir.empty() || o.steps < 1) {
    std::cerr << "strait-cuda-step-bench: need JOB_DIR and --steps >= 1\n";
    return 2;
  }
  return run(o);
}
