#include "transports/socket/socket_network.h"

#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "base/socket.h"
#include "transports/net/nccl_net.h"
#include "transports/socket/data_listener.h"
#include "transports/socket/stream_comm.h"

namespace strata::transport::socket {
namespace {

constexpr uint64_t kHandleMagic = 0x5354524154534f43ull;  // "STRATSOC"

// The listen handle: where to open the streams, the token each StreamHello
// presents, how many; `pending` is the sender's connect in progress (its own copy).
struct Handle {
  uint64_t magic;
  SockAddr addr;
  uint64_t token;
  uint32_t streams;
  uint32_t reserved;
  uint64_t pending;
};
static_assert(sizeof(Handle) <= net::kHandleBytes, "the handle must fit NCCL's");

struct ListenComm {
  DataListener* listener;
  uint64_t token;
  std::vector<int> fds;  // taken so far, -1 where not yet
};

// A connect under way: every stream connecting, then sending its hello.
struct Connecting {
  std::vector<int> fds;
  std::vector<size_t> helloSent;
  double until;
  ~Connecting() {
    for (int fd : fds)
      if (fd >= 0) close(fd);
  }
};

std::string peerName(int fd) {
  SockAddr a;
  a.len = sizeof(a.u);
  if (getpeername(fd, &a.u.sa, &a.len) != 0) return "the peer";
  return a.str();
}

class SocketNetwork final : public net::Network {
 public:
  SocketNetwork() : addr_(chooseInterfaceAddress(config().socketIfname, &ifname_)) {}
  const std::string& name() const override { return name_; }
  int devices() override { return 1; }
  net::DeviceProperties properties(int) override {
    net::DeviceProperties p;
    p.name = ifname_;
    p.ptrSupport = net::abi::kPtrHost;
    double gbps = interfaceSpeedGBps(ifname_);
    p.speedMbps = gbps > 0 ? static_cast<int>(gbps * 8000) : 10000;  // as NCCL, 10 Gbit/s where the kernel says nothing
    p.maxComms = 65536;
    p.maxRecvs = 1;
    return p;
  }

  void* listen(int, void* handle) override {
    DataListener& l = DataListener::instance(addr_);
    const Config& cfg = config();
    Handle h{kHandleMagic, l.address(), l.newToken(), static_cast<uint32_t>(cfg.socketThreads * cfg.socksPerThread),
             0, 0};
    memcpy(handle, &h, sizeof(h));
    return new ListenComm{&l, h.token, std::vector<int>(h.streams, -1)};
  }

  // Polled: every stream connects without waiting, then sends its hello.
  void* connect(int, void* handle) override {
    Handle* h = static_cast<Handle*>(handle);
    STRATA_REQUIRE(h->magic == kHandleMagic && h->streams >= 1 && h->streams <= 64, ncclInternalError,
                   "socket: a connection handle that is not the socket network's");
    if (!h->pending) h->pending = reinterpret_cast<uint64_t>(start(*h));
    Connecting* c = reinterpret_cast<Connecting*>(h->pending);
    if (!advance(*h, c)) return nullptr;
    auto comm = new StreamComm(std::move(c->fds), true, h->addr.str());
    c->fds.clear();
    cancelConnect(handle);
    STRATA_INFO(kSubsysNet, -1, "socket: connected to %s over %u stream(s)", h->addr.str().c_str(), h->streams);
    return comm;
  }

  void* accept(void* listenComm) override {
    ListenComm* l = static_cast<ListenComm*>(listenComm);
    STRATA_REQUIRE(!l->fds.empty(), ncclInternalError, "socket: accept on a listener that has accepted its connection");
    for (uint32_t s = 0; s < l->fds.size(); ++s)
      if (l->fds[s] < 0 && (l->fds[s] = l->listener->tryTake(l->token, s)) < 0) return nullptr;
    std::string peer = peerName(l->fds[0]);
    auto comm = new StreamComm(std::move(l->fds), false, peer);
    l->fds.clear();
    return comm;
  }

