// libstrata-verbs-emu.so: a user-space verbs device with libibverbs' API, for
// Strata's tests on machines without RDMA (STRATA_IBVERBS_LIB names it; Strata's
// IB transport loads it instead of libibverbs.so.1). It emulates RC queue pairs
// strictly enough that a wrong transport fails as it would on hardware:
//  - memory regions with lkeys and rkeys (distinct) and access flags enforced:
//    a remote write outside a region, with a wrong rkey or without
//    IBV_ACCESS_REMOTE_WRITE (on the region and the queue pair) completes with
//    IBV_WC_REM_ACCESS_ERR; a local buffer outside its lkey's region with
//    IBV_WC_LOC_PROT_ERR;
//  - the queue pair state machine with the attribute masks the kernel requires;
//    posting a send on a queue pair that is not in RTS fails (EINVAL), and a
//    queue pair in error flushes what is posted (IBV_WC_WR_FLUSH_ERR);
//  - send / receive, RDMA write, write with immediate, RDMA read, in order per
//    queue pair; receive-not-ready when no receive is posted (retried as
//    rnr_retry and the responder's min_rnr_timer say, 7 = for ever);
//  - a peer process that dies: what is in flight completes with
//    IBV_WC_RETRY_EXC_ERR; a peer that never answers, after the retries that
//    timeout and retry_cnt allow.
// Devices: STRATA_VERBS_EMU_DEVICES (default 1) named semu0.., one port each, EDR 4x;
// link layer Ethernet (RoCE) or InfiniBand, GIDs, LIDs and MTUs as emu_address.cc
// describes. Processes on one machine only: a requester finds its peer's process
// through a directory they share.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>

#include "emu.h"
#include "emu_wire.h"

namespace verbs_emu {

State& state() {
  static State* s = new State;  // never destroyed: the NIC thread outlives static destructors
  return *s;
}

double nowSec() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

Mr* findLocal(ibv_pd* pd, uint32_t lkey, uint64_t addr, uint64_t len) {
  auto it = state().mrs.find(lkey);
  if (it == state().mrs.end() || it->second->mr.pd != pd) return nullptr;
  ibv_mr& m = it->second->mr;
  uint64_t base = reinterpret_cast<uint64_t>(m.addr);
  if (addr < base || len > m.length || addr - base > m.length - len) return nullptr;
  return it->second;
}

uint32_t maxMessage() {
  static const uint32_t n = [] {
    const char* v = getenv("STRATA_VERBS_EMU_MAX_MSG");
    long long x = v ? atoll(v) : 0;
    return x > 0 && x <= (1ll << 31) ? static_cast<uint32_t>(x) : (1u << 30);
  }();
  return n;
}

namespace {

int numDevices() {
  const char* v = getenv("STRATA_VERBS_EMU_DEVICES");
  int n = v ? atoi(v) : 1;
  return std::max(0, std::min(n, 8));
}

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int pollCq(ibv_cq* cq, int n, ibv_wc* wc);

Qp* asQp(ibv_qp* qp) { return reinterpret_cast<Qp*>(qp); }

bool validSges(const ibv_sge* sg, int n, int max) { return n >= 0 && n <= max && (n == 0 || sg); }

int postSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  std::unique_lock<std::mutex> lock(state().mu);
  Qp* q = asQp(qp);
  ++q->postCalls;
  for (; wr; wr = wr->next) {
    int err = 0;
    if (q->qp.state != IBV_QPS_RTS && q->qp.state != IBV_QPS_ERR) err = EINVAL;
    else if (q->pending.size() + q->inflight.size() + q->held >= q->cap.max_send_wr) err = ENOMEM;  // full until polled
    else if (!validSges(wr->sg_list, wr->num_sge, static_cast<int>(q->cap.max_send_sge))) err = EINVAL;
    else if (wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM && wr->opcode != IBV_WR_RDMA_WRITE &&
             wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM && wr->opcode != IBV_WR_RDMA_READ)
      err = EINVAL;
    SendWr s;
    s.wrId = wr->wr_id;
    s.op = wr->opcode;
    s.signaled = q->sigAll || (wr->send_flags & IBV_SEND_SIGNALED);
    s.imm = wr->imm_data;
    s.remoteAddr = wr->wr.rdma.remote_addr;
    s.rkey = wr->wr.rdma.rkey;
    uint64_t total = 0;
    for (int i = 0; !err && i < wr->num_sge; ++i) total += wr->sg_list[i].length;
    if (!err && total > 0xffffffffull) err = EINVAL;  // a WR's length is 32 bits
    if (!err && (wr->send_flags & IBV_SEND_INLINE)) {
      if (wr->opcode == IBV_WR_RDMA_READ || total > q->cap.max_inline_data) err = EINVAL;
      s.isInline = true;
      for (int i = 0; !err && i < wr->num_sge; ++i)
        s.inlined.append(reinterpret_cast<const char*>(wr->sg_list[i].addr), wr->sg_list[i].length);
    } else if (!err) {
      s.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    }
    if (err) {
      if (bad) *bad = wr;
      return err;
    }
    s.bytes = static_cast<uint32_t>(total);
    q->pending.push_back(std::move(s));
    if (q->qp.state == IBV_QPS_ERR) setQpError(q);  // flushed at once
  }
  nicPassLocked(&lock, 0);
  return 0;
}

int postRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  std::unique_lock<std::mutex> lock(state().mu);
  Qp* q = asQp(qp);
  for (; wr; wr = wr->next) {
    int err = 0;
    if (q->qp.state == IBV_QPS_RESET) err = EINVAL;
    else if (q->recvs.size() >= q->cap.max_recv_wr) err = ENOMEM;
    else if (!validSges(wr->sg_list, wr->num_sge, static_cast<int>(q->cap.max_recv_sge))) err = EINVAL;
    if (err) {
      if (bad) *bad = wr;
      return err;
    }
    RecvWr r;
    r.wrId = wr->wr_id;
    r.sges.assign(wr->sg_list, wr->sg_list + wr->num_sge);
    q->recvs.push_back(std::move(r));
    if (q->qp.state == IBV_QPS_ERR) setQpError(q);
  }
  nicPassLocked(&lock, 0);
  return 0;
}

int pollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  std::unique_lock<std::mutex> lock(state().mu);
  Cq* c = reinterpret_cast<Cq*>(cq);
  if (c->entries.empty()) nicPassLocked(&lock, 0);
  if (c->overrun) return -EOVERFLOW;  // a CQ that overflowed is unusable, as on hardware
  int k = 0;
  for (; k < n && !c->entries.empty(); ++k) {
    wc[k] = c->entries.front();
    c->entries.pop_front();
    uint32_t frees = c->frees.front();
    c->frees.pop_front();
    auto q = state().qps.find(wc[k].qp_num);
    if (frees && q != state().qps.end()) q->second->held -= std::min(q->second->held, frees);
  }
  return k;
}

// What modify_qp requires for each transition of an RC queue pair.
int requiredMask(ibv_qp_state from, ibv_qp_state to) {
  if (to == IBV_QPS_RESET || to == IBV_QPS_ERR) return IBV_QP_STATE;
  if (from == IBV_QPS_RESET && to == IBV_QPS_INIT)
    return IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
  if (from == IBV_QPS_INIT && to == IBV_QPS_INIT) return IBV_QP_STATE;
  if (from == IBV_QPS_INIT && to == IBV_QPS_RTR)
    return IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  if (from == IBV_QPS_RTR && to == IBV_QPS_RTS)
    return IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
           IBV_QP_MAX_QP_RD_ATOMIC;
  if (from == IBV_QPS_RTS && to == IBV_QPS_RTS) return IBV_QP_STATE;
  return -1;
}

}  // namespace
}  // namespace verbs_emu

using namespace verbs_emu;

namespace {
// Tests' views: `read` sees queue pair `qpn` under the lock; -1 when there is none.
template <typename F>
int readQp(uint32_t qpn, F read) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().qps.find(qpn);
  if (it == state().qps.end()) return -1;
  read(*it->second);
  return 0;
}
}  // namespace

