//===- Codec.cpp - Compression of float32 transfers -----------------------===//
//
// Payload layout (little-endian), docs/runtime.md "Codecs", in
// CodecLayout.h with the per-element arithmetic that the device codecs
// (lib/cuda/Codec.cu) share:
//   byte 0      magic 0xC5
//   byte 1      codec (program::Codec)
//   byte 2      top-k index encoding (TopKIndexEncoding), else 0
//   byte 3      layout version (1)
//   bytes 4-7   u32 block size (INT8/INT4), else 0
//   bytes 8-15  u64 numel
//   TOPK:       u64 k, k f32 values, then the indices
//   INT8/INT4:  ceil(numel/block) f32 scales, then the codes
//   FP16/BF16:  numel u16;   NONE: numel f32
//   TOPK_INT8/TOPK_INT4: u64 k, ceil(k/block) f32 scales of the kept values,
//               k int8 / ceil(k/2) int4 codes, then ceil(k (b+2) / 8)
//               bytes of Rice-coded gaps (b = riceParameter(numel, k)), or
//               fewer bytes of Elias-gamma-coded gaps where those are fewer
// Loops are written over plain arrays so that the compiler vectorizes them;
// large tensors are split over the thread pool.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Codec.h"
#include "strait/runtime/ThreadPool.h"
#include "strait/runtime/Trace.h"
#include "CodecLayout.h"
#include "IntBits.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

namespace strait {
namespace rt {
namespace {

using codec::kLayoutVersion;
using codec::kMagic;
using codec::numBlocks;
using codec::roundEven;
constexpr int64_t kGrain = 1 << 16;
constexpr uint32_t kMaxBlock = kMaxCodecBlock;
static_assert(codec::kHeaderBytes == kCodecHeaderBytes, "one header size");

template <typename T> void put(std::vector<uint8_t> &out, size_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}
template <typename T> T get(const uint8_t *p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

void writeHeader(std::vector<uint8_t> &out, program::Codec kind,
                 TopKIndexEncoding index, uint32_t block, int64_t numel) {
  codec::writeHeader(out.data(), kind, static_cast<int>(index), block, numel);
}

Status corrupt(const std::string &what) {
  return invalidArgument("corrupt codec payload: " + what);
}

// --- INT8 / INT4 -----------------------------------------------------------

/// Per block: scale = max|x| / qmax (NaN when the block holds a non-finite
/// value, so that it decodes to NaN instead of silently to zero).
void computeScales(const float *x, int64_t numel, uint32_t block, float qmax,
                   float *scales) {
  int64_t nb = numBlocks(numel, block);
  parallelFor(nb, std::max<int64_t>(1, kGrain / block), [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      int64_t lo = b * block, hi = std::min<int64_t>(numel, lo + block);
      float m = 0.0f;
      uint32_t nonFinite = 0;
      for (int64_t i = lo; i < hi; ++i) {
        float a = std::fabs(x[i]);
        m = a > m ? a : m;
        nonFinite |= codec::isNonFinite(x[i]);
      }
      scales[b] = codec::blockScale(m, nonFinite, qmax);
    }
  });
}

/// Quantizes `count` values of one block with its scale into q (one code
/// per element): codec::quantizeCode, with the branches on the scale taken
/// once so that the loops vectorize (roundEven uses plain float adds, no
/// roundps).
void quantizeSegment(const float *x, int64_t count, float scale, float qmax, int8_t *q) {
  if (!(scale > 0.0f)) { // all zero, or NaN (non-finite block)
    std::fill(q, q + count, int8_t(0));
  } else if (scale >= std::numeric_limits<float>::min()) {
    float inv = 1.0f / scale;
    for (int64_t i = 0; i < count; ++i) {
      float v = x[i] * inv;
      v = v < -qmax ? -qmax : v;
      v = v > qmax ? qmax : v;
      q[i] = static_cast<int8_t>(roundEven(v));
    }
  } else { // subnormal scale: 1/scale overflows, divide instead
    for (int64_t i = 0; i < count; ++i) {
      float v = x[i] / scale;
      v = v < -qmax ? -qmax : v;
      v = v > qmax ? qmax : v;
      q[i] = static_cast<int8_t>(roundEven(v));
    }
  }
}

/// Quantizes x[lo, hi) with the block scales into q (one code per element).
void quantizeRange(const float *x, int64_t lo, int64_t hi, uint32_t block,
                   const float *scales, float qmax, int8_t *q) {
  for (int64_t s = lo; s < hi;) {
    int64_t b = s / block;
    int64_t e = std::min<int64_t>(hi, (b + 1) * block);
    quantizeSegment(x + s, e - s, scales[b], qmax, q + (s - lo));
    s = e;
  }
}

void encodeInt8(const float *x, int64_t numel, uint32_t block,
                std::vector<uint8_t> &out, size_t at) {
  std::vector<float> sc(numBlocks(numel, block));
  computeScales(x, numel, block, 127.0f, sc.data());
  std::memcpy(out.data() + at, sc.data(), sc.size() * 4);
  int8_t *codes = reinterpret_cast<int8_t *>(out.data() + at + sc.size() * 4);
  parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
    quantizeRange(x, lo, hi, block, sc.data(), 127.0f, codes + lo);
  });
}

void encodeInt4(const float *x, int64_t numel, uint32_t block,
                std::vector<uint8_t> &out, size_t at) {
  std::vector<float> sc(numBlocks(numel, block));
  computeScales(x, numel, block, 7.0f, sc.data());
  std::memcpy(out.data() + at, sc.data(), sc.size() * 4);
  uint8_t *packed = out.data() + at + sc.size() * 4;
  int64_t bytes = (numel + 1) / 2;
  parallelFor(bytes, kGrain / 2, [&](int64_t b0, int64_t b1) {
    int64_t lo = 2 * b0, hi = std::min<int64_t>(numel, 2 * b1);
    std::vector<int8_t> q(hi - lo + 1, 0);
    quantizeRange(x, lo, hi, block, sc.data(), 7.0f, q.data());
    for (int64_t b = b0; b < b1; ++b) {
      int64_t i = 2 * b - lo;
      packed[b] = codec::packNibbles(q[i], q[i + 1]);
    }
  });
}

Status decodeQuantized(const uint8_t *p, size_t bytes, int64_t numel,
                       uint32_t block, bool int4, float *out, bool accumulate) {
  if (block == 0 || block > kMaxBlock)
    return corrupt("block size " + std::to_string(block) + " out of range");
  int64_t nb = numBlocks(numel, block);
  uint64_t codeBytes = int4 ? (numel + 1) / 2 : numel;
  uint64_t expect = kCodecHeaderBytes + 4ull * nb + codeBytes;
  if (bytes != expect)
    return corrupt(std::to_string(bytes) + " bytes, " +
                   (int4 ? "int4" : "int8") + " of " + std::to_string(numel) +
                   " elements in blocks of " + std::to_string(block) + " needs " +
                   std::to_string(expect));
  std::vector<float> scales(nb);
  std::memcpy(scales.data(), p + kCodecHeaderBytes, nb * 4);
  const uint8_t *codes = p + kCodecHeaderBytes + nb * 4;
  parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t s = lo; s < hi;) {
      int64_t b = s / block;
      int64_t e = std::min<int64_t>(hi, (b + 1) * block);
      float scale = scales[b];
      for (int64_t i = s; i < e; ++i) {
        int q;
        if (int4) {
          int nib = (codes[i >> 1] >> ((i & 1) * 4)) & 0x0F;
          q = codec::nibbleValue(nib);
        } else {
          q = static_cast<int8_t>(codes[i]);
        }
        float v = codec::dequantize(q, scale);
        out[i] = accumulate ? out[i] + v : v;
      }
      s = e;
    }
  });
  return Status::ok();
}

