//===- GlooCommunicatorImpl.h - The Gloo communicator's class -------------===//
//
// Internal to lib/comm: the class GlooCommunicator.cpp (rendezvous, point to
// point, sealing) and GlooCollectives.cpp (all-reduces, barriers) define.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_COMM_GLOOCOMMUNICATORIMPL_H
#define STRAIT_RUNTIME_LIB_COMM_GLOOCOMMUNICATORIMPL_H

#include "strait/runtime/Communicator.h"

#include "Seal.h"

#include <gloo/common/error.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/rendezvous/redis_store.h>
#include <gloo/transport/tcp/device.h>

#include <sys/stat.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <optional>
#include <mutex>
#include <set>

namespace strait {
namespace rt {
namespace gloo_impl {


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
  void abort(const std::string &reason) override;

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
    GlooCommunicator *owner = nullptr; // tracks `bufs` for abort()
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
      owner = other.owner;
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
      if (owner)
        for (auto &u : bufs)
          owner->unwatch(u.get());
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
  /// postSend / postRecv, whose Gloo exceptions these two rethrow naming
  /// the peer (fromException).
  Buf postSendTo(const void *data, size_t bytes, int peer, uint64_t slot);
  Buf postRecvFrom(void *data, size_t bytes, int peer, uint64_t slot);
  Status waitSend(Buf &buf, const std::string &what, int peer);
  Status waitRecv(Buf &buf, const std::string &what, int peer);
  /// The link failure of a wait Gloo ended early (abort()).
  Status abortedWait(const std::string &what, int peer);
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
                                  const AllReduceOptions &options);
  /// Every encode and decode of both goes through options.engine (the
  /// host's when null), and the error feedback through options.feedback.
  Status exchangeSum(float *data, int64_t n, const std::vector<int> &peers,
                     int me, uint32_t channel, uint8_t prefix,
                     const AllReduceOptions &options);
  Status hierarchicalAllReduce(float *data, int64_t n,
                               const std::vector<int> &group,
                               uint32_t channel, const AllReduceOptions &options);
  /// The test hooks of GlooOptions on the first chunk of the sealed send
  /// number `index`, sealed at `wire` (sealMutex held).
  void applyTestFaults(const Buf &b, uint64_t index, uint8_t *wire, size_t wireBytes,
                       size_t chunks);
  Status checkPeer(int peer) const;
  /// Adds a posted buffer to those abort() interrupts (at once when the
  /// communicator is aborted already); unwatch when it goes.
  void watch(Buf &b);
  void unwatch(gloo::transport::UnboundBuffer *u);
  Status bufferBarrier();
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
  std::mutex liveMutex; // live, abortReason
  std::set<gloo::transport::UnboundBuffer *> live;
  std::atomic<bool> aborted{false};
  std::string abortReason;
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

/// A file store whose check (protected in Gloo) KeyStore uses: the cheap
/// test the abort watcher of in-process recovery polls.
struct CheckableFileStore : gloo::rendezvous::FileStore {
  using gloo::rendezvous::FileStore::check;
  using gloo::rendezvous::FileStore::FileStore;
};

/// Opens the Gloo store `options` names; `where` describes it for errors.
StatusOr<std::unique_ptr<gloo::rendezvous::Store>> openGlooStore(const GlooOptions &options,
                                                                 std::string &where);

/// Upper bound of a codec payload for n floats (the receiver's check before
/// allocating): header, k, values, and the largest index encoding.
uint64_t maxPayloadBytes(int64_t n);
/// The Gloo slot of step `step` of a collective on `channel`.
uint64_t collectiveSlot(uint8_t prefix, uint32_t channel, uint64_t step);

} // namespace gloo_impl
} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_COMM_GLOOCOMMUNICATORIMPL_H