extern "C" {

__attribute__((visibility("default"))) ibv_device** ibv_get_device_list(int* num) {
  std::lock_guard<std::mutex> lock(state().mu);
  State& s = state();
  int n = numDevices();
  while (static_cast<int>(s.devices.size()) < n) {
    auto* d = new Device;
    memset(&d->dev, 0, sizeof(d->dev));
    d->index = static_cast<int>(s.devices.size());
    snprintf(d->dev.name, sizeof(d->dev.name), "semu%d", d->index);
    snprintf(d->dev.dev_name, sizeof(d->dev.dev_name), "uverbs%d", d->index);
    // A sysfs tree of the test's (STRATA_VERBS_EMU_SYSFS): <root>/class/infiniband/semuN, as the kernel's.
    if (const char* root = getenv("STRATA_VERBS_EMU_SYSFS"))
      snprintf(d->dev.ibdev_path, sizeof(d->dev.ibdev_path), "%s/class/infiniband/%s", root, d->dev.name);
    d->dev.node_type = IBV_NODE_CA;
    d->dev.transport_type = IBV_TRANSPORT_IB;
    s.devices.push_back(d);
  }
  auto** list = static_cast<ibv_device**>(calloc(n + 1, sizeof(ibv_device*)));
  for (int i = 0; i < n; ++i) list[i] = &s.devices[i]->dev;
  if (num) *num = n;
  return list;
}

__attribute__((visibility("default"))) void ibv_free_device_list(ibv_device** list) { free(list); }

__attribute__((visibility("default"))) const char* ibv_get_device_name(ibv_device* d) { return d->name; }

__attribute__((visibility("default"))) __be64 ibv_get_device_guid(ibv_device* d) {
  return htobe64(0x5354524154410000ull + reinterpret_cast<Device*>(d)->index);
}

__attribute__((visibility("default"))) ibv_context* ibv_open_device(ibv_device* d) {
  std::lock_guard<std::mutex> lock(state().mu);
  startNic();
  auto* c = new Context;
  memset(&c->ctx, 0, sizeof(c->ctx));
  c->ctx.device = d;
  c->ctx.cmd_fd = -1;
  c->ctx.async_fd = -1;
  c->ctx.num_comp_vectors = 1;
  c->ctx.ops.post_send = postSend;
  c->ctx.ops.post_recv = postRecv;
  c->ctx.ops.poll_cq = pollCq;
  c->device = reinterpret_cast<Device*>(d);
  return &c->ctx;
}

__attribute__((visibility("default"))) int ibv_close_device(ibv_context* c) {
  delete reinterpret_cast<Context*>(c);
  return 0;
}

__attribute__((visibility("default"))) int ibv_query_device(ibv_context*, ibv_device_attr* a) {
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "strata-emu-1");
  a->max_qp = 65536;
  a->max_qp_wr = 32768;
  a->max_sge = 30;
  a->max_cq = 65536;
  a->max_cqe = 4194303;
  a->max_mr = 1 << 20;
  a->max_pd = 1 << 16;
  a->max_qp_rd_atom = 16;
  a->max_qp_init_rd_atom = 16;
  a->phys_port_cnt = 1;
  a->max_mr_size = ~0ull;
  return 0;
}

__attribute__((visibility("default"))) int(ibv_query_port)(ibv_context* c, uint8_t port, _compat_ibv_port_attr* out) {
  if (port != 1) return EINVAL;
  auto* a = reinterpret_cast<ibv_port_attr*>(out);
  memset(a, 0, sizeof(*a));
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->gid_tbl_len = gidTableLength();
  a->max_msg_sz = maxMessage();
  a->pkey_tbl_len = 1;
  a->active_width = 2;   // 4x
  a->active_speed = 32;  // EDR, 25 Gbit/s a lane: 100 Gbit/s
  // STRATA_VERBS_EMU_SPEED: another code; 0 as the kernel reports XDR to rdma-core before active_speed_ex.
  if (const char* v = getenv("STRATA_VERBS_EMU_SPEED")) a->active_speed = static_cast<uint8_t>(atoi(v));
  a->phys_state = 5;     // LinkUp
  a->link_layer = infiniband() ? IBV_LINK_LAYER_INFINIBAND : IBV_LINK_LAYER_ETHERNET;
  std::lock_guard<std::mutex> lock(state().mu);
  a->active_mtu = activeMtu();
  if (infiniband()) {
    a->lid = localLid(reinterpret_cast<Context*>(c)->device->index);
    a->sm_lid = 1;
  }
  return 0;
}

__attribute__((visibility("default"))) int ibv_query_gid(ibv_context* c, uint8_t port, int index, ibv_gid* gid) {
  std::lock_guard<std::mutex> lock(state().mu);
  int type = 0;
  if (port != 1 || !localGidAt(reinterpret_cast<Context*>(c)->device->index, index, gid, &type)) return EINVAL;
  return 0;
}

