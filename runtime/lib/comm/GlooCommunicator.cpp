//===- GlooCommunicator.cpp - Communicator over Gloo's TCP transport ------===//
//
// Rendezvous through Gloo's file store (one machine / shared folder) or Redis
// store (across machines), a full mesh of TCP pairs, and:
//  - send/recv: a 16-byte header (magic, byte count) then the payload, on two
//    Gloo slots derived from the channel, so that a size mismatch between the
//    two ends is a clear error instead of a transport abort;
//  - sendCoded/recvCoded: the same with a codec payload (lib/codec) of
//    variable size;
//  - sendDeferred: the same message, copied (or encoded) into a buffer of
//    its own and posted without waiting; flushSends() waits for them;
//  - all-reduce: a ring reduce-scatter + all-gather on unbound buffers, the
//    compressed variant (every rank encodes once, the group exchanges the
//    payloads and each rank decodes and sums them in rank order), and the
//    hierarchical one over islands (docs/runtime.md, "All-reduce");
//  - barrier.
// Every buffer is posted through postSend/postRecv, which count the bytes
// per peer (takeTraffic), and waited for through waitSend/waitRecv. With a
// link secret (GlooOptions::linkSecretFile) these four seal every buffer
// (Seal.h): postSend encrypts into a buffer of its own that travels with a
// 16-byte tag, postRecv receives into one, waitRecv verifies and decrypts
// into the caller's memory. Every Gloo exception becomes a Status naming
// this rank and the peer.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Communicator.h"

#include "Seal.h"

#include <gloo/barrier.h>
#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <optional>
#include <mutex>

namespace strait {
namespace rt {
namespace {

constexpr uint64_t kHeaderMagic = 0x5354524149543031ull; // "STRAIT01"

struct MessageHeader {
  uint64_t magic;
  uint64_t bytes;
};

class GlooCommunicator : public Communicator {
public:
  GlooCommunicator(const GlooOptions &options,
                   std::unique_ptr<gloo::rendezvous::Store> store,
                   std::unique_ptr<gloo::rendezvous::PrefixStore> prefixed,
                   std::shared_ptr<gloo::rendezvous::Context> context,
                   std::unique_ptr<LinkSealer> sealer)
      : options(options), store(std::move(store)),
        prefixed(std::move(prefixed)), context(std::move(context)),
        sealer(std::move(sealer)) {}

  int getRank() const override { return options.rank; }
  int getWorldSize() const override { return options.worldSize; }

  Status send(const Tensor &tensor, int peer, uint32_t channel) override;
  Status recv(const Tensor &tensor, int peer, uint32_t channel) override;
  Status allReduceSum(const Tensor &tensor, uint32_t channel) override;
  Status allReduceSumGroup(const Tensor &tensor, const std::vector<int> &ranks,
                           uint32_t channel) override;
  Status barrier() override;
  Status sendCoded(const Tensor &tensor, int peer, uint32_t channel,
                   const program::CodecParams &codec,
                   ErrorFeedback *feedback) override;
  Status recvCoded(const Tensor &tensor, int peer, uint32_t channel,
                   const program::CodecParams &codec) override;
  Status allReduce(const Tensor &tensor, uint32_t channel,
                   const AllReduceOptions &options) override;
  Status sendDeferred(const Tensor &tensor, int peer, uint32_t channel,
                      const program::CodecParams &codec, ErrorFeedback *feedback) override;
  Status flushSends() override;
  TrafficCounters takeTraffic() override;

private:
  /// A transfer handed to Gloo: one Gloo buffer, or, sealed, one per
  /// chunk of kSealChunkBytes, each sealed on its own (ciphertext + tag in
  /// `wire`, counters `counter`, `counter` + 1, ...), so that sealing,
  /// the wire and opening overlap. A receive opens the chunks into `plain`
  /// at waitRecv. release() lets Gloo's buffers go before `wire` returns
  /// to the pool.
  struct Buf {
    WirePool::Block wire;
    WirePool *pool = nullptr; // where `wire` goes back
    std::vector<std::unique_ptr<gloo::transport::UnboundBuffer>> bufs;
    void *plain = nullptr;
    size_t bytes = 0;
    int peer = -1;
    uint64_t slot = 0, counter = 0;
    explicit operator bool() const { return !bufs.empty(); }
    Buf() = default;
    Buf(Buf &&) = default;
    Buf &operator=(Buf &&other) {
      release();
      wire = std::move(other.wire);
      pool = other.pool;
      bufs = std::move(other.bufs);
      plain = other.plain;
      bytes = other.bytes;
      peer = other.peer;
      slot = other.slot;
      counter = other.counter;
      return *this;
    }
    ~Buf() { release(); }
    /// Gloo's buffers first, then the wire back to the pool.
    void release() {
      bufs.clear();
      if (pool && wire.data)
        pool->give(std::move(wire));
      wire = {};
    }
  };
  /// A posted send that nothing waited for yet: the message (header and
  /// payload, owned) stays here until flushSends() saw it complete.
  struct DeferredSend {
    std::unique_ptr<MessageHeader> header;
    std::vector<uint8_t> payload;
    Buf headerBuf, payloadBuf;
    int peer = -1;
    uint32_t channel = 0;
  };
  /// Posts a send / receive of `bytes` at `data` and counts them (sealed:
  /// the bytes on the wire). A sealed send has copied `data` on return.
  Buf postSend(const void *data, size_t bytes, int peer, uint64_t slot);
  Buf postRecv(void *data, size_t bytes, int peer, uint64_t slot);
  Status waitSend(Buf &buf, const std::string &what, int peer);
  Status waitRecv(Buf &buf, const std::string &what, int peer);
  /// Header + payload on slots 2c, 2c+1 (send/recv of the public API).
  /// `phases`: when given, the send's two phases (ErrorFeedback::SendPhases).
  Status sendMessage(const void *data, size_t bytes, int peer, uint32_t channel,
                     ErrorFeedback::SendPhases *phases = nullptr);
  /// Receives a message of exactly `expect` bytes into `data`, or, with
  /// data == null, a message of at most `expect` bytes into `variable`.
  Status recvMessage(void *data, size_t expect, std::vector<uint8_t> *variable,
                     int peer, uint32_t channel, const std::string &expectText);
  Status checkGroup(const std::vector<int> &ranks, int &me) const;
  /// Ring over `ranks` (this rank at position me) on chunks
  /// [n*c/k, n*(c+1)/k): reduce-scatter leaves chunk (me+1)%k summed on this
  /// rank; all-gather spreads each rank's chunk (me+1)%k to all.
  Status ringPhase(float *data, int64_t n, const std::vector<int> &ranks, int me,
                   uint32_t channel, uint8_t prefix, bool gather);
  Status ringAllReduce(float *data, int64_t n, const std::vector<int> &ranks,
                       uint32_t channel);
  /// Compressed sum over `peers` (this rank at me), identical on every rank.
  /// Two ranks: each encodes its `n` floats once, sends the payload to the
  /// other, and both sum the two decoded payloads in `peers` order. Three
  /// or more: reduceScatterGatherCoded.
  /// Sends out[i] to peers[i] and receives in[i] from it, for every i but
  /// me (an 8-byte size then the payload, on slots prefix / prefix + 1).
  Status swapPayloads(const std::vector<const std::vector<uint8_t> *> &out,
                      std::vector<std::vector<uint8_t>> &in,
                      const std::vector<int> &peers, int me, uint32_t channel,
                      uint8_t prefix, uint64_t step, uint64_t maxBytes);
  /// Compressed all-reduce of 3 or more ranks: chunk c of every rank,
  /// encoded, goes to rank c, which sums the decoded chunks and sends the
  /// encoded sum to all: 2 (k-1)/k payloads per rank, like a ring.
  Status reduceScatterGatherCoded(float *data, int64_t n,
                                  const std::vector<int> &peers, int me,
                                  uint32_t channel, uint8_t prefix,
                                  const program::CodecParams &codec,
                                  ErrorFeedback *feedback);
  Status exchangeSum(float *data, int64_t n, const std::vector<int> &peers,
                     int me, uint32_t channel, uint8_t prefix,
                     const program::CodecParams &codec, ErrorFeedback *feedback);
  Status hierarchicalAllReduce(float *data, int64_t n,
                               const std::vector<int> &group,
                               uint32_t channel, const AllReduceOptions &options);
  /// The test hooks of GlooOptions on the first chunk of the sealed send
  /// number `index`, sealed at `wire` (sealMutex held).
  void applyTestFaults(const Buf &b, uint64_t index, uint8_t *wire, size_t wireBytes,
                       size_t chunks);
  Status checkPeer(int peer) const;
  Status sealedBarrier();
  /// Records the first transport failure; Gloo pairs do not recover from
  /// one, so later calls fail fast with the original cause.
  Status markBroken(Status status);
  Status fromException(const std::exception &e, const char *what,
                       int peer) const;

