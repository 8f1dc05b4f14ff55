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
//   ROOT/step-N/rank<R>/feedback/     error-feedback residuals (every rank
//                                 that has any; see loadFeedback)
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
#include <utility>
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

/// Named f32 state kept outside the program's values (the outer step's
/// theta_outer and momentum under local steps), saved next to them.
using NamedTensors = std::vector<std::pair<std::string, rt::Tensor>>;

/// Writes this rank's parameters and optimizer states after step `step`
/// into ROOT/step-N/rank<R>/ (when `writes`: the rank belongs to the first
/// replica, or every rank under local steps, where each island trains its
/// own copy), and `extra`, then waits on `comm` (may be null for one rank)
/// for every rank, and rank 0 writes checkpoint.json listing `writers` and
/// any other rank whose folder it finds written. Returns the step folder.
/// IoError naming the file on a failed write.
rt::StatusOr<std::string> writeCheckpoint(const rt::Executor &exec, const std::string &root,
                                          int64_t step, int rank, int worldSize, bool writes,
                                          const std::vector<int> &writers,
                                          rt::Communicator *comm,
                                          const NamedTensors &extra = {});

/// Overwrites every parameter and optimizer state of `exec`'s program with
/// the checkpoint's value of the same name (shape and dtype must match), and
/// makes the next run() refill the parameters' 16-bit copies. A value is
/// taken from rank `rank`'s folder when that rank wrote one (local steps:
/// islands hold different values), else from the first writer holding it.
/// Each tensor of `extra` is filled likewise when the checkpoint holds it;
/// returns how many it held. Errors name the variable and the file: a
/// variable the checkpoint lacks, a shape or dtype mismatch, an unreadable
/// file.
rt::StatusOr<size_t> loadCheckpoint(rt::Executor &exec, const CheckpointRef &checkpoint,
                                    int rank = -1, const NamedTensors &extra = {});

/// The error-feedback residuals of `exec`'s lossy sends and all-reduces
/// (the part of a compressed stream that was not sent yet), which
/// writeCheckpoint saves in ROOT/step-N/rank<R>/feedback/ for every rank
/// that has any (each replica's residuals are its own), with a fingerprint
/// of the rank's program. loadFeedback restores them when this rank's
/// program is the one that wrote them, so a compressed job resumes
/// bit-identically; under another plan (or from a checkpoint written
/// before residuals were saved) they start at zero, as in a new job. The
/// result says which, for the rank's log. Errors name the file: a residual
/// file that does not match its index, an unreadable file.
rt::StatusOr<std::string> loadFeedback(rt::Executor &exec, const CheckpointRef &checkpoint,
                                       int rank);

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_CHECKPOINT_H