// --- FP16 / BF16 -----------------------------------------------------------

template <typename Fn>
void castOut(const float *x, int64_t numel, uint8_t *dst, Fn fn) {
  uint16_t *h = reinterpret_cast<uint16_t *>(dst);
  parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      h[i] = fn(x[i]);
  });
}

template <typename Fn>
void castIn(const uint8_t *src, int64_t numel, float *out, bool accumulate, Fn fn) {
  parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) {
      float v = fn(get<uint16_t>(src + 2 * i));
      out[i] = accumulate ? out[i] + v : v;
    }
  });
}

// --- TOPK ------------------------------------------------------------------

/// The k-th largest of the magnitude keys (bits & 0x7fffffff; their integer
/// order is the numeric order of |x|, NaN above inf). Large inputs: a sample
/// of 2^14 keys gives a lower bound that about k (1 + 3/sqrt(k)) keys pass;
/// one parallel pass collects those candidates and nth_element runs on them
/// only. If fewer than k pass (an unlucky sample), nth_element runs on all.
uint32_t kthLargestKey(const uint32_t *bits, int64_t numel, int64_t k) {
  auto exact = [&](std::vector<uint32_t> &keys, int64_t kk) {
    std::nth_element(keys.begin(), keys.begin() + (kk - 1), keys.end(),
                     std::greater<uint32_t>());
    return keys[kk - 1];
  };
  const int64_t samples = 1 << 14;
  if (numel < 16 * samples) {
    std::vector<uint32_t> keys(numel);
    for (int64_t i = 0; i < numel; ++i)
      keys[i] = bits[i] & 0x7fffffffu;
    return exact(keys, k);
  }
  std::vector<uint32_t> sample(samples);
  for (int64_t j = 0; j < samples; ++j) {
    // Multiplicative hashing spreads the sample over the tensor without
    // following a stride that could alias the data's structure.
    uint64_t i = (uint64_t(j) * 0x9E3779B97F4A7C15ull) % uint64_t(numel);
    sample[j] = bits[i] & 0x7fffffffu;
  }
  double expected = double(k) * samples / numel;
  int64_t rank = std::min<int64_t>(
      samples, int64_t(expected + 3.0 * std::sqrt(expected) + 16.0));
  uint32_t low = exact(sample, rank);
  int64_t chunks = (numel + kGrain - 1) / kGrain;
  std::vector<std::vector<uint32_t>> parts(chunks);
  parallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t lo = c * kGrain, hi = std::min(numel, lo + kGrain);
      for (int64_t i = lo; i < hi; ++i) {
        uint32_t key = bits[i] & 0x7fffffffu;
        if (key >= low)
          parts[c].push_back(key);
      }
    }
  });
  std::vector<uint32_t> candidates;
  for (auto &part : parts)
    candidates.insert(candidates.end(), part.begin(), part.end());
  if (static_cast<int64_t>(candidates.size()) >= k)
    return exact(candidates, k);
  std::vector<uint32_t> keys(numel);
  for (int64_t i = 0; i < numel; ++i)
    keys[i] = bits[i] & 0x7fffffffu;
  return exact(keys, k);
}

