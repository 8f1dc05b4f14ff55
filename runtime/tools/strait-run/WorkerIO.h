//===- WorkerIO.h - What a rank reads and writes besides its steps -*- C++ -*-===//
//
// The worker's (Worker.cpp) data-input choice, --dump-outputs,
// --save-params and the --profile table.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUN_WORKERIO_H
#define STRAIT_RUN_WORKERIO_H

#include "StraitRun.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Program.h"

#include <string>
#include <vector>

namespace strait {
namespace run {

/// `path` relative to `dir` unless absolute.
std::string resolvePath(const std::string &dir, const std::string &path);

/// The ROLE_INPUT the data feeds on this rank ("" when none): --input-name,
/// else "input_ids" (token data), else the first integer (token data) or
/// floating-point (npy data) input that is not labels/step/lr; npy data for a
/// program without a float input feeds its integer one (input_ids first).
std::string pickDataInput(const program::Program &p, const RunOptions &o, bool tokens);

/// --input-name must be an input of some rank of this replica (a pipeline's
/// later stages lack it): a misspelt name fed nothing, training on zeros.
rt::Status checkInputName(const program::Program &p, const program::PlanManifest &m,
                          const program::RankEntry &entry, const RunOptions &o);

/// Writes every ROLE_OUTPUT, and the inputs the data fed (`fed`), as
/// DIR/<name>.rank<R>.npy ('/' and other odd characters of the name become
/// '_').
rt::Status dumpOutputs(const rt::Executor &exec, const program::Program &p, const RunOptions &o,
                       const std::vector<std::string> &fed);

/// The --profile table: per op type, launches and milliseconds per
/// iteration, the share of the iterations' wall time, and the bandwidth
/// its kernels reached (KernelContext::trafficBytes over their time).
void printProfile(rt::Executor &exec, int rank, int iterations, double wallMs);

/// Writes every ROLE_PARAMETER as DIR/<parameter_name>.rank<R>.npy (odd
/// characters of the name become '_'; `DIR/params.rank<R>.txt` lists
/// "file parameter_name" per line, so the exact names survive), and the
/// job's lora.json next to them.
rt::Status saveParameters(const rt::Executor &exec, const program::Program &p,
                          const RunOptions &o);

} // namespace run
} // namespace strait

#endif // STRAIT_RUN_WORKERIO_H
