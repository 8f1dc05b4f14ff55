//===- AqSgdRun.h - strait-run's AQ-SGD state: setup and checkpoints -*- C++ -*-===//
//
// A rank whose program sends or receives with an AQ-SGD codec (AqSgd.h)
// keeps m(x) per cut and dataset sample. This file makes that state for the
// rank (CPU ranks with --data: the samples of each batch come from the data
// loader, for the data input shape of the rank's replica), and saves / restores it with the checkpoints: every rank
// writes its own under step-N/rank<R>/aqsgd/ (index.tsv, then per stream
// <name>.m.npy, the f16 bits as u16 [samples, row], and <name>.seen.npy,
// u8 [samples]), before writeCheckpoint marks the folder complete.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUN_AQSGDRUN_H
#define STRAIT_RUN_AQSGDRUN_H

#include "Checkpoint.h"
#include "DataLoader.h"
#include "Devices.h"
#include "strait/runtime/AqSgd.h"
#include "strait/runtime/Executor.h"

#include <memory>
#include <string>

namespace strait {
namespace run {

/// The most bytes a rank's AQ-SGD state may take (2 GiB): a larger one is
/// refused, naming the cut and its bytes.
constexpr uint64_t kAqSgdMaxBytes = 2ull << 30;

/// The state for `exec` (which uses an AQ-SGD codec), given to it, over the
/// loader's samples for a data input of `dataShape` (this replica's, read
/// by its first stage: empty when unknown). Errors name the rank and why
/// there is no sample identity (no --data, no data input in the replica, a
/// GPU rank).
rt::StatusOr<std::unique_ptr<rt::AqSgdState>>
createAqSgd(rt::Executor &exec, const DeviceSpec &device, rt::data::DataLoader *loader,
            const rt::Shape &dataShape, int rank);

/// Writes `state` into ROOT/step-STEP/rank<RANK>/aqsgd/ (first removing the
/// step folder's completion marker, which writeCheckpoint writes last).
rt::Status saveAqSgd(const rt::AqSgdState &state, const std::string &root, int64_t step,
                     int rank);

/// Restores `state` from checkpoint `c`; the note to print.
rt::StatusOr<std::string> loadAqSgd(rt::AqSgdState &state, const CheckpointRef &c, int rank);

} // namespace run
} // namespace strait

#endif // STRAIT_RUN_AQSGDRUN_H
