//===- GraphNNOps.cpp - Inference of neural-network ops -------------------===//

#include "InferHelpers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::detail;

static constexpr int64_t kDyn = ShapedType::kDynamic;

STRAIT_INFER(MatMulOp) {
  TensorType a = tensorOf(adaptor.getA()), b = tensorOf(adaptor.getB());
  if (a.getElementType() != b.getElementType())
    return emitOptionalError(loc, "MatMul: element types differ (",
                             a.getElementType(), " vs ", b.getElementType(), ")");
  if (!a.hasRank() || !b.hasRank())
    return pushTensor(types, std::nullopt, a.getElementType());
  FailureOr<Shape> s = matmulShape(loc, a.getShape(), b.getShape());
  if (failed(s))
    return failure();
  return pushTensor(types, ArrayRef<int64_t>(*s), a.getElementType());
}

STRAIT_INFER(GemmOp) {
  TensorType a = tensorOf(adaptor.getA()), b = tensorOf(adaptor.getB());
  if (!a.hasRank() || !b.hasRank())
    return pushTensor(types, std::nullopt, a.getElementType());
  if (a.getRank() != 2 || b.getRank() != 2)
    return emitOptionalError(loc, "Gemm: A and B must be 2-D, got ranks ",
                             a.getRank(), " and ", b.getRank());
  int64_t m = a.getDimSize(adaptor.getTransA() ? 1 : 0);
  int64_t k1 = a.getDimSize(adaptor.getTransA() ? 0 : 1);
  int64_t k2 = b.getDimSize(adaptor.getTransB() ? 1 : 0);
  int64_t n = b.getDimSize(adaptor.getTransB() ? 0 : 1);
  if (k1 != kDyn && k2 != kDyn && k1 != k2)
    return emitOptionalError(loc, "Gemm: inner dimensions differ (", k1, " vs ",
                             k2, ")");
  Shape out{m, n};
  if (Value c = adaptor.getC()) {
    TensorType ct = tensorOf(c);
    if (ct.hasRank() && failed(broadcastShapes(loc, {out, ct.getShape()})))
      return failure();
    if (ct.hasRank() && ct.getRank() > 2)
      return emitOptionalError(loc, "Gemm: C must broadcast to ", m, "x", n);
  }
  return pushTensor(types, ArrayRef<int64_t>(out), a.getElementType());
}

STRAIT_INFER(EinsumOp) {
  SmallVector<ArrayRef<int64_t>> shapes;
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "Einsum needs at least one input");
  Type elt = tensorOf(adaptor.getInputs().front()).getElementType();
  for (Value v : adaptor.getInputs()) {
    TensorType t = tensorOf(v);
    if (!t.hasRank())
      return pushTensor(types, std::nullopt, elt);
    shapes.push_back(t.getShape());
  }
  FailureOr<Shape> s = einsumShape(loc, adaptor.getEquation(), shapes);
  if (failed(s))
    return failure();
  return pushTensor(types, ArrayRef<int64_t>(*s), elt);
}

/// Checks that window attributes have one entry per spatial dim (pads two).
static LogicalResult checkWindow(OptLoc loc, StringRef op, int64_t spatial,
                                 ArrayRef<int64_t> pads, ArrayRef<int64_t> strides,
                                 ArrayRef<int64_t> dilations) {
  if ((int64_t)pads.size() != 2 * spatial || (int64_t)strides.size() != spatial ||
      (int64_t)dilations.size() != spatial)
    return emitOptionalError(loc, op, ": expected ", spatial,
                             " strides/dilations and ", 2 * spatial,
                             " pads for the input's spatial rank");
  for (int64_t s : strides)
    if (s <= 0)
      return emitOptionalError(loc, op, ": strides must be positive");
  for (int64_t d : dilations)
    if (d <= 0)
      return emitOptionalError(loc, op, ": dilations must be positive");
  for (int64_t p : pads)
    if (p < 0)
      return emitOptionalError(loc, op, ": pads must be non-negative");
  return success();
}

