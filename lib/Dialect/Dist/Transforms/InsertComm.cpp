//===- InsertComm.cpp - Send/recv at stage cuts, gradient all-reduce ------===//
//
// Every value used in a stage other than its producer's travels once per
// (value, consumer stage): a dist.send right after the producer and its
// dist.recv right after the send. Transfers block until both ends meet, so
// each pair must sit at one point of an order all ranks share (the block's):
// a recv placed later, before its first use, can cross another pair and
// deadlock the pipeline. Gradient accumulations of variables
// on replicated stages get a mean all-reduce over the stage's ranks first, so
// that what travels (if anything) is already reduced.
//
//===----------------------------------------------------------------------===//

#include "ClusterDevices.h"

#include "strait/Dialect/Dist/DistOps.h"
#include "strait/Dialect/Dist/DistPasses.h"
#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"

#include <map>

namespace strait::dist {
#define GEN_PASS_DEF_DISTINSERTCOMM
#include "strait/Dialect/Dist/DistPasses.h.inc"
} // namespace strait::dist

using namespace mlir;
using namespace strait;
using namespace strait::dist;

namespace {

/// A gradient accumulation of a variable: an op (not a read) naming a
/// graph.Variable whose single result has the variable's type.
bool isGradientOfVariable(Operation *op, SymbolTable &symbols) {
  if (isa<graph::ReadVariableOp>(op) || op->getNumResults() != 1)
    return false;
  for (NamedAttribute a : op->getAttrs())
    if (auto ref = dyn_cast<FlatSymbolRefAttr>(a.getValue()))
      if (auto var = symbols.lookup<graph::VariableOp>(ref.getValue()))
        return var.getType() == op->getResult(0).getType();
  return false;
}

struct InsertCommPass : public dist::impl::DistInsertCommBase<InsertCommPass> {
  using DistInsertCommBase::DistInsertCommBase;
  void runOnOperation() override;
  LogicalResult insertAllReduces(func::FuncOp func, PlanAttr plan, int64_t &channel);
  LogicalResult insertTransfers(func::FuncOp func, int64_t &channel);
};

} // namespace

LogicalResult InsertCommPass::insertAllReduces(func::FuncOp func, PlanAttr plan,
                                               int64_t &channel) {
  SymbolTable symbols(func->getParentOfType<ModuleOp>());
  // With the cluster, replicas on several bandwidth islands reduce
  // hierarchically (islands per stage, computed once).
  std::optional<ClusterModel> clusterModel;
  std::vector<std::vector<unsigned>> devices;
  if (!cluster.empty()) {
    FailureOr<ClusterModel> c = strait::dist::detail::loadClusterFor(func, cluster, "dist-insert-comm");
    if (failed(c))
      return failure();
    clusterModel = std::move(*c);
    FailureOr<std::vector<std::vector<unsigned>>> d =
        strait::dist::detail::stageDevices(func, plan, *clusterModel, cluster);
    if (failed(d))
      return failure();
    devices = std::move(*d);
  }
  SmallVector<Operation *> grads;
  for (Operation &op : func.getBody().front())
    if (isGradientOfVariable(&op, symbols))
      grads.push_back(&op);
  for (Operation *op : grads) {
    std::optional<int64_t> stage = getStage(op);
    if (!stage)
      return op->emitError("op has no dist.stage; run dist-assign-stages first");
    DenseI64ArrayAttr ranks = plan.getStage(*stage).getRanks();
    if (ranks.size() < 2)
      continue;
    SmallVector<int64_t> group(ranks.asArrayRef());
    llvm::sort(group);
    OpBuilder b(op->getContext());
    b.setInsertionPointAfter(op);
    ArrayAttr islands;
    if (clusterModel) {
      SmallVector<Attribute> groups;
      // With local steps the islands also decide what synchronizes every
      // step, so replicas alone on their island (or site) get islands too.
      for (const std::vector<int64_t> &island :
           localSteps > 1 ? strait::dist::detail::localStepIslands(*clusterModel, devices[*stage],
                                                                   ranks.asArrayRef())
                          : strait::dist::detail::rankIslands(*clusterModel, devices[*stage],
                                                              ranks.asArrayRef()))
        groups.push_back(b.getDenseI64ArrayAttr(island));
      if (!groups.empty()) {
        islands = b.getArrayAttr(groups);
        ++numHierarchical;
      }
    }
    Value grad = op->getResult(0);
    auto reduce = b.create<AllReduceOp>(
        op->getLoc(), grad.getType(), grad, ReductionAttr::get(b.getContext(), Reduction::mean),
        b.getDenseI64ArrayAttr(group), islands, b.getI64IntegerAttr(channel++));
    setStage(reduce, *stage);
    grad.replaceAllUsesExcept(reduce.getResult(), reduce);
    ++numAllReduces;
  }
  return success();
}

