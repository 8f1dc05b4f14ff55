//===- ImportTensor.cpp - Constants, shape and data-movement ONNX ops -----===//

#include "NodeImporter.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/SymbolTable.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// Rank of input i, or a diagnostic.
FailureOr<int64_t> rankOf(NodeImporter &n, size_t i) {
  auto t = dyn_cast_or_null<RankedTensorType>(n.inputType(i));
  if (!t)
    return n.error() << "input " << i << " must have a known rank";
  return t.getRank();
}

/// Axes from attribute `name` (older opsets) or from constant input `index`.
FailureOr<SmallVector<int64_t>> axesFrom(NodeImporter &n, StringRef name, size_t index) {
  if (n.input(index))
    return n.constantInts(index, name);
  return n.getInts(name);
}

LogicalResult importConstant(NodeImporter &n) {
  if (failed(n.checkAttributes({"value", "value_float", "value_floats", "value_int",
                                "value_ints"})))
    return failure();
  if (n.proto().attribute_size() != 1)
    return n.error() << "must have exactly one value attribute";
  Builder &b = n.b();
  const onnx::AttributeProto &a = n.proto().attribute(0);
  DenseElementsAttr value;
  if (a.name() == "value") {
    FailureOr<DenseElementsAttr> t = n.getTensor("value");
    if (failed(t))
      return failure();
    value = *t;
  } else if (a.name() == "value_float") {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getF32Type()), a.f());
  } else if (a.name() == "value_int") {
    value = DenseElementsAttr::get(RankedTensorType::get({}, b.getI64Type()),
                                   static_cast<int64_t>(a.i()));
  } else if (a.name() == "value_floats") {
    SmallVector<float> v(a.floats().begin(), a.floats().end());
    value = DenseElementsAttr::get(RankedTensorType::get({(int64_t)v.size()}, b.getF32Type()),
                                   ArrayRef<float>(v));
  } else {
    SmallVector<int64_t> v(a.ints().begin(), a.ints().end());
    value = DenseElementsAttr::get(RankedTensorType::get({(int64_t)v.size()}, b.getI64Type()),
                                   ArrayRef<int64_t>(v));
  }
  return n.setResults(n.constant(value));
}

LogicalResult importConstantOfShape(NodeImporter &n) {
  FailureOr<SmallVector<int64_t>> shape = n.constantInts(0, "input");
  FailureOr<DenseElementsAttr> v = n.getTensor("value");
  if (failed(shape) || failed(v))
    return failure();
  for (int64_t d : *shape)
    if (d < 0)
      return n.error() << "negative dimension " << d << " in the shape";
  if (*v && (*v).getNumElements() != 1)
    return n.error() << "'value' must hold one element";
  Attribute elem = *v ? (*v).getValues<Attribute>()[0]
                      : Attribute(n.b().getF32FloatAttr(0.0f));
  auto type = RankedTensorType::get(*shape, cast<TypedAttr>(elem).getType());
  return n.setResults(n.constant(SplatElementsAttr::get(type, elem)));
}

