//===- FlashAttention.h - Tiled tensor-core attention kernels ---*- C++ -*-===//
//
// The flash path of FusedAttention(+Grad) (FlashAttention.cu): for f16/bf16
// Q, Kt, V without a bias and a head dim of 64 or 128, the forward and the
// backward never materialize the Tq x Tk scores. CudaAttention.cpp asks
// flashAttentionApplies() and falls back to its cuBLAS path otherwise. The
// kernels address permuted operands (q_perm, ..., GPT-2's [B, T, H, D]
// heads) through FlashProblem's strides.
// STRAIT_CUDA_FLASH_ATTENTION=0 in the environment (read once) turns the
// flash path off; setFlashAttentionEnabled overrides it (tests, benches).
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_CUDA_FLASHATTENTION_H
#define STRAIT_RUNTIME_LIB_CUDA_FLASHATTENTION_H

#include "strait/runtime/DType.h"
#include "strait/runtime/HostDevice.h"

#include <cstdint>

// As cuda_runtime_api.h declares it: this header stays includable by tools
// built without the CUDA headers (the attention bench's switch).
typedef struct CUstream_st *cudaStream_t;

namespace strait {
namespace rt {
struct AttentionArgs; // KernelArgs.h

namespace cuda {

/// Batch dims the flash kernels address (after flattening, FlashProblem).
constexpr int kFlashMaxBatch = 4;

/// The static facts that pick the flash kernels.
struct FlashQuery {
  DType dtype = program::DTYPE_F32; // Q's (= Kt's = V's)
  int64_t d = 0, dv = 0;            // head dims of Q/Kt and V
  int64_t tq = 0, tk = 0;
  bool hasBias = false;
  bool enabled = true; // flashAttentionEnabled()
  /// The layouts (AttnLayout, KernelArgs.h): element strides of the logical
  /// columns of Q, V and Y/dY (D, Dv), of Kt's rows (D) and columns (Tk),
  /// and the batch dims left after flattening (FlashProblem::batchRank).
  int64_t qCol = 1, vCol = 1, yCol = 1, ktRow = 0, ktCol = 1;
  int batchRank = 1;
};

/// True exactly when the flash kernels run: enabled, f16 or bf16, no bias,
/// d == dv and d in {64, 128}, Tq > 0 and Tk > 0 (empty problems stay on the
/// cuBLAS path, which handles them), D contiguous in Q, V and Y (column
/// stride 1), Kt with Tk contiguous (the Kt form) or D contiguous (the K
/// rows form), at most kFlashMaxBatch batch dims after flattening. Pure:
/// no device, no environment.
bool flashAttentionApplies(const FlashQuery &q);

/// Whether the flash path is on: STRAIT_CUDA_FLASH_ATTENTION=0 turns it off
/// (read at the first call), unless setFlashAttentionEnabled overrode it.
bool flashAttentionEnabled();
/// Overrides the environment: 1 on, 0 off, -1 back to the environment's
/// value. Process-wide.
void setFlashAttentionEnabled(int mode);

/// Where one operand of the flash kernels sits in its tensor: element
/// strides of FlashProblem's batch dims and of the rows (Tq for Q and Y/dY,
/// Tk for V; K: FlashProblem::kRows). D is contiguous (stride 1) in Q, V and
/// Y/dY.
struct FlashStrides {
  int64_t batch[kFlashMaxBatch] = {};
  int64_t row = 0;
};

/// The flash kernels' problem: `entries` batch entries of Q [Tq, D],
/// Kt [D, Tk], V [Tk, D] (f16 or bf16 as `bf16` says), addressed through
/// batch dims batch[0..batchRank) (row-major, product `entries`) and each
/// operand's strides. The gradients have their own strides dq, dk, dv (their
/// operand's, unless the operand is a slice of a packed tensor: q_select,
/// ...; dK in K's form), dY takes y; LSE and Drow are dense [entries, Tq].
/// The operands may alias (GPT-2's Q, K and V in one [B, T, 3, H, D]
/// buffer): the kernels only read them. The launchers take each operand's
/// pointer at its slice (the base offset applied by the caller); every
/// stride but D's is a multiple of D, so rows stay 16-byte aligned.
struct FlashProblem {
  int64_t entries = 0, tq = 0, tk = 0, d = 0;
  float scale = 1.0f;
  bool causal = false;
  bool bf16 = true; // else f16
  int batchRank = 0;
  int64_t batch[kFlashMaxBatch] = {};
  FlashStrides q, k, v, y;
  FlashStrides dq, dk, dv;
  /// Kt's form. false (the Kt form): key j of D index c at c * k.row + j
  /// (Tk contiguous). true (K rows, GPT-2's untransposed [B, T, H, D] K):
  /// at j * k.row + c (D contiguous).
  bool kRows = false;
};

/// Offset in its tensor of batch entry `e` of an operand with strides `s`.
STRAIT_HD inline int64_t flashEntryOffset(const FlashProblem &p, const FlashStrides &s,
                                          int64_t e) {
  int64_t off = 0;
  for (int d = p.batchRank - 1; d >= 0; --d) {
    off += (e % p.batch[d]) * s.batch[d];
    e /= p.batch[d];
  }
  return off;
}

/// The flash path's view of the shared checks' result `a` (pure, host; in
/// CudaAttention.cpp): flashQueryOf gives the facts flashAttentionApplies
/// decides on (`enabled` as given); flashProblemOf the kernels' problem,
/// meaningful when they apply. Batch dims of size 1 are dropped and
/// adjacent batch dims that every operand (Q, Kt, V, Y) steps through as
/// one are merged (dense operands: a single dim of all entries).
FlashQuery flashQueryOf(const AttentionArgs &a, bool enabled);
FlashProblem flashProblemOf(const AttentionArgs &a);

/// Y (laid out by p.y) in the operands' dtype and LSE [entries, Tq] (f32,
/// natural log of sum exp(scale * q.k), -inf for a row without a key).
/// False when the problem is not one flashAttentionApplies accepts.
bool launchFlashAttentionForward(const FlashProblem &p, const void *q, const void *kt,
                                 const void *v, void *y, float *lse, cudaStream_t st);

/// dQ, dKt, dV from dY, Q, Kt, V, LSE and drow (rowsum(dY * Y), f32, from
/// launchAttentionDrow, dense [entries, Tq]). dqAcc: entries * Tq * D f32
/// of scratch (zeroed and used here, dense); dQ is rounded from it into its
/// layout (p.dq).
bool launchFlashAttentionBackward(const FlashProblem &p, const void *dy, const void *q,
                                  const void *kt, const void *v, const float *lse,
                                  const float *drow, float *dqAcc, void *dq, void *dkt, void *dv,
                                  cudaStream_t st);

} // namespace cuda
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_CUDA_FLASHATTENTION_H
