//===- ImportOpset18.cpp - Opset 18-24 ops lowered onto existing graph ops ===//
//
// Op types of opsets 18 to 24 that are exact compositions of graph ops
// (so they train through those ops' gradients and run on every backend):
//
// - Swish (24): `X * Sigmoid(alpha X)`;
// - CenterCropPad (18): a Slice (crop) and a zero Pad per axis, the shape a
//   constant input;
// - AffineGrid (20): the constant homogeneous base grid [H*W, 3] (or
//   [D*H*W, 4]) times theta^T, reshaped to [N, H, W, 2] ([N, D, H, W, 3]);
// - BitwiseAnd, BitwiseOr, BitwiseXor, BitwiseNot (18): graph ops of the
//   same names (integer kernels; no gradient);
// - Col2Im (18): a ScatterElements(add) of constant image positions into a
//   zero image (no gradient: ScatterElements' reduction has none);
// - TensorScatter (24) with constant write_indices: a Gather of constant
//   indices from Concat(past_cache, update) per batch;
// - Det (11): graph.Det (a CPU kernel; no gradient);
// - RoiAlign (10, 16): graph.RoiAlign (a CPU kernel; no gradient);
// - LpPool and GlobalLpPool (2; opset 1's float p is not read): `(sum |x|^p)^(1/p)` over the window as
//   an AveragePool counting the padding, times the window size (p = 2: x*x
//   and Sqrt), resp. ReduceL2 (p = 2) or ReduceSum of |x|^p.
//
//===----------------------------------------------------------------------===//

#include "NodeImporter.h"

#include <cmath>

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

template <typename OpTy>
FailureOr<Value> one(NodeImporter &n, ValueRange operands, ArrayRef<NamedAttribute> attrs = {}) {
  FailureOr<Values> r = n.create<OpTy>(operands, attrs);
  if (failed(r))
    return failure();
  return (*r)[0];
}

Value scalar(NodeImporter &n, Type elt, double v) {
  return n.constant(
      DenseElementsAttr::get(RankedTensorType::get({}, elt), n.b().getFloatAttr(elt, v)));
}

FailureOr<RankedTensorType> floatInput(NodeImporter &n, size_t i, StringRef what) {
  auto t = dyn_cast_or_null<RankedTensorType>(n.inputType(i));
  if (!t || !t.hasStaticShape() || !isa<FloatType>(t.getElementType()))
    return n.error() << "input '" << what << "' must be a statically shaped float tensor, got "
                     << n.inputType(i);
  return t;
}

LogicalResult importSwish(NodeImporter &n) {
  if (failed(n.checkAttributes({"alpha"})))
    return failure();
  FailureOr<float> alpha = n.getFloat("alpha", 1.0f);
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(alpha) || failed(x))
    return failure();
  FailureOr<RankedTensorType> t = floatInput(n, 0, "X");
  if (failed(t))
    return failure();
  Value arg = *x;
  if (*alpha != 1.0f) {
    FailureOr<Value> a = one<graph::MulOp>(n, {*x, scalar(n, t->getElementType(), *alpha)});
    if (failed(a))
      return failure();
    arg = *a;
  }
  FailureOr<Value> s = one<graph::SigmoidOp>(n, arg);
  return failed(s) ? failure() : emit<graph::MulOp>(n, {*x, *s});
}

