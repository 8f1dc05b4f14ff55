//===- KernelTimes.h - strait-probe --kernels: time a job's kernels -*- C++ -*-===//
//
// vTrain's method: every distinct kernel of a job (the list `straitc
// --emit=kernels` writes, each kernel named by its signature) run on the
// backend on random inputs of its shapes; the median seconds per signature
// become the profile's `kernel_times` (docs/planner.md, section 3).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_TOOLS_PROBE_KERNELTIMES_H
#define STRAIT_TOOLS_PROBE_KERNELTIMES_H

#include "strait/runtime/Backend.h"

#include <string>
#include <utility>
#include <vector>

namespace strait::rt {

/// The producer straitc writes into a kernel list (Export.h's
/// kKernelListProducer; the runtime does not link the compiler).
inline constexpr const char *kKernelListProducer = "straitc 0.1 kernel-list";

struct KernelTime {
  std::string signature, op;
  double seconds = 0;
};

/// Loads the kernel list at `path` and times each kernel on `backend`: one
/// warm-up call, then rounds of one call of every kernel in list order (so
/// that, as in a step, each finds the caches filled by the others) until
/// `budget` seconds per kernel (at least 5 rounds, at most 50), keeping
/// each kernel's median. Kernels are grouped by up to `groupBytes` of
/// buffers; 0 times each kernel alone, in a loop of its own calls. Floating
/// inputs are uniform in [-0.5, 0.5), integer inputs (indices, labels) uniform in [0, the smallest dimension of
/// the kernel's first floating input) so that every index is in range,
/// constants hold their values. Errors name the file and the kernel. Fused
/// kernels keep their names (chargeFusedKernels turns them into member
/// times).
StatusOr<std::vector<KernelTime>> timeKernelList(const Backend &backend,
                                                 const std::string &path, double budget,
                                                 size_t groupBytes = size_t(1) << 30);

/// The kernel times by the planner's signatures: a fused kernel (named
/// "<signature>|<member>=<share>|...", see buildKernelModule) is charged to
/// its members, each member signature getting the mean of its charges
/// (share x the fused kernel's time) over its occurrences, in place of its
/// time alone; the fused kernel itself is not listed. An error names a
/// malformed member entry.
StatusOr<std::vector<KernelTime>> chargeFusedKernels(std::vector<KernelTime> timed,
                                                     const std::string &path);

} // namespace strait::rt

#endif // STRAIT_TOOLS_PROBE_KERNELTIMES_H
