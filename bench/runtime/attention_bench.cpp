//===- attention_bench.cpp - Fused attention vs the composed CPU kernels --===//
//
// One training step's attention (forward + backward) on the CPU backend, in
// the same run:
//   composed: what autodiff emits for the exported graph: S = MatMul(Q, Kt),
//             Mul(S, scale), Add(., mask), P = Softmax, Y = MatMul(P, V);
//             backward MatMul(dY, Transpose(V)), MatMul(Transpose(P), dY),
//             SoftmaxGrad, Mul(scale), MatMul(dS, Transpose(Kt)),
//             MatMul(Transpose(Q), dS);
//   fused:    FusedAttention + FusedAttentionGrad with the same [1, 1, T, T]
//             additive mask as Bias (graph-fuse-attention's output when the
//             mask depends on the inputs);
//   causal:   the same with causal=1 and no mask tensor (its output for a
//             mask computed from constants; the key blocks above the
//             diagonal are skipped).
// Prints the median time of each, the ratios, and the peak scratch bytes:
// for the composed run the T x T intermediates live at once (each freed
// after its last use, the saved P kept for the backward), for the fused
// kernels the peak of the heap they allocate (operator new is counted),
// plus LSE. Shapes are GPT-2 small's: B*H = 2*12 heads of D = 64.
// Usage: strait-attention-bench [--seq 256,512] [--iters 5] [--threads N]
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Backend.h"
#include "strait/runtime/ThreadPool.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <string>
#include <vector>

using namespace strait;
using namespace strait::rt;

// --- Heap accounting: every operator new in the process --------------------

namespace {
std::atomic<int64_t> heapLive{0}, heapPeak{0};

void *countedAlloc(size_t n) {
  void *p = std::malloc(n + 16);
  if (!p)
    throw std::bad_alloc();
  *static_cast<size_t *>(p) = n;
  int64_t now = heapLive.fetch_add(static_cast<int64_t>(n)) + static_cast<int64_t>(n);
  int64_t peak = heapPeak.load();
  while (now > peak && !heapPeak.compare_exchange_weak(peak, now)) {
  }
  return static_cast<char *>(p) + 16;
}

void countedFree(void *p) {
  if (!p)
    return;
  char *base = static_cast<char *>(p) - 16;
  heapLive.fetch_sub(static_cast<int64_t>(*reinterpret_cast<size_t *>(base)));
  std::free(base);
}
} // namespace

void *operator new(size_t n) { return countedAlloc(n); }
void *operator new[](size_t n) { return countedAlloc(n); }
void operator delete(void *p) noexcept { countedFree(p); }
void operator delete[](void *p) noexcept { countedFree(p); }
void operator delete(void *p, size_t) noexcept { countedFree(p); }
void operator delete[](void *p, size_t) noexcept { countedFree(p); }

namespace {

double seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Runs kernels of the CPU backend; intermediates are counted while alive.
class Runner {
public:
  Runner() : cpu(createCpuBackend()) {}

  std::unique_ptr<OwnedTensor> make(const Shape &s) {
    auto t = std::make_unique<OwnedTensor>(program::DTYPE_F32, s);
    tensorLive += t->tensor.byteSize();
    tensorPeak = std::max(tensorPeak, tensorLive);
    return t;
  }
  void release(std::unique_ptr<OwnedTensor> &t) {
    tensorLive -= t->tensor.byteSize();
    t.reset();
  }
  void run(const program::Kernel &k, std::vector<const Tensor *> ins,
           std::vector<Tensor *> outs) {
    StatusOr<KernelFn> fn = cpu->resolve(k);
    if (!fn.isOk()) {
      std::fprintf(stderr, "%s\n", fn.getStatus().toString().c_str());
      std::exit(1);
    }
    KernelContext ctx(k, std::move(ins), std::move(outs));
    Status st = (*fn)(ctx);
    if (!st.isOk()) {
      std::fprintf(stderr, "%s\n", st.toString().c_str());
      std::exit(1);
    }
  }
  int64_t tensorLive = 0, tensorPeak = 0;

private:
  std::unique_ptr<Backend> cpu;
};

program::Kernel kernel(const std::string &op) {
  program::Kernel k;
  k.set_op(op);
  k.set_name(op);
  return k;
}

program::Kernel transpose() {
  program::Kernel k = kernel("Transpose");
  auto *ints = (*k.mutable_attrs())["perm"].mutable_ints();
  for (int64_t d : {0, 1, 3, 2})
    ints->add_v(d);
  return k;
}

struct Inputs {
  int64_t b = 2, h = 12, t, d = 64;
  OwnedTensor q, kt, v, dy, mask, scale;
  Shape sh(int64_t x, int64_t y) const { return {b, h, x, y}; }
};

void fill(OwnedTensor &t, std::mt19937 &gen) {
  std::normal_distribution<float> n(0.0f, 1.0f);
  for (int64_t i = 0; i < t.tensor.numel(); ++i)
    t.as<float>()[i] = n(gen);
}

Inputs makeInputs(int64_t t) {
  Inputs in;
  in.t = t;
  std::mt19937 gen(7);
  in.q = OwnedTensor(program::DTYPE_F32, in.sh(t, in.d));
  in.kt = OwnedTensor(program::DTYPE_F32, in.sh(in.d, t));
  in.v = OwnedTensor(program::DTYPE_F32, in.sh(t, in.d));
  in.dy = OwnedTensor(program::DTYPE_F32, in.sh(t, in.d));
  for (OwnedTensor *x : {&in.q, &in.kt, &in.v, &in.dy})
    fill(*x, gen);
  in.mask = OwnedTensor(program::DTYPE_F32, {1, 1, t, t});
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j)
      in.mask.as<float>()[i * t + j] = j > i ? -std::numeric_limits<float>::max() : 0.0f;
  in.scale = OwnedTensor(program::DTYPE_F32, {});
  in.scale.as<float>()[0] = 1.0f / std::sqrt(float(in.d));
  return in;
}