  GlooOptions options;
  std::unique_ptr<gloo::rendezvous::Store> store;
  std::unique_ptr<gloo::rendezvous::PrefixStore> prefixed;
  std::shared_ptr<gloo::rendezvous::Context> context;
  std::string brokenBy;
  std::mutex trafficMutex;
  TrafficCounters traffic;
  std::vector<uint8_t> sendScratch, recvScratch;
  /// Sealed links only. sealMutex orders a counter with its post to Gloo.
  std::unique_ptr<LinkSealer> sealer;
  std::mutex sealMutex;
  WirePool wirePool; // before `deferred`, whose buffers return to it
  uint64_t sealedSends = 0; // test hooks: posting order
  std::map<std::pair<int, uint64_t>, std::vector<uint8_t>> lastWire; // replay hook
  std::mutex deferredMutex;
  std::vector<DeferredSend> deferred;
};

/// Upper bound of a codec payload for n floats (the receiver's check before
/// allocating): header, k, values, and the largest index encoding.
uint64_t maxPayloadBytes(int64_t n) {
  return kCodecHeaderBytes + 8 + 8ull * uint64_t(n) + 64;
}

Status GlooCommunicator::markBroken(Status status) {
  if (!status.isOk() && brokenBy.empty() &&
      status.getCode() != StatusCode::InvalidArgument)
    brokenBy = status.toString();
  return status;
}

Status GlooCommunicator::checkPeer(int peer) const {
  if (!brokenBy.empty())
    return unavailable("communicator unusable after an earlier failure: " +
                       brokenBy)
        .withRank(options.rank)
        .withPeer(peer);
  if (peer < 0 || peer >= options.worldSize || peer == options.rank)
    return invalidArgument("peer " + std::to_string(peer) +
                           " is not another rank of a world of " +
                           std::to_string(options.worldSize))
        .withRank(options.rank)
        .withPeer(peer);
  return Status::ok();
}

Status GlooCommunicator::fromException(const std::exception &e,
                                       const char *what, int peer) const {
  std::string msg = e.what();
  bool timeout = msg.find("imed out") != std::string::npos ||
                 msg.find("imeout") != std::string::npos;
  std::string text = std::string(what) + " failed: " + msg;
  Status s = timeout ? deadlineExceeded(text + " (timeout " +
                                        std::to_string(options.timeout.count()) +
                                        " ms)")
                     : unavailable(text);
  s.withRank(options.rank);
  if (peer >= 0)
    s.withPeer(peer);
  return s;
}


/// Sealed transfers go in chunks of this many bytes (the last one shorter;
/// an empty transfer is one empty chunk), each with its own tag.
constexpr size_t kSealChunkBytes = size_t(1) << 20;

size_t sealChunks(size_t bytes) {
  return bytes ? (bytes + kSealChunkBytes - 1) / kSealChunkBytes : 1;
}

GlooCommunicator::Buf GlooCommunicator::postSend(const void *data, size_t bytes,
                                                 int peer, uint64_t slot) {
  Buf b;
  b.peer = peer;
  b.slot = slot;
  b.bytes = bytes;
  size_t wireBytes = bytes;
  if (!sealer) {
    b.bufs.push_back(context->createUnboundBuffer(const_cast<void *>(data), bytes));
    b.bufs[0]->send(peer, slot);
  } else {
    size_t chunks = sealChunks(bytes);
    wireBytes = bytes + chunks * kSealTagBytes;
    b.wire = wirePool.take(wireBytes);
    b.pool = &wirePool;
    std::lock_guard<std::mutex> lock(sealMutex);
    uint64_t index = sealedSends++;
    for (size_t c = 0; c < chunks; ++c) {
      size_t at = c * kSealChunkBytes, len = std::min(kSealChunkBytes, bytes - at);
      uint8_t *w = b.wire.data.get() + at + c * kSealTagBytes;
      uint64_t counter = sealer->nextSend(peer, slot);
      if (c == 0)
        b.counter = counter;
      sealer->seal(peer, slot, counter, static_cast<const uint8_t *>(data) + at, len, w);
      if (c == 0)
        applyTestFaults(b, index, w, len + kSealTagBytes, chunks);
      b.bufs.push_back(context->createUnboundBuffer(w, len + kSealTagBytes));
      b.bufs.back()->send(peer, slot);
    }
  }
  std::lock_guard<std::mutex> lock(trafficMutex);
  traffic.sent[peer] += wireBytes;
  return b;
}

void GlooCommunicator::applyTestFaults(const Buf &b, uint64_t index, uint8_t *wire,
                                       size_t wireBytes, size_t chunks) {
  if (options.testTamperSealedSend >= 0 && index == uint64_t(options.testTamperSealedSend))
    wire[wireBytes / 2] ^= 0x10;
  if (options.testReplaySealedSend < 0 || chunks != 1)
    return;
  std::vector<uint8_t> &last = lastWire[{b.peer, b.slot}];
  std::vector<uint8_t> current(wire, wire + wireBytes);
  if (index == uint64_t(options.testReplaySealedSend) && last.size() == wireBytes)
    std::copy(last.begin(), last.end(), wire);
  last = std::move(current);
}

GlooCommunicator::Buf GlooCommunicator::postRecv(void *data, size_t bytes,
                                                 int peer, uint64_t slot) {
  Buf b;
  b.peer = peer;
  b.slot = slot;
  b.bytes = bytes;
  b.plain = data;
  size_t wireBytes = bytes;
  if (!sealer) {
    b.bufs.push_back(context->createUnboundBuffer(data, bytes));
    b.bufs[0]->recv(peer, slot);
  } else {
    size_t chunks = sealChunks(bytes);
    wireBytes = bytes + chunks * kSealTagBytes;
    b.wire = wirePool.take(wireBytes);
    b.pool = &wirePool;
    std::lock_guard<std::mutex> lock(sealMutex);
    for (size_t c = 0; c < chunks; ++c) {
      size_t at = c * kSealChunkBytes, len = std::min(kSealChunkBytes, bytes - at);
      uint64_t counter = sealer->nextRecv(peer, slot);
      if (c == 0)
        b.counter = counter;
      b.bufs.push_back(context->createUnboundBuffer(b.wire.data.get() + at + c * kSealTagBytes,
                                                    len + kSealTagBytes));
      b.bufs.back()->recv(peer, slot);
    }
  }
  std::lock_guard<std::mutex> lock(trafficMutex);
  traffic.received[peer] += wireBytes;
  return b;
}

Status GlooCommunicator::waitSend(Buf &buf, const std::string &what, int peer) {
  for (auto &b : buf.bufs)
    if (!b->waitSend(options.timeout))
      return markBroken(unavailable(what + " aborted").withRank(options.rank).withPeer(peer));
  return Status::ok();
}

Status GlooCommunicator::waitRecv(Buf &buf, const std::string &what, int peer) {
  size_t chunks = buf.bufs.size();
  for (size_t c = 0; c < chunks; ++c) {
    if (!buf.bufs[c]->waitRecv(options.timeout))
      return markBroken(unavailable(what + " aborted").withRank(options.rank).withPeer(peer));
    if (!buf.wire.data)
      continue;
    // Chunk c opens while the next ones arrive.
    size_t at = c * kSealChunkBytes, len = std::min(kSealChunkBytes, buf.bytes - at);
    if (sealer->open(buf.peer, buf.slot, buf.counter + c,
                     buf.wire.data.get() + at + c * kSealTagBytes,
                     len, static_cast<uint8_t *>(buf.plain) + at))
      continue;
    char slot[24];
    std::snprintf(slot, sizeof(slot), "0x%llx", static_cast<unsigned long long>(buf.slot));
    std::string part = chunks == 1 ? ""
                                   : " (chunk " + std::to_string(c + 1) + " of " +
                                         std::to_string(chunks) + " of a " +
                                         std::to_string(buf.bytes) + "-byte transfer)";
    return markBroken(
        unavailable(what + ": authentication failed: the " + std::to_string(len) +
                    "-byte buffer number " + std::to_string(buf.counter + c) + part +
                    " from rank " + std::to_string(buf.peer) + " to rank " +
                    std::to_string(options.rank) + " on slot " + slot +
                    " does not verify under this job's link key (the peer has a different "
                    "link secret, or the bytes were altered, replayed or reordered in "
                    "transit)")
            .withRank(options.rank)
            .withPeer(buf.peer));
  }
  return Status::ok();
}

TrafficCounters GlooCommunicator::takeTraffic() {
  std::lock_guard<std::mutex> lock(trafficMutex);
  TrafficCounters out = std::move(traffic);
  out.measured = true;
  traffic = TrafficCounters();
  return out;
}

Status GlooCommunicator::sendMessage(const void *data, size_t bytes, int peer,
                                     uint32_t channel, ErrorFeedback::SendPhases *phases) {
  STRAIT_RETURN_IF_ERROR(checkPeer(peer));
  MessageHeader header = {kHeaderMagic, bytes};
  std::string what = "send on channel " + std::to_string(channel);
  using Clock = std::chrono::steady_clock;
  try {
    Clock::time_point posted = Clock::now();
    Buf hbuf = postSend(&header, sizeof(header), peer, 2ull * channel);
    Buf pbuf;
    if (bytes)
      pbuf = postSend(data, bytes, peer, 2ull * channel + 1);
    STRAIT_RETURN_IF_ERROR(waitSend(hbuf, what, peer));
    Clock::time_point headerDone = Clock::now();
    STRAIT_RETURN_IF_ERROR(waitSend(pbuf, what, peer));
    if (phases) {
      phases->headerSeconds = std::chrono::duration<double>(headerDone - posted).count();
      phases->payloadSeconds = std::chrono::duration<double>(Clock::now() - headerDone).count();
    }
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), peer));
  }
  return Status::ok();
}

