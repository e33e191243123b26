// How each operation becomes tasks: the plan of every algorithm the tuner can pick.
#include <algorithm>
#include <cstring>

#include "algorithms/tree.h"
#include "base/config.h"
#include "base/error.h"
#include "core/executor.h"
#include "device/dtypes.h"

namespace strata::core {
namespace {

constexpr size_t kBytesPerChannel = 512 << 10;  // below this, extra channels only add steps
// Outputs from this size on do not stay in the caches (1 MiB of L2 per core on the test
// machines), so they are written with streaming stores; not in place, where the output
// lines were just read and are still cached.
constexpr size_t kStreamingBytes = 8 << 20;
// The hierarchical all-reduce works in pieces of this size, so that its three phases overlap.
constexpr size_t kHierPieceBytes = 4 << 20;
enum LaneKind { kRingLane, kSendLane, kRecvLane, kMeshLane, kTreeLane, kHierLane };

bool overlaps(const void* a, const void* b, size_t bytes) {
  auto x = reinterpret_cast<uintptr_t>(a), y = reinterpret_cast<uintptr_t>(b);
  return x < y + bytes && y < x + bytes;
}

}  // namespace

void Executor::add(Communicator& comm, const OpDesc& op) {
  work_[&comm];  // every communicator of the group takes part, even with nothing to move
  if (!firstFn_) firstFn_ = op.fn;
  if (op.count == 0) return;
  size_t bytes = op.count * device::dtypeSize(op.type);
  switch (op.kind) {
    case OpKind::kSend: return addSend(comm, op, static_cast<const char*>(op.sendbuff), bytes, op.root);
    case OpKind::kRecv: return addRecv(comm, op, static_cast<char*>(op.recvbuff), bytes, op.root);
    case OpKind::kCollective:
      if (op.coll >= algorithms::Collective::kAllToAll) return addPairwise(comm, op);
      // The tuner's choice; throws when NCCL_ALGO / NCCL_PROTO exclude every candidate.
      algorithms::Choice c = comm.choose(op.coll, opBytes(op, comm.nranks()));
      if (strcmp(c.algorithm, "OneShot") == 0) return addOneShot(comm, op, c.proto == algorithms::Protocol::kLL);
      if (strcmp(c.algorithm, "Tree") == 0) return addTree(comm, op);
      if (strcmp(c.algorithm, "Hierarchical") == 0) return addHierarchical(comm, op);
      if (strcmp(c.algorithm, "Leaders") == 0) return addLeaders(comm, op);
      return addRing(comm, op);
  }
}

void Executor::addOneShot(Communicator& comm, const OpDesc& op, bool ll) {
  OneShotArgs args{op.fn, comm.rank(), static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff),
                   op.count, op.type, comm.opFor(op), nullptr, nullptr, nullptr, 0};
  work_[&comm].mesh = true;
  Communicator* c = &comm;
  pending_.push_back({{c, kMeshLane, 0}, [c, args, ll]() mutable {
                        args.to = &c->meshSends();
                        args.from = &c->meshRecvs();
                        args.scratch = c->meshScratch();
                        args.chunkBytes = c->meshSlotBytes();
                        return ll ? makeLlOneShotTask(args, &c->llMesh()) : makeOneShotTask(args);
                      }});
}

void Executor::addRing(Communicator& comm, const OpDesc& op) {
  int n = comm.nranks(), pos = comm.ringPos(comm.rank());
  const std::vector<int>& order = comm.ringOrder();
  size_t esize = device::dtypeSize(op.type);
  bool segmented = op.coll == algorithms::Collective::kAllGather || op.coll == algorithms::Collective::kReduceScatter;
  algorithms::RingParams base;
  base.coll = op.coll;
  base.nranks = n;
  base.pos = pos;
  base.rootPos = comm.ringPos(op.root);  // 0 unless rooted; validated by then
  base.stride = segmented ? op.count : 0;
  base.chunk = comm.slotBytes() / esize;
  base.order = order.data();
  device::ReduceOp rop = reduces(op) ? comm.opFor(op) : device::ReduceOp{};
  size_t region = op.count;
  int nch = 1;
  if (n > 1) {
    size_t wanted = (region * esize + kBytesPerChannel - 1) / kBytesPerChannel;
    wanted = std::max<size_t>(wanted, static_cast<size_t>(config().minChannels));
    nch = static_cast<int>(std::min<size_t>({wanted, static_cast<size_t>(comm.numChannels()), region}));
  }
  for (int c = 0; c < nch; ++c) {
    algorithms::RingParams p = base;
    p.begin = region * c / nch;
    p.length = region * (c + 1) / nch - p.begin;
    RingTaskArgs args{op.fn, comm.rank(), order[(pos + n - 1) % n], order[(pos + 1) % n], p,
                      static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff), op.type, rop,
                      n > 1 ? comm.channel(c).fromPrev.get() : nullptr,
                      n > 1 ? comm.channel(c).toNext.get() : nullptr,
                      opBytes(op, n) >= kStreamingBytes && op.sendbuff != op.recvbuff};
    lanes_[{&comm, kRingLane, c}].comm = &comm;
    lanes_[{&comm, kRingLane, c}].tasks.push_back(makeRingTask(args));
  }
}

