//===- FuseLossGrad.cpp - graph-fuse-loss-grad ----------------------------===//
//
// A training step's SoftmaxCrossEntropyLoss reads the logits in the forward
// and its SoftmaxCrossEntropyLossGrad reads them again in the backward (GPT-2
// small's bf16 logits: 0.77 GiB per 8x1024 batch, kept alive in between).
// Autodiff seeds the gradient with a constant, so dLoss is known before the
// loss runs: the pass replaces the pair by one
// graph.SoftmaxCrossEntropyLossWithGrad in the loss's place, which reads the
// logits once in the forward and leaves dScores for the backward. See
// docs/graph-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHFUSELOSSGRAD
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace {

constexpr llvm::StringLiteral kGradOfAttr = "graph.grad_of";

/// Backward ops of `block` as the exporter splits the phases: those autodiff
/// tagged (graph.grad_of), dist.backward transfers, and every op reading a
/// backward value. One walk in program order.
llvm::DenseSet<Operation *> backwardOps(Block &block) {
  llvm::DenseSet<Operation *> backward;
  for (Operation &op : block)
    if (op.hasAttr(kGradOfAttr) || op.hasAttr("dist.backward") ||
        llvm::any_of(op.getOperands(), [&](Value v) {
          Operation *d = v.getDefiningOp();
          return d && backward.contains(d);
        }))
      backward.insert(&op);
  return backward;
}

/// The loss op that `grad` differentiates: a SoftmaxCrossEntropyLoss of the
/// same block before it, with the same scores, labels, weights and
/// attributes, whose loss type is dLoss's. Null when there is none.
SoftmaxCrossEntropyLossOp matchingLoss(SoftmaxCrossEntropyLossGradOp grad) {
  for (Operation *user : grad.getScores().getUsers()) {
    auto loss = dyn_cast<SoftmaxCrossEntropyLossOp>(user);
    if (loss && loss->getBlock() == grad->getBlock() && loss->isBeforeInBlock(grad) &&
        loss.getLabels() == grad.getLabels() && loss.getWeights() == grad.getWeights() &&
        loss.getReduction() == grad.getReduction() &&
        loss.getIgnoreIndex() == grad.getIgnoreIndex() &&
        loss.getOutput().getType() == grad.getDLoss().getType())
      return loss;
  }
  return {};
}

/// dLoss as a value available at `loss`: a constant is cloned in front of it
/// (without the backward tag autodiff gave the seed, so that the fused op is
/// a forward op); a value defined before it, not by a backward op, is
/// itself. Null otherwise.
Value dLossBefore(Value dLoss, SoftmaxCrossEntropyLossOp loss,
                  const llvm::DenseSet<Operation *> &backward) {
  Operation *def = dLoss.getDefiningOp();
  bool before = def && def->getBlock() == loss->getBlock() && def->isBeforeInBlock(loss) &&
                !backward.contains(def);
  if (auto c = dyn_cast_or_null<ConstantOp>(def); c && !before) {
    OpBuilder b(loss);
    Operation *clone = b.clone(*c.getOperation());
    clone->removeAttr(kGradOfAttr);
    return clone->getResult(0);
  }
  if (!def)
    return cast<BlockArgument>(dLoss).getOwner() == loss->getBlock() ? dLoss : Value();
  return before ? dLoss : Value();
}

struct FuseLossGradPass : public strait::graph::impl::GraphFuseLossGradBase<FuseLossGradPass> {
  using GraphFuseLossGradBase::GraphFuseLossGradBase;

  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    for (Block &block : func.getBody()) {
      SmallVector<SoftmaxCrossEntropyLossGradOp> grads(
          block.getOps<SoftmaxCrossEntropyLossGradOp>());
      if (grads.empty())
        continue;
      llvm::DenseSet<Operation *> backward = backwardOps(block);
      for (SoftmaxCrossEntropyLossGradOp grad : grads) {
        SoftmaxCrossEntropyLossOp loss = matchingLoss(grad);
        if (!loss || backward.contains(loss.getOperation()))
          continue;
        Value dLoss = dLossBefore(grad.getDLoss(), loss, backward);
        if (!dLoss)
          continue;
        fuse(loss, grad, dLoss, backward);
        ++numFused;
      }
    }
  }

  /// One SoftmaxCrossEntropyLossWithGrad in `loss`'s place, with its
  /// dialect attributes (graph.op_id: the exporter runs it in the forward);
  /// the gradient's graph.grad_of goes (no backward work is left). A seed
  /// constant left without readers is erased; erased ops leave `backward`.
  void fuse(SoftmaxCrossEntropyLossOp loss, SoftmaxCrossEntropyLossGradOp grad, Value dLoss,
            llvm::DenseSet<Operation *> &backward) {
    OpBuilder b(loss);
    auto fused = b.create<SoftmaxCrossEntropyLossWithGradOp>(
        loss.getLoc(), TypeRange{loss.getOutput().getType(), grad.getDScores().getType()}, dLoss,
        loss.getScores(), loss.getLabels(), loss.getWeights(), loss.getReductionAttr(),
        loss.getIgnoreIndexAttr());
    for (NamedAttribute a : loss->getDiscardableAttrs())
      fused->setAttr(a.getName(), a.getValue());
    loss.getOutput().replaceAllUsesWith(fused.getLoss());
    grad.getDScores().replaceAllUsesWith(fused.getDScores());
    Operation *seed = grad.getDLoss().getDefiningOp();
    backward.erase(grad.getOperation());
    loss.erase();
    grad.erase();
    if (seed && isa<ConstantOp>(seed) && seed->use_empty()) {
      backward.erase(seed);
      seed->erase();
    }
  }
};

} // namespace
