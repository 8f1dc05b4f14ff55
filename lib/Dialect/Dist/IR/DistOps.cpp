//===- DistOps.cpp - Distribution dialect op verifiers --------------------===//
//
// Constraints D5-D10 of docs/distribution-dialect.md.
//
//===----------------------------------------------------------------------===//

#include "strait/Dialect/Dist/DistOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"

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
  ArrayAttr islands = getIslandsAttr();
  if (!islands)
    return success();
  if (islands.size() < 2)
    return emitOpError() << "D10: islands must be at least two groups";
  llvm::SmallDenseSet<int64_t> seen;
  for (auto [i, a] : llvm::enumerate(islands.getAsRange<DenseI64ArrayAttr>())) {
    ArrayRef<int64_t> island = a.asArrayRef();
    if (island.empty())
      return emitOpError() << "D10: island " << i << " is empty";
    for (auto [j, r] : llvm::enumerate(island)) {
      if (j > 0 && island[j - 1] >= r)
        return emitOpError() << "D10: island " << i << " must be sorted and distinct";
      if (!llvm::is_contained(group, r))
        return emitOpError() << "D10: island " << i << " has rank " << r
                             << ", which is not in the group";
      if (!seen.insert(r).second)
        return emitOpError() << "D10: rank " << r << " is in more than one island";
    }
  }
  if (seen.size() != group.size())
    return emitOpError() << "D10: the islands must cover the group (" << seen.size()
                         << " of " << group.size() << " ranks)";
  return success();
}

int64_t strait::dist::encodedByteCount(Codec codec, int64_t elements,
                                       int64_t elementBytes, double ratio,
                                       int64_t block) {
  int64_t blocks = (elements + block - 1) / block;
  switch (codec) {
  case Codec::fp16:
  case Codec::bf16: return 2 * elements;
  case Codec::int8: return elements + 4 * blocks;
  case Codec::int4:
  case Codec::aqsgd_int4: return (elements + 1) / 2 + 4 * blocks;
  // AQ-SGD: the steady-state payload (the delta at 2 / 3 / 4 bits); a
  // micro-batch holding a sample seen for the first time goes as int8.
  case Codec::int2:
  case Codec::aqsgd_int2: return (2 * elements + 7) / 8 + 4 * blocks;
  case Codec::int3:
  case Codec::aqsgd_int3: return (3 * elements + 7) / 8 + 4 * blocks;
  case Codec::topk: {
    auto k = static_cast<int64_t>(
        std::ceil(ratio * static_cast<double>(elements) - 1e-6));
    return k * (elementBytes + 4);
  }
  case Codec::topk_int8:
  case Codec::topk_int4: {
    auto k = std::max<int64_t>(
        1, static_cast<int64_t>(std::ceil(ratio * static_cast<double>(elements) - 1e-6)));
    int64_t b = 0; // Rice parameter: the least b with k 2^b >= n
    while ((k << b) < elements)
      ++b;
    int64_t codes = codec == Codec::topk_int4 ? (k + 1) / 2 : k;
    return codes + 4 * ((k + block - 1) / block) + (k * (b + 2) + 7) / 8;
  }
  }
  return elements * elementBytes;
}

/// D8/D9: the plain type, the codec's parameters and the encoded size.
static LogicalResult verifyCodec(Operation *op, RankedTensorType plain, Codec codec,
                                 FloatAttr ratioAttr, IntegerAttr blockAttr,
                                 RankedTensorType encoded, StringRef rule) {
  if (!plain.hasStaticShape())
    return op->emitOpError() << rule << ": the plain value needs a static shape";
  auto elt = dyn_cast<FloatType>(plain.getElementType());
  if (!elt)
    return op->emitOpError() << rule << ": codecs encode float tensors, got "
                             << plain.getElementType();
  double ratio = 1;
  bool topk = codec == Codec::topk || codec == Codec::topk_int8 || codec == Codec::topk_int4;
  if (topk) {
    if (!ratioAttr || !(ratioAttr.getValueAsDouble() > 0) ||
        ratioAttr.getValueAsDouble() > 1)
      return op->emitOpError() << rule << ": " << stringifyCodec(codec)
                               << " needs a ratio in (0, 1]";
    ratio = ratioAttr.getValueAsDouble();
  } else if (ratioAttr) {
    return op->emitOpError() << rule << ": only topk, topk_int8 and topk_int4 take a ratio";
  }
  int64_t block = 256;
  if (blockAttr) {
    if (codec == Codec::topk || codec == Codec::fp16 || codec == Codec::bf16)
      return op->emitOpError() << rule
                               << ": only the quantizing codecs (int8, int4, int3, int2, "
                                  "topk_int8, topk_int4, aqsgd_int2/3/4) take a block size";
    block = blockAttr.getInt();
    if (block < 1)
      return op->emitOpError() << rule << ": the block size must be positive, got "
                               << block;
  }
  int64_t bytes = encodedByteCount(codec, plain.getNumElements(),
                                   (elt.getWidth() + 7) / 8, ratio, block);
  if (encoded.getRank() != 1 || encoded.getDimSize(0) != bytes)
    return op->emitOpError() << rule << ": codec '" << stringifyCodec(codec) << "' encodes "
                             << plain << " in " << bytes << " bytes (tensor<" << bytes
                             << "xi8>), not " << encoded;
  return success();
}

static bool isAqSgd(Codec codec) {
  return codec == Codec::aqsgd_int2 || codec == Codec::aqsgd_int3 || codec == Codec::aqsgd_int4;
}

LogicalResult CompressOp::verify() {
  // D8: AQ-SGD keeps state per dataset sample at both ends of a cut: it
  // encodes activations for a dist.send, never a residual or an all-reduce.
  if (isAqSgd(getCodec())) {
    if (getErrorFeedback())
      return emitOpError() << "D8: " << stringifyCodec(getCodec())
                           << " keeps per-sample state, not an error-feedback residual";
    for (Operation *user : getEncoded().getUsers())
      if (!isa<SendOp>(user))
        return emitOpError() << "D8: " << stringifyCodec(getCodec())
                             << " encodes pipeline activations for a dist.send, not for '"
                             << user->getName() << "'";
  }
  return verifyCodec(*this, cast<RankedTensorType>(getValue().getType()), getCodec(),
                     getRatioAttr(), getBlockAttr(),
                     cast<RankedTensorType>(getEncoded().getType()), "D8");
}

LogicalResult DecompressOp::verify() {
  return verifyCodec(*this, cast<RankedTensorType>(getResult().getType()), getCodec(),
                     getRatioAttr(), getBlockAttr(),
                     cast<RankedTensorType>(getEncoded().getType()), "D9");
}

#define GET_OP_CLASSES
#include "strait/Dialect/Dist/DistOps.cpp.inc"
