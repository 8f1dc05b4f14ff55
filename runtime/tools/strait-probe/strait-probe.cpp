//===- strait-probe.cpp - Measure this machine for the planner ------------===//
//
// Runs a backend's own kernels (the ones strait-run executes: the CPU
// backend's, or with --backend cuda[:N] the CUDA backend's on that GPU) on
// representative shapes and writes the `profiles:` section of a cluster file
// (docs/planner.md) that ClusterParser reads:
//   - GEMM FLOP/s: MatMul f32 [n,n]x[n,n] (CPU: OpenBLAS sgemm; CUDA: cuBLAS
//     with bf16 tensor cores and f32 storage, the mode strait-run uses by
//     default; the f32 and tf32 rates are printed as comments) -> gemm_tflops,
//   - the GEMM rate by arithmetic intensity: MatMuls with one small
//     dimension (16 .. n/4 on the CPU, 64 .. n/4 on a GPU; as the inner
//     dimension, like a 64-wide attention head, and as the output rows,
//     like a weight gradient) -> gemm_curve {FLOPs per byte: TFLOP/s},
//   - memory bandwidth: Add f32 over arrays far larger than the caches
//     (3 x 4 bytes per element) -> a comment with mem_bandwidth_gbs,
//   - efficiency per op kind the planner knows (matmul conv elementwise
//     norm softmax embedding other): achieved FLOP/s of a representative
//     kernel over the peak (--peak-tflops, default the measured GEMM rate),
//     counting FLOPs as the planner's cost model does (elementwise 1,
//     norm and softmax 5 per element, embedding and other 1 per output).
//   On CUDA, op kinds without a native kernel are left out (no host
//   fallback: it would measure the CPU), and the timings wait for the GPU.
//   - optionally, with a peer (`--link-rank 0|1 --link-store DIR`), the link
//     bandwidth and latency to it over Gloo, as a links.hosts hint.
// `--cluster FILE` writes FILE's text followed by the profiles, so
// `straitc --cluster OUT` plans with the measured numbers.
//
//===----------------------------------------------------------------------===//
#include "KernelTimes.h"
#include "strait/runtime/Backend.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/ThreadPool.h"
#ifdef STRAIT_HAVE_CUDA
#include "strait/runtime/Cuda.h"
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

using namespace strait;
using namespace strait::rt;

namespace {

const char *kUsage =
    "usage: strait-probe [--quick] [-o FILE] [--type NAME | --device NAME]\n"
    "                    [--peak-tflops X] [--threads N] [--cluster FILE]\n"
    "                    [--backend cpu|cuda|cuda:N] [--kernels FILE]\n"
    "                    [--link-rank 0|1 --link-store DIR [--link-address IP]\n"
    "                     [--link-mib N] [--timeout-ms MS]]\n"
    "  Measures the CPU backend's kernels (GEMM FLOP/s, memory bandwidth,\n"
    "  efficiency per op kind) and writes a cluster file `profiles:` section\n"
    "  for device type NAME (default cpu) or one device. --cluster FILE\n"
    "  writes FILE followed by the profiles (a complete cluster file for\n"
    "  straitc --cluster). --peak-tflops: the device type's fp32 peak the\n"
    "  efficiencies refer to (default: the measured GEMM rate). With\n"
    "  --link-rank/--link-store two probes (ranks 0 and 1, a shared folder)\n"
    "  measure the link between them over Gloo. --quick: small shapes (~1 s).\n"
    "  --backend cuda[:N]: the CUDA backend's kernels on GPU N (exit 77\n"
    "  without a GPU or a CUDA build); --peak-tflops is then the bf16 peak.\n"
    "  --kernels FILE: also time every kernel of a job's kernel list (straitc\n"
    "  --emit=kernels) into the profile's kernel_times (seconds by signature),\n"
    "  in rounds over groups of --kernel-group-mib N MiB of buffers (default\n"
    "  1024; 0: each kernel alone in a loop of its own calls).\n";

struct Options {
  bool quick = false;
  std::string out, type = "cpu", device, cluster, linkStore, linkAddress = "127.0.0.1";
  std::string kernels; ///< a kernel list (straitc --emit=kernels) to time
  int kernelGroupMib = 1024; ///< rounds over groups of this many MiB; 0: each alone
  std::string backend = "cpu"; // cpu | cuda | cuda:N
  double peakTflops = 0;
  int threads = 0, linkRank = -1, linkMib = 0, timeoutMs = 60000;
};

/// One kernel with owned buffers, timed by repetition.
class KernelBench {
public:
  KernelBench(const Backend &backend, const std::string &op) : backend(backend) {
    kernel.set_op(op);
  }
  void attrInts(const std::string &k, std::vector<int64_t> v) {
    for (int64_t x : v)
      (*kernel.mutable_attrs())[k].mutable_ints()->add_v(x);
  }
  void attrInt(const std::string &k, int64_t v) { (*kernel.mutable_attrs())[k].set_i(v); }
  void attrFloat(const std::string &k, float v) { (*kernel.mutable_attrs())[k].set_f(v); }
  Tensor &input(DType d, Shape s, bool random = true) { return add(ins, d, std::move(s), random); }
  Tensor &output(DType d, Shape s) { return add(outs, d, std::move(s), false); }

