//===- Recompute.cpp - graph-recompute-blocks -----------------------------===//
//
// Block-level activation recomputation: each block's forward is re-run right
// before its backward, so that between the two only the block's inputs stay
// alive. See docs/training.md, "Activation recomputation".
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/Recompute.h"

#include "Autodiff.h"

#include "strait/Analysis/IRCostGraph.h"
#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/StringMap.h"

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHRECOMPUTEBLOCKS
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

static bool isLeaf(Operation *op) { return isa<ConstantOp, ReadVariableOp>(op); }

/// Ops that draw random numbers: a clone would draw other ones. A Dropout
/// with a graph.dropout_key (graph-build-training-step) draws from a
/// counter-based hash of its key, so a clone draws the same mask; one of
/// ratio 0 draws nothing.
static bool isRandom(Operation *op) {
  if (auto d = dyn_cast<DropoutOp>(op))
    return !op->hasAttr("graph.dropout_key") && d.getRatio().convertToFloat() > 0;
  return isa<RandomUniformLikeOp, RandomNormalLikeOp, BernoulliOp>(op);
}

namespace {
/// The forward ops of a training step grouped into blocks.
struct ForwardBlocks {
  /// Block index of every forward op (leaves excluded).
  DenseMap<Operation *, int> blockOf;
  /// The forward ops of each block, in program order.
  llvm::MapVector<int, SmallVector<Operation *>> ops;
  /// The forward op of each graph.op_id.
  DenseMap<int64_t, Operation *> byOpId;
  unsigned numKeyed = 0; ///< distinct layer keys among the weights read

  /// The block whose backward `op` (a graph.grad_of op) belongs to; -1 if
  /// none.
  int backwardBlockOf(Operation *op) const {
    auto gradOf = op->getAttrOfType<IntegerAttr>(kGradOfAttr);
    if (!gradOf)
      return -1;
    Operation *fwd = byOpId.lookup(gradOf.getInt());
    auto it = fwd ? blockOf.find(fwd) : blockOf.end();
    return it == blockOf.end() ? -1 : it->second;
  }
};
} // namespace

/// The planner's layer rule (IRCostGraph.cpp, Coarsen.cpp): the largest
/// layer key among the weights an op reads, else the latest block of its
/// producers, else the block of the op before it.
static ForwardBlocks groupForward(Block &body, Operation *firstBackward) {
  ForwardBlocks fb;
  llvm::StringMap<int> keys;
  int current = -1;
  for (Operation &op : body) {
    if (&op == firstBackward)
      break;
    if (auto id = op.getAttrOfType<IntegerAttr>(kOpIdAttr))
      fb.byOpId[id.getInt()] = &op;
    if (isLeaf(&op) || op.getNumResults() == 0)
      continue;
    int block = -1;
    for (Value v : op.getOperands())
      if (auto read = v.getDefiningOp<ReadVariableOp>()) {
        std::string key = strait::layerKeyOf(read.getVariable());
        if (!key.empty())
          block = std::max(block, keys.try_emplace(key, int(keys.size())).first->second);
      }
    if (block < 0)
      for (Value v : op.getOperands())
        if (Operation *def = v.getDefiningOp())
          if (auto it = fb.blockOf.find(def); it != fb.blockOf.end())
            block = std::max(block, it->second);
    if (block < 0)
      block = current < 0 ? 0 : current;
    current = block;
    fb.blockOf[&op] = block;
    fb.ops[block].push_back(&op);
  }
  fb.numKeyed = keys.size();
  return fb;
}

