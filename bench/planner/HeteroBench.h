//===- HeteroBench.h - Heterogeneous clusters against equal-speed twins ---===//

#ifndef STRAIT_BENCH_PLANNER_HETEROBENCH_H
#define STRAIT_BENCH_PLANNER_HETEROBENCH_H

#include "llvm/ADT/StringRef.h"

namespace strait::bench {

/// Prints the table of docs/benchmarks.md "Heterogeneous clusters against
/// equal-speed twins"; returns the exit code.
int heteroTable(llvm::StringRef clustersDir);

} // namespace strait::bench

#endif