  /// Best seconds per call over repetitions within `budget` seconds.
  StatusOr<double> time(double budget) {
    STRAIT_RETURN_IF_ERROR(failed);
    STRAIT_ASSIGN_OR_RETURN(KernelFn fn, backend.resolve(kernel));
    std::vector<const Tensor *> in;
    std::vector<Tensor *> out;
    for (auto &t : ins)
      in.push_back(&t);
    for (auto &t : outs)
      out.push_back(&t);
    KernelContext ctx(kernel, in, out);
    STRAIT_RETURN_IF_ERROR(fn(ctx)); // warm-up
    STRAIT_RETURN_IF_ERROR(backend.synchronize());
    double best = 1e30, total = 0;
    for (int rep = 0; rep < 50 && (rep < 3 || total < budget); ++rep) {
      auto t0 = std::chrono::steady_clock::now();
      STRAIT_RETURN_IF_ERROR(fn(ctx));
      STRAIT_RETURN_IF_ERROR(backend.synchronize());
      double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      best = std::min(best, s);
      total += s;
    }
    return best;
  }

private:
  Tensor &add(std::vector<Tensor> &list, DType d, Shape s, bool random) {
    Tensor t;
    t.dtype = d;
    t.shape = std::move(s);
    StatusOr<Buffer> b = backend.allocate(std::max<size_t>(t.byteSize(), 64));
    if (!b.isOk()) { // reported by time()
      failed = b.getStatus();
      b = Buffer(64);
    }
    buffers.push_back(std::move(*b));
    t.data = buffers.back().data();
    if (!failed.isOk())
      t.shape = {1};
    if (random && d == program::DTYPE_F32) {
      float *p = t.as<float>();
      uint32_t x = 12345;
      for (int64_t i = 0; i < t.numel(); ++i) {
        x = x * 1664525u + 1013904223u;
        p[i] = (static_cast<float>(x >> 8) / 16777216.0f - 0.5f);
      }
    }
    list.push_back(t);
    return list.back();
  }
  const Backend &backend;
  Status failed = Status::ok();
  program::Kernel kernel;
  std::vector<Buffer> buffers;
  std::vector<Tensor> ins, outs;
};

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.4g", v);
  return buf;
}

struct Measure {
  std::string kind, what;
  double flops = 0, seconds = 0, bytes = 0;
  double rate() const { return flops / seconds; }
};

StatusOr<Measure> measure(const std::string &kind, const std::string &what, KernelBench &k,
                          double flops, double bytes, double budget) {
  STRAIT_ASSIGN_OR_RETURN(double s, k.time(budget));
  Measure m;
  m.kind = kind;
  m.what = what;
  m.flops = flops;
  m.seconds = s;
  m.bytes = bytes;
  return m;
}

/// The backend --backend names: the CPU backend, or the CUDA backend on GPU
/// N with the given GEMM mode and without host fallback.
StatusOr<std::unique_ptr<Backend>> makeBackend(const Options &o, const std::string &matmul) {
  if (o.backend == "cpu")
    return createCpuBackend();
#ifdef STRAIT_HAVE_CUDA
  CudaOptions c;
  c.device = o.backend.size() > 5 ? std::atoi(o.backend.c_str() + 5) : 0;
  c.matmul = matmul == "f32" ? MatmulPrecision::F32
             : matmul == "tf32" ? MatmulPrecision::TF32
                                : MatmulPrecision::BF16;
  c.hostFallback = false;
  return createCudaBackend(c);
#else
  (void)matmul;
  return unimplemented("strait-probe was built without the CUDA backend");
#endif
}

/// Appends a measurement; on a GPU, a kernel the CUDA backend lacks is left
/// out with a note (no host fallback: it would measure the CPU).
Status keep(StatusOr<Measure> m, bool gpu, std::vector<Measure> &out,
            std::vector<std::string> &notes) {
  if (!m.isOk()) {
    if (gpu && m.getStatus().getCode() == StatusCode::Unimplemented) {
      notes.push_back("left out (" + m.getStatus().getMessage() + ")");
      return Status::ok();
    }
    return m.getStatus();
  }
  out.push_back(*m);
  return Status::ok();
}

