//===- Recompute.h - Block-level activation recomputation ------*- C++ -*-===//
//
// The transformation behind graph-recompute-blocks and the stages that
// dist-assign-stages marks for recomputation (docs/training.md,
// "Activation recomputation").
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_RECOMPUTE_H
#define STRAIT_DIALECT_GRAPH_RECOMPUTE_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/STLFunctionalExtras.h"

namespace strait::graph {

/// Unit attribute on every recomputed clone (besides the graph.grad_of of
/// the backward op it precedes, which makes it a backward op).
inline constexpr llvm::StringLiteral kRecomputedAttr = "graph.recomputed";

struct RecomputeResult {
  unsigned blocks = 0;  ///< blocks recomputed
  unsigned cloned = 0;  ///< forward ops cloned into the backward
  unsigned refused = 0; ///< blocks left alone: they hold random ops
};

/// In a training step (graph.op_id / graph.grad_of from
/// graph-build-training-step): the forward ops are grouped into blocks as the
/// planner's coarsening does (the layer key of the weights an op reads, else
/// the latest block of its producers, else the op before it). For each
/// block whose forward ops `select` accepts, the forward ops of the block
/// that the block's own backward reads (directly or through other ops of the
/// block) are cloned right before the block's first backward op; the clones
/// carry that op's graph.grad_of and graph.recomputed, and the block's
/// backward reads them instead. Between the forward and the backward of a
/// micro-batch only the block's inputs (values of earlier blocks) then stay
/// alive. Blocks holding random ops (RandomUniformLike, RandomNormalLike,
/// Bernoulli, a Dropout of ratio > 0 without a graph.dropout_key) would not
/// replay the same values: they are left alone, with a warning. A keyed
/// Dropout (graph-build-training-step) replays its mask from the key. Fails (with a diagnostic at the function)
/// when the function is no training step or has no blocks.
mlir::FailureOr<RecomputeResult>
recomputeBlocks(mlir::func::FuncOp func, llvm::function_ref<bool(mlir::Operation *)> select);

} // namespace strait::graph

#endif // STRAIT_DIALECT_GRAPH_RECOMPUTE_H
