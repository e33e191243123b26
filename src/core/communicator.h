// One rank's view of a communicator, composed of parts: its peers and
// bootstrap, the rank layout (nodes, ring order), the connection pool, the
// reduction-op table, the tuner's inputs (from the same topology plan that
// strata-topo prints), per-algorithm state, and its error and stop state.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <typeindex>
#include <vector>

#include "algorithms/rank_layout.h"
#include "algorithms/tuner.h"
#include "base/doorbell.h"
#include "base/peer_info.h"
#include "core/bootstrap.h"
#include "core/connection_pool.h"
#include "core/redop_table.h"
#include "topology/planner.h"

namespace strata::core {

class DeviceProxy;
class CommPlan;
struct KeptCall;

// Set to the name of the lifetime call (ncclCommAbort, ...) that stops a handle;
// null while it lives. Waits during init consult it.
using AbortSignal = std::atomic<const char*>;

// Options that come from ncclConfig_t and the call that creates the communicator.
struct CommOptions {
  bool blocking = true;
  int device = -1;
  std::string name;
  int minChannels = 0;  // ncclConfig_t.minCTAs, 0 = unset
  int maxChannels = 0;  // ncclConfig_t.maxCTAs, 0 = unset
  std::string netName;  // ncclConfig_t.netName: the network between nodes, by name; empty: NCCL_NET's choice
};

class Communicator {
 public:
  // A new communicator from the unique id(s), after the root rendezvous.
  static std::unique_ptr<Communicator> fromRoot(const std::vector<UniqueIdLayout>& ids, int nranks, int rank,
                                                const CommOptions& opts, const AbortSignal* aborted);
  // A child of an existing communicator (split, shrink): members reached through
  // the listener addresses the parent already knows. `parentCheck` is consulted
  // only while the child initialises (the parent's abort). `kin`: the parent and
  // its own kin, whose failure reports the child's waits read too.
  static std::unique_ptr<Communicator> fromParent(uint64_t magic, int rank, std::vector<SockAddr> addrs,
                                                  const CommOptions& opts, const AbortSignal* aborted,
                                                  std::vector<Bootstrap::Kin> kin, WaitCheck parentCheck = {});
  // The kin a child of this communicator gets, after recording the child (magic, rank) as kin of this one.
  std::vector<Bootstrap::Kin> adoptChild(uint64_t childMagic, int childRank);
  ~Communicator();

  int rank() const { return layout_.rank; }
  int nranks() const { return layout_.nranks; }
  int device() const { return opts_.device; }
  uint64_t magic() const { return bootstrap_->magic(); }
  const CommOptions& options() const { return opts_; }
  const PeerInfo& peer(int r) const { return peers_[r]; }
  const std::vector<PeerInfo>& peers() const { return peers_; }
  Bootstrap& bootstrap() { return *bootstrap_; }
  Doorbell& bell() { return *bell_; }
  std::shared_ptr<Doorbell> sharedBell() const { return bell_; }

  // The parts.
  const algorithms::RankLayout& layout() const { return layout_; }
  ConnectionPool& pool() { return *pool_; }
  RedOpTable& redops() { return *redops_; }
  const RedOpTable& redops() const { return *redops_; }
  // Per-algorithm state kept across operations (PlanContext::state).
  std::shared_ptr<void>& algorithmState(std::type_index type) { return algorithmState_[type]; }
  // The plan of this communicator's last call, emptied, for the next one (its
  // containers keep their memory); safe from any thread.
  std::unique_ptr<CommPlan> takePlan(void* deviceStream);
  void returnPlan(std::unique_ptr<CommPlan> plan);
  // The last call, kept planned for the same call again (kept_call.h); safe from any
  // thread: whoever takes it owns it until it keeps it again.
  std::unique_ptr<KeptCall> takeKeptCall();
  bool hasKeptCall() const { return keptCall_.load(std::memory_order_relaxed) != nullptr; }
  void keepCall(std::unique_ptr<KeptCall> call);

