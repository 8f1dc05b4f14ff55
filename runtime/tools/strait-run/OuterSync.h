//===- OuterSync.h - Local steps: the outer step across islands -*- C++ -*-===//
//
// Local-steps training (DiLoCo-like; straitc --local-steps H): the program's
// gradient all-reduce runs inside this rank's bandwidth island only, so the
// islands train apart; every H iterations (and after the last one) every
// rank of the data-parallel group runs the outer step on each trainable
// parameter theta of its program:
//
//   delta = theta_outer - theta
//   delta = mean of delta over the group (hierarchical all-reduce over the
//           program's islands, its codec on the inter-island phase)
//   m = momentum * m + delta
//   theta = theta_outer - lr * (delta + momentum * m)     (Nesterov)
//   theta_outer = theta
//
// theta_outer and m are this class's state (host memory, f32); checkpoints
// save and restore them through state(). The inner optimizer's state
// (AdamW's moments) is not touched. See docs/runtime.md, "Local steps".
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_TOOLS_OUTERSYNC_H
#define STRAIT_RUNTIME_TOOLS_OUTERSYNC_H

#include "strait/runtime/Codec.h"
#include "strait/runtime/Communicator.h"
#include "strait/runtime/Executor.h"
#include "strait/runtime/Status.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace strait {
namespace run {

class OuterSync {
public:
  /// The outer synchronization of `exec`'s program, or null when the
  /// program has none (program.outer_sync unset). Validates the message
  /// (local_steps >= 2, lr > 0, momentum in [0, 1), this rank in `ranks`,
  /// islands a partition of them, the codec) and finds the trainable
  /// parameters: ROLE_PARAMETER values a kernel of a per-iteration step
  /// writes (the optimizer's update; frozen weights are only read). Errors
  /// name the field; the caller adds the rank.
  static rt::StatusOr<std::unique_ptr<OuterSync>>
  create(rt::Executor &exec, rt::Communicator *comm);

  /// theta_outer = the parameters' current values, m = 0: the state of a
  /// fresh job (call after the parameters are loaded).
  void reset();
  /// Whether the outer step runs after 1-based iteration `step` of a job
  /// whose last iteration is `lastStep`: every local_steps-th and the last
  /// (unless `atLast` is false).
  bool dueAfter(int64_t step, int64_t lastStep, bool atLast = true) const;
  /// The outer step, on every rank of the group at the same iteration.
  rt::Status step();

  /// Named views of the state for checkpoints: "outer_sync.theta/<name>"
  /// and "outer_sync.momentum/<name>" for each trainable parameter.
  std::vector<std::pair<std::string, rt::Tensor>> state();

  int64_t getLocalSteps() const { return localSteps; }
  size_t getNumParameters() const { return params.size(); }
  uint64_t getParameterBytes() const;

private:
  struct Param {
    std::string name;
    uint32_t id = 0;
    rt::Shape shape;
    int64_t numel = 0;
    std::vector<float> outer, momentum;
  };
  OuterSync(rt::Executor &exec, rt::Communicator *comm) : exec(exec), comm(comm) {}
  /// Averages `bucket` (deltas) over the group, in place.
  rt::Status reduce(const rt::Tensor &bucket, size_t bucketIndex);

  rt::Executor &exec;
  rt::Communicator *comm;
  int64_t localSteps = 1;
  float lr = 0.7f, momentum = 0.9f;
  uint32_t channel = 0;
  bool inPlace = false; ///< one parameter per all-reduce, in its own buffer
  rt::AllReduceOptions options;
  std::vector<Param> params;
  /// Error feedback of each bucket's inter-island codec.
  std::vector<std::unique_ptr<rt::ErrorFeedback>> feedback;
};

} // namespace run
} // namespace strait

#endif // STRAIT_RUNTIME_TOOLS_OUTERSYNC_H