LogicalResult importCenterCropPad(NodeImporter &n) {
  if (failed(n.checkAttributes({"axes"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<SmallVector<int64_t>> shape = n.constantInts(1, "shape");
  if (failed(x) || failed(shape))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  if (!xt || !xt.hasStaticShape())
    return n.error() << "input 'input_data' must be statically shaped, got " << n.inputType(0);
  int64_t rank = xt.getRank();
  SmallVector<int64_t> all;
  for (int64_t i = 0; i < rank; ++i)
    all.push_back(i);
  FailureOr<SmallVector<int64_t>> axes = n.getInts("axes", all);
  if (failed(axes))
    return failure();
  if (axes->size() != shape->size())
    return n.error() << "input 'shape' has " << shape->size() << " entries for " << axes->size()
                     << " axes";
  SmallVector<int64_t> starts, ends, sliceAxes, ones, pads(2 * rank, 0);
  for (auto [a, want] : llvm::zip(*axes, *shape)) {
    FailureOr<int64_t> axis = graph::normalizeAxis(n.location(), a, rank, "axes");
    if (failed(axis))
      return failure();
    if (want < 0)
      return n.error() << "input 'shape' has a negative size " << want;
    int64_t dim = xt.getDimSize(*axis);
    if (want < dim) {  // crop, the extra element (odd difference) at the end
      int64_t begin = (dim - want) / 2;
      starts.push_back(begin), ends.push_back(begin + want), sliceAxes.push_back(*axis);
      ones.push_back(1);
    } else if (want > dim) {  // pad, the extra element at the end
      pads[*axis] = (want - dim) / 2;
      pads[*axis + rank] = want - dim - pads[*axis];
    }
  }
  Value v = *x;
  if (!sliceAxes.empty()) {
    FailureOr<Value> s = one<graph::SliceOp>(
        n, v, {n.named("starts", n.i64s(starts)), n.named("ends", n.i64s(ends)),
               n.named("axes", n.i64s(sliceAxes)), n.named("steps", n.i64s(ones))});
    if (failed(s))
      return failure();
    v = *s;
  }
  if (llvm::any_of(pads, [](int64_t p) { return p != 0; })) {
    FailureOr<Value> p = one<graph::PadOp>(n, v, {n.named("pads", n.i64s(pads))});
    if (failed(p))
      return failure();
    v = *p;
  }
  return n.setResults(v);
}

LogicalResult importAffineGrid(NodeImporter &n) {
  if (failed(n.checkAttributes({"align_corners"})))
    return failure();
  FailureOr<int64_t> align = n.getInt("align_corners", 0);
  FailureOr<Value> theta = n.requiredInput(0);
  FailureOr<SmallVector<int64_t>> size = n.constantInts(1, "size");
  if (failed(align) || failed(theta) || failed(size))
    return failure();
  FailureOr<RankedTensorType> tt = floatInput(n, 0, "theta");
  if (failed(tt))
    return failure();
  int64_t spatial = static_cast<int64_t>(size->size()) - 2;
  if ((spatial != 2 && spatial != 3) || tt->getRank() != 3 ||
      tt->getDimSize(0) != (*size)[0] || tt->getDimSize(1) != spatial ||
      tt->getDimSize(2) != spatial + 1)
    return n.error() << "theta " << *tt << " and size [" << llvm::make_range(size->begin(), size->end())
                     << "] must be [N, 2, 3] with [N, C, H, W] or [N, 3, 4] with [N, C, D, H, W]";
  ArrayRef<int64_t> dims = ArrayRef<int64_t>(*size).drop_front(2);
  for (int64_t d : dims)
    if (d <= 0 || (*align && d == 1))
      return n.error() << "input 'size' has a spatial size " << d
                       << (*align ? " (align_corners needs at least 2)" : "");
  // Rows (x, y[, z], 1), x along the last dimension, in row-major order.
  auto coord = [&](int64_t i, int64_t d) {
    return *align ? -1.0 + 2.0 * i / (d - 1) : -1.0 + (2.0 * i + 1.0) / d;
  };
  int64_t count = 1;
  for (int64_t d : dims)
    count *= d;
  SmallVector<Attribute> rows;
  Type elt = tt->getElementType();
  for (int64_t flat = 0; flat < count; ++flat) {
    SmallVector<double> c(spatial);
    int64_t rest = flat;
    for (int64_t k = spatial - 1; k >= 0; --k) {
      c[spatial - 1 - k] = coord(rest % dims[k], dims[k]);
      rest /= dims[k];
    }
    for (double v : c)
      rows.push_back(n.b().getFloatAttr(elt, v));
    rows.push_back(n.b().getFloatAttr(elt, 1.0));
  }
  Value base = n.constant(
      DenseElementsAttr::get(RankedTensorType::get({count, spatial + 1}, elt), rows));
  FailureOr<Value> tr = one<graph::TransposeOp>(n, *theta, {n.named("perm", n.i64s({0, 2, 1}))});
  FailureOr<Value> g = failed(tr) ? FailureOr<Value>(failure()) : one<graph::MatMulOp>(n, {base, *tr});
  if (failed(g))
    return failure();
  SmallVector<int64_t> out{(*size)[0]};
  out.append(dims.begin(), dims.end());
  out.push_back(spatial);
  return emit<graph::ReshapeOp>(n, *g, {n.named("shape", n.i64s(out))});
}

/// |x|^p (x * x for p = 2).
FailureOr<Value> absPow(NodeImporter &n, Value x, Type elt, int64_t p) {
  if (p == 2)
    return one<graph::MulOp>(n, {x, x});
  FailureOr<Value> a = one<graph::AbsOp>(n, x);
  if (failed(a) || p == 1)
    return a;
  return one<graph::PowOp>(n, {*a, scalar(n, elt, p)});
}

/// y^(1/p) (Sqrt for p = 2).
LogicalResult emitRoot(NodeImporter &n, Value y, Type elt, int64_t p) {
  if (p == 1)
    return n.setResults(y);
  if (p == 2)
    return emit<graph::SqrtOp>(n, y);
  return emit<graph::PowOp>(n, {y, scalar(n, elt, 1.0 / p)});
}

LogicalResult importLpPool(NodeImporter &n) {
  if (failed(n.checkAttributes({"auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads",
                                "strides"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<RankedTensorType> xt = floatInput(n, 0, "X");
  if (failed(x) || failed(xt))
    return failure();
  if (xt->getRank() < 3)
    return n.error() << "input 'X' must be [N, C, spatial...], got " << *xt;
  int64_t spatial = xt->getRank() - 2;
  FailureOr<int64_t> p = n.getInt("p", 2), ceil = n.getInt("ceil_mode", 0);
  FailureOr<SmallVector<int64_t>> k = n.getInts("kernel_shape");
  FailureOr<SmallVector<int64_t>> s = n.getInts("strides", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> d = n.getInts("dilations", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> pads = n.getInts("pads", SmallVector<int64_t>(2 * spatial, 0));
  FailureOr<std::string> autoPad = n.getString("auto_pad", "NOTSET");
  if (failed(p) || failed(ceil) || failed(k) || failed(s) || failed(d) || failed(pads) ||
      failed(autoPad))
    return failure();
  if (*p < 1)
    return n.error() << "attribute 'p' must be at least 1, got " << *p;
  if ((int64_t)k->size() != spatial || (int64_t)s->size() != spatial ||
      (int64_t)d->size() != spatial || (int64_t)pads->size() != 2 * spatial)
    return n.error() << "kernel_shape/strides/dilations/pads do not match " << spatial
                     << " spatial dimensions";
  int64_t window = 1;
  for (int64_t i = 0; i < spatial; ++i) {
    if ((*k)[i] <= 0 || (*s)[i] <= 0 || (*d)[i] <= 0)
      return n.error() << "kernel_shape, strides and dilations must be positive";
    window *= (*k)[i];
    if (*autoPad == "SAME_UPPER" || *autoPad == "SAME_LOWER") {
      int64_t in = xt->getDimSize(i + 2), out = (in + (*s)[i] - 1) / (*s)[i];
      int64_t span = ((*k)[i] - 1) * (*d)[i] + 1;
      int64_t total = std::max<int64_t>((out - 1) * (*s)[i] + span - in, 0);
      int64_t small = total / 2, big = total - small;
      (*pads)[i] = *autoPad == "SAME_UPPER" ? small : big;
      (*pads)[i + spatial] = *autoPad == "SAME_UPPER" ? big : small;
    } else if (*autoPad == "VALID") {
      (*pads)[i] = (*pads)[i + spatial] = 0;
    } else if (*autoPad != "NOTSET") {
      return n.error() << "unknown auto_pad '" << *autoPad << "'";
    }
  }
  Type elt = xt->getElementType();
  FailureOr<Value> pw = absPow(n, *x, elt, *p);
  FailureOr<Value> avg = failed(pw) ? FailureOr<Value>(failure())
                                    : one<graph::AveragePoolOp>(
                                          n, *pw,
                                          {n.named("kernel_shape", n.i64s(*k)),
                                           n.named("pads", n.i64s(*pads)),
                                           n.named("strides", n.i64s(*s)),
                                           n.named("dilations", n.i64s(*d)),
                                           n.named("ceil_mode", n.i64(*ceil)),
                                           n.named("count_include_pad", n.i64(1))});
  FailureOr<Value> sum = failed(avg) ? FailureOr<Value>(failure())
                                     : one<graph::MulOp>(n, {*avg, scalar(n, elt, window)});
  return failed(sum) ? failure() : emitRoot(n, *sum, elt, *p);
}

LogicalResult importGlobalLpPool(NodeImporter &n) {
  if (failed(n.checkAttributes({"p"})))
    return failure();
  FailureOr<int64_t> p = n.getInt("p", 2);
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<RankedTensorType> xt = floatInput(n, 0, "X");
  if (failed(p) || failed(x) || failed(xt))
    return failure();
  if (*p < 1)
    return n.error() << "attribute 'p' must be at least 1, got " << *p;
  if (xt->getRank() < 3)
    return n.error() << "input 'X' must be [N, C, spatial...], got " << *xt;
  SmallVector<int64_t> axes;
  for (int64_t i = 2; i < xt->getRank(); ++i)
    axes.push_back(i);
  SmallVector<NamedAttribute> attrs{n.named("axes", n.i64s(axes)), n.named("keepdims", n.i64(1))};
  if (*p == 2)
    return emit<graph::ReduceL2Op>(n, *x, attrs);
  FailureOr<Value> pw = absPow(n, *x, xt->getElementType(), *p);
  FailureOr<Value> sum = failed(pw) ? FailureOr<Value>(failure()) : one<graph::ReduceSumOp>(n, *pw, attrs);
  return failed(sum) ? failure() : emitRoot(n, *sum, xt->getElementType(), *p);
}

/// Fails unless input i is an integer (or bool) tensor.
LogicalResult integerInput(NodeImporter &n, size_t i, StringRef what) {
  auto t = dyn_cast_or_null<TensorType>(n.inputType(i));
  if (!t || !isa<IntegerType>(t.getElementType()))
    return n.error() << "input '" << what << "' must be an integer tensor, got " << n.inputType(i);
  return success();
}

template <typename OpTy> LogicalResult importBitwiseBinary(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  FailureOr<Value> a = n.requiredInput(0), b = n.requiredInput(1);
  if (failed(a) || failed(b) || failed(integerInput(n, 0, "A")) || failed(integerInput(n, 1, "B")))
    return failure();
  return emit<OpTy>(n, {*a, *b});
}

LogicalResult importBitwiseNot(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  if (failed(x) || failed(integerInput(n, 0, "X")))
    return failure();
  return emit<graph::BitwiseNotOp>(n, *x);
}

/// TensorScatter (24) with constant (or absent) write_indices: per batch,
/// Gather along `axis` from Concat(cache, update) with constant indices (j
/// written by update position u reads M + u, others read j), so it trains
/// through Gather's gradient.
LogicalResult importTensorScatter(NodeImporter &n) {
  if (failed(n.checkAttributes({"axis", "mode"})))
    return failure();
  FailureOr<int64_t> axisAttr = n.getInt("axis", -2);
  FailureOr<std::string> mode = n.getString("mode", "linear");
  FailureOr<Value> cache = n.requiredInput(0), update = n.requiredInput(1);
  if (failed(axisAttr) || failed(mode) || failed(cache) || failed(update))
    return failure();
  if (*mode != "linear" && *mode != "circular")
    return n.error() << "attribute 'mode' must be 'linear' or 'circular', got '" << *mode << "'";
  auto ct = dyn_cast<RankedTensorType>(n.inputType(0));
  auto ut = dyn_cast<RankedTensorType>(n.inputType(1));
  if (!ct || !ut || !ct.hasStaticShape() || !ut.hasStaticShape() || ct.getRank() != ut.getRank() ||
      ct.getElementType() != ut.getElementType())
    return n.error() << "inputs 'past_cache' and 'update' must be statically shaped tensors of one "
                        "rank and type, got "
                     << n.inputType(0) << " and " << n.inputType(1);
  int64_t rank = ct.getRank();
  FailureOr<int64_t> axis = graph::normalizeAxis(n.location(), *axisAttr, rank, "axis");
  if (failed(axis))
    return failure();
  if (*axis == 0)
    return n.error() << "attribute 'axis' must not be the batch axis 0";
  int64_t batch = ct.getDimSize(0), maxLen = ct.getDimSize(*axis), len = ut.getDimSize(*axis);
  for (int64_t i = 0; i < rank; ++i)
    if (i != *axis ? ct.getDimSize(i) != ut.getDimSize(i) : len > maxLen)
      return n.error() << "update " << ut << " does not fit past_cache " << ct << " along axis "
                       << *axis;
  SmallVector<int64_t> writes(batch, 0);
  if (n.input(2)) {
    FailureOr<SmallVector<int64_t>> w = n.constantInts(2, "write_indices");
    if (failed(w))
      return failure();
    if ((int64_t)w->size() != batch)
      return n.error() << "input 'write_indices' has " << w->size() << " entries for batch "
                       << batch;
    writes = *w;
  }
  auto indicesFor = [&](int64_t w) -> FailureOr<SmallVector<int64_t>> {
    SmallVector<int64_t> idx(maxLen);
    for (int64_t j = 0; j < maxLen; ++j)
      idx[j] = j;
    for (int64_t u = 0; u < len; ++u) {
      int64_t j = w + u;
      if (*mode == "circular")
        j = ((j % maxLen) + maxLen) % maxLen;
      if (j < 0 || j >= maxLen)
        return n.error() << "write index " << w << " + " << len << " updates pass the cache length "
                         << maxLen << " (mode linear)";
      idx[j] = maxLen + u;
    }
    return idx;
  };
  FailureOr<Value> both = one<graph::ConcatOp>(n, {*cache, *update}, {n.named("axis", n.i64(*axis))});
  if (failed(both))
    return failure();
  auto gatherAt = [&](Value from, int64_t w) -> FailureOr<Value> {
    FailureOr<SmallVector<int64_t>> idx = indicesFor(w);
    if (failed(idx))
      return failure();
    auto it = RankedTensorType::get({maxLen}, n.b().getI64Type());
    Value indices = n.constant(DenseElementsAttr::get(it, ArrayRef<int64_t>(*idx)));
    return one<graph::GatherOp>(n, {from, indices}, {n.named("axis", n.i64(*axis))});
  };
  if (llvm::all_equal(writes)) {
    FailureOr<Value> g = gatherAt(*both, writes.empty() ? 0 : writes[0]);
    return failed(g) ? failure() : n.setResults(*g);
  }
  SmallVector<Value> parts;
  for (int64_t b = 0; b < batch; ++b) {
    FailureOr<Value> row = one<graph::SliceOp>(
        n, *both, {n.named("starts", n.i64s({b})), n.named("ends", n.i64s({b + 1})),
                   n.named("axes", n.i64s({0})), n.named("steps", n.i64s({1}))});
    FailureOr<Value> g = failed(row) ? FailureOr<Value>(failure()) : gatherAt(*row, writes[b]);
    if (failed(g))
      return failure();
    parts.push_back(*g);
  }
  return emit<graph::ConcatOp>(n, parts, {n.named("axis", n.i64(0))});
}

/// Col2Im (18): each block entry adds into its (padded) image position, a
/// ScatterElements(add) of constant flat indices into a zero image, then a
/// Slice drops the padding. Index tensor as large as the input (i64).
LogicalResult importCol2Im(NodeImporter &n) {
  if (failed(n.checkAttributes({"dilations", "pads", "strides"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  FailureOr<SmallVector<int64_t>> image = n.constantInts(1, "image_shape");
  FailureOr<SmallVector<int64_t>> block = n.constantInts(2, "block_shape");
  if (failed(x) || failed(image) || failed(block))
    return failure();
  FailureOr<RankedTensorType> xt = floatInput(n, 0, "input");
  if (failed(xt))
    return failure();
  int64_t s = image->size();
  FailureOr<SmallVector<int64_t>> dil = n.getInts("dilations", SmallVector<int64_t>(s, 1));
  FailureOr<SmallVector<int64_t>> str = n.getInts("strides", SmallVector<int64_t>(s, 1));
  FailureOr<SmallVector<int64_t>> pads = n.getInts("pads", SmallVector<int64_t>(2 * s, 0));
  if (failed(dil) || failed(str) || failed(pads))
    return failure();
  if (s == 0 || (int64_t)block->size() != s || (int64_t)dil->size() != s ||
      (int64_t)str->size() != s || (int64_t)pads->size() != 2 * s || xt->getRank() != 3)
    return n.error() << "input [N, C * prod(block_shape), L], image_shape, block_shape, "
                        "dilations, strides and pads (twice) must agree on the spatial rank";
  int64_t k = 1, l = 1, padded = 1;
  SmallVector<int64_t> blocksPer(s), paddedDims(s);
  for (int64_t d = 0; d < s; ++d) {
    if ((*block)[d] <= 0 || (*dil)[d] <= 0 || (*str)[d] <= 0 || (*image)[d] <= 0)
      return n.error() << "image_shape, block_shape, dilations and strides must be positive";
    paddedDims[d] = (*image)[d] + (*pads)[d] + (*pads)[d + s];
    int64_t span = ((*block)[d] - 1) * (*dil)[d] + 1;
    if (paddedDims[d] < span)
      return n.error() << "block_shape does not fit the padded image along dimension " << d;
    blocksPer[d] = (paddedDims[d] - span) / (*str)[d] + 1;
    k *= (*block)[d], l *= blocksPer[d], padded *= paddedDims[d];
  }
  int64_t nb = xt->getDimSize(0), ck = xt->getDimSize(1);
  if (ck % k != 0 || xt->getDimSize(2) != l)
    return n.error() << "input " << *xt << " must be [N, C * " << k << ", " << l << "]";
  int64_t c = ck / k;
  // Flat padded position of block entry ki at block position li.
  SmallVector<int64_t> flat(k * l);
  for (int64_t ki = 0; ki < k; ++ki)
    for (int64_t li = 0; li < l; ++li) {
      int64_t kr = ki, lr = li, pos = 0, mul = 1;
      for (int64_t d = s - 1; d >= 0; --d) {
        int64_t kd = kr % (*block)[d], ld = lr % blocksPer[d];
        kr /= (*block)[d], lr /= blocksPer[d];
        pos += (ld * (*str)[d] + kd * (*dil)[d]) * mul;
        mul *= paddedDims[d];
      }
      flat[ki * l + li] = pos;
    }
  SmallVector<int64_t> indices;
  indices.reserve(nb * c * k * l);
  for (int64_t r = 0; r < nb * c; ++r)
    indices.append(flat.begin(), flat.end());
  Type elt = xt->getElementType();
  auto it = RankedTensorType::get({nb, c, k * l}, n.b().getI64Type());
  Value idx = n.constant(DenseElementsAttr::get(it, ArrayRef<int64_t>(indices)));
  Value zeros = n.constant(DenseElementsAttr::get(RankedTensorType::get({nb, c, padded}, elt),
                                                  n.b().getFloatAttr(elt, 0.0)));
  FailureOr<Value> upd = one<graph::ReshapeOp>(n, *x, {n.named("shape", n.i64s({nb, c, k * l}))});
  FailureOr<Value> sc =
      failed(upd) ? FailureOr<Value>(failure())
                  : one<graph::ScatterElementsOp>(
                        n, {zeros, idx, *upd},
                        {n.named("axis", n.i64(2)),
                         n.named("reduction", graph::ScatterReductionAttr::get(
                                                  n.ctx(), graph::ScatterReduction::add))});
  SmallVector<int64_t> imgShape{nb, c};
  imgShape.append(paddedDims.begin(), paddedDims.end());
  FailureOr<Value> img = failed(sc) ? FailureOr<Value>(failure())
                                    : one<graph::ReshapeOp>(n, *sc, {n.named("shape", n.i64s(imgShape))});
  if (failed(img))
    return failure();
  if (llvm::all_of(*pads, [](int64_t p) { return p == 0; }))
    return n.setResults(*img);
  SmallVector<int64_t> starts, ends, axes, steps;
  for (int64_t d = 0; d < s; ++d) {
    starts.push_back((*pads)[d]), ends.push_back((*pads)[d] + (*image)[d]);
    axes.push_back(d + 2), steps.push_back(1);
  }
  return emit<graph::SliceOp>(n, *img,
                              {n.named("starts", n.i64s(starts)), n.named("ends", n.i64s(ends)),
                               n.named("axes", n.i64s(axes)), n.named("steps", n.i64s(steps))});
}

LogicalResult importDet(NodeImporter &n) {
  if (failed(n.checkAttributes({})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0);
  return failed(x) ? failure() : emit<graph::DetOp>(n, *x);
}

LogicalResult importRoiAlign(NodeImporter &n) {
  if (failed(n.checkAttributes({"coordinate_transformation_mode", "mode", "output_height",
                                "output_width", "sampling_ratio", "spatial_scale"})))
    return failure();
  FailureOr<std::string> ctm = n.getString("coordinate_transformation_mode", "half_pixel");
  FailureOr<std::string> mode = n.getString("mode", "avg");
  FailureOr<int64_t> oh = n.getInt("output_height", 1), ow = n.getInt("output_width", 1),
                     ratio = n.getInt("sampling_ratio", 0);
  FailureOr<float> scale = n.getFloat("spatial_scale", 1.0f);
  FailureOr<Value> x = n.requiredInput(0), rois = n.requiredInput(1), idx = n.requiredInput(2);
  if (failed(ctm) || failed(mode) || failed(oh) || failed(ow) || failed(ratio) || failed(scale) ||
      failed(x) || failed(rois) || failed(idx))
    return failure();
  if (*ctm != "half_pixel" && *ctm != "output_half_pixel")
    return n.error() << "attribute 'coordinate_transformation_mode' must be 'half_pixel' or "
                        "'output_half_pixel', got '" << *ctm << "'";
  if (*mode != "avg" && *mode != "max")
    return n.error() << "attribute 'mode' must be 'avg' or 'max', got '" << *mode << "'";
  if (*ratio < 0)
    return n.error() << "attribute 'sampling_ratio' must be >= 0, got " << *ratio;
  auto rt = dyn_cast_or_null<TensorType>(n.inputType(1));
  auto it = dyn_cast_or_null<TensorType>(n.inputType(2));
  if (!rt || !rt.getElementType().isF32() || !it || !it.getElementType().isInteger(64))
    return n.error() << "inputs 'rois' (f32) and 'batch_indices' (i64) expected, got "
                     << n.inputType(1) << " and " << n.inputType(2);
  return emit<graph::RoiAlignOp>(
      n, {*x, *rois, *idx},
      {n.named("max_mode", n.i64(*mode == "max")),
       n.named("half_pixel", n.i64(*ctm == "half_pixel" && n.opsetVersion() >= 16)),
       n.named("output_height", n.i64(*oh)), n.named("output_width", n.i64(*ow)),
       n.named("sampling_ratio", n.i64(*ratio)), n.named("spatial_scale", n.f32(*scale))});
}

} // namespace

void strait::onnximport::registerOpset18Importers(OpRegistry &r) {
  r.add("AffineGrid", 20, importAffineGrid);
  r.add("BitwiseAnd", 18, importBitwiseBinary<graph::BitwiseAndOp>);
  r.add("BitwiseNot", 18, importBitwiseNot);
  r.add("BitwiseOr", 18, importBitwiseBinary<graph::BitwiseOrOp>);
  r.add("BitwiseXor", 18, importBitwiseBinary<graph::BitwiseXorOp>);
  r.add("CenterCropPad", 18, importCenterCropPad);
  r.add("Det", 11, importDet);
  r.add("Col2Im", 18, importCol2Im);
  r.add("GlobalLpPool", 2, importGlobalLpPool);
  r.add("LpPool", 2, importLpPool);
  r.add("RoiAlign", 10, importRoiAlign);
  r.add("Swish", 24, importSwish);
  r.add("TensorScatter", 24, importTensorScatter);
}