Status GlooCommunicator::recvMessage(void *data, size_t expect,
                                     std::vector<uint8_t> *variable, int peer,
                                     uint32_t channel,
                                     const std::string &expectText) {
  STRAIT_RETURN_IF_ERROR(checkPeer(peer));
  MessageHeader header = {0, 0};
  std::string what = "recv on channel " + std::to_string(channel);
  try {
    Buf hbuf = postRecv(&header, sizeof(header), peer, 2ull * channel);
    STRAIT_RETURN_IF_ERROR(waitRecv(hbuf, what, peer));
    if (header.magic != kHeaderMagic)
      return unavailable(what + ": peer did not send a Strait message header")
          .withRank(options.rank)
          .withPeer(peer);
    bool fits = data ? header.bytes == expect : header.bytes <= expect;
    if (!fits) {
      // Drain the payload so the sender completes and the channel stays
      // consistent, then report the mismatch.
      if (header.bytes) {
        std::vector<char> scratch(header.bytes);
        Buf pbuf = postRecv(scratch.data(), header.bytes, peer, 2ull * channel + 1);
        Status drained = waitRecv(pbuf, what, peer);
        if (!drained.isOk())
          return drained;
      }
      return invalidArgument(what + ": peer sent " + std::to_string(header.bytes) +
                             " bytes, this rank expects " + expectText)
          .withRank(options.rank)
          .withPeer(peer);
    }
    if (!data) {
      variable->resize(header.bytes);
      data = variable->data();
    }
    if (header.bytes) {
      Buf pbuf = postRecv(data, header.bytes, peer, 2ull * channel + 1);
      STRAIT_RETURN_IF_ERROR(waitRecv(pbuf, what, peer));
    }
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), peer));
  }
  return Status::ok();
}

