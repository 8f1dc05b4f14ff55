//===- Seal.cpp - Link keys, AEAD sealing and the secret file -------------===//
//
// libsodium only here: key derivation (crypto_generichash, BLAKE2b), the
// AEAD (crypto_aead_xchacha20poly1305_ietf) and the secret file's hex; and
// the salts' exchange through the rendezvous store.
//
//===----------------------------------------------------------------------===//
#include "Seal.h"

#include <gloo/rendezvous/store.h>
#include <sodium.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <mutex>
#include <sys/stat.h>
#include <unistd.h>

namespace strait {
namespace rt {
namespace {

void putU64(uint8_t *out, uint64_t v) {
  for (int i = 0; i < 8; ++i)
    out[i] = static_cast<uint8_t>(v >> (8 * i));
}

/// Nonce (slot, counter, 0) and associated data (slot, length).
void nonceAndAd(uint64_t slot, uint64_t counter, size_t bytes,
                uint8_t nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES],
                uint8_t ad[16]) {
  std::memset(nonce, 0, crypto_aead_xchacha20poly1305_ietf_NPUBBYTES);
  putU64(nonce, slot);
  putU64(nonce + 8, counter);
  putU64(ad, slot);
  putU64(ad + 8, bytes);
}

} // namespace

static_assert(crypto_aead_xchacha20poly1305_ietf_ABYTES == kSealTagBytes, "tag size");
static_assert(crypto_aead_xchacha20poly1305_ietf_KEYBYTES == 32, "key size");

Status initSodium() {
  static int result = [] { return sodium_init(); }();
  if (result < 0)
    return internalError("libsodium failed to initialize (sodium_init)");
  return Status::ok();
}

LinkSalt randomLinkSalt() {
  LinkSalt salt;
  randombytes_buf(salt.data(), salt.size());
  return salt;
}

LinkSealer::LinkSealer(const LinkSecret &secret, const std::string &prefix, int rank,
                       const std::vector<LinkSalt> &salts)
    : rank(rank) {
  int world = static_cast<int>(salts.size());
  auto derive = [&](int src, int dst, Key &key) {
    crypto_generichash_state st;
    crypto_generichash_init(&st, secret.data(), secret.size(), key.size());
    static const char kLabel[] = "strait-link-v1";
    crypto_generichash_update(&st, reinterpret_cast<const uint8_t *>(kLabel), sizeof(kLabel));
    uint8_t len[8];
    putU64(len, prefix.size());
    crypto_generichash_update(&st, len, 8);
    crypto_generichash_update(&st, reinterpret_cast<const uint8_t *>(prefix.data()),
                              prefix.size());
    uint8_t ranks[16];
    putU64(ranks, static_cast<uint64_t>(src));
    putU64(ranks + 8, static_cast<uint64_t>(dst));
    crypto_generichash_update(&st, ranks, sizeof(ranks));
    crypto_generichash_update(&st, salts[src].data(), salts[src].size());
    crypto_generichash_update(&st, salts[dst].data(), salts[dst].size());
    crypto_generichash_final(&st, key.data(), key.size());
  };
  sendKeys.resize(world);
  recvKeys.resize(world);
  for (int peer = 0; peer < world; ++peer) {
    if (peer == rank)
      continue;
    derive(rank, peer, sendKeys[peer]);
    derive(peer, rank, recvKeys[peer]);
  }
}

LinkSealer::~LinkSealer() {
  for (Key &k : sendKeys)
    sodium_memzero(k.data(), k.size());
  for (Key &k : recvKeys)
    sodium_memzero(k.data(), k.size());
}

void LinkSealer::seal(int peer, uint64_t slot, uint64_t counter, const void *plain,
                      size_t bytes, uint8_t *wire) const {
  uint8_t nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES], ad[16];
  nonceAndAd(slot, counter, bytes, nonce, ad);
  crypto_aead_xchacha20poly1305_ietf_encrypt_detached(
      wire, wire + bytes, nullptr, static_cast<const uint8_t *>(plain), bytes, ad, sizeof(ad),
      nullptr, nonce, sendKeys[peer].data());
}

bool LinkSealer::open(int peer, uint64_t slot, uint64_t counter, const uint8_t *wire,
                      size_t bytes, void *plain) const {
  uint8_t nonce[crypto_aead_xchacha20poly1305_ietf_NPUBBYTES], ad[16];
  nonceAndAd(slot, counter, bytes, nonce, ad);
  return crypto_aead_xchacha20poly1305_ietf_decrypt_detached(
             static_cast<uint8_t *>(plain), nullptr, wire, bytes, wire + bytes, ad, sizeof(ad),
             nonce, recvKeys[peer].data()) == 0;
}

namespace {
std::string saltKey(int rank) { return "strait-link-salt-" + std::to_string(rank); }
} // namespace

void publishLinkSalt(gloo::rendezvous::Store &store, int rank, const LinkSalt &salt) {
  store.set(saltKey(rank), std::vector<char>(salt.begin(), salt.end()));
}