/// Selects the k largest |x| (NaN counts as largest; ties go to the lower
/// index) and returns their indices in increasing order. Linear expected
/// time: the k-th largest magnitude key (kthLargestKey), then one scan.
std::vector<uint32_t> selectTopK(const float *x, int64_t numel, int64_t k) {
  std::vector<uint32_t> idx;
  idx.reserve(k);
  if (k >= numel) {
    for (int64_t i = 0; i < numel; ++i)
      idx.push_back(static_cast<uint32_t>(i));
    return idx;
  }
  const uint32_t *bits = reinterpret_cast<const uint32_t *>(x);
  uint32_t threshold = kthLargestKey(bits, numel, k);
  // Elements above the threshold are all kept; ties at the threshold fill
  // the remaining places from the lowest index.
  int64_t greater = 0;
  {
    int64_t blocks = (numel + kGrain - 1) / kGrain;
    std::vector<int64_t> partial(blocks, 0);
    parallelFor(blocks, 1, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        int64_t c = 0, hi = std::min(numel, (b + 1) * kGrain);
        for (int64_t i = b * kGrain; i < hi; ++i)
          c += (bits[i] & 0x7fffffffu) > threshold;
        partial[b] = c;
      }
    });
    for (int64_t c : partial)
      greater += c;
  }
  int64_t equalLeft = k - greater;
  // Parallel scan: per chunk, count the elements above the threshold and
  // equal to it, then each chunk writes its indices at its prefix offset.
  int64_t chunks = std::max<int64_t>(1, std::min<int64_t>(getNumThreads() * 4, numel / kGrain));
  std::vector<int64_t> above(chunks, 0), equal(chunks, 0);
  auto chunkLo = [&](int64_t c) { return numel * c / chunks; };
  parallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t a = 0, e = 0;
      for (int64_t i = chunkLo(c); i < chunkLo(c + 1); ++i) {
        uint32_t key = bits[i] & 0x7fffffffu;
        a += key > threshold;
        e += key == threshold;
      }
      above[c] = a;
      equal[c] = e;
    }
  });
  std::vector<int64_t> offset(chunks), equalBefore(chunks);
  int64_t pos = 0, eq = 0;
  for (int64_t c = 0; c < chunks; ++c) {
    offset[c] = pos;
    equalBefore[c] = eq;
    int64_t takeEq = std::max<int64_t>(0, std::min(equal[c], equalLeft - eq));
    pos += above[c] + takeEq;
    eq += equal[c];
  }
  idx.resize(k);
  parallelFor(chunks, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      int64_t w = offset[c], e = equalBefore[c];
      for (int64_t i = chunkLo(c); i < chunkLo(c + 1); ++i) {
        uint32_t key = bits[i] & 0x7fffffffu;
        bool take = key > threshold || (key == threshold && e++ < equalLeft);
        if (take)
          idx[w++] = static_cast<uint32_t>(i);
      }
    }
  });
  return idx;
}

uint64_t u16GapBytes(const std::vector<uint32_t> &idx) {
  uint64_t words = 0;
  int64_t prev = -1;
  for (uint32_t i : idx) {
    uint64_t gap = static_cast<uint64_t>(int64_t(i) - prev - 1);
    words += gap / 0xFFFF + 1;
    prev = i;
  }
  return 2 * words;
}

void encodeTopK(const program::CodecParams &params, const float *x,
                int64_t numel, std::vector<uint8_t> &out) {
  int64_t k = numel ? topkCount(params, numel) : 0;
  std::vector<uint32_t> idx = selectTopK(x, numel, k);
  uint64_t u32Bytes = 4ull * k, bitmapBytes = (numel + 7) / 8;
  uint64_t gapBytes = u16GapBytes(idx);
  TopKIndexEncoding enc = TopKIndexEncoding::U32;
  uint64_t indexBytes = u32Bytes;
  if (gapBytes < indexBytes) {
    enc = TopKIndexEncoding::U16Gaps;
    indexBytes = gapBytes;
  }
  if (bitmapBytes < indexBytes) {
    enc = TopKIndexEncoding::Bitmap;
    indexBytes = bitmapBytes;
  }
  size_t at = kCodecHeaderBytes + 8;
  out.assign(at + 4ull * k + indexBytes, 0);
  writeHeader(out, program::CODEC_TOPK, enc, 0, numel);
  put<uint64_t>(out, kCodecHeaderBytes, static_cast<uint64_t>(k));
  float *values = reinterpret_cast<float *>(out.data() + at);
  for (int64_t j = 0; j < k; ++j)
    values[j] = x[idx[j]];
  uint8_t *ip = out.data() + at + 4 * k;
  switch (enc) {
  case TopKIndexEncoding::U32:
    std::memcpy(ip, idx.data(), 4 * k);
    break;
  case TopKIndexEncoding::Bitmap:
    for (uint32_t i : idx)
      ip[i >> 3] |= static_cast<uint8_t>(1u << (i & 7));
    break;
  default: {
    uint16_t *w = reinterpret_cast<uint16_t *>(ip);
    int64_t prev = -1;
    for (uint32_t i : idx) {
      uint64_t gap = static_cast<uint64_t>(int64_t(i) - prev - 1);
      for (; gap >= 0xFFFF; gap -= 0xFFFF)
        *w++ = 0xFFFF;
      *w++ = static_cast<uint16_t>(gap);
      prev = i;
    }
    break;
  }
  }
}

