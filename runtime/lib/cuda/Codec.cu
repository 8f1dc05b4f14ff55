//===- Codec.cu - The transfer codecs on the GPU --------------------------===//
//
// Device encode / decode of the codecs of lib/codec with the same payload
// bytes: every element goes through the functions of CodecLayout.h that the
// host codec uses (explicitly rounded arithmetic, no FMA contraction).
//  - INT8/INT4: one CUDA block per scale block computes max |x| (max is
//    exact in any order) and the scale; then one thread per code / byte.
//  - FP16/BF16/NONE: one thread per element.
//  - TOPK: the k-th largest magnitude key (bits & 0x7fffffff, NaN above inf)
//    by a 4-pass radix search over 8-bit digits (histogram, then one thread
//    picks the digit), so the threshold equals the host's nth_element
//    result; elements above it are kept and ties at it go to the lowest
//    indices (an exclusive scan of the tie flags), exactly the host's rule.
//    Indices are compacted by a scan of the flags; the three index
//    encodings' sizes are computed and the smallest chosen with the host's
//    rule (u32, then u16 gaps if smaller, then bitmap if smaller).
//
//===----------------------------------------------------------------------===//
#include "CudaCodec.h"
#include "DeviceCommon.cuh"
#include "../codec/CodecLayout.h"

#include <cub/device/device_scan.cuh>

