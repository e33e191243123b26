// The emulated NIC: one thread per process that carries every queue pair's
// requests over TCP and applies the requests peers send to this process's
// memory, checking keys, ranges and access as hardware does.
//
// Wire, per requester queue pair (one TCP stream to the peer's process):
//   hello {magic, src qpn, dst qpn, path}  -> {magic, 0 ready | 1 not ready or not for this QP}
//   request {op, len, addr, rkey, imm, rnr_retry} [+ len bytes for writes and sends]
//                                          -> {status, len} [+ len bytes for reads]
// Responses come back in order; the requester completes its work requests in
// the order they were posted.
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <set>
#include <cmath>
#include <thread>

#include "emu.h"
#include "emu_wire.h"

namespace verbs_emu {
namespace {


// How long a requester retries a peer that does not answer: 4.096 us x 2^timeout
// per try, retry_cnt + 1 tries (timeout 0 is "for ever": capped at a minute).
double retryWindow(const Qp* q) {
  if (q->timeout == 0) return 60;
  return std::min(60.0, 4.096e-6 * std::pow(2.0, q->timeout) * (q->retryCnt + 1));
}

void setNonBlocking(int fd) { fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }

uint32_t chooseAddress() {
  const char* want = getenv("NCCL_SOCKET_IFNAME");
  uint32_t found = htonl(INADDR_LOOPBACK);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return found;
  for (ifaddrs* i = list; i; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !(i->ifa_flags & IFF_UP)) continue;
    bool loop = i->ifa_flags & IFF_LOOPBACK;
    if (want && *want ? strncmp(i->ifa_name, want, strlen(want)) == 0 : !loop) {
      found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
      break;
    }
  }
  freeifaddrs(list);
  return found;
}


ibv_wc_opcode wcOpcode(ibv_wr_opcode op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    default:
      return IBV_WC_SEND;
  }
}

void completeSend(Qp* q, const SendWr& w, ibv_wc_status st, uint32_t len) {
  ++q->held;
  ++q->uncovered;
  if (st == IBV_WC_SUCCESS && !w.signaled) return;
  ++q->completions;
  ibv_wc wc{};
  wc.wr_id = w.wrId;
  wc.status = st;
  wc.opcode = wcOpcode(w.op);
  wc.byte_len = len;
  wc.qp_num = q->qp.qp_num;
  pushWc(reinterpret_cast<Cq*>(q->qp.send_cq), wc, q->uncovered);
  q->uncovered = 0;
}

// The front work request failed with `st`: it completes so, the rest flush.
void failFront(Qp* q, ibv_wc_status st) {
  SendWr w = !q->inflight.empty() ? q->inflight.front() : q->pending.front();
  if (!q->inflight.empty()) q->inflight.pop_front();
  else q->pending.pop_front();
  w.signaled = true;
  completeSend(q, w, st, 0);
  setQpError(q);
}

uint64_t hashBytes(const char* p, size_t n) {
  uint64_t h = 0xcbf29ce484222325ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    h = (h ^ w) * 0x100000001b3ull;
  }
  for (; i < n; ++i) h = (h ^ static_cast<uint8_t>(p[i])) * 0x100000001b3ull;
  return h;
}

// Hardware reads a send's source by DMA some time before the completion, so a
// caller that changes it before then sends garbage. The emulator copies it when it
// transmits; at the completion it checks the source still holds what was sent.
bool sourceChanged(Qp* q, const SendWr& w) {
  std::string now;
  for (const ibv_sge& g : w.sges) {
    Mr* m = findLocal(q->qp.pd, g.lkey, g.addr, g.length);
    if (!m) return true;  // deregistered in flight
    settle(m);
    now.append(m->at(g.addr), g.length);
  }
  return hashBytes(now.data(), now.size()) != w.sourceHash;
}

// ---- requester ----

