#include "transports/ib/ib_network.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <strings.h>

#include "base/clock.h"
#include "base/config.h"
#include "base/error.h"
#include "base/mutation.h"
#include "base/log.h"
#include "base/socket.h"
#include "transports/ib/ib_comm.h"
#include "transports/ib/ib_conns.h"
#include "transports/net/nccl_net.h"

namespace strata::transport::ib {
namespace {

using namespace conn;  // NOLINT: the connection ends are this file's own (ib_conns.h)

constexpr double kSetupSec = 30;

struct Handle {
  uint32_t magic;
  int32_t dev;
  SockAddr addr;
  uint64_t pending;  // the sender's connection while it is being set up
};
static_assert(sizeof(Handle) <= net::kHandleBytes, "IB handle");


class IbNetwork final : public net::Network {
 public:
  const std::string& name() const override { return name_; }
  int devices() override { return static_cast<int>(ports().size()); }
  net::DeviceProperties properties(int dev) override {
    const Port& p = port(dev);
    net::DeviceProperties d;
    d.name = p.device;
    d.pciPath = p.pciPath;
    d.guid = p.guid;
    d.ptrSupport = net::abi::kPtrHost | (p.dmabuf ? net::abi::kPtrCuda | net::abi::kPtrDmabuf : 0);
    d.speedMbps = p.rateMbps;
    d.port = p.port;
    d.maxComms = 65536;
    d.maxRecvs = kMaxRecvs;
    return d;
  }

  void* listen(int dev, void* handle) override {
    port(dev);
    auto l = std::make_unique<ListenComm>();
    l->dev = dev;
    SockAddr a = chooseInterfaceAddress(config().socketIfname, nullptr);
    l->fd = listenOn(&a);
    Handle h{kMagic, dev, a, 0};
    memcpy(handle, &h, sizeof(h));
    return l.release();
  }

  // Polled in three steps, none blocking on the peer: the TCP connect, then (once
  // it is up) the queue pairs and this end's info, then the receiver's answer.
  void* connect(int dev, void* handle) override {
    Handle* h = static_cast<Handle*>(handle);
    STRATA_REQUIRE(h->magic != kMagicV1, ncclInvalidUsage,
                   "IB: the receiver at %s speaks an older version of Strata's IB protocol (SIB1, before grouped "
                   "receives): run one Strata build on every rank", h->addr.str().c_str());
    STRATA_REQUIRE(h->magic == kMagic, ncclInternalError, "IB: a connection handle that is not IB's");
    auto* c = reinterpret_cast<SendComm*>(h->pending);
    if (!c) {
      auto fresh = std::make_unique<SendComm>();
      fresh->fd = connectStart(h->addr);
      fresh->setupUntil = nowSec() + kSetupSec;
      c = fresh.release();
      h->pending = reinterpret_cast<uint64_t>(c);
    }
    try {
      if (!c->infoSent && !sendInfo(c, dev, h)) return nullptr;
      if (!readable(c->fd)) {
        STRATA_REQUIRE(nowSec() < c->setupUntil, ncclSystemError,
                       "IB: the receiver at %s did not answer the connection setup within %.0f s", h->addr.str().c_str(),
                       kSetupSec);
        return nullptr;
      }
      WireInfo peer{};
      recvAll(c->fd, &peer, sizeof(peer), Deadline(kSetupSec));
      c->q.connectTo(peer);
      c->sizesAddr = peer.fifoAddr;
      c->sizesRkey = peer.fifoRkey;
      char ready = 1;
      sendAll(c->fd, &ready, 1, Deadline(kSetupSec));
    } catch (...) {
      h->pending = 0;
      delete c;
      throw;
    }
    h->pending = 0;
    STRATA_INFO(kSubsysNet, -1, "IB: connected to %s with %d queue pairs (%s)%s%s", c->q.where(0).c_str(), c->q.nqps,
                c->q.route.c_str(), c->split ? ", messages split over them" : "",
                c->ar ? format(", adaptive routing above %zu bytes", config().ibArThreshold).c_str() : "");
    return c;
  }