/// The kept (index, value) pairs of a TOPK payload.
Status topkEntries(const uint8_t *p, size_t bytes, int64_t numel, TopKIndexEncoding enc,
                   std::vector<uint32_t> &idx, std::vector<float> &vals) {
  if (bytes < kCodecHeaderBytes + 8)
    return corrupt("top-k payload of " + std::to_string(bytes) +
                   " bytes has no k field");
  uint64_t k = get<uint64_t>(p + kCodecHeaderBytes);
  if (k > static_cast<uint64_t>(numel))
    return corrupt("top-k keeps " + std::to_string(k) + " of " +
                   std::to_string(numel) + " elements");
  size_t at = kCodecHeaderBytes + 8;
  if (bytes < at + 4 * k)
    return corrupt(std::to_string(bytes) + " bytes cannot hold " +
                   std::to_string(k) + " top-k values");
  const uint8_t *vp = p + at;
  const uint8_t *ip = vp + 4 * k;
  uint64_t indexBytes = bytes - at - 4 * k;
  idx.clear();
  idx.reserve(k);
  switch (enc) {
  case TopKIndexEncoding::U32: {
    if (indexBytes != 4 * k)
      return corrupt("u32 indices: " + std::to_string(indexBytes) +
                     " bytes for k = " + std::to_string(k));
    int64_t prev = -1;
    for (uint64_t j = 0; j < k; ++j) {
      uint32_t i = get<uint32_t>(ip + 4 * j);
      if (int64_t(i) <= prev || int64_t(i) >= numel)
        return corrupt("index " + std::to_string(i) + " at position " +
                       std::to_string(j) + " is not increasing below numel " +
                       std::to_string(numel));
      idx.push_back(i);
      prev = i;
    }
    break;
  }
  case TopKIndexEncoding::Bitmap: {
    if (indexBytes != static_cast<uint64_t>((numel + 7) / 8))
      return corrupt("bitmap of " + std::to_string(indexBytes) +
                     " bytes for " + std::to_string(numel) + " elements");
    if (numel % 8 && (ip[numel / 8] >> (numel % 8)))
      return corrupt("bitmap marks elements past numel");
    // 64 bits at a time (little-endian, like the whole payload): zero words
    // are skipped, set bits found by ctz.
    for (uint64_t w = 0; w < indexBytes; w += 8) {
      uint64_t word = 0;
      std::memcpy(&word, ip + w, std::min<uint64_t>(8, indexBytes - w));
      for (; word; word &= word - 1) {
        if (idx.size() == k)
          return corrupt("bitmap marks more than k = " + std::to_string(k) +
                         " elements");
        idx.push_back(static_cast<uint32_t>(w * 8 + __builtin_ctzll(word)));
      }
    }
    break;
  }
  case TopKIndexEncoding::U16Gaps: {
    if (indexBytes % 2)
      return corrupt("odd number of bytes in u16 gap indices");
    uint64_t words = indexBytes / 2;
    int64_t pos = -1;
    uint64_t pending = 0;
    for (uint64_t w = 0; w < words; ++w) {
      uint16_t g = get<uint16_t>(ip + 2 * w);
      pending += g;
      if (g == 0xFFFF)
        continue;
      pos += int64_t(pending) + 1;
      pending = 0;
      if (pos >= numel || idx.size() == k)
        return corrupt("u16 gap indices run past numel or k");
      idx.push_back(static_cast<uint32_t>(pos));
    }
    if (pending)
      return corrupt("u16 gap indices end inside an escape");
    break;
  }
  default:
    return corrupt("unknown top-k index encoding " +
                   std::to_string(static_cast<int>(enc)));
  }
  if (idx.size() != k)
    return corrupt("top-k indices name " + std::to_string(idx.size()) +
                   " elements, header says k = " + std::to_string(k));
  vals.resize(k);
  std::memcpy(vals.data(), vp, 4 * k);
  return Status::ok();
}

// --- TOPK_INT8 / TOPK_INT4 ---------------------------------------------------

