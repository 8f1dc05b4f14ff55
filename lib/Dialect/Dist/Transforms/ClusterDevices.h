//===- ClusterDevices.h - The plan's devices in a cluster model -*- C++ -*-===//
//
// Internal to the dist transforms: passes that need link and device numbers
// after dist-assign-stages (islands, compression) load the cluster file the
// plan was made on and find each placement's devices in it by name.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_LIB_DIALECT_DIST_TRANSFORMS_CLUSTERDEVICES_H
#define STRAIT_LIB_DIALECT_DIST_TRANSFORMS_CLUSTERDEVICES_H

#include "strait/Analysis/ClusterModel.h"
#include "strait/Dialect/Dist/DistAttrs.h"

#include "mlir/IR/Operation.h"
#include "mlir/Support/LogicalResult.h"

#include <vector>

namespace strait::dist::detail {

/// Loads `file`; errors are emitted on `anchor`, naming `pass`.
mlir::FailureOr<ClusterModel> loadClusterFor(mlir::Operation *anchor,
                                             llvm::StringRef file, llvm::StringRef pass);

/// devices[s][r]: the cluster device of replica r of stage s. A device name
/// the cluster lacks is an error naming the stage and the file.
mlir::FailureOr<std::vector<std::vector<unsigned>>>
stageDevices(mlir::Operation *anchor, PlanAttr plan, const ClusterModel &cluster,
             llvm::StringRef file);

/// Islands of stage `devices` as rank groups (sorted, ordered by first
/// rank); empty when the replicas form one island or every island is a
/// single rank (then the hierarchy is the flat ring).
std::vector<std::vector<int64_t>> rankIslands(const ClusterModel &cluster,
                                              llvm::ArrayRef<unsigned> devices,
                                              llvm::ArrayRef<int64_t> ranks);

/// Islands for local steps (straitc --local-steps), where the islands
/// decide what synchronizes every step: rankIslands; when that is empty,
/// the bandwidth islands even when each holds one rank; else the sites of
/// the devices (two devices joined by one link show no bandwidth gap).
/// Empty when the replicas share one island and one site.
std::vector<std::vector<int64_t>> localStepIslands(const ClusterModel &cluster,
                                                   llvm::ArrayRef<unsigned> devices,
                                                   llvm::ArrayRef<int64_t> ranks);

} // namespace strait::dist::detail

#endif // STRAIT_LIB_DIALECT_DIST_TRANSFORMS_CLUSTERDEVICES_H
