#include "core/tasks.h"

#include <algorithm>
#include <cstring>

#include "base/error.h"
#include "device/dtypes.h"

namespace strata::core {
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

class PipelineTask final : public Task {
 public:
  explicit PipelineTask(std::vector<std::vector<std::unique_ptr<Task>>> tasks)
      : tasks_(std::move(tasks)), next_(tasks_.empty() ? 0 : tasks_[0].size(), 0) {}

  bool progress() override {
    bool moved = false;
    for (size_t k = 0; k < next_.size(); ++k) {
      while (next_[k] < tasks_.size() && (k == 0 || next_[k] < next_[k - 1])) {
        Task& t = *tasks_[next_[k]][k];
        moved |= t.progress();
        if (!t.done()) break;
        ++next_[k];
      }
    }
    return moved;
  }
  bool done() const override { return next_.empty() || next_.back() == tasks_.size(); }
  int waitingOn() const override { return current() ? current()->waitingOn() : -1; }
  bool peerAborted() const override {
    for (size_t k = 0; k < next_.size(); ++k)
      if (next_[k] < tasks_.size() && tasks_[next_[k]][k]->peerAborted()) return true;
    return false;
  }
  const char* fn() const override { return tasks_[0][0]->fn(); }

 private:
  // The earliest unfinished phase task: what the pipeline waits for.
  const Task* current() const {
    for (size_t k = 0; k < next_.size(); ++k)
      if (next_[k] < tasks_.size()) return tasks_[next_[k]][k].get();
    return nullptr;
  }

  std::vector<std::vector<std::unique_ptr<Task>>> tasks_;
  std::vector<size_t> next_;  // per phase: the first piece not done
};

}  // namespace

std::unique_ptr<Task> makeRingTask(const RingTaskArgs& args) { return std::make_unique<RingTask>(args); }
std::unique_ptr<Task> makeP2pTask(const P2pTaskArgs& args) { return std::make_unique<P2pTask>(args); }

std::unique_ptr<Task> makePipelineTask(std::vector<std::vector<std::unique_ptr<Task>>> tasks) {
  return std::make_unique<PipelineTask>(std::move(tasks));
}

}  // namespace strata::core