bool openStream(Qp* q) {
  Stream& s = q->stream;
  double now = nowSec();
  if (now < s.nextTry) return true;
  // The window counts from the first try; tries refused by the peer (its queue pair
  // not ready, or a path it would not deliver) count as unanswered ones.
  if (s.retryUntil == 0) s.retryUntil = now + retryWindow(q);
  else if (now >= s.retryUntil) return false;
  Endpoint to;
  // Nobody owns the destination QPN, or this port cannot send the path's MTU: nothing answers.
  if (!findEndpoint(q->destQpn, &to) || q->pathMtu > activeMtu()) {
    s.nextTry = now + 0.001;
    return now < s.retryUntil;
  }
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = to.ip;
  a.sin_port = htons(to.port);
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
  timeval tv{0, 100000};  // a peer that drops packets holds the NIC for at most 100 ms a try
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    s.nextTry = now + 0.001;
    return now < s.retryUntil;
  }
  setNonBlocking(fd);
  s.fd = fd;
  s.helloDone = false;
  s.in.clear();
  s.out.clear();
  Hello h{};
  h.magic = kMagic;
  h.srcQpn = q->qp.qp_num;
  h.dstQpn = q->destQpn;
  h.global = q->global;
  h.gidType = static_cast<uint8_t>(q->sgidType);
  h.pathMtu = static_cast<uint8_t>(q->pathMtu);
  h.slid = q->slid;
  h.dlid = q->dlid;
  memcpy(h.sgid, q->sgid.raw, 16);
  memcpy(h.dgid, q->destGid.raw, 16);
  append(&s.out, h);
  return true;
}

// Puts the pending work requests on the wire (reading their local memory now).
bool transmit(Qp* q) {
  while (!q->pending.empty() && q->stream.out.size() < (4u << 20)) {
    SendWr& w = q->pending.front();
    if (w.bytes > maxMessage()) {  // longer than the port's max_msg_sz
      failFront(q, IBV_WC_LOC_LEN_ERR);
      return false;
    }
    Request r{static_cast<uint32_t>(w.op), w.bytes, w.remoteAddr, w.rkey, w.imm, static_cast<uint32_t>(q->rnrRetry), 0};
    std::string payload;
    if (w.op != IBV_WR_RDMA_READ) {
      if (w.isInline) payload = w.inlined;
      for (const ibv_sge& g : w.sges) {
        Mr* m = findLocal(q->qp.pd, g.lkey, g.addr, g.length);
        if (!m) {
          failFront(q, IBV_WC_LOC_PROT_ERR);
          return false;
        }
        settle(m);  // the NIC reads what it wrote there before
        payload.append(m->at(g.addr), g.length);
      }
    }
    if (!w.isInline) w.sourceHash = hashBytes(payload.data(), payload.size());
    append(&q->stream.out, r);
    q->stream.out += payload;
    q->inflight.push_back(std::move(w));
    q->pending.pop_front();
  }
  return true;
}

