#include "transports/common/fifo.h"

#include <new>

namespace strata::transport {
namespace {

constexpr size_t kHeaderBytes = (sizeof(FifoHeader) + 4095) & ~size_t{4095};

char* slotData(FifoHeader* h, uint64_t index) {
  return reinterpret_cast<char*>(h) + kHeaderBytes + (index % h->slots) * h->slotBytes;
}

class FifoSender final : public SendConnection {
 public:
  FifoSender(FifoHeader* h, std::shared_ptr<void> keep, std::shared_ptr<Doorbell> bell)
      : h_(h), keep_(std::move(keep)), bell_(std::move(bell)), head_(h->head.load()) {}

  void* trySlot() override {
    if (head_ - tailSeen_ >= h_->slots) {
      tailSeen_ = h_->tail.load(std::memory_order_acquire);
      if (head_ - tailSeen_ >= h_->slots) return nullptr;
    }
    return slotData(h_, head_);
  }
  void post(size_t bytes) override {
    h_->sizes[head_ % h_->slots] = bytes;
    h_->head.store(++head_, std::memory_order_release);
    bell_->ring();
  }
  size_t slotBytes() const override { return h_->slotBytes; }
  void abort() override {
    h_->senderAborted.store(1);
    bell_->ring();
  }
  bool peerAborted() const override { return h_->receiverAborted.load() != 0; }

 private:
  FifoHeader* h_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<Doorbell> bell_;
  uint64_t head_;
  uint64_t tailSeen_ = head_;
};

class FifoReceiver final : public RecvConnection {
 public:
  FifoReceiver(FifoHeader* h, std::shared_ptr<void> keep, std::shared_ptr<Doorbell> bell)
      : h_(h), keep_(std::move(keep)), bell_(std::move(bell)), tail_(h->tail.load()) {}

  const void* tryData(size_t* bytes) override {
    if (headSeen_ == tail_) {
      headSeen_ = h_->head.load(std::memory_order_acquire);
      if (headSeen_ == tail_) return nullptr;
    }
    *bytes = h_->sizes[tail_ % h_->slots];
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

 private:
  FifoHeader* h_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<Doorbell> bell_;
  uint64_t tail_;
  uint64_t headSeen_ = tail_;
};

}  // namespace

size_t fifoBytes(size_t slotBytes, int slots) { return kHeaderBytes + slotBytes * static_cast<size_t>(slots); }

void fifoInit(void* mem, size_t slotBytes, int slots) {
  auto* h = new (mem) FifoHeader();
  h->slots = static_cast<uint32_t>(slots);
  h->slotBytes = slotBytes;
}

std::unique_ptr<SendConnection> makeFifoSender(void* mem, std::shared_ptr<void> keepAlive,
                                               std::shared_ptr<Doorbell> receiverBell) {
  return std::make_unique<FifoSender>(static_cast<FifoHeader*>(mem), std::move(keepAlive), std::move(receiverBell));
}

std::unique_ptr<RecvConnection> makeFifoReceiver(void* mem, std::shared_ptr<void> keepAlive,
                                                 std::shared_ptr<Doorbell> senderBell) {
  return std::make_unique<FifoReceiver>(static_cast<FifoHeader*>(mem), std::move(keepAlive), std::move(senderBell));
}

}  // namespace strata::transport
