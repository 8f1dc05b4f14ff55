//===- ImportElementwise.cpp - Elementwise ONNX ops -----------------------===//

#include "NodeImporter.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// Creates OpTy over the inputs with `attrs` and binds its results.
/// Opset-1 versions of many ops carry `consumed_inputs`, a legacy
/// memory-reuse hint without effect on the result.
constexpr StringLiteral kConsumedInputs = "consumed_inputs";

template <typename OpTy>
LogicalResult importUnary(NodeImporter &n) {
  if (failed(n.checkAttributes({kConsumedInputs})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  return failed(x) ? failure() : emit<OpTy>(n, *x);
}

/// Unary op with float attributes given as (name, default) pairs.
template <typename OpTy>
LogicalResult importUnaryFloatAttrs(NodeImporter &n,
                                    ArrayRef<std::pair<StringRef, float>> attrs) {
  SmallVector<StringRef> names = {kConsumedInputs};
  for (auto &a : attrs)
    names.push_back(a.first);
  if (failed(n.checkAttributes(names)))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x))
    return failure();
  SmallVector<NamedAttribute> out;
  for (auto &[name, dflt] : attrs) {
    FailureOr<float> v = n.getFloat(name, dflt);
    if (failed(v))
      return failure();
    out.push_back(n.named(name, n.f32(*v)));
  }
  return emit<OpTy>(n, *x, out);
}

template <typename OpTy>
LogicalResult importBinary(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  if (failed(a) || failed(b))
    return failure();
  return emit<OpTy>(n, {*a, *b});
}

/// Binary ops before opset 7: no implicit broadcasting; with broadcast = 1,
/// B's shape matches a contiguous run of A's dims starting at `axis`
/// (default: the trailing ones). B gets trailing unit dims so that numpy
/// broadcasting gives the same result.
template <typename OpTy>
LogicalResult importLegacyBinary(NodeImporter &n) {
  if (failed(n.checkAttributes({"broadcast", "axis", kConsumedInputs})))
    return failure();
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  FailureOr<int64_t> bcast = n.getInt("broadcast", 0);
  FailureOr<std::optional<int64_t>> axis = n.getOptionalInt("axis");
  if (failed(a) || failed(b) || failed(bcast) || failed(axis))
    return failure();
  auto at = dyn_cast<RankedTensorType>(n.inputType(0));
  auto bt = dyn_cast<RankedTensorType>(n.inputType(1));
  Value rhs = *b;
  if (*bcast && *axis && at && bt) {
    int64_t start = **axis < 0 ? **axis + at.getRank() : **axis;
    int64_t trailing = at.getRank() - start - bt.getRank();
    if (start < 0 || trailing < 0)
      return n.error() << "axis " << **axis << " does not place B " << bt << " in A " << at;
    if (trailing > 0) {
      SmallVector<int64_t> shape(bt.getShape());
      shape.append(trailing, 1);
      FailureOr<Values> r = n.create<graph::ReshapeOp>(
          *b, {n.named("shape", n.i64s(shape)), n.named("allowzero", n.i64(1))});
      if (failed(r))
        return failure();
      rhs = (*r)[0];
    }
  } else if (!*bcast && at && bt && at.getShape() != bt.getShape()) {
    return n.error() << "operands " << at << " and " << bt
                     << " differ in shape without broadcast = 1 (opset < 7)";
  }
  return emit<OpTy>(n, {*a, rhs});
}