  // Staging: bytes per slot and ring channels (NCCL_BUFFSIZE, STRATA_NSLOTS, NCCL_*_NCHANNELS, ncclConfig_t).
  size_t slotBytes() const { return slotBytes_; }
  int slots() const { return slots_; }
  int numChannels() const { return channels_; }
  // True when this machine (its cores, whatever NCCL_HOSTID says) runs more ranks of the communicator than it has cores.
  bool oversubscribed() const { return oversubscribed_; }
  // True when every rank maps every other rank's memory (one host): the LL protocol works.
  bool sharedMemory() const { return tuneBasis_.sharedMemory; }
  size_t putBytes() const { return putBytes_; }  // where one-sided transfers start (comm_setup.cc)
  // Some GPU of this communicator is driven by more than one of its ranks.
  bool sharesGpu() const { return !tuneBasis_.ownGpus && tuneBasis_.nranks > 1; }
  // Blocks of device-driven kernels every rank's GPU runs at once (the fewest any
  // reports; 0 when some rank has none).
  int kernelBlocks() const { return kernelBlocks_; }
  int pipeChannels() const { return pipeChannels_; }

  // The tuner's view of the communicator, and its choice for one operation,
  // remembered for the last few sizes (the configuration, hence NCCL_ALGO /
  // NCCL_PROTO, is part of the key); under NCCL_DEBUG_SUBSYS=TUNING the first
  // choice for a size is logged with the line strata-topo prints for it.
  algorithms::TuneRequest tuneRequest(Collective coll, size_t bytes, bool device = false, bool streamOrdered = false) const;
  algorithms::Choice choose(Collective coll, size_t bytes, bool device = false, bool streamOrdered = false);
  // The same, cached alike, false instead of throwing when nothing is left.
  bool tryChoose(Collective coll, size_t bytes, bool device, bool streamOrdered, algorithms::Choice* out);
  // True when an algorithm can run this collective on device buffers (else the
  // device proxy stages them through host memory); `streamOrdered`: with kernels on
  // the caller's stream alone (no proxy).
  bool deviceCapable(Collective coll, size_t bytes, bool streamOrdered = false);
  // Warns once when NCCL_ALGO / NCCL_PROTO left out the kernels `req` would run on.
  void warnFilteredKernels(const algorithms::TuneRequest& req);
  // True when a point-to-point transfer of `bytes` with `peer` moves as one put that
  // the transport makes straight from and into device memory (GPUDirect RDMA): the
  // peer is reached over a network whose puts take device memory (kDevicePut), and
  // the size is one the point-to-point plan sends as a put (STRATA_PUT_BYTES).
  bool devicePuts(int peer, size_t bytes) const;

  // The device proxy: operations on device buffers, ordered on the caller's stream.
  DeviceProxy& deviceProxy();
  // Drains the device operations (at most `waitSec`) and stops the proxy.
  void releaseDevice(double waitSec);
  // Waits for the device operations enqueued so far (none without a proxy).
  void drainDevice(double waitSec = -1);
  // Work the calling thread enqueued on `stream` itself (stream-ordered algorithms:
  // DeviceRing, DeviceMesh, DeviceP2p, DeviceSelf, DeviceShared) is marked after each call,
  // so that a later host-buffer operation, ncclCommFinalize and ncclCommDestroy wait
  // for it (waitStreamWork), as they wait for the proxy's jobs.
  // orderStreamWork before the call's work: a stream other than the last marked one
  // first waits for the marked work (as NCCL orders a communicator's work across
  // streams); markStreamWork after it.
  void orderStreamWork(void* stream);
  void markStreamWork(void* stream);
  // Bounded by STRATA_TIMEOUT and ended by stop(); throws naming `fn`, the waiting call.
  void waitStreamWork(const char* fn);
  // At teardown, before the pool goes: device memory that ranks of other processes
  // map (CUDA IPC) is freed only once they say they unmapped it, since a freed
  // mapping may be handed out again while a peer's last flag store is still coming.
  // `workDone`: this rank's work on the stream finished (else its kernels may still
  // use the peers' memory: nothing is unmapped). A peer that does not answer within
  // STRATA_TIMEOUT, or any teardown without workDone, keeps the memory for good.
  void releaseSharedDeviceMemory(bool workDone);

