//===- GraphFolds.cpp - Constant folding of graph ops ---------------------===//
//
// Folds the shape arithmetic that exporters emit (Shape -> Gather -> Concat ->
// Reshape chains, integer Add/Mul/Div, Equal/Where on shapes) so that imported
// models end with static shapes. Only small tensors are folded: a non-splat
// result larger than kFoldLimit elements stays an op.
//
//===----------------------------------------------------------------------===//

#include "InferHelpers.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/APSInt.h"

#include <cmath>

using namespace mlir;
using namespace strait::graph;

static constexpr int64_t kFoldLimit = 1 << 16;

/// Row-major strides of `shape`.
static SmallVector<int64_t> stridesOf(ArrayRef<int64_t> shape) {
  SmallVector<int64_t> s(shape.size(), 1);
  for (int64_t i = (int64_t)shape.size() - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

/// Builds a result of `type` whose element i is src[map(i)].
static Attribute remap(DenseElementsAttr src, ShapedType type,
                       function_ref<int64_t(ArrayRef<int64_t>)> map) {
  if (!type.hasStaticShape())
    return {};
  if (src.isSplat())
    return SplatElementsAttr::get(type, src.getSplatValue<Attribute>());
  int64_t n = type.getNumElements();
  if (n > kFoldLimit)
    return {};
  auto values = src.getValues<Attribute>();
  SmallVector<Attribute> out;
  out.reserve(n);
  SmallVector<int64_t> idx(type.getRank(), 0);
  for (int64_t i = 0; i < n; ++i) {
    out.push_back(values[map(idx)]);
    for (int64_t d = type.getRank() - 1; d >= 0; --d) {
      if (++idx[d] < type.getDimSize(d))
        break;
      idx[d] = 0;
    }
  }
  return DenseElementsAttr::get(type, out);
}

/// Flat index in a tensor of `shape` broadcast to the result index `idx`.
static int64_t broadcastFlat(ArrayRef<int64_t> shape, ArrayRef<int64_t> idx) {
  int64_t flat = 0, stride = 1;
  size_t off = idx.size() - shape.size();
  for (int64_t d = (int64_t)shape.size() - 1; d >= 0; --d) {
    if (shape[d] != 1)
      flat += idx[off + d] * stride;
    stride *= shape[d];
  }
  return flat;
}

/// Elementwise fold over broadcast operands; `fn` returns null to give up.
static Attribute foldElementwise(ArrayRef<Attribute> operands, Type resultType,
                                 function_ref<Attribute(ArrayRef<Attribute>)> fn) {
  auto type = dyn_cast<RankedTensorType>(resultType);
  if (!type || !type.hasStaticShape() || type.getNumElements() > kFoldLimit)
    return {};
  SmallVector<DenseElementsAttr> in;
  bool allSplat = true;
  for (Attribute a : operands) {
    auto d = dyn_cast_or_null<DenseElementsAttr>(a);
    if (!d)
      return {};
    allSplat &= d.isSplat();
    in.push_back(d);
  }
  Type elt = type.getElementType();
  auto compute = [&](ArrayRef<int64_t> idx) -> Attribute {
    SmallVector<Attribute> args;
    for (DenseElementsAttr d : in)
      args.push_back(d.isSplat() ? d.getSplatValue<Attribute>()
                                 : d.getValues<Attribute>()[broadcastFlat(
                                       d.getType().getShape(), idx)]);
    Attribute r = fn(args);
    if (r && cast<TypedAttr>(r).getType() != elt)
      return {};
    return r;
  };
  if (allSplat) {
    Attribute r = compute(SmallVector<int64_t>(type.getRank(), 0));
    return r ? SplatElementsAttr::get(type, r) : Attribute();
  }
  SmallVector<Attribute> out;
  SmallVector<int64_t> idx(type.getRank(), 0);
  for (int64_t i = 0, n = type.getNumElements(); i < n; ++i) {
    Attribute r = compute(idx);
    if (!r)
      return {};
    out.push_back(r);
    for (int64_t d = type.getRank() - 1; d >= 0; --d) {
      if (++idx[d] < type.getDimSize(d))
        break;
      idx[d] = 0;
    }
  }
  return DenseElementsAttr::get(type, out);
}

/// Integer or float arithmetic on two scalars of one type.
static Attribute arith(Attribute a, Attribute b, char op) {
  if (auto ia = dyn_cast<IntegerAttr>(a)) {
    auto ib = dyn_cast<IntegerAttr>(b);
    if (!ib || ia.getType() != ib.getType())
      return {};
    APInt x = ia.getValue(), y = ib.getValue();
    bool isUnsigned = ia.getType().isUnsignedInteger();
    switch (op) {
    case '+': return IntegerAttr::get(ia.getType(), x + y);
    case '-': return IntegerAttr::get(ia.getType(), x - y);
    case '*': return IntegerAttr::get(ia.getType(), x * y);
    case '/':
      if (y.isZero())
        return {};
      return IntegerAttr::get(ia.getType(), isUnsigned ? x.udiv(y) : x.sdiv(y));
    }
    return {};
  }
  auto fa = dyn_cast<FloatAttr>(a), fb = dyn_cast<FloatAttr>(b);
  if (!fa || !fb || fa.getType() != fb.getType())
    return {};
  APFloat x = fa.getValue(), y = fb.getValue();
  switch (op) {
  case '+': x.add(y, APFloat::rmNearestTiesToEven); break;
  case '-': x.subtract(y, APFloat::rmNearestTiesToEven); break;
  case '*': x.multiply(y, APFloat::rmNearestTiesToEven); break;
  case '/': x.divide(y, APFloat::rmNearestTiesToEven); break;
  default: return {};
  }
  return FloatAttr::get(fa.getType(), x);
}

/// Three-way comparison of two scalars: -1, 0, 1, or nullopt (unordered).
static std::optional<int> compare(Attribute a, Attribute b) {
  if (auto ia = dyn_cast<IntegerAttr>(a)) {
    auto ib = dyn_cast<IntegerAttr>(b);
    if (!ib)
      return std::nullopt;
    bool u = ia.getType().isUnsignedInteger() || ia.getType().isInteger(1);
    APInt x = ia.getValue(), y = ib.getValue();
    if (x == y)
      return 0;
    return (u ? x.ult(y) : x.slt(y)) ? -1 : 1;
  }
  auto fa = dyn_cast<FloatAttr>(a), fb = dyn_cast<FloatAttr>(b);
  if (!fa || !fb)
    return std::nullopt;
  switch (fa.getValue().compare(fb.getValue())) {
  case APFloat::cmpEqual: return 0;
  case APFloat::cmpLessThan: return -1;
  case APFloat::cmpGreaterThan: return 1;
  default: return std::nullopt;
  }
}

static Attribute boolAttr(MLIRContext *ctx, bool v) {
  return IntegerAttr::get(IntegerType::get(ctx, 1), v ? 1 : 0);
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

#define STRAIT_FOLD_ARITH(OpName, ch)                                          \
  OpFoldResult OpName::fold(FoldAdaptor adaptor) {                             \
    return foldElementwise(adaptor.getOperands(), getType(),                   \
                           [](ArrayRef<Attribute> v) {                         \
                             return arith(v[0], v[1], ch);                     \
                           });                                                 \
  }
STRAIT_FOLD_ARITH(AddOp, '+')
STRAIT_FOLD_ARITH(SubOp, '-')
STRAIT_FOLD_ARITH(MulOp, '*')
STRAIT_FOLD_ARITH(DivOp, '/')
#undef STRAIT_FOLD_ARITH

/// Integer Mod (shape arithmetic such as torchvision Swin's window padding
/// (w - W % w) % w): fmod 0 takes the divisor's sign (Python's %), fmod 1 the
/// dividend's (C's fmod). Floats and division by zero stay ops.
OpFoldResult ModOp::fold(FoldAdaptor adaptor) {
  bool cStyle = getFmod() != 0;
  return foldElementwise(adaptor.getOperands(), getType(),
                         [cStyle](ArrayRef<Attribute> v) -> Attribute {
                           auto a = dyn_cast<IntegerAttr>(v[0]);
                           auto b = dyn_cast<IntegerAttr>(v[1]);
                           if (!a || !b || a.getType() != b.getType() ||
                               b.getValue().isZero())
                             return {};
                           APInt x = a.getValue(), y = b.getValue();
                           if (a.getType().isUnsignedInteger())
                             return IntegerAttr::get(a.getType(), x.urem(y));
                           APInt r = x.srem(y);
                           if (!cStyle && !r.isZero() && r.isNegative() != y.isNegative())
                             r += y;
                           return IntegerAttr::get(a.getType(), r);
                         });
}

/// Pow of constants (shape arithmetic such as DINOv2's sqrt(num_positions) =
/// num_positions ** 0.5 in the TorchScript export): a float base in double
/// precision, rounded to its type; an integer base with a non-negative integer
/// exponent exactly (wrapping like the runtime's integer multiply).
OpFoldResult PowOp::fold(FoldAdaptor adaptor) {
  return foldElementwise(adaptor.getOperands(), getType(), [](ArrayRef<Attribute> v) -> Attribute {
    auto exponent = [&]() -> std::optional<double> {
      if (auto f = dyn_cast<FloatAttr>(v[1]))
        return f.getValueAsDouble();
      if (auto i = dyn_cast<IntegerAttr>(v[1]))
        return static_cast<double>(i.getValue().getSExtValue());
      return std::nullopt;
    }();
    if (!exponent)
      return {};
    if (auto f = dyn_cast<FloatAttr>(v[0]))
      return FloatAttr::get(f.getType(), std::pow(f.getValueAsDouble(), *exponent));
    auto i = dyn_cast<IntegerAttr>(v[0]);
    if (!i || *exponent < 0 || *exponent != std::floor(*exponent) || *exponent > 64)
      return {};
    APInt base = i.getValue(), r(base.getBitWidth(), 1);
    for (int64_t k = 0; k < static_cast<int64_t>(*exponent); ++k)
      r *= base;
    return IntegerAttr::get(i.getType(), r);
  });
}

#define STRAIT_FOLD_COMPARE(OpName, pred)                                      \
  OpFoldResult OpName::fold(FoldAdaptor adaptor) {                             \
    MLIRContext *ctx = getContext();                                           \
    return foldElementwise(adaptor.getOperands(), getType(),                   \
                           [ctx](ArrayRef<Attribute> v) -> Attribute {         \
                             std::optional<int> c = compare(v[0], v[1]);       \
                             if (!c)                                           \
                               return boolAttr(ctx, false);                    \
                             return boolAttr(ctx, *c pred 0);                  \
                           });                                                 \
  }
STRAIT_FOLD_COMPARE(EqualOp, ==)
STRAIT_FOLD_COMPARE(LessOp, <)
STRAIT_FOLD_COMPARE(GreaterOp, >)
STRAIT_FOLD_COMPARE(LessOrEqualOp, <=)
STRAIT_FOLD_COMPARE(GreaterOrEqualOp, >=)
#undef STRAIT_FOLD_COMPARE

/// The value of a bool scalar, or nullopt for anything else.
static std::optional<bool> boolValue(Attribute a) {
  auto i = dyn_cast_or_null<IntegerAttr>(a);
  if (!i || !i.getType().isInteger(1))
    return std::nullopt;
  return !i.getValue().isZero();
}

// Logical ops fold so that loop and branch conditions computed from
// constants (the iteration number, shapes) become constants at import.
OpFoldResult NotOp::fold(FoldAdaptor adaptor) {
  MLIRContext *ctx = getContext();
  return foldElementwise(adaptor.getOperands(), getType(),
                         [ctx](ArrayRef<Attribute> v) -> Attribute {
                           std::optional<bool> x = boolValue(v[0]);
                           return x ? boolAttr(ctx, !*x) : Attribute();
                         });
}

#define STRAIT_FOLD_LOGICAL(OpName, expr)                                      \
  OpFoldResult OpName::fold(FoldAdaptor adaptor) {                             \
    MLIRContext *ctx = getContext();                                           \
    return foldElementwise(adaptor.getOperands(), getType(),                   \
                           [ctx](ArrayRef<Attribute> v) -> Attribute {         \
                             std::optional<bool> a = boolValue(v[0]),          \
                                                 b = boolValue(v[1]);          \
                             if (!a || !b)                                     \
                               return {};                                      \
                             return boolAttr(ctx, expr);                       \
                           });                                                 \
  }
STRAIT_FOLD_LOGICAL(AndOp, *a && *b)
STRAIT_FOLD_LOGICAL(OrOp, *a || *b)
STRAIT_FOLD_LOGICAL(XorOp, *a != *b)
#undef STRAIT_FOLD_LOGICAL

OpFoldResult NegOp::fold(FoldAdaptor adaptor) {
  return foldElementwise(adaptor.getOperands(), getType(),
                         [](ArrayRef<Attribute> v) -> Attribute {
                           if (auto i = dyn_cast<IntegerAttr>(v[0]))
                             return IntegerAttr::get(i.getType(), -i.getValue());
                           if (auto f = dyn_cast<FloatAttr>(v[0]))
                             return FloatAttr::get(f.getType(), -f.getValue());
                           return {};
                         });
}

/// Folds a float unary op through `fn` on APFloat; integers pass unchanged
/// where `intIdentity` (Ceil and Floor of an integer are the integer).
static Attribute foldFloatUnary(ArrayRef<Attribute> operands, Type type,
                                function_ref<APFloat(APFloat)> fn,
                                function_ref<Attribute(IntegerAttr)> onInt) {
  return foldElementwise(operands, type, [&](ArrayRef<Attribute> v) -> Attribute {
    if (auto f = dyn_cast<FloatAttr>(v[0]))
      return FloatAttr::get(f.getType(), fn(f.getValue()));
    if (auto i = dyn_cast<IntegerAttr>(v[0]))
      return onInt(i);
    return {};
  });
}

// Ceil, Floor and Relu fold so that trip counts computed from constants
// (Range's ONNX function: Cast(Relu(Ceil((limit - start) / delta)))) fold.
OpFoldResult CeilOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(
      adaptor.getOperands(), getType(),
      [](APFloat x) { x.roundToIntegral(APFloat::rmTowardPositive); return x; },
      [](IntegerAttr i) -> Attribute { return i; });
}

OpFoldResult FloorOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(
      adaptor.getOperands(), getType(),
      [](APFloat x) { x.roundToIntegral(APFloat::rmTowardNegative); return x; },
      [](IntegerAttr i) -> Attribute { return i; });
}

OpFoldResult ReluOp::fold(FoldAdaptor adaptor) {
  return foldFloatUnary(
      adaptor.getOperands(), getType(),
      [](APFloat x) { return x.isNegative() && !x.isNaN() ? APFloat::getZero(x.getSemantics()) : x; },
      [](IntegerAttr i) -> Attribute {
        if (i.getType().isUnsignedInteger() || !i.getValue().isNegative())
          return i;
        return IntegerAttr::get(i.getType(), 0);
      });
}

OpFoldResult WhereOp::fold(FoldAdaptor adaptor) {
  return foldElementwise(adaptor.getOperands(), getType(),
                         [](ArrayRef<Attribute> v) -> Attribute {
                           auto c = dyn_cast<IntegerAttr>(v[0]);
                           if (!c)
                             return {};
                           return c.getValue().isZero() ? v[2] : v[1];
                         });
}

/// Converts one scalar to `to`; null when not representable exactly enough.
static Attribute castScalar(Attribute v, Type to) {
  if (auto i = dyn_cast<IntegerAttr>(v)) {
    bool isSigned = !i.getType().isUnsignedInteger() && !i.getType().isInteger(1);
    if (auto it = dyn_cast<IntegerType>(to)) {
      APInt x = isSigned ? i.getValue().sextOrTrunc(it.getWidth())
                         : i.getValue().zextOrTrunc(it.getWidth());
      if (it.getWidth() == 1)
        x = APInt(1, !i.getValue().isZero());
      return IntegerAttr::get(to, x);
    }
    if (auto ft = dyn_cast<FloatType>(to)) {
      APFloat f(ft.getFloatSemantics());
      f.convertFromAPInt(i.getValue(), isSigned, APFloat::rmNearestTiesToEven);
      return FloatAttr::get(to, f);
    }
    return {};
  }
  auto f = dyn_cast<FloatAttr>(v);
  if (!f)
    return {};
  if (auto ft = dyn_cast<FloatType>(to)) {
    APFloat x = f.getValue();
    bool lost;
    x.convert(ft.getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
    return FloatAttr::get(to, x);
  }
  if (auto it = dyn_cast<IntegerType>(to)) {
    if (it.getWidth() == 1)
      return IntegerAttr::get(to, APInt(1, !f.getValue().isZero()));
    APSInt r(it.getWidth(), it.isUnsigned());
    bool exact;
    if (f.getValue().convertToInteger(r, APFloat::rmTowardZero, &exact) &
        APFloat::opInvalidOp)
      return {};
    return IntegerAttr::get(to, r);
  }
  return {};
}

OpFoldResult CastOp::fold(FoldAdaptor adaptor) {
  if (getInput().getType() == getType())
    return getInput();
  Type to = getTo();
  return foldElementwise(adaptor.getOperands(), getType(),
                         [to](ArrayRef<Attribute> v) { return castScalar(v[0], to); });
}

/// Same elements, new shape.
static OpFoldResult foldReshapeLike(Value input, Attribute constant, Type type) {
  if (input.getType() == type)
    return input;
  auto d = dyn_cast_or_null<DenseElementsAttr>(constant);
  auto t = dyn_cast<RankedTensorType>(type);
  if (!d || !t || !t.hasStaticShape())
    return {};
  return d.reshape(t);
}

OpFoldResult ReshapeOp::fold(FoldAdaptor a) {
  return foldReshapeLike(getData(), a.getData(), getType());
}
OpFoldResult SqueezeOp::fold(FoldAdaptor a) {
  return foldReshapeLike(getData(), a.getData(), getType());
}
OpFoldResult UnsqueezeOp::fold(FoldAdaptor a) {
  return foldReshapeLike(getData(), a.getData(), getType());
}

OpFoldResult ExpandOp::fold(FoldAdaptor a) {
  if (getInput().getType() == getType())
    return getInput();
  auto d = dyn_cast_or_null<DenseElementsAttr>(a.getInput());
  if (!d)
    return {};
  ArrayRef<int64_t> src = d.getType().getShape();
  return remap(d, getType(), [&](ArrayRef<int64_t> idx) { return broadcastFlat(src, idx); });
}

OpFoldResult TransposeOp::fold(FoldAdaptor a) {
  if (llvm::equal(getPerm(), llvm::seq<int64_t>(0, getPerm().size())))
    return getData();
  auto d = dyn_cast_or_null<DenseElementsAttr>(a.getData());
  if (!d)
    return {};
  SmallVector<int64_t> srcStrides = stridesOf(d.getType().getShape());
  ArrayRef<int64_t> perm = getPerm();
  return remap(d, getType(), [&](ArrayRef<int64_t> idx) {
    int64_t flat = 0;
    for (size_t i = 0; i < idx.size(); ++i)
      flat += idx[i] * srcStrides[perm[i]];
    return flat;
  });
}

OpFoldResult SliceOp::fold(FoldAdaptor a) {
  auto d = dyn_cast_or_null<DenseElementsAttr>(a.getData());
  auto type = getType();
  if (!d || !type.hasStaticShape())
    return {};
  ArrayRef<int64_t> shape = d.getType().getShape();
  SmallVector<int64_t> start(shape.size(), 0), step(shape.size(), 1);
  for (size_t i = 0; i < getAxes().size(); ++i) {
    int64_t ax = getAxes()[i] < 0 ? getAxes()[i] + shape.size() : getAxes()[i];
    SliceDim s = clampSlice(shape[ax], getStarts()[i], getEnds()[i], getSteps()[i]);
    start[ax] = s.start;
    step[ax] = s.step;
  }
  SmallVector<int64_t> strides = stridesOf(shape);
  return remap(d, type, [&](ArrayRef<int64_t> idx) {
    int64_t flat = 0;
    for (size_t i = 0; i < idx.size(); ++i)
      flat += (start[i] + idx[i] * step[i]) * strides[i];
    return flat;
  });
}

OpFoldResult GatherOp::fold(FoldAdaptor a) {
  auto d = dyn_cast_or_null<DenseElementsAttr>(a.getData());
  auto ind = dyn_cast_or_null<DenseElementsAttr>(a.getIndices());
  auto type = getType();
  if (!d || !ind || !type.hasStaticShape())
    return {};
  ArrayRef<int64_t> shape = d.getType().getShape();
  int64_t axis = (int64_t)getAxis() < 0 ? (int64_t)getAxis() + (int64_t)shape.size() : (int64_t)getAxis();
  int64_t idxRank = ind.getType().getRank();
  SmallVector<int64_t> indices;
  for (APInt v : ind.getValues<APInt>()) {
    int64_t i = v.getSExtValue();
    if (i < 0)
      i += shape[axis];
    if (i < 0 || i >= shape[axis])
      return {};
    indices.push_back(i);
  }
  SmallVector<int64_t> strides = stridesOf(shape);
  SmallVector<int64_t> idxStrides = stridesOf(ind.getType().getShape());
  return remap(d, type, [&](ArrayRef<int64_t> idx) {
    int64_t flat = 0;
    for (int64_t i = 0; i < axis; ++i)
      flat += idx[i] * strides[i];
    int64_t pos = 0;
    for (int64_t i = 0; i < idxRank; ++i)
      pos += idx[axis + i] * idxStrides[i];
    flat += indices[pos] * strides[axis];
    for (size_t i = axis + 1; i < shape.size(); ++i)
      flat += idx[i + idxRank - 1] * strides[i];
    return flat;
  });
}

OpFoldResult ConcatOp::fold(FoldAdaptor a) {
  if (getInputs().size() == 1)
    return getInputs().front();
  auto type = getType();
  if (!type.hasStaticShape() || type.getNumElements() > kFoldLimit)
    return {};
  SmallVector<DenseElementsAttr> parts;
  for (Attribute attr : a.getInputs()) {
    auto d = dyn_cast_or_null<DenseElementsAttr>(attr);
    if (!d)
      return {};
    parts.push_back(d);
  }
  int64_t axis = (int64_t)getAxis() < 0 ? (int64_t)getAxis() + type.getRank() : (int64_t)getAxis();
  int64_t outer = 1;
  for (int64_t i = 0; i < axis; ++i)
    outer *= type.getDimSize(i);
  SmallVector<Attribute> out;
  for (int64_t o = 0; o < outer; ++o)
    for (DenseElementsAttr p : parts) {
      int64_t chunk = p.getNumElements() / std::max<int64_t>(outer, 1);
      auto vals = p.getValues<Attribute>();
      for (int64_t j = 0; j < chunk; ++j)
        out.push_back(p.isSplat() ? p.getSplatValue<Attribute>() : vals[o * chunk + j]);
    }
  return DenseElementsAttr::get(type, out);
}

OpFoldResult ShapeOp::fold(FoldAdaptor) {
  auto in = dyn_cast<RankedTensorType>(getData().getType());
  auto type = getType();
  if (!in || !in.hasStaticShape() || !type.hasStaticShape())
    return {};
  int64_t rank = in.getRank();
  auto norm = [rank](int64_t v) {
    if (v < 0)
      v += rank;
    return std::min(std::max<int64_t>(v, 0), rank);
  };
  int64_t b = norm(getStart()), e = norm(getEnd().value_or(rank));
  SmallVector<int64_t> dims(in.getShape().begin() + b,
                            in.getShape().begin() + std::max(b, e));
  return DenseElementsAttr::get(type, ArrayRef<int64_t>(dims));
}

OpFoldResult SizeOp::fold(FoldAdaptor) {
  auto in = dyn_cast<RankedTensorType>(getData().getType());
  if (!in || !in.hasStaticShape())
    return {};
  return DenseElementsAttr::get(getType(), ArrayRef<int64_t>{in.getNumElements()});
}