/// Rice-codes the gaps of the sorted positions `idx` with parameter b into
/// `out` (zeroed): per gap g (positions skipped since the previous one), g >> b
/// one bits, a zero bit, then the b low bits of g, least significant first;
/// bit j of the section is bit j % 8 of byte j / 8.
void writeRiceGaps(const std::vector<uint32_t> &idx, int b, uint8_t *out) {
  uint64_t bit = 0;
  int64_t prev = -1;
  for (uint32_t i : idx) {
    uint64_t gap = static_cast<uint64_t>(int64_t(i) - prev - 1);
    for (uint64_t q = gap >> b; q; --q, ++bit)
      out[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
    ++bit; // the zero that ends the unary part
    for (int j = 0; j < b; ++j, ++bit)
      if ((gap >> j) & 1)
        out[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
    prev = i;
  }
}

/// The k positions of Rice-coded gaps in `bytes` bytes at `p`; every gap
/// must stay below numel and the bits after the last gap must be zero.
Status readRiceGaps(const uint8_t *p, uint64_t bytes, int64_t numel, uint64_t k, int b,
                    std::vector<uint32_t> &idx) {
  uint64_t bits = 8 * bytes, bit = 0;
  auto get = [&](uint64_t at) { return (p[at >> 3] >> (at & 7)) & 1; };
  idx.clear();
  idx.reserve(k);
  int64_t pos = -1;
  for (uint64_t j = 0; j < k; ++j) {
    uint64_t q = 0;
    while (bit < bits && get(bit)) {
      ++q;
      ++bit;
    }
    if (bit + 1 + b > bits)
      return corrupt("Rice-coded gaps end at gap " + std::to_string(j) + " of k = " +
                     std::to_string(k));
    ++bit;
    if (q > static_cast<uint64_t>(numel) >> b)
      return corrupt("Rice-coded gap " + std::to_string(j) + " runs past numel " +
                     std::to_string(numel));
    uint64_t gap = q << b;
    for (int i = 0; i < b; ++i, ++bit)
      gap |= uint64_t(get(bit)) << i;
    pos += int64_t(gap) + 1;
    if (pos >= numel)
      return corrupt("Rice-coded gap " + std::to_string(j) + " runs past numel " +
                     std::to_string(numel));
    idx.push_back(static_cast<uint32_t>(pos));
  }
  for (; bit < bits; ++bit)
    if (get(bit))
      return corrupt("bits set after the last of k = " + std::to_string(k) +
                     " Rice-coded gaps");
  return Status::ok();
}

/// Bits of the Elias-gamma codes of the gaps of `idx`: v = gap + 1 in
/// 2 floor(log2 v) + 1 bits.
uint64_t gammaBits(const std::vector<uint32_t> &idx) {
  uint64_t bits = 0;
  int64_t prev = -1;
  for (uint32_t i : idx) {
    uint64_t v = static_cast<uint64_t>(int64_t(i) - prev);
    bits += 2 * uint64_t(63 - __builtin_clzll(v)) + 1;
    prev = i;
  }
  return bits;
}

/// Elias-gamma codes of the gaps into `out` (zeroed): per gap, v = gap + 1
/// as floor(log2 v) zero bits, then v's bits from the most significant;
/// the bit order of writeRiceGaps.
void writeGammaGaps(const std::vector<uint32_t> &idx, uint8_t *out) {
  uint64_t bit = 0;
  int64_t prev = -1;
  for (uint32_t i : idx) {
    uint64_t v = static_cast<uint64_t>(int64_t(i) - prev);
    int top = 63 - __builtin_clzll(v);
    bit += top;
    for (int j = top; j >= 0; --j, ++bit)
      if ((v >> j) & 1)
        out[bit >> 3] |= static_cast<uint8_t>(1u << (bit & 7));
    prev = i;
  }
}

/// The k positions of Elias-gamma-coded gaps in exactly `bytes` bytes at
/// `p` (the last code ends in the last byte; the bits after it are zero).
Status readGammaGaps(const uint8_t *p, uint64_t bytes, int64_t numel, uint64_t k,
                     std::vector<uint32_t> &idx) {
  uint64_t bits = 8 * bytes, bit = 0;
  auto get = [&](uint64_t at) { return (p[at >> 3] >> (at & 7)) & 1; };
  idx.clear();
  idx.reserve(k);
  int64_t pos = -1;
  for (uint64_t j = 0; j < k; ++j) {
    int zeros = 0;
    while (bit < bits && !get(bit) && zeros <= 32) {
      ++zeros;
      ++bit;
    }
    if (zeros > 32 || bit + zeros + 1 > bits)
      return corrupt("Elias-gamma gap " + std::to_string(j) + " of k = " + std::to_string(k) +
                     " runs past its section or 2^33");
    uint64_t v = 0;
    for (int i = 0; i <= zeros; ++i, ++bit)
      v = v << 1 | get(bit);
    pos += int64_t(v);
    if (pos >= numel)
      return corrupt("Elias-gamma gap " + std::to_string(j) + " runs past numel " +
                     std::to_string(numel));
    idx.push_back(static_cast<uint32_t>(pos));
  }
  if ((bit + 7) / 8 != bytes)
    return corrupt(std::to_string(bytes - (bit + 7) / 8) +
                   " bytes after the last of k = " + std::to_string(k) + " Elias-gamma gaps");
  for (; bit < bits; ++bit)
    if (get(bit))
      return corrupt("bits set after the last of k = " + std::to_string(k) +
                     " Elias-gamma gaps");
  return Status::ok();
}

/// Offsets of the sections of a TOPK_INT8/INT4 payload; `bytes` is the
/// size with Rice-coded gaps (the largest).
struct TopKQuantLayout {
  uint64_t scales, codes, indices, bytes;
};
TopKQuantLayout topkQuantLayout(bool int4, uint64_t numel, uint64_t k, uint32_t block) {
  TopKQuantLayout l;
  l.scales = kCodecHeaderBytes + 8;
  l.codes = l.scales + 4 * ((k + block - 1) / block);
  l.indices = l.codes + (int4 ? (k + 1) / 2 : k);
  l.bytes = topkQuantizedBytes(int4, numel, k, block);
  return l;
}

void encodeTopKQuantized(const program::CodecParams &params, const float *x, int64_t numel,
                         std::vector<uint8_t> &out) {
  bool int4 = params.codec() == program::CODEC_TOPK_INT4;
  uint32_t block = codecBlockSize(params);
  int64_t k = numel ? topkCount(params, numel) : 0;
  std::vector<uint32_t> idx = selectTopK(x, numel, k);
  TopKQuantLayout l = topkQuantLayout(int4, numel, k, block);
  // Elias-gamma where it is smaller than the Rice bound: clustered
  // positions (runs of gap 0), as real gradients' top-k has.
  uint64_t gammaBytes = (gammaBits(idx) + 7) / 8;
  bool gamma = l.indices + gammaBytes < l.bytes;
  out.assign(gamma ? l.indices + gammaBytes : l.bytes, 0);
  writeHeader(out, params.codec(), gamma ? TopKIndexEncoding::Gamma : TopKIndexEncoding::Rice,
              block, numel);
  put<uint64_t>(out, kCodecHeaderBytes, static_cast<uint64_t>(k));
  std::vector<float> values(k);
  for (int64_t j = 0; j < k; ++j)
    values[j] = x[idx[j]];
  float qmax = int4 ? 7.0f : 127.0f;
  int64_t nb = numBlocks(k, block);
  std::vector<float> scales(nb);
  computeScales(values.data(), k, block, qmax, scales.data());
  if (nb)
    std::memcpy(out.data() + l.scales, scales.data(), 4 * nb);
  std::vector<int8_t> q(k + 1, 0);
  quantizeRange(values.data(), 0, k, block, scales.data(), qmax, q.data());
  uint8_t *codes = out.data() + l.codes;
  if (int4)
    for (int64_t j = 0; j < k; j += 2)
      codes[j / 2] = codec::packNibbles(q[j], q[j + 1]);
  else if (k)
    std::memcpy(codes, q.data(), k);
  if (gamma)
    writeGammaGaps(idx, out.data() + l.indices);
  else
    writeRiceGaps(idx, riceParameter(numel, k), out.data() + l.indices);
}

/// The kept (index, value) pairs of a TOPK_INT8 / TOPK_INT4 payload.
Status topkQuantizedEntries(const uint8_t *p, size_t bytes, int64_t numel, bool int4,
                            TopKIndexEncoding enc, std::vector<uint32_t> &idx,
                            std::vector<float> &vals) {
  if (enc != TopKIndexEncoding::Rice && enc != TopKIndexEncoding::Gamma)
    return corrupt("index encoding " + std::to_string(static_cast<int>(enc)) +
                   " on a quantized top-k payload (expects 4, Rice, or 5, Elias-gamma)");
  uint32_t block = get<uint32_t>(p + 4);
  if (block == 0 || block > kMaxBlock)
    return corrupt("block size " + std::to_string(block) + " out of range");
  if (bytes < kCodecHeaderBytes + 8)
    return corrupt("top-k payload of " + std::to_string(bytes) + " bytes has no k field");
  uint64_t k = get<uint64_t>(p + kCodecHeaderBytes);
  if (k > static_cast<uint64_t>(numel) || (numel > 0 && k == 0))
    return corrupt("top-k keeps " + std::to_string(k) + " of " + std::to_string(numel) +
                   " elements");
  TopKQuantLayout l = topkQuantLayout(int4, numel, k, block);
  bool gamma = enc == TopKIndexEncoding::Gamma;
  if (gamma ? !(bytes > l.indices && bytes < l.bytes) : bytes != l.bytes)
    return corrupt(std::to_string(bytes) + " bytes, " + (int4 ? "int4" : "int8") +
                   " top-k of " + std::to_string(k) + " of " + std::to_string(numel) +
                   " elements in blocks of " + std::to_string(block) + " needs " +
                   (gamma ? "more than " + std::to_string(l.indices) + " and less than "
                          : std::string()) +
                   std::to_string(l.bytes));
  if (gamma)
    STRAIT_RETURN_IF_ERROR(readGammaGaps(p + l.indices, bytes - l.indices, numel, k, idx));
  else
    STRAIT_RETURN_IF_ERROR(readRiceGaps(p + l.indices, l.bytes - l.indices, numel, k,
                                        riceParameter(numel, k), idx));
  vals.resize(k);
  const uint8_t *codes = p + l.codes;
  for (uint64_t j = 0; j < k; ++j) {
    float scale = get<float>(p + l.scales + 4 * (j / block));
    int q = int4 ? codec::nibbleValue((codes[j >> 1] >> ((j & 1) * 4)) & 0x0F)
                 : static_cast<int8_t>(codes[j]);
    vals[j] = codec::dequantize(q, scale);
  }
  return Status::ok();
}

/// The (index, value) pairs of any top-k codec's payload (header checked).
Status topkFamilyEntries(const uint8_t *p, size_t bytes, int64_t numel, program::Codec codec,
                         std::vector<uint32_t> &idx, std::vector<float> &vals) {
  auto enc = static_cast<TopKIndexEncoding>(p[2]);
  if (codec == program::CODEC_TOPK)
    return topkEntries(p, bytes, numel, enc, idx, vals);
  return topkQuantizedEntries(p, bytes, numel, codec == program::CODEC_TOPK_INT4, enc, idx,
                              vals);
}

/// decode()'s checks of the header against the destination's numel.
StatusOr<program::Codec> checkedHeader(const uint8_t *p, size_t bytes, int64_t numel) {
  STRAIT_ASSIGN_OR_RETURN(program::Codec codec, payloadCodec(p, bytes));
  uint64_t n = get<uint64_t>(p + 8);
  if (numel < 0 || n != static_cast<uint64_t>(numel))
    return corrupt("payload holds " + std::to_string(n) +
                   " elements, the destination " + std::to_string(numel));
  if (!isTopKCodec(codec) && static_cast<TopKIndexEncoding>(p[2]) != TopKIndexEncoding::None)
    return corrupt("index encoding set on a " + program::Codec_Name(codec) + " payload");
  return codec;
}

} // namespace

int riceParameter(uint64_t numel, uint64_t k) {
  int b = 0;
  while (k && (k << b) < numel)
    ++b;
  return b;
}

uint64_t topkQuantizedBytes(bool int4, uint64_t numel, uint64_t k, uint32_t block) {
  uint64_t b = static_cast<uint64_t>(riceParameter(numel, k));
  uint64_t blocks = block ? (k + block - 1) / block : 0;
  return kCodecHeaderBytes + 8 + 4 * blocks + (int4 ? (k + 1) / 2 : k) + (k * (b + 2) + 7) / 8;
}

uint16_t floatToHalf(float f) { return codec::floatToHalf(f); }
float halfToFloat(uint16_t h) { return codec::halfToFloat(h); }
uint16_t floatToBFloat16(float f) { return codec::floatToBFloat16(f); }
float bfloat16ToFloat(uint16_t h) { return codec::bfloat16ToFloat(h); }

uint32_t codecBlockSize(const program::CodecParams &params) {
  return params.block_size() ? params.block_size() : 256;
}

int64_t topkCount(const program::CodecParams &params, int64_t numel) {
  double k = std::ceil(static_cast<double>(params.topk_ratio()) * numel);
  return std::max<int64_t>(1, std::min<int64_t>(numel, static_cast<int64_t>(k)));
}

Status encode(const program::CodecParams &params, const float *data,
              int64_t numel, std::vector<uint8_t> &out) {
  trace::Span span = trace::codecSpan("encode", params.codec(), numel);
  STRAIT_RETURN_IF_ERROR(validateCodecParams(params, "codec"));
  if (numel < 0)
    return invalidArgument("encode of a negative element count");
  program::Codec codec = params.codec();
  switch (codec) {
  case program::CODEC_NONE:
    out.resize(kCodecHeaderBytes + 4ull * numel);
    writeHeader(out, codec, TopKIndexEncoding::None, 0, numel);
    if (numel)
      std::memcpy(out.data() + kCodecHeaderBytes, data, 4ull * numel);
    return Status::ok();
  case program::CODEC_FP16:
  case program::CODEC_BF16:
    out.resize(kCodecHeaderBytes + 2ull * numel);
    writeHeader(out, codec, TopKIndexEncoding::None, 0, numel);
    // Lambdas, not function pointers, so that the conversions inline.
    if (codec == program::CODEC_FP16)
      castOut(data, numel, out.data() + kCodecHeaderBytes,
              [](float f) { return floatToHalf(f); });
    else
      castOut(data, numel, out.data() + kCodecHeaderBytes,
              [](float f) { return floatToBFloat16(f); });
    return Status::ok();
  case program::CODEC_INT8:
  case program::CODEC_INT4: {
    uint32_t block = codecBlockSize(params);
    bool int4 = codec == program::CODEC_INT4;
    uint64_t codeBytes = int4 ? (numel + 1) / 2 : numel;
    out.resize(kCodecHeaderBytes + 4ull * numBlocks(numel, block) + codeBytes);
    writeHeader(out, codec, TopKIndexEncoding::None, block, numel);
    if (int4)
      encodeInt4(data, numel, block, out, kCodecHeaderBytes);
    else
      encodeInt8(data, numel, block, out, kCodecHeaderBytes);
    return Status::ok();
  }
  case program::CODEC_INT2:
  case program::CODEC_INT3: {
    uint32_t block = codecBlockSize(params);
    int bits = codec == program::CODEC_INT2 ? 2 : 3;
    out.resize(kCodecHeaderBytes + intbits::bodyBytes(bits, numel, block));
    writeHeader(out, codec, TopKIndexEncoding::None, block, numel);
    intbits::encode(bits, data, numel, block, out.data() + kCodecHeaderBytes);
    return Status::ok();
  }
  case program::CODEC_AQSGD_INT2:
  case program::CODEC_AQSGD_INT3:
  case program::CODEC_AQSGD_INT4:
    return invalidArgument("codec " + program::Codec_Name(codec) +
                           " encodes a delta against per-sample state: the executor's "
                           "AQ-SGD state (AqSgd.h) sends it, not encode()");
  case program::CODEC_TOPK:
  case program::CODEC_TOPK_INT8:
  case program::CODEC_TOPK_INT4:
    if (static_cast<uint64_t>(numel) > 0xFFFFFFFFull)
      return unimplemented("top-k of " + std::to_string(numel) +
                           " elements (at most 2^32 - 1)");
    if (codec == program::CODEC_TOPK)
      encodeTopK(params, data, numel, out);
    else
      encodeTopKQuantized(params, data, numel, out);
    return Status::ok();
  default:
    return internalError("unhandled codec");
  }
}

StatusOr<bool> encodeWithResidual(const program::CodecParams &params, const float *data,
                                  const float *residual, float *nextResidual, int64_t numel,
                                  std::vector<uint8_t> &out, float *decoded) {
  program::Codec codec = params.codec();
  bool cast = codec == program::CODEC_FP16 || codec == program::CODEC_BF16;
  bool int4 = codec == program::CODEC_INT4;
  uint32_t block = codecBlockSize(params);
  if (!(cast || int4 || codec == program::CODEC_INT8) || (int4 && block % 2) || numel < 0)
    return false;
  trace::Span span = trace::codecSpan("encode", codec, numel);
  STRAIT_RETURN_IF_ERROR(validateCodecParams(params, "codec"));
  // What the decoder makes of a sum's code, and the residual it leaves: 0
  // where not finite (an overflowed f16 gradient under loss scaling), as
  // ErrorFeedback::encode documents.
  auto keep = [&](int64_t i, float sum, float value) {
    float r = sum - value;
    nextResidual[i] = std::isfinite(r) ? r : 0.0f;
    if (decoded)
      decoded[i] = value;
  };
  if (cast) {
    out.resize(kCodecHeaderBytes + 2ull * numel);
    writeHeader(out, codec, TopKIndexEncoding::None, 0, numel);
    uint16_t *h = reinterpret_cast<uint16_t *>(out.data() + kCodecHeaderBytes);
    bool half = codec == program::CODEC_FP16;
    parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        float sum = data[i] + residual[i];
        uint16_t bits = half ? floatToHalf(sum) : floatToBFloat16(sum);
        h[i] = bits;
        keep(i, sum, half ? halfToFloat(bits) : bfloat16ToFloat(bits));
      }
    });
    return true;
  }
  // INT8 / INT4: per block, the sum (in a buffer of one block), its scale,
  // its codes and the residual, in one pass over data and residual.
  float qmax = int4 ? 7.0f : 127.0f;
  int64_t nb = numBlocks(numel, block);
  uint64_t codeBytes = int4 ? (numel + 1) / 2 : numel;
  out.resize(kCodecHeaderBytes + 4ull * nb + codeBytes);
  writeHeader(out, codec, TopKIndexEncoding::None, block, numel);
  uint8_t *scales = out.data() + kCodecHeaderBytes;
  uint8_t *codes = scales + 4 * nb;
  parallelFor(nb, std::max<int64_t>(1, kGrain / block), [&](int64_t b0, int64_t b1) {
    std::vector<float> sum(std::min<int64_t>(block, numel));
    std::vector<int8_t> q(sum.size());
    for (int64_t b = b0; b < b1; ++b) {
      int64_t lo = b * block, n = std::min<int64_t>(numel, lo + block) - lo;
      float m = 0.0f;
      uint32_t nonFinite = 0;
      for (int64_t i = 0; i < n; ++i) {
        float v = data[lo + i] + residual[lo + i];
        sum[i] = v;
        float a = std::fabs(v);
        m = a > m ? a : m;
        nonFinite |= codec::isNonFinite(v);
      }
      float scale = codec::blockScale(m, nonFinite, qmax);
      std::memcpy(scales + 4 * b, &scale, 4);
      quantizeSegment(sum.data(), n, scale, qmax, q.data());
      if (int4) // blocks are even: a block's bytes are its own
        for (int64_t j = 0; j < n; j += 2)
          codes[(lo + j) / 2] = codec::packNibbles(q[j], j + 1 < n ? q[j + 1] : int8_t(0));
      else
        std::memcpy(codes + lo, q.data(), n);
      // Branch-free loops (they vectorize): the decoded values, then the
      // residual.
      float *next = nextResidual + lo;
      if (decoded)
        for (int64_t i = 0; i < n; ++i)
          decoded[lo + i] = codec::dequantize(q[i], scale);
      for (int64_t i = 0; i < n; ++i) {
        float r = sum[i] - codec::dequantize(q[i], scale);
        next[i] = std::fabs(r) <= std::numeric_limits<float>::max() ? r : 0.0f;
      }
    }
  });
  return true;
}

