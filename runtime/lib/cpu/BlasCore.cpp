//===- BlasCore.cpp - Run OpenBLAS on the kernels this CPU supports -------===//
//
// A DYNAMIC_ARCH OpenBLAS picks its kernels when it loads, from the CPU's
// family and model. A release older than the CPU does not know the model and
// falls back to its generic SSE3 kernels ("Prescott"): Debian bookworm's
// OpenBLAS 0.3.21 does so on Sapphire Rapids Xeons, where its sgemm then runs
// at 18 GFLOP/s on one core against 78 with the AVX-512 (SkylakeX/Cooperlake)
// kernels the CPU supports (docs/benchmarks.md, "OpenBLAS core"). OpenBLAS
// reads OPENBLAS_CORETYPE only when it loads, so the fix is an environment
// variable and a re-exec before anything else runs.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Backend.h"

#include <cblas.h>

#include <cstdlib>
#include <cstring>
#include <unistd.h>

extern "C" char *openblas_get_corename(void);

namespace strait {
namespace rt {

std::string blasCoreName() {
  const char *name = openblas_get_corename();
  return name ? name : "";
}

std::string nativeBlasCore() {
  if (std::getenv("OPENBLAS_CORETYPE"))
    return ""; // the user's (or our re-exec's) choice stands
#if defined(__x86_64__)
  // Only OpenBLAS's SSE-only fallbacks are overridden: a core it detected
  // with AVX or better is its own informed choice.
  static const char *const kSseCores[] = {"Prescott", "Core2",     "Penryn", "Dunnington",
                                          "Nehalem",  "Atom",      "Opteron", "Opteron_SSE3",
                                          "Barcelona", "Nano",     "Katmai", "Coppermine",
                                          "Northwood", "Banias"};
  std::string core = blasCoreName();
  bool sseOnly = false;
  for (const char *c : kSseCores)
    sseOnly |= core == c;
  if (!sseOnly)
    return "";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq"))
    return __builtin_cpu_supports("avx512bf16") ? "Cooperlake" : "SkylakeX";
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
    return "Haswell";
#endif
  return "";
}

void setBlasThreads(int n) {
  if (n > 0)
    openblas_set_num_threads(n);
}

void reexecWithNativeBlasCore(char **argv) {
  std::string core = nativeBlasCore();
  if (core.empty() || !argv || !argv[0])
    return;
  ::setenv("OPENBLAS_CORETYPE", core.c_str(), 1);
  ::execv("/proc/self/exe", argv);
  // The exec failed: run on as we are (correct, only slower), and leave the
  // variable set so that child processes still get the native kernels.
}

} // namespace rt
} // namespace strait
