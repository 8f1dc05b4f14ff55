//===- CudaCodec.h - Launchers of the device codecs (Codec.cu) --*- C++ -*-===//
//
// Plain C++ interface between CudaCodecCommunicator.cpp and the kernels of
// Codec.cu. Payload layout and per-element arithmetic come from
// lib/codec/CodecLayout.h, shared with the host codecs, so a payload encoded
// here has the bytes rt::encode writes (wire compatibility with CPU peers).
// Codec numbers are program::Codec's. All launchers are asynchronous on `s`.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_CUDACODEC_H
#define STRAIT_RUNTIME_LIB_CUDA_CUDACODEC_H

#include <cuda_runtime_api.h>

#include <cstdint>

namespace strait {
namespace rt {
namespace cuda {

/// sum = x + residual (error feedback), n floats.
void launchCodecAdd(const float *x, const float *residual, float *sum, int64_t n, cudaStream_t s);
/// residual = sum - residual (residual holds decode(payload) on entry); a
/// non-finite difference leaves 0, as the host's ErrorFeedback::encode.
void launchCodecResidual(const float *sum, float *residual, int64_t n, cudaStream_t s);
/// residual *= factor (loss scaling's change of scale).
void launchCodecScale(float *residual, float factor, int64_t n, cudaStream_t s);

/// Encodes n floats into a fixed-layout payload (NONE, FP16, BF16, INT8,
/// INT4: codec::fixedLayout) at `out`, header included. False for another
/// codec.
bool launchEncodeFixed(int codec, const float *x, int64_t n, uint32_t block, uint8_t *out,
                       cudaStream_t s);
/// Decodes a fixed-layout payload (its size checked by the caller) into out;
/// with `accumulate`, adds the decoded values to out (rt::decode's order of
/// operations: out + v, rounded once).
void launchDecodeFixed(int codec, const uint8_t *payload, int64_t n, uint32_t block, float *out,
                       cudaStream_t s, bool accumulate = false);
/// out[indices[j]] += values[j] for j < k, the indices distinct (a top-k
/// payload's pairs, rt::decodeSparse): rt::decode's accumulation.
void launchScatterAdd(const uint32_t *indices, const float *values, int64_t k, float *out,
                      cudaStream_t s);

/// Top-k selection: the k largest |x| (NaN largest; ties to the lower index,
/// as the host codec), as a 0/1 flag per element. `work` holds
/// topkWorkBytes(n) bytes of device memory. Synchronizes `s`.
uint64_t topkWorkBytes(int64_t n);
bool selectTopK(const float *x, int64_t n, int64_t k, uint8_t *flags, void *work,
                cudaStream_t s);
/// Writes a top-k payload (header, k, values, indices in `encoding`,
/// codec::TopKIndexEncoding's number) from the flags. `indexBytes`: the
/// encoding's byte count (topkIndexBytes). Needs `work` from selectTopK.
void launchEncodeTopK(const float *x, const uint8_t *flags, int64_t n, int64_t k, int encoding,
                      void *work, uint8_t *out, cudaStream_t s);
/// Byte counts of the three index encodings for the flags (u32, u16 gaps,
/// bitmap). Synchronizes `s`.
void topkIndexBytes(const uint8_t *flags, int64_t n, int64_t k, void *work, uint64_t bytes[3],
                    cudaStream_t s);
/// residual = sum - (flag ? 0 + sum : 0): the host's decode-and-subtract of
/// a top-k payload, element by element.
void launchTopKResidual(const float *sum, const uint8_t *flags, float *residual, int64_t n,
                        cudaStream_t s);

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_CUDACODEC_H
