//===- ImportQuantized.cpp - Integer products and dynamic quantization ----===//
//
// DynamicQuantizeLinear becomes the ONNX function body: ReduceMin/ReduceMax,
// the f32 scale and zero point, and QuantizeLinear.
//
// MatMulInteger, QLinearMatMul, ConvInteger and QLinearConv must be exact.
// The runtimes' MatMul and Conv are f32 (a product of 8-bit integers summed
// over K > 2^8 terms leaves f32's 24-bit mantissa), so the operands are cast
// to f64 with their zero points subtracted (integers of at most 9 bits) and
// multiplied by an f64 Einsum, whose products and sums stay exact integers
// while K < 2^37. Convolutions gather their patches first (im2col: Pad, then
// a Gather with constant indices). The integer results are Cast to int32
// (through int64, which wraps like an int32 accumulator, when K is large
// enough to overflow it). The QLinear ops requantize as the ONNX reference
// does: the f32 multiplier a_scale * b_scale / y_scale times the exact sum in
// f64, plus y_zero_point, rounded half to even and saturated.
//
//===----------------------------------------------------------------------===//

#include "NodeImporter.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// Builds the graph ops of one node. A null operand (an earlier failure,
/// already diagnosed) makes every later op null too.
struct Ops {
  NodeImporter &n;

  template <typename OpTy> Value op(ArrayRef<Value> operands, ArrayRef<NamedAttribute> attrs = {}) {
    if (llvm::any_of(operands, [](Value v) { return !v; }))
      return {};
    FailureOr<Values> r = n.create<OpTy>(operands, attrs);
    return failed(r) ? Value() : (*r)[0];
  }
  Value cast(Value v, Type to) {
    return op<graph::CastOp>({v}, {n.named("to", TypeAttr::get(to))});
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    return op<graph::ReshapeOp>({v}, {n.named("shape", n.i64s(shape))});
  }
  /// A rank-0 constant of float type `elt`.
  Value scalar(double v, Type elt) {
    auto type = RankedTensorType::get({}, elt);
    return n.constant(DenseElementsAttr::get(type, n.b().getFloatAttr(elt, v)));
  }
  Type f32() { return n.b().getF32Type(); }
  Type f64() { return n.b().getF64Type(); }
};

bool isInt8(Type t) { return t.isInteger(8); }

/// Input `i` as a ranked tensor with an 8-bit integer element type.
FailureOr<RankedTensorType> int8Input(NodeImporter &n, size_t i, StringRef what) {
  auto t = dyn_cast_or_null<RankedTensorType>(n.inputType(i));
  if (!n.input(i))
    return n.error() << "missing input '" << what << "'";
  if (!t || !isInt8(t.getElementType()))
    return n.error() << "input '" << what << "' must be a ranked int8 or uint8 tensor, got "
                     << n.inputType(i);
  return t;
}

/// Fails unless the optional zero point `i` has `like`'s element type.
LogicalResult checkZeroPoint(NodeImporter &n, size_t i, StringRef what, Type like) {
  if (!n.input(i))
    return success();
  auto t = dyn_cast<RankedTensorType>(n.inputType(i));
  if (!t || t.getElementType() != like)
    return n.error() << "input '" << what << "' must be a ranked tensor of " << like << ", got "
                     << n.inputType(i);
  return success();
}

/// Fails unless the scale `i` is a ranked f32 tensor.
LogicalResult checkScale(NodeImporter &n, size_t i, StringRef what) {
  auto t = dyn_cast_or_null<RankedTensorType>(n.inputType(i));
  if (!n.input(i))
    return n.error() << "missing input '" << what << "'";
  if (!t || !t.getElementType().isF32())
    return n.error() << "input '" << what << "' must be a ranked f32 tensor, got " << n.inputType(i)
                     << " (other scale types are not supported)";
  return success();
}

/// Where the quantization parameter of a matrix operand applies.
enum class ParamAxis { Row, Column };

