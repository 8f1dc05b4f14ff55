//===- ErrorFeedback.cpp - Error feedback and the host codec engine -------===//
//
// ErrorFeedback (Codec.h): encode x + residual, keep what the payload did not
// carry; loss scaling's iterations (keep, roll back, rescale) on the host
// residual, the device state and the sub-streams alike. hostCodecEngine():
// the host codec as a compressed all-reduce's CodecEngine.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Codec.h"
#include "strait/runtime/ThreadPool.h"

#include <cmath>
#include <utility>

namespace strait {
namespace rt {
namespace {
constexpr int64_t kGrain = 1 << 16;
} // namespace

Status ErrorFeedback::encode(const program::CodecParams &params,
                             const float *data, int64_t numel,
                             std::vector<uint8_t> &out) {
  lastPayloadBytes = 0;
  if (!params.error_feedback() || params.codec() == program::CODEC_NONE) {
    STRAIT_RETURN_IF_ERROR(rt::encode(params, data, numel, out));
    lastPayloadBytes = out.size();
    if (decodedOut) {
      lastPayload = out;
      return decode(out.data(), out.size(), decodedOut, numel);
    }
    return Status::ok();
  }
  if (residual.size() != static_cast<size_t>(numel))
    residual.assign(numel, 0.0f);
  // The first encode of an iteration that may be discarded writes the new
  // residual into `previous` and swaps: `previous` then keeps the old one.
  if (armed)
    previous.resize(numel);
  float *next = armed ? previous.data() : residual.data();
  // The dense codecs in one pass (encodeWithResidual); the others in steps.
  STRAIT_ASSIGN_OR_RETURN(
      bool fused, encodeWithResidual(params, data, residual.data(), next, numel, out, decodedOut));
  if (!fused) {
    // data + residual, in one buffer per thread shared by every stream (it
    // lives only during this call): a stream keeps its residual and, under
    // loss scaling, the previous one, not a sum of its own as well.
    static thread_local std::vector<float> scratch;
    if (scratch.size() < static_cast<size_t>(numel))
      scratch.resize(numel);
    float *sum = scratch.data();
    const float *old = residual.data();
    parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i)
        sum[i] = data[i] + old[i];
    });
    STRAIT_RETURN_IF_ERROR(rt::encode(params, sum, numel, out));
    // next = sum - decode(out): decode into it, then subtract.
    STRAIT_RETURN_IF_ERROR(decode(out.data(), out.size(), next, numel));
    if (decodedOut) // the decoded bits themselves, not sum - residual
      std::copy(next, next + numel, decodedOut);
    // A non-finite entry (an overflowed f16 gradient under loss scaling,
    // whose step every rank then skips) leaves the residual as 0, not inf or
    // nan: kept, it would poison every later step's sum and no step would
    // be taken again.
    parallelFor(numel, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        float r = sum[i] - next[i];
        next[i] = std::isfinite(r) ? r : 0.0f;
      }
    });
  }
  if (armed) {
    std::swap(residual, previous);
    armed = false;
    kept = true;
  }
  if (decodedOut)
    lastPayload = out;
  lastPayloadBytes = out.size();
  return Status::ok();
}

StatusOr<std::vector<float>> ErrorFeedback::residualValues() const {
  if (device && residual.empty())
    return device->download();
  return residual; // host, or restored and not yet taken over by the device
}

Status ErrorFeedback::restoreResidual(std::vector<float> r) {
  if (!device) {
    residual = std::move(r);
    return Status::ok();
  }
  residual.clear();
  return device->upload(r);
}

/// `op` on the stream's device state (if any), then on every sub-stream.
template <typename Op>
Status ErrorFeedback::forDeviceAndParts(Op &&op) {
  if (device)
    STRAIT_RETURN_IF_ERROR(op(*device));
  for (auto &p : parts)
    if (p)
      STRAIT_RETURN_IF_ERROR(op(*p));
  return Status::ok();
}

Status ErrorFeedback::beginIteration() {
  armed = true;
  kept = false;
  return forDeviceAndParts([](auto &s) { return s.beginIteration(); });
}

Status ErrorFeedback::rollBack() {
  if (kept)
    std::swap(residual, previous);
  else if (!armed) // made during the iteration: it started from zero
    residual.clear();
  armed = kept = false;
  return forDeviceAndParts([](auto &s) { return s.rollBack(); });
}

Status ErrorFeedback::scaleResidual(float factor) {
  float *r = residual.data();
  parallelFor(static_cast<int64_t>(residual.size()), kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      r[i] *= factor;
  });
  return forDeviceAndParts([factor](auto &s) { return s.scaleResidual(factor); });
}

namespace {
class HostCodecEngine final : public CodecEngine {
public:
  Status encode(const program::CodecParams &params, const float *x, int64_t numel,
                ErrorFeedback *feedback, std::vector<uint8_t> &out) override {
    return feedback ? feedback->encode(params, x, numel, out) : rt::encode(params, x, numel, out);
  }
  Status decode(const uint8_t *payload, size_t bytes, float *out, int64_t numel,
                bool accumulate) override {
    return rt::decode(payload, bytes, out, numel, accumulate);
  }
};
} // namespace

CodecEngine &hostCodecEngine() {
  static HostCodecEngine engine;
  return engine;
}

} // namespace rt
} // namespace strait