/// PRelu before opset 7: a 1-D slope of X's channel count applies per
/// channel (dim 1), which numpy broadcasting needs as C x 1 x ... x 1.
LogicalResult importLegacyPRelu(NodeImporter &n) {
  if (failed(n.checkAttributes({kConsumedInputs})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), slope = n.requiredInput(1);
  if (failed(x) || failed(slope))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  auto st = dyn_cast<RankedTensorType>(n.inputType(1));
  Value rhs = *slope;
  if (xt && st && xt.getRank() > 2 && st.getRank() == 1 && st.getDimSize(0) != 1 &&
      st.getDimSize(0) == xt.getDimSize(1)) {
    SmallVector<int64_t> shape = {st.getDimSize(0)};
    shape.append(xt.getRank() - 2, 1);
    FailureOr<Values> r = n.create<graph::ReshapeOp>(
        *slope, {n.named("shape", n.i64s(shape)), n.named("allowzero", n.i64(1))});
    if (failed(r))
      return failure();
    rhs = (*r)[0];
  }
  return emit<graph::PReluOp>(n, {*x, rhs});
}

template <typename OpTy>
LogicalResult importVariadic(NodeImporter &n) {
  if (failed(n.checkAttributes({kConsumedInputs})))
    return failure();
  SmallVector<Value> in;
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (n.input(i))
      in.push_back(n.input(i));
  if (in.empty())
    return n.error() << "needs at least one input";
  if (in.size() == 1)
    return n.setResults(in);
  return emit<OpTy>(n, in);
}

LogicalResult importPow(NodeImporter &n) {
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  if (failed(a) || failed(b))
    return failure();
  Value exp = *b;
  Type elt = n.inputType(0).getElementType();
  if (n.inputType(1).getElementType() != elt) {
    FailureOr<Values> c =
        n.create<graph::CastOp>(exp, {n.named("to", TypeAttr::get(elt))});
    if (failed(c))
      return failure();
    exp = (*c)[0];
  }
  return emit<graph::PowOp>(n, {*a, exp});
}

LogicalResult importMod(NodeImporter &n) {
  if (failed(n.checkAttributes({"fmod"})))
    return failure();
  FailureOr<int64_t> fmod = n.getInt("fmod", 0);
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  if (failed(fmod) || failed(a) || failed(b))
    return failure();
  return emit<graph::ModOp>(n, {*a, *b}, {n.named("fmod", n.i64(*fmod))});
}

LogicalResult importGelu(NodeImporter &n) {
  if (failed(n.checkAttributes({"approximate"})))
    return failure();
  FailureOr<std::string> approx = n.getString("approximate", "none");
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(approx) || failed(x))
    return failure();
  std::optional<graph::GeluApprox> kind = graph::symbolizeGeluApprox(*approx);
  if (!kind)
    return n.error() << "approximate must be 'none' or 'tanh', got '" << *approx << "'";
  return emit<graph::GeluOp>(
      n, *x, {n.named("approximate", graph::GeluApproxAttr::get(n.ctx(), *kind))});
}

/// Reads a scalar bound of Clip from a constant input as f64.
FailureOr<std::optional<double>> clipBound(NodeImporter &n, size_t i, StringRef what) {
  if (!n.input(i))
    return std::optional<double>();
  FailureOr<DenseElementsAttr> c = n.constantInput(i, what);
  if (failed(c))
    return failure();
  if (c->getNumElements() != 1)
    return n.error() << "'" << what << "' must be a scalar";
  if (isa<FloatType>(c->getElementType()))
    return std::optional<double>(
        (*c->getValues<APFloat>().begin()).convertToDouble());
  return std::optional<double>((double)(*c->getValues<APInt>().begin()).getSExtValue());
}

LogicalResult importClip(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x))
    return failure();
  std::optional<double> lo, hi;
  if (n.opsetVersion() < 11) {
    if (failed(n.checkAttributes({"min", "max"})))
      return failure();
    FailureOr<std::optional<float>> a = n.getOptionalFloat("min"),
                                    b = n.getOptionalFloat("max");
    if (failed(a) || failed(b))
      return failure();
    if (*a)
      lo = **a;
    if (*b)
      hi = **b;
  } else {
    FailureOr<std::optional<double>> a = clipBound(n, 1, "min"),
                                     b = clipBound(n, 2, "max");
    if (failed(a) || failed(b))
      return failure();
    lo = *a;
    hi = *b;
  }
  SmallVector<NamedAttribute> attrs;
  if (lo)
    attrs.push_back(n.named("min", n.b().getF64FloatAttr(*lo)));
  if (hi)
    attrs.push_back(n.named("max", n.b().getF64FloatAttr(*hi)));
  return emit<graph::ClipOp>(n, *x, attrs);
}

