// One rank's view of a communicator: its peers, its ring channels and
// point-to-point connections, its doorbell, its reduction ops and its state.
#pragma once

#include <array>
#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "algorithms/tuner.h"
#include "base/doorbell.h"
#include "base/peer_info.h"
#include "core/bootstrap.h"
#include "core/op.h"
#include "core/tasks.h"
#include "device/cpu_reduce.h"
#include "transports/transport.h"

namespace strata::transport::cuda_ipc {
struct Mesh;
}

namespace strata::core {

// A ring channel: this rank receives from its predecessor and sends to its successor.
struct Channel {
  std::unique_ptr<transport::RecvConnection> fromPrev;
  std::unique_ptr<transport::SendConnection> toNext;
};

// Connection ids of the lazily opened links (the ring channels use 0..63).
constexpr uint64_t kP2pLink = 1ull << 32;     // ncclSend / ncclRecv, one per ordered pair
constexpr uint64_t kTreeLink = 4ull << 32;    // + tree index: tree edges
constexpr uint64_t kHierRsLink = 5ull << 32;  // hierarchical: the ring inside a node, reduce-scatter half
constexpr uint64_t kHierAgLink = 6ull << 32;  // and all-gather half
constexpr uint64_t kRailLink = 7ull << 32;    // and the ring across nodes among equal local ranks
constexpr uint64_t kLeaderLink = 8ull << 32;  // between the first ranks of the nodes (the Leaders algorithm)

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
};

// The ranks of one node in ring order: grouped by NUMA domain, then by rank.
std::vector<int> ringOrderInNode(const std::vector<int>& node, const std::vector<PeerInfo>& peers);
// A node's network rate: its ranks' distinct rails summed (one shared interface counts once).
double nodeNetGBps(const std::vector<int>& node, const std::vector<PeerInfo>& peers);

class Communicator {
 public:
  // A new communicator from the unique id(s), after the root rendezvous.
  static std::unique_ptr<Communicator> fromRoot(const std::vector<UniqueIdLayout>& ids, int nranks, int rank,
                                                const CommOptions& opts, const AbortSignal* aborted);
  // A child of an existing communicator (split, shrink): members reached
  // through the listener addresses the parent already knows.
  // `parentCheck` is consulted only while the child initialises (the parent's abort).
  static std::unique_ptr<Communicator> fromParent(uint64_t magic, int rank, std::vector<SockAddr> addrs,
                                                  const CommOptions& opts, const AbortSignal* aborted,
                                                  WaitCheck parentCheck = {});
  ~Communicator();

  int rank() const { return rank_; }
  int nranks() const { return static_cast<int>(peers_.size()); }
  int device() const { return opts_.device; }
  uint64_t magic() const { return bootstrap_->magic(); }
  const CommOptions& options() const { return opts_; }
  const PeerInfo& peer(int r) const { return peers_[r]; }
  const std::vector<PeerInfo>& peers() const { return peers_; }
  // The cuda_ipc mesh of GPU staging buffers (device_direct.h); null when not used.
  const std::shared_ptr<transport::cuda_ipc::Mesh>& deviceMesh() const { return deviceMesh_; }
  void setDeviceMesh(std::shared_ptr<transport::cuda_ipc::Mesh> m) { deviceMesh_ = std::move(m); }
  Bootstrap& bootstrap() { return *bootstrap_; }
  Doorbell& bell() { return *bell_; }
  size_t slotBytes() const { return slotBytes_; }
  int numChannels() const { return static_cast<int>(channels_.size()); }
  Channel& channel(int c) { return channels_[c]; }
  // Where the ranks live: nodes (ranks with one host identity) in order of
  // their lowest rank, and the ring order that visits each node's ranks together,
  // so a ring enters and leaves every node once.
  int numNodes() const { return static_cast<int>(nodes_.size()); }
  const std::vector<int>& nodeRanks(int node) const { return nodes_[node]; }
  int nodeOf(int r) const { return nodeOf_[r]; }
  int localRank() const { return localRank_; }
  // Ranks per node when every node has as many, else 0.
  int ranksPerNode() const;
  const std::vector<int>& ringOrder() const { return ringOrder_; }
  int ringPos(int r) const { return ringPos_[r]; }
  // The tuner's view of the communicator: ranks, nodes and link models.
  algorithms::TuneRequest tuneRequest(algorithms::Collective coll, size_t bytes) const;
  // The tuner's choice for one operation, remembered for the last few sizes
  // (the configuration, hence NCCL_ALGO / NCCL_PROTO, is part of the key);
  // logged under NCCL_DEBUG_SUBSYS=TUNING when first made.
  algorithms::Choice choose(algorithms::Collective coll, size_t bytes);
  // True when this machine (its cores, whatever NCCL_HOSTID says) runs more ranks of the communicator than it has cores.
  bool oversubscribed() const { return oversubscribed_; }

