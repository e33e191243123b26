#include "algorithms/pairwise/p2p_task.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace strata::algorithms::pairwise {
namespace {

// Moves `bytes` through a connection in slot-sized messages, or as one one-sided write.
class P2pTask final : public Task {
 public:
  explicit P2pTask(const P2pTaskArgs& a) : a_(a) {}

  bool progress() override {
    if (a_.put) return a_.send ? putAll() : receivePut();
    bool moved = false;
    while (offset_ < a_.bytes) {
      if (!(a_.send ? sendOne() : recvOne())) break;
      moved = true;
    }
    return moved;
  }
  bool done() const override {
    return offset_ == a_.bytes && (!a_.put || !a_.send || a_.send->puts()->putsComplete());
  }
  int waitingOn() const override { return a_.peer; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override { return a_.send ? a_.send->peerAborted() : a_.recv->peerAborted(); }

 private:
  bool sendOne() {
    void* slot = a_.send->trySlot();
    if (!slot) return false;
    size_t n = std::min(a_.send->slotBytes(), a_.bytes - offset_);
    memcpy(slot, a_.buffer + offset_, n);
    a_.send->post(n);
    offset_ += n;
    return true;
  }
  bool recvOne() {
    size_t n = 0;
    const void* data = a_.recv->tryData(&n);
    if (!data) return false;
    STRATA_REQUIRE(n <= a_.bytes - offset_, ncclInvalidUsage,
                   "%s: rank %d: rank %d sent more than the %zu bytes this rank's receive expects (send and receive "
                   "counts or types differ)",
                   a_.fn, a_.rank, a_.peer, a_.bytes);
    memcpy(a_.buffer + offset_, data, n);
    a_.recv->release();
    offset_ += n;
    return true;
  }

  bool putAll() {
    if (offset_ == a_.bytes || !a_.send->puts()->tryPut(a_.buffer, a_.bytes)) return false;
    offset_ = a_.bytes;
    return true;
  }
  bool receivePut() {
    if (offset_ == a_.bytes) return false;
    if (!offered_) offered_ = a_.recv->puts()->tryOffer(a_.buffer, a_.bytes, *a_.reg);
    size_t got = 0;
    if (!offered_ || !a_.recv->puts()->tryPutDone(&got)) return offered_;
    STRATA_REQUIRE(got == a_.bytes, ncclInvalidUsage,
                   "%s: rank %d: rank %d sent %zu bytes where this rank's receive expects %zu (send and receive "
                   "counts or types differ)",
                   a_.fn, a_.rank, a_.peer, got, a_.bytes);
    offset_ = a_.bytes;
    return true;
  }

  P2pTaskArgs a_;
  size_t offset_ = 0;
  bool offered_ = false;
};

}  // namespace

std::unique_ptr<Task> makeP2pTask(const P2pTaskArgs& args) { return std::make_unique<P2pTask>(args); }

}  // namespace strata::algorithms::pairwise
