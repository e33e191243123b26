// The IB network's connection ends (ib_network.cc): a request slot per
// outstanding operation, the comm both ends share (queue pairs, the setup stream
// that tells when the peer is gone, completion handling and failures), the
// sender's FIFO, the receiver's GPUDirect flush queue pair, and the listener.
#pragma once

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/error.h"
#include "base/page_buffer.h"
#include "transports/ib/ib_comm.h"
#include "transports/net/network.h"

namespace strata::transport::ib::conn {

// What a work request is, in the top byte of its wr_id (the low 16 bits: its request
// slot; bits 16-47 of a signalled send: the send-queue slots its completion frees).
constexpr uint64_t kSendTag = 1ull << 56, kRecvTag = 2ull << 56, kFifoTag = 3ull << 56, kFlushTag = 4ull << 56;

// What this process's IB connections did (ib_network.h counters()).
struct Totals {
  std::atomic<uint64_t> messagesSent{0}, bytesSent{0}, dataWrites{0}, fifoWrites{0}, messagesReceived{0};
  std::atomic<uint64_t> dmabufRegistrations{0}, flushes{0};
};
inline Totals gTotals;

inline bool readable(int fd) {
  pollfd p{fd, POLLIN, 0};
  return poll(&p, 1, 0) > 0;
}

struct Comm;

struct Request {
  Comm* comm = nullptr;
  int kind = 0;  // 0 free, 1 send, 2 receive, 3 a GPUDirect flush (RecvComm::flushReq)
  int pending = 0;  // completions still expected
  size_t bytes = 0;
  int n = 1, slot = 0;  // a receive: how many it groups, and its FIFO slot
};

// A request's index (in a work request's wr_id): kMaxRecvs per FIFO slot, one for
// each send into the slot's receives; a receive uses the slot's first.
inline int requestIndex(int slot, int entry) { return slot * kMaxRecvs + entry; }

// FIFO memory for one end, registered on `pd` (the receiver's for remote writes too).
// Pages of its own (base/page_buffer.h), zeroed; freed with freeFifo.
inline FifoBlock* newFifo(ibv_pd* pd, ibv_mr** mr) {
  auto* f = static_cast<FifoBlock*>(allocPages(sizeof(FifoBlock)));
  *mr = verbs()->regMr(pd, f, sizeof(FifoBlock), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!*mr) {
    freePages(f, sizeof(FifoBlock));
    fail(ncclSystemError, "IB: registering a FIFO failed: %s", strerror(errno));
  }
  return f;
}
inline void freeFifo(FifoBlock* f) { freePages(f, sizeof(FifoBlock)); }

struct Comm {
  QpSet q;
  int fd = -1;  // the setup stream, kept open: its end tells that the peer is gone
  bool split = false;
  bool ar = false;  // adaptive routing: a message's data and its completion as two writes (adaptiveRouting)
  bool failed = false;
  ncclResult_t failCode = ncclSuccess;
  std::string failure;
  double nextAliveCheck = 0;
  bool gone = false;
  bool closedByPeer = false;  // the failure is the peer's close, with no operation lost
  double goneAt = 0;          // when the setup stream was seen closed
  static constexpr double kGoneGraceSec = 0.1;
  Request reqs[kDepth * kMaxRecvs];  // by requestIndex()
  std::vector<ibv_send_wr> chain;  // a message part's writes as they are posted (IbNetwork::writePart)
  std::vector<ibv_sge> chainSges;