  // Opens links that are not open yet, in two phases so that one thread can
  // set up several communicators: first every receiver publishes its handles
  // (listenLinks), then every sender picks them up (connectLinks). Both sides
  // of a link must ask in the same group.
  // A link is one connection per (peer, id): id kP2pLink carries ncclSend/ncclRecv,
  // the others belong to an algorithm (tree edges, the hierarchical rings).
  using LinkKey = std::pair<int, uint64_t>;
  void listenLinks(const std::set<LinkKey>& recvFrom);
  void connectLinks(const std::set<LinkKey>& sendTo);
  transport::SendConnection& linkSend(LinkKey k) { return *linkSend_.at(k); }
  transport::RecvConnection& linkRecv(LinkKey k) { return *linkRecv_.at(k); }
  // On a node leader (local rank 0), once its kLeaderLink links are open: the
  // leaders' links to each other, indexed by node (null for this node), and one
  // slot of scratch for the one-shot among them (its operations run one at a time).
  struct LeaderMesh {
    std::vector<transport::SendConnection*> sends;
    std::vector<transport::RecvConnection*> recvs;
    std::vector<char> scratch;
  };
  LeaderMesh& leaderMesh();

  // The all-to-all mesh of small connections under the one-shot algorithm,
  // opened by every rank at its first one-shot operation, in the same two phases.
  void listenMesh();
  void connectMesh();
  const std::vector<transport::SendConnection*>& meshSends() const { return meshSendPtrs_; }
  const std::vector<transport::RecvConnection*>& meshRecvs() const { return meshRecvPtrs_; }
  char* meshScratch() { return meshScratch_.data(); }
  // True when every rank maps every other rank's memory (one host): the LL protocol works.
  bool sharedMemory() const { return sharedMemory_; }
  LlMesh& llMesh() { return ll_; }
  size_t meshSlotBytes() const { return meshScratch_.size(); }

  // Reduction ops made by ncclRedOpCreatePreMulSum.
  ncclRedOp_t createPreMulSum(const void* scalar, ncclDataType_t type, ncclScalarResidence_t residence);
  void destroyRedOp(ncclRedOp_t op);
  // The op as the device layer applies it; validates it against the datatype.
  device::ReduceOp resolveOp(ncclRedOp_t op, ncclDataType_t type, const char* fn) const;
  // Resolves now what can be (a device scalar's address is kept, not read).
  OpDesc::Pinned pinOp(const OpDesc& op) const;
  // The reduction an operation runs with: its pinned one (reading a device scalar
  // now), else resolved now.
  device::ReduceOp opFor(const OpDesc& op) const;
  bool isUserOp(ncclRedOp_t op) const;

