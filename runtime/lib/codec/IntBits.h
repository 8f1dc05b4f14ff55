//===- IntBits.h - 2- and 3-bit block quantization (CODEC_INT2/INT3) --*- C++ -*-===//
//
// The body of an INT2 / INT3 payload (after the 16-byte header): one f32
// scale per block of `block` elements, then the codes, `bits` bits of two's
// complement (all of -2^(bits-1) .. 2^(bits-1) - 1: -2..1 resp. -4..3),
// packed least significant bit first across bytes; an element decodes to
// code * scale. The encoder picks each block's scale of the least squared
// error among +-(max |x| / qmax) j / 20, j = 20..10 (qmax = 1 resp. 3; the sign
// puts the extra negative code on the side that needs it), codes
// round-to-nearest-even of x / scale, clamped; a NaN scale for a block
// holding a non-finite value, 0 for an all-zero block. The per-element
// arithmetic is CodecLayout.h's, as for INT8/INT4.
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
