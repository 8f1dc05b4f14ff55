//===- Export.h - Graph IR to per-device runtime programs -------*- C++ -*-===//
//
// Turns one function of graph ops into a strait.program.Program (kernels over
// values, steps), and writes a job folder (plan.pb, rankN.program.pb,
// rankN.params.pb) that strait-run executes. The runtime's protobuf schema
// (runtime/proto/strait_program.proto) is the only thing shared with it.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_TARGET_DEVICEPROGRAM_EXPORT_H
#define STRAIT_TARGET_DEVICEPROGRAM_EXPORT_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace strait::program {
class Program;
class ParameterShardFile;
class PlanManifest;
} // namespace strait::program

namespace strait {

struct RankExport {
  int rank = 0;
  std::string device = "cpu";
  std::string host = "localhost";
  std::string address;      ///< "ip:port" the rank listens on
  int stage = -1, replica = 0;
  mlir::func::FuncOp function; ///< the rank's graph function
};

/// Ranks of every pipeline stage by replica: stageRanks[s][r]. The peers of
/// dist.send/dist.recv are resolved through it: replica r of stage s talks to
/// replica r of the peer stage (unequal replica counts are an error).
using StageRanks = std::vector<std::vector<int>>;

/// How every rank orders its micro-batches.
struct PipelineOrder {
  bool oneFOneB = false; ///< else GPipe
  /// 1F1B warm-up forwards per stage (the planner's); empty: the classic
  /// min(S-1-s, M). The exporter takes max(classic, planned), non-increasing
  /// along the stages (a stage that warmed up more than the one before it
  /// would wait for a forward that stage runs after its backward) and at
  /// most M.
  std::vector<int64_t> warmup;
  /// The warm-up stage `stage` of `numStages` runs with M micro-batches.
  int64_t warmupOf(int64_t stage, int64_t numStages, int64_t microBatches) const;
};

/// Local-steps training (DiLoCo-like; straitc --local-steps): the data-parallel
/// replicas of a stage that span several bandwidth islands reduce their
/// gradients inside their island every iteration and average their parameter
/// change across islands every `localSteps` iterations with an outer
/// Nesterov-momentum step.
struct OuterSyncOptions {
  int64_t localSteps = 1; ///< 1: synchronous training (no OuterSync emitted)
  double lr = 0.7;
  double momentum = 0.9;
};

struct JobExportOptions {
  std::string modelName;
  std::string rendezvousAddress; ///< file-store folder; default: <out>/rendezvous
  int microBatches = 1;          ///< unrolled in every program
  uint64_t seed = 0;             ///< for parameters of shape-only models
  StageRanks stageRanks;         ///< for multi-stage jobs (dist ops)
  std::string planJSON;          ///< written as plan.json when not empty
  /// written as lora.json when not empty (straitc --lora: rank and alpha, which
  /// strait-run --save-params copies next to the adapters); an old one goes
  std::string loraJSON;
  /// Casts of parameters to bf16 / f16 run once (ROLE_PARAMETER_COPY values
  /// AdamW keeps up to date) instead of in every iteration.
  bool parameterCopies = true;
  /// Micro-batches in GPipe or 1F1B order (deferred transfers).
  PipelineOrder order;
  /// Local steps; see applyOuterSync.
  OuterSyncOptions outerSync;
};

/// With `options.localSteps` > 1: every all_reduce step of `program` whose
/// group spans two or more islands reduces inside the rank's island only
/// (ranks = that island, no islands, no codec), and `program.outer_sync`
/// records the group, its islands and codec (of the first such step) and
/// `channel`. Returns whether the program got an outer synchronization
/// (false: no all-reduce spans islands, or localSteps is 1).
bool applyOuterSync(program::Program &program, const OuterSyncOptions &options,
                    uint32_t channel);

/// Fills `program` from `func` (graph ops, func.return). Diagnostics name the
/// op that cannot be exported.
mlir::LogicalResult exportProgram(mlir::func::FuncOp func, int rank, int worldSize,
                                  llvm::StringRef device, program::Program &program);

/// Fills `program` for rank `self` of a multi-stage job: graph ops become
/// kernels in `run` steps, dist.send/recv become `send`/`recv` steps with the
/// peer ranks of `stageRanks`, dist.all_reduce an `all_reduce` step (in
/// place). With `microBatches` M > 1 the function is one micro-batch: batch
/// inputs hold M of them stacked along dimension 0 (sliced by kernels), every
/// op before the gradient accumulation runs M times in sequence (steps with
/// `micro_batch` set), the accumulated gradients' users once after them: in
/// GPipe order, or in 1F1B order (stage s runs order.warmupOf(s) forwards,
/// then a forward and a backward alternately; its transfers are deferred,
/// since the ranks' orders differ).
mlir::LogicalResult exportProgram(mlir::func::FuncOp func, const RankExport &self,
                                  int worldSize, const StageRanks &stageRanks,
                                  program::Program &program, int microBatches = 1,
                                  bool parameterCopies = true,
                                  const PipelineOrder &order = {});

/// 1F1B needs a pipeline whose transfers go one way per phase: the
/// forward's to later stages, the backward's to earlier ones (per-step
/// transfers aside). Returns the first transfer of the ranks' functions that
/// goes the other way, described for a diagnostic; nullopt when there is
/// none. (A stage that sends back to an earlier one in the forward would wait,
/// in 1F1B order, for its own backward of the previous micro-batch.)
std::optional<std::string> againstThePipeline(llvm::ArrayRef<RankExport> ranks);

/// Fills `shard` with the initial value (or init scheme) of every variable
/// that `program` names.
mlir::LogicalResult exportParameters(mlir::ModuleOp module,
                                     const program::Program &program, uint64_t seed,
                                     program::ParameterShardFile &shard);

/// Writes plan.pb and, per rank, rankN.program.pb and rankN.params.pb into
/// `outDir` (created). Nothing is left behind on failure.
mlir::LogicalResult writeJob(mlir::ModuleOp module, llvm::ArrayRef<RankExport> ranks,
                             llvm::StringRef outDir, const JobExportOptions &options);

/// The `producer` of a kernel list (a program whose kernels strait-probe
/// --kernels times one by one; each kernel's name is its signature).
inline constexpr llvm::StringLiteral kKernelListProducer = "straitc 0.1 kernel-list";

/// Exports `kernels` (buildKernelModule's @main) as a one-rank program for
/// `device` whose producer is kKernelListProducer and writes it to `path`.
mlir::LogicalResult writeKernelList(mlir::func::FuncOp kernels, llvm::StringRef path,
                                    llvm::StringRef device = "cpu");

} // namespace strait

#endif // STRAIT_TARGET_DEVICEPROGRAM_EXPORT_H
