//===- AssignStages.cpp - Put a pipeline stage on every op ----------------===//
//
// Applies the stage plan (StagePlan.h) to @main: `dist.stage` on every op,
// `dist.plan` on the module. Placement rules, in order of precedence:
//   1. backward ops (graph.grad_of = N) go with the forward op graph.op_id = N;
//   2. ops naming a variable (gradient accumulation, assignment) and the
//      update computing an assigned value go with the variable's first
//      forward user (optimizer state with its parameter's);
//   3. cost nodes take their planned stage, except forward ops computed from
//      weights and constants only, which go with their forward users;
//   4. other ops take the smallest stage of their users, else the largest of
//      their operands', else 0;
//   5. global-norm clipping becomes stage-local (each stage's sum of squares
//      of its own gradients, a per-step exchange of the scalars);
//   6. a variable the step trains that ops of several stages read gets a
//      copy per stage (TiedVariables.h): per-stage gradient accumulation,
//      a per-step exchange of the partial gradients, the update in every
//      copy stage;
//   7. reads of other variables the step assigns stay with the update (other
//      stages receive the value); constants and other reads go with their
//      users, cloned per stage.
//
//===----------------------------------------------------------------------===//

#include "TiedVariables.h"

#include "strait/Dialect/Dist/DistOps.h"
#include "strait/Dialect/Dist/DistPasses.h"
#include "strait/Dialect/Dist/StagePlan.h"
#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/Recompute.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/SymbolTable.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <algorithm>
#include <map>

namespace strait::dist {
#define GEN_PASS_DEF_DISTASSIGNSTAGES
#include "strait/Dialect/Dist/DistPasses.h.inc"
} // namespace strait::dist

using namespace mlir;
using namespace strait;
using namespace strait::dist;

namespace {

constexpr llvm::StringLiteral kOpIdAttr = "graph.op_id";
constexpr llvm::StringLiteral kGradOfAttr = "graph.grad_of";

/// The variable `op` names through a symbol reference attribute, if any.
graph::VariableOp variableOf(Operation *op, SymbolTable &symbols) {
  for (NamedAttribute a : op->getAttrs())
    if (auto ref = dyn_cast<FlatSymbolRefAttr>(a.getValue()))
      if (auto var = symbols.lookup<graph::VariableOp>(ref.getValue()))
        return var;
  return nullptr;
}

bool isSharedLeaf(Operation *op) {
  return isa<graph::ConstantOp, graph::ReadVariableOp>(op);
}

struct AssignStagesPass : public dist::impl::DistAssignStagesBase<AssignStagesPass> {
  using DistAssignStagesBase::DistAssignStagesBase;

  void runOnOperation() override;
  LogicalResult placeOps(func::FuncOp func, const StagePlanResult &plan,
                         SymbolTable &symbols, DenseMap<Operation *, int64_t> &stageOf);
  void placeLeaves(func::FuncOp func, DenseMap<Operation *, int64_t> &stageOf);
  void placeOwnedReads(func::FuncOp func, const llvm::StringSet<> &replicated,
                       DenseMap<Operation *, int64_t> &stageOf);
};

} // namespace

/// Forward ops computed from weights and constants only (a transposed tied
/// embedding, a reshaped bias) go with their forward users, like the leaves
/// they derive from: recomputing them there is cheaper than a transfer.
static void placeLeafDerived(Block &body, DenseMap<Operation *, int64_t> &stageOf) {
  llvm::SmallPtrSet<Operation *, 16> leafDerived;
  for (Operation &op : body)
    if (stageOf.count(&op) && !op.hasAttr(kGradOfAttr) && op.getNumOperands() > 0 &&
        llvm::all_of(op.getOperands(), [&](Value v) {
          Operation *def = v.getDefiningOp();
          return def && (isSharedLeaf(def) || leafDerived.contains(def));
        }))
      leafDerived.insert(&op);
  for (Operation &op : llvm::reverse(body)) {
    if (!leafDerived.contains(&op))
      continue;
    std::optional<int64_t> best;
    for (Operation *user : op.getUsers())
      if (!user->hasAttr(kGradOfAttr))
        if (auto it = stageOf.find(user); it != stageOf.end())
          best = best ? std::min(*best, it->second) : it->second;
    if (best)
      stageOf[&op] = *best;
  }
}