/// Parameter `p` (a zero point or scale of the rank-`rank` operand whose
/// last two dimensions are `rows` x `cols`) shaped to broadcast against the
/// operand: a single value becomes a scalar; a 1-D vector applies per row of
/// A ([M] -> [M, 1]) or per column of B ([N]); an N-D parameter must already
/// be [..., M, 1] (rows) or [..., 1, N] (columns).
Value matrixParam(Ops &b, Value p, StringRef what, int64_t rank, int64_t rows, int64_t cols,
                  ParamAxis axis) {
  if (!p)
    return {};
  auto t = cast<RankedTensorType>(p.getType());
  NodeImporter &n = b.n;
  if (t.hasStaticShape() && t.getNumElements() == 1)
    return t.getRank() == 0 ? p : b.reshape(p, {});
  int64_t along = axis == ParamAxis::Row ? rows : cols;
  StringRef per = axis == ParamAxis::Row ? "per row" : "per column";
  if (rank < 2) {
    n.error() << "input '" << what << "' must be a scalar for a 1-D operand, got " << t;
    return {};
  }
  if (t.getRank() == 1) {
    if (t.getDimSize(0) != along) {
      n.error() << "input '" << what << "' " << per << " must have " << along << " entries, got "
                << t;
      return {};
    }
    return axis == ParamAxis::Row ? b.reshape(p, {along, 1}) : p;
  }
  ArrayRef<int64_t> s = t.getShape();
  int64_t r = s[s.size() - 2], c = s.back();
  bool ok = t.getRank() <= rank && (axis == ParamAxis::Row ? (c == 1 && (r == 1 || r == rows))
                                                           : (r == 1 && (c == 1 || c == cols)));
  if (!ok) {
    n.error() << "input '" << what << "' must be a scalar, a vector " << per << " or of shape "
              << (axis == ParamAxis::Row ? "[..., M, 1]" : "[..., 1, N]") << ", got " << t;
    return {};
  }
  return p;
}

/// Casts an integer operand to f64 and subtracts its zero point (null: 0).
Value centered(Ops &b, Value x, Value zeroPoint) {
  Value xf = b.cast(x, b.f64());
  return zeroPoint ? b.op<graph::SubOp>({xf, b.cast(zeroPoint, b.f64())}) : xf;
}

/// Largest |x - zero point| of two 8-bit integers, and sums of K products
/// of two of them that an int32 accumulator holds without wrapping.
constexpr int64_t kMaxCentered = 255;
constexpr int64_t kInt32Terms = INT32_MAX / (kMaxCentered * kMaxCentered);
/// f64 sums of K such products are exact while K * 255^2 < 2^53.
constexpr int64_t kMaxTerms = int64_t(1) << 37;

/// The exact f64 sums `acc` of `terms` products as int32, wrapping like an
/// int32 accumulator when they may not fit.
Value toInt32(Ops &b, Value acc, int64_t terms) {
  Type i32 = b.n.b().getIntegerType(32);
  if (terms <= kInt32Terms)
    return b.cast(acc, i32);
  return b.cast(b.cast(acc, b.n.b().getIntegerType(64)), i32);
}

/// saturate(round(acc * multiplier + zero point)) in the zero point's type,
/// as onnx.reference computes it: the multiplier in f32, the rest in f64.
Value requantize(Ops &b, Value acc, int64_t terms, Value multiplier, Value zeroPoint) {
  if (!acc || !multiplier || !zeroPoint)
    return {};
  if (terms > kInt32Terms) // the reference's int32 accumulator wraps
    acc = b.cast(toInt32(b, acc, terms), b.f64());
  Value y = b.op<graph::MulOp>({acc, b.cast(multiplier, b.f64())});
  y = b.op<graph::AddOp>({y, b.cast(zeroPoint, b.f64())});
  y = b.op<graph::RoundOp>({y});
  Type to = cast<RankedTensorType>(zeroPoint.getType()).getElementType();
  bool isUnsigned = to.isUnsignedInteger();
  y = b.op<graph::ClipOp>({y}, {b.n.named("min", b.n.b().getF64FloatAttr(isUnsigned ? 0 : -128)),
                                b.n.named("max", b.n.b().getF64FloatAttr(isUnsigned ? 255 : 127))});
  return b.cast(y, to);
}

//===----------------------------------------------------------------------===//
// DynamicQuantizeLinear
//===----------------------------------------------------------------------===//

