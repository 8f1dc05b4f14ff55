//===- IntBits.h - 2- and 3-bit block quantization (CODEC_INT2/INT3) --*- C++ -*-===//
//
// The body of an INT2 / INT3 payload (after the 16-byte header): one f32
// scale per block of `block` elements (max |x| / qmax, qmax = 1 resp. 3; a
// NaN scale for a block holding a non-finite value), then the codes, each
// round-to-nearest-even of x / scale clamped to [-qmax, qmax], `bits` bits of
// two's complement, packed least significant bit first across bytes. The
// per-element arithmetic is CodecLayout.h's, as for INT8/INT4.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CODEC_INTBITS_H
#define STRAIT_RUNTIME_LIB_CODEC_INTBITS_H

#include "strait/runtime/Status.h"

#include <cstddef>
#include <cstdint>

namespace strait {
namespace rt {
namespace intbits {

/// Bytes after the header: 4 ceil(numel / block) + ceil(bits numel / 8).
uint64_t bodyBytes(int bits, int64_t numel, uint32_t block);

/// Writes the body of `numel` floats to `out` (bodyBytes of room).
void encode(int bits, const float *x, int64_t numel, uint32_t block, uint8_t *out);

/// Decodes a body of `bytes` bytes (checked against bodyBytes) into `out`;
/// with `accumulate` adds to it.
Status decode(int bits, const uint8_t *body, uint64_t bytes, int64_t numel, uint32_t block,
              float *out, bool accumulate);

} // namespace intbits
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CODEC_INTBITS_H