  void* accept(void* listenComm) override {
    auto* l = static_cast<ListenComm*>(listenComm);
    if (l->accepted < 0 && !l->comm) {
      if (!readable(l->fd)) return nullptr;
      l->accepted = ::accept(l->fd, nullptr, nullptr);
      if (l->accepted < 0) return nullptr;
    }
    if (!l->comm) {
      if (!readable(l->accepted)) return nullptr;
      WireInfo peer{};
      recvAll(l->accepted, &peer, sizeof(peer), Deadline(kSetupSec));
      auto c = std::make_unique<RecvComm>();
      c->fd = l->accepted;  // owned by c from here: closed once, with it
      l->accepted = -1;
      c->split = peer.split;
      c->fifoAddr = peer.fifoAddr;
      c->fifoRkey = peer.fifoRkey;
      c->q.create(port(l->dev), config().ibQpsPerConnection);
      c->q.connectTo(peer, true);  // its queue pairs carry the FIFO writes
      c->local = newFifo(port(l->dev).pd, &c->localMr);
      WireInfo w{};
      c->q.describe(&w);
      fillIdentity(&w);
      w.fifoAddr = reinterpret_cast<uint64_t>(&c->local->sizes);
      w.fifoRkey = c->localMr->rkey;
      sendAll(c->fd, &w, sizeof(w), Deadline(kSetupSec));
      l->comm = std::move(c);
    }
    if (!readable(l->comm->fd)) return nullptr;
    char ready = 0;
    recvAll(l->comm->fd, &ready, 1, Deadline(kSetupSec));
    STRATA_INFO(kSubsysNet, -1, "IB: accepted %s with %d queue pairs (%s)", l->comm->q.where(0).c_str(),
                l->comm->q.nqps, l->comm->q.route.c_str());
    return l->comm.release();
  }

  void* regMr(void* comm, void* data, size_t bytes, int ptrType) override {
    STRATA_REQUIRE(ptrType == net::abi::kPtrHost, ncclInvalidUsage,
                   "IB: device memory registers through regMrDmaBuf (its dma-buf), not as a CUDA pointer "
                   "(nvidia-peermem's path, which Strata does not use)");
    return static_cast<Comm*>(comm)->q.port->mrs->acquire(data, bytes);
  }
  // GPUDirect RDMA: the NIC reaches the buffer through its dma-buf; work requests name
  // it by `data` (the iova). Not cached: the exporter's fd and offset identify it.
  void* regMrDmaBuf(void* comm, void* data, size_t bytes, int ptrType, uint64_t offset, int fd) override {
    const Port& p = *static_cast<Comm*>(comm)->q.port;
    STRATA_REQUIRE(verbs()->regDmabufMr, ncclInvalidUsage, "IB: %s has no ibv_reg_dmabuf_mr (rdma-core before v34)",
                   verbs()->file.c_str());
    int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (p.relaxedOrdering) access |= IBV_ACCESS_RELAXED_ORDERING;  // as NCCL: the flush orders what lands
    ibv_mr* mr = verbs()->regDmabufMr(p.pd, offset, bytes, reinterpret_cast<uint64_t>(data), fd, access);
    if (!mr)
      fail(ncclSystemError, "IB: ibv_reg_dmabuf_mr of %zu bytes (%s memory, fd %d) on %s failed: %s", bytes,
           ptrType == net::abi::kPtrCuda ? "device" : "host", fd, p.device.c_str(), strerror(errno));
    std::lock_guard<std::mutex> lock(dmabufMu_);
    dmabufMrs_.insert(mr);
    gTotals.dmabufRegistrations.fetch_add(1, std::memory_order_relaxed);
    return mr;
  }
  void deregMr(void* comm, void* mhandle) override {
    {
      std::lock_guard<std::mutex> lock(dmabufMu_);
      if (dmabufMrs_.erase(static_cast<ibv_mr*>(mhandle))) {
        verbs()->deregMr(static_cast<ibv_mr*>(mhandle));
        return;
      }
    }
    static_cast<Comm*>(comm)->q.port->mrs->release(mhandle);
  }
  // A receive into a dma-buf registration (device memory) reads one word back
  // through a loopback queue pair: the read completes after the NIC's writes.
  bool iflush(void* recvComm, void* data, size_t bytes, void* mhandle, void** request) override {
    auto* c = static_cast<RecvComm*>(recvComm);
    *request = nullptr;
    {
      std::lock_guard<std::mutex> lock(dmabufMu_);
      if (bytes == 0 || !dmabufMrs_.count(static_cast<ibv_mr*>(mhandle))) return true;  // host memory: nothing to do
    }
    if (mutated(Mutation::kIbNoGdrFlush)) return true;
    if (c->flushReq.pending) return false;  // one flush at a time per connection
    if (!c->flushMr) openFlush(c);
    ibv_sge sge{reinterpret_cast<uint64_t>(&c->local->flushWord), 1, c->flushMr->lkey};  // one byte: any receive has it
    ibv_send_wr wr{};
    wr.wr_id = kFlushTag;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(data);
    wr.wr.rdma.rkey = static_cast<ibv_mr*>(mhandle)->rkey;
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(c->flushQp.qps[0], &wr, &bad);
    if (rc) fail(ncclSystemError, "IB: posting a GPUDirect flush on %s failed: %s", c->flushQp.where(0).c_str(),
                 strerror(rc));
    c->flushReq.kind = 3;
    c->flushReq.pending = 1;
    c->flushReq.bytes = 0;
    gTotals.flushes.fetch_add(1, std::memory_order_relaxed);
    *request = &c->flushReq;
    return true;
  }
  bool sendSeesReceive() const override { return true; }  // the FIFO entry carries the receive's size
  bool wireCounters(net::WireCounters* out) override {
    Counters n = counters();
    *out = {n.dataWrites, n.fifoWrites, n.registrations, n.registrationHits, n.dmabufRegistrations, n.flushes};
    return true;
  }
  // On every device's cache: whichever port a connection uses finds it registered.
  void* pinMemory(void* data, size_t bytes) override {
    auto pin = std::make_unique<std::vector<std::pair<MrCache*, void*>>>();
    try {
      for (const Port& p : ports()) {
        bool seen = false;
        for (auto& e : *pin) seen |= e.first == p.mrs.get();
        if (!seen) pin->emplace_back(p.mrs.get(), p.mrs->acquire(data, bytes));
      }
    } catch (...) {
      unpinMemory(pin.release());
      throw;
    }
    return pin.release();
  }
  bool registered(void* comm, const void* data, size_t bytes) override {
    return static_cast<Comm*>(comm)->q.port->mrs->covers(data, bytes);
  }
  void unpinMemory(void* pin) override {
    auto* list = static_cast<std::vector<std::pair<MrCache*, void*>>*>(pin);
    for (auto& e : *list) e.first->release(e.second);
    delete list;
  }

