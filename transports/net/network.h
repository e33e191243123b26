// The network seam: what a network between nodes offers Strata, shaped like
// NCCL's net plugin API (listen / connect / accept polled without blocking;
// registered memory; tagged isend and grouped irecv; test; close). The net
// transport (net_transport.h) runs Strata's connections over any Network; an
// external NCCL net plugin is one (plugin.h). Every call throws strata::Error
// (naming the network and the call) when the network reports a failure.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "base/error.h"

namespace strata::transport::net {

// What test() throws when the peer closed the connection between messages: all it
// sent was delivered, so this is how a connection ends when the peer is done (its
// communicator destroyed), not a fault; the connection is over all the same.
class PeerClosed : public Error {
 public:
  explicit PeerClosed(std::string message) : Error(ncclRemoteError, std::move(message)) {}
};

constexpr size_t kHandleBytes = 128;  // a listen handle, as NCCL_NET_HANDLE_MAXSIZE
constexpr int kMaxRecvs = 8;          // receives in one grouped irecv, at most (NCCL_NET_IB_MAX_RECVS)

// One receive of a grouped irecv: where the message goes, the most it may be, the
// tag the matching isend carries, and the registration of [data, data + bytes).
struct RecvBuffer {
  void* data;
  size_t bytes;
  int tag;
  void* mhandle;
};

struct DeviceProperties {
  std::string name;
  std::string pciPath;
  uint64_t guid = 0;
  int ptrSupport = 0;  // NCCL_PTR_HOST | NCCL_PTR_CUDA | NCCL_PTR_DMABUF
  int speedMbps = 0;
  int port = 0;
  float latencyUs = 0;
  int maxComms = 0;
  int maxRecvs = 1;  // receives one irecv may group
  int deviceType = 0;  // netDeviceType: 0 host; 1 UNPACK (receives unpacked by GPU kernels), which Strata cannot serve
};

// What a network did in this process, where it counts it (IB): Strata's net
// transport adds these to its own counters (transport.h Activity).
struct WireCounters {
  uint64_t dataWrites = 0, fifoWrites = 0, registrations = 0, cacheHits = 0;
  uint64_t dmabufRegistrations = 0, flushes = 0;
};

class Network {
 public:
  virtual ~Network() = default;
  virtual const std::string& name() const = 0;
  virtual int devices() = 0;
  virtual DeviceProperties properties(int dev) = 0;
  // Receiver: a listening object; `handle` (kHandleBytes) goes to the sender.
  virtual void* listen(int dev, void* handle) = 0;
  // Sender, with the receiver's handle: null until the connection is up (call again).
  virtual void* connect(int dev, void* handle) = 0;
  // Receiver: null until the sender has connected (call again).
  virtual void* accept(void* listenComm) = 0;
  virtual void* regMr(void* comm, void* data, size_t bytes, int ptrType) = 0;
  // [data, data + bytes) given as a dma-buf (`fd` at `offset`: how a GPU driver exports
  // device memory), for networks whose ptrSupport has NCCL_PTR_DMABUF; the others
  // refuse with ncclInvalidUsage. The caller keeps `fd` open until deregMr.
  virtual void* regMrDmaBuf(void* comm, void* data, size_t bytes, int ptrType, uint64_t offset, int fd);
  virtual void deregMr(void* comm, void* mhandle) = 0;
  // Null when the network cannot take it now (call again).
  virtual void* isend(void* sendComm, void* data, size_t bytes, int tag, void* mhandle) = 0;
  // `n` receives (1 to the device's maxRecvs) that complete together, as one request:
  // each takes the sender's isend with its tag (of equal tags, the earlier isend
  // the earlier receive). A network takes them all or none (null: call again).
  virtual void* irecv(void* recvComm, int n, const RecvBuffer* buffers) = 0;
  void* irecv(void* recvComm, void* data, size_t bytes, int tag, void* mhandle) {
    RecvBuffer b{data, bytes, tag, mhandle};
    return irecv(recvComm, 1, &b);
  }
  // True once done (the request is then freed); `bytes`, when not null, gets the size
  // moved: one for a send, one per receive (n) for an irecv.
  virtual bool test(void* request, size_t* bytes) = 0;
  // After a receive into device memory completed: makes its bytes visible to the GPU
  // (GPUDirect RDMA writes may still be in the PCIe fabric). False when the network
  // cannot take it now (call again); *request null when there is nothing to wait for,
  // else one to test(). Networks that write host memory only need none.
  virtual bool iflush(void* recvComm, void* data, size_t bytes, void* mhandle, void** request) {
    (void)recvComm, (void)data, (void)bytes, (void)mhandle;
    *request = nullptr;
    return true;
  }
  virtual void closeSend(void* comm) = 0;
  virtual void closeRecv(void* comm) = 0;
  virtual void closeListen(void* comm) = 0;
  // The sender gives up a connect() that has not returned a comm: frees what the
  // network keeps in `handle` for it (NCCL's plugins have no such call).
  virtual void cancelConnect(void* handle) { (void)handle; }
  // True when isend sees the matching receive's size and refuses (ncclInvalidUsage)
  // a larger message, as IB's FIFO lets it: the net transport then offers one-sided
  // puts (kPut) over it. NCCL's plugins do not say, so they keep to the slots.
  virtual bool sendSeesReceive() const { return false; }
  // Keeps [data, data + bytes) registered until unpinMemory (the user registered it:
  // ncclCommRegister), so that regMr inside it costs nothing; null when the
  // network has no such notion.
  virtual void* pinMemory(void* data, size_t bytes) {
    (void)data;
    (void)bytes;
    return nullptr;
  }
  virtual void unpinMemory(void* pin) { (void)pin; }
  // True when [data, data + bytes) lies in memory registered with `comm`'s device
  // beyond one operation's registration (pinMemory), or by an operation still in
  // flight: a put may move it in place and registering it costs nothing. False
  // where the network cannot say.
  virtual bool registered(void* comm, const void* data, size_t bytes) {
    (void)comm, (void)data, (void)bytes;
    return false;
  }
  // False where the network keeps no counters (NCCL's plugins, TCP).
  virtual bool wireCounters(WireCounters* out) {
    (void)out;
    return false;
  }
};

}  // namespace strata::transport::net
