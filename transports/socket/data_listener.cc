#include "transports/socket/data_listener.h"

#include <netinet/tcp.h>
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <memory>

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
  STRATA_INFO(kSubsysNet, -1, "socket transport: listening for data streams on %s", addr_.str().c_str());
}

int DataListener::tryTake(uint64_t token, uint32_t stream) {
  std::lock_guard<std::mutex> lock(mu_);
  for (;;) {
    auto it = ready_.find({token, stream});
    if (it != ready_.end()) {
      int fd = it->second;
      ready_.erase(it);
      return fd;
    }
    pollfd p{fd_, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) return -1;
    acceptOne();
  }
}

// Accepts one pending stream and files it under its hello (sent right after connect).
void DataListener::acceptOne() {
  int fd = accept(fd_, nullptr, nullptr);
  if (fd < 0) return;
  StreamHello hello{};
  try {
    recvAll(fd, &hello, sizeof(hello), Deadline(5.0));
  } catch (const Error& e) {
    close(fd);
    STRATA_WARN(-1, "socket transport: dropped an incoming stream: %s", e.what());
    return;
  }
  if (hello.magic != kHelloMagic) {
    close(fd);
    STRATA_WARN(-1, "socket transport: dropped a connection to the data port that did not start with Strata's hello");
    return;
  }
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  ready_[{hello.token, hello.stream}] = fd;
}

}  // namespace strata::transport::socket