STRAIT_INFER(ConvOp) {
  TensorType x = tensorOf(adaptor.getX()), w = tensorOf(adaptor.getW());
  if (!x.hasRank() || !w.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  if (x.getRank() < 3 || w.getRank() != x.getRank())
    return emitOptionalError(loc, "Conv: X (rank ", x.getRank(), ") and W (rank ",
                             w.getRank(), ") must have the same rank >= 3");
  int64_t spatial = x.getRank() - 2, group = adaptor.getGroup();
  if (failed(checkWindow(loc, "Conv", spatial, adaptor.getPads(),
                         adaptor.getStrides(), adaptor.getDilations())))
    return failure();
  if (group <= 0)
    return emitOptionalError(loc, "Conv: group must be positive");
  int64_t c = x.getDimSize(1), wc = w.getDimSize(1);
  if (c != kDyn && wc != kDyn && c != wc * group)
    return emitOptionalError(loc, "Conv: input has ", c, " channels but W expects ",
                             wc, " x group ", group);
  Shape out{x.getDimSize(0), w.getDimSize(0)};
  for (int64_t i = 0; i < spatial; ++i)
    out.push_back(windowOutputSize(x.getDimSize(i + 2), w.getDimSize(i + 2),
                                   adaptor.getStrides()[i], adaptor.getDilations()[i],
                                   adaptor.getPads()[i], adaptor.getPads()[i + spatial],
                                   false));
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(ConvTransposeOp) {
  TensorType x = tensorOf(adaptor.getX()), w = tensorOf(adaptor.getW());
  if (!x.hasRank() || !w.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  if (x.getRank() < 3 || w.getRank() != x.getRank())
    return emitOptionalError(loc, "ConvTranspose: X and W must have the same rank >= 3");
  int64_t spatial = x.getRank() - 2;
  if (failed(checkWindow(loc, "ConvTranspose", spatial, adaptor.getPads(),
                         adaptor.getStrides(), adaptor.getDilations())))
    return failure();
  if ((int64_t)adaptor.getOutputPadding().size() != spatial)
    return emitOptionalError(loc, "ConvTranspose: output_padding needs ", spatial,
                             " entries");
  int64_t m = w.getDimSize(1);
  Shape out{x.getDimSize(0), m == kDyn ? kDyn : m * adaptor.getGroup()};
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t in = x.getDimSize(i + 2), k = w.getDimSize(i + 2);
    if (in == kDyn || k == kDyn) {
      out.push_back(kDyn);
      continue;
    }
    out.push_back(adaptor.getStrides()[i] * (in - 1) + adaptor.getOutputPadding()[i] +
                  (k - 1) * adaptor.getDilations()[i] + 1 - adaptor.getPads()[i] -
                  adaptor.getPads()[i + spatial]);
  }
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

template <typename Adaptor>
static LogicalResult inferPool(OptLoc loc, StringRef op, Adaptor adaptor,
                               SmallVectorImpl<Type> &types) {
  TensorType x = tensorOf(adaptor.getX());
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  int64_t spatial = x.getRank() - 2;
  ArrayRef<int64_t> k = adaptor.getKernelShape();
  if (spatial < 1 || (int64_t)k.size() != spatial)
    return emitOptionalError(loc, op, ": kernel_shape has ", k.size(),
                             " entries for input rank ", x.getRank());
  if (failed(checkWindow(loc, op, spatial, adaptor.getPads(), adaptor.getStrides(),
                         adaptor.getDilations())))
    return failure();
  Shape out(x.getShape().take_front(2));
  for (int64_t i = 0; i < spatial; ++i)
    out.push_back(windowOutputSize(x.getDimSize(i + 2), k[i], adaptor.getStrides()[i],
                                   adaptor.getDilations()[i], adaptor.getPads()[i],
                                   adaptor.getPads()[i + spatial],
                                   adaptor.getCeilMode() != 0));
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(MaxPoolOp) { return inferPool(loc, "MaxPool", adaptor, types); }
STRAIT_INFER(AveragePoolOp) { return inferPool(loc, "AveragePool", adaptor, types); }

/// Checks that each per-channel parameter is 1-D of the channel count.
static LogicalResult checkPerChannel(OptLoc loc, StringRef op, TensorType x,
                                     ValueRange params, int64_t expected = kDyn) {
  int64_t c = expected != kDyn ? expected : (x.hasRank() ? x.getDimSize(1) : kDyn);
  for (Value p : params) {
    TensorType t = tensorOf(p);
    if (!t.hasRank())
      continue;
    if (t.getRank() != 1 || (c != kDyn && t.getDimSize(0) != kDyn && t.getDimSize(0) != c))
      return emitOptionalError(loc, op, ": per-channel parameter has shape ",
                               t, " for ", c, " channels");
  }
  return success();
}

STRAIT_INFER(BatchNormalizationOp) {
  TensorType x = tensorOf(adaptor.getX());
  if (x.hasRank() && x.getRank() < 2)
    return emitOptionalError(loc, "BatchNormalization: input rank must be >= 2");
  if (failed(checkPerChannel(loc, "BatchNormalization", x,
                             adaptor.getOperands().drop_front())))
    return failure();
  types.push_back(x);
  return success();
}

STRAIT_INFER(InstanceNormalizationOp) {
  TensorType x = tensorOf(adaptor.getInput());
  if (failed(checkPerChannel(loc, "InstanceNormalization", x,
                             adaptor.getOperands().drop_front())))
    return failure();
  types.push_back(x);
  return success();
}

STRAIT_INFER(DetOp) {
  TensorType x = tensorOf(adaptor.getX());
  if (!x.hasRank() || x.getRank() < 2 || !isa<FloatType>(x.getElementType()))
    return emitOptionalError(loc, "Det: X must be a float tensor of rank >= 2, got ", x);
  ArrayRef<int64_t> s = x.getShape();
  if (s[s.size() - 1] != kDyn && s[s.size() - 2] != kDyn && s[s.size() - 1] != s[s.size() - 2])
    return emitOptionalError(loc, "Det: matrices must be square, got ", x);
  types.push_back(RankedTensorType::get(s.drop_back(2), x.getElementType()));
  return success();
}

STRAIT_INFER(RoiAlignOp) {
  TensorType x = tensorOf(adaptor.getX()), r = tensorOf(adaptor.getRois());
  if (!x.hasRank() || x.getRank() != 4 || !r.hasRank() || r.getRank() != 2 ||
      (r.getDimSize(1) != kDyn && r.getDimSize(1) != 4))
    return emitOptionalError(loc, "RoiAlign: X must be [N, C, H, W] and rois [R, 4], got ", x,
                             " and ", r);
  if (adaptor.getOutputHeight() <= 0 || adaptor.getOutputWidth() <= 0)
    return emitOptionalError(loc, "RoiAlign: output_height and output_width must be positive");
  types.push_back(RankedTensorType::get({r.getDimSize(0), x.getDimSize(1),
                                         (int64_t)adaptor.getOutputHeight(),
                                         (int64_t)adaptor.getOutputWidth()},
                                        x.getElementType()));
  return success();
}

STRAIT_INFER(GroupNormalizationOp) {
  TensorType x = tensorOf(adaptor.getX());
  int64_t g = adaptor.getNumGroups();
  if (g <= 0)
    return emitOptionalError(loc, "GroupNormalization: num_groups must be positive");
  if (x.hasRank() && x.getDimSize(1) != kDyn && x.getDimSize(1) % g != 0)
    return emitOptionalError(loc, "GroupNormalization: ", x.getDimSize(1),
                             " channels do not split into ", g, " groups");
  if (failed(checkPerChannel(loc, "GroupNormalization", x,
                             adaptor.getOperands().drop_front())))
    return failure();
  types.push_back(x);
  return success();
}

/// Layer- and RMSNormalization: Y has X's type; every parameter broadcasts
/// to the normalized dims X.shape[axis:].
static LogicalResult inferRowNorm(OptLoc loc, StringRef op, Value xv, int64_t axisAttr,
                                  ValueRange params, SmallVectorImpl<Type> &types) {
  TensorType x = tensorOf(xv);
  if (!x.hasRank()) {
    types.push_back(x);
    return success();
  }
  FailureOr<int64_t> axis = normalizeAxis(loc, axisAttr, x.getRank());
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> norm = x.getShape().drop_front(*axis);
  for (Value p : params) {
    TensorType t = tensorOf(p);
    if (!t.hasRank())
      continue;
    FailureOr<Shape> b = broadcastShapes(loc, {norm, t.getShape()});
    if (failed(b))
      return failure();
    if (Shape(norm) != *b)
      return emitOptionalError(loc, op, ": parameter ", t,
                               " does not broadcast to the normalized dims");
  }
  types.push_back(x);
  return success();
}

STRAIT_INFER(LayerNormalizationOp) {
  return inferRowNorm(loc, "LayerNormalization", adaptor.getX(), adaptor.getAxis(),
                      adaptor.getOperands().drop_front(), types);
}

/// Layer- and RMSNormalization: Y is the inferred type (X's), or for an f32
/// X that shape in bf16 / f16: the kernels round the f32 Y once, as
/// Cast(to T) of it would.
static bool isInferredOrLowY(TypeRange inferred, TypeRange actual) {
  if (inferred.size() != actual.size())
    return false;
  for (auto [i, a] : llvm::zip(inferred, actual)) {
    if (i == a)
      continue;
    auto it = dyn_cast<TensorType>(i), at = dyn_cast<TensorType>(a);
    Type ie = it ? it.getElementType() : Type(), ae = at ? at.getElementType() : Type();
    if (!it || !at || !ie.isF32() || !(ae.isBF16() || ae.isF16()) || it.clone(ae) != at)
      return false;
  }
  return true;
}

bool LayerNormalizationOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isInferredOrLowY(inferred, actual);
}

STRAIT_INFER(RMSNormalizationOp) {
  return inferRowNorm(loc, "RMSNormalization", adaptor.getX(), adaptor.getAxis(),
                      adaptor.getOperands().drop_front(), types);
}

bool RMSNormalizationOp::isCompatibleReturnTypes(TypeRange inferred, TypeRange actual) {
  return isInferredOrLowY(inferred, actual);
}

LogicalResult strait::graph::detail::inferLoss(std::optional<Location> loc, StringRef op,
                                              Value scores, Value labels,
                                              LossReduction reduction,
                                              SmallVectorImpl<Type> &types, bool f32For16Bit) {
  TensorType s = tensorOf(scores), l = tensorOf(labels);
  Type element = s.getElementType();
  if (f32For16Bit && (element.isBF16() || element.isF16()))
    element = Float32Type::get(element.getContext());
  if (!isa<FloatType>(element))
    return emitOptionalError(loc, op, ": scores must be floats, got ", element);
  if (!isa<IntegerType>(l.getElementType()))
    return emitOptionalError(loc, op, ": labels must be integers, got ",
                             l.getElementType());
  if (s.hasRank() && l.hasRank()) {
    if (s.getRank() < 2 || l.getRank() != s.getRank() - 1)
      return emitOptionalError(loc, op, ": scores ", s, " and labels ", l,
                               " must be N x C x D... and N x D...");
    for (int64_t i = 0; i < l.getRank(); ++i) {
      int64_t sd = s.getDimSize(i == 0 ? 0 : i + 1), ld = l.getDimSize(i);
      if (sd != kDyn && ld != kDyn && sd != ld)
        return emitOptionalError(loc, op, ": scores ", s, " and labels ", l,
                                 " disagree in dimension ", i);
    }
  }
  if (reduction != LossReduction::none)
    return pushTensor(types, ArrayRef<int64_t>{}, element);
  return pushTensor(types, l.hasRank() ? std::optional(l.getShape()) : std::nullopt,
                    element);
}

/// bf16 / f16 scores give an f32 loss: the kernels upcast each score on load
/// and compute in f32, so SCE(Cast(x to f32)) = SCE(x) (graph-cast-motion).
STRAIT_INFER(SoftmaxCrossEntropyLossOp) {
  return inferLoss(loc, "SoftmaxCrossEntropyLoss", adaptor.getScores(),
                   adaptor.getLabels(), adaptor.getReduction(), types,
                   /*f32For16Bit=*/true);
}

STRAIT_INFER(NegativeLogLikelihoodLossOp) {
  return inferLoss(loc, "NegativeLogLikelihoodLoss", adaptor.getInput(),
                   adaptor.getTarget(), adaptor.getReduction(), types);
}

/// X f32, bf16 or f16 with an even static last dimension; Cos and Sin f32
/// or X's type, broadcasting to X without widening it; Y is X's type.
STRAIT_INFER(FusedRotaryEmbeddingOp) {
  TensorType x = tensorOf(adaptor.getX());
  Type elt = x.getElementType();
  if (!elt.isF32() && !elt.isBF16() && !elt.isF16())
    return emitOptionalError(loc, "FusedRotaryEmbedding: X element type ", elt,
                             " is not f32, bf16 or f16");
  if (x.hasRank()) {
    if (x.getRank() < 1 || x.isDynamicDim(x.getRank() - 1) || x.getShape().back() % 2 != 0 ||
        x.getShape().back() == 0)
      return emitOptionalError(loc, "FusedRotaryEmbedding: X's last dimension must be static, ",
                               "even and positive, got ", x);
  }
  for (auto [name, v] : {std::pair<StringRef, Value>{"Cos", adaptor.getCos()},
                         std::pair<StringRef, Value>{"Sin", adaptor.getSin()}}) {
    TensorType t = tensorOf(v);
    if (!t.getElementType().isF32() && t.getElementType() != elt)
      return emitOptionalError(loc, "FusedRotaryEmbedding: ", name, " element type ",
                               t.getElementType(), " is neither f32 nor X's ", elt);
    if (!t.hasRank() || !x.hasRank())
      continue;
    if (t.getRank() > x.getRank())
      return emitOptionalError(loc, "FusedRotaryEmbedding: ", name, " ", t,
                               " has a higher rank than X ", x);
    int64_t off = x.getRank() - t.getRank();
    for (int64_t i = 0; i < t.getRank(); ++i) {
      int64_t d = t.getDimSize(i), xd = x.getDimSize(off + i);
      if (d != 1 && d != kDyn && xd != kDyn && d != xd)
        return emitOptionalError(loc, "FusedRotaryEmbedding: ", name, " ", t,
                                 " does not broadcast to X ", x, " (dimension ", off + i, ")");
    }
  }
  types.push_back(x);
  return success();
}
