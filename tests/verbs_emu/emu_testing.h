// What the verbs device's tests share: a node (device, protection domain, CQ and
// one RC queue pair), the queue pair's transitions, posting and polling, and a
// pair of nodes in this process with a region each.
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "verify/reference.h"

namespace emu_testing {

// Byte i of buffer `tag`'s data (the reference module's, unique per tag and position
// as far as 8 bits allow: a chunk at the wrong offset does not match it).
inline char byteOf(int tag, size_t i) {
  return static_cast<char>(strata::verify::movedValue(tag, i, ncclUint8));
}

inline double now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Node {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  ibv_gid gid{};
};

inline Node open(int access = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ, int gidIndex = 1) {
  Node n;
  int count = 0;
  ibv_device** list = ibv_get_device_list(&count);
  EXPECT_GE(count, 1);
  n.ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  n.pd = ibv_alloc_pd(n.ctx);
  n.cq = ibv_create_cq(n.ctx, 256, nullptr, nullptr, 0);
  ibv_qp_init_attr a{};
  a.send_cq = n.cq;
  a.recv_cq = n.cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 128;
  a.cap.max_recv_wr = 128;
  a.cap.max_send_sge = 2;
  a.cap.max_recv_sge = 2;
  a.cap.max_inline_data = 64;
  n.qp = ibv_create_qp(n.pd, &a);
  ibv_qp_attr m{};
  m.qp_state = IBV_QPS_INIT;
  m.port_num = 1;
  m.qp_access_flags = access;
  EXPECT_EQ(ibv_modify_qp(n.qp, &m, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  EXPECT_EQ(ibv_query_gid(n.ctx, 1, gidIndex, &n.gid), 0);
  return n;
}

// RTR with an explicit address vector: a GRH from `sgidIndex` to `*dgid`, or (null
// dgid) no GRH; the destination LID `dlid` (InfiniBand).
inline int toRtrPath(Node& n, uint32_t destQpn, const ibv_gid* dgid, int sgidIndex, uint16_t dlid,
                     ibv_mtu mtu = IBV_MTU_4096, int minRnrTimer = 12) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = mtu;
  a.dest_qp_num = destQpn;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = static_cast<uint8_t>(minRnrTimer);
  a.ah_attr.port_num = 1;
  a.ah_attr.dlid = dlid;
  if (dgid) {
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *dgid;
    a.ah_attr.grh.sgid_index = static_cast<uint8_t>(sgidIndex);
  }
  return ibv_modify_qp(n.qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
}

// RoCE: a GRH from GID 1 (RoCE v2, link-local) to `dest`.
inline int toRtr(Node& n, uint32_t destQpn, const ibv_gid& dest, int minRnrTimer = 12) {
  return toRtrPath(n, destQpn, &dest, 1, 0, IBV_MTU_4096, minRnrTimer);
}

inline int toRts(Node& n, int rnrRetry = 7, int timeout = 14) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = static_cast<uint8_t>(timeout);
  a.retry_cnt = 7;
  a.rnr_retry = static_cast<uint8_t>(rnrRetry);
  a.max_rd_atomic = 1;
  return ibv_modify_qp(n.qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
}

inline void connect(Node& a, Node& b, int rnrRetry = 7, int minRnrTimer = 12) {
  ASSERT_EQ(toRtr(a, b.qp->qp_num, b.gid, minRnrTimer), 0);
  ASSERT_EQ(toRtr(b, a.qp->qp_num, a.gid, minRnrTimer), 0);
  ASSERT_EQ(toRts(a, rnrRetry), 0);
  ASSERT_EQ(toRts(b, rnrRetry), 0);
}

// The next completion on `cq` within 5 s (status IBV_WC_GENERAL_ERR when none came).
inline ibv_wc next(ibv_cq* cq, double seconds = 5) {
  ibv_wc wc{};
  double end = now() + seconds;
  while (now() < end) {
    if (ibv_poll_cq(cq, 1, &wc) == 1) return wc;
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  wc.status = IBV_WC_GENERAL_ERR;
  wc.opcode = static_cast<ibv_wc_opcode>(-1);
  return wc;
}

inline int postWrite(Node& n, ibv_wr_opcode op, void* src, uint32_t len, uint32_t lkey, uint64_t addr, uint32_t rkey,
              uint64_t id = 1, uint32_t imm = 0) {
  ibv_sge sge{reinterpret_cast<uint64_t>(src), len, lkey};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.imm_data = htonl(imm);
  wr.wr.rdma.remote_addr = addr;
  wr.wr.rdma.rkey = rkey;
  ibv_send_wr* bad = nullptr;
  return ibv_post_send(n.qp, &wr, &bad);
}

inline int postRecv(Node& n, void* buf = nullptr, uint32_t len = 0, uint32_t lkey = 0, uint64_t id = 7) {
  ibv_sge sge{reinterpret_cast<uint64_t>(buf), len, lkey};
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = buf ? &sge : nullptr;
  wr.num_sge = buf ? 1 : 0;
  ibv_recv_wr* bad = nullptr;
  return ibv_post_recv(n.qp, &wr, &bad);
}

constexpr int kAll = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;

struct Pair : ::testing::Test {
  Node a = open(), b = open();
  std::vector<char> src = std::vector<char>(8192), dst = std::vector<char>(8192, 0);
  ibv_mr* srcMr = nullptr;
  ibv_mr* dstMr = nullptr;
  void SetUp() override {
    for (size_t i = 0; i < src.size(); ++i) src[i] = byteOf(1, i);
    srcMr = ibv_reg_mr(a.pd, src.data(), src.size(), kAll);
    dstMr = ibv_reg_mr(b.pd, dst.data(), dst.size(), kAll);
    ASSERT_TRUE(srcMr && dstMr);
  }
  uint64_t dstAddr(size_t off = 0) { return reinterpret_cast<uint64_t>(dst.data()) + off; }
};

}  // namespace emu_testing