/// y_scale = (max(0, max x) - min(0, min x)) / 255 (1/255 when that range is
/// 0), y_zero_point = round(clip(-min / y_scale, 0, 255)), y =
/// QuantizeLinear(x, y_scale, y_zero_point).
LogicalResult importDynamicQuantizeLinear(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!xt || !xt.getElementType().isF32())
    return n.error() << "input 'x' must be a ranked f32 tensor, got " << n.inputType(0);
  if (xt.hasStaticShape() && xt.getNumElements() == 0)
    return n.error() << "input 'x' is empty: its range is undefined";
  Ops b{n};
  Type f32 = b.f32();
  Value zero = b.scalar(0.0, f32);
  auto all = [&](auto tag) {
    using OpTy = decltype(tag);
    return b.op<OpTy>({*x}, {n.named("axes", n.i64s({})), n.named("keepdims", n.i64(0))});
  };
  Value hi = b.op<graph::MaxOp>({all(graph::ReduceMaxOp()), zero});
  Value lo = b.op<graph::MinOp>({all(graph::ReduceMinOp()), zero});
  Value range = b.op<graph::SubOp>({hi, lo});
  Value empty = b.op<graph::EqualOp>({range, zero});
  range = b.op<graph::WhereOp>({empty, b.scalar(1.0, f32), range});
  Value scale = b.op<graph::DivOp>({range, b.scalar(255.0, f32)});
  Value zp = b.op<graph::NegOp>({b.op<graph::DivOp>({lo, scale})});
  zp = b.op<graph::ClipOp>(
      {zp}, {n.named("min", n.b().getF64FloatAttr(0)), n.named("max", n.b().getF64FloatAttr(255))});
  Type ui8 = n.b().getIntegerType(8, /*isSigned=*/false);
  zp = b.cast(b.op<graph::RoundOp>({zp}), ui8);
  Value y = b.op<graph::QuantizeLinearOp>(
      {*x, scale, zp}, {n.named("axis", n.i64(1)), n.named("to", TypeAttr::get(ui8))});
  if (!y)
    return failure();
  return n.setResults({y, scale, zp});
}

//===----------------------------------------------------------------------===//
// MatMulInteger, QLinearMatMul
//===----------------------------------------------------------------------===//

/// The operands of an integer matrix product, centered and in f64.
struct IntegerMatMul {
  Value a, b;            // f64, 1-D operands made 2-D
  bool aVector, bVector; // ONNX MatMul's 1-D promotion, undone on the result
  int64_t m, k, n, rankA, rankB;
};

/// Reads the operands (inputs `ia` and `ib`, named `an` and `bn`) with their
/// zero points (`iza`, `izb`, optional) and centers them. 1-D operands need
/// static shapes.
FailureOr<IntegerMatMul> readIntegerMatMul(Ops &b, size_t ia, size_t iza, size_t ib, size_t izb,
                                           StringRef an, StringRef bn) {
  NodeImporter &n = b.n;
  FailureOr<RankedTensorType> at = int8Input(n, ia, an), bt = int8Input(n, ib, bn);
  if (failed(at) || failed(bt) ||
      failed(checkZeroPoint(n, iza, "a_zero_point", at->getElementType())) ||
      failed(checkZeroPoint(n, izb, "b_zero_point", bt->getElementType())))
    return failure();
  IntegerMatMul p;
  p.rankA = at->getRank();
  p.rankB = bt->getRank();
  if (p.rankA == 0 || p.rankB == 0)
    return n.error() << "operands must have rank >= 1, got " << *at << " and " << *bt;
  p.aVector = p.rankA == 1;
  p.bVector = p.rankB == 1;
  if ((p.aVector && !at->hasStaticShape()) || (p.bVector && !bt->hasStaticShape()))
    return n.error() << "1-D operands need static shapes, got " << *at << " and " << *bt;
  ArrayRef<int64_t> as = at->getShape(), bs = bt->getShape();
  p.m = p.aVector ? 1 : as[as.size() - 2];
  p.k = as.back();
  p.n = p.bVector ? 1 : bs.back();
  int64_t kb = p.bVector ? bs[0] : bs[bs.size() - 2];
  if (p.k != ShapedType::kDynamic && kb != ShapedType::kDynamic && p.k != kb)
    return n.error() << "inner dimensions differ: " << *at << " x " << *bt;
  if (p.k == ShapedType::kDynamic && kb == ShapedType::kDynamic)
    return n.error() << "the inner dimension must be static to bound the exact sums";
  if (p.k == ShapedType::kDynamic)
    p.k = kb;
  if (p.k > kMaxTerms)
    return n.error() << "inner dimension " << p.k << " exceeds " << kMaxTerms
                     << ": f64 sums of its products would not be exact";
  Value za = matrixParam(b, n.input(iza), "a_zero_point", p.rankA, p.m, p.k, ParamAxis::Row);
  Value zb = matrixParam(b, n.input(izb), "b_zero_point", p.rankB, p.k, p.n, ParamAxis::Column);
  if ((n.input(iza) && !za) || (n.input(izb) && !zb))
    return failure();
  p.a = centered(b, n.input(ia), za);
  p.b = centered(b, n.input(ib), zb);
  if (p.aVector)
    p.a = b.reshape(p.a, {1, p.k});
  if (p.bVector)
    p.b = b.reshape(p.b, {p.k, 1});
  if (!p.a || !p.b)
    return failure();
  return p;
}

