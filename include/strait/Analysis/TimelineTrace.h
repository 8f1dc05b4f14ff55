//===- TimelineTrace.h - The simulated timeline as a Chrome trace -*- C++ -*-===//
//
// `straitc ... --trace-plan FILE.json`: the simulator's events for one
// iteration (simulatePlan's SimulationResult::events, not a second schedule)
// in Chrome's trace event JSON, the format of `strait-run --trace`, so the
// predicted and the measured timelines open side by side in Perfetto and
// scripts/plot-trace.py draws both. One process per stage (named with its
// ranks when known), lanes "compute" (forward Fm / backward Bm per
// micro-batch m, and "bubble" spans where the stage waits before its last
// compute), "send activations", "send gradients" and "all-reduce".
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_ANALYSIS_TIMELINETRACE_H
#define STRAIT_ANALYSIS_TIMELINETRACE_H

#include "strait/Analysis/Simulator.h"

#include "llvm/Support/Error.h"

#include <vector>

namespace strait {

/// Writes `result`'s events for `plan` as a Chrome trace to `path` (through
/// a temporary name, renamed once complete). `stageRanks[s]`: the job's
/// ranks of stage s, or empty when the plan has no ranks yet.
llvm::Error writeTimelineChromeTrace(const SimulationResult &result, const PartitionPlan &plan,
                                     const ClusterModel &cluster,
                                     const std::vector<std::vector<int>> &stageRanks,
                                     llvm::StringRef path);

} // namespace strait

#endif // STRAIT_ANALYSIS_TIMELINETRACE_H