__attribute__((visibility("default"))) int _ibv_query_gid_ex(ibv_context* c, uint32_t port, uint32_t index,
                                                             ibv_gid_entry* e, uint32_t flags, size_t size) {
  if (flags || size < sizeof(ibv_gid_entry) || port != 1 || index > 255) return EINVAL;
  std::lock_guard<std::mutex> lock(state().mu);
  memset(e, 0, sizeof(*e));
  int type = 0;
  if (!localGidAt(reinterpret_cast<Context*>(c)->device->index, static_cast<int>(index), &e->gid, &type))
    return EINVAL;
  static const ibv_gid kUnused{};
  if (memcmp(&e->gid, &kUnused, sizeof(kUnused)) == 0) return ENODATA;  // an unused entry, as rdma-core says it
  e->gid_index = index;
  e->port_num = port;
  e->gid_type = static_cast<uint32_t>(type);
  return 0;
}

__attribute__((visibility("default"))) ibv_pd* ibv_alloc_pd(ibv_context* c) {
  auto* p = new Pd;
  memset(&p->pd, 0, sizeof(p->pd));
  p->pd.context = c;
  return &p->pd;
}

__attribute__((visibility("default"))) int ibv_dealloc_pd(ibv_pd* pd) {
  std::lock_guard<std::mutex> lock(state().mu);
  for (auto& kv : state().mrs)
    if (kv.second->mr.pd == pd) return EBUSY;  // regions still registered, as the kernel refuses
  for (auto& kv : state().qps)
    if (kv.second->qp.pd == pd) return EBUSY;
  delete reinterpret_cast<Pd*>(pd);
  return 0;
}

__attribute__((visibility("default"))) ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, size_t len, int access) {
  bool remote = access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  if (!pd || (remote && !(access & IBV_ACCESS_LOCAL_WRITE)) || (len && !addr)) {
    errno = EINVAL;  // remote write needs local write, as the kernel demands
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  auto* m = new Mr;
  memset(&m->mr, 0, sizeof(m->mr));
  m->mr.context = pd->context;
  m->mr.pd = pd;
  m->mr.addr = addr;
  m->mr.length = len;
  m->mr.lkey = state().nextKey++;
  m->mr.rkey = m->mr.lkey ^ kRkeyBit;
  m->dontFork = state().forkSafe;
  m->access = access;
  state().mrs[m->mr.lkey] = m;
  return &m->mr;
}

// IBVERBS_1.8's registration (the one that takes optional flags such as relaxed
// ordering). The emulator addresses memory by virtual address: an iova other than
// `addr` is refused.
__attribute__((visibility("default"))) ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t len, uint64_t iova,
                                                                unsigned access) {
  if (iova != reinterpret_cast<uintptr_t>(addr)) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  return (ibv_reg_mr)(pd, addr, len, static_cast<int>(access));
}

// Tests' view (not libibverbs API): ibv_post_send calls on queue pair `qpn` and the
// completions its send queue produced; -1 when there is no such queue pair.
__attribute__((visibility("default"))) int strata_verbs_emu_qp_stats(uint32_t qpn, uint64_t* posts,
                                                                     uint64_t* completions) {
  return readQp(qpn, [&](const Qp& q) {
    *posts = q.postCalls;
    *completions = q.completions;
  });
}

// Tests' view (not libibverbs API): the traffic class and service level queue pair
// `qpn` was brought to RTR with; -1 when there is no such queue pair.
__attribute__((visibility("default"))) int strata_verbs_emu_qp_class(uint32_t qpn, int* trafficClass,
                                                                     int* serviceLevel) {
  return readQp(qpn, [&](const Qp& q) {
    *trafficClass = q.trafficClass;
    *serviceLevel = q.serviceLevel;
  });
}

// Tests' view (not libibverbs API): the access flags a region was registered with, or -1.
__attribute__((visibility("default"))) int strata_verbs_emu_mr_access(uint32_t lkey) {
  std::lock_guard<std::mutex> lock(state().mu);
  auto it = state().mrs.find(lkey);
  return it == state().mrs.end() ? -1 : it->second->access;
}

// A dma-buf's pages, as a GPU driver exports device memory for GPUDirect RDMA: the
// emulator maps `fd` at `offset` itself (the NIC's view) and takes work requests
// for [iova, iova + len); the caller's address space never needs the buffer.
__attribute__((visibility("default"))) ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t len,
                                                                 uint64_t iova, int fd, int access) {
  bool remote = access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  if (!pd || fd < 0 || !len || !iova || (remote && !(access & IBV_ACCESS_LOCAL_WRITE))) {
    errno = EINVAL;
    return nullptr;
  }
  size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE)), lead = offset % page;
  void* map = mmap(nullptr, lead + len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, static_cast<off_t>(offset - lead));
  if (map == MAP_FAILED) return nullptr;  // errno from mmap: not a mappable buffer
  ibv_mr* mr = (ibv_reg_mr)(pd, reinterpret_cast<void*>(iova), len, access);
  if (!mr) {
    munmap(map, lead + len);
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  Mr* m = reinterpret_cast<Mr*>(mr);
  m->mapping = map;
  m->mapped = lead + len;
  m->host = static_cast<char*>(map) + lead;
  return mr;
}

