//===- ElementwiseFusion.h - What graph-fuse-elementwise fuses --*- C++ -*-===//
//
// The rules graph-fuse-elementwise groups ops by, shared with
// graph-rematerialize (which clones forward elementwise chains into the
// backward pass so that they fuse there): which ops fuse and as which
// instruction, which constants inline, and the phase of each op.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_ELEMENTWISEFUSION_H
#define STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_ELEMENTWISEFUSION_H

#include "strait/Dialect/Graph/FusedElementwise.h"

#include "llvm/ADT/DenseMap.h"

#include <optional>

namespace strait::graph::fusion {

/// The opcode of a fusible op: one static result of at most kMaxRank
/// dimensions, operands and result of the kinds the opcode takes (floats
/// stored as f32, bf16 or f16; booleans as i1). A Cast between them is
/// Identity.
std::optional<FusedOpcode> fusibleOpcode(mlir::Operation *op);

/// The 16-bit float element type of tensor type `t` (bf16, f16), or null.
mlir::Type lowFloatElement(mlir::Type t);

/// The scalar a splat f32/bf16/f16 constant inlines as (exact: every 16-bit
/// float is an f32); boolean constants stay inputs.
std::optional<float> inlinedConstant(mlir::Value v);

/// Which copy of the step each op of `block` belongs to, as the exporter
/// splits them: bit 0 backward (autodiff-tagged graph.grad_of, a
/// dist.backward transfer, or reading a backward value), bit 1 per step
/// (after gradient accumulation); 0 is forward. Ops of different phases
/// never fuse.
llvm::DenseMap<mlir::Operation *, int> phases(mlir::Block &block);

} // namespace strait::graph::fusion

#endif // STRAIT_LIB_DIALECT_GRAPH_TRANSFORMS_ELEMENTWISEFUSION_H
