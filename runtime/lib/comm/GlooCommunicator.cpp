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
//    hierarchical one over islands (docs/runtime.md, "All-reduce"), and the
//    barrier: GlooCollectives.cpp.
// Every buffer is posted through postSend/postRecv, which count the bytes
// per peer (takeTraffic), and waited for through waitSend/waitRecv. With a
// link secret (GlooOptions::linkSecretFile) these four seal every buffer
// (Seal.h): postSend encrypts into a buffer of its own that travels with a
// 16-byte tag, postRecv receives into one, waitRecv verifies and decrypts
// into the caller's memory. Every Gloo exception becomes a Status naming
// this rank and the peer, marked as a link failure (rt::isLinkFailure).
// abort() (strait-run's in-process recovery, docs/runtime.md "Flaky links")
// ends every posted buffer's wait and fails later calls; the barrier goes
// through postSend/postRecv too, so that nothing waits out of its reach.
// openKeyStore: the rendezvous store for the recovery protocol. A Redis
// store gets AUTH when GlooOptions holds a password (AuthRedisStore).
//
//===----------------------------------------------------------------------===//
#include "GlooCommunicatorImpl.h"
#include "strait/runtime/LinkTiming.h"
#include "strait/runtime/Trace.h"

namespace strait {
namespace rt {
namespace gloo_impl {

/// The most bytes a receive with a size mismatch reads (and drops) to keep
/// its channel in step with the sender; more marks the link broken.
constexpr uint64_t kMaxDrainBytes = 64ull << 20;

uint64_t maxPayloadBytes(int64_t n) {
  return kCodecHeaderBytes + 8 + 8ull * uint64_t(n) + 64;
}

Status GlooCommunicator::markBroken(Status status) {
  if (!status.isOk() && brokenBy.empty() &&
      status.getCode() != StatusCode::InvalidArgument)
    brokenBy = status.toString();
  return status;
}

void GlooCommunicator::abort(const std::string &reason) {
  std::lock_guard<std::mutex> lock(liveMutex);
  if (!aborted)
    abortReason = reason;
  aborted = true;
  for (gloo::transport::UnboundBuffer *u : live) {
    u->abortWaitSend();
    u->abortWaitRecv();
  }
}

void GlooCommunicator::watch(Buf &b) {
  std::lock_guard<std::mutex> lock(liveMutex);
  b.owner = this;
  for (auto &u : b.bufs) {
    live.insert(u.get());
    if (aborted) { // Gloo keeps an abort until the next wait
      u->abortWaitSend();
      u->abortWaitRecv();
    }
  }
}

void GlooCommunicator::unwatch(gloo::transport::UnboundBuffer *u) {
  std::lock_guard<std::mutex> lock(liveMutex);
  live.erase(u);
}

Status GlooCommunicator::checkPeer(int peer) const {
  if (aborted) {
    std::lock_guard<std::mutex> lock(const_cast<std::mutex &>(liveMutex));
    return linkFailure(unavailable("communicator aborted: " + abortReason))
        .withRank(options.rank)
        .withPeer(peer);
  }
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

namespace {
/// A Gloo exception of posting to `peer` (fromException names the peer).
struct PeerError : std::runtime_error {
  PeerError(const char *what, int peer) : std::runtime_error(what), peer(peer) {}
  int peer;
};
} // namespace

Status GlooCommunicator::fromException(const std::exception &e,
                                       const char *what, int peer) const {
  if (auto *posting = dynamic_cast<const PeerError *>(&e); posting && peer < 0)
    peer = posting->peer;
  std::string msg = e.what();
  bool timeout = msg.find("imed out") != std::string::npos ||
                 msg.find("imeout") != std::string::npos;
  std::string text = std::string(what) + " failed: " + msg;
  Status s = linkFailure(timeout ? deadlineExceeded(text + " (timeout " +
                                                    std::to_string(options.timeout.count()) +
                                                    " ms)")
                                 : unavailable(text));
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

GlooCommunicator::Buf GlooCommunicator::postSend(const void *data, size_t bytes, int peer,
                                                 uint64_t slot) {
  try {
    return postSendTo(data, bytes, peer, slot);
  } catch (const PeerError &) {
    throw;
  } catch (const std::exception &e) {
    throw PeerError(e.what(), peer);
  }
}

GlooCommunicator::Buf GlooCommunicator::postRecv(void *data, size_t bytes, int peer,
                                                 uint64_t slot) {
  try {
    return postRecvFrom(data, bytes, peer, slot);
  } catch (const PeerError &) {
    throw;
  } catch (const std::exception &e) {
    throw PeerError(e.what(), peer);
  }
}

GlooCommunicator::Buf GlooCommunicator::postSendTo(const void *data, size_t bytes,
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
  watch(b);
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

GlooCommunicator::Buf GlooCommunicator::postRecvFrom(void *data, size_t bytes,
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
  watch(b);
  std::lock_guard<std::mutex> lock(trafficMutex);
  traffic.received[peer] += wireBytes;
  return b;
}

Status GlooCommunicator::abortedWait(const std::string &what, int peer) {
  std::lock_guard<std::mutex> lock(liveMutex);
  return linkFailure(unavailable(what + " aborted" +
                                 (aborted ? ": " + abortReason : std::string())))
      .withRank(options.rank)
      .withPeer(peer);
}

Status GlooCommunicator::waitSend(Buf &buf, const std::string &what, int peer) {
  peer = peer >= 0 ? peer : buf.peer;
  for (auto &b : buf.bufs) {
    bool done = false;
    try { // here, where the peer is known (a collective's catch is not)
      done = b->waitSend(options.timeout);
    } catch (const std::exception &e) {
      return markBroken(fromException(e, what.c_str(), peer));
    }
    if (!done)
      return markBroken(abortedWait(what, peer));
  }
  return Status::ok();
}

Status GlooCommunicator::waitRecv(Buf &buf, const std::string &what, int peer) {
  size_t chunks = buf.bufs.size();
  peer = peer >= 0 ? peer : buf.peer;
  for (size_t c = 0; c < chunks; ++c) {
    bool done = false;
    try {
      done = buf.bufs[c]->waitRecv(options.timeout);
    } catch (const std::exception &e) {
      return markBroken(fromException(e, what.c_str(), peer));
    }
    if (!done)
      return markBroken(abortedWait(what, peer));
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
    if (trace::on())
      trace::phases(trace::toNs(posted), trace::toNs(headerDone), trace::nowNs());
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
  int64_t traceBegin = trace::on() ? trace::nowNs() : 0; // 0: not traced
  try {
    Buf hbuf = postRecv(&header, sizeof(header), peer, 2ull * channel);
    STRAIT_RETURN_IF_ERROR(waitRecv(hbuf, what, peer));
    if (header.magic != kHeaderMagic)
      return unavailable(what + ": peer did not send a Strait message header")
          .withRank(options.rank)
          .withPeer(peer);
    bool fits = data ? header.bytes == expect : header.bytes <= expect;
    // A size far beyond the expected one is no program mismatch but a corrupt
    // or foreign header (unsealed links authenticate nothing): draining it
    // would allocate and wait for whatever it claims. The link is dropped.
    if (!fits && header.bytes > expect + kMaxDrainBytes)
      return markBroken(unavailable(what + ": peer announced a payload of " +
                                    std::to_string(header.bytes) + " bytes, this rank expects " +
                                    expectText + " (a corrupt header; link closed)")
                            .withRank(options.rank)
                            .withPeer(peer));
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
      auto headerDone = std::chrono::steady_clock::now();
      Buf pbuf = postRecv(data, header.bytes, peer, 2ull * channel + 1);
      STRAIT_RETURN_IF_ERROR(waitRecv(pbuf, what, peer));
      // The sender posted the payload with the header and Gloo writes it
      // once this receive is posted: from the header's arrival on, the time
      // is the link's, not the sender's compute (strait-run --replan). A
      // sender's own clock would stop when the bytes reach its socket buffer.
      recordLinkTiming(peer, header.bytes,
                       std::chrono::duration<double>(std::chrono::steady_clock::now() -
                                                     headerDone)
                           .count());
      if (traceBegin)
        trace::phases(traceBegin, trace::toNs(headerDone), trace::nowNs());
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

namespace {

/// Gloo's Redis store, authenticated: Gloo sends no AUTH, so this sends it
/// on the store's own connection (RedisStore::redis_ is protected) before
/// any key is read or written; without a password, a PING, so that a store
/// that requires one says so here rather than as a failed SETNX later.
class AuthRedisStore : public gloo::rendezvous::RedisStore {
public:
  AuthRedisStore(const GlooOptions &o) : RedisStore(o.redisHost, o.redisPort) {
    void *sent = o.redisPassword.empty() ? redisCommand(redis_, "PING")
                 : o.redisUser.empty()
                     ? redisCommand(redis_, "AUTH %s", o.redisPassword.c_str())
                     : redisCommand(redis_, "AUTH %s %s", o.redisUser.c_str(),
                                    o.redisPassword.c_str());
    auto *reply = static_cast<redisReply *>(sent);
    if (!reply)
      throw std::runtime_error(std::string("the connection failed: ") + redis_->errstr);
    std::string error = reply->type == REDIS_REPLY_ERROR ? std::string(reply->str, reply->len) : "";
    freeReplyObject(reply);
    if (error.empty())
      return;
    if (o.redisPassword.empty())
      throw std::runtime_error("the store requires authentication (" + error +
                               "): give its password in $STRAIT_REDIS_PASSWORD");
    throw std::runtime_error("authentication failed (" + error + ")");
  }
};

} // namespace

StatusOr<std::unique_ptr<gloo::rendezvous::Store>> openGlooStore(const GlooOptions &options,
                                                                 std::string &where) {
  std::unique_ptr<gloo::rendezvous::Store> store;
  try {
    if (options.store == StoreKind::File) {
      struct stat st;
      if (options.storePath.empty() || ::stat(options.storePath.c_str(), &st) != 0 ||
          !S_ISDIR(st.st_mode))
        return invalidArgument("file store folder '" + options.storePath +
                               "' does not exist");
      where = "file store " + options.storePath;
      store = std::make_unique<CheckableFileStore>(options.storePath);
    } else {
      where = "redis store " + options.redisHost + ":" + std::to_string(options.redisPort);
      store = std::make_unique<AuthRedisStore>(options);
    }
  } catch (const std::exception &e) {
    return unavailable("cannot open " + where + ": " + e.what());
  }
  return store;
}

/// KeyStore over Gloo's file or Redis store, for strait-run's link-recovery
/// protocol (docs/runtime.md, "Flaky links").
namespace {

class GlooKeyStore : public KeyStore {
public:
  GlooKeyStore(std::unique_ptr<gloo::rendezvous::Store> store, std::string prefix,
               std::string where)
      : store(std::move(store)), prefix(std::move(prefix)), where(std::move(where)) {}

  Status set(const std::string &key, const std::string &value) override {
    try {
      if (exists(key)) // Redis's set refuses a key that exists
        return Status::ok();
      store->set(prefix + key, std::vector<char>(value.begin(), value.end()));
    } catch (const std::exception &e) {
      // Another rank set it first (Redis: "already set"; a file store's
      // rename of the same temporary file fails for one of two writers).
      try {
        if (exists(key))
          return Status::ok();
      } catch (const std::exception &) {
      }
      return unavailable("cannot set '" + prefix + key + "' in " + where + ": " + e.what());
    }
    return Status::ok();
  }

  StatusOr<bool> has(const std::string &key) override {
    try {
      return exists(key);
    } catch (const std::exception &e) {
      return unavailable("cannot read " + where + ": " + e.what());
    }
  }

  StatusOr<std::string> get(const std::string &key, std::chrono::milliseconds timeout) override {
    try {
      store->wait({prefix + key}, timeout);
      std::vector<char> v = store->get(prefix + key);
      return std::string(v.begin(), v.end());
    } catch (const std::exception &e) {
      return deadlineExceeded("'" + prefix + key + "' did not appear in " + where + " within " +
                              std::to_string(timeout.count()) + " ms: " + e.what());
    }
  }

private:
  bool exists(const std::string &key) {
    if (auto *file = dynamic_cast<CheckableFileStore *>(store.get()))
      return file->check({prefix + key});
    return static_cast<gloo::rendezvous::RedisStore *>(store.get())->check({prefix + key});
  }

  std::unique_ptr<gloo::rendezvous::Store> store;
  std::string prefix, where;
};

} // namespace
} // namespace gloo_impl

using gloo_impl::GlooCommunicator;

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
  std::string where;
  StatusOr<std::unique_ptr<gloo::rendezvous::Store>> opened =
      gloo_impl::openGlooStore(options, where);
  if (!opened.isOk())
    return Status(opened.getStatus()).withRank(options.rank);
  std::unique_ptr<gloo::rendezvous::Store> store = opened.takeValue();
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

StatusOr<std::unique_ptr<KeyStore>> openKeyStore(const GlooOptions &options,
                                                 const std::string &prefix) {
  std::string where;
  StatusOr<std::unique_ptr<gloo::rendezvous::Store>> store =
      gloo_impl::openGlooStore(options, where);
  if (!store.isOk())
    return store.getStatus();
  return std::unique_ptr<KeyStore>(
      new gloo_impl::GlooKeyStore(store.takeValue(), prefix + "/", where));
}

} // namespace rt
} // namespace strait
