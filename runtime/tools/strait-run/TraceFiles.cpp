//===- TraceFiles.cpp - The launcher's per-rank traces --------------------===//
#include "TraceFiles.h"
#include "strait/runtime/Trace.h"

#include <iostream>
#include <vector>

namespace strait {
namespace run {

std::string traceRankFile(const RunOptions &o, int rank) {
  return o.logDir + "/trace.rank" + std::to_string(rank) + ".json";
}

int mergeRankTraces(const RunOptions &o, const program::PlanManifest &m) {
  if (o.traceFile.empty())
    return 0;
  std::vector<std::string> parts;
  for (const auto &r : m.ranks())
    parts.push_back(traceRankFile(o, r.rank()));
  rt::Status s = rt::trace::mergeTraces(parts, o.traceFile);
  if (!s.isOk()) {
    std::cerr << "strait-run: --trace: " << s.toString() << std::endl;
    return 1;
  }
  std::cout << "strait-run: trace of iterations " << o.traceFirst << "-" << o.traceLast << " of "
            << parts.size() << " rank(s) in " << o.traceFile
            << " (ui.perfetto.dev or chrome://tracing)" << std::endl;
  return 0;
}

} // namespace run
} // namespace strait