  // Into the receive of the FIFO's current slot that carries `tag` (the first not
  // sent to yet): the slot's receives are answered in any order, and the last one
  // answered completes the receiver's request (see writePart, writeSizes).
  void* isend(void* sendComm, void* data, size_t bytes, int tag, void* mhandle) override {
    auto* c = static_cast<SendComm*>(sendComm);
    STRATA_REQUIRE(bytes <= UINT32_MAX, ncclInvalidUsage, "IB: a message of %zu bytes (at most 4 GiB - 1 a message)",
                   bytes);
    c->poll();
    c->throwIfFailed();
    int slot = static_cast<int>(c->sent % kDepth);
    int n = postedGroup(c, slot);
    if (n == 0) {
      if (c->peerGone()) c->failGone();  // it never will
      c->throwIfFailed();
      return nullptr;  // the receiver has not posted this receive yet
    }
    const FifoEntry* e = c->fifo->entries[slot];
    int i = 0;
    while (i < n && ((c->matched >> i & 1) || static_cast<int>(e[i].tag) != tag)) ++i;
    STRATA_REQUIRE(i < n, ncclInternalError, "IB: a send with tag %d matches none of the %d receives %s posted%s", tag,
                   n, c->q.where(0).c_str(), n > 1 ? " together that are still open" : "");
    FifoEntry want = e[i];
    STRATA_REQUIRE(bytes <= want.size, ncclInvalidUsage, "IB: a message of %zu bytes to a receive of %u bytes (%s)",
                   bytes, want.size, c->q.where(0).c_str());
    Request& r = c->reqs[requestIndex(slot, i)];
    bool last = (c->matched | 1u << i) == (1u << n) - 1;
    auto* mr = static_cast<ibv_mr*>(mhandle);
    int parts = c->split ? c->q.nqps : 1;
    size_t chunk = ((bytes + parts - 1) / parts + 127) & ~size_t(127);
    bool apart = c->ar && bytes > config().ibArThreshold;
    if (!sendQueuesHaveRoom(c, bytes, chunk, n == 1, apart, n > 1 && last)) return nullptr;  // not yet: retried
    int writes = 0, completions = 0;
    for (int p = 0; p < parts; ++p) {
      size_t off = std::min(bytes, p * chunk), len = std::min(chunk, bytes - off);
      int w = writePart(c, qpFor(c, p), requestIndex(slot, i), reinterpret_cast<char*>(data) + off, len, mr->lkey,
                        want.addr + off, want.rkey, n == 1, apart);
      writes += w;
      completions += w ? 1 : 0;
    }
    c->fifo->sizes[slot][i] = static_cast<uint32_t>(bytes);
    if (n > 1 && last) {
      int w = writeSizes(c, slot, n, requestIndex(slot, i));
      writes += w;
      completions += w;  // each signalled
    }
    r.kind = 1;
    r.pending = completions;
    r.bytes = bytes;
    c->matched |= 1u << i;
    if (last) {
      c->matched = 0;
      ++c->sent;
    }
    gTotals.messagesSent.fetch_add(1, std::memory_order_relaxed);
    gTotals.bytesSent.fetch_add(bytes, std::memory_order_relaxed);
    gTotals.dataWrites.fetch_add(writes, std::memory_order_relaxed);
    return &r;
  }

