//===- ImportUnpool.cpp - MaxUnpool as a scatter into zeros ---------------===//
//
// MaxUnpool writes X at MaxPool's flat indices into a zero tensor of the
// inferred unpooled shape ((in - 1) * stride - pads + kernel per spatial
// dimension), as the ONNX reference does, then pads or crops it at the end
// of each dimension to `output_shape` when that input is given. It becomes
// Reshape, ScatterElements into a zero constant, Reshape and Pad.
//
//===----------------------------------------------------------------------===//

#include "NodeImporter.h"

using namespace mlir;
using namespace strait;
using namespace strait::onnximport;

namespace {

/// The first result of `r`, or null on failure.
Value first(FailureOr<Values> r) { return failed(r) ? Value() : (*r)[0]; }

LogicalResult importMaxUnpool(NodeImporter &n) {
  if (failed(n.checkAttributes({"kernel_shape", "pads", "strides"})))
    return failure();
  FailureOr<Value> x = n.requiredInput(0), idx = n.requiredInput(1);
  if (failed(x) || failed(idx))
    return failure();
  auto xt = dyn_cast<RankedTensorType>(n.inputType(0));
  auto it = dyn_cast<RankedTensorType>(n.inputType(1));
  if (!xt || !xt.hasStaticShape() || xt.getRank() < 3)
    return n.error() << "input 'X' must have a static shape (N, C, spatial...), got "
                     << n.inputType(0);
  if (!it || it.getShape() != xt.getShape() || !it.getElementType().isInteger(64))
    return n.error() << "input 'I' must be i64 of X's shape " << xt << ", got "
                     << n.inputType(1);
  int64_t spatial = xt.getRank() - 2;
  if (!n.attr("kernel_shape"))
    return n.error() << "missing attribute 'kernel_shape'";
  FailureOr<SmallVector<int64_t>> k = n.getInts("kernel_shape");
  FailureOr<SmallVector<int64_t>> s = n.getInts("strides", SmallVector<int64_t>(spatial, 1));
  FailureOr<SmallVector<int64_t>> p = n.getInts("pads", SmallVector<int64_t>(2 * spatial, 0));
  if (failed(k) || failed(s) || failed(p))
    return failure();
  if ((int64_t)k->size() != spatial || (int64_t)s->size() != spatial ||
      (int64_t)p->size() != 2 * spatial)
    return n.error() << "kernel_shape/strides/pads do not match " << spatial
                     << " spatial dimensions";
  SmallVector<int64_t> shape(xt.getShape().take_front(2));
  for (int64_t d = 0; d < spatial; ++d) {
    int64_t v;
    if (__builtin_mul_overflow(xt.getDimSize(d + 2) - 1, (*s)[d], &v) ||
        __builtin_sub_overflow(v, (*p)[d], &v) ||
        __builtin_sub_overflow(v, (*p)[d + spatial], &v) ||
        __builtin_add_overflow(v, (*k)[d], &v))
      return n.error() << "the unpooled size of spatial dimension " << d << " overflows";
    shape.push_back(v);
  }
  // The zeros it scatters into are a constant: bound them (2^32 entries).
  constexpr int64_t kMaxElements = int64_t(1) << 32;
  int64_t total = 1;
  for (int64_t v : shape) {
    if (v < 1)
      return n.error() << "the unpooled shape has a dimension of " << v;
    if (v > kMaxElements / total)
      return n.error() << "the unpooled tensor would have more than " << kMaxElements
                       << " elements";
    total *= v;
  }
  SmallVector<int64_t> target = shape;
  if (n.input(2)) {
    FailureOr<SmallVector<int64_t>> os = n.constantInts(2, "output_shape");
    if (failed(os))
      return failure();
    if (os->size() != shape.size())
      return n.error() << "input 'output_shape' has " << os->size() << " entries, expected "
                       << shape.size();
    target = *os;
  }
  auto zerosType = RankedTensorType::get({total}, xt.getElementType());
  Value zeros = n.constant(SplatElementsAttr::get(
      zerosType, n.b().getFloatAttr(xt.getElementType(), 0.0)));
  Value flatIdx = first(n.create<graph::ReshapeOp>(*idx, {n.named("shape", n.i64s({-1}))}));
  Value flatX = first(n.create<graph::ReshapeOp>(*x, {n.named("shape", n.i64s({-1}))}));
  if (!flatIdx || !flatX)
    return failure();
  Value y = first(n.create<graph::ScatterElementsOp>({zeros, flatIdx, flatX},
                                                      {n.named("axis", n.i64(0))}));
  y = y ? first(n.create<graph::ReshapeOp>(y, {n.named("shape", n.i64s(shape))})) : y;
  if (!y)
    return failure();
  if (target == shape)
    return n.setResults(y);
  SmallVector<int64_t> pads(shape.size(), 0);
  for (auto [t, sh] : llvm::zip_equal(target, shape))
    pads.push_back(t - sh);
  return emit<graph::PadOp>(n, y, {n.named("pads", n.i64s(pads))});
}

} // namespace

void strait::onnximport::registerUnpoolImporters(OpRegistry &r) {
  r.add("MaxUnpool", 9, importMaxUnpool);
}