Status GlooCommunicator::send(const Tensor &tensor, int peer, uint32_t channel) {
  return sendMessage(tensor.data, tensor.byteSize(), peer, channel);
}

Status GlooCommunicator::recv(const Tensor &tensor, int peer, uint32_t channel) {
  return recvMessage(tensor.data, tensor.byteSize(), nullptr, peer, channel,
                     std::to_string(tensor.byteSize()) + " (" +
                         tensor.typeString() + ")");
}

Status GlooCommunicator::sendCoded(const Tensor &tensor, int peer,
                                   uint32_t channel,
                                   const program::CodecParams &codec,
                                   ErrorFeedback *feedback) {
  if (codec.codec() == program::CODEC_NONE)
    return send(tensor, peer, channel);
  STRAIT_RETURN_IF_ERROR(checkPeer(peer));
  if (tensor.dtype != program::DTYPE_F32)
    return invalidArgument("codec " + program::Codec_Name(codec.codec()) +
                           " on a " + tensor.typeString() + " send (f32 only)")
        .withRank(options.rank)
        .withPeer(peer);
  Status s = feedback ? feedback->encode(codec, tensor.as<float>(), tensor.numel(), sendScratch)
                      : encode(codec, tensor.as<float>(), tensor.numel(), sendScratch);
  if (!s.isOk())
    return s.withRank(options.rank).withPeer(peer);
  ErrorFeedback::SendPhases phases;
  Status sent = sendMessage(sendScratch.data(), sendScratch.size(), peer, channel,
                            feedback ? &phases : nullptr);
  if (feedback)
    feedback->setLastSendPhases(phases);
  return sent;
}

Status GlooCommunicator::sendDeferred(const Tensor &tensor, int peer, uint32_t channel,
                                      const program::CodecParams &codec,
                                      ErrorFeedback *feedback) {
  STRAIT_RETURN_IF_ERROR(checkPeer(peer));
  DeferredSend d;
  d.peer = peer;
  d.channel = channel;
  // What postSend reads: a sealed send encrypts `tensor` into a buffer of
  // its own at once, a plain one needs a copy that outlives this call.
  const void *payload = tensor.data;
  size_t payloadBytes = tensor.byteSize();
  if (codec.codec() == program::CODEC_NONE) {
    const uint8_t *p = static_cast<const uint8_t *>(tensor.data);
    if (!sealer) {
      d.payload.assign(p, p + tensor.byteSize());
      payload = d.payload.data();
    }
  } else {
    if (tensor.dtype != program::DTYPE_F32)
      return invalidArgument("codec " + program::Codec_Name(codec.codec()) + " on a " +
                             tensor.typeString() + " send (f32 only)")
          .withRank(options.rank)
          .withPeer(peer);
    Status s = feedback
                   ? feedback->encode(codec, tensor.as<float>(), tensor.numel(), d.payload)
                   : encode(codec, tensor.as<float>(), tensor.numel(), d.payload);
    if (!s.isOk())
      return s.withRank(options.rank).withPeer(peer);
    payload = d.payload.data();
    payloadBytes = d.payload.size();
  }
  d.header = std::make_unique<MessageHeader>(MessageHeader{kHeaderMagic, payloadBytes});
  try {
    d.headerBuf = postSend(d.header.get(), sizeof(MessageHeader), peer, 2ull * channel);
    if (payloadBytes)
      d.payloadBuf = postSend(payload, payloadBytes, peer, 2ull * channel + 1);
  } catch (const std::exception &e) {
    return markBroken(
        fromException(e, ("send on channel " + std::to_string(channel)).c_str(), peer));
  }
  std::lock_guard<std::mutex> lock(deferredMutex);
  deferred.push_back(std::move(d));
  return Status::ok();
}

