//===- GraphTensorOps.cpp - Inference of data-movement and shape ops ------===//

#include "InferHelpers.h"

using namespace mlir;
using namespace strait::graph;
using namespace strait::graph::detail;

static constexpr int64_t kDyn = ShapedType::kDynamic;

STRAIT_INFER(ConstantOp) {
  types.push_back(adaptor.getValue().getType());
  return success();
}

LogicalResult VariableOp::verify() {
  auto type = dyn_cast<RankedTensorType>(getType());
  if (!type || !type.hasStaticShape())
    return emitOpError("variable type must be a statically shaped tensor, got ")
           << getType();
  if (std::optional<ElementsAttr> v = getValue(); v && v->getType() != type)
    return emitOpError("initial value of type ")
           << v->getType() << " does not match the variable type " << type;
  return success();
}

LogicalResult ReadVariableOp::verifySymbolUses(SymbolTableCollection &symbols) {
  auto var = symbols.lookupNearestSymbolFrom<VariableOp>(*this, getVariableAttr());
  if (!var)
    return emitOpError("'") << getVariable() << "' is not a graph.Variable";
  if (var.getType() != getValue().getType())
    return emitOpError("result type ")
           << getValue().getType() << " differs from the variable's " << var.getType();
  return success();
}

STRAIT_INFER(ReshapeOp) {
  TensorType x = tensorOf(adaptor.getData());
  if (!x.hasRank()) {
    bool usesInput = llvm::is_contained(adaptor.getShape(), 0) ||
                     llvm::is_contained(adaptor.getShape(), -1);
    if (usesInput && !adaptor.getAllowzero()) {
      Shape s(adaptor.getShape().size(), kDyn);
      return pushTensor(types, ArrayRef<int64_t>(s), x.getElementType());
    }
  }
  FailureOr<Shape> s = reshapeShape(loc, x.hasRank() ? x.getShape() : ArrayRef<int64_t>(),
                                    adaptor.getShape(), adaptor.getAllowzero() != 0);
  if (failed(s))
    return failure();
  return pushTensor(types, ArrayRef<int64_t>(*s), x.getElementType());
}

