// One IB connection's verbs objects and its setup (see ib_network.h for the
// protocol): the completion queue, the queue pairs, the info both ends exchange
// over TCP, and the failure messages that name the peer.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>

#include "transports/ib/ib_devices.h"
#include "transports/net/network.h"

namespace strata::transport::ib {

constexpr int kDepth = 32;  // requests in flight per connection (NCCL_NET_MAX_REQUESTS)
constexpr int kMaxQps = 16;
constexpr int kMaxRecvs = net::kMaxRecvs;  // receives per FIFO slot (one grouped irecv)
constexpr uint32_t kMagic = 0x53494232;    // "SIB2": FIFO slots of kMaxRecvs entries
constexpr uint32_t kMagicV1 = 0x53494231;  // "SIB1": one entry a slot (before grouped receives)

// One receive of a posted irecv, as the receiver writes it into the sender's FIFO:
// every entry of the group carries the group's size `nreqs` and `seq` (the
// irecv's index + 1), so the sender knows when the whole group has landed.
struct FifoEntry {
  uint64_t addr;
  uint32_t rkey, size, tag, nreqs;
  uint64_t seq;
};
// 32 bytes in a page-aligned array: an entry never straddles a 64-byte line, so the
// NIC's in-order write of it (no relaxed ordering on the FIFO's registration) makes
// `seq` visible with the rest.
static_assert(sizeof(FifoEntry) == 32, "FIFO entries are 32 bytes");

// Each end's FIFO memory, page-aligned and registered. The sender's: the entries
// the receiver writes, and the sizes it writes back to a grouped receive (their
// source). The receiver's: the entries it posts (the source of its FIFO writes),
// and where the sender's sizes land.
struct FifoBlock {
  FifoEntry entries[kDepth][kMaxRecvs];
  uint32_t sizes[kDepth][kMaxRecvs];
  uint32_t flushWord;  // the receiver's: where its GPUDirect flushes' reads land
};

// What each end tells the other over TCP.
struct WireInfo {
  uint32_t magic, nqps, split, pid;
  uint32_t qpn[kMaxQps];
  uint8_t gid[16];
  uint16_t lid;
  uint8_t linkLayer, mtu;
  uint32_t fifoRkey;  // the sender's FIFO entries; from the receiver: its sizes
  uint64_t fifoAddr;
  char host[64];
};

// The verbs side of one connection end; destroyed in reverse.
struct QpSet {
  const Port* port = nullptr;
  ibv_cq* cq = nullptr;
  int nqps = 1;
  ibv_qp* qps[kMaxQps] = {};
  int sendWrs = 0;           // each queue pair's send queue (max_send_wr)
  int sqFree[kMaxQps] = {};  // its slots no posted work request holds (Comm::post takes, completions give back)
  std::string peerHost;
  uint32_t peerPid = 0;
  std::string route;  // after connectTo: "path MTU 1024, LID 0x12" or "..., GRH to <gid>", for the log

  // A CQ and `nqps` queue pairs in INIT; throws ncclSystemError naming the call.
  void create(const Port& p, int queuePairs);
  // This end's part of the info (queue pairs, GID, LID, MTU).
  void describe(WireInfo* w) const;
  // The port's GID as it reads now (a RoCE GID follows the interface's address).
  ibv_gid currentGid() const;
  // Brings every queue pair to RTS, addressed to the peer's; throws on mismatch.
  // `control`: they carry this end's control messages (a receiver's FIFO writes),
  // which take NCCL_IB_FIFO_TC's traffic class on RoCE where it is set, as NCCL's do.
  void connectTo(const WireInfo& peer, bool control = false);
  void destroy();
  // The index of the queue pair numbered `qpNum` (0 when none is).
  int indexOf(uint32_t qpNum) const;
  // "host (pid N), QP 0x.. on dev:port": for messages.
  std::string where(int qp) const;
};

}  // namespace strata::transport::ib