StatusOr<program::Codec> payloadCodec(const uint8_t *p, size_t bytes) {
  if (bytes < kCodecHeaderBytes)
    return corrupt(std::to_string(bytes) + " bytes, shorter than the " +
                   std::to_string(kCodecHeaderBytes) + "-byte header");
  if (p[0] != kMagic)
    return corrupt("bad magic byte " + std::to_string(p[0]));
  if (p[3] != kLayoutVersion)
    return corrupt("unknown layout version " + std::to_string(p[3]));
  if (!program::Codec_IsValid(p[1]))
    return corrupt("unknown codec " + std::to_string(p[1]));
  return static_cast<program::Codec>(p[1]);
}

Status decodeSparse(const uint8_t *p, size_t bytes, int64_t numel,
                    std::vector<uint32_t> &indices, std::vector<float> &values) {
  STRAIT_ASSIGN_OR_RETURN(program::Codec codec, checkedHeader(p, bytes, numel));
  if (!isTopKCodec(codec))
    return invalidArgument("sparse decode of a " + program::Codec_Name(codec) + " payload");
  return topkFamilyEntries(p, bytes, numel, codec, indices, values);
}

Status decode(const uint8_t *p, size_t bytes, float *out, int64_t numel,
              bool accumulate) {
  STRAIT_ASSIGN_OR_RETURN(program::Codec codec, checkedHeader(p, bytes, numel));
  trace::Span span = trace::codecSpan("decode", codec, numel);
  switch (codec) {
  case program::CODEC_NONE: {
    if (bytes != kCodecHeaderBytes + 4ull * numel)
      return corrupt(std::to_string(bytes) + " bytes for " +
                     std::to_string(numel) + " raw f32");
    const uint8_t *src = p + kCodecHeaderBytes;
    parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        float v = get<float>(src + 4 * i);
        out[i] = accumulate ? out[i] + v : v;
      }
    });
    return Status::ok();
  }
  case program::CODEC_FP16:
  case program::CODEC_BF16:
    if (bytes != kCodecHeaderBytes + 2ull * numel)
      return corrupt(std::to_string(bytes) + " bytes for " +
                     std::to_string(numel) + " 16-bit values");
    if (codec == program::CODEC_FP16)
      castIn(p + kCodecHeaderBytes, numel, out, accumulate,
             [](uint16_t h) { return halfToFloat(h); });
    else
      castIn(p + kCodecHeaderBytes, numel, out, accumulate,
             [](uint16_t h) { return bfloat16ToFloat(h); });
    return Status::ok();
  case program::CODEC_INT8:
  case program::CODEC_INT4:
    return decodeQuantized(p, bytes, numel, get<uint32_t>(p + 4),
                           codec == program::CODEC_INT4, out, accumulate);
  case program::CODEC_INT2:
  case program::CODEC_INT3: {
    uint32_t block = get<uint32_t>(p + 4);
    if (block == 0 || block > kMaxBlock)
      return corrupt("block size " + std::to_string(block) + " out of range");
    return intbits::decode(codec == program::CODEC_INT2 ? 2 : 3, p + kCodecHeaderBytes,
                           bytes - kCodecHeaderBytes, numel, block, out, accumulate);
  }
  case program::CODEC_TOPK:
  case program::CODEC_TOPK_INT8:
  case program::CODEC_TOPK_INT4: {
    std::vector<uint32_t> idx;
    std::vector<float> vals;
    STRAIT_RETURN_IF_ERROR(topkFamilyEntries(p, bytes, numel, codec, idx, vals));
    if (!accumulate)
      std::fill(out, out + numel, 0.0f);
    for (size_t j = 0; j < idx.size(); ++j)
      out[idx[j]] += vals[j];
    return Status::ok();
  }
  default:
    return corrupt("unhandled codec");
  }
}

} // namespace rt
} // namespace strait
