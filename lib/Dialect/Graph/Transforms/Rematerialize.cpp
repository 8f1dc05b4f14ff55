//===- Rematerialize.cpp - graph-rematerialize ----------------------------===//
//
// Forward elementwise values that backward elementwise ops read are
// recomputed in the backward pass when that reads fewer bytes. See
// docs/graph-dialect.md, "Rematerialization".
//
//===----------------------------------------------------------------------===//

#include "ElementwiseFusion.h"

#include "strait/Dialect/Graph/GraphPasses.h"
#include "strait/Interfaces/CostOpInterface.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"

#include <functional>

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHREMATERIALIZE
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::fusion;

namespace {

/// Forward elementwise values the backward pass reads, recomputed there from
/// the values they derive from, when that reads fewer bytes: autodiff keeps
/// the forward GELU's x, x/2, tanh and 1 + tanh (four f32 tensors) for the
/// backward GELU, while all four derive from one bf16 (or f32) product.
/// Cloning the forward chain in front of its backward users lets those
/// clones fuse into the backward group, which then reads the product alone,
/// and the forward group drops the extra outputs. Exact: the clones are the
/// same f32 operations on the same inputs.
///
/// A candidate is a forward fusible op's result whose backward users are all
/// fusible ops of its shape. Its cone is the forward fusible ops of that
/// shape it derives from (at most kMaxCone); the cone's leaves are its other
/// operands (products, parameters, broadcast operands; splat constants are
/// inlined). Candidates whose cones touch form one component; a component is
/// recomputed when its leaves that the backward does not read anyway take
/// fewer bytes than its candidates. Returns the number of cloned ops.
unsigned rematerializeInBackward(Block &block) {
  constexpr size_t kMaxCone = 24;
  DenseMap<Operation *, int> phase = phases(block);
  auto forwardFusible = [&](Operation *op) {
    return op && op->getBlock() == &block && phase.lookup(op) == 0 && fusibleOpcode(op);
  };
  auto backward = [&](Operation *op) {
    Operation *anc = block.findAncestorOpInBlock(*op);
    return anc && (phase.lookup(anc) & 1) != 0;
  };
  // Values the backward reads (before any rewrite).
  llvm::DenseSet<Value> readByBackward;
  for (Operation &op : block)
    if (phase.lookup(&op) & 1)
      for (Value v : op.getOperands())
        readByBackward.insert(v);

  struct Candidate {
    Value value;
    llvm::SetVector<Operation *> cone; ///< forward ops recomputed
    llvm::SetVector<Value> leaves;
  };
  std::vector<Candidate> cands;
  for (Operation &op : block) {
    if (!forwardFusible(&op))
      continue;
    Value v = op.getResult(0);
    auto shape = cast<RankedTensorType>(v.getType()).getShape();
    bool any = false, all = true;
    for (Operation *u : v.getUsers()) {
      if (!backward(u))
        continue;
      any = true;
      all &= u->getBlock() == &block && fusibleOpcode(u).has_value() &&
             cast<RankedTensorType>(u->getResult(0).getType()).getShape() == shape;
    }
    if (!any || !all)
      continue;
    Candidate c{v, {}, {}};
    SmallVector<Operation *> stack{&op};
    bool tooBig = false;
    while (!stack.empty() && !tooBig) {
      Operation *d = stack.pop_back_val();
      if (!c.cone.insert(d))
        continue;
      tooBig = c.cone.size() > kMaxCone;
      for (Value u : d->getOperands()) {
        Operation *p = u.getDefiningOp();
        if (forwardFusible(p) &&
            cast<RankedTensorType>(u.getType()).getShape() == shape)
          stack.push_back(p);
        else if (!inlinedConstant(u))
          c.leaves.insert(u);
      }
    }
    if (!tooBig)
      cands.push_back(std::move(c));
  }
  // Components: candidates whose cones share an op.
  std::vector<size_t> parent(cands.size());
  for (size_t i = 0; i < parent.size(); ++i)
    parent[i] = i;
  std::function<size_t(size_t)> root = [&](size_t i) {
    return parent[i] == i ? i : parent[i] = root(parent[i]);
  };
  DenseMap<Operation *, size_t> owner;
  for (size_t i = 0; i < cands.size(); ++i)
    for (Operation *d : cands[i].cone) {
      auto [it, fresh] = owner.try_emplace(d, i);
      if (!fresh)
        parent[root(i)] = root(it->second);
    }
  llvm::MapVector<size_t, SmallVector<size_t>> components;
  for (size_t i = 0; i < cands.size(); ++i)
    components[root(i)].push_back(i);

  unsigned cloned = 0;
  for (auto &[r, members] : components) {
    llvm::SmallPtrSet<Value, 8> values;
    llvm::SetVector<Operation *> cone;
    llvm::SetVector<Value> leaves;
    double before = 0, after = 0;
    for (size_t i : members) {
      values.insert(cands[i].value);
      before += strait::detail::bytesOf(cands[i].value.getType());
      cone.insert(cands[i].cone.begin(), cands[i].cone.end());
      leaves.insert(cands[i].leaves.begin(), cands[i].leaves.end());
    }
    for (Value l : leaves)
      if (!readByBackward.contains(l))
        after += strait::detail::bytesOf(l.getType());
    if (after >= before)
      continue;
    // The clones go before the first backward user and take its phase.
    Operation *first = nullptr;
    for (Value v : values)
      for (Operation *u : v.getUsers())
        if (backward(u)) {
          Operation *anc = block.findAncestorOpInBlock(*u);
          if (!first || anc->isBeforeInBlock(first))
            first = anc;
        }
    Attribute gradOf = first->getAttr("graph.grad_of");
    if (!gradOf)
      continue; // a backward op of no forward op: leave the component alone
    SmallVector<Operation *> ordered(cone.begin(), cone.end());
    llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
    OpBuilder b(first);
    IRMapping map;
    for (Operation *d : ordered) {
      // A backward op: the reader's graph.grad_of, no graph.op_id of its own.
      Operation *c = b.clone(*d, map);
      c->setAttr("graph.grad_of", gradOf);
      c->removeAttr("graph.op_id");
      ++cloned;
    }
    // Every clone has a reader: a later clone of its cone, or (a candidate's)
    // the backward ops.
    for (Value v : values)
      v.replaceUsesWithIf(map.lookup(v), [&](OpOperand &use) { return backward(use.getOwner()); });
  }
  return cloned;
}

struct RematerializePass
    : public strait::graph::impl::GraphRematerializeBase<RematerializePass> {
  using GraphRematerializeBase::GraphRematerializeBase;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    for (Block &block : func.getBody())
      numCloned += rematerializeInBackward(block);
  }
};

} // namespace
