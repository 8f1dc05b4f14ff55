//===- GraphCostModels.cpp - CostOpInterface models of graph ops ----------===//
//
// FLOP counts per op family, attached as external models so that the
// workload estimator stays out of the op definitions. Elementwise ops count
// one FLOP per output element (transcendentals a few); data movement counts
// none and is priced by its bytes.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Graph/GraphOps.h"
#include "strait/Interfaces/CostOpInterface.h"

using namespace mlir;
using namespace strait;
using namespace strait::graph;

namespace {

double elems(Value v) { return strait::detail::elementsOf(TypeRange(v.getType())); }
double product(ArrayRef<int64_t> s) {
  double p = 1;
  for (int64_t d : s)
    p *= d;
  return p;
}

// Generic: one FLOP per result element, elementwise class.
template <typename Op>
double forwardFlops(Op op) { return strait::detail::elementsOf(op->getResultTypes()); }
template <typename Op>
KernelClass kernelClass(Op) { return KernelClass::Elementwise; }
// Generic: the planner estimates backward from forward (CostOpInterface).
template <typename Op>
double backwardFlops(Op) { return -1.0; }
// Generic: all operands, all results.
template <typename Op>
double bytesRead(Op op) { return strait::detail::bytesOf(op->getOperandTypes()); }
template <typename Op>
double bytesWritten(Op op) { return strait::detail::bytesOf(op->getResultTypes()); }

double forwardFlops(MatMulOp op) {
  auto a = cast<ShapedType>(op.getA().getType());
  if (!a.hasStaticShape())
    return 0;
  return 2.0 * elems(op.getY()) * a.getShape().back();
}
KernelClass kernelClass(MatMulOp) { return KernelClass::MatMul; }

double forwardFlops(GemmOp op) {
  auto a = cast<ShapedType>(op.getA().getType());
  if (!a.hasStaticShape())
    return 0;
  double k = a.getDimSize(op.getTransA() ? 0 : 1);
  return 2.0 * elems(op.getY()) * k + (op.getC() ? elems(op.getY()) : 0);
}
KernelClass kernelClass(GemmOp) { return KernelClass::MatMul; }

double forwardFlops(EinsumOp op) {
  // Every label is iterated once: 2 x product of all extents (ellipsis dims
  // of the output included).
  llvm::DenseMap<char, int64_t> extent;
  StringRef lhs = op.getEquation().split("->").first;
  SmallVector<StringRef> terms;
  lhs.split(terms, ',');
  for (auto [term, v] : llvm::zip(terms, op.getInputs())) {
    auto t = cast<ShapedType>(v.getType());
    if (!t.hasStaticShape() || term.contains("..."))
      return 2.0 * strait::detail::elementsOf(op->getOperandTypes());
    for (auto [c, d] : llvm::zip(term.trim(), t.getShape()))
      extent[c] = std::max(extent.lookup(c), d);
  }
  double p = 2;
  for (auto &e : extent)
    p *= e.second;
  return p;
}
KernelClass kernelClass(EinsumOp) { return KernelClass::MatMul; }

double convFlops(Value x, Value w, Value y, int64_t group, bool transposed) {
  auto wt = cast<ShapedType>(w.getType());
  if (!wt.hasStaticShape())
    return 0;
  // Each output (input, when transposed) element takes C/group * k MACs.
  double macsPerElem = product(wt.getShape().drop_front(1));
  double elements = transposed ? elems(x) : elems(y);
  (void)group;
  return 2.0 * elements * macsPerElem;
}
double forwardFlops(ConvOp op) {
  return convFlops(op.getX(), op.getW(), op.getY(), op.getGroup(), false) +
         (op.getB() ? elems(op.getY()) : 0);
}
KernelClass kernelClass(ConvOp) { return KernelClass::Conv; }
double forwardFlops(ConvTransposeOp op) {
  return convFlops(op.getX(), op.getW(), op.getY(), op.getGroup(), true);
}
KernelClass kernelClass(ConvTransposeOp) { return KernelClass::Conv; }
// The gradients run as many MACs as the forward: every dY element meets
// C/group * k weights (dX) or inputs (dW). Without these models they were
// priced as elementwise ops by their bytes, 10-15x below the forward Conv.
double forwardFlops(ConvGradInputOp op) {
  return convFlops(op.getDY(), op.getW(), op.getDY(), op.getGroup(), true);
}
KernelClass kernelClass(ConvGradInputOp) { return KernelClass::Conv; }
double forwardFlops(ConvGradWeightOp op) {
  ArrayRef<int64_t> w = op.getWeightShape();
  return w.empty() ? 0 : 2.0 * elems(op.getDY()) * product(w.drop_front(1));
}
KernelClass kernelClass(ConvGradWeightOp) { return KernelClass::Conv; }

double forwardFlops(MaxPoolOp op) { return elems(op.getY()) * product(op.getKernelShape()); }
double forwardFlops(AveragePoolOp op) { return elems(op.getY()) * product(op.getKernelShape()); }
KernelClass kernelClass(MaxPoolOp) { return KernelClass::Reduction; }
KernelClass kernelClass(AveragePoolOp) { return KernelClass::Reduction; }

// Normalizations: mean, variance, scale and shift.
double forwardFlops(LayerNormalizationOp op) { return 8.0 * elems(op.getY()); }
// RMSNormalization: square, sum, scale by the inverse root and the weight.
double forwardFlops(RMSNormalizationOp op) { return 4.0 * elems(op.getY()); }
double forwardFlops(BatchNormalizationOp op) { return 4.0 * elems(op.getY()); }
double forwardFlops(GroupNormalizationOp op) { return 8.0 * elems(op.getY()); }
double forwardFlops(InstanceNormalizationOp op) { return 8.0 * elems(op.getOutput()); }
KernelClass kernelClass(LayerNormalizationOp) { return KernelClass::Normalization; }
KernelClass kernelClass(RMSNormalizationOp) { return KernelClass::Normalization; }
KernelClass kernelClass(BatchNormalizationOp) { return KernelClass::Normalization; }
KernelClass kernelClass(GroupNormalizationOp) { return KernelClass::Normalization; }
KernelClass kernelClass(InstanceNormalizationOp) { return KernelClass::Normalization; }

// Attention over Q [b..., Tq, D], Kt [b..., D, Tk], V [b..., Tk, Dv]: per
// score, 2D for Q Kt, 5 for scale/bias/softmax, 2Dv for P V. The backward
// kernel recomputes S and P and runs four products (dV, dP, dQ, dKt), about
// 2.5x the forward; FusedAttention's backward cost is FusedAttentionGrad's.
// Bytes are the operands' and results' (the defaults): no T x T tensor.
// The shapes are the logical ones: with q_perm, Q's D is its dimension
// q_perm[rank - 1]; with v_perm, V's Tk and Dv are v_perm[rank - 2, -1].
// A selected operand (q_select, ...) is its slice: it reads 1/n of the
// packed tensor's bytes (n its size along the select axis).
ShapedType selectedType(Value v, std::optional<ArrayRef<int64_t>> select) {
  auto t = cast<ShapedType>(v.getType());
  if (!select || !t.hasRank() || select->size() != 2 || (*select)[0] < 0 ||
      (*select)[0] >= t.getRank())
    return t;
  SmallVector<int64_t> shape(t.getShape());
  shape.erase(shape.begin() + (*select)[0]);
  return RankedTensorType::get(shape, t.getElementType());
}
double attentionFlops(Value q, Value v, std::optional<ArrayRef<int64_t>> qPerm,
                      std::optional<ArrayRef<int64_t>> vPerm, bool backward,
                      std::optional<ArrayRef<int64_t>> qSel = std::nullopt,
                      std::optional<ArrayRef<int64_t>> vSel = std::nullopt) {
  ShapedType qt = selectedType(q, qSel), vt = selectedType(v, vSel);
  if (!qt.hasStaticShape() || !vt.hasStaticShape() || qt.getRank() < 2)
    return 0;
  int64_t r = qt.getRank();
  auto dim = [&](ShapedType t, std::optional<ArrayRef<int64_t>> perm, int64_t i) {
    return t.getShape()[perm ? (*perm)[i] : i];
  };
  double d = dim(qt, qPerm, r - 1), dv = dim(vt, vPerm, r - 1), tk = dim(vt, vPerm, r - 2);
  double scores = product(qt.getShape()) / std::max(d, 1.0) * tk;
  return scores * (backward ? 6 * d + 4 * dv + 8 : 2 * d + 2 * dv + 5);
}
double forwardFlops(FusedAttentionOp op) {
  return attentionFlops(op.getQ(), op.getV(), op.getQPerm(), op.getVPerm(), false,
                        op.getQSelect(), op.getVSelect());
}
double backwardFlops(FusedAttentionOp op) {
  return attentionFlops(op.getQ(), op.getV(), op.getQPerm(), op.getVPerm(), true,
                        op.getQSelect(), op.getVSelect());
}
double forwardFlops(FusedAttentionGradOp op) {
  return attentionFlops(op.getQ(), op.getV(), op.getQPerm(), op.getVPerm(), true,
                        op.getQSelect(), op.getVSelect());
}
/// Q, Kt and V count their slices only.
template <typename Op>
double attentionBytesRead(Op op) {
  double bytes = 0;
  std::optional<ArrayRef<int64_t>> sel[3] = {op.getQSelect(), op.getKtSelect(), op.getVSelect()};
  unsigned q = op.getQMutable().getOperandNumber();
  for (OpOperand &o : op->getOpOperands()) {
    unsigned i = o.getOperandNumber();
    bool operand = i >= q && i < q + 3;
    Type t = operand ? Type(selectedType(o.get(), sel[i - q])) : o.get().getType();
    bytes += strait::detail::bytesOf(t);
  }
  return bytes;
}
double bytesRead(FusedAttentionOp op) { return attentionBytesRead(op); }
double bytesRead(FusedAttentionGradOp op) { return attentionBytesRead(op); }
KernelClass kernelClass(FusedAttentionOp) { return KernelClass::MatMul; }
KernelClass kernelClass(FusedAttentionGradOp) { return KernelClass::MatMul; }

// Routed expert products (graph-rewrite-expert-matmuls): one multiply-add
// per row, inner and output element, the FLOPs of the routed slots only;
// each expert's weights read once (the kernels group the rows by expert).
double forwardFlops(GroupedMatMulOp op) {
  auto x = cast<ShapedType>(op.getX().getType());
  if (!x.hasStaticShape())
    return 0;
  return 2.0 * elems(op.getY()) * x.getDimSize(1);
}
KernelClass kernelClass(GroupedMatMulOp) { return KernelClass::MatMul; }
// The weight gradient: the same products summed per expert.
double forwardFlops(GroupedMatMulGradWeightOp op) {
  auto x = cast<ShapedType>(op.getX().getType()), dy = cast<ShapedType>(op.getDY().getType());
  if (!x.hasStaticShape() || !dy.hasStaticShape())
    return 0;
  return 2.0 * elems(op.getX()) * dy.getDimSize(1);
}
KernelClass kernelClass(GroupedMatMulGradWeightOp) { return KernelClass::MatMul; }

// Rotary embedding: two products and a sum per element.
double forwardFlops(FusedRotaryEmbeddingOp op) { return 3.0 * elems(op.getY()); }

// Softmax: max, exp, sum, divide.
double forwardFlops(SoftmaxOp op) { return 5.0 * elems(op.getOutput()); }
double forwardFlops(LogSoftmaxOp op) { return 5.0 * elems(op.getOutput()); }
double forwardFlops(SoftmaxCrossEntropyLossOp op) { return 6.0 * elems(op.getScores()); }
KernelClass kernelClass(SoftmaxOp) { return KernelClass::Normalization; }
KernelClass kernelClass(LogSoftmaxOp) { return KernelClass::Normalization; }
KernelClass kernelClass(SoftmaxCrossEntropyLossOp) { return KernelClass::Normalization; }
// The loss and its gradient in one pass: the loss's 6 per score, then the
// probability, the one-hot difference and the scale; nothing left backward.
double forwardFlops(SoftmaxCrossEntropyLossWithGradOp op) { return 9.0 * elems(op.getScores()); }
double backwardFlops(SoftmaxCrossEntropyLossWithGradOp) { return 0; }
KernelClass kernelClass(SoftmaxCrossEntropyLossWithGradOp) { return KernelClass::Normalization; }

// Transcendentals cost more than an add.
double forwardFlops(GeluOp op) { return 10.0 * elems(op.getY()); }
double forwardFlops(TanhOp op) { return 4.0 * elems(op.getY()); }
double forwardFlops(ErfOp op) { return 4.0 * elems(op.getY()); }
double forwardFlops(ExpOp op) { return 4.0 * elems(op.getY()); }
double forwardFlops(SigmoidOp op) { return 4.0 * elems(op.getY()); }

// Data movement: priced by bytes only.
#define STRAIT_DATA_MOVEMENT(Op)                                               \
  double forwardFlops(Op) { return 0; }                                        \
  KernelClass kernelClass(Op) { return KernelClass::DataMovement; }
STRAIT_DATA_MOVEMENT(ReshapeOp)
STRAIT_DATA_MOVEMENT(TransposeOp)
STRAIT_DATA_MOVEMENT(FlattenOp)
STRAIT_DATA_MOVEMENT(SqueezeOp)
STRAIT_DATA_MOVEMENT(UnsqueezeOp)
STRAIT_DATA_MOVEMENT(ConcatOp)
STRAIT_DATA_MOVEMENT(SplitOp)
STRAIT_DATA_MOVEMENT(SliceOp)
STRAIT_DATA_MOVEMENT(GatherOp)
STRAIT_DATA_MOVEMENT(GatherElementsOp)
STRAIT_DATA_MOVEMENT(GatherNDOp)
STRAIT_DATA_MOVEMENT(ExpandOp)
STRAIT_DATA_MOVEMENT(TileOp)
STRAIT_DATA_MOVEMENT(PadOp)
STRAIT_DATA_MOVEMENT(CastOp)
STRAIT_DATA_MOVEMENT(ConstantOp)
STRAIT_DATA_MOVEMENT(ReadVariableOp)
STRAIT_DATA_MOVEMENT(ShapeOp)
STRAIT_DATA_MOVEMENT(SizeOp)
STRAIT_DATA_MOVEMENT(DepthToSpaceOp)
STRAIT_DATA_MOVEMENT(SpaceToDepthOp)
STRAIT_DATA_MOVEMENT(DropoutOp)
#undef STRAIT_DATA_MOVEMENT
// Views: the runtime's result shares its input's bytes (the executor's
// reshapeAliases), so nothing moves. Counting their bytes made Reshape the
// third most expensive op type of gpt2-tiny's predicted step (2.6 of 18.5
// ms) where strait-run --profile measures 0.03 ms.
#define STRAIT_VIEW(Op)                                                        \
  double bytesRead(Op) { return 0; }                                           \
  double bytesWritten(Op) { return 0; }
STRAIT_VIEW(ReshapeOp)
STRAIT_VIEW(FlattenOp)
STRAIT_VIEW(SqueezeOp)
STRAIT_VIEW(UnsqueezeOp)
#undef STRAIT_VIEW

template <typename Op>
struct GraphCostModel : CostOpInterface::ExternalModel<GraphCostModel<Op>, Op> {
  double getForwardFlops(Operation *op) const { return forwardFlops(cast<Op>(op)); }
  double getBackwardFlops(Operation *op) const { return backwardFlops(cast<Op>(op)); }
  KernelClass getKernelClass(Operation *op) const { return kernelClass(cast<Op>(op)); }
  double getBytesRead(Operation *op) const { return bytesRead(cast<Op>(op)); }
  double getBytesWritten(Operation *op) const { return bytesWritten(cast<Op>(op)); }
};

template <typename... Ops>
void attachAll(MLIRContext *ctx) {
  (Ops::template attachInterface<GraphCostModel<Ops>>(*ctx), ...);
}

} // namespace

void strait::registerGraphCostModels(DialectRegistry &registry) {
  registry.addExtension(+[](MLIRContext *ctx, GraphDialect *) {
    attachAll<
#define GET_OP_LIST
#include "strait/Dialect/Graph/GraphOps.cpp.inc"
        >(ctx);
  });
}
