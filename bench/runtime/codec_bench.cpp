//===- codec_bench.cpp - Throughput of the transfer codecs ----------------===//
//
// Encode and decode throughput of every codec (GB/s of f32 input), the
// payload size against f32, and top-k selection against a full sort of the
// magnitudes measured in the same run (the ratio docs/benchmarks.md
// records), and error feedback's one-pass encode against its steps taken
// apart. Usage: strait-codec-bench [--numel N] [--threads T] [--reps R]
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Codec.h"
#include "strait/runtime/ThreadPool.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

using namespace strait;
using namespace strait::rt;

namespace {

double seconds() {
  return std::chrono::duration<double>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// Median time of `reps` runs of fn.
template <typename Fn> double timeIt(int reps, Fn fn) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    double s = seconds();
    fn();
    t.push_back(seconds() - s);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

program::CodecParams codecOf(program::Codec c, float ratio = 0.01f) {
  program::CodecParams p;
  p.set_codec(c);
  p.set_topk_ratio(ratio);
  return p;
}

} // namespace

int main(int argc, char **argv) {
  int64_t n = 1 << 24;
  int threads = 0, reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string a = argv[i];
    if (a == "--numel")
      n = std::atoll(argv[i + 1]);
    else if (a == "--threads")
      threads = std::atoi(argv[i + 1]);
    else if (a == "--reps")
      reps = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "usage: %s [--numel N] [--threads T] [--reps R]\n", argv[0]);
      return 2;
    }
  }
  if (threads > 0)
    setNumThreads(threads);
  std::vector<float> x(n);
  std::mt19937 gen(1);
  std::normal_distribution<float> d(0.0f, 1.0f);
  for (auto &v : x)
    v = d(gen);
  std::vector<float> y(n);
  std::vector<uint8_t> payload;
  double gb = 4.0 * n / 1e9;
  std::printf("numel %lld (%.1f MB f32), threads %d, median of %d\n", (long long)n,
              4.0 * n / 1e6, getNumThreads(), reps);
  std::printf("| codec | encode GB/s | decode GB/s | payload / f32 |\n|---|---|---|---|\n");
  struct Case {
    const char *name;
    program::CodecParams p;
  };
  std::vector<Case> cases = {{"none", codecOf(program::CODEC_NONE)},
                             {"fp16", codecOf(program::CODEC_FP16)},
                             {"bf16", codecOf(program::CODEC_BF16)},
                             {"int8 (block 256)", codecOf(program::CODEC_INT8)},
                             {"int4 (block 256)", codecOf(program::CODEC_INT4)},
                             {"topk 1%", codecOf(program::CODEC_TOPK, 0.01f)},
                             {"topk 10%", codecOf(program::CODEC_TOPK, 0.1f)},
                             {"topk 1% int8 values", codecOf(program::CODEC_TOPK_INT8, 0.01f)},
                             {"topk 1% int4 values", codecOf(program::CODEC_TOPK_INT4, 0.01f)},
                             {"topk 0.1% int8 values", codecOf(program::CODEC_TOPK_INT8, 0.001f)},
                             {"topk 10% int8 values", codecOf(program::CODEC_TOPK_INT8, 0.1f)}};
  for (const Case &c : cases) {
    double te = timeIt(reps, [&] {
      if (!encode(c.p, x.data(), n, payload).isOk())
        std::abort();
    });
    double td = timeIt(reps, [&] {
      if (!decode(payload.data(), payload.size(), y.data(), n).isOk())
        std::abort();
    });
    std::printf("| %s | %.2f | %.2f | 1/%.1f |\n", c.name, gb / te, gb / td,
                4.0 * n / payload.size());
  }
  // Error feedback's encode (ErrorFeedback::encode) of the dense codecs in
  // one pass (encodeWithResidual) against its steps taken apart, as it ran
  // before: sum = x + residual, encode(sum), decode into the residual,
  // residual = sum - decoded.
  std::printf("\n| codec with error feedback | one pass GB/s | steps apart GB/s | speed-up |\n"
              "|---|---|---|---|\n");
  std::vector<float> residual(n, 0.0f), sum(n);
  for (const Case &c : {cases[1], cases[2], cases[3], cases[4]}) {
    program::CodecParams p = c.p;
    p.set_error_feedback(true);
    double tFused = timeIt(reps, [&] {
      StatusOr<bool> done =
          encodeWithResidual(p, x.data(), residual.data(), residual.data(), n, payload);
      if (!done.isOk() || !*done)
        std::abort();
    });
    double tSteps = timeIt(reps, [&] {
      parallelFor(n, 1 << 16, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i)
          sum[i] = x[i] + residual[i];
      });
      if (!encode(p, sum.data(), n, payload).isOk() ||
          !decode(payload.data(), payload.size(), residual.data(), n).isOk())
        std::abort();
      parallelFor(n, 1 << 16, [&](int64_t lo, int64_t hi) {
        for (int64_t i = lo; i < hi; ++i) {
          float r = sum[i] - residual[i];
          residual[i] = std::isfinite(r) ? r : 0.0f;
        }
      });
    });
    std::printf("| %s | %.2f | %.2f | %.2fx |\n", c.name, gb / tFused, gb / tSteps,
                tSteps / tFused);
  }
  // Top-k selection (linear expected time) against the full sort baseline:
  // indices ordered by descending magnitude, the first k kept.
  int64_t k = topkCount(codecOf(program::CODEC_TOPK, 0.01f), n);
  double tTopk = timeIt(reps, [&] {
    if (!encode(codecOf(program::CODEC_TOPK, 0.01f), x.data(), n, payload).isOk())
      std::abort();
  });
  std::vector<uint32_t> idx(n);
  double tSort = timeIt(std::max(1, reps / 2), [&] {
    for (int64_t i = 0; i < n; ++i)
      idx[i] = static_cast<uint32_t>(i);
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t b) {
      float fa = std::fabs(x[a]), fb = std::fabs(x[b]);
      return fa > fb || (fa == fb && a < b);
    });
    std::sort(idx.begin(), idx.begin() + k);
  });
  std::printf("\ntop-k 1%% (k = %lld): encode %.1f ms, full sort %.1f ms, "
              "speed-up %.1fx\n",
              (long long)k, tTopk * 1e3, tSort * 1e3, tSort / tTopk);
  return 0;
}
