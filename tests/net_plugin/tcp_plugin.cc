// A small NCCL net plugin over TCP, for Strata's tests: what a third-party
// network (EFA, a vendor's RDMA) looks like to a library that loads it. One
// device; one stream per connection; each message is an 8-byte length and the
// bytes; up to NCCL_NET_MAX_REQUESTS requests per comm; one receive per irecv.
// It is strict where a real plugin would corrupt memory or hang: buffers must
// lie inside the memory registered for them, a receive must be large enough,
// and the peer's exit is a remote error. Built twice: exporting ncclNetPlugin_v8
// (TEST_PLUGIN_V8) and ncclNetPlugin_v11.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <mutex>

#include "net_api.h"

namespace {

constexpr uint32_t kMagic = 0x53545450;  // "STTP"
ncclDebugLogger_t gLog = nullptr;
std::atomic<int> gLive{0};

#define LOG(...) \
  do {           \
    if (gLog) gLog(NCCL_LOG_INFO, 16, __FILE__, __LINE__, __VA_ARGS__); \
  } while (0)

struct Handle {  // inside the 128-byte handle; the sender keeps its progress in `stage` and `fd`
  uint32_t magic;
  uint32_t ip;  // network order
  uint16_t port;
  uint16_t stage;
  int32_t fd;
};
static_assert(sizeof(Handle) <= NCCL_NET_HANDLE_MAXSIZE, "handle");

struct Mr {
  uint32_t magic;
  char* base;
  size_t size;
};

struct Request {
  bool used = false, send = false, done = false;
  char* data = nullptr;
  size_t size = 0, capacity = 0, moved = 0;  // moved counts the 8-byte length first
  uint64_t header = 0;
  struct Comm* comm = nullptr;
};

struct Comm {
  int fd = -1;
  bool failed = false;
  std::mutex mu;
  Request reqs[NCCL_NET_MAX_REQUESTS];
  unsigned next = 0;  // the oldest request not yet done (they complete in order)
  unsigned issued = 0;
};

struct Listen {
  int fd = -1;
  int pending = -1;  // accepted, its hello not read yet
};

// The address peers reach this host at: NCCL_SOCKET_IFNAME's interface (prefix
// match), else the first IPv4 interface up that is not loopback, else 127.0.0.1.
uint32_t localAddress() {
  const char* want = getenv("NCCL_SOCKET_IFNAME");
  uint32_t found = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    bool loop = i->ifa_flags & IFF_LOOPBACK;
    bool match = want && *want ? strncmp(i->ifa_name, want, strlen(want)) == 0 : !loop;
    if (match) {
      found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      break;
    }
  }
  freeifaddrs(list);
  return found;
}

ncclResult_t init() {
  LOG("StrataTestTCP: init (pid %d)", getpid());
  return ncclSuccess;
}

ncclResult_t devices(int* n) {
  *n = 1;
  return ncclSuccess;
}

// STRATA_TEST_PLUGIN_DEVICE_TYPE=N: the device says netDeviceType N, and connections
// hand back a device handle of that type (as a plugin that unpacks on the GPU does).
int deviceType() {
  const char* v = getenv("STRATA_TEST_PLUGIN_DEVICE_TYPE");
  return v ? atoi(v) : 0;
}

template <typename Props>
ncclResult_t properties(int dev, Props* p) {
  if (dev != 0) return ncclInvalidArgument;
  memset(p, 0, sizeof(*p));
  static char name[] = "tcp0";
  p->name = name;
  p->pciPath = nullptr;
  p->guid = 0x5354;
  p->ptrSupport = NCCL_PTR_HOST;
  p->speed = 10000;
  p->port = 1;
  p->latency = 0;
  p->maxComms = 65536;
  p->maxRecvs = 1;
  p->netDeviceType = static_cast<decltype(p->netDeviceType)>(deviceType());
  return ncclSuccess;
}

ncclResult_t handBack(ncclResult_t r, ncclNetDeviceHandle_t** devComm) {
  static ncclNetDeviceHandle_t unpack{};
  unpack.netDeviceType = static_cast<decltype(unpack.netDeviceType)>(deviceType());
  if (r == ncclSuccess && devComm && deviceType() != 0) *devComm = &unpack;
  return r;
}

ncclResult_t listenOn(int dev, void* handle, void** listenComm) {
  if (dev != 0) return ncclInvalidArgument;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return ncclSystemError;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = localAddress();
  socklen_t len = sizeof(a);
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || ::listen(fd, 16) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return ncclSystemError;
  }
  memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
  Handle* h = static_cast<Handle*>(handle);
  *h = {kMagic, a.sin_addr.s_addr, a.sin_port, 0, -1};
  auto* l = new Listen;
  l->fd = fd;
  *listenComm = l;
  return ncclSuccess;
}

Comm* newComm(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  auto* c = new Comm;
  c->fd = fd;
  gLive.fetch_add(1);
  return c;
}

