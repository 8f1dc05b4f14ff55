//===- LossScale.cpp - Dynamic loss scaling in strait-run -----------------===//
//
// torch.amp.GradScaler.update() on the host (LossScale.h). Every rank runs
// the same rules on the same found_inf (each program agrees on it before
// its update: the gradient all-reduce carries an inf to every replica and
// pipeline stages exchange their flags), so the scales stay equal.
//
//===----------------------------------------------------------------------===//
#include "LossScale.h"

#include <cmath>
#include <sstream>

namespace strait {
namespace run {

using namespace strait::rt;

StatusOr<std::unique_ptr<LossScaler>> LossScaler::create(const program::Program &p,
                                                         Executor &exec) {
  if (!p.has_loss_scale())
    return std::unique_ptr<LossScaler>();
  const program::LossScale &c = p.loss_scale();
  auto bad = [&](const std::string &what) {
    return invalidArgument("program of rank " + std::to_string(p.rank()) +
                           ": loss_scale." + what);
  };
  if (!(c.init_scale() > 0) || !std::isfinite(c.init_scale()))
    return bad("init_scale must be a finite value > 0");
  if (c.dynamic() && (!(c.growth_factor() > 1) || !std::isfinite(c.growth_factor()) ||
                      !(c.backoff_factor() > 0) || !(c.backoff_factor() < 1) ||
                      c.growth_interval() < 1))
    return bad("growth_factor (> 1), backoff_factor (in (0, 1)) or growth_interval (>= 1) "
               "out of range");
  auto scaler = std::unique_ptr<LossScaler>(new LossScaler());
  scaler->config = c;
  scaler->exec = &exec;
  scaler->values[0] = c.init_scale();
  auto find = [&](const char *name, program::DType dtype, Tensor &out) -> Status {
    StatusOr<Tensor> t = exec.getValueByName(name);
    // A stage without the loss has no seed; one without AdamW no step
    // count. found_inf: every rank that updates variables.
    if (!t.isOk())
      return Status::ok();
    if (t->dtype != dtype || t->numel() != 1)
      return bad(std::string("value '") + name + "' must be a scalar of type " +
                 (dtype == program::DTYPE_F32 ? "f32" : "i64") + ", got " + t->typeString());
    out = *t;
    return Status::ok();
  };
  STRAIT_RETURN_IF_ERROR(find("loss_scale", program::DTYPE_F32, scaler->scaleIn));
  STRAIT_RETURN_IF_ERROR(find("optimizer_step", program::DTYPE_I64, scaler->stepIn));
  STRAIT_RETURN_IF_ERROR(find("found_inf", program::DTYPE_F32, scaler->foundOut));
  return scaler;
}

Status LossScaler::feed() {
  for (auto &[id, f] : exec->getFeedbackStreams())
    STRAIT_RETURN_IF_ERROR(f->beginIteration());
  if (scaleIn.data)
    scaleIn.as<float>()[0] = static_cast<float>(values[0]);
  if (stepIn.data)
    stepIn.as<int64_t>()[0] = static_cast<int64_t>(values[2]) + 1;
  return Status::ok();
}

StatusOr<bool> LossScaler::update() {
  ++iterations;
  double before = values[0];
  bool found = foundOut.data && foundOut.as<float>()[0] != 0;
  if (found) {
    ++skipped;
    values[1] = 0;
    if (config.dynamic()) // GradScaler computes the new scale in f32
      values[0] = static_cast<float>(values[0]) * config.backoff_factor();
    STRAIT_RETURN_IF_ERROR(followScale(true, before));
    return true;
  }
  values[2] += 1;
  if (config.dynamic() && ++values[1] >= config.growth_interval()) {
    float grown = static_cast<float>(values[0]) * config.growth_factor();
    if (std::isfinite(grown)) // GradScaler keeps S below f32's overflow
      values[0] = grown;
    values[1] = 0;
  }
  STRAIT_RETURN_IF_ERROR(followScale(false, before));
  return false;
}

Status LossScaler::followScale(bool wasSkipped, double before) {
  // Every error-feedback stream of a loss-scaled program carries S-scaled
  // gradients (straitc puts error feedback on weight gradients only): what
  // a residual holds is owed to later steps at the scale it was sent with.
  float factor = static_cast<float>(values[0] / before);
  for (auto &[id, f] : exec->getFeedbackStreams()) {
    if (wasSkipped)
      STRAIT_RETURN_IF_ERROR(f->rollBack());
    if (factor != 1.0f)
      STRAIT_RETURN_IF_ERROR(f->scaleResidual(factor));
  }
  return Status::ok();
}

std::string LossScaler::describe(bool wasSkipped) const {
  std::ostringstream s;
  s.precision(9); // an f32 S round-trips
  s << " scale " << values[0];
  if (wasSkipped)
    s << " skipped (" << skipped << " in all)";
  return s.str();
}

NamedTensors LossScaler::state() {
  Tensor t;
  t.dtype = program::DTYPE_F64;
  t.shape = {3};
  t.data = values;
  return {{"loss_scale.state", t}};
}

} // namespace run
} // namespace strait
