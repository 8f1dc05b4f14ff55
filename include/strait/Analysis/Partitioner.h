//===- Partitioner.h - Pipeline + data-parallel partitioning ---*- C++ -*-===//
//
// The planner as a pure analysis: coarsen the cost graph to layers, group
// devices into bandwidth islands, and choose pipeline stages over islands
// with data-parallel replicas inside them, the micro-batch count and the
// schedule, minimizing the predicted iteration time under every device's
// memory. Baselines (uniform split, homogeneous PipeDream DP, DT-FM-like
// search) sit behind the same entry point and the same cost model.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_PARTITIONER_H
#define STRAIT_ANALYSIS_PARTITIONER_H

#include "strait/Analysis/ClusterModel.h"
#include "strait/Analysis/CostGraph.h"
#include "strait/Analysis/Grouping.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace strait {

enum class Schedule { GPipe, OneFOneB };
enum class PlannerStrategy { Strait, Uniform, PipeDream, DTFM };
/// Block-level activation recomputation (docs/planner.md, "Activation
/// recomputation"): none; full, every stage; auto, only where nothing fits
/// without it, and then only in the stages that do not fit.
enum class RecomputeMode { None, Auto, Full };
llvm::StringRef stringifySchedule(Schedule schedule);
llvm::StringRef stringifyStrategy(PlannerStrategy strategy);

struct MemoryOptions {
  /// Gradient and optimizer-state bytes per parameter byte (Adam keeps two
  /// moments in the parameter dtype: 2).
  double gradBytesPerParamByte = 1;
  double optimizerBytesPerParamByte = 2;
  /// Fraction of each device's memory kept free (workspace, fragmentation).
  double reserveFraction = 0.1;
};

struct PlannerOptions {
  PlannerStrategy strategy = PlannerStrategy::Strait;
  /// Samples per iteration; 0 means the cost graph's own batch.
  double globalBatch = 0;
  /// Micro-batch counts to try; empty means powers of two up to the batch.
  std::vector<unsigned> microBatchCounts;
  /// The job runs the cost graph's batch on every replica in every
  /// micro-batch (straitc's exporter with --global-batch): a pipeline whose
  /// stages have R replicas each runs M = globalBatch / (batch x R)
  /// micro-batches, and only such pipelines (equal replica counts, M a
  /// whole number) run. Every strategy then plans and scores each
  /// configuration at that M instead of at microBatchCounts.
  bool fixedReplicaBatch = false;
  std::vector<Schedule> schedules = {Schedule::OneFOneB, Schedule::GPipe};
  MemoryOptions memory;
  GroupingOptions grouping;
  /// Layers are merged into at most this many pipeline blocks.
  unsigned maxBlocks = 64;
  /// Chunks a pipeline may skip between consecutive stages (per island).
  unsigned maxSkip = 4;
  /// Most pipeline stages one island may be split into.
  unsigned maxStagesPerIsland = 16;
  /// The DP tries bounds on the pipeline period and on the all-reduce time;
  /// when the distinct candidate values are at most `exhaustiveLimit` it
  /// tries them all (then, with memory not binding, the DP is exact for its
  /// search space).
  unsigned exhaustiveLimit = 12;
  /// Otherwise bounds step geometrically by this ratio: the plan found is
  /// within about (ratio - 1) of the best over the grid's bounds.
  double boundRatio = 1.15;
  /// DT-FM-like baseline: local-search swap attempts.
  unsigned searchIterations = 400;
  uint64_t seed = 1;
  /// Local steps H (straitc --local-steps): replicas that span several
  /// bandwidth islands average across them once per H iterations, so the
  /// inter-island phase of their hierarchical all-reduce costs 1/H per
  /// iteration (the intra-island reduction still runs every iteration).
  unsigned localSteps = 1;
  /// Which stages keep only their blocks' inputs per in-flight micro-batch
  /// and recompute each block's forward before its backward.
  RecomputeMode recompute = RecomputeMode::None;
};

/// The layer-coarsened graph: a chain of blocks in topological order.
struct CoarseGraph {
  struct Block {
    std::vector<unsigned> nodes;
    double fwdFlops = 0, bwdFlops = 0;
    double paramBytes = 0;
    double frozenBytes = 0; ///< of paramBytes: no gradient (CostNode)
    double activationBytes = 0; ///< per sample, kept for backward
    /// Per sample: twice the largest forward result of one op of the block
    /// (that result and its gradient), the working set on top of what is
    /// kept while one micro-batch runs the block.
    double workingBytes = 0;
  };
  std::vector<Block> blocks;
  /// cutBytes[i]: bytes per sample on edges crossing the cut after block i
  /// (an edge spanning several cuts is relayed and counted at each).
  std::vector<double> cutBytes;
  /// Values passed between blocks: produced in block `from`, read up to
  /// block `to` (> from), bytes per sample. A stage that recomputes keeps,
  /// per in-flight micro-batch, the values entering any of its blocks, each
  /// once however many of its blocks read it.
  struct Span {
    unsigned from = 0, to = 0;
    double bytes = 0;
  };
  std::vector<Span> spans;
  /// Weights whose users fall in several blocks (CostGraph::sharedWeights):
  /// a stage holding one of `blocks` but not the first holds a copy.
  struct TiedWeight {
    std::string name;
    double bytes = 0;
    std::vector<unsigned> blocks; ///< sorted, distinct
    bool frozen = false; ///< no gradient exchange between the copies
  };
  std::vector<TiedWeight> tied;
  /// Seconds per sample of each block, per speed class: [class][block].
  std::vector<std::vector<double>> fwdTime, bwdTime;
  /// Seconds per iteration of each block's optimizer step (accumulation,
  /// update), whatever the batch: [class][block]. Empty: none.
  std::vector<std::vector<double>> updateTime;
  double batchSamples = 1;
  unsigned numLayers = 0; ///< blocks before merging
};

