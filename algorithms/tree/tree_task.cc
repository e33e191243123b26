#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/mutation.h"
#include "algorithms/tree/tree_task.h"
#include "device/dtypes.h"

namespace strata::algorithms::tree {
namespace {

class TreeTask final : public Task {
 public:
  explicit TreeTask(const TreeTaskArgs& a)
      : a_(a), esize_(device::dtypeSize(a.type)), chunks_(std::max<size_t>(1, (a.length + a.chunk - 1) / a.chunk)) {
    plain_ = a.op;
    plain_.preMultiply = false;  // for combining partial results already pre-multiplied
    plain_.postDivide = 0;
    up_ = a.mode == TreeMode::kBroadcast ? chunks_ : 0;  // broadcast only goes down
    down_ = a.mode == TreeMode::kReduce ? chunks_ : 0;   // reduce only goes up
  }

  bool progress() override {
    bool moved = false;
    for (;;) {
      bool step = false;
      if (up_ < chunks_ && stepUp()) step = true;
      if (down_ < up_ && stepDown()) step = true;  // broadcast starts with up_ == chunks_
      if (!step) return moved;
      moved = true;
    }
  }
  bool done() const override { return up_ == chunks_ && down_ == chunks_; }
  int waitingOn() const override { return up_ < chunks_ ? upBlocked_.peer : downBlocked_.peer; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override {
    return (up_ < chunks_ && upBlocked_.aborted()) || (down_ < chunks_ && downBlocked_.aborted());
  }
  // The connection of the peer waitingOn() names (a failure elsewhere reads as that peer's).
  std::string connectionFailure() const override {
    return up_ < chunks_ ? upBlocked_.failure() : downBlocked_.failure();
  }

 private:
  size_t countOf(size_t k) const { return std::min(a_.chunk, a_.length - std::min(a_.length, k * a_.chunk)); }
  size_t offsetOf(size_t k) const { return (a_.begin + k * a_.chunk) * esize_; }

  const void* received(transport::RecvConnection* from, int peer, size_t bytes, Blocker* blocked) {
    size_t got = 0;
    const void* d = from->tryData(&got);
    if (!d) {
      blocked->on(peer, from);
      return nullptr;
    }
    STRATA_REQUIRE(got == bytes, ncclInvalidUsage,
                   "%s: rank %d received %zu bytes from rank %d where %zu were expected: the ranks called "
                   "collectives in different orders or with different counts, types or roots",
                   a_.fn, a_.rank, got, peer, bytes);
    return d;
  }

  // Combines the children's partial results for chunk up_ with this rank's input
  // and passes the sum to the parent; the root keeps it as the result.
  bool stepUp() {
    size_t count = countOf(up_), bytes = count * esize_;
    const void* in[2] = {};
    for (size_t c = 0; c < a_.children.size(); ++c)
      if (!(in[c] = received(a_.fromChildren[c], a_.children[c], bytes, &upBlocked_))) return false;
    void* target = a_.parent >= 0 ? a_.toParent->trySlot() : a_.recvbuff + offsetOf(up_);
    if (!target) {
      upBlocked_.on(a_.parent, a_.toParent);
      return false;
    }
    const char* local = a_.sendbuff + offsetOf(up_);
    if (a_.children.empty()) device::prepare(target, local, count, a_.type, a_.op);
    for (size_t c = 0; c < a_.children.size(); ++c) {
      if (c == 0)
        device::reduce(target, in[0], local, count, a_.type, a_.op);
      else
        device::reduce(target, in[c], target, count, a_.type, plain_);
    }
    if (!a_.children.empty() && mutated(Mutation::kTreeChildTwice))  // the mutation stage's fault
      device::reduce(target, in[0], target, count, a_.type, plain_);
    if (a_.parent < 0) device::finalize(target, count, a_.type, a_.op);
    if (a_.parent >= 0) a_.toParent->post(bytes);
    for (auto* from : a_.fromChildren) from->release();
    ++up_;
    return true;
  }

  // Passes the result of chunk down_ to the children and keeps it in the output.
  bool stepDown() {
    size_t count = countOf(down_), bytes = count * esize_;
    char* out = a_.recvbuff + offsetOf(down_);
    const void* src = out;  // the all-reduce root computed it in place
    if (a_.parent >= 0 && !(src = received(a_.fromParent, a_.parent, bytes, &downBlocked_))) return false;
    if (a_.parent < 0 && a_.mode == TreeMode::kBroadcast) src = a_.sendbuff + offsetOf(down_);
    void* slots[2] = {};
    for (size_t c = 0; c < a_.children.size(); ++c)
      if (!(slots[c] = a_.toChildren[c]->trySlot())) {
        downBlocked_.on(a_.children[c], a_.toChildren[c]);
        return false;
      }
    for (size_t c = 0; c < a_.children.size(); ++c) {
      memcpy(slots[c], src, bytes);
      a_.toChildren[c]->post(bytes);
    }
    if (src != out) memcpy(out, src, bytes);
    if (a_.parent >= 0) a_.fromParent->release();
    ++down_;
    return true;
  }

  TreeTaskArgs a_;
  device::ReduceOp plain_;
  size_t esize_;
  size_t chunks_;
  size_t up_ = 0, down_ = 0;  // chunks done in each direction
  Blocker upBlocked_, downBlocked_;  // what the last step each way that could not move waited for
};

}  // namespace

std::unique_ptr<Task> makeTreeTask(const TreeTaskArgs& args) { return std::make_unique<TreeTask>(args); }

}  // namespace strata::algorithms::tree