Status GlooCommunicator::flushSends() {
  std::vector<DeferredSend> posted;
  {
    std::lock_guard<std::mutex> lock(deferredMutex);
    posted.swap(deferred);
  }
  // In posting order; after a failure the pair is broken, so the rest are
  // dropped (their buffers go with `posted`) instead of each timing out.
  for (DeferredSend &d : posted) {
    std::string what = "deferred send on channel " + std::to_string(d.channel);
    try {
      STRAIT_RETURN_IF_ERROR(waitSend(d.headerBuf, what, d.peer));
      STRAIT_RETURN_IF_ERROR(waitSend(d.payloadBuf, what, d.peer));
    } catch (const std::exception &e) {
      return markBroken(fromException(e, what.c_str(), d.peer));
    }
  }
  return Status::ok();
}

Status GlooCommunicator::recvCoded(const Tensor &tensor, int peer,
                                   uint32_t channel,
                                   const program::CodecParams &codec) {
  if (codec.codec() == program::CODEC_NONE)
    return recv(tensor, peer, channel);
  if (tensor.dtype != program::DTYPE_F32)
    return invalidArgument("codec " + program::Codec_Name(codec.codec()) +
                           " on a " + tensor.typeString() + " recv (f32 only)")
        .withRank(options.rank)
        .withPeer(peer);
  STRAIT_RETURN_IF_ERROR(recvMessage(
      nullptr, maxPayloadBytes(tensor.numel()), &recvScratch, peer, channel,
      "a " + program::Codec_Name(codec.codec()) + " payload for " +
          tensor.typeString()));
  std::string what = "recv on channel " + std::to_string(channel) + ": ";
  StatusOr<program::Codec> got = payloadCodec(recvScratch.data(), recvScratch.size());
  Status s = got.isOk() ? Status::ok() : got.getStatus();
  if (s.isOk() && *got != codec.codec())
    s = invalidArgument("peer sent a " + program::Codec_Name(*got) +
                        " payload, this rank expects " +
                        program::Codec_Name(codec.codec()));
  if (s.isOk())
    s = decode(recvScratch.data(), recvScratch.size(), tensor.as<float>(), tensor.numel());
  if (!s.isOk())
    return invalidArgument(what + s.getMessage()).withRank(options.rank).withPeer(peer);
  return Status::ok();
}

Status GlooCommunicator::checkGroup(const std::vector<int> &ranks, int &me) const {
  me = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= options.worldSize || (i && ranks[i] <= ranks[i - 1]))
      return invalidArgument("all-reduce group must hold sorted distinct ranks")
          .withRank(options.rank);
    if (ranks[i] == options.rank)
      me = static_cast<int>(i);
  }
  if (me < 0)
    return invalidArgument("this rank is not in its all-reduce group").withRank(options.rank);
  return Status::ok();
}

/// Slots of the collectives: bits 56..63 = 0 (Gloo's own collectives use a
/// prefix there), bits 48..55 = the phase prefix ('S' ring reduce-scatter,
/// 'T' ring all-gather, 'U'/'V' exchange header/payload, 'W' island
/// broadcast, 'B' sealed barrier), bits 16..47 = channel, bits 0..15 = step. Send/recv slots are
/// < 2^33.
uint64_t collectiveSlot(uint8_t prefix, uint32_t channel, uint64_t step) {
  return (uint64_t(prefix) << 48) | (uint64_t(channel) << 16) | (step & 0xFFFF);
}