// Not blocking: the first call starts the connection and returns no comm, as a
// network that needs a handshake does; later calls finish it.
ncclResult_t connectTo(int dev, void* handle, void** sendComm) {
  *sendComm = nullptr;
  Handle* h = static_cast<Handle*>(handle);
  if (dev != 0 || h->magic != kMagic) return ncclInvalidArgument;
  if (h->stage == 0) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) return ncclSystemError;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = h->ip;
    a.sin_port = h->port;
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
      close(fd);
      return ncclSystemError;
    }
    h->fd = fd;
    h->stage = 1;
    return ncclSuccess;
  }
  pollfd p{h->fd, POLLOUT, 0};
  if (poll(&p, 1, 0) == 0) return ncclSuccess;  // not yet
  int err = 0;
  socklen_t len = sizeof(err);
  getsockopt(h->fd, SOL_SOCKET, SO_ERROR, &err, &len);
  if (err != 0) {
    close(h->fd);
    return ncclSystemError;
  }
  uint32_t hello = kMagic;
  if (write(h->fd, &hello, sizeof(hello)) != sizeof(hello)) return ncclSystemError;
  h->stage = 2;
  *sendComm = newComm(h->fd);
  return ncclSuccess;
}

// Not blocking either: the sender writes its hello on a later connect call.
ncclResult_t acceptFrom(void* listenComm, void** recvComm) {
  *recvComm = nullptr;
  auto* l = static_cast<Listen*>(listenComm);
  if (l->pending < 0) {
    l->pending = accept4(l->fd, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (l->pending < 0) return errno == EAGAIN || errno == EWOULDBLOCK ? ncclSuccess : ncclSystemError;
  }
  uint32_t hello = 0;
  ssize_t k = recv(l->pending, &hello, sizeof(hello), MSG_PEEK);
  if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return ncclSuccess;  // not yet
  if (k != sizeof(hello) || read(l->pending, &hello, sizeof(hello)) != sizeof(hello) || hello != kMagic) {
    close(l->pending);
    l->pending = -1;
    return ncclSystemError;
  }
  *recvComm = newComm(l->pending);
  l->pending = -1;
  return ncclSuccess;
}

ncclResult_t regMr(void* comm, void* data, size_t size, int type, void** mhandle) {
  if (!comm || type != NCCL_PTR_HOST) return ncclInvalidArgument;
  *mhandle = new Mr{kMagic, static_cast<char*>(data), size};
  return ncclSuccess;
}

ncclResult_t regMrDmaBuf(void*, void*, size_t, int, uint64_t, int, void**) { return ncclInternalError; }

ncclResult_t deregMr(void*, void* mhandle) {
  auto* m = static_cast<Mr*>(mhandle);
  if (!m || m->magic != kMagic) return ncclInvalidArgument;
  m->magic = 0;
  delete m;
  return ncclSuccess;
}

bool inside(void* mhandle, const void* data, size_t size) {
  auto* m = static_cast<Mr*>(mhandle);
  auto* p = static_cast<const char*>(data);
  return m && m->magic == kMagic && p >= m->base && size <= m->size && p - m->base <= static_cast<ptrdiff_t>(m->size - size);
}

// A free request of `c`, in issue order; null when all are in use.
Request* take(Comm* c, bool send, void* data, size_t size) {
  Request& r = c->reqs[c->issued % NCCL_NET_MAX_REQUESTS];
  if (r.used) return nullptr;
  r = Request{};
  r.used = true;
  r.send = send;
  r.data = static_cast<char*>(data);
  r.size = r.capacity = size;
  r.header = size;
  r.comm = c;
  ++c->issued;
  return &r;
}

ncclResult_t isendSized(void* sendComm, void* data, size_t size, void* mhandle, void** request) {
  auto* c = static_cast<Comm*>(sendComm);
  if (!inside(mhandle, data, size)) return ncclInvalidArgument;  // not in the memory registered for it
  std::lock_guard<std::mutex> lock(c->mu);
  *request = take(c, true, data, size);
  return ncclSuccess;
}

ncclResult_t irecvSized(void* recvComm, int n, void* data, size_t size, void* mhandle, void** request) {
  auto* c = static_cast<Comm*>(recvComm);
  if (n != 1 || !inside(mhandle, data, size)) return ncclInvalidArgument;
  std::lock_guard<std::mutex> lock(c->mu);
  *request = take(c, false, data, size);
  return ncclSuccess;
}

// Moves bytes for the oldest unfinished request; false on a failed stream.
bool pump(Comm* c, Request& r) {
  while (!r.done) {
    char* p;
    size_t left;
    if (r.moved < sizeof(r.header)) {
      p = reinterpret_cast<char*>(&r.header) + r.moved;
      left = sizeof(r.header) - r.moved;
    } else {
      if (!r.send && r.moved == sizeof(r.header)) {
        if (r.header > r.capacity) return false;  // a message larger than the receive: the peers disagree
        r.size = r.header;
      }
      size_t off = r.moved - sizeof(r.header);
      p = r.data + off;
      left = r.size - off;
      if (left == 0) {
        r.done = true;
        break;
      }
    }
    ssize_t k = r.send ? send(c->fd, p, left, MSG_NOSIGNAL) : recv(c->fd, p, left, 0);
    if (k > 0) {
      r.moved += static_cast<size_t>(k);
    } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
      return true;
    } else {
      return false;  // closed or failed: the peer is gone
    }
  }
  return true;
}

