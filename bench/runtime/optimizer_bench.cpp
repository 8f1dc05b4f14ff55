//===- optimizer_bench.cpp - The CPU AdamW kernel against its floors ------===//
//
// One AdamW update of N f32 parameters (f32 gradients, in place: the outputs
// are the inputs' buffers, as the exporter aliases them), in the same run:
//   kernel:  the CPU backend's AdamW kernel (Training.cpp);
//   scalar:  the same arithmetic one element at a time, vectorization off in
//            this function: the kernel before it was written to vectorize;
//   stream:  x = x + a*g, m = m + b*g, v = v + c*g over the same seven
//            arrays (four read, three written): the memory traffic of the
//            update with none of its arithmetic, what the planner's cost
//            model prices AdamW at.
// Prints the median ms of each and the ratios; exits non-zero when the
// kernel's parameters, moments differ from the scalar loop's in any bit.
// Usage: strait-optimizer-bench [--numel 8388608] [--iters 9] [--threads N]
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Backend.h"
#include "strait/runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace strait;
using namespace strait::rt;

namespace {

constexpr float kLr = 1e-3f, kB1 = 0.9f, kB2 = 0.999f, kEps = 1e-8f, kWd = 0.01f;

double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct State {
  OwnedTensor x, g, m, v;
  explicit State(int64_t n)
      : x(program::DTYPE_F32, {n}), g(program::DTYPE_F32, {n}), m(program::DTYPE_F32, {n}),
        v(program::DTYPE_F32, {n}) {
    std::mt19937 gen(7);
    std::normal_distribution<float> d(0, 1);
    for (int64_t k = 0; k < n; ++k) {
      x.as<float>()[k] = d(gen);
      g.as<float>()[k] = d(gen) * 1e-2f;
      m.as<float>()[k] = d(gen) * 1e-3f;
      v.as<float>()[k] = std::fabs(d(gen)) * 1e-5f;
    }
  }
};

float bias(float beta, int64_t step) {
  return 1 - static_cast<float>(std::pow(double(beta), double(step)));
}

/// The kernel's arithmetic (Training.cpp adamWElement), not vectorized.
__attribute__((optimize("no-tree-vectorize"))) void scalarAdamW(State &s, int64_t n,
                                                                 int64_t step) {
  float c1 = bias(kB1, step), c2 = bias(kB2, step);
  float *x = s.x.as<float>(), *m = s.m.as<float>(), *v = s.v.as<float>();
  const float *g = s.g.as<float>();
  for (int64_t k = 0; k < n; ++k) {
    float mn = kB1 * m[k] + (1 - kB1) * g[k];
    float vn = kB2 * v[k] + (1 - kB2) * g[k] * g[k];
    float update = (mn / c1) / (std::sqrt(vn / c2) + kEps);
    x[k] = x[k] - kLr * (update + kWd * x[k]);
    m[k] = mn;
    v[k] = vn;
  }
}

void stream(State &s, int64_t n) {
  float *x = s.x.as<float>(), *m = s.m.as<float>(), *v = s.v.as<float>();
  const float *g = s.g.as<float>();
  parallelFor(n, 16384, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      x[k] += 1e-9f * g[k];
      m[k] += 1e-9f * g[k];
      v[k] += 1e-9f * g[k];
    }
  });
}

class Kernel {
public:
  Kernel() : cpu(createCpuBackend()), lr(program::DTYPE_F32, {}), step(program::DTYPE_I64, {}) {
    k.set_op("AdamW");
    k.set_name("AdamW");
    (*k.mutable_attrs())["beta1"].set_f(kB1);
    (*k.mutable_attrs())["beta2"].set_f(kB2);
    (*k.mutable_attrs())["epsilon"].set_f(kEps);
    (*k.mutable_attrs())["weight_decay"].set_f(kWd);
    StatusOr<KernelFn> f = cpu->resolve(k);
    if (!f.isOk()) {
      std::fprintf(stderr, "%s\n", f.getStatus().toString().c_str());
      std::exit(1);
    }
    fn = *f;
    lr.as<float>()[0] = kLr;
  }
  void run(State &s, int64_t stepNumber) {
    step.as<int64_t>()[0] = stepNumber;
    KernelContext ctx(k, {&lr.tensor, &step.tensor, &s.x.tensor, &s.g.tensor, &s.m.tensor,
                          &s.v.tensor},
                      {&s.x.tensor, &s.m.tensor, &s.v.tensor});
    Status st = fn(ctx);
    if (!st.isOk()) {
      std::fprintf(stderr, "%s\n", st.toString().c_str());
      std::exit(1);
    }
  }

private:
  std::unique_ptr<Backend> cpu;
  program::Kernel k;
  KernelFn fn;
  OwnedTensor lr, step;
};

bool sameBits(const OwnedTensor &a, const OwnedTensor &b, int64_t n) {
  return std::memcmp(a.as<float>(), b.as<float>(), n * sizeof(float)) == 0;
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = 8 << 20;
  int iters = 9;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--numel")
      n = std::atoll(argv[i + 1]);
    else if (a == "--iters")
      iters = std::atoi(argv[i + 1]);
    else if (a == "--threads")
      setNumThreads(std::atoi(argv[i + 1]));
    else {
      std::fprintf(stderr, "usage: strait-optimizer-bench [--numel N] [--iters K] "
                           "[--threads T]\n");
      return 2;
    }
  }
  // Bits first: three steps of each from the same state.
  {
    State a(n), b(n);
    Kernel kernel;
    for (int64_t step = 1; step <= 3; ++step) {
      kernel.run(a, step);
      scalarAdamW(b, n, step);
    }
    if (!sameBits(a.x, b.x, n) || !sameBits(a.m, b.m, n) || !sameBits(a.v, b.v, n)) {
      std::fprintf(stderr, "AdamW kernel and scalar loop differ\n");
      return 1;
    }
  }
  State s(n);
  Kernel kernel;
  std::vector<double> tk, ts, tf;
  for (int i = 0; i < iters; ++i) {
    double t0 = now();
    kernel.run(s, i + 1);
    double t1 = now();
    scalarAdamW(s, n, i + 1);
    double t2 = now();
    stream(s, n);
    double t3 = now();
    tk.push_back((t1 - t0) * 1e3);
    ts.push_back((t2 - t1) * 1e3);
    tf.push_back((t3 - t2) * 1e3);
  }
  double k = median(tk), sc = median(ts), st = median(tf);
  std::printf("AdamW of %lld f32 parameters, %d threads, median of %d (bits equal the scalar "
              "loop's)\n",
              static_cast<long long>(n), getNumThreads(), iters);
  std::printf("  kernel %8.2f ms   scalar loop %8.2f ms (1 thread)   stream floor %8.2f ms\n", k,
              sc, st);
  std::printf("  scalar / kernel x%.2f   kernel / stream floor x%.2f   %.2f GB/s\n", sc / k,
              k / st, 28.0 * n / (k * 1e6));
  return 0;
}