  // One FIFO write carries every receive of the group (inline when it is one).
  void* irecv(void* recvComm, int n, const net::RecvBuffer* b) override {
    auto* c = static_cast<RecvComm*>(recvComm);
    STRATA_REQUIRE(n >= 1 && n <= kMaxRecvs, ncclInternalError, "IB: a grouped receive of %d (at most %d)", n,
                   kMaxRecvs);
    for (int i = 0; i < n; ++i)
      STRATA_REQUIRE(b[i].bytes <= UINT32_MAX, ncclInvalidUsage, "IB: a receive of %zu bytes (at most 4 GiB - 1)",
                     b[i].bytes);
    c->poll();
    c->throwIfFailed();
    int slot = static_cast<int>(c->posted % kDepth);
    Request& r = c->reqs[requestIndex(slot, 0)];
    if (r.kind) return nullptr;  // kDepth receives outstanding
    int parts = c->split ? c->q.nqps : 1;
    int qp = static_cast<int>(c->posted % c->q.nqps);
    for (int p = 0; p < parts; ++p) {
      ibv_recv_wr wr{};
      wr.wr_id = kRecvTag | static_cast<uint64_t>(requestIndex(slot, 0));
      ibv_recv_wr* bad = nullptr;
      int target = c->split ? p : qp;
      int rc = ibv_post_recv(c->q.qps[target], &wr, &bad);
      if (rc) fail(ncclSystemError, "IB: ibv_post_recv on %s failed: %s", c->q.where(target).c_str(), strerror(rc));
    }
    FifoEntry* e = c->local->entries[slot];
    for (int i = 0; i < n; ++i)
      e[i] = FifoEntry{reinterpret_cast<uint64_t>(b[i].data), static_cast<ibv_mr*>(b[i].mhandle)->rkey,
                       static_cast<uint32_t>(b[i].bytes), static_cast<uint32_t>(b[i].tag), static_cast<uint32_t>(n),
                       c->posted + 1};
    ibv_sge sge{reinterpret_cast<uint64_t>(e), static_cast<uint32_t>(n * sizeof(FifoEntry)), c->localMr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = kFifoTag | static_cast<uint64_t>(requestIndex(slot, 0));
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED | (n == 1 ? IBV_SEND_INLINE : 0);
    wr.wr.rdma.remote_addr = c->fifoAddr + static_cast<uint64_t>(slot) * kMaxRecvs * sizeof(FifoEntry);
    wr.wr.rdma.rkey = c->fifoRkey;
    c->post(qp, &wr);
    r.kind = 2;
    r.pending = parts;
    r.bytes = 0;
    r.n = n;
    r.slot = slot;
    ++c->posted;
    gTotals.fifoWrites.fetch_add(1, std::memory_order_relaxed);
    return &r;
  }

  bool test(void* request, size_t* bytes) override {
    auto* r = static_cast<Request*>(request);
    Comm* c = r->comm;
    if (r->kind == 3) {  // a flush (RecvComm::flushReq)
      auto* rc = static_cast<RecvComm*>(c);
      if (r->pending) rc->pollFlush();
      if (r->pending) return false;
      r->kind = 0;
      if (bytes) *bytes = 0;
      STRATA_REQUIRE(rc->flushError.empty(), ncclSystemError, "%s", rc->flushError.c_str());
      return true;
    }
    if (r->pending > 0) c->poll();
    if (r->pending > 0 && c->peerGone()) {
      c->poll();
      if (r->pending > 0 && c->goneForGood()) c->failGone();
    }
    // A request whose completions all came is done, even if the connection failed
    // after them (a FIFO write to a peer that finished and left): its data is here.
    if (r->pending > 0) {
      c->throwIfFailed();
      return false;
    }
    if (bytes && r->kind == 2 && r->n > 1) {
      const uint32_t* sizes = static_cast<RecvComm*>(c)->local->sizes[r->slot];
      for (int i = 0; i < r->n; ++i) bytes[i] = __atomic_load_n(&sizes[i], __ATOMIC_ACQUIRE);
    } else if (bytes) {
      *bytes = r->bytes;
    }
    r->kind = 0;
    return true;
  }

  void closeSend(void* comm) override { closeComm(static_cast<Comm*>(comm)); }
  void closeRecv(void* comm) override { closeComm(static_cast<Comm*>(comm)); }
  void closeListen(void* comm) override { delete static_cast<ListenComm*>(comm); }
  // A half-set-up connection: closing its stream ends the receiver's accept.
  void cancelConnect(void* handle) override {
    Handle* h = static_cast<Handle*>(handle);
    if (h->magic != kMagic || !h->pending) return;
    delete reinterpret_cast<SendComm*>(h->pending);
    h->pending = 0;
  }

 private:
  // The loopback queue pair and the word its flush reads land in.
  static void openFlush(RecvComm* c) {
    c->flushReq.comm = c;
    c->flushQp.create(*c->q.port, 1);
    WireInfo self{};
    c->flushQp.describe(&self);
    fillIdentity(&self);
    c->flushQp.connectTo(self);
    c->flushMr = verbs()->regMr(c->q.port->pd, &c->local->flushWord, sizeof(uint32_t), IBV_ACCESS_LOCAL_WRITE);
    if (!c->flushMr) fail(ncclSystemError, "IB: registering the flush word failed: %s", strerror(errno));
  }
  // Once the TCP connect is up: the queue pairs, the FIFO and this end's info; false while connecting.
  bool sendInfo(SendComm* c, int dev, const Handle* h) {
    if (!connectFinished(c->fd, h->addr)) {  // throws "connect to ADDR failed: ..." (refused: its process is gone)
      STRATA_REQUIRE(nowSec() < c->setupUntil, ncclSystemError, "IB: connecting to %s timed out after %.0f s",
                     h->addr.str().c_str(), kSetupSec);
      return false;
    }
    c->split = config().ibSplitDataOnQps;
    c->ar = adaptiveRouting(port(dev));
    c->q.create(port(dev), config().ibQpsPerConnection);
    c->fifo = newFifo(port(dev).pd, &c->fifoMr);
    WireInfo w{};
    c->q.describe(&w);
    fillIdentity(&w);
    w.split = c->split;
    w.fifoAddr = reinterpret_cast<uint64_t>(c->fifo);
    w.fifoRkey = c->fifoMr->rkey;
    sendAll(c->fd, &w, sizeof(w), Deadline(kSetupSec));
    c->infoSent = true;
    return true;
  }
  // The received slot's group size once all its entries have landed (each carries
  // its seq), else 0; 0 too while the slot's previous sends are in flight (their
  // requests, and the sizes a grouped receive is answered from, are still in use).
  static int postedGroup(SendComm* c, int slot) {
    const FifoEntry* e = c->fifo->entries[slot];
    uint64_t seq = c->sent + 1;
    if (__atomic_load_n(&e[0].seq, __ATOMIC_ACQUIRE) != seq) return 0;
    int n = static_cast<int>(e[0].nreqs);
    STRATA_REQUIRE(n >= 1 && n <= kMaxRecvs, ncclInternalError, "IB: a FIFO entry from %s groups %d receives",
                   c->q.where(0).c_str(), n);
    for (int i = 1; i < n; ++i)
      if (__atomic_load_n(&e[i].seq, __ATOMIC_ACQUIRE) != seq) return 0;
    if (c->matched == 0)
      for (int i = 0; i < kMaxRecvs; ++i)
        if (c->reqs[requestIndex(slot, i)].kind) return 0;
    return n;
  }
  // Part `p` of a message goes on every queue pair when split, else all of the
  // slot's on one (so that a group's last write follows its others).
  static int qpFor(const SendComm* c, int p) { return c->split ? p : static_cast<int>(c->sent % c->q.nqps); }
  // A grouped receive's completion: on each queue pair the group used, a write with
  // immediate after its data; the first carries every receive's size.
  static int writeSizes(SendComm* c, int slot, int n, int req) {
    int parts = c->split ? c->q.nqps : 1;
    for (int p = 0; p < parts; ++p) {
      ibv_sge sge{reinterpret_cast<uint64_t>(c->fifo->sizes[slot]), static_cast<uint32_t>(n * sizeof(uint32_t)),
                  c->fifoMr->lkey};
      ibv_send_wr wr{};
      wr.wr_id = kSendTag | static_cast<uint64_t>(req);
      wr.sg_list = &sge;
      wr.num_sge = p == 0 ? 1 : 0;
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.imm_data = htonl(static_cast<uint32_t>(n));
      wr.wr.rdma.remote_addr = c->sizesAddr + static_cast<uint64_t>(slot) * kMaxRecvs * sizeof(uint32_t);
      wr.wr.rdma.rkey = c->sizesRkey;
      c->post(qpFor(c, p), &wr);
    }
    return parts;
  }
  static size_t maxWrite(const Comm* c) {
    return c->q.port->attr.max_msg_sz ? c->q.port->attr.max_msg_sz : (size_t(1) << 30);
  }
  // The writes writePart posts for a part of `len` bytes.
  static int partWrites(const Comm* c, size_t len, bool imm, bool apart) {
    if (len == 0 && !imm) return 0;
    size_t most = maxWrite(c);
    return static_cast<int>(len == 0 ? 1 : (len + most - 1) / most) + (imm && apart && len > 0 ? 1 : 0);
  }
  // Whether every queue pair a message of `bytes` (parts of `chunk`) uses has room
  // for its writes (and the group's sizes, `sizes`) now: a message is posted whole or
  // not at all, and waits while earlier writes hold the slots (a port whose
  // max_msg_sz splits messages into many writes). One that could never fit is an error.
  static bool sendQueuesHaveRoom(SendComm* c, size_t bytes, size_t chunk, bool imm, bool apart, bool sizes) {
    int need[kMaxQps] = {};
    int parts = c->split ? c->q.nqps : 1;
    for (int p = 0; p < parts; ++p) {
      size_t off = std::min(bytes, p * chunk);
      need[qpFor(c, p)] += partWrites(c, std::min(chunk, bytes - off), imm, apart) + (sizes ? 1 : 0);
    }
    for (int qp = 0; qp < c->q.nqps; ++qp) {
      STRATA_REQUIRE(need[qp] <= c->q.sendWrs, ncclInvalidUsage,
                     "IB: a message of %zu bytes takes %d writes on %s (the port's max_msg_sz is %zu bytes), more "
                     "than its send queue of %d holds",
                     bytes, need[qp], c->q.where(qp).c_str(), maxWrite(c), c->q.sendWrs);
      if (!c->room(qp, need[qp])) return false;
    }
    return true;
  }
  // One part of a message on queue pair `qp`: RDMA writes of at most the port's
  // max_msg_sz. With `imm` (a receive of its own) the last carries the part's size
  // as its immediate: the receiver's one receive completes on it, in-order delivery
  // puts the others before it; an empty part is that one write. Without (one
  // receive of a group), an empty part writes nothing. `apart` (adaptive routing,
  // as NCCL does above NCCL_IB_AR_THRESHOLD): the data as plain writes the fabric
  // may spray over its paths, then the immediate as a write of no bytes, which RC
  // completes only after them. Posted as one chain with only its last write
  // signalled, as NCCL does: one completion a part (an error still completes the
  // write that failed), and the others' send-queue slots free when it is polled.
  // Returns the writes posted (0: none, and no completion to wait for).
  static int writePart(Comm* c, int qp, int req, char* src, size_t len, uint32_t lkey, uint64_t dst, uint32_t rkey,
                       bool imm, bool apart) {
    const int writes = partWrites(c, len, imm, apart);
    if (writes == 0) return 0;
    const size_t most = maxWrite(c);
    const bool split = imm && apart && len > 0;
    const size_t pieces = static_cast<size_t>(writes) - (split ? 1 : 0);
    std::vector<ibv_sge>& sges = c->chainSges;  // the comm's: no allocation per send once grown
    std::vector<ibv_send_wr>& wrs = c->chain;
    sges.assign(pieces, ibv_sge{});
    wrs.assign(static_cast<size_t>(writes), ibv_send_wr{});
    for (size_t k = 0; k < wrs.size(); ++k) {
      size_t off = std::min(len, k * most), piece = k < pieces ? std::min(most, len - off) : 0;
      bool carriesImm = imm && (split ? k == pieces : k + 1 == pieces);
      ibv_send_wr& wr = wrs[k];
      wr.wr_id = kSendTag | static_cast<uint64_t>(req);
      if (piece) sges[k] = ibv_sge{reinterpret_cast<uint64_t>(src + off), static_cast<uint32_t>(piece), lkey};
      wr.sg_list = piece ? &sges[k] : nullptr;
      wr.num_sge = piece ? 1 : 0;
      wr.opcode = carriesImm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
      wr.imm_data = htonl(static_cast<uint32_t>(len));
      wr.wr.rdma.remote_addr = k < pieces ? dst + off : dst;  // the immediate alone: inside the receive
      wr.wr.rdma.rkey = rkey;
      wr.next = k + 1 < wrs.size() ? &wrs[k + 1] : nullptr;
    }
    wrs.back().send_flags = IBV_SEND_SIGNALED;
    c->post(qp, wrs.data());
    return static_cast<int>(wrs.size());
  }
  const Port& port(int dev) {
    STRATA_REQUIRE(dev >= 0 && dev < devices(), ncclInternalError, "IB: no device %d (%d devices)", dev, devices());
    return ports()[static_cast<size_t>(dev)];
  }
  void closeComm(Comm* c) {
    Counters n = counters();
    STRATA_INFO(kSubsysNet, -1,
                "IB: closing the connection with %s; this process so far: %llu messages sent (%llu bytes, %llu data "
                "writes), %llu received, %llu FIFO writes, %llu registrations, %llu served from the cache",
                c->q.where(0).c_str(), (unsigned long long)n.messagesSent, (unsigned long long)n.bytesSent,
                (unsigned long long)n.dataWrites, (unsigned long long)n.messagesReceived,
                (unsigned long long)n.fifoWrites, (unsigned long long)n.registrations,
                (unsigned long long)n.registrationHits);
    delete c;
  }

  std::string name_ = "IB";
  std::mutex dmabufMu_;
  std::set<ibv_mr*> dmabufMrs_;  // registrations of dma-bufs (device memory), outside the cache
};

}  // namespace

net::Network* ibNetwork() {
  static IbNetwork* net = [] {
    const std::string& want = config().netName;
    if (!want.empty() && strcasecmp(want.c_str(), "IB") != 0) return static_cast<IbNetwork*>(nullptr);
    return ports().empty() ? nullptr : new IbNetwork;  // never destroyed: connections may close at exit
  }();
  return net;
}

Counters counters() {
  Counters c;
  c.messagesSent = gTotals.messagesSent.load();
  c.bytesSent = gTotals.bytesSent.load();
  c.dataWrites = gTotals.dataWrites.load();
  c.fifoWrites = gTotals.fifoWrites.load();
  c.messagesReceived = gTotals.messagesReceived.load();
  c.dmabufRegistrations = gTotals.dmabufRegistrations.load();
  c.flushes = gTotals.flushes.load();
  std::set<MrCache*> seen;  // one cache per device, shared by its ports
  for (const Port& p : ports()) {
    if (!seen.insert(p.mrs.get()).second) continue;
    MrCache::Counters m = p.mrs->counters();
    c.registrations += m.registrations;
    c.registrationHits += m.hits;
  }
  return c;
}

}  // namespace strata::transport::ib
