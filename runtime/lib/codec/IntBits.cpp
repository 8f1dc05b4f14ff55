//===- IntBits.cpp - 2- and 3-bit block quantization (CODEC_INT2/INT3) ----===//
#include "IntBits.h"

#include "CodecLayout.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace strait {
namespace rt {
namespace intbits {

namespace {
/// The codes' range: -2^(bits-1) .. 2^(bits-1) - 1 (all of two's complement).
float codeMin(int bits) { return -static_cast<float>(1 << (bits - 1)); }
float codeMax(int bits) { return static_cast<float>((1 << (bits - 1)) - 1); }
/// Candidate scales per block: max |x| / codeMax times j / kSteps, j = kSteps
/// down to kMinStep, each with both signs. Scales below half the max-|x| one
/// (clipping the block's largest values hard) fit Gaussian data better but
/// cost AQ-SGD's 2-bit deltas loss on some data orders (docs/benchmarks.md).
constexpr int kSteps = 20, kMinStep = 10;

/// The code of x under `scale` (non-zero, finite; `inv` = 1 / scale): x / scale
/// (x * inv for a normal scale, as quantizeCode), clamped to [lo, hi], rounded
/// to nearest even.
int codeOf(float x, float scale, float inv, float lo, float hi) {
  float v = std::fabs(scale) >= 1.17549435e-38f ? codec::mulRn(x, inv) : codec::divRn(x, scale);
  v = v < lo ? lo : v;
  v = v > hi ? hi : v;
  return static_cast<int>(codec::roundEven(v));
}

/// The block's scale of the least squared error over the candidates (the
/// first on a tie): a positive scale puts the extra code (-2^(bits-1)) on
/// the negative side, a negative scale on the positive side.
float bestScale(int bits, const float *x, int64_t n, float maxAbs) {
  float lo = codeMin(bits), hi = codeMax(bits);
  float best = 0.0f, bestErr = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    bestErr += x[i] * x[i]; // all codes zero
  for (int j = kSteps; j >= kMinStep; --j)
    for (float sign : {1.0f, -1.0f}) {
      float scale = sign * (maxAbs / hi) * (static_cast<float>(j) / kSteps);
      if (!(std::fabs(scale) > 0.0f))
        continue;
      float inv = codec::inverseScale(scale), err = 0.0f;
      for (int64_t i = 0; i < n && err < bestErr; ++i) {
        float d = codec::dequantize(codeOf(x[i], scale, inv, lo, hi), scale) - x[i];
        err += d * d;
      }
      if (err < bestErr)
        best = scale, bestErr = err;
    }
  return best;
}
} // namespace

uint64_t bodyBytes(int bits, int64_t numel, uint32_t block) {
  uint64_t n = static_cast<uint64_t>(numel);
  return 4ull * codec::numBlocks(numel, block) + (n * bits + 7) / 8;
}

void encode(int bits, const float *x, int64_t numel, uint32_t block, uint8_t *out) {
  float lo = codeMin(bits), hi = codeMax(bits);
  int64_t nb = codec::numBlocks(numel, block);
  std::vector<float> scales(nb);
  for (int64_t b = 0; b < nb; ++b) {
    int64_t first = b * block, last = std::min<int64_t>(numel, first + block);
    float m = 0.0f;
    bool nonFinite = false;
    for (int64_t i = first; i < last; ++i) {
      m = std::max(m, std::fabs(x[i]));
      nonFinite |= codec::isNonFinite(x[i]);
    }
    scales[b] = nonFinite ? codec::blockScale(m, true, hi)
                          : bestScale(bits, x + first, last - first, m);
  }
  std::memcpy(out, scales.data(), 4 * nb);
  uint8_t *codes = out + 4 * nb;
  std::fill(codes, codes + (static_cast<uint64_t>(numel) * bits + 7) / 8, uint8_t(0));
  uint32_t mask = (1u << bits) - 1;
  uint64_t bit = 0;
  for (int64_t b = 0; b < nb; ++b) {
    float scale = scales[b];
    bool coded = std::fabs(scale) > 0.0f; // zero and NaN scales: codes 0
    float inv = coded ? codec::inverseScale(scale) : 0.0f;
    int64_t first = b * block, last = std::min<int64_t>(numel, first + block);
    for (int64_t i = first; i < last; ++i, bit += bits) {
      int q = coded ? codeOf(x[i], scale, inv, lo, hi) : 0;
      uint32_t c = static_cast<uint32_t>(q) & mask;
      codes[bit >> 3] |= static_cast<uint8_t>(c << (bit & 7));
      if ((bit & 7) + bits > 8)
        codes[(bit >> 3) + 1] |= static_cast<uint8_t>(c >> (8 - (bit & 7)));
    }
  }
}

Status decode(int bits, const uint8_t *body, uint64_t bytes, int64_t numel, uint32_t block,
              float *out, bool accumulate) {
  if (block == 0)
    return invalidArgument("corrupt codec payload: block size 0");
  uint64_t expect = bodyBytes(bits, numel, block);
  if (bytes != expect)
    return invalidArgument("corrupt codec payload: " + std::to_string(bytes + codec::kHeaderBytes) +
                           " bytes, int" + std::to_string(bits) + " of " +
                           std::to_string(numel) + " elements in blocks of " +
                           std::to_string(block) + " needs " +
                           std::to_string(expect + codec::kHeaderBytes));
  int64_t nb = codec::numBlocks(numel, block);
  std::vector<float> scales(nb);
  std::memcpy(scales.data(), body, 4 * nb);
  const uint8_t *codes = body + 4 * nb;
  uint32_t mask = (1u << bits) - 1, sign = 1u << (bits - 1);
  uint64_t bit = 0;
  for (int64_t b = 0; b < nb; ++b) {
    int64_t lo = b * block, hi = std::min<int64_t>(numel, lo + block);
    for (int64_t i = lo; i < hi; ++i, bit += bits) {
      uint32_t c = codes[bit >> 3] >> (bit & 7);
      if ((bit & 7) + bits > 8)
        c |= static_cast<uint32_t>(codes[(bit >> 3) + 1]) << (8 - (bit & 7));
      c &= mask;
      int q = (c & sign) ? static_cast<int>(c) - static_cast<int>(1u << bits) : static_cast<int>(c);
      float v = codec::dequantize(q, scales[b]);
      out[i] = accumulate ? out[i] + v : v;
    }
  }
  return Status::ok();
}

} // namespace intbits
} // namespace rt
} // namespace strait
