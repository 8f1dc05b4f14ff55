//===- DistOps.cpp - Distribution dialect op verifiers --------------------===//
//
// Constraints D5-D9 of docs/distribution-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Dist/DistOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"

#include <cmath>

using namespace mlir;
using namespace strait::dist;

/// D5/D6: a transfer's peer is another stage.
static LogicalResult verifyPeer(Operation *op, int64_t peer) {
  if (std::optional<int64_t> own = getStage(op); own && *own == peer)
    return op->emitOpError() << "D5: peer stage " << peer
                             << " is the op's own stage";
  return success();
}

LogicalResult SendOp::verify() { return verifyPeer(*this, getPeer()); }
LogicalResult RecvOp::verify() { return verifyPeer(*this, getPeer()); }

LogicalResult AllReduceOp::verify() {
  ArrayRef<int64_t> group = getGroup();
  if (group.empty())
    return emitOpError() << "D7: the group is empty";
  for (auto [i, r] : llvm::enumerate(group)) {
    if (r < 0)
      return emitOpError() << "D7: rank " << r << " is negative";
    if (i > 0 && group[i - 1] >= r)
      return emitOpError() << "D7: group ranks must be sorted and distinct";
  }
  return success();
}

/// The types `codec` encodes a value of type `t` into (D8).
static SmallVector<Type> encodedTypes(RankedTensorType t, Codec codec,
                                      std::optional<double> ratio) {
  MLIRContext *ctx = t.getContext();
  auto withElement = [&](Type e) -> Type { return t.clone(e); };
  switch (codec) {
  case Codec::fp16: return {withElement(Float16Type::get(ctx))};
  case Codec::bf16: return {withElement(BFloat16Type::get(ctx))};
  case Codec::int8: return {withElement(IntegerType::get(ctx, 8))};
  case Codec::int4: return {withElement(IntegerType::get(ctx, 4))};
  case Codec::topk: {
    int64_t k = static_cast<int64_t>(
        std::ceil(ratio.value_or(1.0) * static_cast<double>(t.getNumElements()) - 1e-6));
    return {RankedTensorType::get({k}, t.getElementType()),
            RankedTensorType::get({k}, IntegerType::get(ctx, 64))};
  }
  }
  return {};
}

static LogicalResult verifyCodec(Operation *op, RankedTensorType plain, Codec codec,
                                 std::optional<double> ratio, TypeRange encoded) {
  if (!plain.hasStaticShape())
    return op->emitOpError() << "D8: the plain value needs a static shape";
  if (!isa<FloatType>(plain.getElementType()))
    return op->emitOpError() << "D8: codecs encode float tensors, got "
                             << plain.getElementType();
  if (codec == Codec::topk) {
    if (!ratio || *ratio <= 0 || *ratio > 1)
      return op->emitOpError() << "D8: topk needs a ratio in (0, 1]";
  } else if (ratio) {
    return op->emitOpError() << "D8: only topk takes a ratio";
  }
  SmallVector<Type> expected = encodedTypes(plain, codec, ratio);
  if (TypeRange(expected) != encoded) {
    InFlightDiagnostic d = op->emitOpError() << "D8: codec '" << stringifyCodec(codec)
                                             << "' encodes " << plain << " as (";
    llvm::interleaveComma(expected, d);
    d << "), not (";
    llvm::interleaveComma(encoded, d);
    return d << ")";
  }
  return success();
}

LogicalResult CompressOp::verify() {
  std::optional<double> ratio;
  if (FloatAttr r = getRatioAttr())
    ratio = r.getValueAsDouble();
  return verifyCodec(*this, cast<RankedTensorType>(getValue().getType()), getCodec(),
                     ratio, getOutputs().getTypes());
}

LogicalResult DecompressOp::verify() {
  auto plain = cast<RankedTensorType>(getResult().getType());
  std::optional<double> ratio;
  if (getCodec() == Codec::topk) {
    // The ratio is implied by k; recover it so that the same rule checks.
    if (getInputs().size() != 2)
      return emitOpError() << "D9: topk decodes two inputs (values, indices)";
    auto values = cast<RankedTensorType>(getInputs()[0].getType());
    if (values.getRank() != 1 || !plain.hasStaticShape() || plain.getNumElements() == 0)
      return emitOpError() << "D9: topk values must be 1-D and the result static";
    ratio = static_cast<double>(values.getDimSize(0)) /
            static_cast<double>(plain.getNumElements());
  }
  return verifyCodec(*this, plain, getCodec(), ratio, getInputs().getTypes());
}

#define GET_OP_CLASSES
#include "strait/Dialect/Dist/DistOps.cpp.inc"
