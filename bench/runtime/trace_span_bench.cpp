//===- trace_span_bench.cpp - The cost of a trace hook, off and on --------===//
//
// strait-trace-span-bench [N]: times N kernel hooks (rt::trace::kernelSpan on
// a FusedElementwise kernel with member ops, as Executor::launchSegment makes
// one per kernel) with tracing off and on, and N empty loop iterations as the
// baseline, all in this run; prints this thread's CPU nanoseconds per hook
// (best of 3 rounds).
// Results: docs/benchmarks.md, "Execution traces".
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Trace.h"

#include <chrono>
#include <ctime>
#include <cstdio>
#include <cstdlib>
#include <algorithm>

using namespace strait;
using namespace strait::rt;

namespace {

/// This thread's CPU time in ns: unlike wall time, not inflated by the
/// other processes of a loaded machine.
double cpuNs() {
  timespec t;
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e9 + t.tv_nsec;
}

template <class F> double nsPer(long n, F &&f) {
  double t0 = cpuNs();
  for (long i = 0; i < n; ++i)
    f(i);
  return (cpuNs() - t0) / n;
}

} // namespace

int main(int argc, char **argv) {
  long n = argc > 1 ? std::atol(argv[1]) : 2000000;
  program::Kernel k;
  k.set_op("FusedElementwise");
  k.set_name("node_mul_25");
  auto &ops = (*k.mutable_attrs())["ops"];
  for (const char *op : {"Mul", "Pow", "Mul", "Add", "Mul", "Tanh", "Add", "Mul"})
    ops.mutable_strings()->add_v(op);
  volatile long sink = 0;
  double base = 1e300, off = 1e300, on = 1e300;
  for (int round = 0; round < 3; ++round) {
    base = std::min(base, nsPer(n, [&](long i) { sink = sink + i; }));
    trace::setEnabled(false);
    off = std::min(off, nsPer(n, [&](long i) {
                     trace::Span s = trace::kernelSpan(k, 3, 1);
                     sink = sink + i;
                   }));
    trace::setEnabled(true);
    long m = n / 10; // spans are kept: fewer of them
    on = std::min(on, nsPer(m, [&](long i) {
                    trace::Span s = trace::kernelSpan(k, 3, 1);
                    sink = sink + i;
                  }));
    trace::setEnabled(false);
    trace::take();
  }
  std::printf("CPU time per kernel: loop %.2f ns, hook off %.2f ns (+%.2f), hook on %.1f ns "
              "(+%.1f)\n",
              base,
              off, off - base, on, on - base);
  return 0;
}