StatusOr<std::unique_ptr<LinkSealer>> fetchLinkSalts(const GlooOptions &options,
                                                    gloo::rendezvous::Store &store,
                                                    const LinkSecret &secret,
                                                    const LinkSalt &mine,
                                                    const std::string &where) {
  std::vector<LinkSalt> salts(options.worldSize);
  salts[options.rank] = mine;
  for (int r = 0; r < options.worldSize; ++r) {
    if (r == options.rank)
      continue;
    std::vector<char> got;
    try {
      store.wait({saltKey(r)}, options.timeout);
      got = store.get(saltKey(r));
    } catch (const std::exception &e) {
      return unavailable("sealed links: rank " + std::to_string(r) +
                         " published no link salt through " + where + " within " +
                         std::to_string(options.timeout.count()) +
                         " ms; does it run without the link secret? (" + e.what() + ")")
          .withRank(options.rank)
          .withPeer(r);
    }
    if (got.size() != kSealSaltBytes)
      return unavailable("sealed links: rank " + std::to_string(r) + "'s link salt in " +
                         where + " has " + std::to_string(got.size()) + " bytes, not " +
                         std::to_string(kSealSaltBytes))
          .withRank(options.rank)
          .withPeer(r);
    std::copy(got.begin(), got.end(), salts[r].begin());
  }
  return std::make_unique<LinkSealer>(secret, options.prefix, options.rank, salts);
}

WirePool::Block WirePool::take(size_t bytes) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    auto best = free.end();
    for (auto it = free.begin(); it != free.end(); ++it)
      if (it->size >= bytes && (best == free.end() || it->size < best->size))
        best = it;
    if (best != free.end()) {
      Block b = std::move(*best);
      free.erase(best);
      kept -= b.size;
      return b;
    }
  }
  return Block{std::unique_ptr<uint8_t[]>(new uint8_t[bytes]), bytes};
}

void WirePool::give(Block block) {
  std::lock_guard<std::mutex> lock(mutex);
  kept += block.size;
  free.push_back(std::move(block));
  while (kept > kKeepBytes) { // the smallest go first: big ones cost most to fault in
    auto smallest = std::min_element(free.begin(), free.end(), [](const Block &x, const Block &y) {
      return x.size < y.size;
    });
    kept -= smallest->size;
    free.erase(smallest);
  }
}

StatusOr<LinkSecret> readLinkSecretFile(const std::string &path) {
  STRAIT_RETURN_IF_ERROR(initSodium());
  std::string what = "link secret file '" + path + "'";
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    int err = errno;
    std::string text = what + ": " + std::strerror(err);
    return err == ENOENT ? notFound(text) : ioError(text);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return invalidArgument(what + " is not a regular file");
  }
  if (st.st_mode & (S_IRWXG | S_IRWXO)) {
    ::close(fd);
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return invalidArgument(what + " is accessible by group or others (mode " + mode +
                           "); run: chmod 600 '" + path + "'");
  }
  char text[80];
  ssize_t n = ::read(fd, text, sizeof(text));
  ::close(fd);
  if (n < 0)
    return ioError(what + ": " + std::strerror(errno));
  size_t len = static_cast<size_t>(n);
  if (len == 65 && text[64] == '\n')
    len = 64;
  LinkSecret secret;
  size_t got = 0;
  const char *end = nullptr;
  bool ok = len == 2 * kLinkSecretBytes &&
            sodium_hex2bin(secret.data(), secret.size(), text, len, nullptr, &got, &end) == 0 &&
            got == secret.size() && end == text + len;
  sodium_memzero(text, sizeof(text));
  if (!ok)
    return invalidArgument(what + " must hold exactly 64 hex characters (32 bytes), read " +
                           std::to_string(n) + " bytes; make one with strait-run "
                           "--make-link-secret FILE");
  return secret;
}

Status writeLinkSecretFile(const std::string &path) {
  STRAIT_RETURN_IF_ERROR(initSodium());
  std::string what = "link secret file '" + path + "'";
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0)
    return errno == EEXIST ? invalidArgument(what + " exists (not replaced)")
                           : ioError(what + ": " + std::strerror(errno));
  LinkSecret secret;
  randombytes_buf(secret.data(), secret.size());
  char hex[2 * kLinkSecretBytes + 1];
  sodium_bin2hex(hex, sizeof(hex), secret.data(), secret.size());
  hex[2 * kLinkSecretBytes] = '\n';
  bool ok = ::write(fd, hex, sizeof(hex)) == static_cast<ssize_t>(sizeof(hex));
  ok = ::close(fd) == 0 && ok;
  sodium_memzero(secret.data(), secret.size());
  sodium_memzero(hex, sizeof(hex));
  if (!ok)
    return ioError("cannot write " + what);
  return Status::ok();
}

} // namespace rt
} // namespace strait