/// The exact f64 product [..., M, N] of `p` (1-D operands promoted).
Value integerProduct(Ops &b, const IntegerMatMul &p) {
  return b.op<graph::EinsumOp>(
      {p.a, p.b}, {b.n.named("equation", b.n.b().getStringAttr("...mk,...kn->...mn"))});
}

/// `y` [..., M, N] without the dimensions ONNX MatMul's 1-D promotion added.
Value dropPromoted(Ops &b, const IntegerMatMul &p, Value y) {
  if (!y || (!p.aVector && !p.bVector))
    return y;
  auto t = cast<RankedTensorType>(y.getType());
  SmallVector<int64_t> shape(t.getShape().drop_back(2));
  if (!p.aVector)
    shape.push_back(p.m);
  if (!p.bVector)
    shape.push_back(p.n);
  if (llvm::is_contained(shape, ShapedType::kDynamic)) {
    b.n.error() << "a 1-D operand's product needs static batch dimensions, got " << t;
    return {};
  }
  return b.reshape(y, shape);
}

LogicalResult importMatMulInteger(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  Ops b{n};
  FailureOr<IntegerMatMul> p = readIntegerMatMul(b, 0, 2, 1, 3, "A", "B");
  if (failed(p))
    return failure();
  Value y = dropPromoted(b, *p, toInt32(b, integerProduct(b, *p), p->k));
  return y ? n.setResults(y) : failure();
}

LogicalResult importQLinearMatMul(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  // a, a_scale, a_zero_point, b, b_scale, b_zero_point, y_scale, y_zero_point.
  for (size_t i : {2, 5, 7})
    if (!n.input(i))
      return n.error() << "missing input " << i << " (zero points are required)";
  if (failed(checkScale(n, 1, "a_scale")) || failed(checkScale(n, 4, "b_scale")) ||
      failed(checkScale(n, 6, "y_scale")))
    return failure();
  auto yz = dyn_cast<RankedTensorType>(n.inputType(7));
  if (!yz || !isInt8(yz.getElementType()))
    return n.error() << "input 'y_zero_point' must be int8 or uint8, got " << n.inputType(7);
  for (size_t i : {6, 7}) {
    auto t = cast<RankedTensorType>(n.inputType(i));
    if (!t.hasStaticShape() || t.getNumElements() != 1)
      return n.error() << "input '" << (i == 6 ? "y_scale" : "y_zero_point")
                       << "' must hold one value (per-tensor output quantization), got " << t;
  }
  Ops b{n};
  FailureOr<IntegerMatMul> p = readIntegerMatMul(b, 0, 2, 3, 5, "a", "b");
  if (failed(p))
    return failure();
  Value sa = matrixParam(b, n.input(1), "a_scale", p->rankA, p->m, p->k, ParamAxis::Row);
  Value sb = matrixParam(b, n.input(4), "b_scale", p->rankB, p->k, p->n, ParamAxis::Column);
  Value multiplier = b.op<graph::DivOp>({b.op<graph::MulOp>({sa, sb}), b.reshape(n.input(6), {})});
  Value y = requantize(b, integerProduct(b, *p), p->k, multiplier, b.reshape(n.input(7), {}));
  y = dropPromoted(b, *p, y);
  return y ? n.setResults(y) : failure();
}

//===----------------------------------------------------------------------===//
// ConvInteger, QLinearConv
//===----------------------------------------------------------------------===//

/// Entries of the im2col index constant, and of the f64 patches it gathers
/// (2^27: 1 GiB of int64 indices; 2^30: 8 GiB of patches).
constexpr int64_t kMaxIndices = int64_t(1) << 27;
constexpr int64_t kMaxPatches = int64_t(1) << 30;

