//===- Autodiff.cpp - Reverse-mode differentiation of a function ----------===//
//
// Three linear sweeps over the function's block, no recursion: forward
// activity (which values depend on a `wrt` value through differentiable
// operands), backward usefulness (which values the loss depends on), and the
// reverse sweep that asks each active op's GradientOpInterface for its
// operands' gradients and sums gradients of values used several times.
//
//===----------------------------------------------------------------------===//

#include "Autodiff.h"
#include "GradientUtils.h"

#include "llvm/ADT/DenseSet.h"

using namespace mlir;
using namespace strait;
using namespace strait::graph;

namespace {

bool isDifferentiable(Operation *op, unsigned index) {
  if (auto rule = dyn_cast<GradientOpInterface>(op))
    return rule.isDifferentiableOperand(index);
  return strait::detail::isFloatTensor(op->getOperand(index).getType());
}

class ReverseSweep {
public:
  explicit ReverseSweep(func::FuncOp func)
      : block(func.getBody().front()), terminator(block.getTerminator()),
        builder(terminator) {}

  FailureOr<GradientResult> run(Value loss, ArrayRef<Value> wrt, Value seedScale);

private:
  void markActive(ArrayRef<Value> wrt);
  void markUseful(Value loss);
  /// The first active differentiable operand of `op`, or null.
  Value activeOperand(Operation *op);
  LogicalResult checkStatic(Operation *op);
  LogicalResult differentiateOp(Operation *op);
  LogicalResult addOperandGrad(Operation *op, unsigned index, Value grad);
  void tagSince(Operation *before, Attribute id);

  Block &block;
  Operation *terminator;
  OpBuilder builder;
  SmallVector<Operation *> forward;
  /// Active value -> the `wrt` value it depends on (for diagnostics).
  DenseMap<Value, Value> source;
  DenseSet<Value> useful;
  DenseMap<Value, Value> grads;
  int64_t numBackwardOps = 0;
};

} // namespace

void ReverseSweep::markActive(ArrayRef<Value> wrt) {
  for (Value v : wrt)
    source[v] = v;
  for (Operation *op : forward) {
    Value from = activeOperand(op);
    if (!from)
      continue;
    for (Value r : op->getResults())
      if (strait::detail::isFloatTensor(r.getType()))
        source[r] = source.lookup(from);
  }
}

void ReverseSweep::markUseful(Value loss) {
  useful.insert(loss);
  for (Operation *op : llvm::reverse(forward))
    if (llvm::any_of(op->getResults(), [&](Value r) { return useful.contains(r); }))
      for (Value v : op->getOperands())
        useful.insert(v);
}

Value ReverseSweep::activeOperand(Operation *op) {
  for (auto [i, v] : llvm::enumerate(op->getOperands()))
    if (source.contains(v) && isDifferentiable(op, i))
      return v;
  return Value();
}

/// Names the variable behind an active value for diagnostics.
static std::string describeSource(Value v) {
  if (auto read = v.getDefiningOp<ReadVariableOp>())
    return ("trainable variable @" + read.getVariable()).str();
  return "a trainable value";
}

LogicalResult ReverseSweep::checkStatic(Operation *op) {
  SmallVector<Type> types(op->getOperandTypes());
  llvm::append_range(types, op->getResultTypes());
  for (Type t : types)
    if (auto tensor = dyn_cast<TensorType>(t); tensor && !tensor.hasStaticShape())
      return op->emitOpError("needs static shapes to be differentiated, got ")
             << t << "; refine shapes first (graph-infer-shapes)";
  return success();
}

void ReverseSweep::tagSince(Operation *before, Attribute id) {
  Operation *op = before ? before->getNextNode() : &block.front();
  for (; op != terminator; op = op->getNextNode()) {
    ++numBackwardOps;
    if (id)
      op->setAttr(kGradOfAttr, id);
  }
}