LogicalResult importDropout(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x))
    return failure();
  float ratio = 0.5f;
  if (n.opsetVersion() < 12) {
    FailureOr<float> r = n.getFloat("ratio", 0.5f);
    if (failed(r))
      return failure();
    ratio = *r;
  } else if (n.input(1)) {
    FailureOr<DenseElementsAttr> r = n.constantInput(1, "ratio");
    if (failed(r))
      return failure();
    if (!isa<FloatType>(r->getElementType()) || r->getNumElements() != 1)
      return n.error() << "'ratio' must be a float scalar";
    ratio = (*r->getValues<APFloat>().begin()).convertToDouble();
  }
  // training_mode (PyTorch's TrainingMode.TRAINING export) is read but needs
  // no attribute: graph-build-training-step makes every Dropout of ratio > 0
  // drop in the training step, seeded, and evaluation runs it as the
  // identity (docs/training.md, "Dropout").
  if (n.input(2)) {
    FailureOr<DenseElementsAttr> t = n.constantInput(2, "training_mode");
    if (failed(t))
      return failure();
  }
  FailureOr<Values> y = n.create<graph::DropoutOp>(*x, {n.named("ratio", n.f32(ratio))});
  if (failed(y))
    return failure();
  if (n.proto().output_size() < 2 || n.proto().output(1).empty())
    return n.setResults(*y);
  // The mask of an inference-mode Dropout keeps every element.
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!xt || !xt.hasStaticShape())
    return n.error() << "the mask output needs a static input shape";
  auto maskType = RankedTensorType::get(xt.getShape(), n.b().getI1Type());
  Value mask = n.constant(DenseElementsAttr::get(maskType, true));
  return n.setResults({(*y)[0], mask});
}

LogicalResult importCast(NodeImporter &n) {
  if (failed(n.checkAttributes({"to", "saturate"})))
    return failure();
  FailureOr<int64_t> to = n.getInt("to", 0);
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(to) || failed(x))
    return failure();
  Type elt = elementType(n.ctx(), *to);
  if (!elt)
    return n.error() << "cast to unsupported data type " << dataTypeName(*to);
  return emit<graph::CastOp>(n, *x, {n.named("to", TypeAttr::get(elt))});
}

LogicalResult importBitShift(NodeImporter &n) {
  if (failed(n.checkAttributes({"direction"})))
    return failure();
  FailureOr<std::string> dir = n.getString("direction", "");
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  if (failed(dir) || failed(a) || failed(b))
    return failure();
  std::optional<graph::ShiftDirection> kind = graph::symbolizeShiftDirection(
      StringRef(*dir).lower());
  if (!kind)
    return n.error() << "direction must be LEFT or RIGHT, got '" << *dir << "'";
  return emit<graph::BitShiftOp>(
      n, {*a, *b}, {n.named("direction", graph::ShiftDirectionAttr::get(n.ctx(), *kind))});
}

/// QuantizeLinear: the result type is the zero point's, else output_dtype
/// (opset 21), else uint8.
LogicalResult importQuantizeLinear(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis", "saturate", "block_size", "output_dtype"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), scale = n.requiredInput(1);
  FailureOr<int64_t> axis = n.getInt("axis", 1), dtype = n.getInt("output_dtype", 0),
                     block = n.getInt("block_size", 0);
  if (failed(x) || failed(scale) || failed(axis) || failed(dtype) || failed(block))
    return failure();
  if (*block != 0)
    return n.error() << "blocked quantization (block_size) is not supported";
  Type to = n.input(2) ? n.inputType(2).getElementType()
                       : elementType(n.ctx(), *dtype ? *dtype : int64_t(onnx::TensorProto::UINT8));
  if (!to)
    return n.error() << "unsupported output_dtype " << dataTypeName(*dtype);
  return emit<graph::QuantizeLinearOp>(
      n, {*x, *scale, n.input(2)},
      {n.named("axis", n.i64(*axis)), n.named("to", TypeAttr::get(to))});
}

LogicalResult importDequantizeLinear(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis", "block_size"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), scale = n.requiredInput(1);
  FailureOr<int64_t> axis = n.getInt("axis", 1), block = n.getInt("block_size", 0);
  if (failed(x) || failed(scale) || failed(axis) || failed(block))
    return failure();
  if (*block != 0)
    return n.error() << "blocked quantization (block_size) is not supported";
  return emit<graph::DequantizeLinearOp>(n, {*x, *scale, n.input(2)},
                                         {n.named("axis", n.i64(*axis))});
}

/// The element type named by attribute `name` (an ONNX dtype code), or `dflt`.
FailureOr<Type> dtypeAttr(NodeImporter &n, StringRef name, Type dflt) {
  FailureOr<std::optional<int64_t>> code = n.getOptionalInt(name);
  if (failed(code))
    return failure();
  if (!*code)
    return dflt;
  Type t = elementType(n.ctx(), **code);
  if (!t)
    return n.error() << "unsupported " << name << " " << dataTypeName(**code);
  return t;
}