STRAIT_INFER(TransposeOp) {
  TensorType x = tensorOf(adaptor.getData());
  ArrayRef<int64_t> perm = adaptor.getPerm();
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  if ((int64_t)perm.size() != x.getRank())
    return emitOptionalError(loc, "Transpose: perm has ", perm.size(),
                             " entries for rank ", x.getRank());
  SmallVector<bool> seen(perm.size(), false);
  Shape out;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.getRank() || seen[p])
      return emitOptionalError(loc, "Transpose: perm is not a permutation");
    seen[p] = true;
    out.push_back(x.getDimSize(p));
  }
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(FlattenOp) {
  TensorType x = tensorOf(adaptor.getInput());
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  int64_t axis = adaptor.getAxis();
  if (axis < 0)
    axis += x.getRank();
  if (axis < 0 || axis > x.getRank())
    return emitOptionalError(loc, "Flatten: axis ", (int64_t)adaptor.getAxis(),
                             " out of range for rank ", x.getRank());
  auto prod = [](ArrayRef<int64_t> s) {
    std::optional<int64_t> n = numElements(s);
    return n ? *n : kDyn;
  };
  Shape out{prod(x.getShape().take_front(axis)), prod(x.getShape().drop_front(axis))};
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(SqueezeOp) {
  TensorType x = tensorOf(adaptor.getData());
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  SmallVector<bool> drop(x.getRank(), adaptor.getAxes().empty());
  for (int64_t a : adaptor.getAxes()) {
    FailureOr<int64_t> n = normalizeAxis(loc, a, x.getRank(), "Squeeze axis");
    if (failed(n))
      return failure();
    if (x.getDimSize(*n) != 1 && x.getDimSize(*n) != kDyn)
      return emitOptionalError(loc, "Squeeze: dimension ", *n, " has size ",
                               x.getDimSize(*n), ", not 1");
    drop[*n] = true;
  }
  Shape out;
  for (int64_t i = 0; i < x.getRank(); ++i) {
    bool squeeze = drop[i] && (!adaptor.getAxes().empty() || x.getDimSize(i) == 1);
    if (!squeeze)
      out.push_back(x.getDimSize(i));
  }
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(UnsqueezeOp) {
  TensorType x = tensorOf(adaptor.getData());
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  int64_t rank = x.getRank() + adaptor.getAxes().size();
  SmallVector<bool> insert(rank, false);
  for (int64_t a : adaptor.getAxes()) {
    FailureOr<int64_t> n = normalizeAxis(loc, a, rank, "Unsqueeze axis");
    if (failed(n))
      return failure();
    if (insert[*n])
      return emitOptionalError(loc, "Unsqueeze: axis ", *n, " repeated");
    insert[*n] = true;
  }
  Shape out;
  auto in = x.getShape().begin();
  for (int64_t i = 0; i < rank; ++i)
    out.push_back(insert[i] ? 1 : *in++);
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(ConcatOp) {
  if (adaptor.getInputs().empty())
    return emitOptionalError(loc, "Concat needs at least one input");
  TensorType first = tensorOf(adaptor.getInputs().front());
  Type elt = first.getElementType();
  std::optional<Shape> out;
  int64_t axis = 0;
  for (Value v : adaptor.getInputs()) {
    TensorType t = tensorOf(v);
    if (t.getElementType() != elt)
      return emitOptionalError(loc, "Concat: element types differ");
    if (!t.hasRank())
      return pushTensor(types, std::nullopt, elt);
    if (!out) {
      FailureOr<int64_t> n = normalizeAxis(loc, adaptor.getAxis(), t.getRank());
      if (failed(n))
        return failure();
      axis = *n;
      out = Shape(t.getShape());
      continue;
    }
    if (t.getRank() != (int64_t)out->size())
      return emitOptionalError(loc, "Concat: inputs have different ranks");
    for (int64_t i = 0; i < t.getRank(); ++i) {
      int64_t &o = (*out)[i];
      int64_t d = t.getDimSize(i);
      if (i == axis)
        o = (o == kDyn || d == kDyn) ? kDyn : o + d;
      else if (o != kDyn && d != kDyn && o != d)
        return emitOptionalError(loc, "Concat: dimension ", i, " differs (", o,
                                 " vs ", d, ")");
      else if (o == kDyn)
        o = d;
    }
  }
  return pushTensor(types, ArrayRef<int64_t>(*out), elt);
}

STRAIT_INFER(SplitOp) {
  TensorType x = tensorOf(adaptor.getInput());
  ArrayRef<int64_t> split = adaptor.getSplit();
  if (split.empty())
    return emitOptionalError(loc, "Split: split sizes are empty");
  if (!x.hasRank()) {
    for (size_t i = 0; i < split.size(); ++i)
      pushTensor(types, std::nullopt, x.getElementType());
    return success();
  }
  FailureOr<int64_t> axis = normalizeAxis(loc, adaptor.getAxis(), x.getRank());
  if (failed(axis))
    return failure();
  int64_t total = 0;
  for (int64_t s : split) {
    if (s < 0)
      return emitOptionalError(loc, "Split: negative size ", s);
    total += s;
  }
  int64_t d = x.getDimSize(*axis);
  if (d != kDyn && d != total)
    return emitOptionalError(loc, "Split: sizes sum to ", total, " but the axis has ", d);
  for (int64_t s : split) {
    Shape out(x.getShape());
    out[*axis] = s;
    pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
  }
  return success();
}

STRAIT_INFER(SliceOp) {
  TensorType x = tensorOf(adaptor.getData());
  ArrayRef<int64_t> starts = adaptor.getStarts(), ends = adaptor.getEnds(),
                    axes = adaptor.getAxes(), steps = adaptor.getSteps();
  if (starts.size() != ends.size() || axes.size() != starts.size() ||
      steps.size() != starts.size())
    return emitOptionalError(loc, "Slice: starts, ends, axes and steps differ in length");
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  Shape out(x.getShape());
  SmallVector<bool> seen(x.getRank(), false);
  for (size_t i = 0; i < axes.size(); ++i) {
    FailureOr<int64_t> a = normalizeAxis(loc, axes[i], x.getRank(), "Slice axis");
    if (failed(a))
      return failure();
    if (seen[*a])
      return emitOptionalError(loc, "Slice: axis ", *a, " repeated");
    seen[*a] = true;
    if (steps[i] == 0)
      return emitOptionalError(loc, "Slice: step must not be 0");
    if (out[*a] != kDyn)
      out[*a] = clampSlice(out[*a], starts[i], ends[i], steps[i]).size;
  }
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(GatherOp) {
  TensorType x = tensorOf(adaptor.getData()), idx = tensorOf(adaptor.getIndices());
  if (!isa<IntegerType>(idx.getElementType()))
    return emitOptionalError(loc, "Gather: indices must be integers");
  if (!x.hasRank() || !idx.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  FailureOr<int64_t> axis = normalizeAxis(loc, adaptor.getAxis(), x.getRank());
  if (failed(axis))
    return failure();
  Shape out(x.getShape().take_front(*axis));
  out.append(idx.getShape().begin(), idx.getShape().end());
  out.append(x.getShape().begin() + *axis + 1, x.getShape().end());
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(GatherElementsOp) {
  TensorType x = tensorOf(adaptor.getData()), idx = tensorOf(adaptor.getIndices());
  if (x.hasRank() && idx.hasRank()) {
    if (x.getRank() != idx.getRank())
      return emitOptionalError(loc, "GatherElements: data and indices ranks differ");
    if (failed(normalizeAxis(loc, adaptor.getAxis(), x.getRank())))
      return failure();
  }
  return pushTensor(types, idx.hasRank() ? std::optional(idx.getShape()) : std::nullopt,
                    x.getElementType());
}

STRAIT_INFER(GatherNDOp) {
  TensorType x = tensorOf(adaptor.getData()), idx = tensorOf(adaptor.getIndices());
  if (!x.hasRank() || !idx.hasRank() || idx.getShape().back() == kDyn)
    return pushTensor(types, std::nullopt, x.getElementType());
  int64_t b = adaptor.getBatchDims(), last = idx.getShape().back();
  if (b < 0 || b >= idx.getRank() || b + last > x.getRank())
    return emitOptionalError(loc, "GatherND: batch_dims ", b, " and index depth ",
                             last, " do not fit data rank ", x.getRank());
  Shape out(idx.getShape().drop_back());
  out.append(x.getShape().begin() + b + last, x.getShape().end());
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(ExpandOp) {
  TensorType x = tensorOf(adaptor.getInput());
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  FailureOr<Shape> s = broadcastShapes(loc, {x.getShape(), adaptor.getShape()});
  if (failed(s))
    return failure();
  return pushTensor(types, ArrayRef<int64_t>(*s), x.getElementType());
}

STRAIT_INFER(TileOp) {
  TensorType x = tensorOf(adaptor.getInput());
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  if ((int64_t)adaptor.getRepeats().size() != x.getRank())
    return emitOptionalError(loc, "Tile: repeats has ", adaptor.getRepeats().size(),
                             " entries for rank ", x.getRank());
  Shape out;
  for (auto [d, r] : llvm::zip(x.getShape(), adaptor.getRepeats())) {
    if (r < 0)
      return emitOptionalError(loc, "Tile: negative repeat");
    out.push_back(d == kDyn ? kDyn : d * r);
  }
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(PadOp) {
  TensorType x = tensorOf(adaptor.getData());
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  ArrayRef<int64_t> pads = adaptor.getPads();
  if ((int64_t)pads.size() != 2 * x.getRank())
    return emitOptionalError(loc, "Pad: pads has ", pads.size(), " entries for rank ",
                             x.getRank());
  Shape out;
  for (int64_t i = 0; i < x.getRank(); ++i) {
    int64_t d = x.getDimSize(i);
    int64_t n = d == kDyn ? kDyn : d + pads[i] + pads[i + x.getRank()];
    if (n != kDyn && n < 0)
      return emitOptionalError(loc, "Pad: dimension ", i, " becomes negative");
    out.push_back(n);
  }
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

/// [start, end) of Shape's slice of a rank-`rank` shape.
static std::pair<int64_t, int64_t> shapeRange(int64_t rank, int64_t start,
                                              std::optional<int64_t> end) {
  auto norm = [rank](int64_t v) {
    if (v < 0)
      v += rank;
    return std::min(std::max<int64_t>(v, 0), rank);
  };
  return {norm(start), norm(end.value_or(rank))};
}

STRAIT_INFER(ShapeOp) {
  TensorType x = tensorOf(adaptor.getData());
  auto i64 = IntegerType::get(ctx, 64);
  if (!x.hasRank())
    return pushTensor(types, ArrayRef<int64_t>{kDyn}, i64);
  auto [b, e] = shapeRange(x.getRank(), adaptor.getStart(), adaptor.getEnd());
  return pushTensor(types, ArrayRef<int64_t>{std::max<int64_t>(e - b, 0)}, i64);
}

STRAIT_INFER(SizeOp) {
  return pushTensor(types, ArrayRef<int64_t>{}, IntegerType::get(ctx, 64));
}

STRAIT_INFER(OneHotOp) {
  TensorType idx = tensorOf(adaptor.getIndices()), vals = tensorOf(adaptor.getValues());
  if (vals.hasRank() && vals.getNumElements() != 2)
    return emitOptionalError(loc, "OneHot: values must hold [off, on]");
  if (adaptor.getDepth() <= 0)
    return emitOptionalError(loc, "OneHot: depth must be positive");
  if (!idx.hasRank())
    return pushTensor(types, std::nullopt, vals.getElementType());
  FailureOr<int64_t> axis = normalizeAxis(loc, adaptor.getAxis(), idx.getRank() + 1);
  if (failed(axis))
    return failure();
  Shape out(idx.getShape());
  out.insert(out.begin() + *axis, adaptor.getDepth());
  return pushTensor(types, ArrayRef<int64_t>(out), vals.getElementType());
}

STRAIT_INFER(TopKOp) {
  TensorType x = tensorOf(adaptor.getX());
  auto i64 = IntegerType::get(ctx, 64);
  if (!x.hasRank()) {
    pushTensor(types, std::nullopt, x.getElementType());
    return pushTensor(types, std::nullopt, i64);
  }
  FailureOr<int64_t> axis = normalizeAxis(loc, adaptor.getAxis(), x.getRank());
  if (failed(axis))
    return failure();
  int64_t k = adaptor.getK(), d = x.getDimSize(*axis);
  if (k < 0 || (d != kDyn && k > d))
    return emitOptionalError(loc, "TopK: k = ", k, " exceeds the axis size ", d);
  Shape out(x.getShape());
  out[*axis] = k;
  pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
  return pushTensor(types, ArrayRef<int64_t>(out), i64);
}

STRAIT_INFER(ResizeOp) {
  TensorType x = tensorOf(adaptor.getX());
  ArrayRef<int64_t> sizes = adaptor.getSizes();
  if (x.hasRank() && (int64_t)sizes.size() != x.getRank())
    return emitOptionalError(loc, "Resize: sizes has ", sizes.size(),
                             " entries for rank ", x.getRank());
  if (!adaptor.getScales().empty() && adaptor.getScales().size() != sizes.size())
    return emitOptionalError(loc, "Resize: scales and sizes differ in length");
  return pushTensor(types, sizes, x.getElementType());
}

template <typename Adaptor>
static LogicalResult inferBlocks(OptLoc loc, StringRef op, Adaptor adaptor,
                                 bool toSpace, SmallVectorImpl<Type> &types) {
  TensorType x = tensorOf(adaptor.getInput());
  int64_t b = adaptor.getBlocksize();
  if (b <= 0)
    return emitOptionalError(loc, op, ": blocksize must be positive");
  if (!x.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  if (x.getRank() != 4)
    return emitOptionalError(loc, op, ": input must be 4-D NCHW");
  auto mul = [](int64_t d, int64_t f) { return d == kDyn ? kDyn : d * f; };
  auto div = [](int64_t d, int64_t f) { return d == kDyn ? kDyn : d / f; };
  int64_t c = x.getDimSize(1);
  if (toSpace && c != kDyn && c % (b * b) != 0)
    return emitOptionalError(loc, op, ": ", c, " channels not divisible by ", b * b);
  Shape out{x.getDimSize(0),
            toSpace ? div(c, b * b) : mul(c, b * b),
            toSpace ? mul(x.getDimSize(2), b) : div(x.getDimSize(2), b),
            toSpace ? mul(x.getDimSize(3), b) : div(x.getDimSize(3), b)};
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}

STRAIT_INFER(DepthToSpaceOp) {
  return inferBlocks(loc, "DepthToSpace", adaptor, true, types);
}
STRAIT_INFER(SpaceToDepthOp) {
  return inferBlocks(loc, "SpaceToDepth", adaptor, false, types);
}

STRAIT_INFER(GridSampleOp) {
  TensorType x = tensorOf(adaptor.getX()), g = tensorOf(adaptor.getGrid());
  if (!x.hasRank() || !g.hasRank())
    return pushTensor(types, std::nullopt, x.getElementType());
  int64_t r = x.getRank() - 2;
  if (r < 1 || g.getRank() != r + 2 ||
      (!g.isDynamicDim(r + 1) && g.getDimSize(r + 1) != r))
    return emitOptionalError(loc, "GridSample: X ", x, " and grid ", g,
                             " must be N x C x D1..Dr and N x H1..Hr x r");
  if (x.getElementType() != g.getElementType())
    return emitOptionalError(loc, "GridSample: X and grid element types differ");
  Shape out{x.getDimSize(0), x.getDimSize(1)};
  for (int64_t i = 0; i < r; ++i)
    out.push_back(g.getDimSize(i + 1));
  return pushTensor(types, ArrayRef<int64_t>(out), x.getElementType());
}
