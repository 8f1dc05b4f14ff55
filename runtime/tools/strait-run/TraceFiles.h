//===- TraceFiles.h - The launcher's per-rank traces ------------*- C++ -*-===//
//
// `strait-run DIR --trace FILE.json`: each local rank writes its part as
// <log dir>/trace.rank<R>.json; once every rank finished, the launcher merges
// the parts into FILE (rt::trace::mergeTraces, times relative to the earliest
// span).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_TRACEFILES_H
#define STRAIT_RUNTIME_TOOLS_TRACEFILES_H

#include "StraitRun.h"
#include "strait_program.pb.h"

#include <string>

namespace strait {
namespace run {

/// The part rank `rank` writes.
std::string traceRankFile(const RunOptions &o, int rank);

/// Merges the parts of the manifest's ranks into o.traceFile (nothing
/// without --trace); returns 0, or 1 after printing why it failed.
int mergeRankTraces(const RunOptions &o, const program::PlanManifest &m);

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_TRACEFILES_H
