#include "transports/common/fifo.h"

#include <unistd.h>

#include <cstring>
#include <deque>
#include <new>
#include <random>

#include "base/error.h"
#include "base/shared_buffers.h"

namespace strata::transport {
namespace {

constexpr size_t kHeaderBytes = (sizeof(FifoHeader) + 4095) & ~size_t{4095};
// A put that went through the slots (the writer could not reach the receiver's
// memory): its chunks are marked, the last one too, in the size word.
constexpr uint64_t kPutThroughSlots = 1ull << 63;
constexpr uint64_t kLastChunk = 1ull << 62;
constexpr uint64_t kSizeMask = kLastChunk - 1;

char* slotData(FifoHeader* h, uint64_t index) {
  return reinterpret_cast<char*>(h) + kHeaderBytes + (index % h->slots) * h->slotBytes;
}

class FifoSender final : public SendConnection, public PutSender {
 public:
  FifoSender(FifoHeader* h, std::shared_ptr<void> keep, std::shared_ptr<Doorbell> bell, std::unique_ptr<PutWriter> w)
      : h_(h), keep_(std::move(keep)), bell_(std::move(bell)), writer_(std::move(w)), head_(h->head.load()),
        puts_(h->putsDone.load()) {}

  void* trySlot() override {
    if (head_ - tailSeen_ >= h_->slots) {
      tailSeen_ = h_->tail.load(std::memory_order_acquire);
      if (head_ - tailSeen_ >= h_->slots) return nullptr;
    }
    return slotData(h_, head_);
  }
  void post(size_t bytes) override { postSized(bytes); }
  size_t slotBytes() const override { return h_->slotBytes; }
  void abort() override {
    h_->senderAborted.store(1);
    bell_->ring();
  }
  bool peerAborted() const override { return h_->receiverAborted.load() != 0; }
  PutSender* puts() override { return writer_ ? this : nullptr; }

  bool tryPut(const void* src, size_t bytes) override {
    if (!offered(puts_)) return false;
    const FifoOffer& o = h_->offers[puts_ % kMaxOffers];
    STRATA_REQUIRE(bytes <= o.bytes, ncclInvalidUsage,
                   "one-sided write of %zu bytes into an offer of %llu: the ranks disagree on the message (counts, "
                   "types or the order of calls differ)",
                   bytes, static_cast<unsigned long long>(o.bytes));
    if (!throughSlots_ && !writer_->write(o, 0, src, bytes)) throughSlots_ = true;  // sticky: every later put too
    if (throughSlots_) return putThroughSlots(src, bytes);
    h_->offers[puts_ % kMaxOffers].written = bytes;
    h_->putsDone.store(++puts_, std::memory_order_release);
    bell_->ring();
    return true;
  }

 private:
  void postSized(uint64_t size) {
    h_->sizes[head_ % h_->slots] = size;
    h_->head.store(++head_, std::memory_order_release);
    bell_->ring();
  }
  bool offered(uint64_t k) {
    if (offersSeen_ > k) return true;
    offersSeen_ = h_->offersPosted.load(std::memory_order_acquire);
    return offersSeen_ > k;
  }
  // Chunks through the slots; the receiver copies them into its offer.
  bool putThroughSlots(const void* src, size_t bytes) {
    do {
      void* slot = trySlot();
      if (!slot) return false;
      size_t n = std::min<size_t>(h_->slotBytes, bytes - slotOffset_);
      memcpy(slot, static_cast<const char*>(src) + slotOffset_, n);
      slotOffset_ += n;
      bool last = slotOffset_ == bytes;
      postSized(n | kPutThroughSlots | (last ? kLastChunk : 0));
    } while (slotOffset_ < bytes);
    slotOffset_ = 0;
    ++puts_;  // the offer is used up (putsDone stays: the receiver counts the slot messages)
    return true;
  }

  FifoHeader* h_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<Doorbell> bell_;
  std::unique_ptr<PutWriter> writer_;
  uint64_t head_;
  uint64_t tailSeen_ = head_;
  uint64_t puts_;            // puts issued (offers used)
  uint64_t offersSeen_ = 0;
  bool throughSlots_ = false;
  size_t slotOffset_ = 0;    // of the put going through the slots
};

class FifoReceiver final : public RecvConnection, public PutReceiver {
 public:
  FifoReceiver(FifoHeader* h, std::shared_ptr<void> keep, std::shared_ptr<Doorbell> bell, bool puts)
      : h_(h), keep_(std::move(keep)), bell_(std::move(bell)), puts_(puts), tail_(h->tail.load()),
        posted_(h->offersPosted.load()), completed_(posted_) {}

  const void* tryData(size_t* bytes) override {
    if (!arrived()) return nullptr;
    uint64_t size = h_->sizes[tail_ % h_->slots];
    STRATA_REQUIRE(!(size & kPutThroughSlots), ncclInvalidUsage,
                   "a one-sided write arrived where a message was expected: the ranks planned this operation "
                   "differently (counts, types or the order of calls differ)");
    *bytes = size;
    return slotData(h_, tail_);
  }
  void release() override {
    h_->tail.store(++tail_, std::memory_order_release);
    bell_->ring();
  }
  void abort() override {
    h_->receiverAborted.store(1);
    bell_->ring();
  }
  bool peerAborted() const override { return h_->senderAborted.load() != 0; }
  PutReceiver* puts() override { return puts_ ? this : nullptr; }

