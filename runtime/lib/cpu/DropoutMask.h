//===- DropoutMask.h - The counter-based mask of DropoutTraining -*- C++ -*-===//
//
// The keep/drop decision of element i of a DropoutTraining kernel is a pure
// function of (seed, key, iteration, micro-batch, replica, i): splitmix64
// hashes, nothing stored, so the gradient (the same kernel on dY), a
// recomputed forward and a resumed job regenerate exactly the same mask, and
// a CUDA kernel can compute it per thread (docs/training.md, "Dropout").
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_CPU_DROPOUTMASK_H
#define STRAIT_RUNTIME_CPU_DROPOUTMASK_H

#include <cstdint>
#if !defined(__CUDACC__)
#include "strait/runtime/Backend.h"

#include <string>
#endif

// The CUDA kernel (runtime/lib/cuda/Elementwise.cu) calls the same functions.
#if defined(__CUDACC__)
#define STRAIT_DROPOUT_HD __host__ __device__
#else
#define STRAIT_DROPOUT_HD
#endif

namespace strait {
namespace rt {
namespace cpu {

/// splitmix64's output function of state z (Steele, Lea, Flood 2014).
STRAIT_DROPOUT_HD inline uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/// The stream of one kernel run: the key chained through splitmix64.
STRAIT_DROPOUT_HD inline uint64_t dropoutStream(uint64_t seed, int64_t key,
                                                int64_t iteration, int64_t microBatch,
                                                int64_t replica) {
  uint64_t h = splitmix64(seed);
  h = splitmix64(h ^ static_cast<uint64_t>(key));
  h = splitmix64(h ^ static_cast<uint64_t>(iteration));
  h = splitmix64(h ^ static_cast<uint64_t>(microBatch));
  return splitmix64(h ^ static_cast<uint64_t>(replica));
}

/// The drop threshold of ratio p in [0, 1): element i is kept when the top
/// 32 bits of its hash are >= p * 2^32 (so it is kept with probability
/// 1 - p, to within 2^-32).
STRAIT_DROPOUT_HD inline uint64_t dropoutThreshold(float p) {
  if (!(p > 0))
    return 0;
  if (p >= 1)
    return uint64_t(1) << 32; // nothing is kept
  return static_cast<uint64_t>(static_cast<double>(p) * 4294967296.0);
}

/// Whether element i of the stream is kept: splitmix64's i-th output.
STRAIT_DROPOUT_HD inline bool dropoutKeeps(uint64_t stream, uint64_t i,
                                           uint64_t threshold) {
  return (splitmix64(stream + i * 0x9E3779B97F4A7C15ull) >> 32) >= threshold;
}

#if !defined(__CUDACC__)
/// DropoutTraining's attributes (ratio in [0, 1), key, seed, replica) and
/// its optional input 1, the i64 "step", checked the same way for every
/// backend.
struct DropoutArgs {
  float ratio = 0.5f;
  int64_t key = 0, seed = 0, replica = 0;
  const Tensor *step = nullptr; // one i64, or null: iteration 0
};
inline StatusOr<DropoutArgs> readDropoutArgs(const KernelContext &ctx) {
  DropoutArgs d;
  const AttrReader &a = ctx.getAttrs();
  STRAIT_ASSIGN_OR_RETURN(d.ratio, a.getFloat("ratio", 0.5f));
  if (!(d.ratio >= 0 && d.ratio < 1))
    return ctx.error("ratio " + std::to_string(d.ratio) + " is not in [0, 1)");
  STRAIT_ASSIGN_OR_RETURN(d.key, a.getInt("key", 0));
  STRAIT_ASSIGN_OR_RETURN(d.seed, a.getInt("seed", 0));
  STRAIT_ASSIGN_OR_RETURN(d.replica, a.getInt("replica", 0));
  d.step = ctx.input(1);
  if (d.step && (d.step->dtype != program::DTYPE_I64 || d.step->numel() != 1))
    return ctx.error("input 1 (step) must be one i64, got " + d.step->typeString());
  return d;
}
#endif

} // namespace cpu
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_CPU_DROPOUTMASK_H
