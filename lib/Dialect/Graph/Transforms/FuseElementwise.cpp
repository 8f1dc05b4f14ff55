//===- FuseElementwise.cpp - graph-fuse-elementwise -----------------------===//
//
// Groups connected elementwise ops of one iteration shape into
// graph.FusedElementwise. The analysis (fusionGroups) only computes groups;
// the pass then builds one program per group. See docs/graph-dialect.md,
// "Fused elementwise programs".
//
//===----------------------------------------------------------------------===//

#include "ElementwiseFusion.h"

#include "strait/Dialect/Graph/GraphPasses.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/MapVector.h"
#include "llvm/ADT/SetVector.h"
#include "llvm/ADT/TypeSwitch.h"

#include <functional>
#include <limits>

namespace strait::graph {
#define GEN_PASS_DEF_GRAPHFUSEELEMENTWISE
#include "strait/Dialect/Graph/GraphPasses.h.inc"
} // namespace strait::graph

using namespace mlir;
using namespace strait::graph;

namespace strait::graph::fusion {

static std::optional<FusedOpcode> opcodeOf(Operation *op) {
  using O = std::optional<FusedOpcode>;
  return llvm::TypeSwitch<Operation *, O>(op)
      .Case([](NegOp) { return FusedOpcode::Neg; })
      .Case([](AbsOp) { return FusedOpcode::Abs; })
      .Case([](ExpOp) { return FusedOpcode::Exp; })
      .Case([](LogOp) { return FusedOpcode::Log; })
      .Case([](SqrtOp) { return FusedOpcode::Sqrt; })
      .Case([](ReciprocalOp) { return FusedOpcode::Reciprocal; })
      .Case([](TanhOp) { return FusedOpcode::Tanh; })
      .Case([](SigmoidOp) { return FusedOpcode::Sigmoid; })
      .Case([](ReluOp) { return FusedOpcode::Relu; })
      .Case([](ErfOp) { return FusedOpcode::Erf; })
      .Case([](SinOp) { return FusedOpcode::Sin; })
      .Case([](CosOp) { return FusedOpcode::Cos; })
      .Case([](FloorOp) { return FusedOpcode::Floor; })
      .Case([](CeilOp) { return FusedOpcode::Ceil; })
      .Case([](NotOp) { return FusedOpcode::Not; })
      .Case([](AddOp) { return FusedOpcode::Add; })
      .Case([](SubOp) { return FusedOpcode::Sub; })
      .Case([](MulOp) { return FusedOpcode::Mul; })
      .Case([](DivOp) { return FusedOpcode::Div; })
      .Case([](PowOp) { return FusedOpcode::Pow; })
      .Case([](MaxOp m) { return m->getNumOperands() == 2 ? O(FusedOpcode::Max) : O(); })
      .Case([](MinOp m) { return m->getNumOperands() == 2 ? O(FusedOpcode::Min) : O(); })
      .Case([](EqualOp) { return FusedOpcode::Equal; })
      .Case([](LessOp) { return FusedOpcode::Less; })
      .Case([](LessOrEqualOp) { return FusedOpcode::LessOrEqual; })
      .Case([](GreaterOp) { return FusedOpcode::Greater; })
      .Case([](GreaterOrEqualOp) { return FusedOpcode::GreaterOrEqual; })
      .Case([](AndOp) { return FusedOpcode::And; })
      .Case([](OrOp) { return FusedOpcode::Or; })
      .Case([](WhereOp) { return FusedOpcode::Where; })
      .Case([](CastOp) { return FusedOpcode::Identity; })
      .Default([](Operation *) { return O(); });
}

/// Float values are f32, bf16 or f16 tensors (registers hold f32; 16-bit
/// inputs load exactly, 16-bit results are rounded), booleans i1 tensors.
static std::optional<FusedKind> kindOf(Type t) {
  auto rt = dyn_cast<RankedTensorType>(t);
  if (!rt || !rt.hasStaticShape())
    return std::nullopt;
  Type e = rt.getElementType();
  if (e.isF32() || e.isBF16() || e.isF16())
    return FusedKind::Float;
  if (rt.getElementType().isInteger(1))
    return FusedKind::Bool;
  return std::nullopt;
}

std::optional<FusedOpcode> fusibleOpcode(Operation *op) {
  std::optional<FusedOpcode> code = opcodeOf(op);
  if (!code || op->getNumResults() != 1)
    return std::nullopt;
  FusedOpcodeInfo info = getFusedOpcodeInfo(*code);
  std::optional<FusedKind> result = kindOf(op->getResult(0).getType());
  if (!result || *result != info.result || op->getNumOperands() != info.arity ||
      cast<RankedTensorType>(op->getResult(0).getType()).getRank() >
          FusedElementwiseOp::kMaxRank)
    return std::nullopt;
  for (auto [i, v] : llvm::enumerate(op->getOperands())) {
    std::optional<FusedKind> k = kindOf(v.getType());
    if (!k)
      return std::nullopt;
    FusedKind want = *code == FusedOpcode::Where && i == 0 ? FusedKind::Bool : info.operand;
    if (*code != FusedOpcode::Identity && *k != want)
      return std::nullopt;
  }
  return code;
}

Type lowFloatElement(Type t) {
  Type e = cast<ShapedType>(t).getElementType();
  return e.isBF16() || e.isF16() ? e : Type();
}

std::optional<float> inlinedConstant(Value v) {
  auto c = v.getDefiningOp<ConstantOp>();
  if (!c)
    return std::nullopt;
  auto dense = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!dense || !dense.isSplat())
    return std::nullopt;
  Type e = dense.getElementType();
  if (e.isF32() || e.isBF16() || e.isF16()) {
    APFloat f = dense.getSplatValue<APFloat>();
    bool lost = false;
    f.convert(APFloat::IEEEsingle(), APFloat::rmNearestTiesToEven, &lost);
    return f.convertToFloat();
  }
  // A boolean constant stays an input (an i1 register): an inlined Const is a
  // float register, which And/Or/Not/Where's condition cannot read
  // (transformers' causal masks And a comparison with `true`).
  return std::nullopt;
}

