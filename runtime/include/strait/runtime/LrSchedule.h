//===- LrSchedule.h - Learning rate of a training step ----------*- C++ -*-===//
//
// The learning-rate schedule a program carries (Program.lr_schedule, see
// docs/program-format.md): linear warm-up to peak_lr over warmup_steps,
// then cosine decay to min_lr reached at total_steps (min_lr after it);
// total_steps = 0: peak_lr after the warm-up. The launcher evaluates it
// once per iteration and feeds the result to the input named "lr".
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LRSCHEDULE_H
#define STRAIT_RUNTIME_LRSCHEDULE_H

#include "strait/runtime/Status.h"
#include "strait_program.pb.h"

#include <cstdint>

namespace strait {
namespace rt {

/// Checks the fields: peak_lr > 0 and finite, 0 <= min_lr <= peak_lr,
/// warmup_steps >= 0, total_steps = 0 or > warmup_steps. Errors name the
/// field ("lr_schedule.min_lr: ...").
Status validateLrSchedule(const program::LrSchedule &schedule);

/// lr at the 1-based `step` (steps below 1 count as 1).
double learningRateAt(const program::LrSchedule &schedule, int64_t step);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LRSCHEDULE_H
