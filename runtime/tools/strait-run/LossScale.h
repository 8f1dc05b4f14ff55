//===- LossScale.h - Dynamic loss scaling in strait-run ---------*- C++ -*-===//
//
// The launcher's half of loss scaling (straitc --loss-scale, docs/training.md
// "Loss scaling"): the program seeds its backward with the f32 input
// "loss_scale", unscales the gradients, flags inf/nan in the f32 output
// "found_inf" and skips its optimizer update on a flagged iteration; this
// class keeps the scale, the count of finite iterations in a row and the
// count of updates made (AdamW's "optimizer_step"), with GradScaler's rules.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_RUNTIME_TOOLS_LOSSSCALE_H
#define STRAIT_RUNTIME_TOOLS_LOSSSCALE_H

#include "Checkpoint.h"

#include "strait/runtime/Executor.h"
#include "strait_program.pb.h"

#include <memory>
#include <string>

namespace strait {
namespace run {

class LossScaler {
public:
  /// Null when `program` has no loss scaling; InvalidArgument naming the
  /// field for a bad LossScale or missing inputs/outputs.
  static rt::StatusOr<std::unique_ptr<LossScaler>> create(const program::Program &program,
                                                          rt::Executor &exec);
  /// Writes the scale and the next update's step count into the program's
  /// inputs (before each run()), and has the error-feedback streams keep
  /// their residuals (ErrorFeedback::beginIteration).
  rt::Status feed();
  /// Reads found_inf after a run(): a skipped iteration backs the scale off,
  /// growthInterval finite ones in a row grow it. Returns whether the
  /// iteration was skipped. The error-feedback residuals hold scaled
  /// gradients: a skipped iteration's encodes are rolled back, and a new
  /// scale multiplies them by new / old.
  rt::StatusOr<bool> update();
  /// " scale S" and, on a skipped iteration, " skipped (N in all)".
  std::string describe(bool skipped) const;
  /// The state a checkpoint holds (f64 [scale, finite in a row, updates]),
  /// under the key "loss_scale.state"; the tensor aliases this object.
  NamedTensors state();
  double getScale() const { return values[0]; }
  int64_t getSkipped() const { return skipped; }
  /// A resumed job: iterations already run (the skipped count's base).
  void setIterations(int64_t n) { iterations = n; skipped = n - int64_t(values[2]); }

private:
  rt::Status followScale(bool skipped, double before);

  program::LossScale config;
  rt::Executor *exec = nullptr;
  rt::Tensor scaleIn, stepIn, foundOut;
  double values[3] = {0, 0, 0}; // scale, finite iterations in a row, updates made
  int64_t iterations = 0, skipped = 0;
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_LOSSSCALE_H