/// The compiler's fused kernels, whose speed the per-kind efficiencies do
/// not predict (on one CPU core FusedAttention ran 8x, its gradient 5x and
/// LayerNormalizationGrad 7x slower than their kinds' rates said): each is
/// measured on its own, as kind "op:<type>". Attention is rated in FLOP/s,
/// counted as the compiler's cost model counts it (attentionFlops in
/// lib/Dialect/Graph/CostModel/GraphCostModels.cpp: per score, 2D + 2Dv + 5
/// forward, 6D + 4Dv + 8 backward); the others are memory-bound and rated
/// in bytes/s of their operands and results (the cost model's bytes).
Status probeOpRates(const Options &o, const Backend &b, double budget, std::vector<Measure> &out,
                    std::vector<std::string> &notes) {
  bool gpu = o.backend != "cpu";
  const DType f32 = program::DTYPE_F32, i64 = program::DTYPE_I64;
  // Not yet run on a GPU: there a failing op rate is a note, not a failed probe.
  auto push = [&](StatusOr<Measure> m) {
    if (gpu && !m.isOk()) {
      notes.push_back("op rate left out (" + m.getStatus().toString() + ")");
      return Status::ok();
    }
    return keep(std::move(m), gpu, out, notes);
  };
  auto bytesOf = [](std::initializer_list<Shape> shapes) {
    double n = 0;
    for (const Shape &s : shapes)
      n += 4.0 * double(numElements(s));
    return n;
  };
  { // attention: [B, H, T, D], causal, as a GPT-2 block has it
    int64_t B = gpu ? 8 : 4, H = gpu ? 12 : 4, T = gpu ? 1024 : (o.quick ? 64 : 128),
            D = gpu ? 64 : 32;
    Shape q = {B, H, T, D}, kt = {B, H, D, T}, lse = {B, H, T};
    double scores = double(B * H * T) * T;
    std::string shape = std::to_string(B) + "x" + std::to_string(H) + "x" + std::to_string(T) +
                        "x" + std::to_string(D);
    KernelBench f(b, "FusedAttention");
    f.attrFloat("scale", 1.0f / std::sqrt(float(D)));
    f.attrInt("causal", 1);
    f.input(f32, q);
    f.input(f32, kt);
    f.input(f32, q);
    f.output(f32, q);
    f.output(f32, lse);
    STRAIT_RETURN_IF_ERROR(push(measure("op:FusedAttention", "FusedAttention causal " + shape, f,
                                        scores * (4.0 * D + 5), bytesOf({q, kt, q, q, lse}),
                                        budget)));
    KernelBench g(b, "FusedAttentionGrad");
    g.attrFloat("scale", 1.0f / std::sqrt(float(D)));
    g.attrInt("causal", 1);
    for (const Shape &s : {q, q, kt, q, q})
      g.input(f32, s);
    g.input(f32, lse);
    g.output(f32, q);
    g.output(f32, kt);
    g.output(f32, q);
    STRAIT_RETURN_IF_ERROR(push(measure("op:FusedAttentionGrad", "FusedAttentionGrad causal " + shape,
                                        g, scores * (10.0 * D + 8),
                                        bytesOf({q, q, kt, q, q, lse, q, kt, q}), budget)));
  }
  int64_t rows = gpu ? 16384 : (o.quick ? 1024 : 4096), h = gpu ? 768 : 256;
  Shape x = {rows, h}, w = {h};
  { // the loss and its gradient over a vocabulary
    int64_t n = gpu ? 4096 : (o.quick ? 512 : 2048), c = gpu ? 50257 : 1024;
    KernelBench k(b, "SoftmaxCrossEntropyLossWithGrad");
    k.input(f32, {});
    k.input(f32, {n, c});
    Tensor &labels = k.input(i64, {n}, false);
    for (int64_t i = 0; i < n; ++i)
      labels.as<int64_t>()[i] = (i * 7919) % c;
    k.output(f32, {});
    k.output(f32, {n, c});
    double bytes = 4.0 + 8.0 * n * c + 8.0 * n + 4.0;
    STRAIT_RETURN_IF_ERROR(push(measure("op:SoftmaxCrossEntropyLossWithGrad",
                                        "SoftmaxCrossEntropyLossWithGrad " + std::to_string(n) +
                                            "x" + std::to_string(c),
                                        k, 9.0 * n * c, bytes, budget)));
  }
  for (const char *op : {"LayerNormalizationGrad", "RMSNormalizationGrad"}) {
    bool layer = std::string(op) == "LayerNormalizationGrad";
    KernelBench k(b, op);
    k.attrInt("axis", -1);
    k.attrFloat("epsilon", 1e-5f);
    k.input(f32, x);
    k.input(f32, x);
    k.input(f32, w);
    k.output(f32, x);
    k.output(f32, w);
    if (layer)
      k.output(f32, w);
    STRAIT_RETURN_IF_ERROR(push(measure("op:" + std::string(op),
                                        std::string(op) + " " + std::to_string(rows) + "x" +
                                            std::to_string(h),
                                        k, double(rows * h), bytesOf({x, x, w, x, w}) +
                                                                 (layer ? 4.0 * h : 0.0),
                                        budget)));
  }
  { // the optimizer: one AdamW over a parameter
    int64_t n = rows * h;
    KernelBench k(b, "AdamW");
    k.input(f32, {}).as<float>()[0] = 1e-3f;
    k.input(i64, {}, false).as<int64_t>()[0] = 1;
    for (int i = 0; i < 4; ++i) {
      Tensor &t = k.input(f32, {n});
      if (i == 3) // the second moment is never negative (sqrt of it)
        for (int64_t j = 0; j < n; ++j)
          t.as<float>()[j] = std::fabs(t.as<float>()[j]);
    }
    for (int i = 0; i < 3; ++i)
      k.output(f32, {n});
    STRAIT_RETURN_IF_ERROR(push(measure("op:AdamW", "AdamW " + std::to_string(n), k, 10.0 * n,
                                        4.0 + 8.0 + 28.0 * n, budget)));
  }
  return Status::ok();
}