  // Nothing to register: the kernel copies from and to any memory.
  void* regMr(void*, void*, size_t, int ptrType) override {
    STRATA_REQUIRE(ptrType == net::abi::kPtrHost, ncclInvalidUsage, "socket: only host memory travels over TCP");
    return const_cast<char*>(&kRegistered);
  }
  void deregMr(void*, void*) override {}
  void* isend(void* comm, void* data, size_t bytes, int tag, void*) override {
    return static_cast<StreamComm*>(comm)->post(data, bytes, tag);
  }
  // One receive at a time (maxRecvs 1), as NCCL's socket network.
  void* irecv(void* comm, int n, const net::RecvBuffer* b) override {
    STRATA_REQUIRE(n == 1, ncclInternalError, "socket: a grouped receive of %d (this network takes one at a time)", n);
    return static_cast<StreamComm*>(comm)->post(b->data, b->bytes, b->tag);
  }
  bool test(void* request, size_t* bytes) override {
    auto* r = static_cast<StreamComm::Request*>(request);
    return r->comm->test(r, bytes);
  }
  void closeSend(void* comm) override { delete static_cast<StreamComm*>(comm); }
  void closeRecv(void* comm) override { delete static_cast<StreamComm*>(comm); }
  // Streams taken but never handed over close here; those that come later are dropped.
  void closeListen(void* comm) override {
    ListenComm* l = static_cast<ListenComm*>(comm);
    l->listener->forget(l->token);
    for (int fd : l->fds)
      if (fd >= 0) close(fd);
    delete l;
  }
  void cancelConnect(void* handle) override {
    Handle* h = static_cast<Handle*>(handle);
    if (h->magic != kHandleMagic || !h->pending) return;
    delete reinterpret_cast<Connecting*>(h->pending);
    h->pending = 0;
  }

 private:
  static constexpr char kRegistered = 0;

  static Connecting* start(const Handle& h) {
    auto c = std::make_unique<Connecting>();
    c->until = nowSec() + config().timeoutSec;
    c->helloSent.assign(h.streams, 0);
    for (uint32_t s = 0; s < h.streams; ++s) {
      try {
        c->fds.push_back(connectStart(h.addr));
      } catch (const Error& e) {
        refused(h, e);
      }
    }
    return c.release();
  }
  // The receiver's data port was up when it made the handle: a refusal means its process is gone.
  [[noreturn]] static void refused(const Handle& h, const Error& e) {
    if (strstr(e.what(), "refused"))
      fail(ncclRemoteError, "socket: %s refused the connection: the receiving process has exited",
           h.addr.str().c_str());
    throw e;
  }
  // True once every stream is up and has sent its hello.
  static bool advance(const Handle& h, Connecting* c) {
    bool all = true;
    for (uint32_t s = 0; s < h.streams; ++s) {
      size_t& sent = c->helloSent[s];
      if (sent == sizeof(StreamHello)) continue;
      bool up = false;
      try {
        up = connectFinished(c->fds[s], h.addr);
      } catch (const Error& e) {
        refused(h, e);
      }
      StreamHello hello{kHelloMagic, h.token, s, h.streams};
      ssize_t w = up ? send(c->fds[s], reinterpret_cast<char*>(&hello) + sent, sizeof(hello) - sent,
                            MSG_NOSIGNAL | MSG_DONTWAIT)
                     : 0;
      if (w < 0 && errno != EAGAIN && errno != EINTR)
        fail(ncclRemoteError, "socket: connecting to %s: %s", h.addr.str().c_str(), strerror(errno));
      if (w > 0) sent += static_cast<size_t>(w);
      all = all && sent == sizeof(hello);
    }
    STRATA_REQUIRE(all || nowSec() < c->until, ncclRemoteError,
                   "socket: connecting to %s timed out after %.0f s (STRATA_TIMEOUT)", h.addr.str().c_str(),
                   config().timeoutSec);
    return all;
  }

  std::string name_ = "Socket";
  std::string ifname_;
  SockAddr addr_;
};

}  // namespace

net::Network* socketNetwork() {
  static SocketNetwork* network = new SocketNetwork;  // never destroyed: connections may close at exit
  return network;
}

}  // namespace strata::transport::socket