ncclResult_t test(void* request, int* done, int* size) {
  auto* r = static_cast<Request*>(request);
  Comm* c = r->comm;
  std::lock_guard<std::mutex> lock(c->mu);
  // Requests complete in order: move the older ones first, and stop at this one
  // (a peer that closed after its last message fails only the requests after it).
  while (!r->done && !c->failed && c->next != c->issued) {
    Request& oldest = c->reqs[c->next % NCCL_NET_MAX_REQUESTS];
    if (!pump(c, oldest)) c->failed = true;
    if (!oldest.done) break;
    ++c->next;
  }
  if (!r->done && c->failed) return ncclRemoteError;
  *done = r->done;
  if (r->done) {
    if (size) *size = static_cast<int>(r->size);
    r->used = false;
  }
  return ncclSuccess;
}

ncclResult_t closeComm(void* comm) {
  auto* c = static_cast<Comm*>(comm);
  if (!c) return ncclSuccess;
  close(c->fd);
  delete c;
  gLive.fetch_sub(1);
  return ncclSuccess;
}

ncclResult_t closeListen(void* listenComm) {
  auto* l = static_cast<Listen*>(listenComm);
  close(l->fd);
  if (l->pending >= 0) close(l->pending);
  delete l;
  return ncclSuccess;
}

ncclResult_t iflush(void*, int, void**, int*, void**, void** request) {
  *request = nullptr;
  return ncclInternalError;  // host memory only: nothing to flush
}

}  // namespace

extern "C" {

#ifdef TEST_PLUGIN_V8
__attribute__((visibility("default"))) ncclNet_v8_t ncclNetPlugin_v8 = {
    "StrataTestTCP",
    [](ncclDebugLogger_t log) {
      gLog = log;
      return init();
    },
    devices,
    properties<ncclNetProperties_v8_t>,
    listenOn,
    [](int dev, void* handle, void** sendComm, ncclNetDeviceHandle_t** d) {
      return handBack(connectTo(dev, handle, sendComm), d);
    },
    [](void* l, void** recvComm, ncclNetDeviceHandle_t** d) { return handBack(acceptFrom(l, recvComm), d); },
    regMr,
    regMrDmaBuf,
    deregMr,
    [](void* comm, void* data, int size, int, void* mh, void** req) {
      return size < 0 ? ncclInvalidArgument : isendSized(comm, data, static_cast<size_t>(size), mh, req);
    },
    [](void* comm, int n, void** data, int* sizes, int*, void** mhs, void** req) {
      return sizes[0] < 0 ? ncclInvalidArgument : irecvSized(comm, n, data[0], static_cast<size_t>(sizes[0]), mhs[0], req);
    },
    iflush,
    test,
    closeComm,
    closeComm,
    closeListen,
    nullptr,
    nullptr,
};
#else
__attribute__((visibility("default"))) ncclNet_v11_t ncclNetPlugin_v11 = {
    "StrataTestTCP",
    [](void** ctx, uint64_t, ncclNetCommConfig_v11_t*, ncclDebugLogger_t log, ncclProfilerCallback_t) {
      gLog = log;
      *ctx = &gLive;  // any non-null context; listen and connect check it
      return init();
    },
    devices,
    properties<ncclNetProperties_v11_t>,
    [](void* ctx, int dev, void* handle, void** l) { return ctx ? listenOn(dev, handle, l) : ncclInvalidArgument; },
    [](void* ctx, int dev, void* handle, void** sendComm, ncclNetDeviceHandle_t** d) {
      return ctx ? handBack(connectTo(dev, handle, sendComm), d) : ncclInvalidArgument;
    },
    [](void* l, void** recvComm, ncclNetDeviceHandle_t** d) { return handBack(acceptFrom(l, recvComm), d); },
    regMr,
    regMrDmaBuf,
    deregMr,
    [](void* comm, void* data, size_t size, int, void* mh, void*, void** req) { return isendSized(comm, data, size, mh, req); },
    [](void* comm, int n, void** data, size_t* sizes, int*, void** mhs, void**, void** req) {
      return irecvSized(comm, n, data[0], sizes[0], mhs[0], req);
    },
    iflush,
    test,
    closeComm,
    closeComm,
    closeListen,
    nullptr,
    nullptr,
    nullptr,
    [](void*) { return ncclSuccess; },
    nullptr,
};
#endif
}