/// Recomputes one block; returns the number of ops cloned (0: nothing of
/// the block is read by its backward).
static unsigned recomputeBlock(Block &body, const ForwardBlocks &fb, int block,
                               ArrayRef<Operation *> ops) {
  auto inBlock = [&](Operation *op) {
    auto it = op ? fb.blockOf.find(op) : fb.blockOf.end();
    return it != fb.blockOf.end() && it->second == block;
  };
  // The block's first backward op, and the forward values its backward reads.
  Operation *first = nullptr;
  llvm::SetVector<Value> saved;
  for (Operation *op : ops)
    for (Value r : op->getResults())
      for (Operation *user : r.getUsers())
        if (user->getBlock() == &body && fb.backwardBlockOf(user) == block) {
          saved.insert(r);
          if (!first || user->isBeforeInBlock(first))
            first = user;
        }
  if (saved.empty())
    return 0;
  // Earlier backward ops of the block that read none of its values.
  for (Operation *op = first->getPrevNode(); op && op->hasAttr(kGradOfAttr); op = op->getPrevNode())
    if (fb.backwardBlockOf(op) == block)
      first = op;
  // What the saved values derive from inside the block (a worklist).
  llvm::SetVector<Operation *> cone;
  SmallVector<Operation *> stack;
  for (Value v : saved)
    stack.push_back(v.getDefiningOp());
  while (!stack.empty()) {
    Operation *op = stack.pop_back_val();
    if (!cone.insert(op))
      continue;
    for (Value v : op->getOperands())
      if (Operation *def = v.getDefiningOp(); inBlock(def))
        stack.push_back(def);
  }
  SmallVector<Operation *> ordered(cone.begin(), cone.end());
  llvm::sort(ordered, [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); });
  Attribute gradOf = first->getAttr(kGradOfAttr);
  OpBuilder builder(first);
  IRMapping map;
  for (Operation *op : ordered) {
    Operation *clone = builder.clone(*op, map);
    clone->setAttr(kGradOfAttr, gradOf);
    clone->setAttr(kRecomputedAttr, builder.getUnitAttr());
    clone->removeAttr(kOpIdAttr);
  }
  for (Value v : saved)
    v.replaceUsesWithIf(map.lookup(v), [&](OpOperand &use) {
      Operation *user = use.getOwner();
      return !user->hasAttr(kRecomputedAttr) && fb.backwardBlockOf(user) == block;
    });
  return ordered.size();
}

FailureOr<RecomputeResult>
strait::graph::recomputeBlocks(func::FuncOp func, llvm::function_ref<bool(Operation *)> select) {
  if (func.isExternal())
    return func.emitError("activation recomputation needs a function with a body");
  Block &body = func.getBody().front();
  Operation *firstBackward = nullptr;
  for (Operation &op : body)
    if (op.hasAttr(kGradOfAttr)) {
      firstBackward = &op;
      break;
    }
  if (!firstBackward)
    return func.emitError("activation recomputation needs a training step (a backward "
                          "pass: graph.grad_of ops; straitc --loss)");
  ForwardBlocks fb = groupForward(body, firstBackward);
  if (fb.numKeyed == 0)
    return func.emitError("activation recomputation needs blocks: no weight name has a "
                          "numeric path component (as in 'model.layers.3.mlp.weight')");
  RecomputeResult result;
  for (auto &[block, ops] : fb.ops) {
    if (ops.empty() || !select(ops.front()))
      continue;
    auto randomIt = llvm::find_if(ops, isRandom);
    if (randomIt != ops.end()) {
      (*randomIt)->emitWarning() << "block " << block << " is not recomputed: '"
                                 << (*randomIt)->getName()
                                 << "' would draw other random values in the backward";
      ++result.refused;
      continue;
    }
    if (unsigned cloned = recomputeBlock(body, fb, block, ops)) {
      result.cloned += cloned;
      ++result.blocks;
    }
  }
  return result;
}

namespace {
struct RecomputeBlocksPass
    : public strait::graph::impl::GraphRecomputeBlocksBase<RecomputeBlocksPass> {
  using GraphRecomputeBlocksBase::GraphRecomputeBlocksBase;
  void runOnOperation() override {
    FailureOr<RecomputeResult> r =
        recomputeBlocks(getOperation(), [](Operation *) { return true; });
    if (failed(r))
      return signalPassFailure();
    numBlocks += r->blocks;
    numCloned += r->cloned;
    numRefused += r->refused;
  }
};
} // namespace
