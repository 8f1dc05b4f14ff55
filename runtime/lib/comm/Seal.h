//===- Seal.h - Authenticated encryption of the buffers between ranks -*- C++ -*-===//
//
// LinkSealer holds this rank's keys for sealed links (docs/runtime.md,
// "Sealed links"): one XChaCha20-Poly1305 key per direction of every pair,
//   key(src -> dst) = BLAKE2b-256(key = job secret,
//                                 "strait-link-v1" | prefix | src | dst |
//                                 salt[src] | salt[dst])
// where salt[r] is 32 random bytes rank r draws at connect and publishes
// through the rendezvous store, so keys differ per job, per run (even with
// a reused prefix) and per direction. A buffer of n bytes goes on the wire
// as n bytes of ciphertext and a 16-byte tag; its nonce is (slot, counter),
// counter = how many buffers this direction already carried on that slot.
// Gloo matches the sends and receives of one pair and slot in posting order
// (per-slot FIFOs in gloo/transport/tcp/pair.h), so both ends count alike
// and a replayed, reordered or dropped buffer fails to verify. The slot and
// length are bound as associated data. Also here: the salts' exchange and
// the pool of ciphertext buffers.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_COMM_SEAL_H
#define STRAIT_RUNTIME_LIB_COMM_SEAL_H

#include "strait/runtime/Communicator.h"
#include "strait/runtime/LinkSecret.h"
#include "strait/runtime/Status.h"

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace gloo {
namespace rendezvous {
class Store;
} // namespace rendezvous
} // namespace gloo

namespace strait {
namespace rt {

constexpr size_t kSealTagBytes = 16;
constexpr size_t kSealSaltBytes = 32;
using LinkSalt = std::array<uint8_t, kSealSaltBytes>;

/// Initializes libsodium once (thread-safe); Internal when it cannot.
Status initSodium();
/// Fresh random salt of this rank.
LinkSalt randomLinkSalt();

class LinkSealer {
public:
  /// Keys of `rank` to and from every other rank of `salts.size()` ranks.
  LinkSealer(const LinkSecret &secret, const std::string &prefix, int rank,
             const std::vector<LinkSalt> &salts);
  ~LinkSealer();
  LinkSealer(const LinkSealer &) = delete;
  LinkSealer &operator=(const LinkSealer &) = delete;

  /// The counter of the next buffer to `peer` / from `peer` on `slot`
  /// (post-increment). Callers take it in the order they post to Gloo.
  uint64_t nextSend(int peer, uint64_t slot) { return sendCounters[{peer, slot}]++; }
  uint64_t nextRecv(int peer, uint64_t slot) { return recvCounters[{peer, slot}]++; }

  /// Writes `bytes` + kSealTagBytes at `wire`.
  void seal(int peer, uint64_t slot, uint64_t counter, const void *plain, size_t bytes,
            uint8_t *wire) const;
  /// Verifies the `bytes` + kSealTagBytes at `wire` and decrypts them to
  /// `plain`; false (and `plain` untouched) when they do not verify.
  bool open(int peer, uint64_t slot, uint64_t counter, const uint8_t *wire, size_t bytes,
            void *plain) const;

private:
  using Key = std::array<uint8_t, 32>;
  int rank;
  std::vector<Key> sendKeys, recvKeys; // by peer rank
  std::map<std::pair<int, uint64_t>, uint64_t> sendCounters, recvCounters;
};

/// Publishes this rank's salt in the rendezvous store (before the
/// rendezvous, so that peers find it at once).
void publishLinkSalt(gloo::rendezvous::Store &store, int rank, const LinkSalt &salt);
/// Every other rank's salt from the store (waiting up to the timeout; a rank
/// without a link secret publishes none: an error naming it), then this
/// rank's link keys.
StatusOr<std::unique_ptr<LinkSealer>> fetchLinkSalts(const GlooOptions &options,
                                                    gloo::rendezvous::Store &store,
                                                    const LinkSecret &secret,
                                                    const LinkSalt &mine,
                                                    const std::string &where);

/// Sealed links: buffers for the ciphertext, kept for reuse once a transfer
/// completed (a fresh multi-MiB allocation per transfer costs its page
/// faults every time). Holds at most kKeepBytes; thread-safe.
class WirePool {
public:
  struct Block {
    std::unique_ptr<uint8_t[]> data;
    size_t size = 0;
  };
  /// The smallest kept block of at least `bytes` bytes, else a new one.
  Block take(size_t bytes);
  void give(Block block);

private:
  static constexpr size_t kKeepBytes = size_t(256) << 20;
  std::mutex mutex;
  std::vector<Block> free;
  size_t kept = 0;
};

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_COMM_SEAL_H
