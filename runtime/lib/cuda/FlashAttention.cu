//===- FlashAttention.cu - Tiled attention on tensor cores ----------------===//
//
// FlashAttention-2 style forward and backward of FusedAttention(+Grad) for
// f16/bf16 Q [Tq, D], Kt [D, Tk], V [Tk, D] per batch entry, D in {64, 128},
// no bias (contract: docs/runtime-cuda.md "Fused attention"), each operand
// addressed through its strides (FlashProblem: batch dims, rows; D
// contiguous; Kt either with Tk contiguous or, the KROWS kernels, with D
// contiguous as an untransposed K [Tk, D]). Tensor cores through `mma.sync.aligned.m16n8k16` (f32 accumulators); 4 warps per CTA,
// each warp owns 16 rows of the tile it multiplies, tiles staged in shared
// memory (rows padded by 16 bytes, no bank conflicts for `ldmatrix`), the
// mma operands loaded with `ldmatrix` (.trans where the tile is stored
// transposed to what the operand needs: Kt, V, dY, Q).
//
// Forward: one CTA per (entry, 64 query rows), a loop over 64-key blocks
// (under causal only the blocks the block's last row may see), S = scale *
// Q Kt in registers, online softmax in f32 (running max m and sum l per
// row), P rounded to the operands' dtype for O += P V. Y = O / l rounded
// once; LSE = m + log(l) (natural log of sum exp(scale * q.k)); a row
// without a visible key gets Y = 0 and LSE = -inf.
//
// Backward: one CTA per (entry, 64 keys); each warp owns 16 keys and loops
// over the query blocks that see them, computing S^T = K Q^T, P^T = exp(
// scale * S^T - LSE), dV += P^T dY, dP^T = V dY^T, dS^T = P^T * (dP^T -
// Drow), dK += dS^T Q (scaled once at the end). dS goes through shared
// memory for dQ += scale * dS K, staged in shared memory and added with
// 16-byte f32 atomics (sm_90) into a zeroed f32 scratch that a last kernel
// rounds into dQ.
//
// Both loops keep two shared-memory buffers of the tiles they stream (K/V
// blocks forward, Q/dY rows backward), the next one in flight through
// `cp.async` while the current one is multiplied. Exponentials are 2^x of
// scores scaled by scale * log2(e) (LSE converted at the boundary); the
// mask is evaluated only in blocks that meet Tk, Tq or the diagonal.
//
// Every launch is capture-safe: no allocation, no host synchronization (the
// shared-memory limit is raised once per kernel and device, on the first
// launch).
//
//===----------------------------------------------------------------------===//
#include "FlashAttention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