/// A static convolution's window, auto_pad resolved, and its output sizes.
struct ConvWindow {
  SmallVector<int64_t> kernel, strides, dilations, pads, out;
  int64_t group;
};

FailureOr<ConvWindow> readConvWindow(NodeImporter &n, RankedTensorType xt, RankedTensorType wt) {
  int64_t spatial = xt.getRank() - 2;
  ArrayRef<int64_t> in = xt.getShape().drop_front(2);
  ConvWindow w;
  FailureOr<SmallVector<int64_t>> k =
      n.getInts("kernel_shape", SmallVector<int64_t>(wt.getShape().drop_front(2)));
  FailureOr<SmallVector<int64_t>> s = n.getInts("strides", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> d = n.getInts("dilations", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> p = n.getInts("pads", SmallVector<int64_t>(2 * spatial, 0));
  FailureOr<std::string> autoPad = n.getString("auto_pad", "NOTSET");
  FailureOr<int64_t> group = n.getInt("group", 1);
  if (failed(k) || failed(s) || failed(d) || failed(p) || failed(autoPad) || failed(group))
    return failure();
  if ((int64_t)k->size() != spatial || (int64_t)s->size() != spatial ||
      (int64_t)d->size() != spatial || (int64_t)p->size() != 2 * spatial)
    return n.error() << "kernel_shape/strides/dilations/pads do not match " << spatial
                     << " spatial dimensions";
  if (ArrayRef<int64_t>(*k) != wt.getShape().drop_front(2))
    return n.error() << "kernel_shape does not match W's shape " << wt;
  if (llvm::any_of(*s, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(*d, [](int64_t v) { return v < 1; }) ||
      llvm::any_of(*p, [](int64_t v) { return v < 0; }))
    return n.error() << "strides and dilations must be positive, pads non-negative";
  int64_t c = xt.getDimSize(1), m = wt.getDimSize(0);
  if (*group < 1 || c % *group || m % *group || wt.getDimSize(1) * *group != c)
    return n.error() << "group " << *group << " does not divide X " << xt << " and W " << wt;
  w.kernel = *k;
  w.strides = *s;
  w.dilations = *d;
  w.pads = *p;
  w.group = *group;
  bool same = *autoPad == "SAME_UPPER" || *autoPad == "SAME_LOWER";
  if (*autoPad == "VALID")
    std::fill(w.pads.begin(), w.pads.end(), 0);
  else if (!same && *autoPad != "NOTSET")
    return n.error() << "unknown auto_pad '" << *autoPad << "'";
  for (int64_t i = 0; i < spatial; ++i) {
    int64_t span = (w.kernel[i] - 1) * w.dilations[i] + 1;
    if (same) {
      int64_t out = (in[i] + w.strides[i] - 1) / w.strides[i];
      int64_t total = std::max<int64_t>((out - 1) * w.strides[i] + span - in[i], 0);
      int64_t small = total / 2, big = total - small;
      w.pads[i] = *autoPad == "SAME_UPPER" ? small : big;
      w.pads[i + spatial] = *autoPad == "SAME_UPPER" ? big : small;
    }
    int64_t padded = in[i] + w.pads[i] + w.pads[i + spatial];
    if (padded < span)
      return n.error() << "the window of spatial dimension " << i << " (" << span
                       << ") is larger than the padded input (" << padded << ")";
    w.out.push_back((padded - span) / w.strides[i] + 1);
  }
  return w;
}

/// The exact f64 convolution [N, M, out...] of centered x [N, C, in...] and
/// w [M, C/group, kernel...]: zero padding, im2col by one Gather with
/// constant indices, and an Einsum per group.
Value integerConv(Ops &b, Value x, Value w, RankedTensorType xt, RankedTensorType wt,
                  const ConvWindow &cw) {
  NodeImporter &n = b.n;
  int64_t spatial = xt.getRank() - 2, batch = xt.getDimSize(0), c = xt.getDimSize(1);
  int64_t m = wt.getDimSize(0), g = cw.group;
  int64_t positions = 1, taps = 1, flat = 1;
  SmallVector<int64_t> padded, pads(2 * xt.getRank(), 0);
  for (int64_t i = 0; i < spatial; ++i) {
    padded.push_back(xt.getDimSize(i + 2) + cw.pads[i] + cw.pads[i + spatial]);
    pads[i + 2] = cw.pads[i];
    pads[i + 2 + xt.getRank()] = cw.pads[i + spatial];
    positions *= cw.out[i];
    taps *= cw.kernel[i];
    flat *= padded.back();
  }
  if (positions > kMaxIndices / taps || batch * c > kMaxPatches / (positions * taps)) {
    n.error() << "im2col of " << positions << " output positions x " << taps
              << " kernel taps is too large (at most " << kMaxIndices << " indices and "
              << kMaxPatches << " patch entries)";
    return {};
  }
  // idx[l][t]: the flat padded offset of kernel tap t at output position l.
  SmallVector<int64_t> strides(spatial, 1), idx;
  for (int64_t i = spatial - 2; i >= 0; --i)
    strides[i] = strides[i + 1] * padded[i + 1];
  SmallVector<int64_t> o(spatial, 0), t(spatial, 0);
  for (int64_t l = 0; l < positions; ++l) {
    for (int64_t r = l, i = spatial - 1; i >= 0; r /= cw.out[i], --i)
      o[i] = r % cw.out[i];
    for (int64_t tap = 0; tap < taps; ++tap) {
      int64_t off = 0;
      for (int64_t r = tap, i = spatial - 1; i >= 0; r /= cw.kernel[i], --i) {
        t[i] = r % cw.kernel[i];
        off += (o[i] * cw.strides[i] + t[i] * cw.dilations[i]) * strides[i];
      }
      idx.push_back(off);
    }
  }
  if (llvm::any_of(pads, [](int64_t p) { return p != 0; }))
    x = b.op<graph::PadOp>({x}, {n.named("pads", n.i64s(pads))});
  x = b.reshape(x, {batch, c, flat});
  auto idxType = RankedTensorType::get({positions, taps}, n.b().getI64Type());
  Value indices = n.constant(DenseElementsAttr::get(idxType, ArrayRef<int64_t>(idx)));
  Value patches = b.op<graph::GatherOp>({x, indices}, {n.named("axis", n.i64(2))});
  patches = b.reshape(patches, {batch, g, c / g, positions, taps});
  w = b.reshape(w, {g, m / g, c / g, taps});
  Value y = b.op<graph::EinsumOp>({patches, w},
                                  {n.named("equation", n.b().getStringAttr("ngclk,gmck->ngml"))});
  SmallVector<int64_t> shape = {batch, m};
  shape.append(cw.out.begin(), cw.out.end());
  return b.reshape(y, shape);
}

/// x, w and their window, checked: static shapes, 8-bit integers.
struct ConvOperands {
  RankedTensorType xt, wt;
  ConvWindow window;
};

FailureOr<ConvOperands> readConvOperands(NodeImporter &n, size_t ix, size_t iw) {
  if (failed(
          n.checkAttributes({"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"})))
    return failure();
  FailureOr<RankedTensorType> xt = int8Input(n, ix, "x"), wt = int8Input(n, iw, "w");
  if (failed(xt) || failed(wt))
    return failure();
  if (!xt->hasStaticShape() || !wt->hasStaticShape() || xt->getRank() < 3 ||
      wt->getRank() != xt->getRank())
    return n.error() << "x (N, C, spatial...) and w (M, C/group, kernel...) need static "
                        "shapes of one rank >= 3, got "
                     << *xt << " and " << *wt;
  if (xt->getNumElements() == 0 || wt->getNumElements() == 0)
    return n.error() << "x and w must not be empty, got " << *xt << " and " << *wt;
  FailureOr<ConvWindow> w = readConvWindow(n, *xt, *wt);
  if (failed(w))
    return failure();
  return ConvOperands{*xt, *wt, *w};
}

/// Zero point `i` of x (one value) or of w (one value or one per output
/// channel), shaped to broadcast against the operand of rank `rank`.
Value convParam(Ops &b, size_t i, StringRef what, int64_t rank, int64_t channels) {
  Value p = b.n.input(i);
  if (!p)
    return {};
  auto t = cast<RankedTensorType>(p.getType());
  if (t.hasStaticShape() && t.getNumElements() == 1)
    return t.getRank() == 0 ? p : b.reshape(p, {});
  if (channels > 0 && t.getRank() == 1 && t.getDimSize(0) == channels) {
    SmallVector<int64_t> shape(rank, 1);
    shape[0] = channels;
    return b.reshape(p, shape);
  }
  b.n.error() << "input '" << what << "' must hold one value"
              << (channels > 0 ? " or one per output channel (" + std::to_string(channels) + ")"
                               : std::string())
              << ", got " << t;
  return {};
}

LogicalResult importConvInteger(NodeImporter &n) {
  FailureOr<ConvOperands> c = readConvOperands(n, 0, 1);
  if (failed(c) || failed(checkZeroPoint(n, 2, "x_zero_point", c->xt.getElementType())) ||
      failed(checkZeroPoint(n, 3, "w_zero_point", c->wt.getElementType())))
    return failure();
  Ops b{n};
  int64_t rank = c->xt.getRank(), m = c->wt.getDimSize(0);
  Value xz = convParam(b, 2, "x_zero_point", rank, 0);
  Value wz = convParam(b, 3, "w_zero_point", rank, m);
  if ((n.input(2) && !xz) || (n.input(3) && !wz))
    return failure();
  int64_t terms = c->wt.getNumElements() / m;
  Value y = integerConv(b, centered(b, n.input(0), xz), centered(b, n.input(1), wz), c->xt, c->wt,
                        c->window);
  y = toInt32(b, y, terms);
  return y ? n.setResults(y) : failure();
}

LogicalResult importQLinearConv(NodeImporter &n) {
  // x, x_scale, x_zero_point, w, w_scale, w_zero_point, y_scale, y_zero_point, B.
  FailureOr<ConvOperands> c = readConvOperands(n, 0, 3);
  if (failed(c))
    return failure();
  for (size_t i : {2, 5, 7})
    if (!n.input(i))
      return n.error() << "missing input " << i << " (zero points are required)";
  if (failed(checkZeroPoint(n, 2, "x_zero_point", c->xt.getElementType())) ||
      failed(checkZeroPoint(n, 5, "w_zero_point", c->wt.getElementType())) ||
      failed(checkScale(n, 1, "x_scale")) || failed(checkScale(n, 4, "w_scale")) ||
      failed(checkScale(n, 6, "y_scale")))
    return failure();
  auto yz = cast<RankedTensorType>(n.inputType(7));
  if (!isInt8(yz.getElementType()))
    return n.error() << "input 'y_zero_point' must be int8 or uint8, got " << yz;
  Ops b{n};
  int64_t rank = c->xt.getRank(), m = c->wt.getDimSize(0);
  Value xz = convParam(b, 2, "x_zero_point", rank, 0);
  Value wz = convParam(b, 5, "w_zero_point", rank, m);
  Value xs = convParam(b, 1, "x_scale", rank, 0);
  Value ws = convParam(b, 4, "w_scale", rank - 1, m); // [M, 1...] against [N, M, out...]
  Value ys = convParam(b, 6, "y_scale", rank, 0);
  Value yzp = convParam(b, 7, "y_zero_point", rank, 0);
  if (!xz || !wz || !xs || !ws || !ys || !yzp)
    return failure();
  Value acc = integerConv(b, centered(b, n.input(0), xz), centered(b, n.input(3), wz), c->xt, c->wt,
                          c->window);
  if (Value bias = n.input(8)) {
    auto bt = dyn_cast<RankedTensorType>(bias.getType());
    if (!bt || !bt.getElementType().isInteger(32) || bt.getShape() != ArrayRef<int64_t>{m})
      return n.error() << "input 'B' must be an int32 vector of " << m << " entries, got "
                       << bias.getType();
    SmallVector<int64_t> shape(rank - 1, 1);
    shape[0] = m;
    acc = b.op<graph::AddOp>({acc, b.reshape(b.cast(bias, b.f64()), shape)});
  }
  Value multiplier = b.op<graph::DivOp>({b.op<graph::MulOp>({xs, ws}), ys});
  Value y = requantize(b, acc, c->wt.getNumElements() / m, multiplier, yzp);
  return y ? n.setResults(y) : failure();
}

} // namespace

void strait::onnximport::registerQuantizedImporters(OpRegistry &r) {
  r.add("DynamicQuantizeLinear", 11, importDynamicQuantizeLinear);
  r.add("MatMulInteger", 10, importMatMulInteger);
  r.add("QLinearMatMul", 10, importQLinearMatMul);
  r.add("QLinearMatMul", 21, importQLinearMatMul); // 21 adds float8 and 16-bit scales
  r.add("ConvInteger", 10, importConvInteger);
  r.add("QLinearConv", 10, importQLinearConv);
}
