//===- StageCost.h - The cost model shared by planners and baselines ------===//
//
// Internal to lib/Analysis. One stage on one chunk of devices: compute per
// micro-batch with heterogeneous replicas (the micro-batch is split in
// proportion to speed), gradient all-reduce, memory and the transfer to the
// next stage. The DP, the baselines and evaluateStages all call these, so
// the comparison between strategies is made under one model.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_LIB_ANALYSIS_STAGECOST_H
#define STRAIT_LIB_ANALYSIS_STAGECOST_H

#include "strait/Analysis/Partitioner.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace strait {
namespace detail {

/// All-reduce time as min over models of alpha + beta * bytes.
struct AllReduceModel {
  double alpha[2] = {0, 0}, beta[2] = {0, 0};
  double time(double bytes) const;
};

struct Chunk {
  std::vector<unsigned> devices;
  /// (speed class, replica count) for the classes present.
  std::vector<std::pair<unsigned, unsigned>> classes;
  AllReduceModel allReduce;
};

struct StageCost {
  double fwd = 0, bwd = 0, allReduce = 0, paramBytes = 0;
  /// Of paramBytes, those with a gradient (StagePlan::gradBytes).
  double gradBytes = 0;
  /// The optimizer step, once per iteration (every replica runs it).
  double update = 0;
  /// Most micro-batches whose activations fit on every replica; < 0 if the
  /// parameter state alone does not fit.
  double maxInFlight = 0;
  unsigned worstClass = 0; ///< class that bounds maxInFlight
};

struct CommCost {
  double latency = 0, bandwidth = 1e30; ///< aggregate over replica pairs
  unsigned link = 0;                    ///< slowest pair's link id
};

class PlanContext {
public:
  PlanContext(const CoarseGraph &graph, const ClusterModel &cluster,
              const PlannerOptions &options);

  Chunk makeChunk(std::vector<unsigned> devices) const;
  /// Stage of blocks [b0, b1) on the chunk, micro-batch of m samples;
  /// `recompute`: the backward first re-runs the forward of each block
  /// (its time is in bwd), and in flight only the blocks' inputs are kept.
  StageCost stageCost(unsigned b0, unsigned b1, const Chunk &chunk,
                      double m, bool recompute = false) const;
  CommCost comm(const Chunk &from, const Chunk &to) const;
  double commTime(const CommCost &c, unsigned cutAfter, double m) const;
  /// Micro-batches whose activations a stage keeps. 1F1B warms up with
  /// enough forwards to cover the round trip of a micro-batch through the
  /// rest of the pipeline (`cycle`: its compute and both transfers), so the
  /// stage never waits for a gradient in steady state: at least the stages
  /// left (classic 1F1B), at least cycle / stageTime, at most M.
  unsigned inFlight(Schedule schedule, unsigned microBatches,
                    unsigned stagesFromEnd, double cycle = 0,
                    double stageTime = 0) const {
    if (schedule == Schedule::GPipe)
      return microBatches;
    double cover = stageTime > 0 ? std::ceil(cycle / stageTime - 1e-9) : 0;
    double need = std::max<double>(stagesFromEnd, cover);
    return unsigned(std::min<double>(microBatches, need));
  }
  /// Memory of one replica of class c holding inFlight micro-batches.
  double memory(unsigned b0, unsigned b1, const Chunk &chunk, unsigned cls,
                double m, double inFlight, bool recompute = false) const;
  /// Per sample: what one in-flight micro-batch keeps in blocks [b0, b1),
  /// and the working set on top of it while one block runs.
  double keptBytes(unsigned b0, unsigned b1, bool recompute) const;
  double workingBytes(unsigned b0, unsigned b1, bool recompute) const;
  double capacity(unsigned cls) const;
  double shareOf(unsigned b0, unsigned b1, const Chunk &chunk,
                 unsigned cls) const;

