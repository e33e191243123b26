#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "algorithms/one_shot/one_shot_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::one_shot {
namespace {

class OneShotTask final : public Task {
 public:
  explicit OneShotTask(OneShotArgs a)
      : a_(std::move(a)), to_(*a_.to), from_(*a_.from), n_(static_cast<int>(to_.size())), esize_(device::dtypeSize(a_.type)),
        in_(n_) {
    chunk_ = std::max<size_t>(1, a_.chunkBytes / esize_);
  }

  bool progress() override {
    bool moved = false;
    while (!done()) {
      size_t begin = chunkIndex_ * chunk_;
      size_t count = std::min(chunk_, a_.count - begin);
      if (!in_[a_.rank]) {  // this rank's share, multiplied once for every peer
        device::prepare(a_.scratch, a_.sendbuff + begin * esize_, count, a_.type, a_.op);
        in_[a_.rank] = a_.scratch;
      }
      moved |= sendAll(count);
      if (!receivedAll(count) || sent_ < n_ - 1) break;
      device::reduceInOrder(a_.recvbuff + begin * esize_, in_.data(), n_, count, a_.type, a_.op);
      for (int j = 0; j < n_; ++j)
        if (j != a_.rank) from_[j]->release();
      std::fill(in_.begin(), in_.end(), nullptr);
      sent_ = 0;
      ++chunkIndex_;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return chunkIndex_ * chunk_ >= a_.count; }
  int waitingOn() const override { return blocked_.peer; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override { return blocked_.aborted(); }

 private:
  // Sends to rank+1, rank+2, ... in turn (so the ranks do not all write to rank 0
  // first), stopping at the first peer whose FIFO is full: sent_ says how far it got.
  bool sendAll(size_t count) {
    bool moved = false;
    for (; sent_ < n_ - 1; ++sent_) {
      int j = (a_.rank + 1 + sent_) % n_;
      void* slot = to_[j]->trySlot();
      if (!slot) {
        blocked_.on(j, to_[j]);
        break;
      }
      memcpy(slot, a_.scratch, count * esize_);
      to_[j]->post(count * esize_);
      moved = true;
    }
    return moved;
  }

  bool receivedAll(size_t count) {
    bool all = true;
    for (int j = 0; j < n_; ++j) {
      if (in_[j]) continue;
      size_t got = 0;
      in_[j] = from_[j]->tryData(&got);
      if (!in_[j]) {
        blocked_.on(j, from_[j]);
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

  OneShotArgs a_;
  const std::vector<transport::SendConnection*>& to_;
  const std::vector<transport::RecvConnection*>& from_;
  int n_;
  size_t esize_;
  size_t chunk_ = 0;
  size_t chunkIndex_ = 0;
  int sent_ = 0;                  // peers this chunk has gone to
  std::vector<const void*> in_;   // every rank's contribution to this chunk, by rank (this rank's: scratch)
  Blocker blocked_;
};

}  // namespace

std::unique_ptr<Task> makeOneShotTask(OneShotArgs args) { return std::make_unique<OneShotTask>(std::move(args)); }

}  // namespace strata::algorithms::one_shot