// All-reduce: the double binary tree, each tree carrying half the elements.
// Broadcast and reduce: one tree rooted at the root. Positions follow the ring
// order, so neighbouring leaves sit on one node.
void Executor::addTree(Communicator& comm, const OpDesc& op) {
  int n = comm.nranks(), pos = comm.ringPos(comm.rank());
  const std::vector<int>& order = comm.ringOrder();
  bool allReduce = op.coll == algorithms::Collective::kAllReduce;
  TreeMode mode = allReduce ? TreeMode::kAllReduce
                  : op.coll == algorithms::Collective::kReduce ? TreeMode::kReduce
                                                               : TreeMode::kBroadcast;
  int trees = allReduce && n > 1 ? 2 : 1;
  CommWork& w = work_[&comm];
  Communicator* c = &comm;
  for (int t = 0; t < trees; ++t) {
    algorithms::TreeLinks links = allReduce ? algorithms::doubleTree(n, pos, t)
                                            : algorithms::rootedTree(n, pos, comm.ringPos(op.root));
    uint64_t id = kTreeLink + static_cast<uint64_t>(t);
    bool up = mode != TreeMode::kBroadcast, down = mode != TreeMode::kReduce;
    TreeTaskArgs a{op.fn, comm.rank(), mode, links.parent < 0 ? -1 : order[links.parent], {}, nullptr, nullptr, {}, {},
                   static_cast<const char*>(op.sendbuff), static_cast<char*>(op.recvbuff), 0, 0,
                   comm.slotBytes() / device::dtypeSize(op.type), op.type,
                   mode == TreeMode::kBroadcast ? device::ReduceOp{} : comm.opFor(op)};
    a.begin = op.count * t / trees;
    a.length = op.count * (t + 1) / trees - a.begin;
    for (int k = 0; k < links.nchildren; ++k) a.children.push_back(order[links.children[k]]);
    if (a.parent >= 0) {
      if (up) w.sendLinks.insert({a.parent, id});
      if (down) w.recvLinks.insert({a.parent, id});
    }
    for (int child : a.children) {
      if (up) w.recvLinks.insert({child, id});
      if (down) w.sendLinks.insert({child, id});
    }
    pending_.push_back({{c, kTreeLane, t}, [c, a, id, up, down]() mutable {
                          if (a.parent >= 0) {
                            if (up) a.toParent = &c->linkSend({a.parent, id});
                            if (down) a.fromParent = &c->linkRecv({a.parent, id});
                          }
                          for (int child : a.children) {
                            if (up) a.fromChildren.push_back(&c->linkRecv({child, id}));
                            if (down) a.toChildren.push_back(&c->linkSend({child, id}));
                          }
                          return makeTreeTask(a);
                        }});
  }
}

// The ring inside this rank's node (previous and next rank), with its two links
// (kHierRsLink, kHierAgLink) registered when the node has more than this rank.
std::pair<int, int> Executor::useNodeRing(Communicator& comm) {
  const std::vector<int>& local = comm.nodeRanks(comm.nodeOf(comm.rank()));
  int L = static_cast<int>(local.size()), li = comm.localRank();
  int prev = local[(li + L - 1) % L], next = local[(li + 1) % L];
  CommWork& w = work_[&comm];
  if (L > 1)
    for (uint64_t id : {kHierRsLink, kHierAgLink}) {
      w.recvLinks.insert({prev, id});
      w.sendLinks.insert({next, id});
    }
  return {prev, next};
}

