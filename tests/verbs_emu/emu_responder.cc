// The emulated NIC's responder: applies the requests peers send to this process's
// memory (keys, ranges and access checked as hardware does) and answers each.
#include <stdio.h>
#include <string.h>

#include <algorithm>

#include "emu.h"
#include "emu_wire.h"

namespace verbs_emu {
namespace {

void respond(Responder& r, uint32_t status, const char* data = nullptr, uint32_t len = 0) {
  append(&r.out, Response{status, data ? len : 0});
  if (data) r.out.append(data, len);
}

void pushRecvWc(Qp* q, const RecvWr& rw, ibv_wc_status st, ibv_wc_opcode op, uint32_t len, const Request& req,
                bool imm) {
  ibv_wc wc{};
  wc.wr_id = rw.wrId;
  wc.status = st;
  wc.opcode = op;
  wc.byte_len = len;
  wc.qp_num = q->qp.qp_num;
  wc.src_qp = q->destQpn;
  if (imm) {
    wc.imm_data = req.imm;
    wc.wc_flags = IBV_WC_WITH_IMM;
  }
  pushWc(reinterpret_cast<Cq*>(q->qp.recv_cq), wc);
}

// A send's bytes into the receive's buffers; false (and the responder's error) when they do not fit.
ibv_wc_status scatter(Qp* q, const RecvWr& rw, const char* data, uint32_t len) {
  uint64_t room = 0;
  for (const ibv_sge& g : rw.sges) room += g.length;
  if (room < len) return IBV_WC_LOC_LEN_ERR;
  for (const ibv_sge& g : rw.sges) {
    if (!len) break;
    Mr* m = findLocal(q->qp.pd, g.lkey, g.addr, g.length);
    if (!m || !(m->access & IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_LOC_PROT_ERR;
    uint32_t n = std::min(len, g.length);
    landInto(m, g.addr, data, n);
    data += n;
    len -= n;
  }
  return IBV_WC_SUCCESS;
}

// Applies the request at the head of r.in; false while it must wait (no receive posted).
bool applyOne(Responder& r, Qp* q, const Request& req, const char* payload) {
  auto op = static_cast<ibv_wr_opcode>(req.op);
  bool write = op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
  bool needsRecv = op != IBV_WR_RDMA_WRITE && op != IBV_WR_RDMA_READ;
  Mr* target = nullptr;
  if (write && !((q->access & IBV_ACCESS_REMOTE_WRITE) &&
                 (target = findRemote(q->qp.pd, req.rkey, req.addr, req.len, IBV_ACCESS_REMOTE_WRITE)))) {
    respond(r, IBV_WC_REM_ACCESS_ERR);
    return true;
  }
  if (op == IBV_WR_RDMA_READ) {
    Mr* m = (q->access & IBV_ACCESS_REMOTE_READ)
                ? findRemote(q->qp.pd, req.rkey, req.addr, req.len, IBV_ACCESS_REMOTE_READ)
                : nullptr;
    if (m) settle(m);  // a read through the NIC sees every write before it (GPUDirect's flush)
    if (m)
      respond(r, IBV_WC_SUCCESS, m->at(req.addr), req.len);
    else
      respond(r, IBV_WC_REM_ACCESS_ERR);
    return true;
  }
  if (needsRecv && q->recvs.empty()) {  // receiver not ready: the requester retries
    double now = nowSec();
    if (r.rnrSince == 0) r.rnrSince = now;
    double limit = (req.rnrRetry + 1) * kRnrMs[q->minRnrTimer & 31] / 1000;
    if (req.rnrRetry == 7 || now - r.rnrSince < limit) return false;
    respond(r, IBV_WC_RNR_RETRY_EXC_ERR);
    r.rnrSince = 0;
    return true;
  }
  r.rnrSince = 0;
  if (write) landInto(target, req.addr, payload, req.len);
  if (!needsRecv) {
    respond(r, IBV_WC_SUCCESS);
    return true;
  }
  RecvWr rw = q->recvs.front();
  q->recvs.pop_front();
  // The acknowledgement leaves before the receiver's completion shows, as a NIC's ACK
  // is on the wire by the time software polls: a receiver that exits as soon as its
  // completion arrives has answered the write (the requester completes it).
  ibv_wc_status st = write ? IBV_WC_SUCCESS : scatter(q, rw, payload, req.len);
  respond(r, st == IBV_WC_SUCCESS ? IBV_WC_SUCCESS : IBV_WC_REM_INV_REQ_ERR);
  flushOut(r.fd, &r.out);  // a failure shows at the flush after the loop
  pushRecvWc(q, rw, st, write ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV, req.len, req,
             write || op == IBV_WR_SEND_WITH_IMM);
  if (st != IBV_WC_SUCCESS) setQpError(q);
  return true;
}

// The bytes of a request on the wire: its header, and the payload a write or send carries.
size_t wireBytes(const Request& req) { return sizeof(req) + (req.op != IBV_WR_RDMA_READ ? req.len : 0); }

// Why a fabric would not deliver what the requester of `h` sends to the responder
// queue pair `q` (null: it would). Each end's path is its own at RTR; they must
// describe one another, with the same kind of header and GID, and no packet
// larger than either path or port allows.
const char* pathMismatch(const Hello& h, const Qp& q) {
  if (h.global != q.global) return "one end sends a GRH (routes by GID), the other routes by LID";
  if (h.pathMtu > q.pathMtu || h.pathMtu > activeMtu()) return "the requester's path MTU is larger than this end's";
  if (h.global) {
    if (memcmp(h.dgid, q.sgid.raw, 16) != 0) return "the destination GID is not this queue pair's source GID";
    if (memcmp(h.sgid, q.destGid.raw, 16) != 0) return "the source GID is not this queue pair's destination GID";
    if (h.gidType != q.sgidType) return "the two ends use GIDs of different types (RoCE v1 and v2)";
    ibv_gid s, d;
    memcpy(s.raw, h.sgid, 16);
    memcpy(d.raw, h.dgid, 16);
    if (h.gidType == IBV_GID_TYPE_ROCE_V2 && ipv4Mapped(s) != ipv4Mapped(d))
      return "RoCE v2 from an IPv4 GID to an IPv6 one (or back): no packet can be both";
  }
  if (infiniband()) {
    // Inside a subnet (the local subnet prefix, GID bytes 6-7, alike) the port's LID;
    // from another subnet its FLID, which the GID carries in bytes 4-5.
    bool across = h.global && memcmp(h.sgid + 6, q.sgid.raw + 6, 2) != 0;
    uint16_t want = across ? static_cast<uint16_t>(q.sgid.raw[4] << 8 | q.sgid.raw[5]) : q.slid;
    if (h.dlid != want)
      return across ? "from another subnet the destination LID must be this port's FLID (GID bytes 4-5)"
                    : "the destination LID is not this port's";
    if (!h.global && h.slid != q.dlid) return "the source LID is not this queue pair's destination";
  }
  return nullptr;
}

}  // namespace

// False when the stream must close (hello refused, or the queue pair is gone or broken).

bool driveResponder(Responder& r) {
  // Up to 64 MiB buffered, or the whole request at the head if it is larger (a
  // write's payload): stopping short of it would stall the stream for ever.
  size_t cap = 64u << 20;
  if (r.hello && r.in.size() >= sizeof(Request)) {
    Request head;
    memcpy(&head, r.in.data(), sizeof(head));
    cap = std::max(cap, wireBytes(head));
  }
  bool open = fillIn(r.fd, &r.in, cap);
  if (!r.hello) {
    if (r.in.size() < sizeof(Hello)) return open;
    Hello h;
    memcpy(&h, r.in.data(), sizeof(h));
    r.in.erase(0, sizeof(h));
    auto it = state().qps.find(h.dstQpn);
    bool ready = h.magic == kMagic && it != state().qps.end() && it->second->destQpn == h.srcQpn &&
                 (it->second->qp.state == IBV_QPS_RTR || it->second->qp.state == IBV_QPS_RTS);
    if (ready) {
      if (const char* why = pathMismatch(h, *it->second)) {
        // Hardware drops such packets silently; the emulator says why, once per queue pair.
        if (state().refused.insert(h.dstQpn).second)
          fprintf(stderr, "verbs_emu: QP 0x%x drops what QP 0x%x sends: %s\n", h.dstQpn, h.srcQpn, why);
        ready = false;
      }
    }
    append(&r.out, HelloAck{kMagic, ready ? 0u : 1u});
    flushOut(r.fd, &r.out);
    if (!ready) return false;
    r.hello = true;
    r.qpn = h.dstQpn;
  }
  while (r.in.size() >= sizeof(Request)) {
    auto it = state().qps.find(r.qpn);
    if (it == state().qps.end() || it->second->qp.state == IBV_QPS_ERR || it->second->qp.state == IBV_QPS_RESET)
      return false;  // no responder any more: the requester's retries run out
    Request req;
    memcpy(&req, r.in.data(), sizeof(req));
    size_t total = wireBytes(req);
    if (r.in.size() < total) break;
    if (!applyOne(r, it->second, req, r.in.data() + sizeof(req))) break;
    r.in.erase(0, total);
  }
  return flushOut(r.fd, &r.out) && open;
}

}  // namespace verbs_emu
