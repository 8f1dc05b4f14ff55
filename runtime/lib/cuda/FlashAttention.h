//===- FlashAttention.h - Tiled tensor-core attention kernels ---*- C++ -*-===//
//
// The flash path of FusedAttention(+Grad) (FlashAttention.cu): for f16/bf16
// Q, Kt, V without a bias and a head dim of 64 or 128, the forward and the
// backward never materialize the Tq x Tk scores. CudaAttention.cpp asks
// flashAttentionApplies() and falls back to its cuBLAS path otherwise.
// STRAIT_CUDA_FLASH_ATTENTION=0 in the environment (read once) turns the
// flash path off; setFlashAttentionEnabled overrides it (tests, benches).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_FLASHATTENTION_H
#define STRAIT_RUNTIME_LIB_CUDA_FLASHATTENTION_H

#include "strait/runtime/DType.h"

#include <cstdint>

// As cuda_runtime_api.h declares it: this header stays includable by tools
// built without the CUDA headers (the attention bench's switch).
typedef struct CUstream_st *cudaStream_t;

namespace strait {
namespace rt {
namespace cuda {

/// The static facts that pick the flash kernels.
struct FlashQuery {
  DType dtype = program::DTYPE_F32; // Q's (= Kt's = V's)
  int64_t d = 0, dv = 0;            // head dims of Q/Kt and V
  int64_t tq = 0, tk = 0;
  bool hasBias = false;
  bool enabled = true; // flashAttentionEnabled()
};

/// True exactly when the flash kernels run: enabled, f16 or bf16, no bias,
/// d == dv and d in {64, 128}, Tq > 0 and Tk > 0 (empty problems stay on the
/// cuBLAS path, which handles them). Pure: no device, no environment.
bool flashAttentionApplies(const FlashQuery &q);

/// Whether the flash path is on: STRAIT_CUDA_FLASH_ATTENTION=0 turns it off
/// (read at the first call), unless setFlashAttentionEnabled overrode it.
bool flashAttentionEnabled();
/// Overrides the environment: 1 on, 0 off, -1 back to the environment's
/// value. Process-wide.
void setFlashAttentionEnabled(int mode);

/// The flash kernels' problem: `entries` batch entries of Q [Tq, D],
/// Kt [D, Tk], V [Tk, D] (contiguous, f16 or bf16 as `bf16` says).
struct FlashProblem {
  int64_t entries = 0, tq = 0, tk = 0, d = 0;
  float scale = 1.0f;
  bool causal = false;
  bool bf16 = true; // else f16
};

/// Y [entries, Tq, D] in the operands' dtype and LSE [entries, Tq] (f32,
/// natural log of sum exp(scale * q.k), -inf for a row without a key).
/// False when the problem is not one flashAttentionApplies accepts.
bool launchFlashAttentionForward(const FlashProblem &p, const void *q, const void *kt,
                                 const void *v, void *y, float *lse, cudaStream_t st);

/// dQ, dKt, dV from dY, Q, Kt, V, LSE and drow (rowsum(dY * Y), f32, from
/// launchAttentionDrow). dqAcc: entries * Tq * D f32 of scratch (zeroed and
/// used here).
bool launchFlashAttentionBackward(const FlashProblem &p, const void *dy, const void *q,
                                  const void *kt, const void *v, const float *lse,
                                  const float *drow, float *dqAcc, void *dq, void *dkt, void *dv,
                                  cudaStream_t st);

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_FLASHATTENTION_H
