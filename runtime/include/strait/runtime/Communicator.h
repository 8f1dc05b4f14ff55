//===- Communicator.h - Point-to-point and collective transfers -*- C++ -*-===//
//
// The executor reaches other ranks only through this interface. The Gloo
// implementation (lib/comm) runs over TCP with a file store (one machine) or
// a Redis store (across machines) for rendezvous. Errors name this rank, the
// peer and, once the executor adds it, the step.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_COMMUNICATOR_H
#define STRAIT_RUNTIME_COMMUNICATOR_H

#include "strait/runtime/Codec.h"
#include "strait/runtime/Status.h"
#include "strait/runtime/Tensor.h"

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace strait {
namespace rt {

/// Bytes this rank posted to the transport per peer (payloads and Strait's
/// message headers, counted where buffers are handed to Gloo), since the
/// previous takeTraffic().
struct TrafficCounters {
  bool measured = false; // false: the communicator does not count
  std::map<int, uint64_t> sent, received;
};

/// How an all-reduce runs (docs/runtime.md, "All-reduce").
struct AllReduceOptions {
  /// Participating ranks, sorted and distinct; empty = all ranks.
  std::vector<int> ranks;
  /// Hierarchical when non-empty: a partition of the group into islands of
  /// fast links. The codec then applies to the inter-island phase only.
  std::vector<std::vector<int>> islands;
  program::CodecParams codec; // CODEC_NONE: exact f32 sums
  /// Sender state of this (step, value) when codec.error_feedback.
  ErrorFeedback *feedback = nullptr;
};

class Communicator {
public:
  virtual ~Communicator() = default;
  virtual int getRank() const = 0;
  virtual int getWorldSize() const = 0;

  /// Blocking send of the tensor's bytes to `peer` on `channel`.
  virtual Status send(const Tensor &tensor, int peer, uint32_t channel) = 0;
  /// Blocking receive into `tensor` (its byte size must match the sender's).
  virtual Status recv(const Tensor &tensor, int peer, uint32_t channel) = 0;
  /// In-place sum over all ranks of a float32 tensor.
  virtual Status allReduceSum(const Tensor &tensor, uint32_t channel) = 0;
  /// In-place sum over a group of ranks (sorted, distinct, containing this
  /// rank), e.g. the data-parallel replicas of one pipeline stage. Groups
  /// that do not overlap may use the same channel concurrently.
  virtual Status allReduceSumGroup(const Tensor &tensor,
                                   const std::vector<int> &ranks,
                                   uint32_t channel) = 0;
  /// Waits until every rank reached the barrier.
  virtual Status barrier() = 0;

  /// Send of a float32 tensor through a codec: encode (with the error
  /// feedback state when given), send the payload, the peer decodes.
  virtual Status sendCoded(const Tensor &tensor, int peer, uint32_t channel,
                           const program::CodecParams &codec,
                           ErrorFeedback *feedback) {
    if (codec.codec() == program::CODEC_NONE)
      return send(tensor, peer, channel);
    return unimplemented("this communicator has no codecs").withRank(getRank());
  }
  /// Receive of a sendCoded transfer; the payload's codec must be `codec`.
  virtual Status recvCoded(const Tensor &tensor, int peer, uint32_t channel,
                           const program::CodecParams &codec) {
    if (codec.codec() == program::CODEC_NONE)
      return recv(tensor, peer, channel);
    return unimplemented("this communicator has no codecs").withRank(getRank());
  }
  /// A send that does not wait for the peer's receive: returns once the
  /// payload (encoded when `codec` says so) is copied off `tensor`, and the
  /// transfer completes in the background; flushSends() waits for all of
  /// them. 1F1B pipelines send this way: their ranks order micro-batches
  /// differently, so a blocking send could wait on a peer that waits on
  /// this rank. The peer receives it with recvDeferred. A communicator that
  /// cannot defer says so (Unimplemented) instead of blocking.
  virtual Status sendDeferred(const Tensor &tensor, int peer, uint32_t channel,
                              const program::CodecParams &codec, ErrorFeedback *feedback) {
    (void)tensor, (void)channel, (void)codec, (void)feedback;
    return unimplemented("this communicator cannot defer sends (a 1F1B program needs it)")
        .withRank(getRank())
        .withPeer(peer);
  }
  /// Receive of a sendDeferred transfer (blocking, as recvCoded).
  virtual Status recvDeferred(const Tensor &tensor, int peer, uint32_t channel,
                              const program::CodecParams &codec) {
    return recvCoded(tensor, peer, channel, codec);
  }
  /// Waits until every deferred send completed; the first failure.
  virtual Status flushSends() { return Status::ok(); }
  /// In-place all-reduce (sum) of a float32 tensor: flat or hierarchical,
  /// with or without a codec. Every rank of the group ends with the same
  /// values.
  virtual Status allReduce(const Tensor &tensor, uint32_t channel,
                           const AllReduceOptions &options) {
    if (!options.islands.empty() || options.codec.codec() != program::CODEC_NONE)
      return unimplemented("this communicator has no hierarchical or compressed "
                           "all-reduce")
          .withRank(getRank());
    return options.ranks.empty()
               ? allReduceSum(tensor, channel)
               : allReduceSumGroup(tensor, options.ranks, channel);
  }
  /// Bytes posted to the transport per peer since the previous call.
  virtual TrafficCounters takeTraffic() { return {}; }
};

enum class StoreKind { File, Redis };

struct GlooOptions {
  int rank = 0;
  int worldSize = 1;
  StoreKind store = StoreKind::File;
  /// File store: a folder shared by all ranks.
  std::string storePath;
  /// Redis store.
  std::string redisHost = "127.0.0.1";
  int redisPort = 6379;
  /// Keys are prefixed with this so several jobs can share a store.
  std::string prefix = "strait";
  /// Address this rank listens on.
  std::string hostname = "127.0.0.1";
  /// Timeout for rendezvous and for every transfer.
  std::chrono::milliseconds timeout{30000};
  /// Sealed links (docs/runtime.md, "Sealed links"): a link secret file
  /// (LinkSecret.h) shared by every rank. Every buffer between ranks is then
  /// encrypted and authenticated (16 more bytes each); a buffer that does
  /// not verify fails the transfer. Empty: plain TCP, as before.
  std::string linkSecretFile;
  /// Tests only (-1: off): the sealed buffer with this 0-based number, in
  /// this rank's posting order, goes out with one bit flipped
  /// (testTamperSealedSend), or as the ciphertext of the previous buffer
  /// posted to the same peer and slot (testReplaySealedSend).
  int testTamperSealedSend = -1;
  int testReplaySealedSend = -1;
};

/// Connects to all peers (full mesh); fails with Unavailable or
/// DeadlineExceeded naming the rank when rendezvous does not complete.
StatusOr<std::unique_ptr<Communicator>>
createGlooCommunicator(const GlooOptions &options);

/// A communicator that sends inside a domain of ranks over `fast` (NCCL
/// between the GPUs of one host) and everything else over `slow` (Gloo/TCP,
/// with the codecs). `domainOf[r]` is rank r's domain id. All-reduces over
/// groups that span domains sum inside each domain on `fast`, across
/// domains between one leader per domain on `slow` (codec, error feedback
/// and islands apply there), then broadcast inside each domain. Both
/// transports must cover the same world with the same rank numbers; `fast`
/// is only used between ranks of one domain. `fast` is destroyed first, so
/// it may borrow `slow` as its bootstrap.
StatusOr<std::unique_ptr<Communicator>>
createHybridCommunicator(std::unique_ptr<Communicator> slow, std::unique_ptr<Communicator> fast,
                         std::vector<int> domainOf);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_COMMUNICATOR_H