StatusOr<std::vector<Measure>> probeKernels(const Options &o, std::vector<std::string> &notes,
                                            std::vector<std::pair<double, double>> &curve) {
  bool gpu = o.backend != "cpu";
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, makeBackend(o, "bf16"));
  const Backend &b = *backend;
  const DType f32 = program::DTYPE_F32;
  double budget = o.quick ? 0.05 : 0.5;
  std::vector<Measure> out;
  auto push = [&](StatusOr<Measure> m) { return keep(std::move(m), gpu, out, notes); };
  const int64_t n = gpu ? (o.quick ? 4096 : 8192) : (o.quick ? 384 : 1024);
  // [M,K] x [K,N]; bytes as the planner counts them (inputs and output).
  auto gemm = [&](const Backend &on, const std::string &what, int64_t M, int64_t N,
                  int64_t K) -> StatusOr<Measure> {
    KernelBench k(on, "MatMul");
    k.input(f32, {M, K});
    k.input(f32, {K, N});
    k.output(f32, {M, N});
    return measure("matmul", what, k, 2.0 * M * N * K, 4.0 * (M * K + K * N + M * N), budget);
  };
  auto matmul = [&](const Backend &on, const std::string &mode) {
    return gemm(on, "MatMul " + mode + " " + std::to_string(n) + "^3", n, n, n);
  };
  STRAIT_RETURN_IF_ERROR(push(matmul(b, gpu ? "f32 storage, bf16 tensor cores" : "f32")));
  curve.push_back({out.back().flops / out.back().bytes, out.back().rate()});
  for (int64_t d = gpu ? 64 : 16; d <= n / 4; d *= 2)
    for (bool inner : {true, false}) {
      int64_t M = inner ? n : d, K = inner ? d : n;
      STRAIT_ASSIGN_OR_RETURN(Measure m, gemm(b, "", M, n, K));
      curve.push_back({m.flops / m.bytes, m.rate()});
      notes.push_back("MatMul [" + std::to_string(M) + "," + std::to_string(K) + "]x[" +
                      std::to_string(K) + "," + std::to_string(n) + "]: " +
                      num(m.rate() / 1e12) + " TFLOP/s at " + num(m.flops / m.bytes) +
                      " FLOP/byte");
    }
  // The two shapes of one d have one intensity: one point, their rates'
  // geometric mean.
  std::sort(curve.begin(), curve.end());
  std::vector<std::pair<double, double>> merged;
  for (size_t i = 0; i < curve.size();) {
    size_t j = i;
    double logSum = 0;
    for (; j < curve.size() && curve[j].first <= curve[i].first * (1 + 1e-9); ++j)
      logSum += std::log(curve[j].second);
    merged.push_back({curve[i].first, std::exp(logSum / double(j - i))});
    i = j;
  }
  curve = std::move(merged);
  for (const char *mode : {"tf32", "f32"}) { // the other GEMM modes, as comments
    if (!gpu)
      break;
    STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Backend> other, makeBackend(o, mode));
    StatusOr<Measure> m = matmul(*other, mode);
    if (m.isOk())
      notes.push_back("MatMul " + std::string(mode) + ": " + num(m->rate() / 1e12) + " TFLOP/s");
  }
  { // conv: 3x3, pads 1
    int64_t N = gpu ? 32 : o.quick ? 2 : 8, C = gpu ? 128 : o.quick ? 32 : 64,
            H = gpu ? 56 : o.quick ? 16 : 28;
    KernelBench k(b, "Conv");
    k.attrInts("kernel_shape", {3, 3});
    k.attrInts("pads", {1, 1, 1, 1});
    k.input(f32, {N, C, H, H});
    k.input(f32, {C, C, 3, 3});
    k.output(f32, {N, C, H, H});
    STRAIT_RETURN_IF_ERROR(push(measure("conv", "Conv f32 3x3 " + std::to_string(N) + "x" +
                                                    std::to_string(C) + "x" + std::to_string(H) + "^2",
                                        k, 2.0 * N * C * H * H * C * 9, 8.0 * N * C * H * H, budget)));
  }
  // Elements far beyond the caches (a GPU's L2 is 50-60 MB).
  int64_t big = gpu ? (o.quick ? (1 << 25) : (1 << 27)) : (o.quick ? (1 << 21) : (1 << 24));
  { // elementwise: Add, also the memory bandwidth
    KernelBench k(b, "Add");
    k.input(f32, {big});
    k.input(f32, {big});
    k.output(f32, {big});
    STRAIT_RETURN_IF_ERROR(push(measure("elementwise", "Add f32 " + std::to_string(big), k,
                                        double(big), 12.0 * big, budget)));
  }
  int64_t h = 256, rows = big / h;
  { // norm
    KernelBench k(b, "LayerNormalization");
    k.attrInt("axis", -1);
    k.attrFloat("epsilon", 1e-5f);
    k.input(f32, {rows, h});
    k.input(f32, {h});
    k.input(f32, {h});
    k.output(f32, {rows, h});
    STRAIT_RETURN_IF_ERROR(push(measure("norm", "LayerNormalization f32 " +
                                                    std::to_string(rows) + "x256",
                                        k, 5.0 * big, 8.0 * big, budget)));
  }
  { // softmax
    KernelBench k(b, "Softmax");
    k.attrInt("axis", -1);
    k.input(f32, {rows, h});
    k.output(f32, {rows, h});
    STRAIT_RETURN_IF_ERROR(push(measure("softmax", "Softmax f32 " + std::to_string(rows) + "x256",
                                        k, 5.0 * big, 8.0 * big, budget)));
  }
  { // embedding: Gather rows of a [vocab, h] table
    int64_t vocab = o.quick ? 4096 : 32768, tokens = rows;
    KernelBench k(b, "Gather");
    k.attrInt("axis", 0);
    k.input(f32, {vocab, h});
    Tensor &idx = k.input(program::DTYPE_I64, {tokens}, false);
    for (int64_t i = 0; i < idx.numel(); ++i)
      idx.as<int64_t>()[i] = (i * 7919) % vocab;
    k.output(f32, {tokens, h});
    STRAIT_RETURN_IF_ERROR(push(measure("embedding", "Gather f32 " + std::to_string(tokens) +
                                                         " rows of 256",
                                        k, double(tokens * h), 8.0 * tokens * h, budget)));
  }
  { // other: Transpose
    int64_t side = static_cast<int64_t>(std::sqrt(double(big)));
    KernelBench k(b, "Transpose");
    k.attrInts("perm", {1, 0});
    k.input(f32, {side, side});
    k.output(f32, {side, side});
    STRAIT_RETURN_IF_ERROR(push(measure("other", "Transpose f32 " + std::to_string(side) + "^2",
                                        k, double(side * side), 8.0 * side * side, budget)));
  }
  STRAIT_RETURN_IF_ERROR(probeOpRates(o, b, budget, out, notes));
  return out;
}