Status GlooCommunicator::ringPhase(float *data, int64_t n,
                                   const std::vector<int> &ranks, int me,
                                   uint32_t channel, uint8_t prefix, bool gather) {
  int k = static_cast<int>(ranks.size());
  if (k == 1 || n == 0)
    return Status::ok();
  int next = ranks[(me + 1) % k], prev = ranks[(me + k - 1) % k];
  STRAIT_RETURN_IF_ERROR(checkPeer(next));
  auto chunkBegin = [&](int c) { return n * c / k; };
  std::vector<float> incoming(gather ? 0 : (n + k - 1) / k + 1);
  std::string what = std::string(gather ? "all-gather" : "reduce-scatter") +
                     " of the all-reduce on channel " + std::to_string(channel);
  try {
    for (int s = 0; s < k - 1; ++s) {
      // Reduce-scatter: send chunk (me - s), receive chunk (me - s - 1).
      // All-gather: send chunk (me + 1 - s), receive chunk (me - s).
      int sendChunk = ((gather ? me + 1 - s : me - s) % k + k) % k;
      int recvChunk = ((gather ? me - s : me - s - 1) % k + k) % k;
      int64_t sb = chunkBegin(sendChunk), se = chunkBegin(sendChunk + 1);
      int64_t rb = chunkBegin(recvChunk), re = chunkBegin(recvChunk + 1);
      float *recvTo = gather ? data + rb : incoming.data();
      // The receive first: sealed, the previous rank's chunks then flow
      // while this rank seals its own.
      Buf sbuf, rbuf;
      if (re > rb)
        rbuf = postRecv(recvTo, (re - rb) * sizeof(float), prev,
                        collectiveSlot(prefix, channel, s));
      if (se > sb)
        sbuf = postSend(data + sb, (se - sb) * sizeof(float), next,
                        collectiveSlot(prefix, channel, s));
      STRAIT_RETURN_IF_ERROR(waitRecv(rbuf, what, prev));
      STRAIT_RETURN_IF_ERROR(waitSend(sbuf, what, next));
      if (!gather)
        for (int64_t i = rb; i < re; ++i)
          data[i] += incoming[i - rb];
    }
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

Status GlooCommunicator::ringAllReduce(float *data, int64_t n,
                                       const std::vector<int> &ranks,
                                       uint32_t channel) {
  int me;
  STRAIT_RETURN_IF_ERROR(checkGroup(ranks, me));
  STRAIT_RETURN_IF_ERROR(ringPhase(data, n, ranks, me, channel, 'S', false));
  return ringPhase(data, n, ranks, me, channel, 'T', true);
}

Status GlooCommunicator::allReduceSum(const Tensor &tensor, uint32_t channel) {
  std::vector<int> all(options.worldSize);
  for (int r = 0; r < options.worldSize; ++r)
    all[r] = r;
  return allReduceSumGroup(tensor, all, channel);
}

/// A ring reduce-scatter + all-gather over `ranks` (the whole world
/// included): each rank sends 2 (k-1)/k of the tensor to the next rank.
/// Disjoint groups may reduce concurrently on one channel.
Status GlooCommunicator::allReduceSumGroup(const Tensor &tensor,
                                           const std::vector<int> &ranks,
                                           uint32_t channel) {
  if (tensor.dtype != program::DTYPE_F32)
    return unimplemented("all-reduce of " + tensor.typeString() +
                         " (only f32 is supported)")
        .withRank(options.rank);
  return ringAllReduce(tensor.as<float>(), tensor.numel(), ranks, channel);
}

Status GlooCommunicator::swapPayloads(
    const std::vector<const std::vector<uint8_t> *> &out,
    std::vector<std::vector<uint8_t>> &in, const std::vector<int> &peers, int me,
    uint32_t channel, uint8_t prefix, uint64_t step, uint64_t maxBytes) {
  int k = static_cast<int>(peers.size());
  std::string what = "compressed all-reduce exchange on channel " + std::to_string(channel);
  std::vector<uint64_t> outSizes(k, 0), sizes(k, 0);
  in.assign(k, {});
  try {
    // Everything is posted before anything is waited for: no ordering
    // between the pairs can deadlock.
    std::vector<Buf> sends, sizeRecvs(k);
    for (int i = 0; i < k; ++i) {
      if (i == me)
        continue;
      STRAIT_RETURN_IF_ERROR(checkPeer(peers[i]));
      outSizes[i] = out[i]->size();
      sends.push_back(postSend(&outSizes[i], 8, peers[i], collectiveSlot(prefix, channel, step)));
      sends.push_back(postSend(out[i]->data(), out[i]->size(), peers[i],
                               collectiveSlot(prefix + 1, channel, step)));
      sizeRecvs[i] = postRecv(&sizes[i], 8, peers[i], collectiveSlot(prefix, channel, step));
    }
    std::vector<Buf> recvs(k);
    for (int i = 0; i < k; ++i) {
      if (i == me)
        continue;
      STRAIT_RETURN_IF_ERROR(waitRecv(sizeRecvs[i], what, peers[i]));
      if (sizes[i] < kCodecHeaderBytes || sizes[i] > maxBytes)
        return markBroken(unavailable(what + ": peer announced a payload of " +
                                      std::to_string(sizes[i]) + " bytes (at most " +
                                      std::to_string(maxBytes) + ")")
                              .withRank(options.rank)
                              .withPeer(peers[i]));
      in[i].resize(sizes[i]);
      recvs[i] = postRecv(in[i].data(), sizes[i], peers[i],
                          collectiveSlot(prefix + 1, channel, step));
    }
    for (int i = 0; i < k; ++i)
      if (i != me)
        STRAIT_RETURN_IF_ERROR(waitRecv(recvs[i], what, peers[i]));
    for (auto &b : sends)
      STRAIT_RETURN_IF_ERROR(waitSend(b, what, -1));
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

Status GlooCommunicator::exchangeSum(float *data, int64_t n,
                                     const std::vector<int> &peers, int me,
                                     uint32_t channel, uint8_t prefix,
                                     const program::CodecParams &codec,
                                     ErrorFeedback *feedback) {
  int k = static_cast<int>(peers.size());
  if (k > 2)
    return reduceScatterGatherCoded(data, n, peers, me, channel, prefix, codec, feedback);
  std::vector<uint8_t> mine;
  Status s = feedback ? feedback->encode(codec, data, n, mine)
                      : encode(codec, data, n, mine);
  if (!s.isOk())
    return s.withRank(options.rank);
  std::vector<std::vector<uint8_t>> payloads;
  std::vector<const std::vector<uint8_t> *> out(k, &mine);
  STRAIT_RETURN_IF_ERROR(
      swapPayloads(out, payloads, peers, me, channel, prefix, 0, maxPayloadBytes(n)));
  payloads[me] = std::move(mine);
  // Sum in group order, this rank's own payload decoded like the others, so
  // every rank computes the same floats.
  for (int i = 0; i < k; ++i) {
    Status d = decode(payloads[i].data(), payloads[i].size(), data, n, i > 0);
    if (!d.isOk())
      return d.withRank(options.rank).withPeer(peers[i]);
  }
  return Status::ok();
}

Status GlooCommunicator::reduceScatterGatherCoded(
    float *data, int64_t n, const std::vector<int> &peers, int me,
    uint32_t channel, uint8_t prefix, const program::CodecParams &codec,
    ErrorFeedback *feedback) {
  int k = static_cast<int>(peers.size());
  auto lo = [&](int c) { return n * c / k; };
  auto len = [&](int c) { return lo(c + 1) - lo(c); };
  auto encodeInto = [&](const float *x, int64_t count, ErrorFeedback *fb,
                        std::vector<uint8_t> &out) {
    Status st = fb ? fb->encode(codec, x, count, out) : encode(codec, x, count, out);
    return st.isOk() ? st : st.withRank(options.rank);
  };
  // 1. Chunk c of every rank, encoded (with its own feedback stream), goes
  //    to rank c, which decodes the k payloads and sums them in rank order.
  std::vector<std::vector<uint8_t>> chunks(k), in;
  std::vector<const std::vector<uint8_t> *> out(k);
  for (int c = 0; c < k; ++c) {
    STRAIT_RETURN_IF_ERROR(encodeInto(data + lo(c), len(c),
                                      feedback ? &feedback->part(c) : nullptr, chunks[c]));
    out[c] = &chunks[c];
  }
  uint64_t maxBytes = maxPayloadBytes((n + k - 1) / k);
  STRAIT_RETURN_IF_ERROR(swapPayloads(out, in, peers, me, channel, prefix, 0, maxBytes));
  in[me] = std::move(chunks[me]);
  for (int r = 0; r < k; ++r) {
    Status d = decode(in[r].data(), in[r].size(), data + lo(me), len(me), r > 0);
    if (!d.isOk())
      return d.withRank(options.rank).withPeer(peers[r]);
  }
  // 2. The reduced chunk, encoded once more (a second feedback stream),
  //    goes to every rank; all ranks, this one included, decode the same
  //    payloads.
  std::vector<uint8_t> reduced;
  STRAIT_RETURN_IF_ERROR(encodeInto(data + lo(me), len(me),
                                    feedback ? &feedback->part(k) : nullptr, reduced));
  std::vector<const std::vector<uint8_t> *> all(k, &reduced);
  STRAIT_RETURN_IF_ERROR(swapPayloads(all, in, peers, me, channel, prefix, 1, maxBytes));
  in[me] = std::move(reduced);
  for (int r = 0; r < k; ++r) {
    Status d = decode(in[r].data(), in[r].size(), data + lo(r), len(r));
    if (!d.isOk())
      return d.withRank(options.rank).withPeer(peers[r]);
  }
  return Status::ok();
}

Status GlooCommunicator::allReduce(const Tensor &tensor, uint32_t channel,
                                   const AllReduceOptions &opts) {
  if (tensor.dtype != program::DTYPE_F32)
    return unimplemented("all-reduce of " + tensor.typeString() +
                         " (only f32 is supported)")
        .withRank(options.rank);
  STRAIT_RETURN_IF_ERROR(validateCodecParams(opts.codec, "all_reduce.codec").withRank(options.rank));
  std::vector<int> group = opts.ranks;
  if (group.empty())
    for (int r = 0; r < options.worldSize; ++r)
      group.push_back(r);
  int me;
  STRAIT_RETURN_IF_ERROR(checkGroup(group, me));
  float *data = tensor.as<float>();
  int64_t n = tensor.numel();
  if (!opts.islands.empty())
    return hierarchicalAllReduce(data, n, group, channel, opts);
  if (opts.codec.codec() == program::CODEC_NONE)
    return ringAllReduce(data, n, group, channel);
  return exchangeSum(data, n, group, me, channel, 'U', opts.codec, opts.feedback);
}

Status GlooCommunicator::hierarchicalAllReduce(float *data, int64_t n,
                                               const std::vector<int> &group,
                                               uint32_t channel,
                                               const AllReduceOptions &opts) {
  // The islands must partition the group; find this rank's island.
  std::vector<int> seen;
  int myIsland = -1, myPos = -1;
  bool equalSizes = true;
  for (size_t i = 0; i < opts.islands.size(); ++i) {
    const auto &island = opts.islands[i];
    if (island.empty())
      return invalidArgument("all-reduce island " + std::to_string(i) + " is empty")
          .withRank(options.rank);
    equalSizes &= island.size() == opts.islands[0].size();
    for (size_t j = 0; j < island.size(); ++j) {
      if (j && island[j] <= island[j - 1])
        return invalidArgument("all-reduce island " + std::to_string(i) +
                               " must hold sorted distinct ranks")
            .withRank(options.rank);
      seen.push_back(island[j]);
      if (island[j] == options.rank) {
        myIsland = static_cast<int>(i);
        myPos = static_cast<int>(j);
      }
    }
  }
  std::sort(seen.begin(), seen.end());
  if (seen != group)
    return invalidArgument("all-reduce islands do not partition the group of " +
                           std::to_string(group.size()) + " ranks")
        .withRank(options.rank);
  const std::vector<int> &island = opts.islands[myIsland];
  int s = static_cast<int>(island.size());
  if (equalSizes) {
    // 1. Reduce-scatter inside the island: member j holds the island's sum
    //    of chunk (j+1) % s.  2. Member j of every island reduces that chunk
    //    across the islands (the codec applies here; the slow links run in
    //    parallel over the s members).  3. All-gather inside the island.
    STRAIT_RETURN_IF_ERROR(ringPhase(data, n, island, myPos, channel, 'S', false));
    int chunk = (myPos + 1) % s;
    int64_t lo = n * chunk / s, hi = n * (chunk + 1) / s;
    std::vector<int> peers;
    for (const auto &other : opts.islands)
      peers.push_back(other[myPos]);
    if (hi > lo)
      STRAIT_RETURN_IF_ERROR(exchangeSum(data + lo, hi - lo, peers, myIsland, channel,
                                         'U', opts.codec, opts.feedback));
    return ringPhase(data, n, island, myPos, channel, 'T', true);
  }
  // Unequal islands: reduce inside each island, the leaders (first rank of
  // each island) reduce across, and each leader sends the result to its
  // island.
  STRAIT_RETURN_IF_ERROR(ringAllReduce(data, n, island, channel));
  std::string what = "island broadcast of the all-reduce on channel " + std::to_string(channel);
  try {
    if (myPos == 0) {
      std::vector<int> leaders;
      for (const auto &other : opts.islands)
        leaders.push_back(other[0]);
      STRAIT_RETURN_IF_ERROR(exchangeSum(data, n, leaders, myIsland, channel, 'U',
                                         opts.codec, opts.feedback));
      std::vector<Buf> sends;
      for (int j = 1; j < s && n; ++j)
        sends.push_back(postSend(data, n * sizeof(float), island[j],
                                 collectiveSlot('W', channel, 0)));
      for (size_t j = 0; j < sends.size(); ++j)
        STRAIT_RETURN_IF_ERROR(waitSend(sends[j], what, island[j + 1]));
    } else if (n) {
      Buf r = postRecv(data, n * sizeof(float), island[0], collectiveSlot('W', channel, 0));
      STRAIT_RETURN_IF_ERROR(waitRecv(r, what, island[0]));
    }
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

Status GlooCommunicator::barrier() {
  if (options.worldSize == 1)
    return Status::ok();
  STRAIT_RETURN_IF_ERROR(checkPeer(options.rank == 0 ? 1 : 0));
  if (sealer)
    return sealedBarrier();
  try {
    gloo::BarrierOptions opts(context);
    opts.setTimeout(options.timeout);
    gloo::barrier(opts);
  } catch (const std::exception &e) {
    return markBroken(fromException(e, "barrier", -1));
  }
  return Status::ok();
}

/// Gloo's barrier sends messages of its own, outside postSend/postRecv;
/// sealed, every rank instead sends a sealed byte to every other rank and
/// waits for theirs (world - 1 buffers each way, on slot 'B').
Status GlooCommunicator::sealedBarrier() {
  std::string what = "barrier";
  uint8_t token = 1;
  std::vector<uint8_t> in(options.worldSize);
  try {
    std::vector<Buf> sends, recvs;
    for (int r = 0; r < options.worldSize; ++r)
      if (r != options.rank) {
        sends.push_back(postSend(&token, 1, r, collectiveSlot('B', 0, 0)));
        recvs.push_back(postRecv(&in[r], 1, r, collectiveSlot('B', 0, 0)));
      }
    for (Buf &b : recvs)
      STRAIT_RETURN_IF_ERROR(waitRecv(b, what, b.peer));
    for (Buf &b : sends)
      STRAIT_RETURN_IF_ERROR(waitSend(b, what, b.peer));
  } catch (const std::exception &e) {
    return markBroken(fromException(e, what.c_str(), -1));
  }
  return Status::ok();
}

} // namespace

StatusOr<std::unique_ptr<Communicator>>
createGlooCommunicator(const GlooOptions &options) {
  if (options.worldSize < 1 || options.rank < 0 || options.rank >= options.worldSize)
    return invalidArgument("rank " + std::to_string(options.rank) +
                           " outside world of " + std::to_string(options.worldSize));
  // Sealed links: the secret is read before anything else, so a bad file
  // fails at once and names itself.
  std::optional<LinkSecret> secret;
  LinkSalt salt{};
  if (!options.linkSecretFile.empty()) {
    StatusOr<LinkSecret> read = readLinkSecretFile(options.linkSecretFile);
    if (!read.isOk())
      return Status(read.getStatus()).withRank(options.rank);
    secret = *read;
    salt = randomLinkSalt();
  }
  std::unique_ptr<gloo::rendezvous::Store> store;
  std::string where;
  try {
    if (options.store == StoreKind::File) {
      struct stat st;
      if (options.storePath.empty() || ::stat(options.storePath.c_str(), &st) != 0 ||
          !S_ISDIR(st.st_mode))
        return invalidArgument("file store folder '" + options.storePath +
                               "' does not exist")
            .withRank(options.rank);
      where = "file store " + options.storePath;
      store = std::make_unique<gloo::rendezvous::FileStore>(options.storePath);
    } else {
      where = "redis store " + options.redisHost + ":" + std::to_string(options.redisPort);
      store = std::make_unique<gloo::rendezvous::RedisStore>(options.redisHost,
                                                              options.redisPort);
    }
  } catch (const std::exception &e) {
    return unavailable("cannot open " + where + ": " + e.what()).withRank(options.rank);
  }
  auto prefixed = std::make_unique<gloo::rendezvous::PrefixStore>(options.prefix, *store);
  auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.worldSize);
  try {
    if (secret)
      publishLinkSalt(*prefixed, options.rank, salt);
    gloo::transport::tcp::attr attr;
    attr.hostname = options.hostname;
    auto device = gloo::transport::tcp::CreateDevice(attr);
    context->setTimeout(options.timeout);
    context->connectFullMesh(*prefixed, device);
  } catch (const std::exception &e) {
    std::string msg = e.what();
    bool timeout = msg.find("imeout") != std::string::npos ||
                   msg.find("imed out") != std::string::npos;
    std::string text = "rendezvous of " + std::to_string(options.worldSize) +
                       " ranks through " + where + " failed: " + msg;
    return (timeout ? deadlineExceeded(text) : unavailable(text)).withRank(options.rank);
  }
  std::unique_ptr<LinkSealer> sealer;
  if (secret) {
    StatusOr<std::unique_ptr<LinkSealer>> made =
        fetchLinkSalts(options, *prefixed, *secret, salt, where);
    secret->fill(0);
    if (!made.isOk())
      return made.getStatus();
    sealer = std::move(*made);
  }
  return std::unique_ptr<Communicator>(new GlooCommunicator(
      options, std::move(store), std::move(prefixed), std::move(context), std::move(sealer)));
}

} // namespace rt
} // namespace strait