/// The composed step; returns its peak bytes of intermediates (outputs dQ,
/// dKt, dV and Y not counted, as for the fused run).
int64_t composedStep(Runner &r, const Inputs &in, OwnedTensor &y, OwnedTensor &dq,
                     OwnedTensor &dkt, OwnedTensor &dv) {
  r.tensorLive = r.tensorPeak = 0;
  Shape tt = in.sh(in.t, in.t);
  auto s = r.make(tt), s2 = r.make(tt);
  r.run(kernel("MatMul"), {&in.q.tensor, &in.kt.tensor}, {&s->tensor});
  r.run(kernel("Mul"), {&s->tensor, &in.scale.tensor}, {&s2->tensor});
  r.release(s);
  auto s3 = r.make(tt);
  r.run(kernel("Add"), {&s2->tensor, &in.mask.tensor}, {&s3->tensor});
  r.release(s2);
  auto p = r.make(tt);
  program::Kernel softmax = kernel("Softmax");
  (*softmax.mutable_attrs())["axis"].set_i(-1);
  r.run(softmax, {&s3->tensor}, {&p->tensor});
  r.release(s3);
  r.run(kernel("MatMul"), {&p->tensor, &in.v.tensor}, {&y.tensor});
  // Backward.
  auto vt = r.make(in.sh(in.d, in.t)), dp = r.make(tt);
  r.run(transpose(), {&in.v.tensor}, {&vt->tensor});
  r.run(kernel("MatMul"), {&in.dy.tensor, &vt->tensor}, {&dp->tensor});
  r.release(vt);
  auto pt = r.make(tt);
  r.run(transpose(), {&p->tensor}, {&pt->tensor});
  r.run(kernel("MatMul"), {&pt->tensor, &in.dy.tensor}, {&dv.tensor});
  r.release(pt);
  auto ds3 = r.make(tt);
  r.run(kernel("SoftmaxGrad"), {&dp->tensor, &p->tensor}, {&ds3->tensor});
  r.release(dp);
  r.release(p);
  auto ds = r.make(tt);
  r.run(kernel("Mul"), {&ds3->tensor, &in.scale.tensor}, {&ds->tensor});
  r.release(ds3);
  auto k = r.make(in.sh(in.t, in.d)), qt = r.make(in.sh(in.d, in.t));
  r.run(transpose(), {&in.kt.tensor}, {&k->tensor});
  r.run(kernel("MatMul"), {&ds->tensor, &k->tensor}, {&dq.tensor});
  r.run(transpose(), {&in.q.tensor}, {&qt->tensor});
  r.run(kernel("MatMul"), {&qt->tensor, &ds->tensor}, {&dkt.tensor});
  r.release(k);
  r.release(qt);
  r.release(ds);
  return r.tensorPeak;
}