namespace strait {
namespace rt {
namespace cuda {
namespace {

using namespace strait::rt::codec;

__global__ void addKernel(const float *x, const float *r, float *sum, int64_t n) {
  GRID_STRIDE(i, n) { sum[i] = addRn(x[i], r[i]); }
}

/// A non-finite entry (an overflowed f16 gradient under loss scaling) leaves
/// 0, as the host's ErrorFeedback::encode.
__device__ inline float finiteOrZero(float v) { return isfinite(v) ? v : 0.0f; }

__global__ void residualKernel(const float *sum, float *r, int64_t n) {
  GRID_STRIDE(i, n) { r[i] = finiteOrZero(subRn(sum[i], r[i])); }
}

__global__ void scaleKernel(float *r, float factor, int64_t n) {
  GRID_STRIDE(i, n) { r[i] = mulRn(r[i], factor); }
}

__global__ void headerKernel(uint8_t *out, int codec, int index, uint32_t block, int64_t n) {
  writeHeader(out, codec, index, block, n);
}

/// One CUDA block per scale block: max |x| and the non-finite flag, then
/// the scale (little-endian f32 at scales[b]).
__global__ void scalesKernel(const float *x, int64_t n, uint32_t block, float qmax,
                             uint8_t *scales) {
  __shared__ float smax[kBlock];
  __shared__ int snf[kBlock];
  int64_t b = blockIdx.x;
  int64_t lo = b * block, hi = lo + block < n ? lo + block : n;
  float m = 0.0f;
  int nonFinite = 0;
  for (int64_t i = lo + threadIdx.x; i < hi; i += blockDim.x) {
    float a = fabsf(x[i]);
    m = a > m ? a : m;
    nonFinite |= isNonFinite(x[i]);
  }
  smax[threadIdx.x] = m;
  snf[threadIdx.x] = nonFinite;
  __syncthreads();
  for (int w = blockDim.x / 2; w > 0; w /= 2) {
    if (threadIdx.x < w) {
      float o = smax[threadIdx.x + w];
      smax[threadIdx.x] = o > smax[threadIdx.x] ? o : smax[threadIdx.x];
      snf[threadIdx.x] |= snf[threadIdx.x + w];
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    uint32_t u = floatBits(blockScale(smax[0], snf[0] != 0, qmax));
    for (int k = 0; k < 4; ++k)
      scales[4 * b + k] = static_cast<uint8_t>(u >> (8 * k));
  }
}

__global__ void int8Kernel(const float *x, int64_t n, uint32_t block, const float *scales,
                           uint8_t *codes) {
  GRID_STRIDE(i, n) { codes[i] = static_cast<uint8_t>(int8Code(x, i, block, scales)); }
}

__global__ void int4Kernel(const float *x, int64_t n, uint32_t block, const float *scales,
                           uint8_t *codes) {
  GRID_STRIDE(j, (n + 1) / 2) { codes[j] = int4Byte(x, n, j, block, scales); }
}

__global__ void castKernel(const float *x, int64_t n, bool bf16, uint8_t *out) {
  GRID_STRIDE(i, n) {
    uint16_t h = bf16 ? floatToBFloat16(x[i]) : floatToHalf(x[i]);
    out[2 * i] = static_cast<uint8_t>(h);
    out[2 * i + 1] = static_cast<uint8_t>(h >> 8);
  }
}

__global__ void decodeKernel(const uint8_t *p, int codec, int64_t n, uint32_t block,
                             float *out, bool accumulate) {
  GRID_STRIDE(i, n) {
    float v = decodeElement(p, codec, n, block, i);
    out[i] = accumulate ? __fadd_rn(out[i], v) : v;
  }
}

/// out[idx[j]] += vals[j] (the indices are distinct: no atomics).
__global__ void scatterAddKernel(const uint32_t *idx, const float *vals, int64_t k, float *out) {
  GRID_STRIDE(j, k) { out[idx[j]] = __fadd_rn(out[idx[j]], vals[j]); }
}

// --- Top-k ---------------------------------------------------------------------

/// Radix search state (CodecLayout.h) and the gap word count.
struct RadixState {
  RadixSelect select;
  unsigned long long words;
};

__global__ void histogramKernel(const float *x, int64_t n, const RadixState *st, int shift,
                                uint32_t *hist) {
  __shared__ uint32_t local[256];
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    local[b] = 0;
  __syncthreads();
  RadixSelect select = st->select;
  GRID_STRIDE(i, n) {
    uint32_t key = magnitudeKey(x[i]);
    if (radixMatches(select, key))
      atomicAdd(&local[radixDigit(key, shift)], 1u);
  }
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x)
    if (local[b])
      atomicAdd(&hist[b], local[b]);
}

/// Fixes the digit at `shift`: the bin (from the top) where the count of
/// larger keys reaches `remaining`. Clears the histogram for the next pass.
__global__ void pickDigitKernel(RadixState *st, int shift, uint32_t *hist) {
  radixPick(st->select, shift, hist);
  for (int b = 0; b < 256; ++b)
    hist[b] = 0;
}

__global__ void tieKernel(const float *x, int64_t n, const RadixState *st, uint32_t *tie) {
  GRID_STRIDE(i, n) { tie[i] = magnitudeKey(x[i]) == st->select.prefix; }
}

/// tieRank: exclusive scan of the tie flags.
__global__ void flagKernel(const float *x, int64_t n, const RadixState *st,
                           const uint32_t *tieRank, uint8_t *flags) {
  RadixSelect select = st->select;
  GRID_STRIDE(i, n) { flags[i] = topkKeep(select, magnitudeKey(x[i]), tieRank[i]); }
}

__global__ void allKernel(uint8_t *flags, int64_t n) {
  GRID_STRIDE(i, n) { flags[i] = 1; }
}

__global__ void flagsToU32Kernel(const uint8_t *flags, int64_t n, uint32_t *out) {
  GRID_STRIDE(i, n) { out[i] = flags[i]; }
}

/// idx[pos[i]] = i for the kept elements (pos: exclusive scan of flags).
__global__ void compactKernel(const uint8_t *flags, const uint32_t *pos, int64_t n,
                              uint32_t *idx) {
  GRID_STRIDE(i, n) {
    if (flags[i])
      idx[pos[i]] = static_cast<uint32_t>(i);
  }
}

/// Elements between kept index j and the previous kept one.
__device__ inline uint64_t gapBefore(const uint32_t *idx, int64_t j) {
  int64_t prev = j ? int64_t(idx[j - 1]) : -1;
  return uint64_t(int64_t(idx[j]) - prev - 1);
}

__global__ void wordsKernel(const uint32_t *idx, int64_t k, uint32_t *words,
                            unsigned long long *total) {
  GRID_STRIDE(j, k) {
    uint32_t w = static_cast<uint32_t>(gapWords(gapBefore(idx, j)));
    words[j] = w;
    atomicAdd(total, static_cast<unsigned long long>(w));
  }
}

__device__ inline void putU32(uint8_t *p, uint32_t v) {
  for (int b = 0; b < 4; ++b)
    p[b] = static_cast<uint8_t>(v >> (8 * b));
}

__global__ void topkValuesKernel(const float *x, const uint32_t *idx, int64_t k, int encoding,
                                 const uint32_t *wordOffset, uint8_t *out) {
  uint8_t *values = out + topkValuesOffset();
  uint8_t *ip = out + topkIndicesOffset(k);
  GRID_STRIDE(j, k) {
    putU32(values + 4 * j, floatBits(x[idx[j]]));
    if (encoding == 1) {
      putU32(ip + 4 * j, idx[j]);
    } else if (encoding == 2) {
      uint64_t gap = gapBefore(idx, j);
      uint8_t *w = ip + 2 * uint64_t(wordOffset[j]);
      for (; gap >= 0xFFFF; gap -= 0xFFFF, w += 2)
        w[0] = w[1] = 0xFF;
      w[0] = static_cast<uint8_t>(gap);
      w[1] = static_cast<uint8_t>(gap >> 8);
    }
  }
}

__global__ void bitmapKernel(const uint8_t *flags, int64_t n, uint8_t *bitmap) {
  GRID_STRIDE(b, (n + 7) / 8) {
    uint8_t byte = 0;
    for (int t = 0; t < 8 && 8 * b + t < n; ++t)
      byte |= static_cast<uint8_t>(flags[8 * b + t] << t);
    bitmap[b] = byte;
  }
}

__global__ void topkHeaderKernel(uint8_t *out, int encoding, int64_t n, int64_t k) {
  writeHeader(out, 1, encoding, 0, n);
  for (int b = 0; b < 8; ++b)
    out[kHeaderBytes + b] = static_cast<uint8_t>(uint64_t(k) >> (8 * b));
}

__global__ void topkResidualKernel(const float *sum, const uint8_t *flags, float *r, int64_t n) {
  GRID_STRIDE(i, n) {
    r[i] = finiteOrZero(subRn(sum[i], flags[i] ? addRn(0.0f, sum[i]) : 0.0f));
  }
}

/// Work memory of the top-k: the radix state and histogram, then three u32
/// arrays of n (`a`: scan outputs (tie ranks, positions, gap word offsets),
/// `idx`: kept indices, `words`: scan inputs (tie flags, kept flags, gap
/// words); scans never run in place), then CUB's scan storage.
struct TopKWork {
  RadixState *state;
  uint32_t *hist, *a, *idx, *words;
  void *cubTemp;
  size_t cubBytes;
};

size_t cubScanBytes(int64_t n) {
  size_t bytes = 0;
  cub::DeviceScan::ExclusiveSum(nullptr, bytes, static_cast<uint32_t *>(nullptr),
                                static_cast<uint32_t *>(nullptr), static_cast<int>(n));
  return bytes;
}

TopKWork carve(void *work, int64_t n) {
  auto align = [](uint64_t v) { return (v + 255) / 256 * 256; };
  uint8_t *p = static_cast<uint8_t *>(work);
  TopKWork w;
  w.state = reinterpret_cast<RadixState *>(p);
  w.hist = reinterpret_cast<uint32_t *>(p + 256);
  uint64_t at = 256 + 1024, arr = align(4ull * uint64_t(n));
  w.a = reinterpret_cast<uint32_t *>(p + at);
  w.idx = reinterpret_cast<uint32_t *>(p + at + arr);
  w.words = reinterpret_cast<uint32_t *>(p + at + 2 * arr);
  w.cubTemp = p + at + 3 * arr;
  w.cubBytes = cubScanBytes(n);
  return w;
}

bool scan(TopKWork &w, const uint32_t *in, uint32_t *out, int64_t n, cudaStream_t s) {
  size_t bytes = w.cubBytes;
  return cub::DeviceScan::ExclusiveSum(w.cubTemp, bytes, in, out, static_cast<int>(n), s) ==
         cudaSuccess;
}

} // namespace

void launchCodecAdd(const float *x, const float *residual, float *sum, int64_t n,
                    cudaStream_t s) {
  addKernel<<<blocksFor(n), kBlock, 0, s>>>(x, residual, sum, n);
}

void launchCodecResidual(const float *sum, float *residual, int64_t n, cudaStream_t s) {
  residualKernel<<<blocksFor(n), kBlock, 0, s>>>(sum, residual, n);
}

void launchCodecScale(float *residual, float factor, int64_t n, cudaStream_t s) {
  scaleKernel<<<blocksFor(n), kBlock, 0, s>>>(residual, factor, n);
}

bool launchEncodeFixed(int codec, const float *x, int64_t n, uint32_t block, uint8_t *out,
                       cudaStream_t s) {
  FixedLayout l;
  if (!fixedLayout(codec, n, block, l))
    return false;
  bool quantized = codec == 3 || codec == 4;
  headerKernel<<<1, 1, 0, s>>>(out, codec, 0, quantized ? block : 0, n);
  if (n == 0)
    return true;
  switch (codec) {
  case 0:
    return cudaMemcpyAsync(out + l.data, x, 4ull * n, cudaMemcpyDeviceToDevice, s) ==
           cudaSuccess;
  case 2:
  case 5:
    castKernel<<<blocksFor(n), kBlock, 0, s>>>(x, n, codec == 5, out + l.data);
    return true;
  default: {
    int64_t nb = numBlocks(n, block);
    if (nb > 0x7fffffff)
      return false;
    scalesKernel<<<static_cast<unsigned>(nb), kBlock, 0, s>>>(x, n, block,
                                                              codec == 4 ? 7.0f : 127.0f,
                                                              out + l.scales);
    const float *scales = reinterpret_cast<const float *>(out + l.scales);
    if (codec == 3)
      int8Kernel<<<blocksFor(n), kBlock, 0, s>>>(x, n, block, scales, out + l.data);
    else
      int4Kernel<<<blocksFor((n + 1) / 2), kBlock, 0, s>>>(x, n, block, scales, out + l.data);
    return true;
  }
  }
}

void launchDecodeFixed(int codec, const uint8_t *payload, int64_t n, uint32_t block, float *out,
                       cudaStream_t s, bool accumulate) {
  if (n > 0)
    decodeKernel<<<blocksFor(n), kBlock, 0, s>>>(payload, codec, n, block, out, accumulate);
}

void launchScatterAdd(const uint32_t *indices, const float *values, int64_t k, float *out,
                      cudaStream_t s) {
  if (k > 0)
    scatterAddKernel<<<blocksFor(k), kBlock, 0, s>>>(indices, values, k, out);
}

uint64_t topkWorkBytes(int64_t n) {
  uint64_t arr = (4ull * uint64_t(n) + 255) / 256 * 256;
  return 256 + 1024 + 3 * arr + cubScanBytes(n) + 256;
}

bool selectTopK(const float *x, int64_t n, int64_t k, uint8_t *flags, void *work,
                cudaStream_t s) {
  if (n <= 0 || n > 0x7fffffff || k <= 0)
    return false;
  if (k >= n) {
    allKernel<<<blocksFor(n), kBlock, 0, s>>>(flags, n);
    return cudaStreamSynchronize(s) == cudaSuccess;
  }
  TopKWork w = carve(work, n);
  RadixState init;
  init.select.remaining = k;
  init.words = 0;
  if (cudaMemcpyAsync(w.state, &init, sizeof(init), cudaMemcpyHostToDevice, s) != cudaSuccess ||
      cudaMemsetAsync(w.hist, 0, 1024, s) != cudaSuccess)
    return false;
  for (int shift = 24; shift >= 0; shift -= 8) {
    histogramKernel<<<blocksFor(n), kBlock, 0, s>>>(x, n, w.state, shift, w.hist);
    pickDigitKernel<<<1, 1, 0, s>>>(w.state, shift, w.hist);
  }
  tieKernel<<<blocksFor(n), kBlock, 0, s>>>(x, n, w.state, w.words);
  if (!scan(w, w.words, w.a, n, s))
    return false;
  flagKernel<<<blocksFor(n), kBlock, 0, s>>>(x, n, w.state, w.a, flags);
  return cudaStreamSynchronize(s) == cudaSuccess;
}

void topkIndexBytes(const uint8_t *flags, int64_t n, int64_t k, void *work, uint64_t bytes[3],
                    cudaStream_t s) {
  TopKWork w = carve(work, n);
  flagsToU32Kernel<<<blocksFor(n), kBlock, 0, s>>>(flags, n, w.words);
  scan(w, w.words, w.a, n, s);
  compactKernel<<<blocksFor(n), kBlock, 0, s>>>(flags, w.a, n, w.idx);
  unsigned long long *total = &w.state->words;
  cudaMemsetAsync(total, 0, sizeof(unsigned long long), s);
  wordsKernel<<<blocksFor(k), kBlock, 0, s>>>(w.idx, k, w.words, total);
  unsigned long long words = 0;
  cudaMemcpyAsync(&words, total, sizeof(words), cudaMemcpyDeviceToHost, s);
  cudaStreamSynchronize(s);
  bytes[0] = 4ull * uint64_t(k);
  bytes[1] = 2ull * words;
  bytes[2] = (uint64_t(n) + 7) / 8;
}

void launchEncodeTopK(const float *x, const uint8_t *flags, int64_t n, int64_t k, int encoding,
                      void *work, uint8_t *out, cudaStream_t s) {
  TopKWork w = carve(work, n);
  topkHeaderKernel<<<1, 1, 0, s>>>(out, encoding, n, k);
  if (encoding == 2) // word offsets of the gaps (w.a is free again)
    scan(w, w.words, w.a, k, s);
  topkValuesKernel<<<blocksFor(k), kBlock, 0, s>>>(x, w.idx, k, encoding, w.a, out);
  if (encoding == 3)
    bitmapKernel<<<blocksFor((n + 7) / 8), kBlock, 0, s>>>(flags, n, out + topkIndicesOffset(k));
}

void launchTopKResidual(const float *sum, const uint8_t *flags, float *residual, int64_t n,
                        cudaStream_t s) {
  topkResidualKernel<<<blocksFor(n), kBlock, 0, s>>>(sum, flags, residual, n);
}

} // namespace cuda
} // namespace rt
} // namespace strait
