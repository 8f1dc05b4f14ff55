//===- codec_fuzzer.cpp - libFuzzer target: codec payloads ----------------===//
//
// Codec payloads arrive from peers over the network. Two modes, by the low
// bit of the first byte:
//  - decode: the rest is a payload; the destination holds the element count
//    of its header (at most 2^16, else a smaller one, which decode must
//    reject); decode() must answer with a Status, reading and writing only
//    inside the payload and the destination (ASan), with and without
//    accumulate; decodeSparse() (a device's top-k decode) must accept a
//    top-k payload exactly when decode() does, with increasing indices
//    below the element count;
//  - round trip: the rest are f32 values (any bit pattern, NaN and inf
//    included), encoded with the codec and ratio / block the next bytes pick
//    (the top-k codecs with int8 / int4 values included); the payload must
//    decode, and a quantized top-k payload must not exceed its bound
//    (topkQuantizedBytes).
// Built by fuzz/build-codec.sh.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Codec.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

using namespace strait;
using namespace strait::rt;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1)
    return 0;
  uint8_t mode = data[0];
  ++data, --size;
  if (!(mode & 1)) {
    uint64_t n = 0;
    if (size >= 16)
      std::memcpy(&n, data + 8, 8);
    if (n > (1u << 16))
      n = (mode >> 1) & 0xFF;
    std::vector<float> out(n, 1.0f);
    bool ok = decode(data, size, out.data(), static_cast<int64_t>(n), (mode >> 1) & 1).isOk();
    StatusOr<program::Codec> codec = payloadCodec(data, size);
    if (codec.isOk() && isTopKCodec(*codec)) {
      std::vector<uint32_t> idx;
      std::vector<float> vals;
      if (decodeSparse(data, size, static_cast<int64_t>(n), idx, vals).isOk() != ok)
        std::abort();
      for (size_t j = 0; ok && j < idx.size(); ++j)
        if (idx[j] >= n || (j && idx[j] <= idx[j - 1]) || vals.size() != idx.size())
          std::abort();
    }
    return 0;
  }
  if (size < 3)
    return 0;
  static const program::Codec kCodecs[] = {
      program::CODEC_NONE, program::CODEC_TOPK, program::CODEC_FP16,      program::CODEC_INT8,
      program::CODEC_INT4, program::CODEC_BF16, program::CODEC_TOPK_INT8, program::CODEC_TOPK_INT4};
  program::CodecParams p;
  p.set_codec(kCodecs[data[0] % 8]);
  p.set_topk_ratio((data[1] % 100 + 1) / 100.0f);
  p.set_block_size(data[2] % 17);
  data += 3, size -= 3;
  int64_t n = static_cast<int64_t>(size / 4);
  std::vector<float> x(n);
  if (n)
    std::memcpy(x.data(), data, 4 * n);
  std::vector<uint8_t> payload;
  if (!encode(p, x.data(), n, payload).isOk())
    std::abort();
  std::vector<float> y(n);
  if (!decode(payload.data(), payload.size(), y.data(), n).isOk())
    std::abort();
  if (p.codec() == program::CODEC_TOPK_INT8 || p.codec() == program::CODEC_TOPK_INT4) {
    uint64_t k = n ? topkCount(p, n) : 0;
    if (payload.size() > topkQuantizedBytes(p.codec() == program::CODEC_TOPK_INT4, n, k,
                                            codecBlockSize(p)))
      std::abort();
  }
  return 0;
}
