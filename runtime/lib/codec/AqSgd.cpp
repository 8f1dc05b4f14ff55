//===- AqSgd.cpp - AQ-SGD delta compression of pipeline activations -------===//
#include "strait/runtime/AqSgd.h"

#include "strait/runtime/Codec.h"

#include <cmath>

namespace strait {
namespace rt {

std::string DeltaStreamKey::name() const {
  return std::string(send ? "send" : "recv") + "-p" + std::to_string(peer) + "-c" +
         std::to_string(channel);
}

int aqsgdBits(program::Codec codec) {
  switch (codec) {
  case program::CODEC_AQSGD_INT2: return 2;
  case program::CODEC_AQSGD_INT3: return 3;
  case program::CODEC_AQSGD_INT4: return 4;
  default: return 0;
  }
}

program::Codec aqsgdWireCodec(program::Codec codec) {
  switch (aqsgdBits(codec)) {
  case 2: return program::CODEC_INT2;
  case 3: return program::CODEC_INT3;
  default: return program::CODEC_INT4;
  }
}

namespace {
/// "the send to rank 1 on channel 0" for messages.
std::string describe(const DeltaStreamKey &key) {
  return std::string("AQ-SGD on the ") + (key.send ? "send to" : "recv from") + " rank " +
         std::to_string(key.peer) + " on channel " + std::to_string(key.channel);
}
constexpr float kHalfMax = 65504.0f;
} // namespace

uint64_t AqSgdState::stateBytes() const {
  uint64_t bytes = 0;
  for (const auto &[key, s] : streams)
    bytes += 2ull * s.m.size() + s.seen.size();
  return bytes;
}

StatusOr<AqSgdState::Stream *> AqSgdState::streamFor(const DeltaStreamKey &key, int64_t numel,
                                                     const uint64_t *samples, size_t count) {
  if (count == 0 || numel % static_cast<int64_t>(count) != 0)
    return invalidArgument(describe(key) + ": the value of " + std::to_string(numel) +
                           " elements does not split into rows of the micro-batch's " +
                           std::to_string(count) + " samples");
  for (size_t i = 0; i < count; ++i)
    if (samples[i] >= numSamples)
      return invalidArgument(describe(key) + ": sample " + std::to_string(samples[i]) +
                             " outside the dataset's " + std::to_string(numSamples));
  uint64_t row = static_cast<uint64_t>(numel) / count;
  auto it = streams.find(key);
  if (it != streams.end()) {
    if (it->second.rowElements != row)
      return invalidArgument(describe(key) + ": rows of " + std::to_string(row) +
                             " elements, earlier transfers had " +
                             std::to_string(it->second.rowElements));
    return &it->second;
  }
  uint64_t need = numSamples * row * 2 + numSamples;
  if (stateBytes() + need > maxBytes)
    return invalidArgument(
        describe(key) + " keeps m(x) for " + std::to_string(numSamples) + " samples x " +
        std::to_string(row) + " elements in f16 = " + std::to_string(need) +
        " bytes; with the other cuts' " + std::to_string(stateBytes()) +
        " that exceeds the limit of " + std::to_string(maxBytes) +
        " bytes (strait-run --aqsgd-max-mib; a smaller dataset or another codec)");
  Stream s;
  s.rowElements = row;
  s.m.assign(numSamples * row, 0);
  s.seen.assign(numSamples, 0);
  return &streams.emplace(key, std::move(s)).first->second;
}

Status AqSgdState::setStream(const DeltaStreamKey &key, Stream stream) {
  if (stream.seen.size() != numSamples || stream.m.size() != numSamples * stream.rowElements)
    return invalidArgument(describe(key) + ": restored state of " +
                           std::to_string(stream.seen.size()) + " samples x " +
                           std::to_string(stream.rowElements) + " elements does not fit the " +
                           "dataset's " + std::to_string(numSamples) + " samples");
  std::lock_guard<std::mutex> lock(mutex);
  streams[key] = std::move(stream);
  return Status::ok();
}

program::CodecParams AqSgdState::wireFor(const Stream &s, const uint64_t *samples, size_t count,
                                         const program::CodecParams &params) const {
  bool fresh = false;
  for (size_t i = 0; i < count; ++i)
    fresh |= !s.seen[samples[i]];
  program::CodecParams wire;
  wire.set_codec(fresh ? program::CODEC_INT8 : aqsgdWireCodec(params.codec()));
  wire.set_block_size(params.block_size());
  return wire;
}

std::vector<float> AqSgdState::gather(const Stream &s, const uint64_t *samples,
                                      size_t count) const {
  uint64_t row = s.rowElements;
  std::vector<float> out(count * row);
  for (size_t r = 0; r < count; ++r) {
    const uint16_t *m = s.m.data() + samples[r] * row;
    for (uint64_t j = 0; j < row; ++j)
      out[r * row + j] = halfToFloat(m[j]);
  }
  return out;
}

Status AqSgdState::update(Stream &s, const DeltaStreamKey &key, const uint64_t *samples,
                          size_t count, const std::vector<float> &mOld, const float *dq,
                          float *out) {
  uint64_t row = s.rowElements;
  for (size_t r = 0; r < count; ++r) {
    uint16_t *m = s.m.data() + samples[r] * row;
    for (uint64_t j = 0; j < row; ++j) {
      uint64_t i = r * row + j;
      float v = mOld[i] + dq[i];
      if (std::fabs(v) > kHalfMax)
        return invalidArgument(describe(key) + ": sample " + std::to_string(samples[r]) +
                               " element " + std::to_string(j) + " reconstructs to " +
                               std::to_string(v) +
                               ", outside the f16 range of the kept state");
      m[j] = floatToHalf(v);
      if (out)
        out[i] = v;
    }
    s.seen[samples[r]] = 1;
  }
  return Status::ok();
}

Status AqSgdState::prepareSend(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                               const Tensor &activation, const program::CodecParams &params,
                               std::vector<float> &delta, program::CodecParams &wire) {
  if (activation.dtype != program::DTYPE_F32)
    return invalidArgument(describe(key) + ": a " + activation.typeString() +
                           " value (f32 only)");
  std::lock_guard<std::mutex> lock(mutex);
  STRAIT_ASSIGN_OR_RETURN(Stream * s, streamFor(key, activation.numel(), samples, count));
  wire = wireFor(*s, samples, count, params);
  std::vector<float> mOld = gather(*s, samples, count);
  const float *a = activation.as<float>();
  delta.resize(mOld.size());
  for (size_t i = 0; i < mOld.size(); ++i)
    delta[i] = a[i] - mOld[i];
  // Q(delta) exactly as the receiver decodes it: the transport encodes the
  // same delta with the same codec, so the payloads are equal byte for byte.
  std::vector<uint8_t> payload;
  STRAIT_RETURN_IF_ERROR(encode(wire, delta.data(), static_cast<int64_t>(delta.size()), payload));
  std::vector<float> dq(delta.size());
  STRAIT_RETURN_IF_ERROR(
      decode(payload.data(), payload.size(), dq.data(), static_cast<int64_t>(dq.size())));
  return update(*s, key, samples, count, mOld, dq.data(), nullptr);
}

Status AqSgdState::prepareRecv(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                               int64_t numel, const program::CodecParams &params,
                               program::CodecParams &wire) {
  std::lock_guard<std::mutex> lock(mutex);
  STRAIT_ASSIGN_OR_RETURN(Stream * s, streamFor(key, numel, samples, count));
  wire = wireFor(*s, samples, count, params);
  return Status::ok();
}

Status AqSgdState::finishRecv(const DeltaStreamKey &key, const uint64_t *samples, size_t count,
                              const Tensor &value) {
  std::lock_guard<std::mutex> lock(mutex);
  STRAIT_ASSIGN_OR_RETURN(Stream * s, streamFor(key, value.numel(), samples, count));
  std::vector<float> mOld = gather(*s, samples, count);
  float *v = value.as<float>();
  std::vector<float> dq(v, v + mOld.size());
  return update(*s, key, samples, count, mOld, dq.data(), v);
}

} // namespace rt
} // namespace strait