namespace strait {
namespace rt {
namespace cuda {

namespace {

std::atomic<int> enabledOverride{-1};

bool enabledFromEnv() {
  static const bool on = [] {
    const char *e = std::getenv("STRAIT_CUDA_FLASH_ATTENTION");
    return !(e && std::strcmp(e, "0") == 0);
  }();
  return on;
}

} // namespace

bool flashAttentionApplies(const FlashQuery &q) {
  bool lowPrecision = q.dtype == program::DTYPE_BF16 || q.dtype == program::DTYPE_F16;
  bool layouts = q.qCol == 1 && q.vCol == 1 && q.yCol == 1 && (q.ktCol == 1 || q.ktRow == 1) &&
                 q.batchRank >= 0 && q.batchRank <= kFlashMaxBatch;
  return q.enabled && lowPrecision && !q.hasBias && q.d == q.dv && (q.d == 64 || q.d == 128) &&
         q.tq > 0 && q.tk > 0 && layouts;
}

bool flashAttentionEnabled() {
  int o = enabledOverride.load();
  return o >= 0 ? o != 0 : enabledFromEnv();
}

void setFlashAttentionEnabled(int mode) { enabledOverride.store(mode < 0 ? -1 : mode != 0); }

namespace {

constexpr int kThreads = 128; // 4 warps
constexpr int kPad = 8;       // elements of padding per shared-memory row

// --- Fragments -------------------------------------------------------------

template <typename T> __device__ inline uint32_t packF(float a, float b);
template <> __device__ inline uint32_t packF<__nv_bfloat16>(float a, float b) {
  __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  return *reinterpret_cast<uint32_t *>(&h);
}
template <> __device__ inline uint32_t packF<__half>(float a, float b) {
  __half2 h = __floats2half2_rn(a, b);
  return *reinterpret_cast<uint32_t *>(&h);
}

/// Four 8x8 matrices of 16-bit elements from shared memory (`ldmatrix`):
/// lane l gives the address of row l % 8 of matrix l / 8 (16-byte aligned);
/// r[i] is matrix i's (row lane / 4, columns 2 (lane % 4) + {0, 1}), or
/// with `trans` its (rows 2 (lane % 4) + {0, 1}, column lane / 4).
__device__ inline void ldsm4(uint32_t r[4], const void *p) {
  uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}
__device__ inline void ldsm4T(uint32_t r[4], const void *p) {
  uint32_t a = static_cast<uint32_t>(__cvta_generic_to_shared(p));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(a));
}

// The mma fragments of a shared-memory tile (leading dimension ld, in
// elements): A for rows [m0, m0 + 16) x k [k0, k0 + 16); B for k [k0,
// k0 + 16) x the two 8-column tiles [n0, n0 + 8) (b0) and [n0 + 8, n0 + 16)
// (b1). The plain forms read a row-major [m][k] (A) or [k][n] (B) tile; the
// T forms the transposed layout, [k][m] or [n][k].
template <typename T>
__device__ inline void ldA(uint32_t a[4], const T *s, int ld, int m0, int k0) {
  int l = threadIdx.x % 32, mi = l / 8, r = l % 8;
  ldsm4(a, s + (m0 + (mi & 1) * 8 + r) * ld + k0 + (mi >> 1) * 8);
}
template <typename T>
__device__ inline void ldAT(uint32_t a[4], const T *s, int ld, int m0, int k0) {
  int l = threadIdx.x % 32, mi = l / 8, r = l % 8;
  ldsm4T(a, s + (k0 + (mi >> 1) * 8 + r) * ld + m0 + (mi & 1) * 8);
}
template <typename T>
__device__ inline void ldB(uint32_t b0[2], uint32_t b1[2], const T *s, int ld, int k0, int n0) {
  int l = threadIdx.x % 32, mi = l / 8, r = l % 8;
  uint32_t x[4];
  ldsm4T(x, s + (k0 + (mi & 1) * 8 + r) * ld + n0 + (mi >> 1) * 8);
  b0[0] = x[0];
  b0[1] = x[1];
  b1[0] = x[2];
  b1[1] = x[3];
}
template <typename T>
__device__ inline void ldBT(uint32_t b0[2], uint32_t b1[2], const T *s, int ld, int k0, int n0) {
  int l = threadIdx.x % 32, mi = l / 8, r = l % 8;
  uint32_t x[4];
  ldsm4(x, s + (n0 + (mi >> 1) * 8 + r) * ld + k0 + (mi & 1) * 8);
  b0[0] = x[0];
  b0[1] = x[1];
  b1[0] = x[2];
  b1[1] = x[3];
}

/// c += a b for one m16n8k16 tile (row-major A 16x16, column-major B 16x8).
template <typename T> __device__ inline void mma(float c[4], const uint32_t a[4], const uint32_t b[2]);
template <>
__device__ inline void mma<__nv_bfloat16>(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}
template <>
__device__ inline void mma<__half>(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
               "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
               : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

/// The A fragment of the 16 columns [2k*8, 2k*8 + 16) of a 16-row f32 C
/// tile row c[n][4] (FA2: the scores' accumulators become the next
/// product's left operand without leaving registers).
template <typename T, int N>
__device__ inline void cToA(const float (&c)[N][4], int k, uint32_t a[4]) {
  a[0] = packF<T>(c[2 * k][0], c[2 * k][1]);
  a[1] = packF<T>(c[2 * k][2], c[2 * k][3]);
  a[2] = packF<T>(c[2 * k + 1][0], c[2 * k + 1][1]);
  a[3] = packF<T>(c[2 * k + 1][2], c[2 * k + 1][3]);
}

// --- Tiles -----------------------------------------------------------------

/// Copies rows x cols elements (cols % 8 == 0) of a row-major source with
/// leading dimension ld into shared memory (leading dimension cols + kPad),
/// zero outside rowsValid x colsValid. 16-byte loads where aligned.
template <typename T, int ROWS, int COLS>
__device__ inline void loadTile(T *s, const T *g, int64_t ld, int64_t rowsValid,
                                int64_t colsValid) {
  constexpr int chunks = COLS / 8;
  for (int idx = threadIdx.x; idx < ROWS * chunks; idx += kThreads) {
    int r = idx / chunks, c = (idx % chunks) * 8;
    T *dst = s + r * (COLS + kPad) + c;
    const T *src = g + r * ld + c;
    if (r < rowsValid && c + 8 <= colsValid &&
        (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
      *reinterpret_cast<uint4 *>(dst) = *reinterpret_cast<const uint4 *>(src);
    } else {
      uint16_t *d16 = reinterpret_cast<uint16_t *>(dst);
      const uint16_t *s16 = reinterpret_cast<const uint16_t *>(src);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        d16[e] = (r < rowsValid && c + e < colsValid) ? s16[e] : uint16_t(0);
    }
  }
}

__device__ inline void cpAsync16(void *dst, const void *src) {
  uint32_t d = static_cast<uint32_t>(__cvta_generic_to_shared(dst));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(d), "l"(src) : "memory");
}
__device__ inline void cpAsyncCommit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N> __device__ inline void cpAsyncWait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

/// loadTile with the aligned 16-byte chunks in flight (`cp.async`, one
/// group per cpAsyncCommit); the others are stored at once. The tile is
/// complete after cpAsyncWait and a barrier.
template <typename T, int ROWS, int COLS>
__device__ inline void loadTileAsync(T *s, const T *g, int64_t ld, int64_t rowsValid,
                                     int64_t colsValid) {
  constexpr int chunks = COLS / 8;
  for (int idx = threadIdx.x; idx < ROWS * chunks; idx += kThreads) {
    int r = idx / chunks, c = (idx % chunks) * 8;
    T *dst = s + r * (COLS + kPad) + c;
    const T *src = g + r * ld + c;
    if (r < rowsValid && c + 8 <= colsValid &&
        (reinterpret_cast<uintptr_t>(src) & 15) == 0) {
      cpAsync16(dst, src);
    } else {
      uint16_t *d16 = reinterpret_cast<uint16_t *>(dst);
      const uint16_t *s16 = reinterpret_cast<const uint16_t *>(src);
#pragma unroll
      for (int e = 0; e < 8; ++e)
        d16[e] = (r < rowsValid && c + e < colsValid) ? s16[e] : uint16_t(0);
    }
  }
}

constexpr float kLog2e = 1.4426950408889634f, kLn2 = 0.6931471805599453f;

// --- Forward ---------------------------------------------------------------

constexpr int kFwdRows = 64, kFwdKeys = 64;

/// Q, then two buffers of (Kt block, V block). A K block in the K rows
/// form ([BN][D + kPad]) fits in a Kt block's room ([D][BN + kPad]).
template <int D> constexpr int fwdSmemBytes() {
  static_assert(kFwdKeys * (D + kPad) <= D * (kFwdKeys + kPad), "a K rows block fits");
  return 2 * (kFwdRows * (D + kPad) + 2 * (D * (kFwdKeys + kPad) + kFwdKeys * (D + kPad)));
}

/// K's block of keys [j, j + BN) into shared memory: the Kt form as [D][BN]
/// (leading dimension BN + kPad), the K rows form as [BN][D] (D + kPad).
template <typename T, int D, int BN, bool KROWS>
__device__ inline void loadKBlock(T *s, const T *ktE, const FlashProblem &p, int64_t j) {
  if (KROWS)
    loadTileAsync<T, BN, D>(s, ktE + j * p.k.row, p.k.row, p.tk - j, D);
  else
    loadTileAsync<T, D, BN>(s, ktE + j, p.k.row, D, p.tk - j);
}

template <typename T, int D, bool KROWS>
__global__ void __launch_bounds__(kThreads)
    flashForwardKernel(FlashProblem p, const T *__restrict__ q, const T *__restrict__ kt,
                       const T *__restrict__ v, T *__restrict__ y, float *__restrict__ lse) {
  constexpr int BM = kFwdRows, BN = kFwdKeys, LQ = D + kPad, LK = BN + kPad, LV = D + kPad;
  constexpr int LKR = D + kPad; // K rows form
  extern __shared__ __align__(16) unsigned char smemRaw[];
  T *qs = reinterpret_cast<T *>(smemRaw);
  T *kBuf = qs + BM * LQ;      // K blocks [2][D][BN] (K rows: [2][BN][D] in the same room)
  T *vBuf = kBuf + 2 * D * LK; // V blocks [2][BN][D]

  const int64_t nqb = (p.tq + BM - 1) / BM;
  const int64_t entry = blockIdx.x / nqb;
  const int64_t i0 = (nqb - 1 - blockIdx.x % nqb) * BM; // the longest causal rows first
  const T *qE = q + flashEntryOffset(p, p.q, entry);
  const T *ktE = kt + flashEntryOffset(p, p.k, entry);
  const T *vE = v + flashEntryOffset(p, p.v, entry);
  T *yE = y + flashEntryOffset(p, p.y, entry);
  const int64_t shift = p.tk - p.tq; // causal: key j visible to row i when j <= i + shift
  int64_t kEnd = p.tk;
  if (p.causal) {
    int64_t last = i0 + BM + shift; // one past the last key of row i0 + BM - 1
    kEnd = last < 0 ? 0 : last < p.tk ? last : p.tk;
  }

  // Scores in the log2 domain: x = scale * log2(e) * q.k, p = 2^(x - m).
  const float sl = p.scale * kLog2e;
  loadTileAsync<T, BM, D>(qs, qE + i0 * p.q.row, p.q.row, p.tq - i0, D);
  if (kEnd > 0) {
    loadKBlock<T, D, BN, KROWS>(kBuf, ktE, p, 0);
    loadTileAsync<T, BN, D>(vBuf, vE, p.v.row, p.tk, D);
  }
  cpAsyncCommit();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t row[2] = {i0 + warp * 16 + g, i0 + warp * 16 + g + 8};
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
    o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};

  // Two buffers: block j0 + BN loads while block j0 is multiplied.
  for (int64_t j0 = 0, it = 0; j0 < kEnd; j0 += BN, ++it) {
    const T *ks = kBuf + (it & 1) * D * LK, *vs = vBuf + (it & 1) * BN * LV;
    if (j0 + BN < kEnd) {
      int64_t jn = j0 + BN;
      loadKBlock<T, D, BN, KROWS>(kBuf + ((it + 1) & 1) * D * LK, ktE, p, jn);
      loadTileAsync<T, BN, D>(vBuf + ((it + 1) & 1) * BN * LV, vE + jn * p.v.row, p.v.row,
                              p.tk - jn, D);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads(); // block j0 (and Q) have landed

    float s[BN / 8][4];
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
      s[n][0] = s[n][1] = s[n][2] = s[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      ldA(a, qs, LQ, warp * 16, kk * 16);
#pragma unroll
      for (int n = 0; n < BN / 8; n += 2) {
        uint32_t b0[2], b1[2];
        if (KROWS)
          ldBT(b0, b1, ks, LKR, kk * 16, n * 8); // [n = key][k = d]
        else
          ldB(b0, b1, ks, LK, kk * 16, n * 8); // [k = d][n = key]
        mma<T>(s[n], a, b0);
        mma<T>(s[n + 1], a, b1);
      }
    }

    // Scale, mask, online softmax (rows row[0]: s[.][0..1], row[1]: s[.][2..3]).
    // Only blocks past Tk or crossing this warp's diagonal need the mask.
    const bool masked = j0 + BN > p.tk || (p.causal && j0 + BN - 1 > i0 + warp * 16 + shift);
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float x = s[n][e] * sl;
        if (masked) {
          int64_t col = j0 + n * 8 + 2 * t + (e & 1);
          if (col >= p.tk || (p.causal && col > row[e / 2] + shift))
            x = -INFINITY;
        }
        s[n][e] = x;
        mx[e / 2] = fmaxf(mx[e / 2], x);
      }
    float alpha[2], mUse[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
      mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
      float mNew = fmaxf(m[h], mx[h]);
      mUse[h] = mNew == -INFINITY ? 0.0f : mNew; // 2^(-inf - 0) = 0, never NaN
      alpha[h] = exp2f(m[h] - mUse[h]);
      m[h] = mNew;
      l[h] *= alpha[h];
    }
#pragma unroll
    for (int n = 0; n < BN / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        float pe = exp2f(s[n][e] - mUse[e / 2]);
        s[n][e] = pe;
        l[e / 2] += pe;
      }
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      o[n][0] *= alpha[0];
      o[n][1] *= alpha[0];
      o[n][2] *= alpha[1];
      o[n][3] *= alpha[1];
    }
    // O += P V
#pragma unroll
    for (int kk = 0; kk < BN / 16; ++kk) {
      uint32_t a[4];
      cToA<T>(s, kk, a);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t b0[2], b1[2];
        ldB(b0, b1, vs, LV, kk * 16, n * 8);
        mma<T>(o[n], a, b0);
        mma<T>(o[n + 1], a, b1);
      }
    }
    __syncthreads(); // this buffer's reads are done before the next loads into it
  }
  cpAsyncWait<0>(); // kEnd == 0: Q's group, never waited on above

#pragma unroll
  for (int h = 0; h < 2; ++h) {
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
    l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    if (row[h] >= p.tq)
      continue;
    float inv = l[h] > 0.0f ? 1.0f / l[h] : 0.0f;
    T *yr = yE + row[h] * p.y.row;
#pragma unroll
    for (int n = 0; n < D / 8; ++n)
      *reinterpret_cast<uint32_t *>(yr + n * 8 + 2 * t) =
          packF<T>(o[n][2 * h] * inv, o[n][2 * h + 1] * inv);
    if (t == 0)
      lse[entry * p.tq + row[h]] = l[h] > 0.0f ? m[h] * kLn2 + logf(l[h]) : -INFINITY;
  }
}

// --- Backward --------------------------------------------------------------

constexpr int kBwdKeys = 64;
/// Query rows per step of the backward: fewer for D = 128 (registers).
template <int D> struct BwdRows {
  static constexpr int value = D == 64 ? 64 : 32;
};

template <int D> constexpr int bwdSmemBytes() {
  constexpr int BM = BwdRows<D>::value, BN = kBwdKeys;
  static_assert(BN * (D + kPad) <= D * (BN + kPad), "a K rows block fits");
  return 2 * (D * (BN + kPad) + BN * (D + kPad) + 2 * 2 * BM * (D + kPad) + BM * (BN + kPad)) +
         4 * 2 * 2 * BM;
}

template <typename T, int D, bool KROWS>
__global__ void __launch_bounds__(kThreads)
    flashBackwardKernel(FlashProblem p, const T *__restrict__ dy, const T *__restrict__ q,
                        const T *__restrict__ kt, const T *__restrict__ v,
                        const float *__restrict__ lse, const float *__restrict__ drow,
                        float *__restrict__ dqAcc, T *__restrict__ dkt, T *__restrict__ dv) {
  constexpr int BM = BwdRows<D>::value, BN = kBwdKeys;
  constexpr int LK = BN + kPad, LV = D + kPad, LQ = D + kPad, LS = BN + kPad;
  constexpr int LKR = D + kPad; // K rows form
  extern __shared__ __align__(16) unsigned char smemRaw[];
  T *ks = reinterpret_cast<T *>(smemRaw); // K block [D][BN] (K rows: [BN][D] in its room)
  T *vs = ks + D * LK;                    // V block [BN][D]
  T *stage = vs + BN * LV;                // two buffers of Q rows [BM][D], dY rows [BM][D]
  T *dss = stage + 2 * 2 * BM * LQ;       // dS [BM][BN]
  float *lBuf = reinterpret_cast<float *>(dss + BM * LS); // two buffers of LSE [BM]
  float *dBuf = lBuf + 2 * BM;                            // two buffers of Drow [BM]
  constexpr int LDQ = D + 4; // f32 dQ rows staged over a buffer's Q and dY
  static_assert(BM * LDQ * 4 <= 2 * BM * LQ * 2, "the dQ tile fits over Q and dY");

  const int64_t nkb = (p.tk + BN - 1) / BN;
  const int64_t entry = blockIdx.x / nkb;
  const int64_t j0 = (blockIdx.x % nkb) * BN;
  const int64_t offK = flashEntryOffset(p, p.k, entry), offV = flashEntryOffset(p, p.v, entry);
  const int64_t offDk = flashEntryOffset(p, p.dk, entry), offDv = flashEntryOffset(p, p.dv, entry);
  const T *qE = q + flashEntryOffset(p, p.q, entry), *dyE = dy + flashEntryOffset(p, p.y, entry);
  const T *ktE = kt + offK, *vE = v + offV;
  const float *lseE = lse + entry * p.tq, *drowE = drow + entry * p.tq;
  float *dqE = dqAcc + entry * p.tq * D;
  const int64_t shift = p.tk - p.tq;

  // Q, dY, LSE (log2 domain) and Drow rows [i0, i0 + BM) into buffer b.
  auto loadStep = [&](int64_t i0, int b) {
    T *qd = stage + b * 2 * BM * LQ;
    loadTileAsync<T, BM, D>(qd, qE + i0 * p.q.row, p.q.row, p.tq - i0, D);
    loadTileAsync<T, BM, D>(qd + BM * LQ, dyE + i0 * p.y.row, p.y.row, p.tq - i0, D);
    for (int r = threadIdx.x; r < BM; r += kThreads) {
      bool in = i0 + r < p.tq;
      lBuf[b * BM + r] = in ? lseE[i0 + r] * kLog2e : -INFINITY;
      dBuf[b * BM + r] = in ? drowE[i0 + r] : 0.0f;
    }
  };
  loadKBlock<T, D, BN, KROWS>(ks, ktE, p, j0);
  loadTileAsync<T, BN, D>(vs, vE + j0 * p.v.row, p.v.row, p.tk - j0, D);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t key[2] = {j0 + warp * 16 + g, j0 + warp * 16 + g + 8};
  float dvAcc[D / 8][4], dkAcc[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n)
#pragma unroll
    for (int e = 0; e < 4; ++e)
      dvAcc[n][e] = dkAcc[n][e] = 0.0f;

  const float sl = p.scale * kLog2e;
  int64_t iStart = 0; // the first query row that sees key j0
  if (p.causal && j0 - shift > 0)
    iStart = (j0 - shift) / BM * BM;

  if (iStart < p.tq)
    loadStep(iStart, 0);
  cpAsyncCommit(); // K, V and the first step

  // Two buffers: step i0 + BM loads while step i0 is multiplied.
  for (int64_t i0 = iStart, it = 0; i0 < p.tq; i0 += BM, ++it) {
    const int b = int(it & 1);
    T *qs = stage + b * 2 * BM * LQ, *dys = qs + BM * LQ;
    const float *ls = lBuf + b * BM, *drs = dBuf + b * BM;
    float *dqs = reinterpret_cast<float *>(qs);
    if (i0 + BM < p.tq) {
      loadStep(i0 + BM, b ^ 1);
      cpAsyncCommit();
      cpAsyncWait<1>();
    } else {
      cpAsyncWait<0>();
    }
    __syncthreads(); // this step's tiles (and K, V) have landed

    // S^T = K Q^T for this warp's 16 keys x BM queries.
    float st[BM / 8][4];
#pragma unroll
    for (int n = 0; n < BM / 8; ++n)
      st[n][0] = st[n][1] = st[n][2] = st[n][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t a[4];
      if (KROWS)
        ldA(a, ks, LKR, warp * 16, kk * 16); // [m = key][k = d]
      else
        ldAT(a, ks, LK, warp * 16, kk * 16); // [k = d][m = key]
#pragma unroll
      for (int n = 0; n < BM / 8; n += 2) {
        uint32_t b0[2], b1[2];
        ldBT(b0, b1, qs, LQ, kk * 16, n * 8);
        mma<T>(st[n], a, b0);
        mma<T>(st[n + 1], a, b1);
      }
    }
    // P^T = 2^(scale log2(e) S^T - log2(e) LSE), 0 where masked or the row
    // has no key; the bounds and the diagonal only where the block meets them.
    const bool edge = j0 + BN > p.tk || i0 + BM > p.tq ||
                      (p.causal && j0 + warp * 16 + 15 > i0 + shift);
#pragma unroll
    for (int n = 0; n < BM / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int c = n * 8 + 2 * t + (e & 1);
        float lq = ls[c];
        bool masked = lq == -INFINITY;
        if (edge) {
          int64_t qi = i0 + c, kj = key[e / 2];
          masked = masked || kj >= p.tk || qi >= p.tq || (p.causal && kj > qi + shift);
        }
        st[n][e] = masked ? 0.0f : exp2f(st[n][e] * sl - lq);
      }
    // dV += P^T dY
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      uint32_t a[4];
      cToA<T>(st, kk, a);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t b0[2], b1[2];
        ldB(b0, b1, dys, LQ, kk * 16, n * 8);
        mma<T>(dvAcc[n], a, b0);
        mma<T>(dvAcc[n + 1], a, b1);
      }
    }
    // dP^T = V dY^T, then dS^T = P^T (dP^T - Drow) into st.
    {
      float dpt[BM / 8][4];
#pragma unroll
      for (int n = 0; n < BM / 8; ++n)
        dpt[n][0] = dpt[n][1] = dpt[n][2] = dpt[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t a[4];
        ldA(a, vs, LV, warp * 16, kk * 16);
#pragma unroll
        for (int n = 0; n < BM / 8; n += 2) {
          uint32_t b0[2], b1[2];
          ldBT(b0, b1, dys, LQ, kk * 16, n * 8);
          mma<T>(dpt[n], a, b0);
          mma<T>(dpt[n + 1], a, b1);
        }
      }
#pragma unroll
      for (int n = 0; n < BM / 8; ++n)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          st[n][e] = st[n][e] * (dpt[n][e] - drs[n * 8 + 2 * t + (e & 1)]);
    }
    // dK += dS^T Q; dS (transposed back) to shared memory for dQ.
#pragma unroll
    for (int kk = 0; kk < BM / 16; ++kk) {
      uint32_t a[4];
      cToA<T>(st, kk, a);
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        uint32_t b0[2], b1[2];
        ldB(b0, b1, qs, LQ, kk * 16, n * 8);
        mma<T>(dkAcc[n], a, b0);
        mma<T>(dkAcc[n + 1], a, b1);
      }
    }
