//===- LrSchedule.cpp - Learning rate of a training step ------------------===//
//
// Warm-up then cosine decay, as GPT-2/nanoGPT and torch's
// LinearLR + CosineAnnealingLR chain compute it (see LrSchedule.h).
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/LrSchedule.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace strait {
namespace rt {

Status validateLrSchedule(const program::LrSchedule &s) {
  auto bad = [](const std::string &field, const std::string &why) {
    return invalidArgument("lr_schedule." + field + ": " + why);
  };
  if (!(s.peak_lr() > 0) || !std::isfinite(s.peak_lr()))
    return bad("peak_lr", std::to_string(s.peak_lr()) + " is not a finite value > 0");
  if (!(s.min_lr() >= 0) || s.min_lr() > s.peak_lr())
    return bad("min_lr", std::to_string(s.min_lr()) + " is not in [0, peak_lr]");
  if (s.warmup_steps() < 0)
    return bad("warmup_steps", std::to_string(s.warmup_steps()) + " is negative");
  if (s.total_steps() < 0 || (s.total_steps() > 0 && s.total_steps() <= s.warmup_steps()))
    return bad("total_steps", std::to_string(s.total_steps()) +
                                  " is neither 0 nor greater than warmup_steps");
  return Status::ok();
}

double learningRateAt(const program::LrSchedule &s, int64_t step) {
  step = std::max<int64_t>(step, 1);
  double peak = s.peak_lr(), low = s.min_lr();
  if (step <= s.warmup_steps())
    return peak * static_cast<double>(step) / static_cast<double>(s.warmup_steps());
  if (s.total_steps() <= 0)
    return peak;
  if (step >= s.total_steps())
    return low;
  double progress = static_cast<double>(step - s.warmup_steps()) /
                    static_cast<double>(s.total_steps() - s.warmup_steps());
  return low + 0.5 * (peak - low) * (1.0 + std::cos(M_PI * progress));
}

} // namespace rt
} // namespace strait