  bool tryOffer(void* dst, size_t bytes, const Registration& reg) override {
    STRATA_REQUIRE(reg.live(), ncclInvalidUsage, "offer of %p: its registration was deregistered", dst);
    STRATA_REQUIRE(reg.covers(dst, bytes), ncclInvalidUsage,
                   "offer of %zu bytes at %p lies outside its registration [%p, +%zu)", bytes, dst, reg.base(),
                   reg.bytes());
    if (posted_ - completed_ >= kMaxOffers) return false;
    FifoOffer& o = h_->offers[posted_ % kMaxOffers];
    o.addr = reinterpret_cast<uintptr_t>(dst);
    o.bytes = bytes;
    o.written = 0;
    SharedBufferRef ref;
    bool mapped = findShared(dst, bytes, &ref) && ref.segment.size() < sizeof(o.segment);
    o.segmentOffset = mapped ? ref.offset : 0;
    snprintf(o.segment, sizeof(o.segment), "%s", mapped ? ref.segment.c_str() : "");
    pending_.push_back({static_cast<char*>(dst), bytes});
    h_->offersPosted.store(++posted_, std::memory_order_release);
    bell_->ring();
    return true;
  }

  bool tryPutDone(size_t* bytes) override {
    STRATA_REQUIRE(!pending_.empty(), ncclInternalError, "waiting for a one-sided write that was never offered");
    if (h_->putsDone.load(std::memory_order_acquire) > completed_) {
      *bytes = h_->offers[completed_ % kMaxOffers].written;
      return finishOffer();
    }
    while (arrived()) {  // the sender could not write into this memory: the put comes through the slots
      uint64_t size = h_->sizes[tail_ % h_->slots];
      // ... unless the put landed after putsDone was read, and this message is the
      // sender's next one: having seen it (acquire), the put's count is visible now.
      if (!(size & kPutThroughSlots) && h_->putsDone.load(std::memory_order_acquire) > completed_) {
        *bytes = h_->offers[completed_ % kMaxOffers].written;
        return finishOffer();
      }
      STRATA_REQUIRE(size & kPutThroughSlots, ncclInvalidUsage,
                     "a message arrived where a one-sided write was expected: the ranks planned this operation "
                     "differently (counts, types or the order of calls differ)");
      size_t n = size & kSizeMask;
      Pending& p = pending_.front();
      STRATA_REQUIRE(slotBytes_ + n <= p.bytes, ncclInvalidUsage, "a one-sided write overran its offer of %zu bytes",
                     p.bytes);
      memcpy(p.dst + slotBytes_, slotData(h_, tail_), n);
      slotBytes_ += n;
      release();
      if (size & kLastChunk) {
        *bytes = slotBytes_;
        slotBytes_ = 0;
        return finishOffer();
      }
    }
    return false;
  }

 private:
  struct Pending {
    char* dst;
    size_t bytes;
  };
  bool arrived() {
    if (headSeen_ != tail_) return true;
    headSeen_ = h_->head.load(std::memory_order_acquire);
    return headSeen_ != tail_;
  }
  bool finishOffer() {
    pending_.pop_front();
    ++completed_;
    return true;
  }

  FifoHeader* h_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<Doorbell> bell_;
  bool puts_;
  uint64_t tail_;
  uint64_t headSeen_ = tail_;
  uint64_t posted_, completed_;  // offers made and written
  std::deque<Pending> pending_;  // offers not written yet, oldest first
  size_t slotBytes_ = 0;         // of the oldest offer, written through the slots so far
};

}  // namespace

size_t fifoBytes(size_t slotBytes, int slots) { return kHeaderBytes + slotBytes * static_cast<size_t>(slots); }

void fifoInit(void* mem, size_t slotBytes, int slots) {
  auto* h = new (mem) FifoHeader();
  h->slots = static_cast<uint32_t>(slots);
  h->slotBytes = slotBytes;
  h->receiverPid = getpid();
  h->probeAddr = reinterpret_cast<uintptr_t>(&h->probe);
  h->probe = std::random_device()() | 1ull << 32;
}

std::unique_ptr<SendConnection> makeFifoSender(void* mem, std::shared_ptr<void> keepAlive,
                                               std::shared_ptr<Doorbell> receiverBell,
                                               std::unique_ptr<PutWriter> writer) {
  return std::make_unique<FifoSender>(static_cast<FifoHeader*>(mem), std::move(keepAlive), std::move(receiverBell),
                                      std::move(writer));
}

std::unique_ptr<RecvConnection> makeFifoReceiver(void* mem, std::shared_ptr<void> keepAlive,
                                                 std::shared_ptr<Doorbell> senderBell, bool puts) {
  return std::make_unique<FifoReceiver>(static_cast<FifoHeader*>(mem), std::move(keepAlive), std::move(senderBell),
                                        puts);
}

}  // namespace strata::transport
