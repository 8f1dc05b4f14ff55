//===- JobRecord.h - What straitc records in a job folder -------*- C++ -*-===//
//
// DIR/straitc.json and DIR/cluster.yaml: the command that compiled the job,
// the cluster file it planned for, which device and host each rank runs on,
// the bandwidth and latency the plan assumed between every two ranks on
// different hosts, and the predicted iteration time. strait-run --replan
// reads them to notice links that no longer deliver what the plan assumed and
// to re-run this command on a cluster file with the measured links
// (docs/runtime.md, "Re-planning when links change").
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_TOOLS_STRAITC_JOBRECORD_H
#define STRAIT_TOOLS_STRAITC_JOBRECORD_H

#include "strait/Analysis/ClusterModel.h"
#include "strait/Dialect/Dist/DistOps.h"
#include "mlir/Support/LogicalResult.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <optional>
#include <string>

namespace strait {

/// Writes DIR/straitc.json (keys sorted: the same command gives the same
/// bytes) and copies `clusterFile` to DIR/cluster.yaml; errors go to stderr.
/// With `evaluatedIterationS` (straitc --evaluate-plan FILE): also the
/// predicted iteration of FILE's plan on this cluster.
mlir::LogicalResult writeJobRecord(llvm::StringRef dir, llvm::ArrayRef<std::string> argv,
                                   llvm::StringRef clusterFile, const ClusterModel &cluster,
                                   dist::PlanAttr plan, double predictedIterationS,
                                   llvm::ArrayRef<double> feedbackBytes,
                                   llvm::StringRef evaluatedPlanFile = "",
                                   std::optional<double> evaluatedIterationS = std::nullopt);

} // namespace strait

#endif // STRAIT_TOOLS_STRAITC_JOBRECORD_H