/// RandomUniform(Like) and RandomNormal(Like): (name, default) of the two
/// distribution parameters. The shape-attribute forms become the Like op over
/// a zero splat of that shape.
template <typename OpTy>
LogicalResult importRandom(NodeImporter &n, bool like, std::pair<StringRef, float> p0,
                           std::pair<StringRef, float> p1) {
  if (failed(n.checkAttributes({"dtype", "seed", "shape", p0.first, p1.first})))
    return failure();
  FailureOr<float> a = n.getFloat(p0.first, p0.second), b = n.getFloat(p1.first, p1.second);
  FailureOr<std::optional<float>> seed = n.getOptionalFloat("seed");
  if (failed(a) || failed(b) || failed(seed))
    return failure();
  Value input;
  Type dflt = n.b().getF32Type();
  if (like) {
    FailureOr<Value> x = n.requiredInput(0);
    if (failed(x))
      return failure();
    input = *x;
    if (isa<FloatType>(n.inputType(0).getElementType()))
      dflt = n.inputType(0).getElementType();
  } else {
    FailureOr<SmallVector<int64_t>> shape = n.getInts("shape");
    if (failed(shape))
      return failure();
    for (int64_t d : *shape)
      if (d < 0)
        return n.error() << "negative dimension " << d << " in 'shape'";
    auto type = RankedTensorType::get(*shape, n.b().getF32Type());
    input = n.constant(SplatElementsAttr::get(type, n.b().getF32FloatAttr(0.0f)));
  }
  FailureOr<Type> dtype = dtypeAttr(n, "dtype", dflt);
  if (failed(dtype))
    return failure();
  SmallVector<NamedAttribute> attrs = {n.named("dtype", TypeAttr::get(*dtype)),
                                       n.named(p0.first, n.f32(*a)),
                                       n.named(p1.first, n.f32(*b))};
  if (*seed)
    attrs.push_back(n.named("seed", n.f32(**seed)));
  return emit<OpTy>(n, input, attrs);
}

LogicalResult importBernoulli(NodeImporter &n) {
  if (failed(n.checkAttributes({"dtype", "seed"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<std::optional<float>> seed = n.getOptionalFloat("seed");
  if (failed(x) || failed(seed))
    return failure();
  FailureOr<Type> dtype = dtypeAttr(n, "dtype", n.inputType(0).getElementType());
  if (failed(dtype))
    return failure();
  SmallVector<NamedAttribute> attrs = {n.named("dtype", TypeAttr::get(*dtype))};
  if (*seed)
    attrs.push_back(n.named("seed", n.f32(**seed)));
  return emit<graph::BernoulliOp>(n, *x, attrs);
}

LogicalResult importCastLike(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0), like = n.requiredInput(1);
  if (failed(x) || failed(like))
    return failure();
  Type elt = n.inputType(1).getElementType();
  return emit<graph::CastOp>(n, *x, {n.named("to", TypeAttr::get(elt))});
}

template <typename OpTy>
LogicalResult importToBool(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x))
    return failure();
  SmallVector<NamedAttribute> attrs;
  for (StringRef name : {"detect_negative", "detect_positive"}) {
    if (!n.attr(name))
      continue;
    FailureOr<int64_t> v = n.getInt(name, 1);
    if (failed(v))
      return failure();
    attrs.push_back(n.named(name, n.i64(*v)));
  }
  return emit<OpTy>(n, *x, attrs);
}

LogicalResult importWhere(NodeImporter &n) {
  FailureOr<Value> c = n.requiredInput(0), x = n.requiredInput(1), y = n.requiredInput(2);
  if (failed(c) || failed(x) || failed(y))
    return failure();
  return emit<graph::WhereOp>(n, {*c, *x, *y});
}

} // namespace

