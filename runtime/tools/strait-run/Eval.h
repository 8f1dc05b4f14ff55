//===- Eval.h - Held-out loss during training (strait-run --eval-data) -*- C++ -*-===//
//
// Every --eval-every K steps, and after the last, each rank runs the forward
// steps of its training program (and the transfers between them) on the same
// --eval-batches batches of a held-out file: no backward, no all-reduce, no
// optimizer update, so the parameters and optimizer states are untouched and
// training continues bit-identically. The ranks with the loss (the last
// stage) report its mean over the batches' micro-batches.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_STRAITRUN_EVAL_H
#define STRAIT_RUNTIME_TOOLS_STRAITRUN_EVAL_H

#include "strait/runtime/Status.h"

#include <cstdint>
#include <map>
#include <vector>

namespace strait {
namespace rt {
class Executor;
class Communicator;
} // namespace rt
namespace program {
class Program;
} // namespace program
namespace run {

/// The steps of one iteration that an evaluation runs: the "forward ..." run
/// steps, the sends of values they (or no kernel) produce and the receives of
/// values they read; `lossOf` maps those among them whose kernels write the
/// loss ("loss", or a micro-batch's "loss.mb<m>") to that value's id.
/// InvalidArgument when the program cannot be evaluated this way (AQ-SGD or
/// adaptive top-k transfers, whose state follows the training batches; no
/// forward step), naming the reason.
rt::Status evaluationSteps(const program::Program &p, std::vector<int> &steps,
                           std::map<int, uint32_t> &lossOf);

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_STRAITRUN_EVAL_H