// Reduce-scatter inside the node, all-reduce across nodes among the ranks with
// this local rank (a "rail": each carries 1/L of the data), all-gather inside the
// node; pipelined over pieces, each phase on its own links.
void Executor::addHierarchical(Communicator& comm, const OpDesc& op) {
  int L = comm.ranksPerNode(), N = comm.numNodes(), li = comm.localRank(), node = comm.nodeOf(comm.rank());
  auto [prevLocal, nextLocal] = useNodeRing(comm);
  int prevRail = comm.nodeRanks((node + N - 1) % N)[li], nextRail = comm.nodeRanks((node + 1) % N)[li];
  CommWork& w = work_[&comm];
  w.recvLinks.insert({prevRail, kRailLink});
  w.sendLinks.insert({nextRail, kRailLink});

  size_t esize = device::dtypeSize(op.type);
  device::ReduceOp full = comm.opFor(op);
  device::ReduceOp inside = full, across = full, plain = full;
  inside.postDivide = 0;  // avg divides once, at the end of the rail all-reduce
  across.preMultiply = false;
  plain.preMultiply = false;
  plain.postDivide = 0;
  size_t pieces = std::max<size_t>(1, op.count * esize / kHierPieceBytes);
  auto* send = static_cast<const char*>(op.sendbuff);
  auto* recv = static_cast<char*>(op.recvbuff);
  algorithms::RingParams ring;
  ring.coll = algorithms::Collective::kAllReduce;
  ring.nranks = L;
  ring.pos = li;
  ring.chunk = comm.slotBytes() / esize;
  algorithms::RingParams rail = ring;
  rail.nranks = N;
  rail.pos = node;
  int rank = comm.rank();
  Communicator* c = &comm;
  pending_.push_back({{c, kHierLane, 0}, [=]() {
    std::vector<std::vector<std::unique_ptr<Task>>> tasks(pieces);
    for (size_t p = 0; p < pieces; ++p) {
      algorithms::RingParams rs = ring, ag = ring, ar = rail;
      rs.begin = ag.begin = op.count * p / pieces;
      rs.length = ag.length = op.count * (p + 1) / pieces - rs.begin;
      rs.half = algorithms::RingHalf::kReduceScatter;
      ag.half = algorithms::RingHalf::kAllGather;
      algorithms::Segment mine = algorithms::ownedSegment(rs);
      ar.begin = mine.begin;
      ar.length = mine.length;
      tasks[p].push_back(makeRingTask({op.fn, rank, prevLocal, nextLocal, rs, send, recv, op.type, inside,
                                       &c->linkRecv({prevLocal, kHierRsLink}), &c->linkSend({nextLocal, kHierRsLink}),
                                       false}));
      tasks[p].push_back(makeRingTask({op.fn, rank, prevRail, nextRail, ar, recv, recv, op.type, across,
                                       &c->linkRecv({prevRail, kRailLink}), &c->linkSend({nextRail, kRailLink}),
                                       false}));
      tasks[p].push_back(makeRingTask({op.fn, rank, prevLocal, nextLocal, ag, recv, recv, op.type, plain,
                                       &c->linkRecv({prevLocal, kHierAgLink}), &c->linkSend({nextLocal, kHierAgLink}),
                                       false}));
    }
    return makePipelineTask(std::move(tasks));
  }});
}

// Small all-reduces across nodes: reduce inside each node to its first rank (the
// leader), one-shot among the leaders (one network message per pair of nodes, not
// per pair of ranks), broadcast inside the node. Shares the hierarchical lane: the
// ring links inside the node are the same.
void Executor::addLeaders(Communicator& comm, const OpDesc& op) {
  int node = comm.nodeOf(comm.rank()), li = comm.localRank(), N = comm.numNodes();
  int L = static_cast<int>(comm.nodeRanks(node).size());
  auto [prevLocal, nextLocal] = useNodeRing(comm);
  CommWork& w = work_[&comm];
  if (li == 0)
    for (int k = 0; k < N; ++k)
      if (k != node) {
        w.recvLinks.insert({comm.nodeRanks(k)[0], kLeaderLink});
        w.sendLinks.insert({comm.nodeRanks(k)[0], kLeaderLink});
      }
  device::ReduceOp full = comm.opFor(op), inside = full, across = full;
  inside.postDivide = 0;  // avg divides once, among the leaders
  across.preMultiply = false;
  algorithms::RingParams ring;
  ring.nranks = L;
  ring.pos = li;
  ring.length = op.count;
  ring.chunk = comm.slotBytes() / device::dtypeSize(op.type);
  auto* send = static_cast<const char*>(op.sendbuff);
  auto* recv = static_cast<char*>(op.recvbuff);
  int rank = comm.rank();
  Communicator* c = &comm;
  pending_.push_back({{c, kHierLane, 0}, [=]() {
    std::vector<std::vector<std::unique_ptr<Task>>> tasks(1);
    algorithms::RingParams reduce = ring, bcast = ring;
    reduce.coll = algorithms::Collective::kReduce;
    bcast.coll = algorithms::Collective::kBroadcast;
    bool several = L > 1;
    tasks[0].push_back(makeRingTask({op.fn, rank, prevLocal, nextLocal, reduce, send, recv, op.type, inside,
                                     several ? &c->linkRecv({prevLocal, kHierRsLink}) : nullptr,
                                     several ? &c->linkSend({nextLocal, kHierRsLink}) : nullptr, false}));
    if (li == 0) {
      Communicator::LeaderMesh& m = c->leaderMesh();
      tasks[0].push_back(makeOneShotTask({op.fn, node, recv, recv, op.count, op.type, across, &m.sends, &m.recvs,
                                          m.scratch.data(), m.scratch.size()}));
    }
    if (several)
      tasks[0].push_back(makeRingTask({op.fn, rank, prevLocal, nextLocal, bcast, recv, recv, op.type, device::ReduceOp{},
                                       &c->linkRecv({prevLocal, kHierAgLink}), &c->linkSend({nextLocal, kHierAgLink}),
                                       false}));
    return makePipelineTask(std::move(tasks));
  }});
}