DenseMap<Operation *, int> phases(Block &block) {
  DenseMap<Operation *, int> phase;
  for (Operation &op : block) {
    bool backward = op.hasAttr("graph.grad_of") || op.hasAttr("dist.backward");
    bool perStep = isa<AssignVariableOp>(op);
    for (Value v : op.getOperands()) {
      Operation *d = v.getDefiningOp();
      if (!d || d->getBlock() != &block)
        continue;
      int p = phase.lookup(d);
      backward |= (p & 1) != 0;
      perStep |= (p & 2) != 0 || isa<AccumulateGradOp>(d);
    }
    phase[&op] = (backward ? 1 : 0) | (perStep ? 2 : 0);
  }
  return phase;
}

} // namespace strait::graph::fusion

using namespace strait::graph::fusion;

namespace {

struct Group {
  SmallVector<Operation *> members;
  bool alive = true;
};

/// Whether member `m`'s 16-bit result is read inside the group: its register
/// is then rounded (RoundBF16/RoundF16) as the unfused result would be. A
/// result only stored needs no instruction: the store rounds.
bool needsRound(Operation *m, const llvm::SmallPtrSetImpl<Operation *> &in) {
  return lowFloatElement(m->getResult(0).getType()) &&
         llvm::any_of(m->getResult(0).getUsers(), [&](Operation *u) { return in.contains(u); });
}

/// The groups of fusible ops of `block`, each in program order, with at
/// least two ops. Pure: the IR is not changed.
class GroupBuilder {
public:
  GroupBuilder(Block &block, unsigned maxInstructions)
      : block(block), maxInstructions(maxInstructions) {
    int64_t i = 0;
    for (Operation &op : block)
      position[&op] = i++;
  }

  std::vector<SmallVector<Operation *>> run();

private:
  /// Whether `members` can become one fused op placed before its first
  /// outside user: every input is defined before it, within the limits.
  bool placeable(ArrayRef<Operation *> members) const;
  int64_t firstOutsideUse(ArrayRef<Operation *> members) const {
    llvm::SmallPtrSet<Operation *, 16> in(members.begin(), members.end());
    int64_t first = std::numeric_limits<int64_t>::max();
    for (Operation *m : members)
      for (Operation *u : m->getResult(0).getUsers())
        if (!in.contains(u))
          first = std::min(first, positionOf(u));
    return first;
  }
  int64_t positionOf(Operation *user) const {
    Operation *anc = block.findAncestorOpInBlock(*user);
    return anc ? position.lookup(anc) : std::numeric_limits<int64_t>::max();
  }

