//===- ImportDataDependent.cpp - Compress, NonZero, Unique of constants ---===//
//
// The output shapes of Compress and NonZero depend on the values of an
// input (the condition, the tensor searched). Graph tensors have static
// shapes, so these import only when that input is a constant: Compress
// becomes a Gather of the selected indices (after a Reshape to 1-D without
// an axis); NonZero and Unique are evaluated at import into constants. Otherwise the
// diagnostic names the input and says that the shape would be data-dependent.
//
//===----------------------------------------------------------------------===//

#include "NodeImporter.h"

#include "mlir/IR/Matchers.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// Input `i` as a constant, or a diagnostic saying that the output shape of
/// the node would depend on its values.
FailureOr<DenseElementsAttr> shapeDeterminingInput(NodeImporter &n, size_t i, StringRef what) {
  Value v = n.input(i);
  if (!v)
    return n.error() << "missing input '" << what << "'";
  DenseElementsAttr attr;
  if (!matchPattern(v, m_Constant(&attr)))
    return n.error() << "input '" << what << "' (" << n.proto().input(i)
                     << ") must be constant: the output shape would be data-dependent";
  return attr;
}

/// Whether each element of `attr` is non-zero (integers, floats, bools).
SmallVector<bool> nonZeroMask(DenseElementsAttr attr) {
  SmallVector<bool> mask;
  if (isa<FloatType>(attr.getElementType()))
    for (const APFloat &v : attr.getValues<APFloat>())
      mask.push_back(!v.isZero());
  else
    for (const APInt &v : attr.getValues<APInt>())
      mask.push_back(!v.isZero());
  return mask;
}

LogicalResult importCompress(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<std::optional<int64_t>> axisAttr = n.getOptionalInt("axis");
  if (failed(x) || failed(axisAttr))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!xt)
    return n.error() << "input 'input' must be ranked, got " << n.inputType(0);
  FailureOr<DenseElementsAttr> cond = shapeDeterminingInput(n, 1, "condition");
  if (failed(cond))
    return failure();
  if (cond->getType().getRank() != 1 || !cond->getElementType().isInteger(1))
    return n.error() << "input 'condition' must be a 1-D bool tensor, got " << cond->getType();
  Value data = *x;
  int64_t axis = 0, extent;
  if (*axisAttr) {
    FailureOr<int64_t> a = graph::normalizeAxis(n.location(), **axisAttr, xt.getRank(), "axis");
    if (failed(a))
      return failure();
    axis = *a;
    extent = xt.getDimSize(axis);
  } else {
    FailureOr<Values> flat = n.create<graph::ReshapeOp>(data, {n.named("shape", n.i64s({-1}))});
    if (failed(flat))
      return failure();
    data = (*flat)[0];
    extent = cast<RankedTensorType>(data.getType()).getDimSize(0);
  }
  SmallVector<int64_t> picked;
  for (auto [i, keep] : llvm::enumerate(nonZeroMask(*cond)))
    if (keep)
      picked.push_back(static_cast<int64_t>(i));
  if (!picked.empty() && extent != ShapedType::kDynamic && picked.back() >= extent)
    return n.error() << "input 'condition' selects index " << picked.back() << ", past the "
                     << extent << " entries of the compressed axis";
  auto idxType = RankedTensorType::get({static_cast<int64_t>(picked.size())}, n.b().getI64Type());
  Value indices = n.constant(DenseElementsAttr::get(idxType, ArrayRef<int64_t>(picked)));
  return emit<graph::GatherOp>(n, {data, indices}, {n.named("axis", n.i64(axis))});
}

LogicalResult importNonZero(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  FailureOr<DenseElementsAttr> x = shapeDeterminingInput(n, 0, "X");
  if (failed(x))
    return failure();
  ArrayRef<int64_t> shape = x->getType().getShape();
  if (shape.empty())
    return n.error() << "input 'X' must have rank >= 1, got " << x->getType();
  // Row d of the result holds coordinate d of each non-zero, in row-major order.
  SmallVector<int64_t> flat;
  for (auto [i, keep] : llvm::enumerate(nonZeroMask(*x)))
    if (keep)
      flat.push_back(static_cast<int64_t>(i));
  int64_t count = static_cast<int64_t>(flat.size()), rank = static_cast<int64_t>(shape.size());
  SmallVector<int64_t> coords(rank * count);
  for (int64_t j = 0; j < count; ++j)
    for (int64_t d = rank - 1, r = flat[j]; d >= 0; r /= shape[d], --d)
      coords[d * count + j] = r % shape[d];
  auto type = RankedTensorType::get({rank, count}, n.b().getI64Type());
  return n.setResults(n.constant(DenseElementsAttr::get(type, ArrayRef<int64_t>(coords))));
}