LogicalResult importRange(NodeImporter &n) {
  FailureOr<DenseElementsAttr> s = n.constantInput(0, "start"),
                               l = n.constantInput(1, "limit"),
                               d = n.constantInput(2, "delta");
  if (failed(s) || failed(l) || failed(d))
    return failure();
  Type elt = s->getElementType();
  if (isa<FloatType>(elt)) {
    double a = (*s->getValues<APFloat>().begin()).convertToDouble();
    double b = (*l->getValues<APFloat>().begin()).convertToDouble();
    double c = (*d->getValues<APFloat>().begin()).convertToDouble();
    if (c == 0)
      return n.error() << "delta must not be 0";
    int64_t count = std::max<int64_t>((int64_t)std::ceil((b - a) / c), 0);
    if (count > (1 << 26))
      return n.error() << "range of " << count << " elements is too large";
    SmallVector<APFloat> out;
    for (int64_t i = 0; i < count; ++i) {
      APFloat v(a + i * c);
      bool lost;
      v.convert(cast<FloatType>(elt).getFloatSemantics(), APFloat::rmNearestTiesToEven, &lost);
      out.push_back(v);
    }
    return n.setResults(n.constant(DenseElementsAttr::get(RankedTensorType::get({count}, elt), out)));
  }
  int64_t a = (*s->getValues<APInt>().begin()).getSExtValue();
  int64_t b = (*l->getValues<APInt>().begin()).getSExtValue();
  int64_t c = (*d->getValues<APInt>().begin()).getSExtValue();
  if (c == 0)
    return n.error() << "delta must not be 0";
  int64_t count = std::max<int64_t>((b - a + c + (c > 0 ? -1 : 1)) / c, 0);
  if (count > (1 << 26))
    return n.error() << "range of " << count << " elements is too large";
  unsigned width = elt.getIntOrFloatBitWidth();
  SmallVector<APInt> out;
  for (int64_t i = 0; i < count; ++i)
    out.push_back(APInt(width, a + i * c, /*isSigned=*/true));
  return n.setResults(n.constant(DenseElementsAttr::get(RankedTensorType::get({count}, elt), out)));
}