struct LinkProbe {
  double bandwidth = 0;        ///< bytes/s
  double latency = 0;          ///< one way, s
  double allReduceLatency = 0; ///< per ring step of an all-reduce, s
};

/// Bandwidth, one-way latency and all-reduce step latency to the other
/// rank; `memBandwidth` (bytes/s, this device's) prices the all-reduce's sums.
StatusOr<LinkProbe> probeLink(const Options &o, double memBandwidth) {
  GlooOptions g;
  g.rank = o.linkRank;
  g.worldSize = 2;
  g.storePath = o.linkStore;
  g.prefix = "strait-probe";
  g.hostname = o.linkAddress;
  g.timeout = std::chrono::milliseconds(o.timeoutMs);
  STRAIT_ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, createGlooCommunicator(g));
  int peer = 1 - o.linkRank;
  std::vector<float> small(1), large((size_t(o.linkMib ? o.linkMib : (o.quick ? 8 : 32)) << 20) / 4);
  Tensor ts{program::DTYPE_F32, {1}, small.data()};
  Tensor tl{program::DTYPE_F32, {int64_t(large.size())}, large.data()};
  auto pingpong = [&](Tensor &t) -> Status {
    if (o.linkRank == 0) {
      STRAIT_RETURN_IF_ERROR(comm->send(t, peer, 1));
      return comm->recv(ts, peer, 2);
    }
    STRAIT_RETURN_IF_ERROR(comm->recv(t, peer, 1));
    return comm->send(ts, peer, 2);
  };
  STRAIT_RETURN_IF_ERROR(pingpong(ts)); // warm-up
  // The link's latency is its fastest round trip: on a shared machine a
  // round trip also waits for the receiver to get a core back (loopback on
  // 2 cores loaded 2-8: min 0.11 ms, median 0.12-4.0 ms, max 2.5-15 ms),
  // which is the machine's load, not the link's (docs/planner.md, section 3).
  // The trips come in 5 batches 10 ms apart, so that one stretch in which
  // the peer lacks a core (the fastest of 20 back-to-back trips was 3.9 ms
  // on a quiet machine) does not set the minimum.
  int batches = 5, reps = o.quick ? 20 : 40;
  std::vector<double> trips;
  for (int b = 0; b < batches; ++b) {
    if (b)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    for (int i = 0; i < reps; ++i) {
      auto t1 = std::chrono::steady_clock::now();
      STRAIT_RETURN_IF_ERROR(pingpong(ts));
      trips.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    }
  }
  std::sort(trips.begin(), trips.end());
  size_t n = trips.size();
  double rtt = trips[0];
  std::cerr << "# round trips (ms): min " << trips[0] * 1e3 << ", p10 " << trips[n / 10] * 1e3
            << ", median " << trips[n / 2] * 1e3 << ", max " << trips.back() * 1e3 << "\n";
  // Bandwidth: `bulk` large messages back to back, then one small reply:
  // time = bulk * bytes / bandwidth + rtt.
  int bulk = 4;
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < bulk; ++i)
    STRAIT_RETURN_IF_ERROR(o.linkRank == 0 ? comm->send(tl, peer, 1) : comm->recv(tl, peer, 1));
  STRAIT_RETURN_IF_ERROR(o.linkRank == 0 ? comm->recv(ts, peer, 2) : comm->send(ts, peer, 2));
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Subtract the round trip only when the transfer dominates (a noisy rtt
  // must not make a fast link look infinitely fast).
  double transfer = s - rtt > 0.5 * s ? s - rtt : s;
  LinkProbe link;
  link.bandwidth = double(bulk) * double(tl.byteSize()) / transfer;
  link.latency = rtt / 2;
  // All-reduces of 4 KiB-4 MiB, x4 apart (the runtime's ring, as a stage's replicas
  // run it), the fastest of `arReps` each. The planner prices a 2-rank ring
  // as 2 steps x (step latency + bytes / 2 / bandwidth) + the sums (1.5 x
  // bytes at the memory bandwidth); the step latency is what is left, the
  // median over the sizes (a step waits for both ranks' messages, so it
  // pays more wake-ups and per-message work than half a round trip).
  int arReps = o.quick ? 10 : 30;
  std::vector<double> stepLatencies;
  std::cerr << "# all-reduce (2 ranks, fastest of " << arReps << "; ms):";
  {
    // Warm-up: the first all-reduces after the ping-pongs ran slow (0.5-3 ms
    // for 4 KiB, where the next sizes took 0.08 ms).
    Tensor t{program::DTYPE_F32, {int64_t(std::min<size_t>(large.size(), 1 << 18))}, large.data()};
    for (int i = 0; i < 3; ++i)
      STRAIT_RETURN_IF_ERROR(comm->allReduceSum(t, 3));
  }
  for (size_t kib : {4, 16, 64, 256, 1024, 4096}) {
    if (kib * 1024 > tl.byteSize())
      break;
    Tensor t{program::DTYPE_F32, {int64_t(kib * 256)}, large.data()};
    STRAIT_RETURN_IF_ERROR(comm->barrier());
    double best = INFINITY;
    for (int i = 0; i < arReps; ++i) {
      std::fill(large.begin(), large.begin() + kib * 256, 1.0f);
      auto t1 = std::chrono::steady_clock::now();
      STRAIT_RETURN_IF_ERROR(comm->allReduceSum(t, 3));
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
    }
    double bytes = kib * 1024.0;
    double sums = memBandwidth > 0 ? 1.5 * bytes / memBandwidth : 0;
    stepLatencies.push_back(std::max(0.0, (best - bytes / link.bandwidth - sums) / 2));
    std::cerr << " " << kib << " KiB " << best * 1e3;
  }
  std::cerr << "\n";
  STRAIT_RETURN_IF_ERROR(comm->barrier());
  std::sort(stepLatencies.begin(), stepLatencies.end());
  link.allReduceLatency = stepLatencies.empty() ? link.latency
                                                : stepLatencies[stepLatencies.size() / 2];
  return link;
}

