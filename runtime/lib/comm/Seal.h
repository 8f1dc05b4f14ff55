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
// length are bound as associated data.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LIB_COMM_SEAL_H
#define STRAIT_RUNTIME_LIB_COMM_SEAL_H

#include "strait/runtime/LinkSecret.h"
#include "strait/runtime/Status.h"

#include <array>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

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

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LIB_COMM_SEAL_H