LogicalResult ReverseSweep::addOperandGrad(Operation *op, unsigned index,
                                           Value grad) {
  Value operand = op->getOperand(index);
  if (!source.contains(operand) || !isDifferentiable(op, index))
    return success();
  // FusedAttentionGrad has no bias gradient (graph-fuse-attention fuses
  // masks only); a bias computed from a trainable variable would silently
  // get none.
  if (!grad && isa<FusedAttentionOp>(op) && index == 3)
    return op->emitOpError("bias depends on ")
           << describeSource(source.lookup(operand))
           << ", but FusedAttentionGrad gives no gradient for the bias; keep the "
              "decomposed attention (--fuse-attention=false)";
  if (!grad && isa<FusedRotaryEmbeddingOp>(op) && index > 0)
    return op->emitOpError(index == 1 ? "Cos" : "Sin")
           << " depends on " << describeSource(source.lookup(operand))
           << ", but the fused rotary embedding gives no gradient for it; keep the "
              "decomposed form (--fuse-rotary=false)";
  if (!grad)
    return success();
  if (grad.getType() != operand.getType())
    return op->emitOpError("gradient rule produced ")
           << grad.getType() << " for operand #" << index << " of type "
           << operand.getType();
  Value &slot = grads[operand];
  slot = slot ? builder.create<AddOp>(op->getLoc(), slot, grad).getResult() : grad;
  return success();
}

LogicalResult ReverseSweep::differentiateOp(Operation *op) {
  Value from = activeOperand(op);
  if (!from)
    return success();
  SmallVector<Value> dys;
  bool reached = false;
  for (Value r : op->getResults()) {
    dys.push_back(grads.lookup(r));
    reached |= dys.back() && useful.contains(r);
  }
  if (!reached)
    return success();
  auto rule = dyn_cast<GradientOpInterface>(op);
  if (!rule)
    return op->emitOpError("has no gradient rule, but it lies between ")
           << describeSource(source.lookup(from)) << " and the loss";
  if (failed(checkStatic(op)))
    return failure();
  Operation *before = terminator->getPrevNode();
  builder.setInsertionPoint(terminator);
  grad::GradBuilder g{builder, op->getLoc()};
  for (unsigned i = 0, e = dys.size(); i < e; ++i)
    if (!dys[i])
      dys[i] = g.zeros(op->getResult(i).getType());
  SmallVector<Value> dxs(op->getNumOperands());
  if (failed(rule.buildGradients(builder, dys, dxs)))
    return failure();
  for (auto [i, dx] : llvm::enumerate(dxs))
    if (failed(addOperandGrad(op, i, dx)))
      return failure();
  tagSince(before, op->getAttr(kOpIdAttr));
  return success();
}

FailureOr<GradientResult> ReverseSweep::run(Value loss, ArrayRef<Value> wrt,
                                            Value seedScale) {
  for (Operation &op : block.without_terminator())
    forward.push_back(&op);
  markActive(wrt);
  markUseful(loss);
  Operation *before = terminator->getPrevNode();
  grads[loss] = builder.create<ConstantOp>(
      loss.getLoc(), cast<ElementsAttr>(DenseElementsAttr::get(
                         cast<ShapedType>(loss.getType()),
                         builder.getFloatAttr(getElementTypeOrSelf(loss), 1.0))));
  if (seedScale) // loss scaling: d(S * loss)/d(loss) = S
    grads[loss] = builder.create<MulOp>(loss.getLoc(), grads[loss], seedScale);
  Operation *lossOp = loss.getDefiningOp();
  tagSince(before, lossOp ? lossOp->getAttr(kOpIdAttr) : Attribute());
  for (Operation *op : llvm::reverse(forward))
    if (failed(differentiateOp(op)))
      return failure();
  GradientResult result;
  for (Value v : wrt)
    if (Value g = grads.lookup(v))
      result.grads[v] = g;
  result.numBackwardOps = numBackwardOps;
  return result;
}

FailureOr<GradientResult> graph::differentiate(func::FuncOp func, Value loss,
                                               ArrayRef<Value> wrt, Value seedScale) {
  if (!func.getBody().hasOneBlock())
    return func.emitOpError("training needs a single-block function");
  if (seedScale && !getElementTypeOrSelf(loss).isF32())
    return func.emitOpError("loss scaling needs an f32 loss, got ") << loss.getType();
  return ReverseSweep(func).run(loss, wrt, seedScale);
}
