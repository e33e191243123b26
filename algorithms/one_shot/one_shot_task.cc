#include "algorithms/one_shot/one_shot_task.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "device/dtypes.h"

namespace strata::algorithms::one_shot {

void Exchange::finish(char* recv, const void* const* inputs, size_t begin, size_t cnt, ncclDataType_t type,
                      const device::ReduceOp& op) const {
  if (coll == Collective::kReduce && rank != root) return;
  if (reduces()) return device::reduceInOrder(recv + begin * es, inputs, n, cnt, type, op);
  for (int s = 0; s < n; ++s) {
    if (!getsFrom(s)) continue;
    char* to = target(recv, s, begin);
    if (to != inputs[s]) memmove(to, inputs[s], cnt * es);  // in place, this rank's piece is there already
  }
}

namespace {

class OneShotTask final : public Task {
 public:
  explicit OneShotTask(OneShotArgs a)
      : a_(std::move(a)), x_(a_.x), to_(*a_.to), from_(*a_.from), in_(x_.n) {
    chunk_ = std::max<size_t>(1, a_.chunkBytes / x_.es);
  }

  bool progress() override {
    bool moved = false;
    while (!done()) {
      size_t begin = chunkIndex_ * chunk_;
      size_t count = std::min(chunk_, x_.count - begin);
      if (x_.keepsOwn() && !in_[x_.rank]) in_[x_.rank] = own(begin, count);
      moved |= sendAll(begin, count);
      if (!receivedAll(count) || sent_ < x_.n - 1) break;
      x_.finish(a_.recvbuff, in_.data(), begin, count, a_.type, a_.op);
      for (int j = 0; j < x_.n; ++j)
        if (j != x_.rank && x_.getsFrom(j)) from_[j]->release();
      std::fill(in_.begin(), in_.end(), nullptr);
      sent_ = 0;
      ++chunkIndex_;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return chunkIndex_ * chunk_ >= x_.count; }
  int waitingOn() const override { return blocked_.peer; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override { return blocked_.aborted(); }
  std::string connectionFailure() const override { return blocked_.failure(); }

 private:
  // This rank's contribution to its own result: prepared once into scratch for a
  // reduction (the op's pre-multiplication), else the input itself.
  const void* own(size_t begin, size_t count) {
    const char* src = x_.source(a_.sendbuff, x_.rank, begin);
    if (!x_.reduces()) return src;
    device::prepare(a_.scratch, src, count, a_.type, a_.op);
    return a_.scratch;
  }

  // Sends to rank+1, rank+2, ... in turn (so the ranks do not all write to rank 0
  // first), stopping at the first peer whose FIFO is full: sent_ says how far it got.
  bool sendAll(size_t begin, size_t count) {
    bool moved = false;
    for (; sent_ < x_.n - 1; ++sent_) {
      int j = (x_.rank + 1 + sent_) % x_.n;
      if (!x_.sendsTo(j)) continue;
      void* slot = to_[j]->trySlot();
      if (!slot) {
        blocked_.on(j, to_[j]);
        break;
      }
      const char* src = x_.source(a_.sendbuff, j, begin);
      if (x_.reduces())
        device::prepare(slot, src, count, a_.type, a_.op);
      else
        memcpy(slot, src, count * x_.es);
      to_[j]->post(count * x_.es);
      moved = true;
    }
    return moved;
  }

  bool receivedAll(size_t count) {
    bool all = true;
    for (int j = 0; j < x_.n; ++j) {
      if (in_[j] || j == x_.rank || !x_.getsFrom(j)) continue;
      size_t got = 0;
      in_[j] = from_[j]->tryData(&got);
      if (!in_[j]) {
        blocked_.on(j, from_[j]);
        all = false;
        continue;
      }
      STRATA_REQUIRE(got == count * x_.es, ncclInvalidUsage,
                     "%s: rank %d received %zu bytes from rank %d where %zu were expected: the ranks called "
                     "collectives in different orders or with different counts, types or roots",
                     a_.fn, x_.rank, got, j, count * x_.es);
    }
    return all;
  }

  OneShotArgs a_;
  const Exchange& x_;
  const std::vector<transport::SendConnection*>& to_;
  const std::vector<transport::RecvConnection*>& from_;
  size_t chunk_ = 0;
  size_t chunkIndex_ = 0;
  int sent_ = 0;                  // peers this chunk has gone to (or was not for)
  std::vector<const void*> in_;   // every rank's contribution to this chunk, by rank
  Blocker blocked_;
};

}  // namespace

std::unique_ptr<Task> makeOneShotTask(OneShotArgs args) { return std::make_unique<OneShotTask>(std::move(args)); }

}  // namespace strata::algorithms::one_shot
