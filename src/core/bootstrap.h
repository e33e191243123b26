// Out-of-band exchanges between the ranks of one communicator: the initial
// rendezvous at the root named by the unique id, then point-to-point messages
// and all-gathers through the ranks' post offices.
#pragma once

#include <cstdint>
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
  uint64_t magic() const { return magic_; }

  void send(int peer, MsgKind kind, uint64_t seq, const std::string& payload);
  std::string recv(int peer, MsgKind kind, uint64_t seq);
  // Every rank's blob, by rank. Collective: all ranks call it in the same order.
  std::vector<std::string> allGather(const std::string& mine);
  void barrier() { allGather(std::string()); }

 private:
  uint64_t magic_;
  int rank_;
  std::vector<SockAddr> addrs_;
  WaitCheck check_;
  uint64_t collectiveSeq_ = 0;
};

// Length-prefixed packing of a list of blobs.
std::string packBlobs(const std::vector<std::string>& blobs);
std::vector<std::string> unpackBlobs(const std::string& packed);

}  // namespace strata::core