LogicalResult importReshape(NodeImporter &n) {
  if (failed(n.checkAttributes({"allowzero", "shape"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> allowzero = n.getInt("allowzero", 0);
  FailureOr<SmallVector<int64_t>> shape =
      n.opsetVersion() < 5 ? n.getInts("shape") : n.constantInts(1, "shape");
  if (failed(x) || failed(allowzero) || failed(shape))
    return failure();
  return emit<graph::ReshapeOp>(n, *x, {n.named("shape", n.i64s(*shape)),
                                        n.named("allowzero", n.i64(*allowzero))});
}

LogicalResult importTranspose(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> rank = rankOf(n, 0);
  if (failed(x) || failed(rank))
    return failure();
  SmallVector<int64_t> reversed;
  for (int64_t i = *rank - 1; i >= 0; --i)
    reversed.push_back(i);
  FailureOr<SmallVector<int64_t>> perm = n.getInts("perm", reversed);
  if (failed(perm))
    return failure();
  return emit<graph::TransposeOp>(n, *x, {n.named("perm", n.i64s(*perm))});
}

LogicalResult importFlatten(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> axis = n.getInt("axis", 1);
  if (failed(x) || failed(axis))
    return failure();
  return emit<graph::FlattenOp>(n, *x, {n.named("axis", n.i64(*axis))});
}

template <typename OpTy>
LogicalResult importSqueezeLike(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<SmallVector<int64_t>> axes = axesFrom(n, "axes", 1);
  if (failed(x) || failed(axes))
    return failure();
  return emit<OpTy>(n, *x, {n.named("axes", n.i64s(*axes))});
}

LogicalResult importConcat(NodeImporter &n) {
  FailureOr<std::optional<int64_t>> axis = n.getOptionalInt("axis");
  if (failed(axis))
    return failure();
  if (!*axis)
    return n.error() << "missing attribute 'axis'";
  SmallVector<Value> in;
  for (size_t i = 0; i < n.numInputs(); ++i)
    if (Value v = n.input(i))
      in.push_back(v);
  return emit<graph::ConcatOp>(n, in, {n.named("axis", n.i64(**axis))});
}

LogicalResult importSplit(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> axis = n.getInt("axis", 0);
  FailureOr<SmallVector<int64_t>> split = axesFrom(n, "split", 1);
  FailureOr<std::optional<int64_t>> numOutputs = n.getOptionalInt("num_outputs");
  if (failed(x) || failed(axis) || failed(split) || failed(numOutputs))
    return failure();
  if (split->empty()) {
    auto t = dyn_cast<RankedTensorType>(n.inputType(0));
    int64_t parts = numOutputs->value_or(n.proto().output_size());
    if (!t || parts <= 0)
      return n.error() << "needs a known input shape to split equally";
    FailureOr<int64_t> a = graph::normalizeAxis(n.location(), *axis, t.getRank());
    if (failed(a) || t.isDynamicDim(*a))
      return failure();
    int64_t d = t.getDimSize(*a), chunk = (d + parts - 1) / parts;
    for (int64_t i = 0; i < parts; ++i)
      split->push_back(std::min(chunk, d - i * chunk));
  }
  return emit<graph::SplitOp>(n, *x, {n.named("axis", n.i64(*axis)),
                                      n.named("split", n.i64s(*split))});
}

LogicalResult importSlice(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> rank = rankOf(n, 0);
  if (failed(x) || failed(rank))
    return failure();
  bool legacy = n.opsetVersion() < 10;
  FailureOr<SmallVector<int64_t>> starts =
      legacy ? n.getInts("starts") : n.constantInts(1, "starts");
  FailureOr<SmallVector<int64_t>> ends = legacy ? n.getInts("ends") : n.constantInts(2, "ends");
  FailureOr<SmallVector<int64_t>> axes = legacy ? n.getInts("axes") : axesFrom(n, "axes", 3);
  if (failed(starts) || failed(ends) || failed(axes))
    return failure();
  SmallVector<int64_t> steps(starts->size(), 1);
  if (!legacy && n.input(4)) {
    FailureOr<SmallVector<int64_t>> s = n.constantInts(4, "steps");
    if (failed(s))
      return failure();
    steps = *s;
  }
  if (axes->empty())
    for (size_t i = 0; i < starts->size(); ++i)
      axes->push_back(i);
  for (int64_t &a : *axes)
    if (a < 0)
      a += *rank;
  return emit<graph::SliceOp>(n, *x,
                              {n.named("starts", n.i64s(*starts)), n.named("ends", n.i64s(*ends)),
                               n.named("axes", n.i64s(*axes)), n.named("steps", n.i64s(steps))});
}

template <typename OpTy>
LogicalResult importGatherLike(NodeImporter &n, StringRef attrName) {
  FailureOr<Value> x = n.requiredInput(0), idx = n.requiredInput(1);
  FailureOr<int64_t> a = n.getInt(attrName, 0);
  if (failed(x) || failed(idx) || failed(a))
    return failure();
  return emit<OpTy>(n, {*x, *idx}, {n.named(attrName, n.i64(*a))});
}

template <typename OpTy>
LogicalResult importScatter(NodeImporter &n, bool hasAxis) {
  FailureOr<Value> x = n.requiredInput(0), idx = n.requiredInput(1), u = n.requiredInput(2);
  FailureOr<int64_t> axis = n.getInt("axis", 0);
  FailureOr<std::string> red = n.getString("reduction", "none");
  if (failed(x) || failed(idx) || failed(u) || failed(axis) || failed(red))
    return failure();
  std::optional<graph::ScatterReduction> kind = graph::symbolizeScatterReduction(*red);
  if (!kind)
    return n.error() << "unknown reduction '" << *red << "'";
  SmallVector<NamedAttribute> attrs = {
      n.named("reduction", graph::ScatterReductionAttr::get(n.ctx(), *kind))};
  if (hasAxis)
    attrs.push_back(n.named("axis", n.i64(*axis)));
  return emit<OpTy>(n, {*x, *idx, *u}, attrs);
}

LogicalResult importExpand(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<SmallVector<int64_t>> shape = n.constantInts(1, "shape");
  if (failed(x) || failed(shape))
    return failure();
  return emit<graph::ExpandOp>(n, *x, {n.named("shape", n.i64s(*shape))});
}

LogicalResult importTile(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<SmallVector<int64_t>> reps = n.constantInts(1, "repeats");
  if (failed(x) || failed(reps))
    return failure();
  return emit<graph::TileOp>(n, *x, {n.named("repeats", n.i64s(*reps))});
}

LogicalResult importPad(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> rank = rankOf(n, 0);
  FailureOr<std::string> mode = n.getString("mode", "constant");
  if (failed(x) || failed(rank) || failed(mode))
    return failure();
  std::optional<graph::PadMode> kind = graph::symbolizePadMode(*mode);
  if (!kind)
    return n.error() << "unknown mode '" << *mode << "'";
  SmallVector<int64_t> pads;
  double value = 0.0;
  if (n.opsetVersion() < 11) {
    FailureOr<SmallVector<int64_t>> p = n.getInts("pads");
    FailureOr<float> v = n.getFloat("value", 0.0f);
    if (failed(p) || failed(v))
      return failure();
    pads = *p;
    value = *v;
  } else {
    FailureOr<SmallVector<int64_t>> p = n.constantInts(1, "pads");
    if (failed(p))
      return failure();
    pads = *p;
    if (n.input(2)) {
      FailureOr<DenseElementsAttr> c = n.constantInput(2, "constant_value");
      if (failed(c))
        return failure();
      if (isa<FloatType>(c->getElementType()))
        value = (*c->getValues<APFloat>().begin()).convertToDouble();
      else
        value = (double)(*c->getValues<APInt>().begin()).getSExtValue();
    }
    if (n.input(3)) {
      // Pads given for a subset of axes: scatter them into a full list.
      FailureOr<SmallVector<int64_t>> axes = n.constantInts(3, "axes");
      if (failed(axes))
        return failure();
      if (pads.size() != 2 * axes->size())
        return n.error() << "pads must hold two entries per axis";
      SmallVector<int64_t> full(2 * *rank, 0);
      for (auto [i, a] : llvm::enumerate(*axes)) {
        int64_t ax = a < 0 ? a + *rank : a;
        if (ax < 0 || ax >= *rank)
          return n.error() << "axis " << a << " out of range";
        full[ax] = pads[i];
        full[ax + *rank] = pads[i + axes->size()];
      }
      pads = full;
    }
  }
  return emit<graph::PadOp>(n, *x, {n.named("pads", n.i64s(pads)),
                                    n.named("mode", graph::PadModeAttr::get(n.ctx(), *kind)),
                                    n.named("value", n.b().getF64FloatAttr(value))});
}

LogicalResult importShape(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> start = n.getInt("start", 0);
  FailureOr<std::optional<int64_t>> end = n.getOptionalInt("end");
  if (failed(x) || failed(start) || failed(end))
    return failure();
  SmallVector<NamedAttribute> attrs = {n.named("start", n.i64(*start))};
  if (*end)
    attrs.push_back(n.named("end", n.i64(**end)));
  return emit<graph::ShapeOp>(n, *x, attrs);
}

LogicalResult importSize(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  return failed(x) ? failure() : emit<graph::SizeOp>(n, *x);
}

LogicalResult importOneHot(NodeImporter &n) {
  FailureOr<Value> idx = n.requiredInput(0), vals = n.requiredInput(2);
  FailureOr<DenseElementsAttr> depth = n.constantInput(1, "depth");
  FailureOr<int64_t> axis = n.getInt("axis", -1);
  if (failed(idx) || failed(vals) || failed(depth) || failed(axis))
    return failure();
  int64_t d = isa<FloatType>(depth->getElementType())
                  ? (int64_t)(*depth->getValues<APFloat>().begin()).convertToDouble()
                  : (*depth->getValues<APInt>().begin()).getSExtValue();
  return emit<graph::OneHotOp>(n, {*idx, *vals},
                               {n.named("depth", n.i64(d)), n.named("axis", n.i64(*axis))});
}

LogicalResult importTrilu(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> upper = n.getInt("upper", 1);
  if (failed(x) || failed(upper))
    return failure();
  int64_t k = 0;
  if (n.input(1)) {
    FailureOr<SmallVector<int64_t>> kv = n.constantInts(1, "k");
    if (failed(kv) || kv->size() != 1)
      return failed(kv) ? failure() : (LogicalResult)(n.error() << "'k' must be a scalar");
    k = (*kv)[0];
  }
  return emit<graph::TriluOp>(n, *x, {n.named("k", n.i64(k)), n.named("upper", n.i64(*upper))});
}

LogicalResult importCumSum(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<SmallVector<int64_t>> axis = n.constantInts(1, "axis");
  FailureOr<int64_t> excl = n.getInt("exclusive", 0), rev = n.getInt("reverse", 0);
  if (failed(x) || failed(axis) || failed(excl) || failed(rev))
    return failure();
  if (axis->size() != 1)
    return n.error() << "'axis' must be a scalar";
  return emit<graph::CumSumOp>(n, *x, {n.named("axis", n.i64((*axis)[0])),
                                       n.named("exclusive", n.i64(*excl)),
                                       n.named("reverse", n.i64(*rev))});
}

LogicalResult importTopK(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> axis = n.getInt("axis", -1), largest = n.getInt("largest", 1),
                     sorted = n.getInt("sorted", 1);
  if (failed(x) || failed(axis) || failed(largest) || failed(sorted))
    return failure();
  int64_t k;
  if (n.opsetVersion() < 10) {
    FailureOr<int64_t> kv = n.getInt("k", -1);
    if (failed(kv))
      return failure();
    k = *kv;
  } else {
    FailureOr<SmallVector<int64_t>> kv = n.constantInts(1, "K");
    if (failed(kv) || kv->size() != 1)
      return failed(kv) ? failure() : (LogicalResult)(n.error() << "'K' must hold one value");
    k = (*kv)[0];
  }
  return emit<graph::TopKOp>(n, *x, {n.named("k", n.i64(k)), n.named("axis", n.i64(*axis)),
                                     n.named("largest", n.i64(*largest)),
                                     n.named("sorted", n.i64(*sorted))});
}

/// The initial f32 value of the variable that `v` reads, if it has one:
/// float initializers become variables, yet exporters also store Resize's
/// scales as initializers.
std::optional<SmallVector<float>> variableFloats(Value v) {
  auto read = v.getDefiningOp<graph::ReadVariableOp>();
  if (!read)
    return std::nullopt;
  auto var = SymbolTable::lookupNearestSymbolFrom<graph::VariableOp>(
      read, read.getVariableAttr());
  if (!var || !var.getValue())
    return std::nullopt;
  if (auto dense = dyn_cast<DenseElementsAttr>(*var.getValue())) {
    SmallVector<float> out;
    for (APFloat x : dense.getValues<APFloat>())
      out.push_back((float)x.convertToDouble());
    return out;
  }
  if (auto res = dyn_cast<DenseF32ResourceElementsAttr>(*var.getValue()))
    if (std::optional<ArrayRef<float>> data = res.tryGetAsArrayRef())
      return SmallVector<float>(*data);
  return std::nullopt;
}

/// Float values of constant input i (empty if absent or empty).
FailureOr<SmallVector<float>> floatsInput(NodeImporter &n, size_t i, StringRef what) {
  SmallVector<float> out;
  if (!n.input(i))
    return out;
  if (std::optional<SmallVector<float>> v = variableFloats(n.input(i)))
    return *v;
  FailureOr<DenseElementsAttr> c = n.constantInput(i, what);
  if (failed(c))
    return failure();
  for (APFloat v : c->getValues<APFloat>())
    out.push_back((float)v.convertToDouble());
  return out;
}

LogicalResult importResize(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  auto xt = dyn_cast_or_null<RankedTensorType>(n.inputType(0));
  if (failed(x) || !xt || !xt.hasStaticShape())
    return failed(x) ? failure() : (LogicalResult)(n.error() << "needs a static input shape");
  bool isUpsample = n.proto().op_type() == "Upsample";
  FailureOr<std::string> mode = n.getString("mode", "nearest");
  FailureOr<std::string> coord = n.getString(
      "coordinate_transformation_mode",
      isUpsample || n.opsetVersion() < 11 ? "asymmetric" : "half_pixel");
  FailureOr<std::string> nearest = n.getString(
      "nearest_mode", n.opsetVersion() < 11 ? "floor" : "round_prefer_floor");
  FailureOr<float> cubic = n.getFloat("cubic_coeff_a", -0.75f);
  FailureOr<int64_t> exclude = n.getInt("exclude_outside", 0);
  if (failed(mode) || failed(coord) || failed(nearest) || failed(cubic) || failed(exclude))
    return failure();
  if (n.attr("axes") || n.getInt("antialias", 0) != 0)
    return n.error() << "axes and antialias are not supported";
  SmallVector<float> scales;
  SmallVector<int64_t> sizes;
  if (isUpsample && n.opsetVersion() < 9) {
    FailureOr<SmallVector<float>> s = n.getFloats("scales");
    if (failed(s))
      return failure();
    scales = *s;
  } else {
    size_t scalesIdx = (isUpsample || n.opsetVersion() < 11) ? 1 : 2;
    FailureOr<SmallVector<float>> s = floatsInput(n, scalesIdx, "scales");
    if (failed(s))
      return failure();
    scales = *s;
    if (!isUpsample && n.opsetVersion() >= 11 && n.input(3)) {
      FailureOr<SmallVector<int64_t>> z = n.constantInts(3, "sizes");
      if (failed(z))
        return failure();
      sizes = *z;
    }
  }
  if (sizes.empty()) {
    if ((int64_t)scales.size() != xt.getRank())
      return n.error() << "needs one scale per dimension (" << xt.getRank() << ")";
    for (auto [d, s] : llvm::zip(xt.getShape(), scales))
      sizes.push_back((int64_t)std::floor(d * s));
  } else if (scales.empty()) {
    for (auto [d, s] : llvm::zip(xt.getShape(), sizes))
      scales.push_back((float)s / (float)d);
  }
  if (*mode == "bilinear" || *mode == "trilinear")
    *mode = "linear";
  // Same shape at scale 1: every output samples its own input pixel in every
  // mode (a cubic kernel weighs an integer offset 0, 1, 0, 0), so the node is
  // the identity. DINOv2's TorchScript export resizes the position embeddings
  // bicubically to the size they already have; the runtime has no cubic kernel.
  if (llvm::equal(sizes, xt.getShape()) &&
      llvm::all_of(scales, [](float s) { return s == 1.0f; }) &&
      *coord != "tf_crop_and_resize" && *coord != "half_pixel_symmetric")
    return n.setResults(*x);
  std::optional<graph::ResizeMode> m = graph::symbolizeResizeMode(*mode);
  std::optional<graph::CoordMode> c = graph::symbolizeCoordMode(*coord);
  std::optional<graph::NearestMode> nm = graph::symbolizeNearestMode(*nearest);
  if (!m || !c || !nm)
    return n.error() << "unsupported mode '" << *mode << "', coordinate mode '" << *coord
                     << "' or nearest mode '" << *nearest << "'";
  return emit<graph::ResizeOp>(
      n, *x,
      {n.named("sizes", n.i64s(sizes)), n.named("scales", n.b().getDenseF32ArrayAttr(scales)),
       n.named("mode", graph::ResizeModeAttr::get(n.ctx(), *m)),
       n.named("coordinate_transformation_mode", graph::CoordModeAttr::get(n.ctx(), *c)),
       n.named("nearest_mode", graph::NearestModeAttr::get(n.ctx(), *nm)),
       n.named("cubic_coeff_a", n.f32(*cubic)), n.named("exclude_outside", n.i64(*exclude))});
}

LogicalResult importDepthToSpace(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> bs = n.getInt("blocksize", 0);
  FailureOr<std::string> mode = n.getString("mode", "DCR");
  if (failed(x) || failed(bs) || failed(mode))
    return failure();
  std::optional<graph::DepthToSpaceMode> m = graph::symbolizeDepthToSpaceMode(*mode);
  if (!m)
    return n.error() << "unknown mode '" << *mode << "'";
  return emit<graph::DepthToSpaceOp>(
      n, *x, {n.named("blocksize", n.i64(*bs)),
              n.named("mode", graph::DepthToSpaceModeAttr::get(n.ctx(), *m))});
}

LogicalResult importSpaceToDepth(NodeImporter &n) {
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<int64_t> bs = n.getInt("blocksize", 0);
  if (failed(x) || failed(bs))
    return failure();
  return emit<graph::SpaceToDepthOp>(n, *x, {n.named("blocksize", n.i64(*bs))});
}

LogicalResult importEyeLike(NodeImporter &n) {
  auto t = dyn_cast_or_null<RankedTensorType>(n.inputType(0));
  FailureOr<int64_t> k = n.getInt("k", 0);
  FailureOr<std::optional<int64_t>> dtype = n.getOptionalInt("dtype");
  if (!t || !t.hasStaticShape() || t.getRank() != 2)
    return n.error() << "needs a static 2-D input";
  if (failed(k) || failed(dtype))
    return failure();
  Type elt = *dtype ? elementType(n.ctx(), **dtype) : t.getElementType();
  if (!elt)
    return n.error() << "unsupported dtype";
  auto type = RankedTensorType::get(t.getShape(), elt);
  SmallVector<Attribute> vals;
  for (int64_t i = 0; i < t.getDimSize(0); ++i)
    for (int64_t j = 0; j < t.getDimSize(1); ++j) {
      bool one = j - i == *k;
      vals.push_back(isa<FloatType>(elt) ? Attribute(FloatAttr::get(elt, one ? 1.0 : 0.0))
                                         : Attribute(IntegerAttr::get(elt, one ? 1 : 0)));
    }
  return n.setResults(n.constant(DenseElementsAttr::get(type, vals)));
}

LogicalResult importReverseSequence(NodeImporter &n) {
  if (failed(n.checkAttributes({"batch_axis", "time_axis"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), lens = n.requiredInput(1);
  FailureOr<int64_t> batch = n.getInt("batch_axis", 1), time = n.getInt("time_axis", 0);
  if (failed(x) || failed(lens) || failed(batch) || failed(time))
    return failure();
  if (!((*batch == 0 && *time == 1) || (*batch == 1 && *time == 0)))
    return n.error() << "batch_axis and time_axis must be 0 and 1 in some order";
  return emit<graph::ReverseSequenceOp>(
      n, {*x, *lens}, {n.named("batch_axis", n.i64(*batch)), n.named("time_axis", n.i64(*time))});
}

/// GridSample: opset 16 names the modes bilinear/bicubic, opset 20 linear/cubic.
LogicalResult importGridSample(NodeImporter &n) {
  if (failed(n.checkAttributes({"align_corners", "mode", "padding_mode"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), grid = n.requiredInput(1);
  FailureOr<int64_t> align = n.getInt("align_corners", 0);
  FailureOr<std::string> mode =
      n.getString("mode", n.opsetVersion() < 20 ? "bilinear" : "linear");
  FailureOr<std::string> padding = n.getString("padding_mode", "zeros");
  if (failed(x) || failed(grid) || failed(align) || failed(mode) || failed(padding))
    return failure();
  if (*mode == "bilinear")
    *mode = "linear";
  else if (*mode == "bicubic")
    *mode = "cubic";
  std::optional<graph::GridSampleMode> m = graph::symbolizeGridSampleMode(*mode);
  std::optional<graph::GridPaddingMode> p = graph::symbolizeGridPaddingMode(*padding);
  if (!m || !p)
    return n.error() << "unsupported mode '" << *mode << "' or padding_mode '" << *padding
                     << "'";
  return emit<graph::GridSampleOp>(
      n, {*x, *grid},
      {n.named("align_corners", n.i64(*align)),
       n.named("mode", graph::GridSampleModeAttr::get(n.ctx(), *m)),
       n.named("padding_mode", graph::GridPaddingModeAttr::get(n.ctx(), *p))});
}

/// Hann, Hamming and Blackman windows: generalized cosine windows
/// a0 - a1 cos(2 pi k / N) + a2 cos(4 pi k / N), folded to a constant
/// (N = size when periodic, size - 1 when symmetric).
LogicalResult importWindow(NodeImporter &n, double a0, double a1, double a2) {
  if (failed(n.checkAttributes({"output_datatype", "periodic"})))
    return failure();
  FailureOr<SmallVector<int64_t>> size = n.constantInts(0, "size");
  FailureOr<int64_t> periodic = n.getInt("periodic", 1);
  FailureOr<int64_t> dtype = n.getInt("output_datatype", onnx::TensorProto::FLOAT);
  if (failed(size) || failed(periodic) || failed(dtype))
    return failure();
  if (size->size() != 1 || (*size)[0] < 0 || (*size)[0] > (1 << 24))
    return n.error() << "'size' must be a scalar in [0, 2^24]";
  Type elt = elementType(n.ctx(), *dtype);
  if (!elt || !elt.isIntOrFloat())
    return n.error() << "unsupported output_datatype " << dataTypeName(*dtype);
  int64_t count = (*size)[0];
  double denom = *periodic ? count : count - 1;
  SmallVector<Attribute> values;
  for (int64_t k = 0; k < count; ++k) {
    double t = denom > 0 ? 2 * M_PI * k / denom : 0.0;
    double v = a0 - a1 * std::cos(t) + a2 * std::cos(2 * t);
    values.push_back(isa<FloatType>(elt) ? Attribute(FloatAttr::get(elt, v))
                                         : Attribute(IntegerAttr::get(elt, (int64_t)v)));
  }
  auto type = RankedTensorType::get({count}, elt);
  return n.setResults(n.constant(DenseElementsAttr::get(type, values)));
}

} // namespace

void strait::onnximport::registerTensorImporters(OpRegistry &r) {
  using namespace graph;
  r.add("Constant", 1, importConstant);
  r.add("ConstantOfShape", 9, importConstantOfShape);
  r.add("Range", 11, importRange);
  r.add("EyeLike", 9, importEyeLike);
  r.add("Reshape", 1, importReshape);
  r.add("Transpose", 1, importTranspose);
  r.add("Flatten", 1, importFlatten);
  r.add("Squeeze", 1, importSqueezeLike<SqueezeOp>);
  r.add("Unsqueeze", 1, importSqueezeLike<UnsqueezeOp>);
  r.add("Concat", 1, importConcat);
  r.add("Split", 1, importSplit);
  r.add("Slice", 1, importSlice);
  r.add("Gather", 1, [](NodeImporter &n) { return importGatherLike<GatherOp>(n, "axis"); });
  r.add("GatherElements", 11,
        [](NodeImporter &n) { return importGatherLike<GatherElementsOp>(n, "axis"); });
  r.add("GatherND", 11,
        [](NodeImporter &n) { return importGatherLike<GatherNDOp>(n, "batch_dims"); });
  r.add("Scatter", 9, [](NodeImporter &n) { return importScatter<ScatterElementsOp>(n, true); });
  r.add("ScatterElements", 11,
        [](NodeImporter &n) { return importScatter<ScatterElementsOp>(n, true); });
  r.add("ScatterND", 11, [](NodeImporter &n) { return importScatter<ScatterNDOp>(n, false); });
  r.add("Expand", 8, importExpand);
  r.add("Tile", 6, importTile);
  r.add("Pad", 2, importPad);
  r.add("Shape", 1, importShape);
  r.add("Size", 1, importSize);
  r.add("OneHot", 9, importOneHot);
  r.add("Trilu", 14, importTrilu);
  r.add("CumSum", 11, importCumSum);
  r.add("TopK", 1, importTopK);
  r.add("Resize", 10, importResize);
  r.add("Upsample", 7, importResize);
  r.add("DepthToSpace", 1, importDepthToSpace);
  r.add("SpaceToDepth", 1, importSpaceToDepth);
  r.add("ReverseSequence", 10, importReverseSequence);
  r.add("GridSample", 16, importGridSample);
  r.add("HannWindow", 17, [](NodeImporter &n) { return importWindow(n, 0.5, 0.5, 0.0); });
  r.add("HammingWindow", 17, [](NodeImporter &n) {
    return importWindow(n, 25.0 / 46.0, 21.0 / 46.0, 0.0);
  });
  r.add("BlackmanWindow", 17, [](NodeImporter &n) { return importWindow(n, 0.42, 0.5, 0.08); });
}
