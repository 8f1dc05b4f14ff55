//===- LinkSecret.h - The job secret that seals links between ranks -*- C++ -*-===//
//
// A link secret is 32 random bytes shared by every rank of a job; with it the
// Gloo communicator authenticates and encrypts every buffer between ranks
// (GlooOptions::linkSecretFile, docs/runtime.md "Sealed links"). On disk it
// is a file of 64 hex characters (one optional trailing newline), readable
// by its owner only (mode 0600 or stricter), like an ssh key.
//
//===----------------------------------------------------------------------===//
#ifndef STRAIT_RUNTIME_LINKSECRET_H
#define STRAIT_RUNTIME_LINKSECRET_H

#include "strait/runtime/Status.h"

#include <array>
#include <cstdint>
#include <string>

namespace strait {
namespace rt {

constexpr size_t kLinkSecretBytes = 32;
using LinkSecret = std::array<uint8_t, kLinkSecretBytes>;

/// Reads a link secret file. Errors name the file: missing or unreadable
/// (NotFound / IoError), readable by group or others (InvalidArgument, with
/// the chmod that fixes it), not exactly 64 hex characters (InvalidArgument).
StatusOr<LinkSecret> readLinkSecretFile(const std::string &path);

/// Writes a fresh random secret to `path` with mode 0600; refuses to
/// replace an existing file.
Status writeLinkSecretFile(const std::string &path);

} // namespace rt
} // namespace strait

#endif // STRAIT_RUNTIME_LINKSECRET_H
