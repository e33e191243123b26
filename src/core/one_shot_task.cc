#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "core/tasks.h"
#include "device/dtypes.h"

namespace strata::core {
namespace {

class OneShotTask final : public Task {
 public:
  explicit OneShotTask(const OneShotArgs& a)
      : a_(a), to_(*a.to), from_(*a.from), n_(static_cast<int>(to_.size())), esize_(device::dtypeSize(a.type)),
        peers_(n_) {
    chunk_ = std::max<size_t>(1, a.chunkBytes / esize_);
    combine_ = a.op;
    combine_.preMultiply = false;  // peers' contributions arrive already multiplied
  }

  bool progress() override {
    bool moved = false;
    while (!done()) {
      size_t begin = chunkIndex_ * chunk_;
      size_t count = std::min(chunk_, a_.count - begin);
      moved |= sendAll(begin, count);
      if (!receivedAll(count) || sentCount_ < n_ - 1) break;
      combine(begin, count);
      std::fill(peers_.begin(), peers_.end(), PeerState{});
      sentCount_ = 0;
      ++chunkIndex_;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return chunkIndex_ * chunk_ >= a_.count; }
  int waitingOn() const override { return waitingOn_; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override {
    for (int j = 0; j < n_; ++j)
      if ((to_[j] && to_[j]->peerAborted()) || (from_[j] && from_[j]->peerAborted())) return true;
    return false;
  }

 private:
  // Starts with the next rank so that the ranks do not all write to rank 0 first.
  bool sendAll(size_t begin, size_t count) {
    bool moved = false;
    for (int k = 1; k < n_; ++k) {
      int j = (a_.rank + k) % n_;
      if (peers_[j].sent) continue;
      void* slot = to_[j]->trySlot();
      if (!slot) {
        waitingOn_ = j;
        continue;
      }
      device::prepare(slot, a_.sendbuff + begin * esize_, count, a_.type, a_.op);
      to_[j]->post(count * esize_);
      peers_[j].sent = true;
      ++sentCount_;
      moved = true;
    }
    return moved;
  }

  bool receivedAll(size_t count) {
    bool all = true;
    for (int j = 0; j < n_; ++j) {
      if (j == a_.rank || peers_[j].in) continue;
      size_t got = 0;
      peers_[j].in = from_[j]->tryData(&got);
      if (!peers_[j].in) {
        waitingOn_ = j;
        all = false;
        continue;
      }
      STRATA_REQUIRE(got == count * esize_, ncclInvalidUsage,
                     "%s: rank %d received %zu bytes from rank %d where %zu were expected: the ranks called "
                     "collectives in different orders or with different counts or types",
                     a_.fn, a_.rank, got, j, count * esize_);
    }
    return all;
  }

  // Sums in rank order 0..n-1 on every rank, then releases the peers' slots.
  void combine(size_t begin, size_t count) {
    device::prepare(a_.scratch, a_.sendbuff + begin * esize_, count, a_.type, a_.op);
    peers_[a_.rank].in = a_.scratch;
    char* dst = a_.recvbuff + begin * esize_;
    memcpy(dst, peers_[0].in, count * esize_);
    for (int j = 1; j < n_; ++j) device::reduce(dst, dst, peers_[j].in, count, a_.type, combine_);
    device::finalize(dst, count, a_.type, a_.op);
    for (int j = 0; j < n_; ++j)
      if (j != a_.rank) from_[j]->release();
  }

  struct PeerState {
    bool sent = false;
    const void* in = nullptr;
  };

  OneShotArgs a_;
  const std::vector<transport::SendConnection*>& to_;
  const std::vector<transport::RecvConnection*>& from_;
  int n_;
  size_t esize_;
  size_t chunk_ = 0;
  device::ReduceOp combine_;
  size_t chunkIndex_ = 0;
  std::vector<PeerState> peers_;  // by rank, for the chunk in flight
  int sentCount_ = 0;
  int waitingOn_ = -1;
};

}  // namespace

std::unique_ptr<Task> makeOneShotTask(const OneShotArgs& args) { return std::make_unique<OneShotTask>(args); }

}  // namespace strata::core
