//===- ImportElementwise.cpp - Elementwise ONNX ops -----------------------===//

#include "NodeImporter.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// Creates OpTy over the inputs with `attrs` and binds its results.
template <typename OpTy>
LogicalResult emit(NodeImporter &n, ValueRange operands,
                   ArrayRef<NamedAttribute> attrs = {}) {
  FailureOr<Values> r = n.create<OpTy>(operands, attrs);
  return failed(r) ? failure() : n.setResults(*r);
}

template <typename OpTy>
LogicalResult importUnary(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  return failed(x) ? failure() : emit<OpTy>(n, *x);
}

/// Unary op with float attributes given as (name, default) pairs.
template <typename OpTy>
LogicalResult importUnaryFloatAttrs(NodeImporter &n,
                                    ArrayRef<std::pair<StringRef, float>> attrs) {
  SmallVector<StringRef> names;
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

template <typename OpTy>
LogicalResult importVariadic(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
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

LogicalResult importIdentity(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  return failed(x) ? failure() : n.setResults(*x);
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
  if (n.input(2)) {
    FailureOr<DenseElementsAttr> t = n.constantInput(2, "training_mode");
    if (failed(t))
      return failure();
    if (!t->getValues<APInt>()[0].isZero())
      return n.error() << "training_mode = true in the model is not supported; "
                          "the training-step builder decides about dropout";
  }
  return emit<graph::DropoutOp>(n, *x, {n.named("ratio", n.f32(ratio))});
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
  r.add("Gelu", 20, importGelu);
  r.add("Clip", 1, importClip);
  r.add("Dropout", 1, importDropout);
  r.add("Identity", 1, importIdentity);
  r.add("IsNaN", 9, importToBool<IsNaNOp>);
  r.add("IsInf", 10, importToBool<IsInfOp>);
  r.add("Cast", 6, importCast);
  r.add("CastLike", 15, importCastLike);
#define BINARY(Name) r.add(#Name, 7, importBinary<Name##Op>)
  BINARY(Add); BINARY(Sub); BINARY(Mul); BINARY(Div); BINARY(PRelu); BINARY(And);
  BINARY(Or); BINARY(Xor); BINARY(Equal); BINARY(Less); BINARY(LessOrEqual);
  BINARY(Greater); BINARY(GreaterOrEqual);
#undef BINARY
  r.add("Pow", 7, importPow);
  r.add("Mod", 10, importMod);
  r.add("Where", 9, importWhere);
  r.add("Max", 8, importVariadic<MaxOp>);
  r.add("Min", 8, importVariadic<MinOp>);
  r.add("Mean", 8, importVariadic<MeanOp>);
  r.add("Sum", 8, importVariadic<SumOp>);
}
