//===- CodecLayout.h - Payload layout and element codes of the codecs -*- C++ -*-===//
//
// What the host codecs (Codec.cpp) and the device codecs (lib/cuda/Codec.cu)
// must agree on byte for byte: the 16-byte header, the sections of each
// payload, and the per-element arithmetic (block scales, quantization,
// float -> fp16/bf16 rounding, dequantization). Every function is inline and
// usable from CUDA device code (STRAIT_HD), so both sides compile the same
// source; the arithmetic uses explicitly rounded operations on the device
// (no fused multiply-add), so results are bitwise equal.
//
// Payload (little-endian):
//   byte 0 magic 0xC5, 1 codec, 2 top-k index encoding, 3 layout version (1)
//   bytes 4-7 u32 block size (INT8/INT4) else 0, bytes 8-15 u64 numel
//   TOPK: u64 k, k f32 values, the indices; INT8/INT4: ceil(numel/block) f32
//   scales, then the codes; FP16/BF16: numel u16; NONE: numel f32.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CODEC_CODECLAYOUT_H
#define STRAIT_RUNTIME_LIB_CODEC_CODECLAYOUT_H

#include <cstdint>
#include <cstring>
#include <string>

#include "strait/runtime/HostDevice.h"

namespace strait {
namespace rt {
namespace codec {

constexpr uint8_t kMagic = 0xC5;
constexpr uint8_t kLayoutVersion = 1;
constexpr uint64_t kHeaderBytes = 16;
/// Bits of the NaN scale of a block holding a non-finite value.
constexpr uint32_t kNaNScaleBits = 0x7fc00000u;

// --- Explicitly rounded arithmetic (no contraction into FMA on the device) --
STRAIT_HD inline float mulRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
STRAIT_HD inline float addRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
STRAIT_HD inline float subRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
STRAIT_HD inline float divRn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}

STRAIT_HD inline uint32_t floatBits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
STRAIT_HD inline float bitsFloat(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// --- Sections ----------------------------------------------------------------

STRAIT_HD inline int64_t numBlocks(int64_t numel, uint32_t block) {
  return (numel + block - 1) / block;
}

/// Byte size and section offsets of a fixed-size payload (every codec but
/// top-k): `scales` (INT8/INT4 only) and `data` (raw f32, u16 or codes).
struct FixedLayout {
  uint64_t scales = kHeaderBytes, data = kHeaderBytes, bytes = kHeaderBytes;
};
/// codec: program::Codec's number (NONE 0, FP16 2, INT8 3, INT4 4, BF16 5);
/// false for top-k or an unknown codec.
STRAIT_HD inline bool fixedLayout(int codec, int64_t numel, uint32_t block, FixedLayout &l) {
  l = FixedLayout();
  uint64_t n = static_cast<uint64_t>(numel);
  switch (codec) {
  case 0: l.bytes = kHeaderBytes + 4 * n; return true;
  case 2:
  case 5: l.bytes = kHeaderBytes + 2 * n; return true;
  case 3:
  case 4:
    l.data = kHeaderBytes + 4 * static_cast<uint64_t>(numBlocks(numel, block));
    l.bytes = l.data + (codec == 4 ? (n + 1) / 2 : n);
    return true;
  default: return false;
  }
}

/// Top-k: the u64 k after the header, k f32 values, then the indices.
STRAIT_HD inline uint64_t topkValuesOffset() { return kHeaderBytes + 8; }
STRAIT_HD inline uint64_t topkIndicesOffset(uint64_t k) { return kHeaderBytes + 8 + 4 * k; }
/// The top-k index encoding (1 u32 indices, 2 u16 gaps, 3 bitmap) of the
/// fewest bytes, from the byte sizes of the three (sizes[encoding - 1]); a
/// tie goes to the lower number, as the host codec (Codec.cpp) chooses.
/// Sets `bytes` to the chosen size.
STRAIT_HD inline int smallestIndexEncoding(const uint64_t sizes[3], uint64_t &bytes) {
  int encoding = 1;
  bytes = sizes[0];
  if (sizes[1] < bytes)
    encoding = 2, bytes = sizes[1];
  if (sizes[2] < bytes)
    encoding = 3, bytes = sizes[2];
  return encoding;
}

/// Writes the 16-byte header.
STRAIT_HD inline void writeHeader(uint8_t *out, int codec, int indexEncoding, uint32_t block,
                                  int64_t numel) {
  out[0] = kMagic;
  out[1] = static_cast<uint8_t>(codec);
  out[2] = static_cast<uint8_t>(indexEncoding);
  out[3] = kLayoutVersion;
  for (int i = 0; i < 4; ++i)
    out[4 + i] = static_cast<uint8_t>(block >> (8 * i));
  uint64_t n = static_cast<uint64_t>(numel);
  for (int i = 0; i < 8; ++i)
    out[8 + i] = static_cast<uint8_t>(n >> (8 * i));
}

// --- Element codes -------------------------------------------------------------

/// Block scale from the block's max |x| and whether it held a non-finite
/// value: max / qmax, NaN for a non-finite block (it decodes to NaN instead
/// of silently to zero).
STRAIT_HD inline float blockScale(float maxAbs, bool nonFinite, float qmax) {
  return nonFinite ? bitsFloat(kNaNScaleBits) : divRn(maxAbs, qmax);
}
STRAIT_HD inline bool isNonFinite(float x) {
  return (floatBits(x) & 0x7f800000u) == 0x7f800000u;
}

/// Round to nearest even of |v| <= 2^22 with plain float adds.
STRAIT_HD inline float roundEven(float v) {
  const float magic = 12582912.0f; // 1.5 * 2^23
  return subRn(addRn(v, magic), magic);
}

/// The code of x in a block of `scale` (`inv` = 1 / scale): 0 for a zero or
/// NaN scale, x * inv when the scale is normal, x / scale when it is
/// subnormal (1 / scale overflows); clamped to [-qmax, qmax], rounded to
/// nearest even.
STRAIT_HD inline int8_t quantizeCode(float x, float scale, float inv, float qmax) {
  if (!(scale > 0.0f))
    return 0;
  float v = scale >= 1.17549435e-38f ? mulRn(x, inv) : divRn(x, scale);
  v = v < -qmax ? -qmax : v;
  v = v > qmax ? qmax : v;
  return static_cast<int8_t>(roundEven(v));
}
/// 1 / scale as the quantizer uses it.
STRAIT_HD inline float inverseScale(float scale) { return divRn(1.0f, scale); }

/// Two's-complement nibble `nib` (0..15) as -8..7.
STRAIT_HD inline int nibbleValue(int nib) { return nib >= 8 ? nib - 16 : nib; }
STRAIT_HD inline uint8_t packNibbles(int8_t lo, int8_t hi) {
  return static_cast<uint8_t>((lo & 0x0F) | ((hi & 0x0F) << 4));
}
STRAIT_HD inline float dequantize(int q, float scale) {
  return mulRn(static_cast<float>(q), scale);
}

/// Round to nearest even (F. Giesen's float_to_half_fast3_rtne).
STRAIT_HD inline uint16_t floatToHalf(float f) {
  uint32_t x = floatBits(f);
  const uint32_t f32infty = 255u << 23, f16max = (127u + 16) << 23;
  const uint32_t denormMagic = ((127u - 15) + (23 - 10) + 1) << 23;
  uint32_t sign = x & 0x80000000u;
  x ^= sign;
  uint16_t o;
  if (x >= f16max) {
    o = x > f32infty ? 0x7e00 : 0x7c00;
  } else if (x < (113u << 23)) {
    float v = addRn(bitsFloat(x), bitsFloat(denormMagic));
    o = static_cast<uint16_t>(floatBits(v) - denormMagic);
  } else {
    uint32_t mantOdd = (x >> 13) & 1;
    x += ((15u - 127u) << 23) + 0xfff;
    x += mantOdd;
    o = static_cast<uint16_t>(x >> 13);
  }
  return static_cast<uint16_t>(o | (sign >> 16));
}

STRAIT_HD inline float halfToFloat(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  if (exp == 0) // subnormal: mant * 2^-24, exact in f32
    return bitsFloat(floatBits(mulRn(static_cast<float>(mant), 5.9604644775390625e-8f)) | sign);
  if (exp == 31)
    return bitsFloat(sign | 0x7f800000u | (mant << 13));
  return bitsFloat(sign | ((exp + 112) << 23) | (mant << 13));
}

STRAIT_HD inline uint16_t floatToBFloat16(float f) {
  uint32_t u = floatBits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((u >> 16) | 0x40); // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}

STRAIT_HD inline float bfloat16ToFloat(uint16_t h) { return bitsFloat(uint32_t(h) << 16); }

// --- Per-element encoders and decoder (the device kernels' bodies) -----------

/// Code of element i of an INT8 payload with the block scales.
STRAIT_HD inline int8_t int8Code(const float *x, int64_t i, uint32_t block, const float *scales) {
  float scale = scales[i / block];
  return quantizeCode(x[i], scale, inverseScale(scale), 127.0f);
}
/// Byte j of an INT4 payload: elements 2j (low nibble) and 2j + 1.
STRAIT_HD inline uint8_t int4Byte(const float *x, int64_t numel, int64_t j, uint32_t block,
                                  const float *scales) {
  int8_t q[2] = {0, 0};
  for (int h = 0; h < 2; ++h) {
    int64_t i = 2 * j + h;
    if (i < numel) {
      float scale = scales[i / block];
      q[h] = quantizeCode(x[i], scale, inverseScale(scale), 7.0f);
    }
  }
  return packNibbles(q[0], q[1]);
}

/// Element i of a fixed-layout payload (codec numbers as in fixedLayout;
/// `block` from the header; the payload's size checked by the caller).
STRAIT_HD inline float decodeElement(const uint8_t *p, int codec, int64_t numel, uint32_t block,
                                     int64_t i) {
  FixedLayout l;
  fixedLayout(codec, numel, block, l);
  const uint8_t *d = p + l.data;
  switch (codec) {
  case 0: {
    uint32_t u = uint32_t(d[4 * i]) | uint32_t(d[4 * i + 1]) << 8 |
                 uint32_t(d[4 * i + 2]) << 16 | uint32_t(d[4 * i + 3]) << 24;
    return bitsFloat(u);
  }
  case 2:
  case 5: {
    uint16_t h = static_cast<uint16_t>(d[2 * i] | d[2 * i + 1] << 8);
    return codec == 2 ? halfToFloat(h) : bfloat16ToFloat(h);
  }
  default: {
    const uint8_t *sp = p + l.scales + 4 * (i / block);
    float scale = bitsFloat(uint32_t(sp[0]) | uint32_t(sp[1]) << 8 | uint32_t(sp[2]) << 16 |
                            uint32_t(sp[3]) << 24);
    int q = codec == 4 ? nibbleValue((d[i >> 1] >> ((i & 1) * 4)) & 0x0F)
                       : static_cast<int8_t>(d[i]);
    return dequantize(q, scale);
  }
  }
}

/// Why a received fixed-layout payload (its first 16 bytes at `h`) does not
/// fit a receive of `numel` elements with `codec` (and, for INT8/INT4,
/// `block`), or "" when it does: the device receive checks this before it
/// decodes with the header's block size (the size was checked by the
/// transport).
inline std::string fixedHeaderMismatch(const uint8_t *h, int codec, int64_t numel,
                                       uint32_t block) {
  uint32_t hb = 0;
  uint64_t hn = 0;
  for (int i = 0; i < 4; ++i)
    hb |= uint32_t(h[4 + i]) << (8 * i);
  for (int i = 0; i < 8; ++i)
    hn |= uint64_t(h[8 + i]) << (8 * i);
  if (h[0] != kMagic)
    return "corrupt codec payload: bad magic byte " + std::to_string(h[0]);
  if (h[3] != kLayoutVersion)
    return "corrupt codec payload: unknown layout version " + std::to_string(h[3]);
  if (h[1] != codec)
    return "peer sent a payload of codec " + std::to_string(h[1]) + ", this rank expects codec " +
           std::to_string(codec);
  if (h[2] != 0)
    return "corrupt codec payload: index encoding set on a fixed-size codec";
  if (hn != static_cast<uint64_t>(numel))
    return "corrupt codec payload: payload holds " + std::to_string(hn) +
           " elements, the destination " + std::to_string(numel);
  if ((codec == 3 || codec == 4) && hb != block)
    return "peer quantized in blocks of " + std::to_string(hb) + ", this rank expects " +
           std::to_string(block);
  return "";
}

// --- Top-k selection by radix search (the device codec's algorithm) -----------
//
// The k-th largest magnitude key (bits & 0x7fffffff: their integer order is
// the order of |x|, NaN above inf) is found digit by digit, 8 bits at a time
// from the top: a histogram of the digit over the keys that match the digits
// fixed so far, then radixPick. Afterwards `prefix` is that key and
// `remaining` the number of keys equal to it to keep; the kept elements are
// those above it and the first `remaining` equal ones by index (the host
// codec's rule).

struct RadixSelect {
  uint32_t prefix = 0, mask = 0;
  int64_t remaining = 0; // starts at k
};

STRAIT_HD inline uint32_t magnitudeKey(float f) { return floatBits(f) & 0x7fffffffu; }
STRAIT_HD inline bool radixMatches(const RadixSelect &st, uint32_t key) {
  return (key & st.mask) == st.prefix;
}
STRAIT_HD inline int radixDigit(uint32_t key, int shift) { return (key >> shift) & 0xFF; }
/// Fixes the digit at `shift` from the histogram of the matching keys.
STRAIT_HD inline void radixPick(RadixSelect &st, int shift, const uint32_t *hist) {
  int64_t above = 0;
  int digit = 0;
  for (int b = 255; b >= 0; --b) {
    if (above + hist[b] >= st.remaining) {
      digit = b;
      break;
    }
    above += hist[b];
  }
  st.remaining -= above;
  st.prefix |= uint32_t(digit) << shift;
  st.mask |= 0xFFu << shift;
}
/// Whether an element is kept; `tieRank`: how many keys equal to the
/// threshold precede it.
STRAIT_HD inline bool topkKeep(const RadixSelect &st, uint32_t key, uint64_t tieRank) {
  return key > st.prefix || (key == st.prefix && int64_t(tieRank) < st.remaining);
}
/// u16 words of a kept index `gap` elements after the previous one (u16 gap
/// encoding: one 0xFFFF per 65535, then the rest).
STRAIT_HD inline uint64_t gapWords(uint64_t gap) { return gap / 0xFFFF + 1; }

} // namespace codec
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CODEC_CODECLAYOUT_H
