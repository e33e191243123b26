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
    if (a_.mode == P2pTaskArgs::Mode::kPut) return a_.send ? putAll() : receivePut();
    if (a_.mode == P2pTaskArgs::Mode::kGet) return a_.send ? exposeAll() : receiveGet();
    bool moved = false;
    while (offset_ < a_.bytes) {
      if (!(a_.send ? sendOne() : recvOne())) break;
      moved = true;
    }
    return moved;
  }
  bool done() const override {
    if (a_.mode == P2pTaskArgs::Mode::kGet && a_.send) return read_;
    return offset_ == a_.bytes && (a_.mode != P2pTaskArgs::Mode::kPut || !a_.send || a_.send->puts()->putsComplete());
  }
  int waitingOn() const override { return a_.peer; }
  // Through the slots only: one-sided transfers use a registration made for the call.
  bool reusable() const override { return a_.mode == P2pTaskArgs::Mode::kSlots; }
  void rearm() override { offset_ = 0; }
  // Point-to-point receives of one-sided writes from one peer: the transport may
  // post their offers as one grouped receive (PutReceiver::tryOffer).
  bool overlaps(const Task& next) const override {
    auto* n = dynamic_cast<const P2pTask*>(&next);
    return offered_ && receivesPut() && n && n->receivesPut() && n->a_.recv == a_.recv;
  }
  bool startEarly() override {
    if (offered_) return false;
    if (receivesPut()) return offer();
    return exposes() && expose();
  }
  // Waiting for the receiver to read this rank's exposure: copy part of it for it.
  bool helpWhileIdle() override { return exposes() && offered_ && !read_ && a_.send->gets()->helpRead(); }
  const char* fn() const override { return a_.fn; }
  bool peerAborted() const override { return a_.send ? a_.send->peerAborted() : a_.recv->peerAborted(); }
  std::string connectionFailure() const override { return a_.send ? a_.send->failure() : a_.recv->failure(); }

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
  bool receivesPut() const { return a_.recv && a_.mode == P2pTaskArgs::Mode::kPut; }
  bool offer() { return offered_ = a_.recv->puts()->tryOffer(a_.buffer, a_.bytes, *a_.reg, a_.kind); }
  // Offered in one call, completed in a later one: the receives behind it in the
  // lane offer in between (overlaps), and may be posted with it.
  bool receivePut() {
    if (offset_ == a_.bytes) return false;
    if (!offered_) return offer();
    size_t got = 0;
    if (!a_.recv->puts()->tryPutDone(&got)) return false;  // waiting is not progress
    return received(got);
  }

  bool exposes() const { return a_.send && a_.mode == P2pTaskArgs::Mode::kGet; }
  bool expose() {
    if (!a_.send->gets()->tryExpose(a_.buffer, a_.bytes, *a_.reg, a_.kind)) return false;
    offset_ = a_.bytes;
    return offered_ = true;
  }
  bool exposeAll() {
    if (read_) return false;
    bool moved = false;
    if (!offered_ && !(moved = expose())) return false;
    if (a_.send->gets()->tryGetDone()) read_ = moved = true;
    return moved;
  }
  bool receiveGet() {
    size_t got = 0;
    if (offset_ == a_.bytes || !a_.recv->gets()->tryGet(a_.buffer, a_.bytes, &got)) return false;
    return received(got);
  }

  // A one-sided transfer (write or read) of `got` bytes is complete.
  bool received(size_t got) {
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
  bool read_ = false;  // the receiver has read the exposed buffer
};

}  // namespace

std::unique_ptr<Task> makeP2pTask(const P2pTaskArgs& args) { return std::make_unique<P2pTask>(args); }

}  // namespace strata::algorithms::pairwise