  // Error state, as ncclCommGetAsyncError reports it.
  ncclResult_t asyncError() const { return asyncError_.load(); }
  void setAsyncError(ncclResult_t r) { asyncError_.store(r); }
  // True when every send connection has pushed out what was posted to it (a
  // socket needs this rank's thread to keep sending after the last step).
  bool sendsFlushed();
  // Stops in-flight work here and tells every connected peer to stop too.
  void abortConnections();
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
  // Sequence numbers that make children's magics unique and agreed by all ranks.
  uint64_t nextChildSeq() { return ++childSeq_; }

 private:
  Communicator() = default;
  static PeerInfo describeSelf(int rank, const CommOptions& opts, std::shared_ptr<Doorbell>* bell);
  void setup(std::vector<PeerInfo> peers, std::unique_ptr<Bootstrap> bootstrap, const CommOptions& opts);
  void mapNodes();
  void reportTopology();  // logs where the topology came from; writes NCCL_TOPO_DUMP_FILE
  OpDesc::Pinned pin(ncclRedOp_t op, ncclDataType_t type, const char* fn) const;
  void connectRing();
  // (peer, connection id) for every other rank.
  std::vector<std::pair<int, uint64_t>> everyPeer(uint64_t connection) const;
  // Receivers publish handles first, then senders collect theirs: never deadlocks.
  void connect(const std::vector<std::pair<int, uint64_t>>& recvFrom, const std::vector<std::pair<int, uint64_t>>& sendTo,
               std::vector<std::unique_ptr<transport::RecvConnection>>* recvs,
               std::vector<std::unique_ptr<transport::SendConnection>>* sends, size_t slotBytes, int slots);

  struct UserOp {
    ncclDataType_t type;
    ncclScalarResidence_t residence;
    device::ReduceOp op;    // with the scalar, for ncclScalarHostImmediate
    const void* scalarPtr;  // read when the op runs, for ncclScalarDevice
    bool live;
  };

  int rank_ = 0;
  CommOptions opts_;
  std::vector<PeerInfo> peers_;
  std::unique_ptr<Bootstrap> bootstrap_;
  std::shared_ptr<Doorbell> bell_;
  size_t slotBytes_ = 0;
  int slots_ = 0;
  std::vector<Channel> channels_;
  std::vector<std::vector<int>> nodes_;
  std::vector<int> nodeOf_, ringOrder_, ringPos_;
  int localRank_ = 0;
  std::shared_ptr<transport::cuda_ipc::Mesh> deviceMesh_;
  double netGBps_ = 0;  // the network rate the tuner assumes (STRATA_NET_GBPS or the NIC's speed)
  std::map<LinkKey, std::unique_ptr<transport::SendConnection>> linkSend_;
  std::map<LinkKey, std::unique_ptr<transport::RecvConnection>> linkRecv_;
  LeaderMesh leaders_;
  std::vector<std::unique_ptr<transport::SendConnection>> meshSend_;  // by rank; null for this rank
  std::vector<std::unique_ptr<transport::RecvConnection>> meshRecv_;
  std::vector<transport::SendConnection*> meshSendPtrs_;
  std::vector<transport::RecvConnection*> meshRecvPtrs_;
  std::vector<char> meshScratch_;
  bool sharedMemory_ = false;
  struct CachedChoice {
    const void* config = nullptr;
    algorithms::Collective coll;
    size_t bytes = 0;
    algorithms::Choice choice;
  };
  std::array<CachedChoice, 16> choices_;
  LlMesh ll_;
  std::vector<transport::SharedRegion> llRegions_;  // keeps both ends' regions mapped
  mutable std::mutex opsMutex_;
  std::vector<UserOp> userOps_;
  std::atomic<ncclResult_t> asyncError_{ncclSuccess};
  std::atomic<bool> abortRequested_{false};
  mutable std::mutex stopMutex_;
  std::string stopReason_;
  std::atomic<uint64_t> stopEpoch_{0};  // moves at every stop(): bootstrap waits under way end
  std::atomic<bool> revoked_{false};
  uint64_t childSeq_ = 0;
  bool oversubscribed_ = false;
};

}  // namespace strata::core