/// The fused step; returns the peak heap bytes during the two kernels plus LSE.
int64_t fusedStep(Runner &r, const Inputs &in, bool causal, OwnedTensor &y, OwnedTensor &dq,
                  OwnedTensor &dkt, OwnedTensor &dv) {
  program::Kernel fwd = kernel("FusedAttention"), bwd = kernel("FusedAttentionGrad");
  for (program::Kernel *k : {&fwd, &bwd}) {
    (*k->mutable_attrs())["scale"].set_f(in.scale.as<float>()[0]);
    if (causal)
      (*k->mutable_attrs())["causal"].set_i(1);
  }
  OwnedTensor lse(program::DTYPE_F32, {in.b, in.h, in.t});
  std::vector<const Tensor *> fins = {&in.q.tensor, &in.kt.tensor, &in.v.tensor};
  std::vector<const Tensor *> bins = {&in.dy.tensor, &in.q.tensor, &in.kt.tensor,
                                      &in.v.tensor,  &y.tensor,    &lse.tensor};
  if (!causal) {
    fins.push_back(&in.mask.tensor);
    bins.push_back(&in.mask.tensor);
  }
  int64_t base = heapLive.load();
  heapPeak.store(base);
  r.run(fwd, fins, {&y.tensor, &lse.tensor});
  r.run(bwd, bins, {&dq.tensor, &dkt.tensor, &dv.tensor});
  return heapPeak.load() - base + static_cast<int64_t>(lse.tensor.byteSize());
}

double maxDiff(const OwnedTensor &a, const OwnedTensor &b) {
  double m = 0;
  for (int64_t i = 0; i < a.tensor.numel(); ++i)
    m = std::max(m, double(std::abs(a.as<float>()[i] - b.as<float>()[i])));
  return m;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

std::vector<int64_t> parseList(const char *s) {
  std::vector<int64_t> out;
  for (const char *p = s; *p;) {
    out.push_back(std::strtoll(p, nullptr, 10));
    const char *c = std::strchr(p, ',');
    if (!c)
      break;
    p = c + 1;
  }
  return out;
}

} // namespace

int main(int argc, char **argv) {
  std::vector<int64_t> seqs = {256, 512};
  int iters = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--seq")
      seqs = parseList(argv[i + 1]);
    else if (a == "--iters")
      iters = std::atoi(argv[i + 1]);
    else if (a == "--threads")
      setNumThreads(std::atoi(argv[i + 1]));
  }
  std::printf("attention fwd+bwd, B*H = 2*12, D = 64, %d threads, median of %d\n",
              getNumThreads(), iters);
  std::printf("%6s %14s %12s %12s %9s %9s %16s %14s %12s\n", "T", "composed ms",
              "fused ms", "causal ms", "ratio", "causal", "composed bytes", "fused bytes",
              "max |diff|");
  Runner r;
  for (int64_t t : seqs) {
    Inputs in = makeInputs(t);
    Shape qs = in.sh(t, in.d), ks = in.sh(in.d, t);
    OwnedTensor y[3], dq[3], dkt[3], dv[3];
    for (int m = 0; m < 3; ++m) {
      y[m] = OwnedTensor(program::DTYPE_F32, qs);
      dq[m] = OwnedTensor(program::DTYPE_F32, qs);
      dkt[m] = OwnedTensor(program::DTYPE_F32, ks);
      dv[m] = OwnedTensor(program::DTYPE_F32, qs);
    }
    std::vector<double> times[3];
    int64_t bytes[3] = {0, 0, 0};
    for (int it = 0; it <= iters; ++it) { // iteration 0 warms up
      for (int m = 0; m < 3; ++m) {       // interleaved
        double t0 = seconds();
        int64_t b = m == 0 ? composedStep(r, in, y[m], dq[m], dkt[m], dv[m])
                           : fusedStep(r, in, m == 2, y[m], dq[m], dkt[m], dv[m]);
        double dt = seconds() - t0;
        bytes[m] = std::max(bytes[m], b);
        if (it > 0)
          times[m].push_back(dt * 1e3);
      }
    }
    double diff = 0;
    for (int m = 1; m < 3; ++m)
      diff = std::max({diff, maxDiff(y[0], y[m]), maxDiff(dq[0], dq[m]),
                       maxDiff(dkt[0], dkt[m]), maxDiff(dv[0], dv[m])});
    double tc = median(times[0]), tf = median(times[1]), tcz = median(times[2]);
    std::printf("%6lld %14.2f %12.2f %12.2f %8.2fx %8.2fx %16lld %14lld %12.2e\n",
                static_cast<long long>(t), tc, tf, tcz, tc / tf, tc / tcz,
                static_cast<long long>(bytes[0]), static_cast<long long>(std::max(bytes[1], bytes[2])),
                diff);
  }
  return 0;
}
