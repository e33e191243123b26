#include "algorithms/pairwise/p2p_task.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"

namespace strata::algorithms::pairwise {
namespace {

// Moves `bytes` through a connection in slot-sized messages.
class P2pTask final : public Task {
 public:
  explicit P2pTask(const P2pTaskArgs& a) : a_(a) {}

  bool progress() override {
    bool moved = false;
    while (!done()) {
      if (!(a_.send ? sendOne() : recvOne())) break;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return offset_ == a_.bytes; }
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

  P2pTaskArgs a_;
  size_t offset_ = 0;
};

}  // namespace

std::unique_ptr<Task> makeP2pTask(const P2pTaskArgs& args) { return std::make_unique<P2pTask>(args); }

}  // namespace strata::algorithms::pairwise
