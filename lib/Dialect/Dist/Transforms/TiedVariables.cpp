//===- TiedVariables.cpp - One copy of a tied variable per stage ----------===//
//
// Megatron's treatment of tied embeddings: instead of sending a trained
// variable from its owner stage to every other stage that reads it (each
// micro-batch, and its gradient back), each reading stage keeps a copy.
// Each copy stage accumulates its own partial gradient over the
// micro-batches; once per step every copy stage receives the other stages'
// partials (dist-insert-comm turns the cross-stage uses into per-step
// transfers) and sums them in stage order, so every copy applies the same
// optimizer update to the same gradient and the copies stay bit-identical.
//
//===----------------------------------------------------------------------===//

#include "TiedVariables.h"

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>
#include <set>
#include <string>

using namespace mlir;
using namespace strait;

namespace {

constexpr llvm::StringLiteral kOpIdAttr = "graph.op_id";
constexpr llvm::StringLiteral kGradOfAttr = "graph.grad_of";
constexpr llvm::StringLiteral kStateOfAttr = "graph.optimizer_state_of";

bool isLeaf(Operation *op) { return isa<graph::ConstantOp, graph::ReadVariableOp>(op); }

/// One trained variable with its gradient accumulation.
struct Candidate {
  graph::VariableOp var;
  graph::AccumulateGradOp acc;
};

class Replicator {
public:
  Replicator(func::FuncOp func, SymbolTable &symbols, DenseMap<Operation *, int64_t> &stageOf)
      : body(func.getBody().front()), symbols(symbols), stageOf(stageOf) {}

  llvm::StringSet<> run();

private:
  /// Stages of the placed (forward and backward) ops reading `name`.
  std::set<int64_t> readerStages(StringRef name) const;
  /// `name` itself or an optimizer state of it.
  bool belongsTo(StringRef other, StringRef name) const;
  /// The ops depending on `acc`, in block order, if they can be cloned into
  /// every copy stage; otherwise `why` says what stops it.
  std::optional<SmallVector<Operation *>> updateOf(graph::AccumulateGradOp acc,
                                                   StringRef name, std::string &why) const;
  /// The gradient terms `acc` sums (the leaves of its Add tree, left to
  /// right) and the Adds of the tree, root first.
  void gradientTerms(graph::AccumulateGradOp acc, SmallVectorImpl<Value> &terms,
                     SmallVectorImpl<Operation *> &tree) const;
  void replicate(graph::AccumulateGradOp acc, ArrayRef<Operation *> update,
                 ArrayRef<Value> terms, ArrayRef<Operation *> tree,
                 const std::set<int64_t> &copies);

  Block &body;
  SymbolTable &symbols;
  DenseMap<Operation *, int64_t> &stageOf;
  llvm::StringSet<> assigned;
};

} // namespace

std::set<int64_t> Replicator::readerStages(StringRef name) const {
  std::set<int64_t> stages;
  for (Operation &op : body)
    if (auto read = dyn_cast<graph::ReadVariableOp>(op); read && read.getVariable() == name)
      for (Operation *user : read->getUsers())
        if (user->hasAttr(kOpIdAttr) || user->hasAttr(kGradOfAttr))
          if (auto it = stageOf.find(user); it != stageOf.end())
            stages.insert(it->second);
  return stages;
}

bool Replicator::belongsTo(StringRef other, StringRef name) const {
  if (other == name)
    return true;
  auto var = symbols.lookup<graph::VariableOp>(other);
  auto of = var ? var->getAttrOfType<FlatSymbolRefAttr>(kStateOfAttr) : nullptr;
  return of && of.getValue() == name;
}

std::optional<SmallVector<Operation *>>
Replicator::updateOf(graph::AccumulateGradOp acc, StringRef name, std::string &why) const {
  llvm::SmallPtrSet<Operation *, 16> inUpdate;
  SmallVector<Operation *> update;
  for (Operation *op = acc->getNextNode(); op; op = op->getNextNode())
    if (llvm::any_of(op->getOperands(), [&](Value v) {
          Operation *d = v.getDefiningOp();
          return d && (d == acc || inUpdate.contains(d));
        })) {
      inUpdate.insert(op);
      update.push_back(op);
    }
  for (Operation *op : update) {
    if (isa<func::ReturnOp>(op) || !isa<graph::GraphDialect>(op->getDialect()) ||
        isa<graph::AccumulateGradOp>(op)) {
      why = ("its gradient is used by '" + op->getName().getStringRef() + "'").str();
      return std::nullopt;
    }
    if (auto assign = dyn_cast<graph::AssignVariableOp>(op);
        assign && !belongsTo(assign.getVariable(), name)) {
      why = ("its update assigns @" + assign.getVariable()).str();
      return std::nullopt;
    }
    for (Value v : op->getOperands()) {
      Operation *d = v.getDefiningOp();
      if (!d || d == acc || inUpdate.contains(d))
        continue;
      auto read = dyn_cast<graph::ReadVariableOp>(d);
      if (isa<graph::ConstantOp>(d) ||
          (read && (belongsTo(read.getVariable(), name) ||
                    !assigned.contains(read.getVariable()))))
        continue;
      why = ("its update '" + op->getName().getStringRef() + "' also reads a value of '" +
             d->getName().getStringRef() + "' (e.g. global-norm clipping)")
                .str();
      return std::nullopt;
    }
  }
  // Every assignment of the variable and its state must be part of it.
  for (Operation &op : body)
    if (auto assign = dyn_cast<graph::AssignVariableOp>(op);
        assign && belongsTo(assign.getVariable(), name) && !inUpdate.contains(&op)) {
      why = ("@" + assign.getVariable() + " is assigned outside its update").str();
      return std::nullopt;
    }
  return update;
}

