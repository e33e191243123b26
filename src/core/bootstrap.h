// Out-of-band exchanges between the ranks of one communicator: the initial
// rendezvous at the root named by the unique id, then point-to-point messages
// and all-gathers through the ranks' post offices.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <string>
#include <vector>

#include "base/peer_info.h"
#include "core/post_office.h"
#include "nccl.h"

namespace strata::core {

// What ncclUniqueId holds: the root's address and a random magic.
struct UniqueIdLayout {
  uint32_t tag;  // kUniqueIdTag: tells a Strata id from garbage
  uint32_t reserved;
  uint64_t magic;
  SockAddr root;
};
static_assert(sizeof(UniqueIdLayout) <= NCCL_UNIQUE_ID_BYTES, "unique id too large");

// The rendezvous' wire format: the hello a rank (or a forwarding root) sends to a
// root, followed by PeerInfo entries; the root's answer is the same with every rank.
constexpr int32_t kMaxRanks = 1 << 24;
struct HelloHeader {
  int32_t nranks;
  int32_t entries;
  int32_t expected;  // ranks the receiving root collects before it answers or forwards
  int32_t forward;   // nonzero: the receiving root forwards to the first root instead of answering
  uint64_t firstMagic;
  SockAddr firstRoot;
};

std::string packPeers(HelloHeader h, const std::vector<PeerInfo>& peers);
// Throws ncclRemoteError for anything a rank never sends (sizes, counts out of
// range); names in the entries are cut to end inside their arrays.
std::vector<PeerInfo> unpackPeers(const std::string& msg, HelloHeader* h);

// Makes a new id and starts this process's root thread for it.
ncclUniqueId createUniqueId();
// Reads an id; throws ncclInvalidArgument if it was not made by createUniqueId.
UniqueIdLayout parseUniqueId(const ncclUniqueId& id, int rank);

// Sends `self` to the root(s) and returns every rank's PeerInfo, by rank.
// With several ids (ncclCommInitRankScalable), rank r reports to root
// r * nIds / nranks, and the other roots forward their ranks to the first.
std::vector<PeerInfo> rendezvous(const std::vector<UniqueIdLayout>& ids, int nranks, const PeerInfo& self);

class Bootstrap {
 public:
  Bootstrap(uint64_t magic, int rank, std::vector<SockAddr> addrs, WaitCheck check = {});

  int rank() const { return rank_; }
  int size() const { return static_cast<int>(addrs_.size()); }
  // True once the bootstrap connection this process keeps to `peer`'s process was
  // closed by it (the process exited); false while open or where none was made.
  bool peerGone(int peer) const;
  uint64_t magic() const { return magic_; }

  void send(int peer, MsgKind kind, uint64_t seq, const std::string& payload);
  // `extra` is consulted too while waiting (a stopped communicator opens no links).
  // `graceSec` is added to STRATA_TIMEOUT (a rank waiting for a hub lets the hub time out first and say why).
  std::string recv(int peer, MsgKind kind, uint64_t seq, const WaitCheck& extra = {}, double graceSec = 0);
  // Failure reports (bootstrap_failure.cc). Tells every other rank (but `skip`) why
  // this rank fails an operation, and which rank it was waiting for (-1: none), best
  // effort within `budgetSec` in all: a rank that sees this one give up can say why.
  void tellFailure(const std::string& why, int skip, double budgetSec, int waitingFor = -1);
  struct FailureNote {
    int from = -1;        // the reporting rank (of this communicator, or of a kin)
    int waitingFor = -1;  // whom it was waiting for when it gave up
    std::string why;
  };
  // A report on this communicator or a parent or child of it; false when none came.
  // (A rank that gave up on a child says why to the ranks waiting for it on the parent.)
  // Waits up to `waitSec` for one (its post office files a report just after acknowledging it).
  bool takeFailure(FailureNote* note, double waitSec = 0);
  // After this rank timed out waiting for `peer`: follows, through the other ranks'
  // reports for up to `windowSec`, who waits for whom, and names the end of the chain
  // ("rank 3, which waits for rank 2, which sent no report"), or the cycle.
  std::string describeWait(int peer, double windowSec);
  struct Kin {
    uint64_t magic;
    int rank;
  };
  void addKin(const Kin& k);  // this rank is `k.rank` of the parent or child communicator `k.magic`
  std::vector<Kin> kin() const;
  // Every rank's blob, by rank. Collective: all ranks call it in the same order.
  std::vector<std::string> allGather(const std::string& mine);
  void barrier() { allGather(std::string()); }
  // Replaces what waits consult (a child drops its parent's abort check after init).
  void setCheck(WaitCheck check) { check_ = std::move(check); }
  // A wait fails once `epoch` moves past the value it had when the wait began (the
  // communicator was stopped: abort, revoke); `why` says by what.
  void setStopSignal(const std::atomic<uint64_t>* epoch, std::function<std::string()> why) {
    stopEpoch_ = epoch;
    stopWhy_ = std::move(why);
  }

 private:
  uint64_t magic_;
  int rank_;
  std::vector<SockAddr> addrs_;
  WaitCheck waitCheck() const;  // check_ plus the stop signal, for one wait
  void checkAlive(int peer);  // throws once peer's process exited or another rank reported a failure
  const std::vector<int>& otherProcesses();  // one rank of each other process, for checkAlive
  std::vector<int> otherProcesses_;
  bool otherProcessesKnown_ = false;
  double nextMemberCheck_ = 0;  // when checkAlive next looks at every member, not only the awaited one
  bool collective_ = false;     // in an all-gather: every member's exit dooms it
  WaitCheck check_;
  const std::atomic<uint64_t>* stopEpoch_ = nullptr;
  std::function<std::string()> stopWhy_;
  uint64_t collectiveSeq_ = 0;
  mutable std::mutex kinMutex_;
  std::vector<Kin> kin_;  // the most recent kStoredKin
};

// Length-prefixed packing of a list of blobs.
std::string packBlobs(const std::vector<std::string>& blobs);
std::vector<std::string> unpackBlobs(const std::string& packed);

}  // namespace strata::core
