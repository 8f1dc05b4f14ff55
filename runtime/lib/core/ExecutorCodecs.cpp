//===- ExecutorCodecs.cpp - The executor's codec streams ------------------===//
//
// Sends and receives whose codec keeps state across iterations: AQ-SGD's
// activation deltas (the micro-batch's dataset samples), keep_decoded sends
// (the sender continues with what the peer decodes) and their repeated
// payloads, and adaptive top-k (the ratio of the stream's controller).
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Executor.h"
#include "strait/runtime/Codec.h"
#include "strait/runtime/Program.h"

#include <algorithm>
#include <chrono>
#include <cmath>

namespace strait {
namespace rt {

bool Executor::usesActivationDeltas() const {
  for (const auto &step : program.steps())
    if ((step.has_send() && isAqSgdCodec(step.send().codec().codec())) ||
        (step.has_recv() && isAqSgdCodec(step.recv().codec().codec())))
      return true;
  return false;
}

StatusOr<std::pair<const uint64_t *, size_t>> Executor::microBatchSamples(int index) const {
  const program::Step &step = program.steps(index);
  if (!deltas || batchSamples.empty())
    return invalidArgument("codec " + program::Codec_Name(step.has_send()
                                                              ? step.send().codec().codec()
                                                              : step.recv().codec().codec()) +
                           " needs the dataset samples of each micro-batch (strait-run takes "
                           "them from --data)");
  if (!step.has_micro_batch())
    return invalidArgument("an AQ-SGD transfer outside a micro-batch (not an activation)");
  size_t per = batchSamples.size() / microBatches;
  if (per * microBatches != batchSamples.size())
    return invalidArgument("a batch of " + std::to_string(batchSamples.size()) +
                           " samples does not split into " + std::to_string(microBatches) +
                           " micro-batches");
  return std::make_pair(batchSamples.data() + per * step.micro_batch(), per);
}

Status Executor::sendDelta(int index, const program::Send &m, const Tensor &v) {
  STRAIT_ASSIGN_OR_RETURN(auto samples, microBatchSamples(index));
  std::vector<float> delta;
  program::CodecParams wire;
  STRAIT_RETURN_IF_ERROR(deltas->prepareSend({true, m.peer(), m.channel()}, samples.first,
                                             samples.second, v, m.codec(), delta, wire));
  Tensor d{program::DTYPE_F32, v.shape, delta.data()};
  return m.deferred() ? comm->sendDeferred(d, m.peer(), m.channel(), wire, nullptr)
                      : comm->sendCoded(d, m.peer(), m.channel(), wire, nullptr);
}

Status Executor::sendDecoded(const program::Send &m, const Tensor &v, ErrorFeedback *state) {
  if (m.repeat_payload()) {
    auto it = decodedPayloads.find(m.value_id());
    if (it == decodedPayloads.end() || it->second->getLastPayload().empty())
      return internalError("send on channel " + std::to_string(m.channel()) +
                           " repeats the payload of value " + std::to_string(m.value_id()) +
                           ", which no keep_decoded send encoded this iteration");
    const std::vector<uint8_t> &p = it->second->getLastPayload();
    Tensor wire{program::DTYPE_U8, {static_cast<int64_t>(p.size())},
                const_cast<uint8_t *>(p.data())};
    return m.deferred() ? comm->sendDeferred(wire, m.peer(), m.channel(), program::CodecParams(),
                                             nullptr)
                        : comm->send(wire, m.peer(), m.channel());
  }
  if (!state)
    return internalError("keep_decoded send on channel " + std::to_string(m.channel()) +
                         " has no codec stream");
  // Through host copies (the value may be device memory): the host encoder
  // writes the decoded payload, which then replaces the value.
  size_t n = static_cast<size_t>(v.numel());
  decodedIn.resize(n);
  decodedOut.resize(n);
  STRAIT_RETURN_IF_ERROR(backend->copy(decodedIn.data(), v.data, v.byteSize()));
  Tensor host{program::DTYPE_F32, v.shape, decodedIn.data()};
  state->setDecodedOutput(decodedOut.data());
  Status sent = m.deferred() ? comm->sendDeferred(host, m.peer(), m.channel(), m.codec(), state)
                             : comm->sendCoded(host, m.peer(), m.channel(), m.codec(), state);
  state->setDecodedOutput(nullptr);
  STRAIT_RETURN_IF_ERROR(sent);
  decodedPayloads[m.value_id()] = state;
  return backend->copy(v.data, decodedOut.data(), v.byteSize());
}

Status Executor::recvDelta(int index, const program::Recv &m, const Tensor &v) {
  STRAIT_ASSIGN_OR_RETURN(auto samples, microBatchSamples(index));
  DeltaStreamKey key{false, m.peer(), m.channel()};
  program::CodecParams wire;
  STRAIT_RETURN_IF_ERROR(
      deltas->prepareRecv(key, samples.first, samples.second, v.numel(), m.codec(), wire));
  STRAIT_RETURN_IF_ERROR(m.deferred() ? comm->recvDeferred(v, m.peer(), m.channel(), wire)
                                      : comm->recvCoded(v, m.peer(), m.channel(), wire));
  return deltas->finishRecv(key, samples.first, samples.second, v);
}

namespace {
bool adaptiveDefault = true;
} // namespace

bool adaptiveTopKDefault() { return adaptiveDefault; }
void Executor::setAdaptiveTopKDefault(bool on) { adaptiveDefault = on; }

/// Sends with the ratio of the stream's controller and feeds it the send's
/// time and payload size. The payload size is the error feedback state's
/// (every adaptive send has one); a stream encoded on the device leaves it
/// 0, and the size is then the top-k layout's bound for u32 indices or a
/// bitmap (CodecLayout.h).
Status Executor::sendAdaptive(const program::Send &m, const Tensor &v, ErrorFeedback *state,
                              std::chrono::steady_clock::time_point ready) {
  AdaptiveRatio &c = *adaptive.at({m.peer(), m.channel()});
  program::CodecParams codec = m.codec();
  codec.set_topk_ratio(static_cast<float>(c.ratio()));
  // k as the encoder computes it (topkCount in the codec library).
  int64_t n = v.numel();
  int64_t k = std::max<int64_t>(
      1, std::min<int64_t>(n, static_cast<int64_t>(std::ceil(
                                  static_cast<double>(codec.topk_ratio()) * n))));
  using Clock = std::chrono::steady_clock;
  static const Clock::time_point epoch = Clock::now();
  auto seconds = [](Clock::time_point t) {
    return std::chrono::duration<double>(t - epoch).count();
  };
  Clock::time_point start = Clock::now();
  // Sent on the computing thread (runStep) unless run() queued it.
  bool onComputeThread = ready == Clock::time_point{};
  if (onComputeThread)
    ready = start;
  if (state)
    state->setLastSendPhases({});
  STRAIT_RETURN_IF_ERROR(comm->sendCoded(v, m.peer(), m.channel(), codec, state));
  Clock::time_point end = Clock::now();
  uint64_t bytes = state ? state->getLastPayloadBytes() : 0;
  if (bytes == 0)
    bytes = kTopKFixedBytes + 4ull * k +
            std::min<uint64_t>(4ull * k, (static_cast<uint64_t>(v.numel()) + 7) / 8);
  // The transport's header phase is the receiver getting to its receive.
  double receiverWait = state ? std::max(0.0, state->getLastSendPhases().headerSeconds) : 0.0;
  c.observe(seconds(ready), seconds(start), seconds(end), bytes, k, onComputeThread,
            receiverWait);
  return Status::ok();
}

std::vector<Executor::AdaptiveLink> Executor::getAdaptiveLinks() const {
  std::vector<AdaptiveLink> out;
  for (const auto &[key, c] : adaptive)
    out.push_back({key.first, key.second, c->ratio(), c->throughput(), c->budget()});
  return out;
}

} // namespace rt
} // namespace strait
