//===- DistOps.h - Distribution dialect ops ---------------------*- C++ -*-===//

#ifndef STRAIT_DIALECT_DIST_DISTOPS_H
#define STRAIT_DIALECT_DIST_DISTOPS_H

#include "strait/Dialect/Dist/DistAttrs.h"
#include "strait/Dialect/Dist/DistDialect.h"

#include "mlir/Bytecode/BytecodeOpInterface.h"
#include "mlir/IR/BuiltinTypes.h"
#include "mlir/IR/OpDefinition.h"
#include "mlir/Interfaces/SideEffectInterfaces.h"

#define GET_OP_CLASSES
#include "strait/Dialect/Dist/DistOps.h.inc"

namespace strait::dist {
/// Bytes `codec` encodes `elements` values of `elementBytes` each into (D8):
/// fp16/bf16 2n, int8 n + 4 ceil(n/block), int4 ceil(n/2) + 4 ceil(n/block),
/// topk ceil(ratio n) (elementBytes + 4), topk_int8/topk_int4 with
/// k = ceil(ratio n): k resp. ceil(k/2) + 4 ceil(k/block) + ceil(k (b+2) / 8),
/// b the least with k 2^b >= n (the most the runtime's payload takes without
/// its 24 bytes of header and k, runtime/include/strait/runtime/Codec.h
/// topkQuantizedBytes). The planner's size model
/// (strait/Analysis/Compression.h, encodedBytes) is the same rule.
int64_t encodedByteCount(Codec codec, int64_t elements, int64_t elementBytes,
                         double ratio = 1, int64_t block = 256);
} // namespace strait::dist

#endif // STRAIT_DIALECT_DIST_DISTOPS_H