// All-to-all, gather and scatter: one send and one receive per peer pair, plus the local piece.
void Executor::addPairwise(Communicator& comm, const OpDesc& op) {
  int n = comm.nranks(), r = comm.rank();
  size_t piece = op.count * device::dtypeSize(op.type);
  const char* src = static_cast<const char*>(op.sendbuff);
  char* dst = static_cast<char*>(op.recvbuff);
  switch (op.coll) {
    case algorithms::Collective::kAllToAll:
      if (overlaps(src, dst, piece * n)) {  // in place: send from a copy of the input
        scratch_.emplace_back(new char[piece * n]);
        memcpy(scratch_.back().get(), src, piece * n);
        src = scratch_.back().get();
      }
      for (int j = 0; j < n; ++j) {
        if (j == r) continue;
        addSend(comm, op, src + j * piece, piece, j);
        addRecv(comm, op, dst + j * piece, piece, j);
      }
      memcpy(dst + r * piece, src + r * piece, piece);
      break;
    case algorithms::Collective::kGather:
      if (r != op.root) return addSend(comm, op, src, piece, op.root);
      for (int j = 0; j < n; ++j)
        if (j != r) addRecv(comm, op, dst + j * piece, piece, j);
      if (dst + r * piece != src) memmove(dst + r * piece, src, piece);
      break;
    default:  // scatter
      if (r != op.root) return addRecv(comm, op, dst, piece, op.root);
      for (int j = 0; j < n; ++j)
        if (j != r) addSend(comm, op, src + j * piece, piece, j);
      if (dst != src + r * piece) memmove(dst, src + r * piece, piece);
      break;
  }
}

void Executor::addSend(Communicator& comm, const OpDesc& op, const char* buf, size_t bytes, int peer) {
  CommWork& w = work_[&comm];
  if (peer == comm.rank()) {
    w.selfSends.push_back({op.fn, const_cast<char*>(buf), bytes});
    return;
  }
  w.sendLinks.insert({peer, kP2pLink});
  P2pTaskArgs a{op.fn, comm.rank(), peer, const_cast<char*>(buf), bytes, nullptr, nullptr};
  Communicator* c = &comm;
  pending_.push_back({{c, kSendLane, peer}, [c, a]() mutable {
                        a.send = &c->linkSend({a.peer, kP2pLink});
                        return makeP2pTask(a);
                      }});
}

void Executor::addRecv(Communicator& comm, const OpDesc& op, char* buf, size_t bytes, int peer) {
  CommWork& w = work_[&comm];
  if (peer == comm.rank()) {
    w.selfRecvs.push_back({op.fn, buf, bytes});
    return;
  }
  w.recvLinks.insert({peer, kP2pLink});
  P2pTaskArgs a{op.fn, comm.rank(), peer, buf, bytes, nullptr, nullptr};
  Communicator* c = &comm;
  pending_.push_back({{c, kRecvLane, peer}, [c, a]() mutable {
                        a.recv = &c->linkRecv({a.peer, kP2pLink});
                        return makeP2pTask(a);
                      }});
}

}  // namespace strata::core
