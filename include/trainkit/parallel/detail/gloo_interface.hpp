#pragma once
// Which local address Gloo binds to. Gloo's default device resolves this
// machine's hostname, which Debian's /etc/hosts maps to a loopback address:
// across hosts every peer is then told to connect to 127.0.0.1. Without
// GLOO_SOCKET_IFNAME trainkit asks the kernel instead: the source address of
// a route to MASTER_ADDR (a UDP socket's connect sends nothing) is an address
// the peers can reach when they can reach MASTER_ADDR.
#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "trainkit/error.hpp"

namespace trainkit::detail {

struct GlooInterface {
  std::string address;  ///< numeric, for Gloo's createDeviceForHostname
  std::string name;     ///< the interface that holds it ("" if none does)
  bool loopback = false;
};

inline std::string numeric_address(const sockaddr* a) {
  char text[INET6_ADDRSTRLEN] = {};
  const void* bytes =
      a->sa_family == AF_INET
          ? static_cast<const void*>(&reinterpret_cast<const sockaddr_in*>(a)->sin_addr)
          : static_cast<const void*>(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
  return inet_ntop(a->sa_family, bytes, text, sizeof text) != nullptr ? text : "";
}

inline bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  }
  return a->sa_family == AF_INET6 &&
         IN6_IS_ADDR_LOOPBACK(&reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr);
}

/// The local address (and its interface) that the kernel's routes use to
/// reach `master_addr` (a name or a numeric address; IPv4 first, as the
/// rendezvous store connects); errors start with `who`.
inline GlooInterface interface_toward(const std::string& who, const std::string& master_addr,
                                      int master_port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* found = nullptr;
  const std::string port = std::to_string(master_port);
  if (const int rc = getaddrinfo(master_addr.c_str(), port.c_str(), &hints, &found); rc != 0) {
    throw Error(who + "cannot resolve MASTER_ADDR \"" + master_addr +
                "\" to choose Gloo's interface: " + gai_strerror(rc) +
                " (set GLOO_SOCKET_IFNAME to name the interface)");
  }
  std::unique_ptr<addrinfo, decltype(&freeaddrinfo)> owned(found, &freeaddrinfo);
  std::vector<const addrinfo*> candidates;
  for (const addrinfo* a = found; a != nullptr; a = a->ai_next) candidates.push_back(a);
  std::stable_partition(candidates.begin(), candidates.end(),
                        [](const addrinfo* a) { return a->ai_family == AF_INET; });
  std::string failure = "no address";
  for (const addrinfo* a : candidates) {
    const int fd = socket(a->ai_family, SOCK_DGRAM, 0);
    if (fd < 0) continue;
    sockaddr_storage local{};
    socklen_t length = sizeof local;
    const bool routed = connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
                        getsockname(fd, reinterpret_cast<sockaddr*>(&local), &length) == 0;
    if (!routed) failure = std::strerror(errno);
    close(fd);
    if (!routed) continue;
    const auto* mine = reinterpret_cast<const sockaddr*>(&local);
    GlooInterface out{numeric_address(mine), "", is_loopback(mine)};
    ifaddrs* interfaces = nullptr;
    if (getifaddrs(&interfaces) == 0) {
      for (const ifaddrs* i = interfaces; i != nullptr; i = i->ifa_next) {
        if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == mine->sa_family &&
            numeric_address(i->ifa_addr) == out.address) {
          out.name = i->ifa_name;
          break;
        }
      }
      freeifaddrs(interfaces);
    }
    return out;
  }
  throw Error(who + "no route from this host to MASTER_ADDR \"" + master_addr +
              "\" to choose Gloo's interface: " + failure +
              " (set GLOO_SOCKET_IFNAME to name the interface)");
}

}  // namespace trainkit::detail
