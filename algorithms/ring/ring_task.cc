#include "algorithms/ring/ring_task.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "device/dtypes.h"

namespace strata::algorithms::ring {
namespace {

class RingTask final : public Task {
 public:
  explicit RingTask(const RingTaskArgs& a) : a_(a), sched_(a.params), esize_(device::dtypeSize(a.type)) {}

  bool progress() override {
    bool moved = false;
    while (next_ < sched_.numSteps()) {
      if (!haveStep_) {
        step_ = sched_.step(next_);
        haveStep_ = true;
      }
      if (!tryStep(step_)) break;
      haveStep_ = false;
      ++next_;
      moved = true;
    }
    return moved;
  }
  bool done() const override { return next_ == sched_.numSteps(); }
  int waitingOn() const override { return blocked_.peer; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override { return blocked_.aborted(); }

 private:
  bool tryStep(const algorithms::RingStep& s) {
    size_t bytes = s.count * esize_;
    const void* in = nullptr;
    if (s.recv) {
      size_t got = 0;
      in = a_.fromPrev->tryData(&got);
      if (!in) {
        blocked_.on(a_.prevRank, a_.fromPrev);
        return false;
      }
      STRATA_REQUIRE(got == bytes, ncclInvalidUsage,
                     "%s: rank %d received %zu bytes from rank %d where %zu were expected: the ranks called "
                     "collectives in different orders or with different counts, types or roots",
                     a_.fn, a_.rank, got, a_.prevRank, bytes);
    }
    void* out = nullptr;
    if (s.send) {
      out = a_.toNext->trySlot();
      if (!out) {
        blocked_.on(a_.nextRank, a_.toNext);
        return false;
      }
    }
    const char* src = a_.sendbuff + s.srcOffset * esize_;
    char* dst = a_.recvbuff + s.dstOffset * esize_;
    void* target = s.send ? out : static_cast<void*>(dst);
    if (s.recv && s.reduceLocal)
      device::reduce(target, in, src, s.count, a_.type, a_.op);
    else if (s.recv)
      copyOut(target, in, bytes, target == static_cast<void*>(dst));
    else
      device::prepare(target, src, s.count, a_.type, a_.op);
    if (s.final) device::finalize(target, s.count, a_.type, a_.op);
    bool alreadyInPlace = s.readLocal && dst == src;  // in-place all-gather or broadcast root
    if (s.send && s.writeOut && !alreadyInPlace) copyOut(dst, out, bytes, true);
    if (s.send) a_.toNext->post(bytes);
    if (s.recv) a_.fromPrev->release();
    return true;
  }

  void copyOut(void* to, const void* from, size_t bytes, bool toOutput) const {
    if (toOutput && a_.streamOutput)
      device::copyStreaming(to, from, bytes);
    else
      memcpy(to, from, bytes);
  }

  RingTaskArgs a_;
  algorithms::RingSchedule sched_;
  size_t esize_;
  size_t next_ = 0;
  bool haveStep_ = false;
  algorithms::RingStep step_;
  Blocker blocked_;
};

}  // namespace

std::unique_ptr<Task> makeRingTask(const RingTaskArgs& args) { return std::make_unique<RingTask>(args); }

}  // namespace strata::algorithms::ring
