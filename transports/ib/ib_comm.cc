#include "transports/ib/ib_comm.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "base/mutation.h"
#include "transports/ib/gid_choice.h"

namespace strata::transport::ib {

// Per queue pair: every receive of every slot (4 writes each: a message of 4 GiB at
// mlx5's 1 GiB max_msg_sz), each group's write of the sizes, and the FIFO writes.
// Messages that take more writes (a smaller max_msg_sz) wait for room (Comm::post).
constexpr int kSendWrs = (4 * kMaxRecvs + 1) * kDepth;

void QpSet::create(const Port& p, int queuePairs) {
  const Verbs& v = *verbs();
  port = &p;
  nqps = queuePairs;
  sendWrs = kSendWrs;
  // Room for every completion in flight: per QP the send queue and the receive queue.
  cq = v.createCq(p.ctx, (kSendWrs + kDepth) * nqps + 16, nullptr, nullptr, 0);
  if (!cq) fail(ncclSystemError, "IB %s:%d: ibv_create_cq failed: %s", p.device.c_str(), p.port, strerror(errno));
  for (int i = 0; i < nqps; ++i) {
    ibv_qp_init_attr a{};
    a.send_cq = cq;
    a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = kSendWrs;
    sqFree[i] = kSendWrs;
    a.cap.max_recv_wr = kDepth;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = sizeof(FifoEntry);
    qps[i] = v.createQp(p.pd, &a);
    if (!qps[i]) fail(ncclSystemError, "IB %s:%d: ibv_create_qp failed: %s", p.device.c_str(), p.port, strerror(errno));
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.pkey_index = 0;
    m.port_num = static_cast<uint8_t>(p.port);
    m.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    int rc = v.modifyQp(qps[i], &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) fail(ncclSystemError, "IB %s:%d: QP 0x%x to INIT: %s", p.device.c_str(), p.port, qps[i]->qp_num, strerror(rc));
  }
}

void QpSet::describe(WireInfo* w) const {
  w->magic = kMagic;
  w->nqps = static_cast<uint32_t>(nqps);
  for (int i = 0; i < nqps; ++i) w->qpn[i] = qps[i]->qp_num;
  ibv_gid gid = currentGid();
  memcpy(w->gid, gid.raw, 16);
  w->lid = port->attr.lid;
  w->linkLayer = port->attr.link_layer;
  w->mtu = static_cast<uint8_t>(port->attr.active_mtu);
}

ibv_gid QpSet::currentGid() const {
  ibv_gid gid = port->gid;
  if (verbs()->queryGid(port->ctx, static_cast<uint8_t>(port->port), port->gidIndex, &gid) != 0) gid = port->gid;
  return gid;
}

void QpSet::connectTo(const WireInfo& peer, bool control) {
  const Verbs& v = *verbs();
  peerHost.assign(peer.host, strnlen(peer.host, sizeof(peer.host)));
  peerPid = peer.pid;
  STRATA_REQUIRE(peer.magic == kMagic, ncclInvalidUsage,
                 "IB: %s (pid %u) speaks another version of Strata's IB protocol (0x%08x, this process 0x%08x): run "
                 "one Strata build on every rank", peerHost.c_str(), peerPid, peer.magic, kMagic);
  STRATA_REQUIRE(static_cast<int>(peer.nqps) == nqps, ncclInvalidUsage,
                 "IB: %s (pid %u) uses %u queue pairs per connection, this process %d: set NCCL_IB_QPS_PER_CONNECTION "
                 "alike on every rank", peerHost.c_str(), peerPid, peer.nqps, nqps);
  STRATA_REQUIRE(peer.linkLayer == port->attr.link_layer, ncclInvalidUsage,
                 "IB: %s:%d is %s but %s (pid %u) uses %s: the two cannot talk", port->device.c_str(), port->port,
                 port->roce ? "RoCE" : "InfiniBand", peerHost.c_str(), peerPid,
                 peer.linkLayer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand");
  ibv_mtu mtu = static_cast<ibv_mtu>(std::min<int>(peer.mtu, port->attr.active_mtu));
  if (mutated(Mutation::kIbOwnMtu)) mtu = port->attr.active_mtu;
  // InfiniBand, as NCCL: the local subnet prefix (GID bytes 6-7) alike, by LID; else
  // with a GRH, to the peer's FLID (GID bytes 4-5), the LID that routes to it from
  // other subnets. RoCE always with a GRH.
  ibv_gid own = currentGid();  // as describe() sent it
  const bool sameSubnet = memcmp(peer.gid + 6, own.raw + 6, 2) == 0;
  const bool grh = port->roce || !sameSubnet;
  uint16_t dlid = peer.lid;
  if (!port->roce && !sameSubnet) {
    dlid = static_cast<uint16_t>(peer.gid[4] << 8 | peer.gid[5]);
    if (dlid == 0) {
      STRATA_WARN(-1, "IB: %s (pid %u) is in another subnet but its GID has no FLID: routing to its LID 0x%x, "
                  "which only a flat fabric delivers", peerHost.c_str(), peerPid, peer.lid);
      dlid = peer.lid;
    }
  }
  ibv_gid dgid;
  memcpy(dgid.raw, peer.gid, 16);
  const int tc = control && port->roce && config().ibFifoTc >= 0 ? config().ibFifoTc : config().ibTc;
  route = format("path MTU %d, %s", 128 << mtu,
                 grh ? format("GRH to %s%s, traffic class %d", gidText(dgid).c_str(),
                              port->roce ? "" : format(", FLID 0x%x", dlid).c_str(), tc).c_str()
                     : format("LID 0x%x", dlid).c_str());
  for (int i = 0; i < nqps; ++i) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = peer.qpn[i];
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;  // 0.64 ms between receiver-not-ready retries
    a.ah_attr.port_num = static_cast<uint8_t>(port->port);
    a.ah_attr.sl = static_cast<uint8_t>(config().ibSl);
    if (grh) {
      a.ah_attr.is_global = 1;
      a.ah_attr.grh.dgid = dgid;
      a.ah_attr.grh.sgid_index = static_cast<uint8_t>(port->gidIndex);
      a.ah_attr.grh.hop_limit = 255;
      a.ah_attr.grh.traffic_class = static_cast<uint8_t>(tc);
    }
    if (!port->roce) a.ah_attr.dlid = dlid;
    int rc = v.modifyQp(qps[i], &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) fail(ncclSystemError, "IB: %s to RTR: %s", where(i).c_str(), strerror(rc));
    ibv_qp_attr s{};
    s.qp_state = IBV_QPS_RTS;
    s.timeout = static_cast<uint8_t>(config().ibTimeout);
    s.retry_cnt = static_cast<uint8_t>(config().ibRetryCnt);
    s.rnr_retry = 7;  // receives are always posted before the FIFO says so: RNR only while a slot is reposted
    s.sq_psn = 0;
    s.max_rd_atomic = 1;
    rc = v.modifyQp(qps[i], &s, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                                    IBV_QP_MAX_QP_RD_ATOMIC);
    if (rc) fail(ncclSystemError, "IB: %s to RTS: %s", where(i).c_str(), strerror(rc));
  }
}

void QpSet::destroy() {
  const Verbs* v = verbs();
  if (!v) return;
  for (int i = 0; i < nqps; ++i)
    if (qps[i]) v->destroyQp(qps[i]), qps[i] = nullptr;
  if (cq) v->destroyCq(cq), cq = nullptr;
}

int QpSet::indexOf(uint32_t qpNum) const {
  for (int i = 0; i < nqps; ++i)
    if (qps[i] && qps[i]->qp_num == qpNum) return i;
  return 0;
}

std::string QpSet::where(int qp) const {
  return format("%s (pid %u), QP 0x%x on %s:%d", peerHost.empty() ? "the peer" : peerHost.c_str(), peerPid,
                qps[qp] ? qps[qp]->qp_num : 0, port->device.c_str(), port->port);
}

}  // namespace strata::transport::ib