/// Unique of a constant: evaluated at import (numpy.unique's semantics:
/// slices along `axis`, or the flattened tensor without one, compared
/// lexicographically; sorted ascending or in order of first occurrence).
LogicalResult importUnique(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis", "sorted"})))
    return failure();
  FailureOr<std::optional<int64_t>> axisAttr = n.getOptionalInt("axis");
  FailureOr<int64_t> sorted = n.getInt("sorted", 1);
  FailureOr<DenseElementsAttr> x = shapeDeterminingInput(n, 0, "X");
  if (failed(axisAttr) || failed(sorted) || failed(x))
    return failure();
  auto xt = cast<RankedTensorType>(x->getType());
  Type elt = xt.getElementType();
  bool isFloat = isa<FloatType>(elt);
  if (!isFloat && !isa<IntegerType>(elt))
    return n.error() << "input 'X' must be numeric, got " << xt;
  SmallVector<int64_t> shape(xt.getShape());
  int64_t axis = 0;
  if (*axisAttr) {
    FailureOr<int64_t> a = graph::normalizeAxis(n.location(), **axisAttr, xt.getRank(), "axis");
    if (failed(a))
      return failure();
    axis = *a;
  } else {
    shape = {xt.getNumElements()};
  }
  int64_t outer = 1, inner = 1, extent = shape[axis];
  for (int64_t d = 0; d < axis; ++d)
    outer *= shape[d];
  for (int64_t d = axis + 1; d < (int64_t)shape.size(); ++d)
    inner *= shape[d];
  // Every value as a double (floats) or int64 (integers), in row-major order.
  SmallVector<double> fv;
  SmallVector<int64_t> iv;
  if (isFloat)
    for (const APFloat &v : x->getValues<APFloat>())
      fv.push_back(v.convertToDouble());
  else
    for (const APInt &v : x->getValues<APInt>())
      iv.push_back(elt.isUnsignedInteger() ? (int64_t)v.getZExtValue() : v.getSExtValue());
  auto at = [&](int64_t slice, int64_t k) { return (k / inner) * extent * inner + slice * inner + k % inner; };
  int64_t width = outer * inner;
  auto less = [&](int64_t a, int64_t b) {
    for (int64_t k = 0; k < width; ++k) {
      int64_t ia = at(a, k), ib = at(b, k);
      if (isFloat ? fv[ia] != fv[ib] : iv[ia] != iv[ib])
        return isFloat ? fv[ia] < fv[ib] : iv[ia] < iv[ib];
    }
    return false;
  };
  auto same = [&](int64_t a, int64_t b) { return !less(a, b) && !less(b, a); };
  // First occurrences in input order, then (sorted) lexicographic order.
  SmallVector<int64_t> firsts, inverse(extent), counts;
  for (int64_t i = 0; i < extent; ++i) {
    auto it = llvm::find_if(firsts, [&](int64_t f) { return same(f, i); });
    if (it == firsts.end()) {
      firsts.push_back(i);
      counts.push_back(0);
    }
  }
  if (*sorted)
    llvm::stable_sort(firsts, less);
  for (int64_t i = 0; i < extent; ++i) {
    int64_t u = llvm::find_if(firsts, [&](int64_t f) { return same(f, i); }) - firsts.begin();
    inverse[i] = u;
    ++counts[u];
  }
  int64_t uniq = firsts.size();
  SmallVector<int64_t> yShape(shape);
  yShape[axis] = uniq;
  SmallVector<Attribute> yv;
  SmallVector<Attribute> all(x->getValues<Attribute>());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t u = 0; u < uniq; ++u)
      for (int64_t in = 0; in < inner; ++in)
        yv.push_back(all[o * extent * inner + firsts[u] * inner + in]);
  auto vec = [&](ArrayRef<int64_t> v) {
    auto t = RankedTensorType::get({(int64_t)v.size()}, n.b().getI64Type());
    return n.constant(DenseElementsAttr::get(t, v));
  };
  Value y = n.constant(DenseElementsAttr::get(RankedTensorType::get(yShape, elt), yv));
  return n.setResults({y, vec(firsts), vec(inverse), vec(counts)});
}

} // namespace

void strait::onnximport::registerDataDependentImporters(OpRegistry &r) {
  r.add("Compress", 9, importCompress); // 11 allows a negative axis
  r.add("NonZero", 9, importNonZero);
  r.add("Unique", 11, importUnique);
}
