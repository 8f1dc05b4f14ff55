//===- Simulator.h - Discrete-event simulation of a plan -------*- C++ -*-===//
//
// Replays one training iteration of a PartitionPlan: each stage runs its
// forward and backward micro-batches in schedule order (GPipe or 1F1B),
// activations and their gradients cross the stage cuts as flows that share
// a link's bandwidth fairly while they overlap, and each stage all-reduces
// its gradients after its last backward. Reports the iteration time, the
// bubble fraction and per-link utilization, and can write the timeline as
// JSON for bench/planner/plot_timeline.py.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_SIMULATOR_H
#define STRAIT_ANALYSIS_SIMULATOR_H

#include "strait/Analysis/Compression.h"
#include "strait/Analysis/Partitioner.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace strait {

struct TimelineEvent {
  enum class Kind { Forward, Backward, SendActivation, SendGradient, AllReduce };
  Kind kind = Kind::Forward;
  unsigned stage = 0;      ///< stage that computes, or that sends
  unsigned microBatch = 0;
  double start = 0, end = 0;
};
llvm::StringRef stringifyEventKind(TimelineEvent::Kind kind);

struct LinkUsage {
  std::string name; ///< link origin and direction
  double bytes = 0, busySeconds = 0;
  double utilization = 0; ///< bytes / (bandwidth * iteration time)
};

struct SimulationResult {
  /// The steady-state period of back-to-back iterations (what a training
  /// loop measures per step): a stage starts its next iteration after its
  /// own tail (all-reduce, tied-gradient wait, update), so a later stage's
  /// tail overlaps the next iteration's first forwards upstream.
  double iterationTime = 0;
  /// One iteration from an empty pipeline: the span of `events`.
  double firstIterationTime = 0;
  double bubbleFraction = 0; ///< idle share of stage time in the first iteration
  std::vector<TimelineEvent> events;
  std::vector<LinkUsage> links;
};

/// Simulates the plan's iterations; the plan must have at least one stage.
/// Events, bubble fraction and link usage are the first iteration's. With
/// `compression`, each cut carries its codec's wire bytes per direction,
/// its flows wait the codec's encode + decode time on top of the latency,
/// and each stage's all-reduce takes its compressed time.
llvm::Expected<SimulationResult>
simulatePlan(const PartitionPlan &plan, const ClusterModel &cluster,
             const PlanCompression *compression = nullptr);

/// Writes {iteration_time, bubble_fraction, stages, events, links} as JSON.
llvm::Error writeTimelineJSON(const SimulationResult &result,
                              const PartitionPlan &plan,
                              const ClusterModel &cluster,
                              llvm::StringRef path);

} // namespace strait

#endif // STRAIT_ANALYSIS_SIMULATOR_H
