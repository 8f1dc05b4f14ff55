//===- JobRecord.cpp - What straitc records in a job folder ---------------===//
#include "JobRecord.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <map>

using namespace mlir;

LogicalResult strait::writeJobRecord(llvm::StringRef dir, llvm::ArrayRef<std::string> argv,
                                     llvm::StringRef clusterFile, const ClusterModel &cluster,
                                     dist::PlanAttr plan, double predictedIterationS,
                                     llvm::ArrayRef<double> feedbackBytes,
                                     llvm::StringRef evaluatedPlanFile,
                                     std::optional<double> evaluatedIterationS) {
  llvm::StringMap<unsigned> byName;
  for (unsigned d = 0; d < cluster.size(); ++d)
    byName[cluster.devices[d].name] = d;
  std::map<int64_t, unsigned> deviceOf; // rank -> device index
  std::map<int64_t, int64_t> stageOf;   // rank -> stage
  for (int64_t s = 0; s < plan.getNumStages(); ++s) {
    dist::PlacementAttr p = plan.getStage(s);
    for (auto [device, rank] : llvm::zip(p.getDevices(), p.getRanks().asArrayRef())) {
      auto it = byName.find(llvm::cast<StringAttr>(device).getValue());
      if (it != byName.end())
        deviceOf[rank] = it->second;
      stageOf[rank] = s;
    }
  }
  llvm::json::Array ranks, links;
  for (const auto &[rank, d] : deviceOf) {
    size_t stage = static_cast<size_t>(stageOf[rank]);
    ranks.push_back(llvm::json::Object{
        {"rank", rank},
        {"device", cluster.devices[d].name},
        {"host", cluster.hosts[cluster.devices[d].host]},
        {"memory_bytes", cluster.typeOf(d).memCapacity},
        {"error_feedback_bytes", stage < feedbackBytes.size() ? feedbackBytes[stage] : 0.0}});
  }
  for (const auto &[a, da] : deviceOf)
    for (const auto &[b, db] : deviceOf) {
      if (b <= a || cluster.devices[da].host == cluster.devices[db].host)
        continue;
      links.push_back(llvm::json::Object{{"ranks", llvm::json::Array{a, b}},
                                         {"bandwidth_bytes_s", cluster.bandwidth(da, db)},
                                         {"latency_s", cluster.latency(da, db)},
                                         {"rule", cluster.link(da, db).origin}});
    }
  llvm::SmallString<256> cwd;
  if (llvm::sys::fs::current_path(cwd))
    cwd = ".";
  llvm::json::Array args;
  for (const std::string &a : argv)
    args.push_back(a);
  llvm::json::Object record{{"format", "strait-job-record-1"},
                            {"argv", std::move(args)},
                            {"cwd", cwd.str()},
                            {"cluster_file", "cluster.yaml"},
                            {"cluster_source", clusterFile},
                            {"predicted_iteration_s", predictedIterationS},
                            {"ranks", std::move(ranks)},
                            {"links", std::move(links)}};
  if (evaluatedIterationS) {
    record["evaluated_plan"] = evaluatedPlanFile;
    record["evaluated_plan_iteration_s"] = *evaluatedIterationS;
  }
  std::string path = (dir + "/straitc.json").str();
  std::error_code ec;
  llvm::raw_fd_ostream out(path, ec);
  if (ec) {
    llvm::errs() << "straitc: cannot write " << path << ": " << ec.message() << "\n";
    return failure();
  }
  out << llvm::formatv("{0:2}", llvm::json::Value(std::move(record))) << "\n";
  std::string copy = (dir + "/cluster.yaml").str();
  if (std::error_code e = llvm::sys::fs::copy_file(clusterFile, copy)) {
    llvm::errs() << "straitc: cannot copy " << clusterFile << " to " << copy << ": "
                 << e.message() << "\n";
    return failure();
  }
  return success();
}
