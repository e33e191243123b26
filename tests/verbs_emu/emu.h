// The user-space verbs device's state (libstrata-verbs-emu.so, see emu_api.cc).
// Every object embeds the rdma-core struct it stands for as its first member,
// so the pointers handed out are the ones libibverbs' inline calls expect; the
// context's ops table sends ibv_post_send / ibv_post_recv / ibv_poll_cq here.
//
// One lock guards everything; one thread per process (the "NIC", emu_nic.cc)
// carries the wire: every RC queue pair that sends has one TCP stream to the
// process owning the peer queue pair, found from the destination GID, which
// encodes that process's IPv4 address and listening port.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace verbs_emu {

struct Device {
  ibv_device dev;
  int index = 0;
};

struct Context {
  ibv_context ctx;
  Device* device = nullptr;
};

struct Pd {
  ibv_pd pd;
};

struct Mr {
  ibv_mr mr;
  int access = 0;
  // A dma-buf registration (ibv_reg_dmabuf_mr): the emulator's own mapping of the
  // buffer; work requests name it by its iova (mr.addr), never dereferenced.
  char* host = nullptr;
  void* mapping = nullptr;
  size_t mapped = 0;
  // Registered after ibv_fork_init: MADV_DONTFORK, so a fork leaves its pages alone.
  bool dontFork = false;
  // Copy-on-write after a fork without that (kernels before 5.13): the pages the NIC
  // goes on with once the parent writes its own copies. Modelled at its worst, as if
  // the parent wrote every page while a child shared it: from the fork on, the NIC
  // reads and writes this snapshot and the process never sees what lands.
  std::vector<char> orphaned;
  // Where the bytes at address `a` of this region are, for the emulated DMA.
  char* at(uint64_t a) const {
    uint64_t off = a - reinterpret_cast<uint64_t>(mr.addr);
    if (!orphaned.empty()) return const_cast<char*>(orphaned.data()) + off;
    return host ? host + off : reinterpret_cast<char*>(a);
  }
};

struct Cq {
  ibv_cq cq;
  std::deque<ibv_wc> entries;
  std::deque<uint32_t> frees;  // per entry: the send-queue slots polling it frees (0: a receive's)
  bool overrun = false;
};

struct SendWr {
  uint64_t wrId = 0;
  ibv_wr_opcode op = IBV_WR_SEND;
  bool signaled = false;
  std::vector<ibv_sge> sges;
  std::string inlined;  // IBV_SEND_INLINE: the bytes, copied at post time
  bool isInline = false;
  uint64_t remoteAddr = 0;
  uint32_t rkey = 0;
  uint32_t imm = 0;  // network order, as the caller gave it
  uint32_t bytes = 0;
  uint64_t sourceHash = 0;  // of the bytes transmitted (checked again at the completion)
};

struct RecvWr {
  uint64_t wrId = 0;
  std::vector<ibv_sge> sges;
};

// Where a process's emulated NIC listens (network order address, host order port).
struct Endpoint {
  uint32_t ip = 0;
  uint16_t port = 0;
};

// The requester's stream to the peer queue pair.
struct Stream {
  int fd = -1;
  bool helloDone = false;  // the peer accepted the hello
  std::string out;         // bytes not yet written
  std::string in;          // response bytes not yet parsed
  double retryUntil = 0;   // while the peer is not ready: when retries are exhausted
  double nextTry = 0;
};

struct Qp {
  ibv_qp qp;
  ibv_qp_cap cap{};
  bool sigAll = false;
  uint32_t destQpn = 0;
  ibv_gid destGid{};
  int access = 0;  // qp_access_flags: what peers may do to this QP's memory
  int timeout = 14, retryCnt = 7, rnrRetry = 7, minRnrTimer = 0;
  // The path set at RTR, which the peer's responder checks against its own.
  bool global = false;    // a GRH: routed by GID (always on RoCE)
  ibv_gid sgid{};         // this end's GID at sgid_index (global only)
  int sgidType = 0;       // its IBV_GID_TYPE_*
  uint16_t slid = 0, dlid = 0;
  int pathMtu = 0;        // ibv_mtu
  int trafficClass = 0, serviceLevel = 0;  // the GRH's traffic class (global only), the SL
  std::deque<SendWr> pending;   // posted, not yet on the wire
  std::deque<SendWr> inflight;  // on the wire, awaiting the response
  // Send-queue slots of work requests that completed, still taken: as mlx5 frees
  // them, only once a completion entry at or after them is polled (an unsignalled
  // request's slot waits for a later signalled one's). `uncovered`: those since
  // the last completion entry.
  uint32_t held = 0, uncovered = 0;
  std::deque<RecvWr> recvs;
  Stream stream;
  uint64_t postCalls = 0, completions = 0;  // ibv_post_send calls; send-queue completions (tests' view)
};