#pragma unroll
    for (int n = 0; n < BM / 8; ++n)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        int c = n * 8 + 2 * t + (e & 1);
        int kr = warp * 16 + g + (e / 2) * 8;
        uint32_t h = packF<T>(st[n][e], 0.0f);
        *reinterpret_cast<uint16_t *>(dss + c * LS + kr) = static_cast<uint16_t>(h & 0xffffu);
      }
    __syncthreads();
    // dQ[i0 + BM rows] += scale * dS K: warps split the rows (16 each), and
    // the columns when BM < 64.
    {
      constexpr int tiles = BM / 16, perTile = 4 / tiles, NQ = D / 8 / perTile;
      const int rt = warp / perTile, n0 = (warp % perTile) * NQ;
      float dq[NQ][4];
#pragma unroll
      for (int n = 0; n < NQ; ++n)
        dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t a[4];
        ldA(a, dss, LS, rt * 16, kk * 16);
#pragma unroll
        for (int n = 0; n < NQ; n += 2) {
          uint32_t b0[2], b1[2];
          if (KROWS)
            ldB(b0, b1, ks, LKR, kk * 16, (n0 + n) * 8); // [k = key][n = d]
          else
            ldBT(b0, b1, ks, LK, kk * 16, (n0 + n) * 8); // [n = d][k = key]
          mma<T>(dq[n], a, b0);
          mma<T>(dq[n + 1], a, b1);
        }
      }
      // Staged in shared memory over Q and dY (dead until the next step's
      // loads), then added to global memory 16 bytes a thread, a warp
      // covering whole rows: coalesced atomics.
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        float *dqr = dqs + (rt * 16 + g + 8 * h) * LDQ;
#pragma unroll
        for (int n = 0; n < NQ; ++n)
          *reinterpret_cast<float2 *>(dqr + (n0 + n) * 8 + 2 * t) =
              make_float2(p.scale * dq[n][2 * h], p.scale * dq[n][2 * h + 1]);
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < BM * (D / 4); idx += kThreads) {
      int r = idx / (D / 4), c = (idx % (D / 4)) * 4;
      if (i0 + r < p.tq)
        atomicAdd(reinterpret_cast<float4 *>(dqE + (i0 + r) * D + c),
                  *reinterpret_cast<const float4 *>(dqs + r * LDQ + c));
    }
    __syncthreads(); // this buffer and dS are read before the next loads into them
  }
  cpAsyncWait<0>(); // no step: K and V's group, never waited on above

  // dV [Tk, D] rows; dKt [D, Tk] columns, or K rows [Tk, D] (dK scaled here).
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    int64_t kj = key[h];
    if (kj >= p.tk)
      continue;
    T *dvr = dv + offDv + kj * p.dv.row;
    T *dkc = dkt + offDk + (KROWS ? kj * p.dk.row : kj);
