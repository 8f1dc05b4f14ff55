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

#include <algorithm>
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
  /// Where the codec runs; null = the host's (hostCodecEngine()).
  CodecEngine *engine = nullptr;
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
  /// Copies `root`'s tensor to the other ranks of `ranks` (sorted, holding
  /// root and this rank); every member calls it. By default the root sends
  /// to each member in turn on `channel`; NCCL broadcasts on the group's
  /// communicator.
  virtual Status broadcastGroup(const Tensor &tensor, int root, const std::vector<int> &ranks,
                                uint32_t channel) {
    if (!std::binary_search(ranks.begin(), ranks.end(), root) ||
        !std::binary_search(ranks.begin(), ranks.end(), getRank()))
      return invalidArgument("broadcast group must hold its root " + std::to_string(root) +
                             " and this rank")
          .withRank(getRank());
    if (getRank() != root)
      return recv(tensor, root, channel);
    for (int r : ranks)
      if (r != root)
        STRAIT_RETURN_IF_ERROR(send(tensor, r, channel));
    return Status::ok();
  }
  /// Bytes posted to the transport per peer since the previous call.
  virtual TrafficCounters takeTraffic() { return {}; }
  /// Thread-safe: every pending and later transfer of this communicator
  /// fails at once with a link failure naming `reason` (in-process recovery,
  /// docs/runtime.md "Flaky links"). A communicator that cannot interrupt its
  /// transfers ignores it (they end at their timeout).
  virtual void abort(const std::string &reason) { (void)reason; }
};

/// Link failures: a transfer that failed because the connection did
/// (reset, EOF, timeout) or was aborted by in-process recovery. Their
/// message starts with "link failure: "; errors of the data (a size or
/// codec mismatch, a buffer that does not authenticate) do not.
inline Status linkFailure(const Status &s) {
  const ErrorContext &c = s.getContext();
  Status out(s.getCode(), "link failure: " + s.getMessage());
  out.withRank(c.rank).withDevice(c.device).withStep(c.step).withPeer(c.peer).withKernel(c.kernel);
  return out;
}
inline bool isLinkFailure(const Status &s) {
  return (s.getCode() == StatusCode::Unavailable ||
          s.getCode() == StatusCode::DeadlineExceeded) &&
         s.getMessage().find("link failure: ") != std::string::npos;
}

/// A key-value rendezvous store (Gloo's file or Redis store, as GlooOptions
/// names it) for the in-process recovery protocol. Not thread-safe: one per
/// thread.
class KeyStore {
public:
  virtual ~KeyStore() = default;
  /// Sets `key` (a key that exists keeps its first value: Redis's SETNX).
  virtual Status set(const std::string &key, const std::string &value) = 0;
  /// Whether `key` exists (no wait).
  virtual StatusOr<bool> has(const std::string &key) = 0;
  /// The value of `key`, waiting up to `timeout` for it to appear.
  virtual StatusOr<std::string> get(const std::string &key,
                                    std::chrono::milliseconds timeout) = 0;
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
  /// Redis AUTH (redis://[[USER]:PASSWORD@]HOST, or strait-run's
  /// $STRAIT_REDIS_PASSWORD): sent once on every connection to the store;
  /// empty: no AUTH. A store that refuses it fails naming the store and
  /// "authentication".
  std::string redisUser;
  std::string redisPassword;
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

/// Sets `options`' store from a rendezvous URL (strait-run --rendezvous):
/// `redis://[[USER]:PASSWORD@]HOST[:PORT]` (port 6379 by default; HOST a
/// name, an IPv4 address or a bracketed IPv6 one; USER and PASSWORD
/// percent-decoded, into redisUser/redisPassword), `file://DIR` or a plain DIR (a folder
/// every rank can reach: one machine, or a shared file system; a relative
/// DIR is under `baseDir`). InvalidArgument naming the URL and what is wrong
/// with it (an empty host, a port that is not 1-65535, another scheme).
Status setRendezvous(GlooOptions &options, const std::string &url,
                     const std::string &baseDir);

/// `redis://HOST:PORT` of `options`' Redis store, without its user and
/// password (what a launcher passes on to its ranks, the password going
/// through the environment instead).
std::string redisUrlWithoutPassword(const GlooOptions &options);

/// The address of this machine's interface that reaches `host`:`port` (the
/// source address the kernel's routing picks for it; no packet is sent):
/// what a rank listens on when its peers rendezvous through a store on
/// another machine and no address was given. Unavailable naming the host
/// when it does not resolve or has no route.
StatusOr<std::string> localAddressToward(const std::string &host, int port);

/// Opens the store `options` names (store, storePath, redisHost/Port), its
/// keys under `prefix`. Unavailable naming the store when it cannot.
StatusOr<std::unique_ptr<KeyStore>> openKeyStore(const GlooOptions &options,
                                                 const std::string &prefix);

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
