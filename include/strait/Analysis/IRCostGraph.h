//===- IRCostGraph.h - The planner's cost graph of graph IR -----*- C++ -*-===//
//
// Bridges the compiler and the planner: reads a function of graph ops through
// the CostOpInterface and produces the plain CostGraph the partitioner works
// on, with layers recovered from the weights' names.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_IRCOSTGRAPH_H
#define STRAIT_ANALYSIS_IRCOSTGRAPH_H

#include "strait/Analysis/CostGraph.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace strait {

struct IRCostGraph {
  CostGraph graph;
  /// The op each cost node stands for (index = node id).
  std::vector<mlir::Operation *> ops;
  /// One op per distinct kernel signature among the costed ops (forward,
  /// backward and optimizer-step terms with work), in program order: the
  /// kernels `straitc --emit=kernels` lists for strait-probe to time.
  std::vector<mlir::Operation *> kernelOps;
};

/// The signature of the kernel `op` runs as: "<op type>.<16 hex digits>", a
/// hash of the op type, its operand and result types, its ONNX attributes
/// (dialect attributes such as graph.op_id and symbol references, which the
/// exporter does not pass to the kernel, are left out) and the values of its
/// constant operands. Equal for ops that run the same kernel on the same
/// shapes; stable across processes (the key of a profile's `kernel_times`).
std::string kernelSignature(mlir::Operation *op);

/// One node per graph op (constants and variable reads are folded into their
/// users: a weight's bytes count as the parameter bytes of its first user),
/// one edge per use with the value's bytes. In a training step, a backward op
/// (graph.grad_of = N) adds its FLOPs to the backward cost of forward op N
/// instead of becoming a node, and the per-step optimizer tail is left out. `batchSamples` is the batch the
/// IR's shapes hold (the leading dimension of the first input by default).
llvm::Expected<IRCostGraph> buildCostGraph(mlir::func::FuncOp func,
                                           double batchSamples = 0);

/// The planner's op kind of a graph op with a cost model (an embedding is a
/// Gather of a variable; reductions and pooling count as normalizations:
/// one read of the input, a little arithmetic per element).
OpKind opKindOf(mlir::Operation *op);

/// The layer key of a weight name: the prefix up to its first numeric path
/// component ("transformer.h.3.attn.c_attn.weight" -> "transformer.h.3",
/// "layer2.1.conv1.weight" -> "layer2.1"); empty when it has none.
std::string layerKeyOf(llvm::StringRef weightName);

} // namespace strait

#endif // STRAIT_ANALYSIS_IRCOSTGRAPH_H