#pragma unroll
    for (int n = 0; n < D / 8; ++n) {
      int c = n * 8 + 2 * t;
      *reinterpret_cast<uint32_t *>(dvr + c) = packF<T>(dvAcc[n][2 * h], dvAcc[n][2 * h + 1]);
      uint32_t k2 = packF<T>(p.scale * dkAcc[n][2 * h], p.scale * dkAcc[n][2 * h + 1]);
      if (KROWS) {
        *reinterpret_cast<uint32_t *>(dkc + c) = k2;
      } else {
        *reinterpret_cast<uint16_t *>(dkc + c * p.dk.row) = static_cast<uint16_t>(k2 & 0xffffu);
        *reinterpret_cast<uint16_t *>(dkc + (c + 1) * p.dk.row) = static_cast<uint16_t>(k2 >> 16);
      }
    }
  }
}

template <typename T>
__global__ void flashDqKernel(const float *__restrict__ acc, T *__restrict__ dq, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    uint32_t h = packF<T>(acc[i], 0.0f);
    reinterpret_cast<uint16_t *>(dq)[i] = static_cast<uint16_t>(h & 0xffffu);
  }
}

/// flashDqKernel into dQ's layout (p.dq): two columns a thread (D even, and
/// D contiguous with 8-element aligned rows, so 32-bit stores).
template <typename T>
__global__ void flashDqStridedKernel(const float *__restrict__ acc, T *__restrict__ dq,
                                     FlashProblem p) {
  const int64_t half = p.d / 2, n = p.entries * p.tq * half;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    int64_t r = i / half, c = (i % half) * 2; // r = entry * Tq + row
    int64_t off = flashEntryOffset(p, p.dq, r / p.tq) + (r % p.tq) * p.dq.row + c;
    *reinterpret_cast<uint32_t *>(dq + off) = packF<T>(acc[r * p.d + c], acc[r * p.d + c + 1]);
  }
}

