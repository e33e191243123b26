#include "base/socket.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <thread>
#include <vector>

#include "base/error.h"

namespace strata {

int SockAddr::port() const {
  if (u.sa.sa_family == AF_INET) return ntohs(u.v4.sin_port);
  return ntohs(u.v6.sin6_port);
}

void SockAddr::setPort(int port) {
  if (u.sa.sa_family == AF_INET)
    u.v4.sin_port = htons(port);
  else
    u.v6.sin6_port = htons(port);
}

std::string SockAddr::str() const {
  char ip[INET6_ADDRSTRLEN] = "?";
  if (u.sa.sa_family == AF_INET)
    inet_ntop(AF_INET, &u.v4.sin_addr, ip, sizeof(ip));
  else if (u.sa.sa_family == AF_INET6)
    inet_ntop(AF_INET6, &u.v6.sin6_addr, ip, sizeof(ip));
  return format(u.sa.sa_family == AF_INET6 ? "[%s]:%d" : "%s:%d", ip, port());
}

bool SockAddr::operator<(const SockAddr& o) const {
  if (len != o.len) return len < o.len;
  return memcmp(&u, &o.u, len) < 0;
}

double interfaceSpeedGBps(const std::string& ifname) {
  std::string path = "/sys/class/net/" + ifname + "/speed";
  FILE* f = fopen(path.c_str(), "r");
  if (!f) return 0;
  long mbps = -1;
  if (fscanf(f, "%ld", &mbps) != 1) mbps = -1;
  fclose(f);
  return mbps > 0 ? mbps / 8000.0 : 0;
}

bool interfaceMatches(const std::string& spec, const std::string& name) {
  std::string s = spec;
  bool exclude = !s.empty() && s[0] == '^';
  if (exclude) s.erase(0, 1);
  bool exact = !s.empty() && s[0] == '=';
  if (exact) s.erase(0, 1);
  bool hit = false;
  size_t pos = 0;
  while (pos <= s.size()) {
    size_t comma = s.find(',', pos);
    std::string tok = s.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    if (!tok.empty() && (exact ? name == tok : name.compare(0, tok.size(), tok) == 0)) hit = true;
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return exclude ? !hit : hit;
}

SockAddr chooseInterfaceAddress(const std::string& spec, std::string* ifnameOut) {
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) failErrno("getifaddrs");
  SockAddr best, loopback;
  std::string bestName, loName;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    std::string name = i->ifa_name;
    bool isLo = (i->ifa_flags & IFF_LOOPBACK) != 0;
    if (!spec.empty()) {
      if (!interfaceMatches(spec, name)) continue;
    } else if (name.rfind("docker", 0) == 0 || name.rfind("virbr", 0) == 0) {
      continue;  // as NCCL does, skip container bridges unless asked for
    }
    SockAddr a;
    memcpy(&a.u.v4, i->ifa_addr, sizeof(sockaddr_in));
    a.len = sizeof(sockaddr_in);
    if (isLo) {
      if (loName.empty()) { loopback = a; loName = name; }
    } else if (bestName.empty()) {
      best = a;
      bestName = name;
    }
  }
  freeifaddrs(list);
  if (bestName.empty()) { best = loopback; bestName = loName; }
  if (bestName.empty())
    fail(ncclSystemError, "no usable IPv4 interface%s%s (check NCCL_SOCKET_IFNAME)",
         spec.empty() ? "" : " matching NCCL_SOCKET_IFNAME=", spec.c_str());
  if (ifnameOut) *ifnameOut = bestName;
  best.setPort(0);
  return best;
}

int listenOn(SockAddr* addr) {
  int fd = socket(addr->family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) failErrno("socket");
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  if (bind(fd, addr->raw(), addr->len) != 0 || listen(fd, 1024) != 0) {
    close(fd);
    failErrno(("bind/listen on " + addr->str()).c_str());
  }
  socklen_t len = sizeof(addr->u);
  getsockname(fd, &addr->u.sa, &len);
  addr->len = len;
  return fd;
}

namespace {

// One non-blocking attempt, bounded by the deadline (a blocking connect to a host
// that drops packets would wait for the kernel's SYN retries, about two minutes).
// Returns the connected fd (blocking again), or -1 with errno set.
int connectOnce(const SockAddr& addr, const Deadline& deadline) {
  int fd = socket(addr.family(), SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) failErrno("socket");
  int e = 0;
  if (connect(fd, addr.raw(), addr.len) != 0) {
    e = errno;
    while (e == EINPROGRESS || e == EINTR) {
      pollfd p{fd, POLLOUT, 0};
      int r = poll(&p, 1, deadline.remainingMs(1000));
      if (r > 0) {
        socklen_t len = sizeof(e);
        getsockopt(fd, SOL_SOCKET, SO_ERROR, &e, &len);
      } else if (r < 0 ? errno != EINTR : deadline.expired()) {
        e = ETIMEDOUT;
      }
    }
  }
  if (e != 0) {
    close(fd);
    errno = e;
    return -1;
  }
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  return fd;
}

}  // namespace

int connectTo(const SockAddr& addr, const Deadline& deadline, bool retryRefused) {
  int delayMs = 1;
  for (;;) {
    int fd = connectOnce(addr, deadline);
    if (fd >= 0) return fd;
    int e = errno;
    bool retry = (e == ECONNREFUSED && retryRefused) || e == EAGAIN || e == ENETUNREACH || e == EINTR;
    if (!retry || deadline.expired()) {
      errno = e;
      failErrno(("connect to " + addr.str()).c_str());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(delayMs));
    delayMs = delayMs < 100 ? delayMs * 2 : 100;
  }
}

int connectStart(const SockAddr& addr) {
  int fd = socket(addr.family(), SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) failErrno("socket");
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  if (connect(fd, addr.raw(), addr.len) != 0 && errno != EINPROGRESS) {
    int e = errno;
    close(fd);
    errno = e;
    failErrno(("connect to " + addr.str()).c_str());
  }
  return fd;
}

bool connectFinished(int fd, const SockAddr& addr) {
  pollfd p{fd, POLLOUT, 0};
  if (poll(&p, 1, 0) <= 0) return false;
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err) {
    errno = err;
    failErrno(("connect to " + addr.str()).c_str());
  }
  return true;
}

static void waitFd(int fd, short events, const Deadline& deadline, const char* what) {
  pollfd p{fd, events, 0};
  for (;;) {
    int r = poll(&p, 1, deadline.remainingMs(1000));
    if (r > 0) return;
    if (r < 0 && errno != EINTR) failErrno("poll");
    if (deadline.expired()) fail(ncclSystemError, "timed out while %s a bootstrap socket (STRATA_TIMEOUT)", what);
  }
}

void sendAll(int fd, const void* data, size_t bytes, const Deadline& deadline) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = send(fd, p, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
      waitFd(fd, POLLOUT, deadline, "writing to");
    } else {
      failErrno("send on a bootstrap socket");
    }
  }
}

void recvAll(int fd, void* data, size_t bytes, const Deadline& deadline) {
  char* p = static_cast<char*>(data);
  while (bytes > 0) {
    ssize_t n = recv(fd, p, bytes, MSG_DONTWAIT);
    if (n > 0) {
      p += n;
      bytes -= static_cast<size_t>(n);
    } else if (n == 0) {
      fail(ncclRemoteError, "bootstrap peer closed the connection (did a rank exit?)");
    } else if (errno == EAGAIN || errno == EINTR) {
      waitFd(fd, POLLIN, deadline, "reading from");
    } else {
      failErrno("recv on a bootstrap socket");
    }
  }
}

}  // namespace strata