  const CoarseGraph &graph;
  const ClusterModel &cluster;
  const PlannerOptions &options;
  unsigned numBlocks() const { return graph.blocks.size(); }
  double globalBatch = 1;
  /// With PlannerOptions::fixedReplicaBatch: the micro-batch count of
  /// stages of `replicas` replicas each (globalBatch / (graph batch x
  /// replicas)), 0 where that is not a whole number >= 1; -1 without it.
  int fixedMicroBatches(size_t replicas) const;

private:
  /// Parameter bytes of blocks [b0, b1), with the copies of tied weights
  /// whose first user is before b0.
  double paramBytes(unsigned b0, unsigned b1) const {
    return rangeSum(paramPrefix, b0, b1) + tiedCopyBytes(b0, b1);
  }
  /// Of paramBytes(b0, b1), those of trainable variables.
  double gradBytes(unsigned b0, unsigned b1) const {
    return paramBytes(b0, b1) - rangeSum(frozenPrefix, b0, b1) -
           tiedCopyBytes(b0, b1, /*frozenOnly=*/true);
  }
  /// Parameter state: the weights, and gradients and optimizer state of
  /// the trainable ones.
  double stateBytes(unsigned b0, unsigned b1) const;
  double tiedCopyBytes(unsigned b0, unsigned b1, bool frozenOnly = false) const;
  double rangeSum(const std::vector<double> &prefix, unsigned b0,
                  unsigned b1) const {
    return prefix[b1] - prefix[b0];
  }
  /// The largest of per-block values in a block range (sparse table, O(1)).
  struct RangeMax {
    /// table[k][b]: the largest value in [b, b + 2^k).
    std::vector<std::vector<double>> table;
    explicit RangeMax(std::vector<double> values);
    double operator()(unsigned b0, unsigned b1) const;
  };
  std::vector<std::vector<double>> fwdPrefix, bwdPrefix, updatePrefix;
  std::vector<double> paramPrefix, frozenPrefix, actPrefix;
  /// inputTable[b0 * (B + 1) + b1]: bytes per sample of the values that
  /// enter blocks [b0, b1) from earlier blocks or pass through them, each
  /// once: what a recomputing stage keeps per in-flight micro-batch.
  std::vector<double> inputTable;
  /// Block::workingBytes and Block::activationBytes.
  RangeMax workingMax{{}}, activationMax{{}};
};

/// Iteration time of a pipeline under the shared model (see docs):
/// sum of one micro-batch's latency through all stages and cuts plus the
/// largest steady-state load, (M-1) * t_j + all-reduce_j or (M-1) * x_cut.
struct PipelineTimes {
  double latency = 0, load = 0;
  double total() const { return latency + load; }
};

PartitionPlan evaluateWith(const PlanContext &ctx,
                           const std::vector<StageAssignment> &stages,
                           unsigned microBatches, Schedule schedule);
/// Best of evaluateWith over the micro-batch counts and schedules allowed.
PartitionPlan bestOverMicroBatches(const PlanContext &ctx,
                                   const std::vector<StageAssignment> &stages);
/// The DP over fixed chunks, best over micro-batch counts and schedules.
PartitionPlan bestOverChunks(const PlanContext &ctx,
                             const std::vector<std::vector<unsigned>> &chunks,
                             unsigned maxSkip);
std::vector<unsigned>
orderIslands(const ClusterModel &cluster,
             const std::vector<std::vector<unsigned>> &islands);
/// Uniform, PipeDream and DT-FM-like baselines (Baselines.cpp).
PartitionPlan planBaseline(const PlanContext &ctx,
                           const DeviceGrouping &grouping);

/// What stage j's once-per-iteration tail (all-reduce, tied exchange,
/// update) adds to the steady-state period of back-to-back iterations, as
/// the simulator runs them: a stage starts its next iteration after its own
/// tail, so stage 0's tail is paid in full, while a later stage's tail
/// overlaps the `cover` seconds between its last backward and the next
/// iteration's first forward reaching it (the backward chain down to stage
/// 0 and the forward chain back up) and counts only beyond them. The
/// iteration time is latency + period + the largest of these.
inline double steadyTail(double tail, unsigned j, double cover) {
  return j == 0 ? tail : std::max(0.0, tail - cover);
}

/// "1.23 GiB".
inline std::string formatGiB(double bytes) {
  return llvm::formatv("{0:f2} GiB", bytes / double(1ull << 30)).str();
}

} // namespace detail
} // namespace strait

#endif // STRAIT_LIB_ANALYSIS_STAGECOST_H