/// Whether dQ's layout is the dense [entries, Tq, D] (flashDqKernel's).
bool denseQ(const FlashProblem &p) {
  if (p.dq.row != p.d && p.tq > 1)
    return false;
  int64_t stride = p.tq * p.d;
  for (int d = p.batchRank - 1; d >= 0; --d) {
    if (p.batch[d] != 1 && p.dq.batch[d] != stride)
      return false;
    stride *= p.batch[d];
  }
  return true;
}

// --- Launchers -------------------------------------------------------------

/// Raises a kernel's dynamic shared-memory limit on the current device,
/// once per (kernel, device): `done` holds one bit per device id (< 64; a
/// device beyond sets it on every launch). The first launch on a device is
/// the executor's uncaptured warm-up run.
template <typename K> bool allowSmem(K kernel, int bytes, std::atomic<uint64_t> &done) {
  if (bytes <= 48 * 1024)
    return true;
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess)
    return false;
  uint64_t bit = dev >= 0 && dev < 64 ? uint64_t(1) << dev : 0;
  if (bit && (done.load() & bit))
    return true;
  if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) !=
      cudaSuccess)
    return false;
  done.fetch_or(bit);
  return true;
}

bool fits(const FlashProblem &p) {
  return (p.d == 64 || p.d == 128) && p.tq > 0 && p.tk > 0 && p.entries > 0 &&
         p.batchRank >= 0 && p.batchRank <= kFlashMaxBatch;
}