void Replicator::gradientTerms(graph::AccumulateGradOp acc, SmallVectorImpl<Value> &terms,
                               SmallVectorImpl<Operation *> &tree) const {
  Type type = acc.getGrad().getType();
  SmallVector<Value> stack{acc.getGrad()};
  while (!stack.empty()) {
    Value v = stack.pop_back_val();
    auto add = v.getDefiningOp<graph::AddOp>();
    if (add && v.hasOneUse() && add->getNumOperands() == 2 &&
        add->getOperand(0).getType() == type && add->getOperand(1).getType() == type) {
      tree.push_back(add);
      stack.push_back(add->getOperand(1));
      stack.push_back(add->getOperand(0));
      continue;
    }
    terms.push_back(v);
  }
}

void Replicator::replicate(graph::AccumulateGradOp acc, ArrayRef<Operation *> update,
                           ArrayRef<Value> terms, ArrayRef<Operation *> tree,
                           const std::set<int64_t> &copies) {
  std::map<int64_t, SmallVector<Value>> termsByStage;
  for (Value t : terms)
    termsByStage[stageOf.lookup(t.getDefiningOp())].push_back(t);
  OpBuilder b(acc);
  Location loc = acc.getLoc();
  // Each stage sums its own terms and accumulates them over the micro-batches.
  std::map<int64_t, Value> partial;
  for (auto &[stage, ts] : termsByStage) {
    Value sum = ts.front();
    for (Value t : llvm::drop_begin(ts)) {
      auto add = b.create<graph::AddOp>(loc, sum, t);
      stageOf[add] = stage;
      sum = add;
    }
    Operation *a = b.clone(*acc);
    a->setOperand(0, sum);
    stageOf[a] = stage;
    partial[stage] = a->getResult(0);
  }
  // Every copy adds the partials in stage order: the same sum everywhere.
  std::map<int64_t, IRMapping> maps;
  for (int64_t c : copies) {
    Value sum;
    for (auto &[stage, p] : partial) {
      if (!sum) {
        sum = p;
        continue;
      }
      auto add = b.create<graph::AddOp>(loc, sum, p);
      stageOf[add] = c;
      sum = add;
    }
    maps[c].map(acc.getResult(), sum);
  }
  // The update, once per copy; its reads and constants cloned with it.
  llvm::SetVector<Operation *> leaves;
  for (Operation *op : update) {
    b.setInsertionPoint(op);
    for (int64_t c : copies) {
      IRMapping &m = maps[c];
      for (Value v : op->getOperands()) {
        Operation *d = v.getDefiningOp();
        if (!d || !isLeaf(d) || m.contains(v))
          continue;
        leaves.insert(d);
        Operation *leaf = b.clone(*d);
        leaf->removeAttr(kOpIdAttr);
        stageOf[leaf] = c;
        m.map(d->getResults(), leaf->getResults());
      }
      stageOf[b.clone(*op, m)] = c;
    }
  }
  auto erase = [&](Operation *op) {
    stageOf.erase(op);
    op->erase();
  };
  for (Operation *op : llvm::reverse(update))
    erase(op);
  erase(acc);
  for (Operation *add : tree)
    erase(add);
  for (Operation *leaf : leaves)
    if (leaf->use_empty())
      erase(leaf);
}

llvm::StringSet<> Replicator::run() {
  SmallVector<Candidate> candidates;
  for (Operation &op : body) {
    if (auto assign = dyn_cast<graph::AssignVariableOp>(op))
      assigned.insert(assign.getVariable());
    if (auto acc = dyn_cast<graph::AccumulateGradOp>(op))
      if (auto var = symbols.lookup<graph::VariableOp>(acc.getVariable()))
        candidates.push_back({var, acc});
  }
  llvm::StringSet<> replicated;
  for (Candidate &c : candidates) {
    StringRef name = c.var.getSymName();
    if (!assigned.contains(name))
      continue;
    std::set<int64_t> copies = readerStages(name);
    SmallVector<Value> terms;
    SmallVector<Operation *> tree;
    gradientTerms(c.acc, terms, tree);
    bool placed = llvm::all_of(terms, [&](Value t) {
      return t.getDefiningOp() && stageOf.count(t.getDefiningOp());
    });
    if (placed)
      for (Value t : terms)
        copies.insert(stageOf.lookup(t.getDefiningOp()));
    if (copies.size() < 2)
      continue;
    std::string why = "a gradient term is computed outside every stage";
    std::optional<SmallVector<Operation *>> update;
    if (placed)
      update = updateOf(c.acc, name, why);
    if (!update) {
      c.acc.emitWarning() << "variable @" << name << " is read in "
                          << copies.size() << " pipeline stages but cannot have a copy in "
                             "each: "
                          << why << "; its owner stage sends it every micro-batch instead";
      continue;
    }
    for (Operation *op : *update)
      if (auto assign = dyn_cast<graph::AssignVariableOp>(op))
        replicated.insert(assign.getVariable());
    replicate(c.acc, *update, terms, tree, copies);
  }
  return replicated;
}

llvm::StringSet<> strait::dist::detail::replicateTiedVariables(
    func::FuncOp func, SymbolTable &symbols, DenseMap<Operation *, int64_t> &stageOf) {
  return Replicator(func, symbols, stageOf).run();
}