LogicalResult AssignStagesPass::placeOps(func::FuncOp func, const StagePlanResult &plan,
                                         SymbolTable &symbols,
                                         DenseMap<Operation *, int64_t> &stageOf) {
  Block &body = func.getBody().front();
  for (auto [n, op] : llvm::enumerate(plan.ops))
    stageOf[op] = plan.stageOfNode[n];
  placeLeafDerived(body, stageOf);
  DenseMap<int64_t, Operation *> byOpId;
  llvm::StringMap<int64_t> varStage;
  for (Operation &op : body) {
    if (auto id = op.getAttrOfType<IntegerAttr>(kOpIdAttr))
      byOpId[id.getInt()] = &op;
    if (op.hasAttr(kGradOfAttr) || !stageOf.count(&op))
      continue;
    for (Value v : op.getOperands())
      if (auto read = v.getDefiningOp<graph::ReadVariableOp>())
        varStage.try_emplace(read.getVariable(), stageOf[&op]);
  }
  // Optimizer state follows its parameter (graph.optimizer_state_of).
  auto stageOfVariable = [&](graph::VariableOp var) -> std::optional<int64_t> {
    StringRef name = var.getSymName();
    if (auto of = var->getAttrOfType<FlatSymbolRefAttr>("graph.optimizer_state_of"))
      name = of.getValue();
    auto it = varStage.find(name);
    if (it == varStage.end())
      return std::nullopt;
    return it->second;
  };
  // Rules 1-3, in program order (forward ops precede their backward ops).
  for (Operation &op : body) {
    if (isSharedLeaf(&op) || isa<func::ReturnOp>(op))
      continue;
    if (auto gradOf = op.getAttrOfType<IntegerAttr>(kGradOfAttr)) {
      Operation *fwd = byOpId.lookup(gradOf.getInt());
      if (!fwd)
        return op.emitError() << "graph.grad_of = " << gradOf.getInt()
                              << " names no op with that graph.op_id";
      auto it = stageOf.find(fwd);
      if (it != stageOf.end()) {
        stageOf[&op] = it->second;
        continue;
      }
    }
    if (graph::VariableOp var = variableOf(&op, symbols)) {
      if (std::optional<int64_t> s = stageOfVariable(var)) {
        stageOf[&op] = *s;
        // The op computing the assigned value (the optimizer update) goes
        // with the variable too: another stage would update a stale copy.
        if (auto assign = dyn_cast<graph::AssignVariableOp>(op))
          if (Operation *def = assign.getValue().getDefiningOp();
              def && !isSharedLeaf(def) && !def->hasAttr(kOpIdAttr) &&
              !def->hasAttr(kGradOfAttr))
            stageOf[def] = *s;
        continue;
      }
    }
  }
  // Rule 4: users first (reverse order), then operands.
  for (Operation &op : llvm::reverse(body)) {
    if (isSharedLeaf(&op) || isa<func::ReturnOp>(op) || stageOf.count(&op))
      continue;
    std::optional<int64_t> best;
    for (Operation *user : op.getUsers())
      if (auto it = stageOf.find(user); it != stageOf.end())
        best = best ? std::min(*best, it->second) : it->second;
    if (best)
      stageOf[&op] = *best;
  }
  for (Operation &op : body) {
    if (isSharedLeaf(&op) || isa<func::ReturnOp>(op) || stageOf.count(&op))
      continue;
    int64_t stage = 0;
    for (Value v : op.getOperands())
      if (Operation *def = v.getDefiningOp())
        if (auto it = stageOf.find(def); it != stageOf.end())
          stage = std::max(stage, it->second);
    stageOf[&op] = stage;
  }
  return success();
}

/// Reads of a variable the step assigns stay in the stage that updates it:
/// a clone elsewhere would go stale after the first update, so other stages
/// receive the value (dist-insert-comm) instead. Reads of `replicated`
/// variables are either placed already (the update's) or leaves cloned per
/// stage like constants (every copy is current).
void AssignStagesPass::placeOwnedReads(func::FuncOp func, const llvm::StringSet<> &replicated,
                                       DenseMap<Operation *, int64_t> &stageOf) {
  llvm::StringMap<int64_t> owner;
  for (Operation &op : func.getBody().front())
    if (auto assign = dyn_cast<graph::AssignVariableOp>(op))
      owner.try_emplace(assign.getVariable(), stageOf.lookup(&op));
  for (Operation &op : func.getBody().front())
    if (auto read = dyn_cast<graph::ReadVariableOp>(op))
      if (auto it = owner.find(read.getVariable());
          it != owner.end() && !replicated.contains(read.getVariable()))
        stageOf[&op] = it->second;
}

