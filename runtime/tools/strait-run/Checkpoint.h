//===- Checkpoint.h - Training checkpoints of strait-run --------*- C++ -*-===//
//
// A checkpoint is the training state after step N: every parameter and
// every optimizer state (AdamW's moments, SGD's velocity) of the job, by
// name, so that a job can resume from it under the same plan or under
// another one (re-planned for a changed cluster). Layout:
//
//   ROOT/step-N/checkpoint.json   written last, by rank 0, after every rank
//                                 wrote its files: a step folder without it
//                                 is incomplete and never resumed from
//   ROOT/step-N/rank<R>/index.tsv "file<TAB>dtype<TAB>shape<TAB>name" lines
//   ROOT/step-N/rank<R>/<name>.npy
//
// Only the first data-parallel replica writes (the replicas hold the same
// values); the pipeline stages of that replica write their own variables.
// See docs/runtime.md, "Checkpoints and restarts".
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_CHECKPOINT_H
#define STRAIT_RUNTIME_TOOLS_CHECKPOINT_H

#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Status.h"

#include <cstdint>
#include <string>
#include <vector>

namespace strait {
namespace run {

/// mkdir -p (errors surface when the files are written).
void makeDirs(const std::string &path);

/// A complete checkpoint: its step folder, the step it holds and the ranks
/// whose folders it is made of.
struct CheckpointRef {
  std::string dir;
  int64_t step = 0;
  std::vector<int> writers;
};

/// The checkpoint `path` names: a complete step folder itself, or the
/// newest complete step-N folder under it. NotFound when there is none
/// (naming the incomplete folders skipped); InvalidArgument for a malformed
/// checkpoint.json (naming the file).
rt::StatusOr<CheckpointRef> findCheckpoint(const std::string &path);

/// Writes this rank's parameters and optimizer states after step `step`
/// into ROOT/step-N/rank<R>/ (when `writes`: the rank belongs to the first
/// replica), then waits on `comm` (may be null for one rank) for every rank,
/// and rank 0 writes checkpoint.json listing `writers`. Returns the step
/// folder. IoError naming the file on a failed write.
rt::StatusOr<std::string> writeCheckpoint(const rt::Executor &exec, const std::string &root,
                                          int64_t step, int rank, int worldSize, bool writes,
                                          const std::vector<int> &writers,
                                          rt::Communicator *comm);

/// Overwrites every parameter and optimizer state of `exec`'s program with
/// the checkpoint's value of the same name (shape and dtype must match), and
/// makes the next run() refill the parameters' 16-bit copies. Errors name
/// the variable and the file: a variable the checkpoint lacks, a shape or
/// dtype mismatch, an unreadable file.
rt::Status loadCheckpoint(rt::Executor &exec, const CheckpointRef &checkpoint);

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_CHECKPOINT_H
