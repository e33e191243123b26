#include "transports/socket/data_listener.h"

#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <memory>

#include "base/clock.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"

namespace strata::transport::socket {

DataListener& DataListener::instance(const SockAddr& ip) {
  static std::mutex mu;
  static std::unique_ptr<DataListener> listener;
  static pid_t owner = 0;
  std::lock_guard<std::mutex> lock(mu);
  if (!listener || owner != getpid()) {  // a forked child gets its own
    listener.release();                   // the parent's object is not ours to close
    listener.reset(new DataListener(ip));
    owner = getpid();
  }
  return *listener;
}

DataListener::DataListener(const SockAddr& ip) : addr_(ip) {
  addr_.setPort(0);
  fd_ = listenOn(&addr_);
  STRATA_INFO(kSubsysNet, -1, "socket: listening for data streams on %s", addr_.str().c_str());
}

uint64_t DataListener::newToken() {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t t = nextToken_++;
  open_.insert(t);
  return t;
}

void DataListener::forget(uint64_t token) {
  std::lock_guard<std::mutex> lock(mu_);
  open_.erase(token);
  for (auto it = ready_.begin(); it != ready_.end();) {
    if (it->first.first != token) {
      ++it;
      continue;
    }
    close(it->second);
    it = ready_.erase(it);
  }
}

int DataListener::tryTake(uint64_t token, uint32_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  acceptPending();
  readHellos();
  auto it = ready_.find({token, stream});
  if (it == ready_.end()) return -1;
  int fd = it->second;
  ready_.erase(it);
  return fd;
}

void DataListener::acceptPending() {
  for (;;) {
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return;  // the listening socket blocks: accept only what is there
    int fd = accept4(fd_, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) return;
    pending_[fd].since = nowSec();
  }
}

// Files every stream whose hello is complete by (token, stream); drops those that
// do not start with Strata's hello, and those still incomplete after 5 s.
void DataListener::readHellos() {
  double now = nowSec();
  for (auto it = pending_.begin(); it != pending_.end();) {
    int fd = it->first;
    Pending& p = it->second;
    ssize_t n = recv(fd, reinterpret_cast<char*>(&p.hello) + p.got, sizeof(p.hello) - p.got, 0);
    if (n > 0) p.got += static_cast<size_t>(n);
    bool waiting = n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR);
    const char* drop = nullptr;
    if (p.got == sizeof(p.hello)) {
      if (p.hello.magic != kHelloMagic)
        drop = "did not start with Strata's hello";
      else if (!open_.count(p.hello.token))  // a stranger's guess, or a connection that is gone
        drop = "presented a token no connection here is waiting for";
    } else if (n == 0 || (n < 0 && !waiting)) {
      drop = "closed before its hello";
    } else if (now - p.since > 5.0) {
      drop = "sent no complete hello in 5 s";
    }
    if (drop) {
      close(fd);
      STRATA_WARN(-1, "socket: dropped a connection to the data port that %s", drop);
      it = pending_.erase(it);
      continue;
    }
    if (p.got < sizeof(p.hello)) {
      ++it;
      continue;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    ready_[{p.hello.token, p.hello.stream}] = fd;
    it = pending_.erase(it);
  }
}

}  // namespace strata::transport::socket