bool parse(int argc, char **argv, Options &o) {
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&](std::string &v) {
      if (i + 1 >= argc)
        return false;
      v = argv[++i];
      return true;
    };
    std::string v;
    char *end = nullptr;
    if (a == "--quick")
      o.quick = true;
    else if (a == "-o" || a == "--output") {
      if (!next(o.out))
        return false;
    } else if (a == "--type") {
      if (!next(o.type))
        return false;
    } else if (a == "--device") {
      if (!next(o.device))
        return false;
    } else if (a == "--backend") {
      if (!next(o.backend))
        return false;
      if (o.backend != "cpu" && o.backend != "cuda" &&
          !(o.backend.rfind("cuda:", 0) == 0 && o.backend.size() > 5 &&
            o.backend.find_first_not_of("0123456789", 5) == std::string::npos)) {
        std::cerr << "strait-probe: --backend must be cpu, cuda or cuda:N\n";
        return false;
      }
    } else if (a == "--cluster") {
      if (!next(o.cluster))
        return false;
    } else if (a == "--kernels") {
      if (!next(o.kernels))
        return false;
    } else if (a == "--link-store") {
      if (!next(o.linkStore))
        return false;
    } else if (a == "--link-address") {
      if (!next(o.linkAddress))
        return false;
    } else if (a == "--peak-tflops") {
      if (!next(v) || (o.peakTflops = std::strtod(v.c_str(), &end), *end) || !(o.peakTflops > 0))
        return false;
    } else if (a == "--kernel-group-mib") {
      if (!next(v) || v.empty() ||
          (o.kernelGroupMib = int(std::strtol(v.c_str(), &end, 10)), *end) || o.kernelGroupMib < 0)
        return false;
    } else if (a == "--threads" || a == "--link-rank" || a == "--link-mib" || a == "--timeout-ms") {
      if (!next(v))
        return false;
      long x = std::strtol(v.c_str(), &end, 10);
      if (*end || v.empty())
        return false;
      (a == "--threads" ? o.threads : a == "--link-rank" ? o.linkRank
                                    : a == "--link-mib"  ? o.linkMib
                                                         : o.timeoutMs) = int(x);
    } else {
      std::cerr << "strait-probe: unknown argument '" << a << "'\n";
      return false;
    }
  }
  if (o.linkRank > 1 || (o.linkRank >= 0) != !o.linkStore.empty()) {
    std::cerr << "strait-probe: --link-rank (0 or 1) and --link-store go together\n";
    return false;
  }
  return true;
}

} // namespace

