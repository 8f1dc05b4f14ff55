//===- Rendezvous.cpp - Rendezvous URLs and the address toward a store ----===//
//
// setRendezvous reads `redis://[[USER]:PASSWORD@]HOST[:PORT]`, `file://DIR` or `DIR` into
// GlooOptions; localAddressToward finds the interface address that routes
// to a host, which a rank listens on when its store is on another machine.
//
//===----------------------------------------------------------------------===//
#include "strait/runtime/Communicator.h"

#include <arpa/inet.h>
#include <cctype>
#include <cstring>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

namespace strait {
namespace rt {

namespace {

Status badUrl(const std::string &url, const std::string &why) {
  return invalidArgument("rendezvous '" + url + "': " + why +
                         " (expected redis://[[USER]:PASSWORD@]HOST[:PORT], file://DIR or DIR)");
}

/// %XX escapes of a URL's user and password (a password may hold '@' or
/// ':'); false on a malformed escape.
bool percentDecode(const std::string &in, std::string &out) {
  out.clear();
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i] != '%') {
      out += in[i];
      continue;
    }
    if (i + 2 >= in.size() || !std::isxdigit(static_cast<unsigned char>(in[i + 1])) ||
        !std::isxdigit(static_cast<unsigned char>(in[i + 2])))
      return false;
    out += static_cast<char>(std::stoi(in.substr(i + 1, 2), nullptr, 16));
    i += 2;
  }
  return true;
}

} // namespace

Status setRendezvous(GlooOptions &options, const std::string &url,
                     const std::string &baseDir) {
  if (url.empty())
    return badUrl(url, "empty");
  const std::string redis = "redis://", file = "file://";
  if (url.compare(0, redis.size(), redis) == 0) {
    std::string rest = url.substr(redis.size());
    if (!rest.empty() && rest.back() == '/')
      rest.pop_back();
    // The URL as errors show it: the password never appears in a message.
    std::string shown = url;
    size_t at = rest.rfind('@');
    std::string user, password;
    if (at != std::string::npos) {
      std::string info = rest.substr(0, at);
      shown = redis + "***@" + rest.substr(at + 1);
      size_t colon = info.find(':');
      if (colon == std::string::npos)
        return badUrl(shown, "a user name without ':PASSWORD' before '@'");
      if (!percentDecode(info.substr(0, colon), user) ||
          !percentDecode(info.substr(colon + 1), password))
        return badUrl(shown, "a malformed %XX escape in the user or password");
      if (password.empty())
        return badUrl(shown, "an empty password");
      rest = rest.substr(at + 1);
    }
    std::string host, port;
    if (!rest.empty() && rest[0] == '[') { // [IPv6]:port
      size_t close = rest.find(']');
      if (close == std::string::npos)
        return badUrl(shown, "an IPv6 address without its closing ']'");
      host = rest.substr(1, close - 1);
      std::string tail = rest.substr(close + 1);
      if (!tail.empty()) {
        if (tail[0] != ':')
          return badUrl(shown, "'" + tail + "' after the host");
        port = tail.substr(1);
      } else {
        port = "6379";
      }
    } else {
      size_t colon = rest.find(':');
      host = rest.substr(0, colon);
      port = colon == std::string::npos ? "6379" : rest.substr(colon + 1);
    }
    if (host.empty())
      return badUrl(shown, "no host");
    if (host.find_first_of("/@?# ") != std::string::npos)
      return badUrl(shown, "the host '" + host + "' has a character a host name cannot");
    char *end = nullptr;
    long p = port.empty() ? 0 : std::strtol(port.c_str(), &end, 10);
    if (port.empty() || *end != '\0' || p < 1 || p > 65535)
      return badUrl(shown, "the port '" + port + "' is not a number from 1 to 65535");
    options.store = StoreKind::Redis;
    options.redisHost = host;
    options.redisPort = static_cast<int>(p);
    options.redisUser = user;
    options.redisPassword = password;
    return Status::ok();
  }
  std::string dir = url.compare(0, file.size(), file) == 0 ? url.substr(file.size()) : url;
  size_t scheme = dir.find("://");
  if (scheme != std::string::npos)
    return badUrl(url, "unknown scheme '" + dir.substr(0, scheme) + "'");
  if (dir.empty())
    return badUrl(url, "no folder");
  options.store = StoreKind::File;
  options.storePath = dir[0] == '/' || baseDir.empty() ? dir : baseDir + "/" + dir;
  return Status::ok();
}

std::string redisUrlWithoutPassword(const GlooOptions &options) {
  bool v6 = options.redisHost.find(':') != std::string::npos;
  return "redis://" + (v6 ? "[" + options.redisHost + "]" : options.redisHost) + ":" +
         std::to_string(options.redisPort);
}

StatusOr<std::string> localAddressToward(const std::string &host, int port) {
  addrinfo hints;
  std::memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo *found = nullptr;
  int rc = ::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found);
  if (rc != 0)
    return unavailable("the rendezvous host '" + host +
                               "' does not resolve: " + ::gai_strerror(rc));
  std::string why = "no route";
  for (addrinfo *a = found; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0)
      continue;
    // A datagram socket's connect only picks the route and source address.
    sockaddr_storage self;
    socklen_t len = sizeof self;
    bool ok = ::connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
              ::getsockname(fd, reinterpret_cast<sockaddr *>(&self), &len) == 0;
    if (!ok)
      why = std::strerror(errno);
    ::close(fd);
    if (!ok)
      continue;
    char text[INET6_ADDRSTRLEN] = {0};
    const void *addr = self.ss_family == AF_INET
                           ? static_cast<const void *>(
                                 &reinterpret_cast<sockaddr_in *>(&self)->sin_addr)
                           : static_cast<const void *>(
                                 &reinterpret_cast<sockaddr_in6 *>(&self)->sin6_addr);
    if (::inet_ntop(self.ss_family, addr, text, sizeof text)) {
      ::freeaddrinfo(found);
      return std::string(text);
    }
  }
  ::freeaddrinfo(found);
  return unavailable("no local address reaches the rendezvous host '" + host +
                             "': " + why);
}

} // namespace rt
} // namespace strait
