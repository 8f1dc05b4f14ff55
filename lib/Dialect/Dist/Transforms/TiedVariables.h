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
#include "llvm/ADT/StringSet.h"

namespace strait::dist::detail {

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
/// their own gradient, state, constants and arguments (global-norm clipping)
/// keep the single owner with a warning. Returns the names of the variables
/// (and optimizer states) replicated.
llvm::StringSet<> replicateTiedVariables(mlir::func::FuncOp func, mlir::SymbolTable &symbols,
                                         llvm::DenseMap<mlir::Operation *, int64_t> &stageOf);

} // namespace strait::dist::detail

#endif // STRAIT_LIB_DIALECT_DIST_TRANSFORMS_TIEDVARIABLES_H
