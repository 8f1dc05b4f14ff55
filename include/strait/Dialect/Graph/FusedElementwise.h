//===- FusedElementwise.h - Instruction set of fused programs ---*- C++ -*-===//
//
// Arity and register kinds of each graph.FusedElementwise instruction, shared
// by the op's verifier and graph-fuse-elementwise. The runtime decodes the
// same rules from the exported program (runtime/lib/core/FusedProgram.cpp).
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_DIALECT_GRAPH_FUSEDELEMENTWISE_H
#define STRAIT_DIALECT_GRAPH_FUSEDELEMENTWISE_H

#include "strait/Dialect/Graph/GraphOps.h"

namespace strait::graph {

/// What a register holds: an f32 value, or a boolean stored as 0/1.
enum class FusedKind { Float, Bool };

struct FusedOpcodeInfo {
  unsigned arity;          ///< register operands (Const: 0, it reads a constant)
  FusedKind operand;       ///< kind of every operand (Where: of operands 1 and 2)
  FusedKind result;
};

/// The typing rule of `op`.
FusedOpcodeInfo getFusedOpcodeInfo(FusedOpcode op);

} // namespace strait::graph

#endif // STRAIT_DIALECT_GRAPH_FUSEDELEMENTWISE_H