__attribute__((visibility("default"))) int ibv_dereg_mr(ibv_mr* mr) {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!state().mrs.erase(mr->lkey)) return EINVAL;
  Mr* m = reinterpret_cast<Mr*>(mr);
  settle(m);
  if (m->mapping) munmap(m->mapping, m->mapped);
  delete m;
  return 0;
}

__attribute__((visibility("default"))) ibv_cq* ibv_create_cq(ibv_context* c, int cqe, void* cqContext,
                                                             ibv_comp_channel* channel, int) {
  if (cqe < 1 || channel) {
    errno = channel ? EOPNOTSUPP : EINVAL;
    return nullptr;
  }
  auto* q = new Cq;
  memset(&q->cq, 0, sizeof(q->cq));
  q->cq.context = c;
  q->cq.cq_context = cqContext;
  q->cq.cqe = cqe;
  return &q->cq;
}

__attribute__((visibility("default"))) int ibv_destroy_cq(ibv_cq* cq) {
  std::lock_guard<std::mutex> lock(state().mu);
  for (auto& kv : state().qps)
    if (kv.second->qp.send_cq == cq || kv.second->qp.recv_cq == cq) return EBUSY;
  delete reinterpret_cast<Cq*>(cq);
  return 0;
}

// The path of a queue pair going to RTR, refused (EINVAL) as the driver refuses it:
// a path MTU out of range, RoCE without a GRH or with a GID the port lacks,
// InfiniBand without a destination LID. What the driver accepts but a fabric
// would not deliver (a GID or LID of someone else, a path MTU over a port's) is
// the peer's responder's to refuse.
int setPath(Qp* q, const ibv_qp_attr& a) {
  if (a.path_mtu < IBV_MTU_256 || a.path_mtu > IBV_MTU_4096) return EINVAL;
  int device = reinterpret_cast<Context*>(q->qp.context)->device->index;
  const ibv_ah_attr& ah = a.ah_attr;
  q->global = ah.is_global;
  q->sgid = ibv_gid{};
  q->sgidType = 0;
  if (ah.is_global && !localGidAt(device, ah.grh.sgid_index, &q->sgid, &q->sgidType)) return EINVAL;
  if (infiniband() ? ah.dlid == 0 : !ah.is_global) return EINVAL;
  q->slid = localLid(device);
  q->dlid = ah.dlid;
  q->pathMtu = a.path_mtu;
  q->destQpn = a.dest_qp_num;
  q->destGid = ah.is_global ? ah.grh.dgid : ibv_gid{};
  q->trafficClass = ah.is_global ? ah.grh.traffic_class : 0;
  q->serviceLevel = ah.sl;
  q->minRnrTimer = a.min_rnr_timer;
  return 0;
}

__attribute__((visibility("default"))) ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* a) {
  if (a->qp_type != IBV_QPT_RC || !a->send_cq || !a->recv_cq || a->srq || a->cap.max_send_wr < 1 ||
      a->cap.max_send_wr > 32768 || a->cap.max_recv_wr > 32768 || a->cap.max_send_sge > 30 ||
      a->cap.max_recv_sge > 30 || a->cap.max_inline_data > 1024) {
    errno = a->qp_type != IBV_QPT_RC ? EOPNOTSUPP : EINVAL;  // only RC is emulated
    return nullptr;
  }
  std::lock_guard<std::mutex> lock(state().mu);
  auto* q = new Qp;
  memset(&q->qp, 0, sizeof(q->qp));
  q->qp.context = pd->context;
  q->qp.qp_context = a->qp_context;
  q->qp.pd = pd;
  q->qp.send_cq = a->send_cq;
  q->qp.recv_cq = a->recv_cq;
  // The next number no live queue pair has, wrapping as mlx5 reuses them (a peer still
  // addressing a destroyed one is refused: the new one's destination differs).
  uint32_t base = static_cast<uint32_t>(state().slot) << kQpnBits, n = 0;
  for (uint32_t tries = 1; tries < (1u << kQpnBits) && !n; ++tries) {
    uint32_t c = state().nextQpn;
    state().nextQpn = c + 1 < (1u << kQpnBits) ? c + 1 : 1;
    if (!state().qps.count(base | c)) n = c;
  }
  if (!n) {
    delete q;
    errno = ENOMEM;  // 2^14 - 1 queue pairs alive in this process
    return nullptr;
  }
  q->qp.qp_num = base | n;
  q->qp.state = IBV_QPS_RESET;
  q->qp.qp_type = IBV_QPT_RC;
  q->cap = a->cap;
  q->sigAll = a->sq_sig_all;
  state().qps[q->qp.qp_num] = q;
  return &q->qp;
}