// One accepted stream: requests for one of this process's queue pairs.
struct Responder {
  int fd = -1;
  uint32_t qpn = 0;     // the local queue pair, once the hello named it
  bool hello = false;
  std::string in;       // request bytes not yet applied
  std::string out;      // responses not yet written
  double rnrSince = 0;  // when the request at the head first found no receive posted
  int rnrTries = 0;
};

struct State {
  std::mutex mu;
  std::vector<Device*> devices;
  std::map<uint32_t, Qp*> qps;   // by qp_num
  std::map<uint32_t, Mr*> mrs;   // by lkey; rkey = lkey ^ kRkeyBit
  std::vector<Responder> responders;
  uint32_t nextQpn = 1, nextKey = 0x1000;  // queue pairs: slot << kQpnBits | n
  int slot = 0;        // this process's slot (emu_address.cc)
  int slotFd = -1;     // its file, locked while this process lives
  long slotPid = 0;    // the process that claimed it (a forked child claims its own)
  std::map<int, std::pair<Endpoint, double>> endpoints;  // peers' slots read, and when
  int listenFd = -1;
  uint32_t ip = 0;       // network order
  uint16_t port = 0;     // host order
  int wakeFd[2] = {-1, -1};
  bool nicStarted = false;
  bool forkSafe = false;  // ibv_fork_init was called
  std::set<uint32_t> refused;  // queue pairs that refused a peer's path (said once each)
  // Writes the NIC made into device memory (dma-buf regions) that the device does not
  // see yet, in the order made (emu_wire.cc landInto): on hardware they cross PCIe to
  // the GPU in no order against the completion the CPU polls, so a consumer reads
  // through the NIC first (GPUDirect's flush). Where they go: the emulator's mappings.
  std::vector<std::pair<char*, std::string>> held;
  size_t heldBytes = 0;
};

constexpr uint32_t kRkeyBit = 0x00800000;
constexpr int kSlots = 1024;   // processes with an emulated NIC at once on one machine
constexpr int kQpnBits = 14;   // queue pairs per process: 2^14 - 1

State& state();
double nowSec();

// emu_nic.cc
void startNic();  // under state().mu: the listener and the NIC thread, once
void wakeNic();
// One pass of the NIC under state().mu: waits up to timeoutMs for a stream to be
// ready (unlocking meanwhile; 0: no wait), then moves what the ready ones allow.
// The NIC thread loops on it; ibv_poll_cq on an empty CQ and every post call it
// without waiting, so progress does not depend on the NIC thread being scheduled.
void nicPassLocked(std::unique_lock<std::mutex>* lock, int timeoutMs);
void setQpError(Qp* q);  // under state().mu: flushes everything outstanding
// `frees`: the send-queue slots of wc.qp_num that polling this entry frees.
void pushWc(Cq* cq, const ibv_wc& wc, uint32_t frees = 0);

// emu_address.cc: the ports' addresses, and where each process's NIC listens.
void claimSlot();  // under state().mu, when the NIC starts (again, in a forked child)
// The NIC owning queue pair `qpn`; false when no live process claims it.
bool findEndpoint(uint32_t qpn, Endpoint* e);
bool infiniband();  // STRATA_VERBS_EMU_LINK_LAYER=ib
int gidTableLength();
ibv_mtu activeMtu();  // STRATA_VERBS_EMU_MTU
uint16_t localLid(int device);  // 0 on Ethernet
uint16_t localFlid(int device);  // the LID that routes to the port from other subnets
// The port's GID at `index` and its IBV_GID_TYPE_*; false when there is none.
bool localGidAt(int device, int index, ibv_gid* gid, int* type);
bool ipv4Mapped(const ibv_gid& g);

// The port's max_msg_sz: STRATA_VERBS_EMU_MAX_MSG bytes (default 1 GiB, as mlx5
// reports); a larger work request completes with IBV_WC_LOC_LEN_ERR.
uint32_t maxMessage();

// Looks up [addr, addr + len) under `lkey` in `pd`; null unless it lies inside.
Mr* findLocal(ibv_pd* pd, uint32_t lkey, uint64_t addr, uint64_t len);

}  // namespace verbs_emu