template <typename T, int D, bool KROWS>
bool forwardAs(const FlashProblem &p, const void *q, const void *kt, const void *v, void *y,
               float *lse, cudaStream_t st) {
  constexpr int smem = fwdSmemBytes<D>();
  static std::atomic<uint64_t> smemDone{0};
  if (!allowSmem(flashForwardKernel<T, D, KROWS>, smem, smemDone))
    return false;
  int64_t blocks = p.entries * ((p.tq + kFwdRows - 1) / kFwdRows);
  if (blocks > INT32_MAX)
    return false;
  flashForwardKernel<T, D, KROWS><<<unsigned(blocks), kThreads, smem, st>>>(
      p, static_cast<const T *>(q), static_cast<const T *>(kt), static_cast<const T *>(v),
      static_cast<T *>(y), lse);
  return true;
}

template <typename T, int D, bool KROWS>
bool backwardAs(const FlashProblem &p, const void *dy, const void *q, const void *kt,
                const void *v, const float *lse, const float *drow, float *dqAcc, void *dq,
                void *dkt, void *dv, cudaStream_t st) {
  constexpr int smem = bwdSmemBytes<D>();
  static std::atomic<uint64_t> smemDone{0};
  if (!allowSmem(flashBackwardKernel<T, D, KROWS>, smem, smemDone))
    return false;
  int64_t blocks = p.entries * ((p.tk + kBwdKeys - 1) / kBwdKeys);
  if (blocks > INT32_MAX)
    return false;
  int64_t n = p.entries * p.tq * D;
  if (cudaMemsetAsync(dqAcc, 0, size_t(n) * sizeof(float), st) != cudaSuccess)
    return false;
  flashBackwardKernel<T, D, KROWS><<<unsigned(blocks), kThreads, smem, st>>>(
      p, static_cast<const T *>(dy), static_cast<const T *>(q), static_cast<const T *>(kt),
      static_cast<const T *>(v), lse, drow, dqAcc, static_cast<T *>(dkt), static_cast<T *>(dv));
  if (denseQ(p)) {
    unsigned g = unsigned(std::min<int64_t>((n + 255) / 256, 1 << 16));
    flashDqKernel<T><<<g, 256, 0, st>>>(dqAcc, static_cast<T *>(dq), n);
  } else {
    unsigned g = unsigned(std::min<int64_t>((n / 2 + 255) / 256, 1 << 16));
    flashDqStridedKernel<T><<<g, 256, 0, st>>>(dqAcc, static_cast<T *>(dq), p);
  }
  return true;
}

