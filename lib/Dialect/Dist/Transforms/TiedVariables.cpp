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
// Global-norm clipping is made stage-local first (splitGlobalNormClips):
// each stage's sum of squares of its own gradients, a per-step exchange of
// these scalars, and the norm and scale computed in every stage. A tied
// variable's gradient enters the norm once, in its original stage, after
// the exchange of the partials.
//
//===----------------------------------------------------------------------===//

#include "TiedVariables.h"

#include "strait/Dialect/Graph/GraphOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/SmallPtrSet.h"

#include <map>
#include <set>
#include <string>

using namespace mlir;
using namespace strait;

/// The sum of `partial` in stage order, the same on every stage that forms
/// it: one Add per term after the first, each passed to `added`.
static Value sumInStageOrder(OpBuilder &b, Location loc, const std::map<int64_t, Value> &partial,
                             llvm::function_ref<void(Operation *)> added) {
  Value sum;
  for (const auto &[stage, p] : partial) {
    if (!sum) {
      sum = p;
      continue;
    }
    auto add = b.create<graph::AddOp>(loc, sum, p);
    added(add);
    sum = add;
  }
  return sum;
}

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
  Replicator(func::FuncOp func, SymbolTable &symbols, DenseMap<Operation *, int64_t> &stageOf,
             const strait::dist::detail::StageClips &clips)
      : body(func.getBody().front()), symbols(symbols), stageOf(stageOf), clips(clips) {}

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
  const strait::dist::detail::StageClips &clips;
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
    if (!clips.normTerms.contains(op) && llvm::any_of(op->getOperands(), [&](Value v) {
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
      if (!d || d == acc || inUpdate.contains(d) || clips.perStage.count(v))
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
  for (int64_t c : copies)
    maps[c].map(acc.getResult(),
                sumInStageOrder(b, loc, partial, [&](Operation *add) { stageOf[add] = c; }));
  // The update, once per copy; its reads and constants cloned with it.
  llvm::SetVector<Operation *> leaves;
  for (Operation *op : update) {
    b.setInsertionPoint(op);
    for (int64_t c : copies) {
      IRMapping &m = maps[c];
      for (Value v : op->getOperands()) {
        if (auto it = clips.perStage.find(v); it != clips.perStage.end()) {
          m.map(v, it->second.at(c));
          continue;
        }
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
  // Values of the update read outside it (loss scaling's found_inf, which
  // the stage sums with its other gradients' flags; the clip's sum of
  // squares of the unscaled gradient) come from the copy in the reader's
  // stage (every copy holds the same total gradient).
  llvm::SmallPtrSet<Operation *, 16> inUpdate(update.begin(), update.end());
  auto own = maps.find(stageOf.lookup(acc));
  for (Operation *op : update)
    for (Value r : op->getResults())
      for (OpOperand &use : llvm::make_early_inc_range(r.getUses())) {
        if (inUpdate.contains(use.getOwner()))
          continue;
        auto it = maps.find(stageOf.lookup(use.getOwner()));
        if (it == maps.end())
          it = own != maps.end() ? own : maps.begin();
        use.set(it->second.lookup(r));
      }
  for (Operation *op : llvm::reverse(update))
    erase(op);
  // The clip's sum of squares of the gradient (one, in the accumulation's
  // stage) reads that stage's sum of the partials.
  for (OpOperand &use : llvm::make_early_inc_range(acc->getUses())) {
    auto it = maps.find(stageOf.lookup(use.getOwner()));
    use.set((it != maps.end() ? it->second : maps.begin()->second).lookup(acc.getResult()));
  }
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
    func::FuncOp func, SymbolTable &symbols, DenseMap<Operation *, int64_t> &stageOf,
    const StageClips &clips) {
  return Replicator(func, symbols, stageOf, clips).run();
}

/// Rewrites one clip whose gradients `stageOf` places (see the header).
static void splitClip(graph::ClipByGlobalNormOp clip, const std::set<int64_t> &stages,
                      DenseMap<Operation *, int64_t> &stageOf,
                      strait::dist::detail::StageClips &out) {
  OpBuilder b(clip);
  Location loc = clip.getLoc();
  auto scalar = RankedTensorType::get({}, b.getF32Type());
  auto place = [&](Operation *op, int64_t stage) {
    stageOf[op] = stage;
    return op->getResult(0);
  };
  auto constant = [&](float v, int64_t stage) {
    return place(b.create<graph::ConstantOp>(loc, DenseElementsAttr::get(scalar, v)), stage);
  };
  // Each stage's sum of squares of its own gradients.
  std::map<int64_t, Value> partial;
  SmallVector<int64_t> gradStage;
  for (Value g : clip.getGrads()) {
    int64_t s = stageOf.lookup(g.getDefiningOp());
    gradStage.push_back(s);
    auto type = cast<RankedTensorType>(g.getType());
    SmallVector<int64_t> axes = llvm::to_vector(llvm::seq<int64_t>(0, type.getRank()));
    auto sq = b.create<graph::ReduceSumSquareOp>(loc, scalar, g, b.getDenseI64ArrayAttr(axes),
                                                 b.getI64IntegerAttr(0), b.getI64IntegerAttr(0));
    out.normTerms.insert(sq);
    Value v = place(sq, s);
    auto [it, inserted] = partial.try_emplace(s, v);
    if (!inserted)
      it->second = place(b.create<graph::AddOp>(loc, it->second, v), s);
  }
  // In every stage: the stages' sums in stage order, the norm, the scale.
  std::map<int64_t, Value> norm, scale;
  float maxNorm = clip.getMaxNorm().convertToFloat();
  for (int64_t t : stages) {
    Value total;
    for (auto &[s, p] : partial)
      total = total ? place(b.create<graph::AddOp>(loc, total, p), t) : p;
    Value n = place(b.create<graph::SqrtOp>(loc, total), t);
    Value denom = place(b.create<graph::AddOp>(loc, n, constant(1e-6f, t)), t);
    Value ratio = place(b.create<graph::DivOp>(loc, constant(maxNorm, t), denom), t);
    scale[t] =
        place(b.create<graph::MinOp>(loc, scalar, ValueRange{ratio, constant(1.0f, t)}), t);
    norm[t] = n;
  }
  for (auto [i, g] : llvm::enumerate(clip.getGrads())) {
    Value s = scale[gradStage[i]];
    out.perStage[s] = scale;
    Value clipped = place(b.create<graph::MulOp>(loc, g, s), gradStage[i]);
    clip.getClipped()[i].replaceAllUsesWith(clipped);
  }
  for (OpOperand &use : llvm::make_early_inc_range(clip.getGlobalNorm().getUses())) {
    auto it = stageOf.find(use.getOwner());
    use.set(it != stageOf.end() && norm.count(it->second) ? norm[it->second]
                                                           : norm.begin()->second);
  }
  stageOf.erase(clip);
  clip.erase();
}

/// Loss scaling across stages: one UnscaleGradients per gradient, in its
/// stage; each stage sums its gradients' flags, and every stage adds the
/// stages' sums in stage order (only scalars cross stages), so that every
/// stage's optimizers skip together. The sums are no part of any variable's
/// update (normTerms) and every stage's total stands for the others
/// (perStage); a tied variable's copies each check the total gradient, and
/// the flag its owner stage sums is its copy's there (Replicator::replicate).
static void splitUnscale(graph::UnscaleGradientsOp unscale, const std::set<int64_t> &stages,
                         DenseMap<Operation *, int64_t> &stageOf,
                         strait::dist::detail::StageClips &out) {
  OpBuilder b(unscale);
  Location loc = unscale.getLoc();
  auto place = [&](Operation *op, int64_t stage) {
    stageOf[op] = stage;
    return op->getResult(0);
  };
  std::map<int64_t, Value> partial;
  for (auto [i, g] : llvm::enumerate(unscale.getGrads())) {
    int64_t s = stageOf.lookup(g.getDefiningOp());
    auto one = b.create<graph::UnscaleGradientsOp>(loc, unscale.getScale(), ValueRange{g});
    Value flag = place(one, s);
    unscale.getUnscaled()[i].replaceAllUsesWith(one.getUnscaled()[0]);
    auto [it, inserted] = partial.try_emplace(s, flag);
    if (!inserted) {
      auto add = b.create<graph::AddOp>(loc, it->second, flag);
      out.normTerms.insert(add);
      it->second = place(add, s);
    }
  }
  std::map<int64_t, Value> total;
  for (int64_t t : stages)
    total[t] = sumInStageOrder(b, loc, partial, [&](Operation *add) {
      out.normTerms.insert(add);
      place(add, t);
    });
  for (auto &[t, v] : total)
    out.perStage[v] = total;
  bool returned = false;
  for (OpOperand &use : llvm::make_early_inc_range(unscale.getFoundInf().getUses())) {
    auto it = stageOf.find(use.getOwner());
    returned |= isa<func::ReturnOp>(use.getOwner());
    use.set(it != stageOf.end() && total.count(it->second) ? total[it->second]
                                                            : total.begin()->second);
  }
  // The launcher of every stage reads the flag (its scale follows it): each
  // other stage's total is a result of the same name, which the stage split
  // gives to that stage.
  auto func = unscale->getParentOfType<func::FuncOp>();
  Operation *ret = func.getBody().front().getTerminator();
  for (auto &[t, v] : total) {
    if (!returned || llvm::is_contained(ret->getOperands(), v))
      continue;
    unsigned n = func.getNumResults();
    func.insertResult(n, v.getType(),
                      b.getDictionaryAttr(b.getNamedAttr("graph.name", b.getStringAttr("found_inf"))));
    ret->insertOperands(n, v);
  }
  stageOf.erase(unscale);
  unscale.erase();
}

strait::dist::detail::StageClips
strait::dist::detail::splitGlobalNormClips(func::FuncOp func,
                                           DenseMap<Operation *, int64_t> &stageOf) {
  StageClips out;
  std::set<int64_t> stages;
  for (auto &[op, s] : stageOf)
    stages.insert(s);
  if (stages.size() < 2)
    return out;
  SmallVector<graph::UnscaleGradientsOp> unscales;
  for (Operation &op : func.getBody().front())
    if (auto u = dyn_cast<graph::UnscaleGradientsOp>(op))
      unscales.push_back(u);
  for (graph::UnscaleGradientsOp u : unscales)
    if (llvm::all_of(u.getGrads(), [&](Value g) {
          return g.getDefiningOp() && stageOf.count(g.getDefiningOp());
        }))
      splitUnscale(u, stages, stageOf, out);
  SmallVector<graph::ClipByGlobalNormOp> clips;
  for (Operation &op : func.getBody().front())
    if (auto clip = dyn_cast<graph::ClipByGlobalNormOp>(op))
      clips.push_back(clip);
  for (graph::ClipByGlobalNormOp clip : clips)
    if (llvm::all_of(clip.getGrads(), [&](Value g) {
          auto type = dyn_cast<RankedTensorType>(g.getType());
          return type && type.getElementType().isF32() && g.getDefiningOp() &&
                 stageOf.count(g.getDefiningOp());
        }))
      splitClip(clip, stages, stageOf, out);
  return out;
}