__attribute__((visibility("default"))) int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* a, int mask) {
  std::lock_guard<std::mutex> lock(state().mu);
  Qp* q = asQp(qp);
  if (!(mask & IBV_QP_STATE)) return EINVAL;
  int need = requiredMask(q->qp.state, a->qp_state);
  if (need < 0 || (mask & need) != need) return EINVAL;
  if (a->qp_state == IBV_QPS_RTR) {
    int rc = setPath(q, *a);
    if (rc) return rc;
  }
  if (a->qp_state == IBV_QPS_INIT) q->access = a->qp_access_flags;
  if (a->qp_state == IBV_QPS_RTS && q->qp.state == IBV_QPS_RTR) {
    q->timeout = a->timeout;
    q->retryCnt = a->retry_cnt;
    q->rnrRetry = a->rnr_retry;
  }
  if (a->qp_state == IBV_QPS_ERR) {
    setQpError(q);
  } else if (a->qp_state == IBV_QPS_RESET) {
    setQpError(q);
    q->recvs.clear();
    q->held = q->uncovered = 0;  // an empty send queue again
    q->qp.state = IBV_QPS_RESET;
  } else {
    q->qp.state = a->qp_state;
  }
  wakeNic();
  return 0;
}

__attribute__((visibility("default"))) int ibv_destroy_qp(ibv_qp* qp) {
  std::lock_guard<std::mutex> lock(state().mu);
  Qp* q = asQp(qp);
  state().qps.erase(q->qp.qp_num);
  if (q->stream.fd >= 0) close(q->stream.fd);
  delete q;
  return 0;
}

// As libibverbs: fork protection for every later registration; an error once memory
// is registered (those regions would stay unprotected).
__attribute__((visibility("default"))) int ibv_fork_init() {
  std::lock_guard<std::mutex> lock(state().mu);
  if (!state().mrs.empty() && !state().forkSafe) return EINVAL;
  state().forkSafe = true;
  return 0;
}

// As a kernel before 5.13 answers: protection is needed, and on once ibv_fork_init ran.
__attribute__((visibility("default"))) ibv_fork_status ibv_is_fork_initialized() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().forkSafe ? IBV_FORK_ENABLED : IBV_FORK_DISABLED;
}

// Tests: whether ibv_fork_init was called in this process.
__attribute__((visibility("default"))) int strata_verbs_emu_fork_safe() {
  std::lock_guard<std::mutex> lock(state().mu);
  return state().forkSafe;
}

// Tests' fault injection (not libibverbs API): every queue pair of this process
// goes to the error state, as after a fatal local error; returns how many.
__attribute__((visibility("default"))) int strata_verbs_emu_fail_all_qps() {
  std::lock_guard<std::mutex> lock(state().mu);
  int n = 0;
  for (auto& kv : state().qps) {
    setQpError(kv.second);
    ++n;
  }
  return n;
}

__attribute__((visibility("default"))) const char* ibv_wc_status_str(ibv_wc_status s) {
  static const char* const names[] = {"success", "local length error", "local QP operation error",
                                      "local EE context operation error", "local protection error",
                                      "Work Request Flushed Error", "memory management operation error",
                                      "bad response error", "local access error", "remote invalid request error",
                                      "remote access error", "remote operation error", "transport retry counter exceeded",
                                      "RNR retry counter exceeded", "local RDD violation error",
                                      "remote invalid RD request", "aborted error", "invalid EE context number",
                                      "invalid EE context state", "fatal error", "response timeout error",
                                      "general error"};
  return s >= 0 && s < static_cast<int>(sizeof(names) / sizeof(names[0])) ? names[s] : "unknown";
}

}  // extern "C"