/// The kernels of dtype T: head dim and K form.
template <typename T>
bool forwardOf(const FlashProblem &p, const void *q, const void *kt, const void *v, void *y,
               float *lse, cudaStream_t st) {
  if (p.kRows)
    return p.d == 64 ? forwardAs<T, 64, true>(p, q, kt, v, y, lse, st)
                     : forwardAs<T, 128, true>(p, q, kt, v, y, lse, st);
  return p.d == 64 ? forwardAs<T, 64, false>(p, q, kt, v, y, lse, st)
                   : forwardAs<T, 128, false>(p, q, kt, v, y, lse, st);
}

template <typename T>
bool backwardOf(const FlashProblem &p, const void *dy, const void *q, const void *kt,
                const void *v, const float *lse, const float *drow, float *dqAcc, void *dq,
                void *dkt, void *dv, cudaStream_t st) {
  if (p.kRows)
    return p.d == 64
               ? backwardAs<T, 64, true>(p, dy, q, kt, v, lse, drow, dqAcc, dq, dkt, dv, st)
               : backwardAs<T, 128, true>(p, dy, q, kt, v, lse, drow, dqAcc, dq, dkt, dv, st);
  return p.d == 64
             ? backwardAs<T, 64, false>(p, dy, q, kt, v, lse, drow, dqAcc, dq, dkt, dv, st)
             : backwardAs<T, 128, false>(p, dy, q, kt, v, lse, drow, dqAcc, dq, dkt, dv, st);
}

} // namespace

bool launchFlashAttentionForward(const FlashProblem &p, const void *q, const void *kt,
                                 const void *v, void *y, float *lse, cudaStream_t st) {
  if (!fits(p))
    return false;
  return p.bf16 ? forwardOf<__nv_bfloat16>(p, q, kt, v, y, lse, st)
                : forwardOf<__half>(p, q, kt, v, y, lse, st);
}

bool launchFlashAttentionBackward(const FlashProblem &p, const void *dy, const void *q,
                                  const void *kt, const void *v, const float *lse,
                                  const float *drow, float *dqAcc, void *dq, void *dkt, void *dv,
                                  cudaStream_t st) {
  if (!fits(p))
    return false;
  return p.bf16 ? backwardOf<__nv_bfloat16>(p, dy, q, kt, v, lse, drow, dqAcc, dq, dkt, dv, st)
                : backwardOf<__half>(p, dy, q, kt, v, lse, drow, dqAcc, dq, dkt, dv, st);
}

} // namespace cuda
} // namespace rt
} // namespace strait