  Comm() {
    for (Request& r : reqs) r.comm = this;
  }
  virtual ~Comm() {
    q.destroy();
    if (fd >= 0) close(fd);
  }
  void setFailed(ncclResult_t code, std::string why) {
    if (failed) return;
    failed = true;
    failCode = code;
    failure = std::move(why);
  }
  void throwIfFailed() const {
    if (failed && closedByPeer) throw net::PeerClosed(failure);
    if (failed) throw Error(failCode, failure);
  }
  // Every 50 ms while waiting: true once the peer's process has closed the setup
  // stream. The caller polls the CQ once more before calling that a failure: the
  // peer may have finished (and closed) right after its last write landed.
  bool peerGone() {
    double now = nowSec();
    if (gone || now < nextAliveCheck) return gone;
    nextAliveCheck = now + 0.05;
    if (!readable(fd)) return false;
    char b;
    ssize_t n = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    gone = n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
    if (gone) goneAt = now;
    return gone;
  }
  // A request still waiting 100 ms after the peer closed will not complete: a peer
  // that finished acknowledged its last writes before it closed, but the
  // acknowledgement and the close travel apart and may arrive in either order.
  bool goneForGood() const { return gone && nowSec() - goneAt >= kGoneGraceSec; }
  void failGone() {
    closedByPeer = !failed;
    setFailed(ncclRemoteError,
              format("IB: %s closed the connection (its process is done, exited or aborted)", q.where(0).c_str()));
  }
  void onCompletion(const ibv_wc& wc) {
    if (wc.status != IBV_WC_SUCCESS) {
      if (wc.status == IBV_WC_WR_FLUSH_ERR && failed) return;
      int qp = 0;
      for (int i = 0; i < q.nqps; ++i)
        if (q.qps[i]->qp_num == wc.qp_num) qp = i;
      bool remote = wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_RNR_RETRY_EXC_ERR ||
                    wc.status == IBV_WC_REM_ACCESS_ERR || wc.status == IBV_WC_REM_INV_REQ_ERR ||
                    wc.status == IBV_WC_REM_OP_ERR;
      setFailed(remote ? ncclRemoteError : ncclSystemError,
                format("IB: completion error with %s: %s (status %d, vendor error 0x%x)%s", q.where(qp).c_str(),
                       verbs()->wcStatusStr(wc.status), static_cast<int>(wc.status), wc.vendor_err,
                       wc.status == IBV_WC_RETRY_EXC_ERR ? ": the peer did not answer (its process or link is gone)"
                                                         : ""));
      return;
    }
    uint64_t tag = wc.wr_id & (0xffull << 56);
    Request& r = reqs[wc.wr_id & 0xffff];
    if (tag == kSendTag || tag == kFifoTag) q.sqFree[q.indexOf(wc.qp_num)] += static_cast<int>(wc.wr_id >> 16 & 0xffffffff);
    if (tag == kSendTag) {
      --r.pending;
    } else if (tag == kRecvTag) {
      r.bytes += ntohl(wc.imm_data);  // one receive: its size (a group's come in FifoBlock::sizes)
      if (--r.pending == 0) gTotals.messagesReceived.fetch_add(r.n, std::memory_order_relaxed);
    }
  }
  void poll() {
    ibv_wc wc[16];
    for (;;) {
      int n = ibv_poll_cq(q.cq, 16, wc);
      if (n < 0) {
        setFailed(ncclSystemError, format("IB: ibv_poll_cq failed (%d) on %s:%d", n, q.port->device.c_str(),
                                          q.port->port));
        return;
      }
      for (int i = 0; i < n; ++i) onCompletion(wc[i]);
      if (n < 16) return;
    }
  }
  // True when queue pair `qp`'s send queue has room for `wrs` more work requests.
  bool room(int qp, int wrs) const { return q.sqFree[qp] >= wrs; }
  // Posts a chain whose last work request is signalled (callers check room first):
  // each signalled one carries the slots its completion frees, its own and those of
  // the unsignalled ones before it (the device frees them when it is polled). A
  // failed post fails the comm too: work requests of a chain before the one refused
  // are on their way, unsignalled, and nothing would account for them.
  void post(int qp, ibv_send_wr* wr) {
    uint64_t since = 0;
    int wrs = 0;
    for (ibv_send_wr* w = wr; w; w = w->next) {
      ++since, ++wrs;
      if (!(w->send_flags & IBV_SEND_SIGNALED)) continue;
      w->wr_id = (w->wr_id & ~(0xffffffffull << 16)) | since << 16;
      since = 0;
    }
    STRATA_REQUIRE(since == 0 && wrs <= q.sqFree[qp], ncclInternalError,
                   "IB: a chain of %d work requests for %s (%d send-queue slots free; its last must be signalled)",
                   wrs, q.where(qp).c_str(), q.sqFree[qp]);
    q.sqFree[qp] -= wrs;
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(q.qps[qp], wr, &bad);
    if (!rc) return;
    setFailed(ncclSystemError, format("IB: ibv_post_send to %s failed: %s", q.where(qp).c_str(), strerror(rc)));
    throwIfFailed();
  }
};

struct SendComm final : Comm {
  FifoBlock* fifo = nullptr;
  ibv_mr* fifoMr = nullptr;
  uint64_t sent = 0;     // receives (FIFO slots) fully answered
  uint32_t matched = 0;  // the receives of slot `sent` already sent to, a bit each
  uint64_t sizesAddr = 0;  // the receiver's FifoBlock::sizes
  uint32_t sizesRkey = 0;
  bool infoSent = false;  // setup: the TCP connect is up and this end's info went out
  double setupUntil = 0;
  ~SendComm() override {
    q.destroy();
    if (fifoMr) verbs()->deregMr(fifoMr);
    freeFifo(fifo);
  }
};

struct RecvComm final : Comm {
  uint64_t posted = 0;
  uint64_t fifoAddr = 0;  // the sender's FIFO
  uint32_t fifoRkey = 0;
  FifoBlock* local = nullptr;  // what this end posts, and the sizes a grouped receive gets
  ibv_mr* localMr = nullptr;
  // GPUDirect flushes: a queue pair connected to itself reads from each device
  // buffer that received data, so that the NIC's earlier writes to it are done (as
  // NCCL does); made at the first flush.
  QpSet flushQp;
  ibv_mr* flushMr = nullptr;  // FifoBlock::flushWord of `local` (pages of its own, not this object's heap page)
  Request flushReq;
  std::string flushError;  // a flush's own failure (the data it follows has arrived whatever else failed)
  ~RecvComm() override {
    q.destroy();
    flushQp.destroy();
    if (flushMr) verbs()->deregMr(flushMr);
    if (localMr) verbs()->deregMr(localMr);
    freeFifo(local);
  }
  void pollFlush() {
    ibv_wc wc{};
    int n = ibv_poll_cq(flushQp.cq, 1, &wc);
    if (n < 0) flushError = "IB: ibv_poll_cq failed on the flush queue pair";
    if (n > 0 && wc.status != IBV_WC_SUCCESS)
      flushError = format("IB: a GPUDirect flush on %s failed: %s", flushQp.where(0).c_str(),
                          verbs()->wcStatusStr(wc.status));
    if (n != 0) flushReq.pending = 0;
  }
};

struct ListenComm {
  int fd = -1, dev = 0;
  int accepted = -1;
  std::unique_ptr<RecvComm> comm;
  ~ListenComm() {
    if (accepted >= 0) close(accepted);
    if (fd >= 0) close(fd);
  }
};

inline void fillIdentity(WireInfo* w) {
  w->pid = static_cast<uint32_t>(getpid());
  gethostname(w->host, sizeof(w->host) - 1);
}

}  // namespace strata::transport::ib::conn