void AssignStagesPass::placeLeaves(func::FuncOp func,
                                   DenseMap<Operation *, int64_t> &stageOf) {
  SmallVector<Operation *> leaves;
  for (Operation &op : func.getBody().front())
    if (isSharedLeaf(&op) && !stageOf.count(&op))
      leaves.push_back(&op);
  for (Operation *leaf : leaves) {
    // Uses grouped by the user's stage, smallest stage first.
    std::map<int64_t, SmallVector<OpOperand *>> usesByStage;
    for (OpOperand &use : leaf->getUses())
      if (auto it = stageOf.find(use.getOwner()); it != stageOf.end())
        usesByStage[it->second].push_back(&use);
    if (usesByStage.empty()) {
      stageOf[leaf] = 0;
      continue;
    }
    stageOf[leaf] = usesByStage.begin()->first;
    OpBuilder builder(leaf);
    for (auto &[stage, uses] : llvm::drop_begin(usesByStage)) {
      Operation *clone = builder.clone(*leaf);
      stageOf[clone] = stage;
      for (OpOperand *use : uses)
        use->set(clone->getResult(cast<OpResult>(use->get()).getResultNumber()));
      ++numCloned;
    }
  }
}

void AssignStagesPass::runOnOperation() {
  ModuleOp module = getOperation();
  auto func = module.lookupSymbol<func::FuncOp>("main");
  if (!func || func.isExternal()) {
    module.emitError("dist-assign-stages needs a function @main with a body");
    return signalPassFailure();
  }
  StagePlanOptions options;
  options.clusterFile = cluster;
  options.strategy = strategy;
  options.globalBatch = globalBatch;
  options.numStages = numStages;
  options.boundaries.assign(boundaries.begin(), boundaries.end());
  options.replicas.assign(replicas.begin(), replicas.end());
  options.microBatches = microBatches;
  options.schedule = schedule;
  options.allReduceBucketBytes = allReduceBucketMib * 1048576.0;
  options.localSteps = localSteps;
  options.recompute = recompute;
  llvm::Expected<StagePlanResult> plan = computeStagePlan(func, options);
  if (!plan) {
    func.emitError() << "cannot plan @main: " << llvm::toString(plan.takeError());
    return signalPassFailure();
  }
  SymbolTable symbols(module);
  DenseMap<Operation *, int64_t> stageOf;
  if (failed(placeOps(func, *plan, symbols, stageOf)))
    return signalPassFailure();
  strait::dist::detail::StageClips clips =
      strait::dist::detail::splitGlobalNormClips(func, stageOf);
  llvm::StringSet<> replicated =
      strait::dist::detail::replicateTiedVariables(func, symbols, stageOf, clips);
  numReplicated += replicated.size();
  placeOwnedReads(func, replicated, stageOf);
  placeLeaves(func, stageOf);
  for (auto [op, stage] : stageOf)
    setStage(op, stage);
  // The stages the plan recomputes (the clones take their op's stage).
  if (llvm::is_contained(plan->recompute, true)) {
    auto select = [&](Operation *op) {
      auto it = stageOf.find(op);
      return it != stageOf.end() && size_t(it->second) < plan->recompute.size() &&
             plan->recompute[it->second];
    };
    FailureOr<graph::RecomputeResult> r = graph::recomputeBlocks(func, select);
    if (failed(r))
      return signalPassFailure();
    numRecomputed += r->blocks;
  }

  MLIRContext *ctx = &getContext();
  Builder b(ctx);
  SmallVector<Attribute> stages;
  for (auto [i, s] : llvm::enumerate(plan->stages)) {
    SmallVector<Attribute> devices;
    for (const std::string &d : s.devices)
      devices.push_back(b.getStringAttr(d));
    stages.push_back(PlacementAttr::get(ctx, i, b.getArrayAttr(devices),
                                        b.getDenseI64ArrayAttr(s.ranks)));
  }
  // The planner's 1F1B warm-up per stage, for the exporter.
  if (!plan->warmup.empty())
    module->setAttr("dist.warmup", b.getDenseI64ArrayAttr(plan->warmup));
  // What each stage's devices have left beside the planner's peak memory:
  // dist-insert-compression's error-feedback residuals must fit in it.
  if (plan->plan && plan->plan->stages.size() == plan->stages.size()) {
    SmallVector<int64_t> left;
    for (const strait::StagePlan &s : plan->plan->stages)
      left.push_back(static_cast<int64_t>(std::clamp(s.capacity - s.peakMemory, -9.0e18, 9.0e18)));
    module->setAttr(DistDialect::kMemoryLeftAttrName, b.getDenseI64ArrayAttr(left));
  }
  module->setAttr(DistDialect::kPlanAttrName,
                  PlanAttr::get(ctx, plan->oneFOneB ? dist::Schedule::one_f_one_b : dist::Schedule::gpipe,
                                plan->microBatches, b.getArrayAttr(stages)));
}