// Scatters a read's data into the work request's local buffers.
ibv_wc_status landRead(Qp* q, const SendWr& w, const char* data, uint32_t len) {
  for (const ibv_sge& g : w.sges) {
    Mr* m = findLocal(q->qp.pd, g.lkey, g.addr, g.length);
    if (!m || !(m->access & IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_LOC_PROT_ERR;
    uint32_t n = std::min(len, g.length);
    landInto(m, g.addr, data, n);
    data += n;
    len -= n;
  }
  return IBV_WC_SUCCESS;
}

void takeResponses(Qp* q) {
  Stream& s = q->stream;
  if (!s.helloDone) {
    if (s.in.size() < sizeof(HelloAck)) return;
    HelloAck ack;
    memcpy(&ack, s.in.data(), sizeof(ack));
    s.in.erase(0, sizeof(ack));
    if (ack.status != 0) {  // the peer QP is not ready yet: try again, within the retry window
      close(s.fd);
      s.fd = -1;
      s.nextTry = nowSec() + 0.001;
      return;
    }
    s.helloDone = true;
    s.retryUntil = 0;
  }
  while (s.in.size() >= sizeof(Response) && !q->inflight.empty()) {
    Response r;
    memcpy(&r, s.in.data(), sizeof(r));
    SendWr& w = q->inflight.front();
    bool read = w.op == IBV_WR_RDMA_READ;
    if (read && r.status == IBV_WC_SUCCESS && s.in.size() < sizeof(r) + r.len) return;
    ibv_wc_status st = static_cast<ibv_wc_status>(r.status);
    if (read && st == IBV_WC_SUCCESS) st = landRead(q, w, s.in.data() + sizeof(r), r.len);
    s.in.erase(0, sizeof(r) + (read && r.status == IBV_WC_SUCCESS ? r.len : 0));
    if (st != IBV_WC_SUCCESS) {
      failFront(q, st);
      return;
    }
    if (!read && !w.isInline && sourceChanged(q, w)) {  // reused before its completion: a transport bug
      fprintf(stderr, "verbs_emu: QP 0x%x: the source of work request %llu changed before it completed\n",
              q->qp.qp_num, static_cast<unsigned long long>(w.wrId));
      failFront(q, IBV_WC_GENERAL_ERR);
      return;
    }
    completeSend(q, w, st, read ? r.len : w.bytes);
    q->inflight.pop_front();
  }
}

void driveRequester(Qp* q) {
  if (q->qp.state != IBV_QPS_RTS) return;
  Stream& s = q->stream;
  if (s.fd < 0) {
    if (q->pending.empty()) return;
    if (!openStream(q)) {  // nobody answers within the retry window
      failFront(q, IBV_WC_RETRY_EXC_ERR);
      return;
    }
    if (s.fd < 0) return;
  }
  if (s.helloDone && !transmit(q)) return;
  bool sent = flushOut(s.fd, &s.out);
  // Up to 64 MiB buffered, or the whole response at the head if larger (a read's data).
  size_t cap = 64u << 20;
  if (s.helloDone && s.in.size() >= sizeof(Response)) {
    Response head;
    memcpy(&head, s.in.data(), sizeof(head));
    cap = std::max(cap, sizeof(head) + head.len);
  }
  bool open = fillIn(s.fd, &s.in, cap);
  // Acknowledgements that came before the stream closed complete their requests, as
  // a NIC takes the ACKs already on the wire from a peer that then went away.
  takeResponses(q);
  if (s.fd < 0 || (sent && open)) return;  // closed there (the peer QP was not ready), or still open
  close(s.fd);  // the peer's process is gone (or reset the stream)
  s.fd = -1;
  if (!q->inflight.empty()) failFront(q, IBV_WC_RETRY_EXC_ERR);
  else if (!s.helloDone) s.nextTry = nowSec() + 0.001;
}

void acceptAll() {
  State& s = state();
  for (;;) {
    int fd = accept(s.listenFd, nullptr, nullptr);
    if (fd < 0) return;
    setNonBlocking(fd);
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    Responder r;
    r.fd = fd;
    s.responders.push_back(std::move(r));
  }
}

void nicLoop() {
  std::unique_lock<std::mutex> lock(state().mu);
  for (;;) nicPassLocked(&lock, 100);
}

}  // namespace

void nicPassLocked(std::unique_lock<std::mutex>* lock, int timeoutMs) {
  State& s = state();
  if (!s.nicStarted) return;
  std::vector<pollfd> fds{{s.listenFd, POLLIN, 0}, {s.wakeFd[0], POLLIN, 0}};
  size_t responders = s.responders.size();
  bool waiting = false;
  for (Responder& r : s.responders) {
    fds.push_back({r.fd, static_cast<short>(POLLIN | (r.out.empty() ? 0 : POLLOUT)), 0});
    waiting |= r.rnrSince != 0;
  }
  std::vector<Qp*> qps;
  for (auto& kv : s.qps) {
    Stream& st = kv.second->stream;
    if (st.fd < 0) continue;
    fds.push_back({st.fd, static_cast<short>(POLLIN | (st.out.empty() ? 0 : POLLOUT)), 0});
    qps.push_back(kv.second);
  }
  for (auto& kv : s.qps)
    waiting |= kv.second->stream.fd < 0 && !kv.second->pending.empty() && kv.second->qp.state == IBV_QPS_RTS;
  if (timeoutMs > 0) {
    lock->unlock();
    poll(fds.data(), fds.size(), waiting ? 1 : timeoutMs);
    lock->lock();
  } else {
    poll(fds.data(), fds.size(), 0);
  }
  if (fds[1].revents) {
    char buf[64];
    while (read(s.wakeFd[0], buf, sizeof(buf)) > 0) {
    }
  }
  if (fds[0].revents) acceptAll();
  // Streams that are ready, new ones, and those waiting on something local (a receive, a retry).
  std::vector<char> drive(s.responders.size(), 1);
  for (size_t i = 0; i < responders && i < s.responders.size(); ++i) {
    const Responder& r = s.responders[i];
    drive[i] = fds[2 + i].revents || r.rnrSince != 0 || !r.out.empty() || !r.in.empty();
  }
  for (size_t i = s.responders.size(); i-- > 0;) {
    if (!drive[i]) continue;
    if (!driveResponder(s.responders[i])) {
      close(s.responders[i].fd);
      s.responders.erase(s.responders.begin() + static_cast<ptrdiff_t>(i));
    }
  }
  std::set<Qp*> ready;
  for (size_t i = 0; i < qps.size(); ++i)
    if (fds[2 + responders + i].revents) ready.insert(qps[i]);
  for (auto& kv : s.qps) {
    Qp* q = kv.second;
    if (ready.count(q) || !q->pending.empty() || !q->stream.out.empty() || (q->stream.fd >= 0 && !q->stream.helloDone))
      driveRequester(q);
  }
}

namespace {

// fork(): the child gets no NIC thread and must not share the parent's streams or
// listener, so it starts over: no queue pairs or registrations (as a forked child
// has none on hardware), a NIC of its own, a new listener (hence new GIDs). The
// contexts and protection domains it inherited stay usable.
void forkPrepare() { state().mu.lock(); }
// The parent's registered pages without fork protection are copy-on-write from now
// on: the NIC keeps the pages as they were (Mr::orphaned).
void forkParent() {
  for (auto& kv : state().mrs) {
    Mr* m = kv.second;
    if (m->dontFork || m->host || !m->orphaned.empty() || m->mr.length == 0) continue;
    const char* at = static_cast<const char*>(m->mr.addr);
    m->orphaned.assign(at, at + m->mr.length);
  }
  state().mu.unlock();
}
void forkChild() {
  State& s = state();
  bool started = s.nicStarted;
  for (Responder& r : s.responders) close(r.fd);
  s.responders.clear();
  for (auto& kv : s.qps)
    if (kv.second->stream.fd >= 0) close(kv.second->stream.fd);
  s.qps.clear();  // the objects leak: the parent owns what they stood for
  s.mrs.clear();
  s.held.clear();  // the parent's NIC's writes: its to land
  s.heldBytes = 0;
  for (int fd : {s.listenFd, s.wakeFd[0], s.wakeFd[1]})
    if (fd >= 0) close(fd);
  s.listenFd = s.wakeFd[0] = s.wakeFd[1] = -1;
  s.nicStarted = false;
  if (started) startNic();
  s.mu.unlock();
}

}  // namespace

void startNic() {
  State& s = state();
  if (s.nicStarted) return;
  static bool forkHandlers = (pthread_atfork(forkPrepare, forkParent, forkChild), true);
  (void)forkHandlers;
  s.nicStarted = true;
  s.ip = chooseAddress();
  s.listenFd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(a);
  if (bind(s.listenFd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(s.listenFd, 256) != 0 ||
      getsockname(s.listenFd, reinterpret_cast<sockaddr*>(&a), &len) != 0)
    abort();
  s.port = ntohs(a.sin_port);
  claimSlot();
  setNonBlocking(s.listenFd);
  if (pipe(s.wakeFd) != 0) abort();
  setNonBlocking(s.wakeFd[0]);
  setNonBlocking(s.wakeFd[1]);
  std::thread(nicLoop).detach();
}

void wakeNic() {
  if (state().wakeFd[1] >= 0) {
    char c = 1;
    (void)!write(state().wakeFd[1], &c, 1);
  }
}

void pushWc(Cq* cq, const ibv_wc& wc, uint32_t frees) {
  if (static_cast<int>(cq->entries.size()) >= cq->cq.cqe) cq->overrun = true;
  cq->entries.push_back(wc);
  cq->frees.push_back(frees);
}

void setQpError(Qp* q) {
  q->qp.state = IBV_QPS_ERR;
  auto flush = [q](std::deque<SendWr>* list) {
    for (SendWr& w : *list) {
      w.signaled = true;
      completeSend(q, w, IBV_WC_WR_FLUSH_ERR, 0);
    }
    list->clear();
  };
  flush(&q->inflight);
  flush(&q->pending);
  for (RecvWr& rw : q->recvs) {
    ibv_wc wc{};
    wc.wr_id = rw.wrId;
    wc.status = IBV_WC_WR_FLUSH_ERR;
    wc.opcode = IBV_WC_RECV;
    wc.qp_num = q->qp.qp_num;
    pushWc(reinterpret_cast<Cq*>(q->qp.recv_cq), wc);
  }
  q->recvs.clear();
  if (q->stream.fd >= 0) close(q->stream.fd);
  q->stream = Stream{};
}

}  // namespace verbs_emu