  Block &block;
  unsigned maxInstructions;
  DenseMap<Operation *, int64_t> position;
  DenseMap<Operation *, size_t> groupOf;
  std::vector<Group> groups;
};

bool GroupBuilder::placeable(ArrayRef<Operation *> members) const {
  llvm::SmallPtrSet<Operation *, 16> in(members.begin(), members.end());
  llvm::SmallPtrSet<Value, 16> inputs, constants;
  int64_t lastInput = -1, firstOutsideUse = std::numeric_limits<int64_t>::max();
  unsigned outputs = 0, rounds = 0;
  for (Operation *m : members) {
    rounds += needsRound(m, in);
    for (Value v : m->getOperands()) {
      Operation *d = v.getDefiningOp();
      if (d && in.contains(d))
        continue;
      if (inlinedConstant(v)) {
        constants.insert(v);
        continue;
      }
      inputs.insert(v);
      if (d)
        lastInput = std::max(lastInput, positionOf(d));
    }
    bool output = false;
    for (Operation *u : m->getResult(0).getUsers())
      if (!in.contains(u)) {
        output = true;
        firstOutsideUse = std::min(firstOutsideUse, positionOf(u));
      }
    outputs += output;
  }
  return lastInput < firstOutsideUse && inputs.size() <= FusedElementwiseOp::kMaxInputs &&
         outputs <= FusedElementwiseOp::kMaxOutputs &&
         constants.size() <= FusedElementwiseOp::kMaxConstants &&
         members.size() + rounds + constants.size() <= maxInstructions;
}

std::vector<SmallVector<Operation *>> GroupBuilder::run() {
  DenseMap<Operation *, int> phase = phases(block);
  for (Operation &op : block.without_terminator()) {
    if (!fusibleOpcode(&op))
      continue;
    auto shape = cast<RankedTensorType>(op.getResult(0).getType()).getShape();
    SmallVector<Operation *> merged{&op};
    SmallVector<size_t> absorbed;
    for (Value v : op.getOperands()) {
      Operation *d = v.getDefiningOp();
      auto it = d ? groupOf.find(d) : groupOf.end();
      if (it == groupOf.end() || llvm::is_contained(absorbed, it->second) ||
          phase.lookup(d) != phase.lookup(&op) ||
          cast<RankedTensorType>(d->getResult(0).getType()).getShape() != shape)
        continue;
      SmallVector<Operation *> trial(groups[it->second].members);
      trial.append(merged);
      if (!placeable(trial))
        continue;
      merged = std::move(trial);
      absorbed.push_back(it->second);
    }
    for (size_t g : absorbed)
      groups[g].alive = false;
    llvm::sort(merged, [&](Operation *a, Operation *b) {
      return position.lookup(a) < position.lookup(b);
    });
    for (Operation *m : merged)
      groupOf[m] = groups.size();
    groups.push_back(Group{std::move(merged)});
  }
  // In the order of their places (first outside use): a group placed
  // earlier is fused first, so each group's inputs from other groups are
  // already where they will stay or still at their original ops.
  std::vector<std::pair<int64_t, SmallVector<Operation *>>> placed;
  for (Group &g : groups)
    if (g.alive && g.members.size() >= 2)
      placed.push_back({firstOutsideUse(g.members), std::move(g.members)});
  std::stable_sort(placed.begin(), placed.end(),
                   [](const auto &a, const auto &b) { return a.first < b.first; });
  std::vector<SmallVector<Operation *>> out;
  for (auto &p : placed)
    out.push_back(std::move(p.second));
  return out;
}

/// Replaces the ops of one group (in program order) by a FusedElementwise
/// placed before the first op outside the group that reads a result. Checks
/// on the current IR that every input is defined before that place (other
/// groups fused before may have moved an input); if not, leaves the group
/// unfused and returns false.
bool fuseGroup(ArrayRef<Operation *> members) {
  llvm::SmallPtrSet<Operation *, 16> in(members.begin(), members.end());
  Block *block = members.front()->getBlock();
  MLIRContext *ctx = members.front()->getContext();
  llvm::MapVector<Value, int32_t> inputs;
  for (Operation *m : members)
    for (Value v : m->getOperands()) {
      Operation *d = v.getDefiningOp();
      if ((!d || !in.contains(d)) && !inlinedConstant(v) && !inputs.count(v))
        inputs.insert({v, static_cast<int32_t>(inputs.size())});
    }
  SmallVector<Attribute> ops;
  SmallVector<int32_t> args;
  SmallVector<float> constants;
  DenseMap<Value, int32_t> reg;
  for (auto &[v, r] : inputs)
    reg[v] = r;
  int32_t next = static_cast<int32_t>(inputs.size());
  auto emit = [&](FusedOpcode code, std::array<int32_t, 3> a) {
    ops.push_back(FusedOpcodeAttr::get(ctx, code));
    args.append(a.begin(), a.end());
    return next++;
  };
  SmallVector<Value> outputs;
  Operation *insertBefore = block->getTerminator();
  for (Operation *m : members) {
    std::array<int32_t, 3> a = {-1, -1, -1};
    for (auto [i, v] : llvm::enumerate(m->getOperands())) {
      if (!reg.count(v)) { // an inlined constant, first use
        constants.push_back(*inlinedConstant(v));
        reg[v] = emit(FusedOpcode::Const, {int32_t(constants.size() - 1), -1, -1});
      }
      a[i] = reg[v];
    }
    Value res = m->getResult(0);
    reg[res] = emit(*fusibleOpcode(m), a);
    if (needsRound(m, in))
      reg[res] = emit(lowFloatElement(res.getType()).isBF16() ? FusedOpcode::RoundBF16
                                                              : FusedOpcode::RoundF16,
                      {reg[res], -1, -1});
    for (Operation *u : res.getUsers()) {
      if (in.contains(u))
        continue;
      if (!llvm::is_contained(outputs, res))
        outputs.push_back(res);
      Operation *anc = block->findAncestorOpInBlock(*u);
      // Positions in the block: isBeforeInBlock is cached by MLIR.
      if (anc && anc->isBeforeInBlock(insertBefore))
        insertBefore = anc;
    }
  }
  SmallVector<int32_t> outRegs;
  SmallVector<Type> types;
  for (Value v : outputs) {
    outRegs.push_back(reg[v]);
    types.push_back(v.getType());
  }
  Operation *root = members.back();
  for (auto &[v, r] : inputs) {
    Operation *d = v.getDefiningOp();
    Operation *anc = d ? block->findAncestorOpInBlock(*d) : nullptr;
    if (anc && !in.contains(anc) && !anc->isBeforeInBlock(insertBefore))
      return false;
  }
  OpBuilder b(insertBefore);
  SmallVector<Value> operands;
  for (auto &[v, r] : inputs)
    operands.push_back(v);
  auto fused = b.create<FusedElementwiseOp>(root->getLoc(), types, operands, b.getArrayAttr(ops),
                                            b.getDenseI32ArrayAttr(args),
                                            b.getDenseF32ArrayAttr(constants),
                                            b.getDenseI32ArrayAttr(outRegs));
  // Dialect attributes (dist.stage, graph.op_id, graph.grad_of) of the last
  // op; a backward group keeps a graph.grad_of so the exporter sees its phase.
  for (NamedAttribute attr : root->getDiscardableAttrs())
    fused->setAttr(attr.getName(), attr.getValue());
  if (!fused->hasAttr("graph.grad_of"))
    for (Operation *m : members)
      if (Attribute g = m->getAttr("graph.grad_of")) {
        fused->setAttr("graph.grad_of", g);
        break;
      }
  // Provenance for the planner's kernel list (straitc --emit=kernels tags
  // each op with its kernel signature, graph.kernel): the members' ones.
  SmallVector<Attribute> memberKernels;
  for (Operation *m : members)
    if (auto k = m->getAttrOfType<StringAttr>("graph.kernel"))
      memberKernels.push_back(k);
  fused->removeAttr("graph.kernel");
  if (!memberKernels.empty())
    fused->setAttr("graph.fused_kernels", b.getArrayAttr(memberKernels));
  for (auto [v, r] : llvm::zip(outputs, fused.getY()))
    v.replaceAllUsesWith(r);
  llvm::SetVector<Operation *> constOps;
  for (Operation *m : llvm::reverse(members)) {
    for (Value v : m->getOperands())
      if (auto c = v.getDefiningOp<ConstantOp>())
        constOps.insert(c);
    m->erase();
  }
  for (Operation *c : constOps)
    if (c->use_empty())
      c->erase();
  return true;
}

struct FuseElementwisePass
    : public strait::graph::impl::GraphFuseElementwiseBase<FuseElementwisePass> {
  using GraphFuseElementwiseBase::GraphFuseElementwiseBase;
  void runOnOperation() override {
    func::FuncOp func = getOperation();
    if (func.isExternal())
      return;
    if (maxInstructions < 2 || maxInstructions > FusedElementwiseOp::kMaxInstructions) {
      func.emitError("graph-fuse-elementwise: max-instructions must be in [2, ")
          << FusedElementwiseOp::kMaxInstructions << "], got "
          << static_cast<unsigned>(maxInstructions);
      return signalPassFailure();
    }
    for (Block &block : func.getBody()) {
      std::vector<SmallVector<Operation *>> groups = GroupBuilder(block, maxInstructions).run();
      for (const SmallVector<Operation *> &g : groups) {
        if (!fuseGroup(g))
          continue;
        numFusedOps += g.size();
        ++numGroups;
      }
    }
  }
};

} // namespace