void strait::onnximport::registerElementwiseImporters(OpRegistry &r) {
  using namespace graph;
#define UNARY(Name) r.add(#Name, 1, importUnary<Name##Op>)
  UNARY(Abs); UNARY(Acos); UNARY(Acosh); UNARY(Asin); UNARY(Asinh); UNARY(Atan);
  UNARY(Atanh); UNARY(Ceil); UNARY(Cos); UNARY(Cosh); UNARY(Erf); UNARY(Exp);
  UNARY(Floor); UNARY(HardSwish); UNARY(Log); UNARY(Mish); UNARY(Neg); UNARY(Not);
  UNARY(Reciprocal); UNARY(Relu); UNARY(Round); UNARY(Sigmoid); UNARY(Sign);
  UNARY(Sin); UNARY(Sinh); UNARY(Softplus); UNARY(Softsign); UNARY(Sqrt);
  UNARY(Tan); UNARY(Tanh);
#undef UNARY
  r.add("Celu", 1, [](NodeImporter &n) { return importUnaryFloatAttrs<CeluOp>(n, {{"alpha", 1.0f}}); });
  r.add("Elu", 1, [](NodeImporter &n) { return importUnaryFloatAttrs<EluOp>(n, {{"alpha", 1.0f}}); });
  r.add("HardSigmoid", 1, [](NodeImporter &n) {
    return importUnaryFloatAttrs<HardSigmoidOp>(n, {{"alpha", 0.2f}, {"beta", 0.5f}});
  });
  r.add("LeakyRelu", 1, [](NodeImporter &n) {
    return importUnaryFloatAttrs<LeakyReluOp>(n, {{"alpha", 0.01f}});
  });
  r.add("Selu", 1, [](NodeImporter &n) {
    return importUnaryFloatAttrs<SeluOp>(
        n, {{"alpha", 1.67326319217681884765625f}, {"gamma", 1.05070102214813232421875f}});
  });
  r.add("ThresholdedRelu", 1, [](NodeImporter &n) {
    return importUnaryFloatAttrs<ThresholdedReluOp>(n, {{"alpha", 1.0f}});
  });
  r.add("Shrink", 9, [](NodeImporter &n) {
    return importUnaryFloatAttrs<ShrinkOp>(n, {{"lambd", 0.5f}, {"bias", 0.0f}});
  });
  r.add("BitShift", 11, importBitShift);
  r.add("QuantizeLinear", 10, importQuantizeLinear);
  r.add("DequantizeLinear", 10, importDequantizeLinear);
  r.add("RandomUniformLike", 1, [](NodeImporter &n) {
    return importRandom<RandomUniformLikeOp>(n, true, {"high", 1.0f}, {"low", 0.0f});
  });
  r.add("RandomUniform", 1, [](NodeImporter &n) {
    return importRandom<RandomUniformLikeOp>(n, false, {"high", 1.0f}, {"low", 0.0f});
  });
  r.add("RandomNormalLike", 1, [](NodeImporter &n) {
    return importRandom<RandomNormalLikeOp>(n, true, {"mean", 0.0f}, {"scale", 1.0f});
  });
  r.add("RandomNormal", 1, [](NodeImporter &n) {
    return importRandom<RandomNormalLikeOp>(n, false, {"mean", 0.0f}, {"scale", 1.0f});
  });
  r.add("Bernoulli", 15, importBernoulli);
  r.add("Gelu", 20, importGelu);
  r.add("Clip", 1, importClip);
  r.add("Dropout", 1, importDropout);
  r.add("IsNaN", 9, importToBool<IsNaNOp>);
  r.add("IsInf", 10, importToBool<IsInfOp>);
  r.add("Cast", 6, importCast);
  r.add("CastLike", 15, importCastLike);
#define BINARY(Name)                                                           \
  r.add(#Name, 1, importLegacyBinary<Name##Op>);                               \
  r.add(#Name, 7, importBinary<Name##Op>)
  BINARY(Add); BINARY(Sub); BINARY(Mul); BINARY(Div); BINARY(And);
  BINARY(Or); BINARY(Xor); BINARY(Equal); BINARY(Less); BINARY(LessOrEqual);
  BINARY(Greater); BINARY(GreaterOrEqual);
#undef BINARY
  r.add("PRelu", 1, importLegacyPRelu);
  r.add("PRelu", 7, importBinary<PReluOp>);
  r.add("Pow", 1, importLegacyBinary<PowOp>);
  r.add("Pow", 7, importPow);
  r.add("Mod", 10, importMod);
  r.add("Where", 9, importWhere);
  r.add("Max", 1, importVariadic<MaxOp>);
  r.add("Min", 1, importVariadic<MinOp>);
  r.add("Mean", 1, importVariadic<MeanOp>);
  r.add("Sum", 1, importVariadic<SumOp>);
}