int main(int argc, char **argv) {
  reexecWithNativeBlasCore(argv);
  Options o;
  if (!parse(argc, argv, o)) {
    std::cerr << kUsage;
    return 2;
  }
  std::string base;
  if (!o.cluster.empty()) {
    std::ifstream in(o.cluster);
    if (!in) {
      std::cerr << "strait-probe: cannot read cluster file " << o.cluster << "\n";
      return 2;
    }
    std::stringstream ss;
    ss << in.rdbuf();
    base = ss.str();
    std::istringstream lines(base);
    for (std::string line; std::getline(lines, line);)
      if (line.rfind("profiles:", 0) == 0) {
        std::cerr << "strait-probe: " << o.cluster
                  << " already has a 'profiles:' section; remove it or write the profile alone (no --cluster)\n";
        return 2;
      }
    if (!base.empty() && base.back() != '\n')
      base += '\n';
  }
  if (o.threads > 0) {
    setNumThreads(o.threads);
    setBlasThreads(o.threads); // as strait-run's ranks: OpenBLAS on the same threads
  }
  // The job's own kernels (vTrain's method), on the backend strait-run uses;
  // first, so that a bad kernel list fails at once.
  std::vector<KernelTime> kernelTimes;
  std::vector<std::string> fusedNotes; // fused kernels, charged to their ops
  double kernelSeconds = 0;
  size_t kernelsListed = 0;
  if (!o.kernels.empty()) {
    auto t0 = std::chrono::steady_clock::now();
    StatusOr<std::unique_ptr<Backend>> backend = makeBackend(o, "bf16");
    StatusOr<std::vector<KernelTime>> times =
        backend.isOk() ? timeKernelList(**backend, o.kernels, o.quick ? 0.005 : 0.03,
                                        size_t(o.kernelGroupMib) << 20)
                       : StatusOr<std::vector<KernelTime>>(backend.getStatus());
    if (!times.isOk()) {
      std::cerr << "strait-probe: --kernels: " << times.getStatus().toString() << "\n";
      // No GPU (or no CUDA build) for --backend cuda: "skipped", as below.
      bool noGpu = !backend.isOk() && o.backend != "cpu" &&
                   (backend.getStatus().getCode() == StatusCode::Unavailable ||
                    backend.getStatus().getCode() == StatusCode::Unimplemented);
      return noGpu ? 77 : 1;
    }
    kernelsListed = times->size();
    for (const KernelTime &k : *times)
      if (size_t bar = k.signature.find('|'); bar != std::string::npos)
        fusedNotes.push_back(k.signature.substr(0, bar) + " (" +
                             std::to_string(std::count(k.signature.begin(), k.signature.end(), '|')) +
                             " ops): " + num(k.seconds * 1e3) + " ms");
    times = chargeFusedKernels(std::move(*times), o.kernels);
    if (!times.isOk()) {
      std::cerr << "strait-probe: --kernels: " << times.getStatus().toString() << "\n";
      return 1;
    }
    kernelTimes = std::move(*times);
    kernelSeconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  std::vector<std::string> notes;
  std::vector<std::pair<double, double>> curve;
  StatusOr<std::vector<Measure>> ms = probeKernels(o, notes, curve);
  if (!ms.isOk()) {
    std::cerr << "strait-probe: " << ms.getStatus().toString() << "\n";
    // No GPU (or no CUDA build) for --backend cuda: "skipped", as the tests.
    bool noGpu = o.backend != "cpu" && (ms.getStatus().getCode() == StatusCode::Unavailable ||
                                        ms.getStatus().getCode() == StatusCode::Unimplemented);
    return noGpu ? 77 : 1;
  }
  double gemm = 0, bandwidth = 0;
  for (const Measure &m : *ms) {
    if (m.kind == "matmul")
      gemm = m.rate();
    if (m.kind == "elementwise")
      bandwidth = m.bytes / m.seconds;
  }
  double peak = o.peakTflops > 0 ? o.peakTflops * 1e12 : gemm;
  char hostname[256] = "?";
  ::gethostname(hostname, sizeof hostname - 1);
  std::ostringstream y;
  y << "# strait-probe" << (o.quick ? " --quick" : "") << ": host " << hostname << ", ";
  if (o.backend == "cpu")
    y << getNumThreads() << " threads, CPU backend (OpenBLAS sgemm, " << blasCoreName()
      << " kernels)\n";
  else
    y << "CUDA backend on " << o.backend << " (cuBLAS; GEMM with bf16 tensor cores)\n";
  for (const std::string &n : notes)
    y << "#   " << n << "\n";
  for (const Measure &m : *ms)
    y << "#   " << m.kind << ": " << m.what << ": " << num(m.seconds * 1e3) << " ms, "
      << num(m.rate() / 1e9) << " GFLOP/s, " << num(m.bytes / m.seconds / 1e9) << " GB/s\n";
  y << "# memory bandwidth (Add): " << num(bandwidth / 1e9) << " GB/s\n";
  if (!o.kernels.empty()) {
    double sum = 0;
    for (const KernelTime &k : kernelTimes)
      sum += k.seconds;
    y << "# kernels of " << o.kernels << ": " << kernelsListed << " timed in "
      << num(kernelSeconds) << " s (median of 5-50 calls each); one call of each: "
      << num(sum * 1e3) << " ms\n";
    for (const std::string &f : fusedNotes)
      y << "#   fused " << f << ", charged to its ops\n";
    std::cerr << "strait-probe: timed " << kernelsListed << " kernels of " << o.kernels
              << " in " << num(kernelSeconds) << " s\n";
  }
  y << "# efficiencies relative to " << num(peak / 1e12) << " TFLOP/s ("
    << (o.peakTflops > 0 ? "--peak-tflops" : "the measured GEMM rate") << ")\n";
  if (o.linkRank >= 0) {
    StatusOr<LinkProbe> link = probeLink(o, bandwidth);
    if (!link.isOk()) {
      Status s = link.getStatus();
      std::cerr << "strait-probe: link: " << s.withRank(o.linkRank).toString() << "\n";
      return 3;
    }
    double mbps = link->bandwidth * 8 / 1e6;
    y << "# link to rank " << 1 - o.linkRank << " (" << o.linkAddress << "): " << num(mbps)
      << " Mbit/s, latency " << num(link->latency * 1e3) << " ms, all-reduce step "
      << num(link->allReduceLatency * 1e3)
      << " ms -> links.hosts: {between: [A, B], bandwidth_mbps: " << num(mbps)
      << ", latency_ms: " << num(link->latency * 1e3)
      << ", allreduce_latency_ms: " << num(link->allReduceLatency * 1e3) << "}\n";
  }
  // The profile states the rate its efficiencies are fractions of and the
  // measured bandwidth, so the planner uses the measured rates whatever the
  // device type's nominal peak_tflops and mem_bandwidth_gbs say.
  y << "profiles:\n  - {" << (o.device.empty() ? "type: " + o.type : "device: " + o.device)
    << ", gemm_tflops: " << num(gemm / 1e12) << ", peak_tflops: " << num(peak / 1e12)
    << ", mem_bandwidth_gbs: " << num(bandwidth / 1e9) << ", gemm_curve: {";
  for (size_t i = 0; i < curve.size(); ++i)
    y << (i ? ", " : "") << num(curve[i].first) << ": " << num(curve[i].second / 1e12);
  y << "}, efficiency: {";
  bool first = true;
  for (const Measure &m : *ms) {
    if (m.kind.rfind("op:", 0) == 0)
      continue;
    double eff = std::max(1e-6, m.rate() / peak);
    y << (first ? "" : ", ") << m.kind << ": " << num(eff);
    first = false;
  }
  // Per op type: attention in TFLOP/s, the memory-bound kernels in GB/s.
  for (bool flops : {true, false}) {
    y << (flops ? "}, op_tflops: {" : "}, op_gbs: {");
    first = true;
    for (const Measure &m : *ms) {
      if (m.kind.rfind("op:", 0) != 0 || (m.kind.find("Attention") != std::string::npos) != flops)
        continue;
      y << (first ? "" : ", ") << m.kind.substr(3) << ": "
        << num(flops ? m.rate() / 1e12 : m.bytes / m.seconds / 1e9);
      first = false;
    }
  }
  y << "}";
  if (!o.kernels.empty()) {
    y << ", kernel_times: {";
    for (size_t i = 0; i < kernelTimes.size(); ++i) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "%.6g", kernelTimes[i].seconds);
      y << (i ? ", " : "") << kernelTimes[i].signature << ": " << buf;
    }
    y << "}";
  }
  y << "}\n";
  std::string text = base + y.str();
  if (o.out.empty() || o.out == "-") {
    std::cout << text;
  } else {
    std::ofstream f(o.out);
    if (!(f << text)) {
      std::cerr << "strait-probe: cannot write " << o.out << "\n";
      return 1;
    }
    std::cerr << "strait-probe: wrote " << o.out << "\n";
  }
  return 0;
}
