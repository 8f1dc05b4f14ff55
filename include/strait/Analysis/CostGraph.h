//===- CostGraph.h - Plain cost graph the planner works on -----*- C++ -*-===//
//
// A DAG of ops with their costs. The compiler fills it from the graph
// dialect through the cost op interface; the generators in ModelZoo.h build
// shape-only transformer and ResNet graphs so the planner can be tested and
// benchmarked on its own.
//
//===----------------------------------------------------------------------===//

#ifndef STRAIT_ANALYSIS_COSTGRAPH_H
#define STRAIT_ANALYSIS_COSTGRAPH_H

#include "strait/Analysis/ClusterModel.h"

#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace strait {

/// The cost of one op of its own kind and dtype: a backward op of a node,
/// or an op of the optimizer step.
struct CostTerm {
  OpKind kind = OpKind::Other;
  DType dtype = DType::F32;
  double flops = 0, bytes = 0;
  /// The op's type without dialect ("Gemm"), when built from IR.
  std::string op;
  /// The kernel's signature (kernelSignature in IRCostGraph.h: op type,
  /// operand and result types, attributes), when built from IR: the key of
  /// its measured time in a profile's `kernel_times`.
  std::string kernel;
};

/// Costs of one op for the graph's whole batch (CostGraph::batchSamples).
struct CostNode {
  std::string name;
  /// The op's type without dialect ("MatMul"), when built from IR.
  std::string op;
  /// The forward op's kernel signature (see CostTerm::kernel).
  std::string kernel;
  OpKind kind = OpKind::Other;
  DType dtype = DType::F32;
  double fwdFlops = 0;
  /// Backward FLOPs; negative means "estimate" (2x forward for ops with
  /// parameters, 1x otherwise), used for forward-only graphs.
  double bwdFlops = -1;
  double bytesRead = 0, bytesWritten = 0;
  double paramBytes = 0;
  /// Of paramBytes, the bytes of frozen variables (graph.Variable
  /// {frozen}: straitc --frozen, LoRA's base weights): held, but no
  /// gradient, optimizer state or all-reduce.
  double frozenBytes = 0;
  /// Bytes of the output kept alive for the backward pass.
  double activationBytes = 0;
  /// Layer the op belongs to (coarsening groups by it); -1 if none.
  int layer = -1;
  /// The backward ops of a training step that differentiate this op, for
  /// the whole batch, each costed at its own kind and shape (a MatMul's two
  /// gradient GEMMs have other shapes than the forward; a GELU's backward is
  /// elementwise work on other tensors). Empty: the estimate (backwardFlops
  /// at the forward's kind, twice the forward's bytes), or no backward when
  /// bwdFlops is 0.
  std::vector<CostTerm> bwdTerms;
  /// Once per iteration, whatever the batch: the optimizer-step ops of the
  /// variables this node owns (gradient accumulation, the update).
  std::vector<CostTerm> updateTerms;

  double backwardFlops() const {
    if (bwdFlops >= 0)
      return bwdFlops;
    return paramBytes > 0 ? 2 * fwdFlops : fwdFlops;
  }
};

struct CostEdge {
  unsigned src = 0, dst = 0;
  double bytes = 0; ///< tensor bytes for the whole batch
  /// The result of `src` carried, when known: edges of one value cross each
  /// cut once, however many of its users lie beyond it. -1: its own value.
  int value = -1;
};

/// A weight read by several nodes (a tied embedding / LM head). Its bytes
/// count in the paramBytes of one node only (`owner`); if the nodes end up in
/// several pipeline stages, every further stage holds a copy and the copies
/// exchange their gradients once per iteration (docs/planner.md, "Tied
/// variables across stages"). Uses through nodes computed from weights only
/// (a transposed weight) count as uses of the weight, and such nodes have no
/// out-edges: the compiler recomputes them next to their users.
struct SharedWeight {
  std::string name;
  double bytes = 0;
  std::vector<unsigned> nodes;
  /// The node whose paramBytes include the weight (the first in op order,
  /// not necessarily in the first block): coarsening moves the bytes to the
  /// first block of `nodes`, the copies count after it.
  unsigned owner = 0;
  /// Frozen: the copies exchange no gradients.
  bool frozen = false;
};

struct CostGraph {
  std::string name;
  std::vector<CostNode> nodes;
  std::vector<CostEdge> edges;
  std::vector<SharedWeight> sharedWeights;
  /// Samples (sequences, images) the costs above correspond to.
  double batchSamples = 1;

  unsigned addNode(CostNode node) {
    nodes.push_back(std::move(node));
    return nodes.size() - 1;
  }
  void addEdge(unsigned src, unsigned dst, double bytes, int value = -1) {
    edges.push_back({src, dst, bytes, value});
  }
  double totalFwdFlops() const;
  double totalBwdFlops() const;
  double totalParamBytes() const;
  double totalActivationBytes() const;

  /// Kahn's algorithm, stable by node index; an error names a node on a
  /// cycle or a dangling edge.
  llvm::Expected<std::vector<unsigned>> topologicalOrder() const;
};

} // namespace strait

#endif // STRAIT_ANALYSIS_COSTGRAPH_H