  // Error state, as ncclCommGetAsyncError reports it.
  // A device-driven kernel's failure (deviceWords) counts too.
  ncclResult_t asyncError() const;
  void setAsyncError(ncclResult_t r) { asyncError_.store(r); }
  // Stops in-flight work here and tells every connected peer to stop too.
  void abortConnections() { pool_->abortAll(); }
  // Stops every call running on this communicator, on any thread: waits end,
  // connections are aborted, sleepers are woken; `why` is what the calls report.
  void stop(const std::string& why);
  bool abortRequested() const { return abortRequested_.load(); }
  // Why stop() was called ("" before).
  std::string stopReason() const;
  // Throws, with the reason, once stop() was called: no new data-path work starts then.
  void failIfStopped() const;
  void revoke() { revoked_.store(true); }
  bool revoked() const { return revoked_.load(); }
  // PlanContext::deviceWords: made at first use (on a thread with this rank's device).
  uint32_t* deviceWords();
  // Sequence numbers that make children's magics unique and agreed by all ranks.
  uint64_t nextChildSeq() { return ++childSeq_; }

 private:
  Communicator();
  static PeerInfo describeSelf(int rank, const CommOptions& opts, std::shared_ptr<Doorbell>* bell);
  void setup(std::vector<PeerInfo> peers, std::unique_ptr<Bootstrap> bootstrap, const CommOptions& opts);
  void chooseStaging(const CommOptions& opts);
  void checkNetworkAgreed() const;
  void planNodes();       // the layout and the tuner's inputs, from every node's topology plan
  void reportTopology();  // logs where the topology came from; writes NCCL_TOPO_DUMP_FILE
  void warmUp();          // opens the links the algorithms want at init
  void watchDevicePeersLocked();  // with stopMutex_ held, once device words exist

  CommOptions opts_;
  std::vector<PeerInfo> peers_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::shared_ptr<Doorbell> bell_;
  algorithms::RankLayout layout_;
  std::shared_ptr<uint32_t> deviceWords_;  // mapped pinned; outlives the pool (kernels use it to the end)
  mutable std::atomic<bool> deviceFailureLogged_{false};
  std::atomic<bool> filteredKernelsWarned_{false};  // warnFilteredKernels said it
  std::atomic<int> exitedPeer_{-1};     // a peer process the device watch found gone (stop word raised)
  std::shared_ptr<void> deviceWatch_;  // watchDevicePeers' handle, with device words and peers elsewhere
  std::unique_ptr<ConnectionPool> pool_;
  std::unique_ptr<RedOpTable> redops_;
  std::map<std::type_index, std::shared_ptr<void>> algorithmState_;
  size_t slotBytes_ = 0;
  int slots_ = 0;
  int channels_ = 1;
  bool oversubscribed_ = false;
  size_t putBytes_ = 0;
  int kernelBlocks_ = 0;
  int pipeChannels_ = 0;
  topology::Plan plan_;                   // this rank's node, as strata-topo plans it
  algorithms::TuneRequest tuneBasis_;     // the request every operation starts from
  struct CachedChoice {
    const void* config = nullptr;
    Collective coll = Collective::kAllReduce;
    size_t bytes = 0;
    bool device = false, streamOrdered = false;
    bool found = false;  // false: NCCL_ALGO / NCCL_PROTO left nothing
    algorithms::Choice choice;
  };
  std::array<CachedChoice, 16> choices_;
  std::unique_ptr<DeviceProxy> deviceProxy_;  // made at the first device operation
  std::mutex proxyMutex_;
  std::atomic<bool> hasDeviceProxy_{false};  // set once deviceProxy_ was made
  std::mutex streamWorkMutex_;  // the three below (markStreamWork)
  void* streamWork_ = nullptr;  // an event on this rank's GPU
  void* lastWorkStream_ = nullptr;
  std::atomic<bool> streamWorkMarked_{false};  // written under streamWorkMutex_; read first without it
  std::atomic<CommPlan*> sparePlan_{nullptr};
  std::atomic<KeptCall*> keptCall_{nullptr};  // its tasks use the pool's links: deleted first
  std::atomic<ncclResult_t> asyncError_{ncclSuccess};
  std::atomic<bool> abortRequested_{false};
  mutable std::mutex stopMutex_;
  std::string stopReason_;
  std::atomic<uint64_t> stopEpoch_{0};  // moves at every stop(): bootstrap waits under way end
  std::atomic<bool> revoked_{false};
  uint64_t childSeq_ = 0;
};

}  // namespace strata::core
