#include "algorithms/ring/ring_task.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "base/mutation.h"
#include "device/dtypes.h"

namespace strata::algorithms::ring {
namespace {

class RingTask final : public Task {
 public:
  explicit RingTask(const RingTaskArgs& a) : a_(a), sched_(a.params), esize_(device::dtypeSize(a.type)) {}

  bool progress() override {
    bool moved = offerAhead();
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
    // Every step is done; what is left is the last writes' completion on the next
    // link: that is what it waits on now, not the link of its last step's input.
    if (next_ == sched_.numSteps() && a_.putsOut && !a_.toNext->puts()->putsComplete())
      blocked_.on(a_.nextRank, a_.toNext);
    return moved;
  }
  bool done() const override {
    return next_ == sched_.numSteps() && (!a_.putsOut || a_.toNext->puts()->putsComplete());
  }
  int waitingOn() const override { return blocked_.peer; }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override { return blocked_.aborted(); }
  std::string connectionFailure() const override { return blocked_.failure(); }
  // Through the slots only: one-sided writes use a registration made for the call.
  bool reusable() const override { return !a_.putsIn && !a_.putsOut; }
  void rearm() override {
    next_ = offered_ = 0;
    in_ = nullptr;
    out_ = nullptr;
    inPut_ = computed_ = haveStep_ = false;
    blocked_ = Blocker();
  }

 private:
  // One-sided writes: a message that is a plain copy (it lands in the output:
  // all-gather, broadcast, the all-gather half of all-reduce) is written by the
  // sender straight into the receiver's output, where the link has them;
  // reductions go through the slots. The sender of a copy is the step that
  // writes its output, the receiver the step that does not reduce, so both ends
  // of a link agree on every message.
  bool putIn(const RingStep& s) const { return a_.putsIn && s.recv && !s.reduceLocal; }
  bool putOut(const RingStep& s) const { return a_.putsOut && s.send && s.writeOut; }

  // Offers the output ranges of the coming put receptions, a few ahead.
  bool offerAhead() {
    bool moved = false;
    for (; a_.putsIn && offered_ < sched_.numSteps(); ++offered_) {
      RingStep s = sched_.step(offered_);
      if (!putIn(s)) continue;
      // Chained: the ring forwards what it receives, so a group could wait on itself.
      if (!a_.fromPrev->puts()->tryOffer(a_.recvbuff + s.dstOffset * esize_, s.count * esize_, *a_.outputReg,
                                         transport::Transfer::kChained))
        break;
      moved = true;
    }
    return moved;
  }

  // Takes this step's inputs (a message in a slot, or a write already in the
  // output) and a slot for its output; false while one is missing.
  bool acquire(const RingStep& s, size_t bytes) {
    if (s.recv && !in_ && !inPut_) {
      size_t got = 0;
      bool ready = false;
      if (putIn(s)) {
        offerAhead();
        ready = inPut_ = offered_ > next_ && a_.fromPrev->puts()->tryPutDone(&got);
      } else {
        ready = (in_ = a_.fromPrev->tryData(&got)) != nullptr;
      }
      if (!ready) {
        blocked_.on(a_.prevRank, a_.fromPrev);
        return false;
      }
      STRATA_REQUIRE(got == bytes, ncclInvalidUsage,
                     "%s: rank %d received %zu bytes from rank %d where %zu were expected: the ranks called "
                     "collectives in different orders or with different counts, types or roots",
                     a_.fn, a_.rank, got, a_.prevRank, bytes);
    }
    if (s.send && !putOut(s) && !out_ && !(out_ = a_.toNext->trySlot())) {
      blocked_.on(a_.nextRank, a_.toNext);
      return false;
    }
    return true;
  }

  bool tryStep(const RingStep& s) {
    size_t bytes = s.count * esize_;
    const char* src = a_.sendbuff + s.srcOffset * esize_;
    char* dst = a_.recvbuff + s.dstOffset * esize_;
    if (!computed_) {
      if (!acquire(s, bytes)) return false;
      void* target = putOut(s) || !s.send ? static_cast<void*>(dst) : out_;
      if (in_ && s.reduceLocal)
        device::reduce(target, in_, src, s.count, a_.type, a_.op);
      else if (in_ && !skipSlot(s))
        copyOut(target, in_, bytes, target == static_cast<void*>(dst));
      else if (inPut_ && target != static_cast<void*>(dst))
        memcpy(target, dst, bytes);  // arrived in the output; the next link has no one-sided writes
      else if (!inPut_)
        device::prepare(target, src, s.count, a_.type, a_.op);
      if (s.final) device::finalize(target, s.count, a_.type, a_.op);
      bool alreadyInPlace = s.readLocal && dst == src;  // in-place all-gather or broadcast root
      if (out_ && s.writeOut && !alreadyInPlace) copyOut(dst, out_, bytes, true);
      if (out_) a_.toNext->post(bytes);
      if (in_) a_.fromPrev->release();
      in_ = nullptr;
      out_ = nullptr;
      inPut_ = false;
      computed_ = true;
    }
    if (putOut(s) && !a_.toNext->puts()->tryPut(dst, bytes)) {
      blocked_.on(a_.nextRank, a_.toNext);
      return false;
    }
    computed_ = false;
    return true;
  }

  // The mutation stage's fault: the second message that would land in the output
  // (the second loop of a pipelined ring) is dropped.
  bool skipSlot(const RingStep& s) {
    return mutated(Mutation::kSlotSkip) && s.writeOut && !s.send && !s.reduceLocal && ++landed_ == 2;
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
  size_t offered_ = 0;        // steps whose put reception has been offered (or that need none)
  const void* in_ = nullptr;  // this step's message, held until it is computed
  bool inPut_ = false;        // this step's input was written into the output
  void* out_ = nullptr;       // this step's slot to the next rank
  bool computed_ = false;     // this step's data is in place; only its put is left
  bool haveStep_ = false;
  int landed_ = 0;            // messages copied straight into the output (the mutation stage counts them)
  algorithms::RingStep step_;
  Blocker blocked_;
};

}  // namespace

std::unique_ptr<Task> makeRingTask(const RingTaskArgs& args) { return std::make_unique<RingTask>(args); }

}  // namespace strata::algorithms::ring