llvm::Expected<CoarseGraph> coarsenGraph(const CostGraph &graph,
                                         const ClusterModel &cluster,
                                         unsigned maxBlocks);

struct StagePlan {
  unsigned firstBlock = 0, endBlock = 0; ///< blocks [first, end)
  std::vector<unsigned> devices;         ///< data-parallel replicas
  std::vector<double> shares;            ///< micro-batch share per replica
  double fwdTime = 0, bwdTime = 0;       ///< per micro-batch
  double paramBytes = 0, allReduceTime = 0;
  /// Of paramBytes, those with a gradient (all but frozen variables): what
  /// the all-reduce carries and what gradients and optimizer state cost.
  double gradBytes = 0;
  /// The optimizer step after the all-reduce, once per iteration, on the
  /// slowest replica.
  double updateTime = 0;
  /// Copies of tied weights this stage holds (included in paramBytes) and
  /// the once-per-iteration exchange of partial gradients with the other
  /// copies' stages (after the all-reduce).
  double tiedBytes = 0, tiedExchangeTime = 0;
  /// To the next stage, per micro-batch and direction.
  double sendBytes = 0, sendTime = 0;
  /// Latency and aggregate bandwidth over all replica pairs of the cut.
  double sendLatency = 0, sendBandwidth = 0;
  unsigned sendLink = 0; ///< link id of the slowest replica pair
  double peakMemory = 0, capacity = 0;
  unsigned peakMemoryDevice = 0;
  unsigned inFlight = 0; ///< micro-batches whose activations are alive
  /// The stage recomputes its blocks' forward in the backward (bwdTime
  /// includes it; in flight, only the blocks' inputs are kept).
  bool recompute = false;
};

struct PartitionPlan {
  PlannerStrategy strategy = PlannerStrategy::Strait;
  bool feasible = false;
  std::string message; ///< why no plan fits (device and constraint)
  Schedule schedule = Schedule::OneFOneB;
  unsigned microBatches = 1;
  double globalBatch = 0, microBatchSamples = 0;
  std::vector<StagePlan> stages;
  int groupingLevel = -1;
  unsigned numIslands = 0;
  /// The steady-state period of back-to-back iterations (the planner's
  /// objective): one micro-batch's latency + (M - 1) x the slowest stage or
  /// cut + stage 0's tail, or a later stage's where it outlasts the chains
  /// before it (docs/planner.md, section 5).
  double iterationTime = 0, bubbleFraction = 0, throughput = 0;
  /// One iteration from an empty pipeline with the largest stage tail at
  /// its end (the objective before session 14; >= iterationTime).
  double oneIterationTime = 0;
  double planningSeconds = 0;
};

/// Plans the graph on the cluster with options.strategy. Bad input (a
/// cyclic graph, an empty cluster) is an error; a model that fits nowhere
/// is a plan with feasible = false and a message naming the device and the
/// constraint that failed.
llvm::Expected<PartitionPlan> planPartition(const CostGraph &graph,
                                            const ClusterModel &cluster,
                                            const PlannerOptions &options);

//===----------------------------------------------------------------------===//
// Lower-level entry points (baselines, tests, passes that apply a plan).
//===----------------------------------------------------------------------===//

struct StageAssignment {
  unsigned firstBlock = 0, endBlock = 0;
  std::vector<unsigned> devices;
};

/// Fills times, memory and the iteration time of the given stages under the
/// shared cost model; feasible is false (with a message) if memory fails.
PartitionPlan evaluateStages(const CoarseGraph &graph,
                             const ClusterModel &cluster,
                             const PlannerOptions &options,
                             const std::vector<StageAssignment> &stages,
                             unsigned microBatches, Schedule schedule);

/// The heterogeneous DP over an ordered list of device chunks: stages are
/// contiguous block ranges, each on one chunk, chunks used in order with at
/// most `maxSkip` - 1 unused chunks between consecutive stages.
PartitionPlan planOverChunks(const CoarseGraph &graph,
                             const ClusterModel &cluster,
                             const PlannerOptions &options,
                             const std::vector<std::vector<unsigned>> &chunks,
                             unsigned maxSkip, unsigned microBatches,
                             Schedule schedule);

/// Human-readable plan: one line per stage (devices, blocks, times, memory,
/// the link to the next stage).
std::string formatPlan(const PartitionPlan &plan, const ClusterModel &cluster);

} // namespace strait

#endif // STRAIT_ANALYSIS_PARTITIONER_H
