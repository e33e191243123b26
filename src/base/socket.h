// Small TCP helpers with deadlines, used by the bootstrap.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>

#include <cstddef>
#include <cstdint>
#include <string>

#include "base/clock.h"

namespace strata {

// An IPv4 or IPv6 socket address in a fixed-size, copyable form.
struct SockAddr {
  union {
    sockaddr sa;
    sockaddr_in v4;
    sockaddr_in6 v6;
  } u{};
  socklen_t len = 0;

  int family() const { return u.sa.sa_family; }
  const sockaddr* raw() const { return &u.sa; }
  int port() const;
  void setPort(int port);
  std::string str() const;  // "ip:port"
  bool operator<(const SockAddr& o) const;
};

// The address peers should use to reach this process: the interface that
// NCCL_SOCKET_IFNAME selects (prefix match, "^" excludes, "=" exact), else the
// first non-loopback interface that is up, else loopback. Port 0.
SockAddr chooseInterfaceAddress(const std::string& ifnameSpec, std::string* ifnameOut);

// The link speed the kernel reports for an interface (/sys/class/net/NAME/speed),
// in GB/s; 0 when it reports none (loopback, some virtual devices).
double interfaceSpeedGBps(const std::string& ifname);

// True when `name` is selected by an NCCL_SOCKET_IFNAME specification.
bool interfaceMatches(const std::string& spec, const std::string& name);

// A listening socket on addr (port chosen by the kernel); fills in the port.
int listenOn(SockAddr* addr);
// Connects to addr within the deadline. A refused connection is retried only when
// asked: a listener that is known to be up refuses only once its process is gone.
int connectTo(const SockAddr& addr, const Deadline& deadline, bool retryRefused = true);
// A connect that never waits, for callers that poll: starts it (throws on an
// immediate failure, such as a refusal), then connectFinished is false until the
// connection is up and throws if it failed. The fd stays non-blocking, TCP_NODELAY set.
int connectStart(const SockAddr& addr);
bool connectFinished(int fd, const SockAddr& addr);
// Full-length send and receive; throw on error, peer close or deadline.
void sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline);
void recvAll(int fd, void* data, size_t bytes, const Deadline& deadline);

}  // namespace strata
