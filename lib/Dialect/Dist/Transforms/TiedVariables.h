//===- TiedVariables.h - Trained variables read by several stages -*- C++ -*-===//
//
// Internal to dist-assign-stages: a variable the step trains whose forward
// (and backward) reads serve several pipeline stages (GPT-2's tied
// embedding / LM-head weight) gets one copy per such stage instead of being
// sent from its owner every micro-batch. See docs/distribution-dialect.md,
// "Tied variables across stages".
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_LIB_DIALECT_DIST_TRANSFORMS_TIEDVARIABLES_H
#define STRAIT_LIB_DIALECT_DIST_TRANSFORMS_TIEDVARIABLES_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/StringSet.h"

#include <map>

namespace strait::dist::detail {

/// What splitGlobalNormClips leaves for replicateTiedVariables.
struct StageClips {
  /// The sums of squares of single gradients (the norm's terms): the update
  /// of a replicated variable does not include them; its gradient is
  /// counted once, in the stage of the original accumulation.
  llvm::DenseSet<mlir::Operation *> normTerms;
  /// A stage's clip scale -> the same scale computed in each stage.
  llvm::DenseMap<mlir::Value, std::map<int64_t, mlir::Value>> perStage;
};

/// Stage-local global-norm clipping: when the ops of @main span several
/// stages, every f32 graph.ClipByGlobalNorm becomes per stage the sum of
/// squares of the stage's own gradients (graph.ReduceSumSquare, graph.Add),
/// and in every stage the sum of all stages' sums in stage order (the same
/// bits everywhere; the scalars travel once per step), norm = sqrt(total)
/// and scale = min(1, max_norm / (norm + 1e-6)) by which the stage's
/// gradients are multiplied. Only scalars cross stages.
/// Loss scaling's graph.UnscaleGradients is split first, likewise: one per
/// gradient in its stage, each stage's flags summed, and in every stage the
/// stages' sums in stage order as the found_inf its optimizers read.
StageClips splitGlobalNormClips(mlir::func::FuncOp func,
                                llvm::DenseMap<mlir::Operation *, int64_t> &stageOf);

/// Rewrites @main, whose non-leaf ops `stageOf` places, so that every trained
/// variable read by ops of several stages has a copy per stage:
///   - each stage sums its own gradient terms and accumulates them over the
///     micro-batches (its own graph.AccumulateGrad);
///   - every copy stage adds the accumulated partial gradients of all
///     stages in stage order (the same sum, bit for bit, on every copy);
///   - the update (optimizer, assignments of the variable and its state) is
///     cloned into every copy stage.
/// New ops are entered in `stageOf`, erased ones removed. Reads of the
/// variable outside the update stay unplaced: they are leaves, cloned per
/// stage like constants. Variables whose update depends on anything but
/// their own gradient, state, constants, arguments and a stage-local clip
/// scale (`clips`: each copy multiplies by its own stage's) keep the single
/// owner with a warning. The clip's sum of squares of the gradient reads
/// the summed partials of its own stage (counted once). Returns the
/// names of the variables (and optimizer states) replicated.
llvm::StringSet<> replicateTiedVariables(mlir::func::FuncOp func, mlir::SymbolTable &symbols,
                                         llvm::DenseMap<mlir::Operation *, int64_t> &stageOf,
                                         const StageClips &clips);

} // namespace strait::dist::detail

#endif // STRAIT_LIB_DIALECT_DIST_TRANSFORMS_TIEDVARIABLES_H