LogicalResult InsertCommPass::insertTransfers(func::FuncOp func, int64_t &channel) {
  SmallVector<Operation *> producers;
  // Backward ops: autodiff's (graph.grad_of) and every op reading one. Their
  // transfers are marked dist.backward so that the exporter can order all
  // forwards before all backwards on every rank (docs/program-format.md).
  llvm::DenseSet<Operation *> backward;
  // Per-step values: accumulated gradients and what is computed from them
  // (a tied variable's partial gradients travel once per step, after the
  // last micro-batch). Their transfers are marked dist.per_step, since the
  // receiving rank cannot tell from its recv alone.
  llvm::DenseSet<Operation *> perStep;
  for (Operation &op : func.getBody().front()) {
    if (op.hasAttr("graph.grad_of") || llvm::any_of(op.getOperands(), [&](Value v) {
          return v.getDefiningOp() && backward.contains(v.getDefiningOp());
        }))
      backward.insert(&op);
    if (isa<graph::AccumulateGradOp>(op) || llvm::any_of(op.getOperands(), [&](Value v) {
          return v.getDefiningOp() && perStep.contains(v.getDefiningOp());
        }))
      perStep.insert(&op);
    if (!isa<func::ReturnOp, SendOp, RecvOp>(op))
      producers.push_back(&op);
  }
  for (Operation *op : producers) {
    std::optional<int64_t> stage = getStage(op);
    if (!stage)
      return op->emitError("op has no dist.stage; run dist-assign-stages first");
    Operation *insertAfter = op;
    for (Value v : op->getResults()) {
      std::map<int64_t, SmallVector<OpOperand *>> usesByStage;
      for (OpOperand &use : v.getUses()) {
        Operation *user = use.getOwner();
        if (isa<func::ReturnOp>(user))
          continue;
        std::optional<int64_t> userStage = getStage(user);
        if (!userStage)
          return user->emitError("op has no dist.stage; run dist-assign-stages first");
        if (*userStage != *stage)
          usesByStage[*userStage].push_back(&use);
      }
      for (auto &[to, uses] : usesByStage) {
        OpBuilder b(op->getContext());
        b.setInsertionPointAfter(insertAfter);
        auto send = b.create<SendOp>(op->getLoc(), v, b.getI64IntegerAttr(to),
                                     b.getI64IntegerAttr(channel));
        setStage(send, *stage);
        // The recv follows its send at once: every transfer is then one
        // point of the block's order, which all ranks follow, so blocking
        // transfers cannot wait on each other in a cycle.
        b.setInsertionPointAfter(send);
        auto recv = b.create<RecvOp>(op->getLoc(), v.getType(), b.getI64IntegerAttr(*stage),
                                     b.getI64IntegerAttr(channel));
        setStage(recv, to);
        // A forward op's value that flows to an earlier stage where only
        // backward ops read it is a gradient too (the dScores of a fused
        // SoftmaxCrossEntropyLossWithGrad on the last stage): it travels in
        // the backward phase, so that the earlier stage does not wait for
        // the loss in its forward phase. (A value flowing to a later stage
        // stays in the forward phase even when only backward ops read it:
        // under 1F1B the later stage's backward runs first.)
        bool gradientBack = to < *stage && llvm::all_of(uses, [&](OpOperand *u) {
          return backward.contains(u->getOwner());
        });
        if (backward.contains(op) || gradientBack) {
          send->setAttr("dist.backward", b.getUnitAttr());
          recv->setAttr("dist.backward", b.getUnitAttr());
        }
        if (perStep.contains(op)) {
          send->setAttr("dist.per_step", b.getUnitAttr());
          recv->setAttr("dist.per_step", b.getUnitAttr());
        }
        insertAfter = recv;
        for (OpOperand *use : uses)
          use->set(recv.getResult());
        ++channel;
        ++numTransfers;
      }
    }
  }
  return success();
}

void InsertCommPass::runOnOperation() {
  ModuleOp module = getOperation();
  PlanAttr plan = getPlan(module);
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!plan || !func || func.isExternal()) {
    module.emitError("dist-insert-comm needs a dist.plan and a function @main; run "
                     "dist-assign-stages first");
    return signalPassFailure();
  }
  int64_t channel = 0;
  if (failed(insertAllReduces(func, plan, channel)) ||
      failed(insertTransfers(func, channel)))
    return signalPassFailure();
}
