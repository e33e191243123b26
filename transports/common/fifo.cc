#include "transports/common/fifo.h"

#include <unistd.h>

#include <algorithm>
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

// Fills an offer or exposure with where [p, p + bytes) is: its address, and the
// segment peers map when it is one (ncclMemAlloc's memory).
void describe(FifoOffer& o, const void* p, size_t bytes, Transfer kind, size_t region) {
  o.addr = reinterpret_cast<uintptr_t>(p);
  o.bytes = bytes;
  o.written = 0;
  o.kind = kind;
  o.region = region;
  SharedBufferRef ref;
  bool mapped = findShared(p, bytes, &ref) && ref.segment.size() < sizeof(o.segment);
  o.segmentOffset = mapped ? ref.offset : 0;
  snprintf(o.segment, sizeof(o.segment), "%s", mapped ? ref.segment.c_str() : "");
}

void checkRegistration(const void* p, size_t bytes, const Registration& reg) {
  STRATA_REQUIRE(reg.live(), ncclInvalidUsage, "memory at %p: its registration was deregistered", p);
  STRATA_REQUIRE(reg.covers(p, bytes), ncclInvalidUsage, "%zu bytes at %p lie outside their registration [%p, +%zu)",
                 bytes, p, reg.base(), reg.bytes());
}

class FifoSender final : public SendConnection, public PutSender, public GetSender {
 public:
  FifoSender(FifoHeader* h, std::shared_ptr<void> keep, std::shared_ptr<Doorbell> bell, std::unique_ptr<PeerMemory> w)
      : h_(h), keep_(std::move(keep)), bell_(std::move(bell)), writer_(std::move(w)), head_(h->head.load()),
        puts_(h->putsDone.load()), exposed_(h->exposed.load()), getsCompleted_(exposed_) {
    h->senderProbe = std::random_device()() | 1ull << 32;
    h->senderProbeAddr = reinterpret_cast<uintptr_t>(&h->senderProbe);
    h->senderPid = getpid();
  }

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
  GetSender* gets() override { return writer_ ? this : nullptr; }

  bool tryExpose(const void* src, size_t bytes, const Registration& reg, Transfer kind) override {
    STRATA_REQUIRE(kind != Transfer::kChained, ncclInternalError, "a read is point-to-point, never a ring's step");
    checkRegistration(src, bytes, reg);
    // Entries the receiver has not taken yet stay: pushed ones are complete here first.
    if (exposed_ - getsCompleted_ >= kMaxOffers || exposed_ - h_->getsDone.load(std::memory_order_acquire) >= kMaxOffers)
      return false;
    FifoOffer& o = h_->sources[exposed_ % kMaxOffers];
    describe(o, src, bytes, kind, reg.bytes());
    // One the receiver would ask for through the slots (not worth a read) goes now,
    // without the ask's round trip, where nothing exposed before it is still waiting
    // (its chunks would come first) and all of it fits in the slots free now.
    bool push = pendingSources_.empty() && !writer_->worthIt(o, bytes) && fitsNow(bytes);
    o.written = push ? kPutThroughSlots : 0;
    pendingSources_.push_back({static_cast<const char*>(src), bytes, push});
    h_->exposed.store(++exposed_, std::memory_order_release);
    STRATA_REQUIRE(!push || throughSlots(src, bytes), ncclInternalError, "an exposure that fit the free slots did not");
    bell_->ring();
    return true;
  }

  bool tryGetDone() override {
    STRATA_REQUIRE(!pendingSources_.empty(), ncclInternalError, "waiting for a read of memory never exposed");
    if (pendingSources_.front().pushed) return finishExposure();
    if (h_->getsDone.load(std::memory_order_acquire) > getsCompleted_) return finishExposure();
    // The receiver cannot read this process's memory, or asked for this exposure
    // through the slots (cheaper): the data goes through the slots.
    if (!h_->getsThroughSlots.load(std::memory_order_acquire) &&
        h_->slotExposures.load(std::memory_order_acquire) <= getsCompleted_)
      return false;
    const Source& f = pendingSources_.front();
    return throughSlots(f.src, f.bytes) && finishExposure();
  }

  bool helpRead() override {
    if (noHelp_ || pendingSources_.empty() || peerAborted()) return false;
    const auto& [src, bytes, pushed] = pendingSources_.front();
    if (pushed || !ChunkClaims::shareable(bytes)) return false;
    SharedRead& s = h_->share;
    long c = s.claims.claim(ChunkClaims::generation(getsCompleted_), ChunkClaims::chunks(bytes), false);
    if (c < 0) return false;
    size_t off = static_cast<size_t>(c) * kSharedChunkBytes;
    if (!writer_->write(s.to, off, src + off, std::min(kSharedChunkBytes, bytes - off))) {
      noHelp_ = true;  // this process cannot write there: the receiver reads the chunk itself
      s.handedBack.store(static_cast<uint64_t>(c) + 1, std::memory_order_relaxed);
    }
    s.helped.fetch_add(1, std::memory_order_release);
    bell_->ring();
    return true;
  }

  bool tryPut(const void* src, size_t bytes) override {
    if (!offered(puts_)) return false;
    FifoOffer& o = h_->offers[puts_ % kMaxOffers];
    STRATA_REQUIRE(bytes <= o.bytes, ncclInvalidUsage,
                   "one-sided write of %zu bytes into an offer of %llu: the ranks disagree on the message (counts, "
                   "types or the order of calls differ)",
                   bytes, static_cast<unsigned long long>(o.bytes));
    // Through the slots where this process cannot write into the offer (sticky: every
    // later put too), or where a write would cost more than the slots' two copies and
    // either the receiver drains the slots while it waits (an independent offer) or
    // the put is no larger than all the slots (a ring's: ringCanWait() says why that
    // cannot deadlock). The same answer when called again to finish it.
    bool slots = throughSlots_ || (!writer_->worthIt(o, bytes) && (o.independent() || ringCanWait(bytes)));
    if (!slots && !writer_->write(o, 0, src, bytes)) slots = throughSlots_ = true;
    // Marked before the first chunk goes: once the last is taken the receiver may
    // finish this offer and reuse its entry.
    o.written = bytes | (slots ? kPutThroughSlots : 0);
    if (slots && !throughSlots(src, bytes)) return false;
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
  bool finishExposure() {
    pendingSources_.pop_front();
    ++getsCompleted_;
    return true;
  }
  // Whether a ring's put of `bytes` may wait in throughSlots() for its receiver to
  // drain the slots. The receiver drains them only in the step that takes this
  // put, and only after the send of its own previous step, so a ring of ranks
  // each waiting on the next could deadlock. It cannot while a put fits in all
  // the slots. A ring's rank takes each input before it sends on; it keeps one
  // (a message, in one slot) only while it waits for a slot for a message of its
  // own, and a ring that sends messages too writes one slot per step. So a rank
  // that waits in its k-th put on a link, with slots too full for the rest of it,
  // waits on a receiver that has not taken its (k-1)-th input: one that is at most
  // at its own (k-1)-th send. Round a ring of waiting ranks that count would fall
  // strictly: impossible. A chain (broadcast, reduce) ends in a rank that only receives.
  bool ringCanWait(size_t bytes) const { return bytes <= static_cast<size_t>(h_->slots) * h_->slotBytes; }
  // Whether `bytes` fit in the slots the receiver has released, so that
  // throughSlots() posts them all at once.
  bool fitsNow(size_t bytes) {
    size_t chunks = std::max<size_t>(1, (bytes + h_->slotBytes - 1) / h_->slotBytes);  // 0 bytes: one empty chunk
    if (head_ - tailSeen_ + chunks > h_->slots) tailSeen_ = h_->tail.load(std::memory_order_acquire);
    return head_ - tailSeen_ + chunks <= h_->slots;
  }
  // Chunks through the slots; the receiver copies them into place.
  bool throughSlots(const void* src, size_t bytes) {
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
    return true;
  }

  FifoHeader* h_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<Doorbell> bell_;
  std::unique_ptr<PeerMemory> writer_;
  uint64_t head_;
  uint64_t tailSeen_ = head_;
  uint64_t puts_;            // puts issued (offers used)
  uint64_t offersSeen_ = 0;
  bool throughSlots_ = false;
  bool noHelp_ = false;      // a write into the receiver's memory failed: reads are the receiver's alone
  size_t slotOffset_ = 0;    // of the put or exposure going through the slots
  uint64_t exposed_, getsCompleted_;
  struct Source {
    const char* src;
    size_t bytes;
    bool pushed;  // sent through the slots when exposed (tryExpose)
  };
  std::deque<Source> pendingSources_;  // exposures not read yet, oldest first
};

class FifoReceiver final : public RecvConnection, public PutReceiver, public GetReceiver {
 public:
  FifoReceiver(FifoHeader* h, std::shared_ptr<void> keep, std::shared_ptr<Doorbell> bell,
               std::unique_ptr<PeerMemory> reader)
      : h_(h), keep_(std::move(keep)), bell_(std::move(bell)), reader_(std::move(reader)), tail_(h->tail.load()),
        posted_(h->offersPosted.load()), completed_(posted_), gets_(h->getsDone.load()) {}

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
  PutReceiver* puts() override { return reader_ ? this : nullptr; }
  GetReceiver* gets() override { return reader_ ? this : nullptr; }

  bool tryGet(void* dst, size_t bytes, size_t* got) override {
    if (shared_.bytes) {
      STRATA_REQUIRE(dst == shared_.dst, ncclInternalError, "a shared read resumed into another buffer");
      return sharedDone(got);
    }
    if (!getsThroughSlots_ && !slotGet_) {
      if (h_->exposed.load(std::memory_order_acquire) <= gets_) return false;
      const FifoOffer& from = h_->sources[gets_ % kMaxOffers];
      STRATA_REQUIRE(from.bytes <= bytes, ncclInvalidUsage,
                     "the sender exposed %llu bytes where this receive expects at most %zu (counts or types differ)",
                     static_cast<unsigned long long>(from.bytes), bytes);
      if (from.written & kPutThroughSlots) {  // the sender sent it through the slots as it exposed it
        slotGet_ = true;
      } else if (from.independent() && !reader_->worthIt(from, from.bytes)) {
        // Through the slots: the sender copies it in.
        slotGet_ = true;
        h_->slotExposures.store(gets_ + 1, std::memory_order_release);
        bell_->ring();
      } else if (ChunkClaims::shareable(from.bytes) && reader_->read(from, 0, dst, 0)) {
        return readShared(from, static_cast<char*>(dst), got);
      } else if (reader_->read(from, 0, dst, from.bytes)) {
        *got = from.bytes;
        countGet();
        return true;
      } else {
        getsThroughSlotsFromNow();
      }
    }
    if (!intoPlace(static_cast<char*>(dst), bytes, got)) return false;
    slotGet_ = false;
    countGet();
    return true;
  }

  bool tryOffer(void* dst, size_t bytes, const Registration& reg, Transfer kind) override {
    checkRegistration(dst, bytes, reg);
    if (posted_ - completed_ >= kMaxOffers) return false;
    describe(h_->offers[posted_ % kMaxOffers], dst, bytes, kind, reg.bytes());
    pending_.push_back({static_cast<char*>(dst), bytes});
    h_->offersPosted.store(++posted_, std::memory_order_release);
    bell_->ring();
    return true;
  }

  bool tryPutDone(size_t* bytes) override {
    STRATA_REQUIRE(!pending_.empty(), ncclInternalError, "waiting for a one-sided write that was never offered");
    if (writtenInPlace(bytes)) return finishOffer();
    if (!arrived()) return false;
    // Something arrived: where the sender wrote this put into place (unmarked), it
    // counted it before it posted anything later, a message or the chunks of a later
    // transfer through the slots, so the count is visible now (it may have landed
    // after the load above): checked again whatever arrived.
    if (writtenInPlace(bytes)) return finishOffer();
    // Otherwise the sender could not write into this memory: the put comes through the slots.
    Pending& p = pending_.front();
    if (intoPlace(p.dst, p.bytes, bytes)) return finishOffer();
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
  // The oldest offer was written straight into place (not through the slots, whose
  // chunks the sender posts before it counts the put done); *bytes gets its size.
  bool writtenInPlace(size_t* bytes) {
    if (slotBytes_ != 0 || h_->putsDone.load(std::memory_order_acquire) <= completed_) return false;
    uint64_t written = h_->offers[completed_ % kMaxOffers].written;
    if (written & kPutThroughSlots) return false;
    *bytes = written;
    return true;
  }
  // Reads the exposure `from` chunk by chunk from the front while the sender may
  // write chunks from the back (SharedRead); done once both ends' chunks are in. A
  // chunk this process cannot read sends the whole exposure through the slots, as
  // a failed whole read does: the sender's writes, all made before its next look
  // at the header (one thread), carry the same bytes the slots then bring.
  bool readShared(const FifoOffer& from, char* dst, size_t* got) {
    SharedRead& s = h_->share;
    uint64_t gen = ChunkClaims::generation(gets_);
    size_t n = ChunkClaims::chunks(from.bytes);
    describe(s.to, dst, from.bytes, Transfer::kIndependent, 0);  // written only by helpRead, never judged
    s.helped.store(0, std::memory_order_relaxed);
    s.handedBack.store(0, std::memory_order_relaxed);
    s.claims.open(gen);  // no ring: a sender awake finds it at its next idle sweep; one asleep stays so
    shared_ = {dst, from.bytes, 0};
    for (long c; (c = s.claims.claim(gen, n, true)) >= 0;)
      if (!readChunk(from, static_cast<size_t>(c))) return readThroughSlots(dst, from.bytes, got);
    shared_.back = s.claims.back();
    return sharedDone(got);
  }
  bool readChunk(const FifoOffer& from, size_t c) {
    size_t off = c * kSharedChunkBytes;
    return reader_->read(from, off, shared_.dst + off, std::min(kSharedChunkBytes, shared_.bytes - off));
  }
  bool sharedDone(size_t* got) {
    SharedRead& s = h_->share;
    if (s.helped.load(std::memory_order_acquire) < shared_.back) return false;
    s.claims.close();
    if (uint64_t c = s.handedBack.load(std::memory_order_relaxed))
      if (!readChunk(h_->sources[gets_ % kMaxOffers], c - 1)) return readThroughSlots(shared_.dst, shared_.bytes, got);
    *got = shared_.bytes;
    shared_ = {};
    countGet();
    return true;
  }
  bool readThroughSlots(char* dst, size_t bytes, size_t* got) {
    h_->share.claims.close();
    shared_ = {};
    getsThroughSlotsFromNow();
    if (!intoPlace(dst, bytes, got)) return false;
    countGet();
    return true;
  }
  // This process cannot read the sender's memory: the sender sends every exposure
  // through the slots from now on (sticky).
  void getsThroughSlotsFromNow() {
    getsThroughSlots_ = true;
    h_->getsThroughSlots.store(1, std::memory_order_release);
    bell_->ring();
  }
  // An exposure is complete, read or through the slots: the sender learns that it was
  // read, and may reuse its entry (a pushed one is complete for the sender first).
  void countGet() {
    h_->getsDone.store(++gets_, std::memory_order_release);
    bell_->ring();
  }
  bool finishOffer() {
    pending_.pop_front();
    ++completed_;
    return true;
  }
  // Copies the chunks of a put or exposure that came through the slots into `dst`;
  // true (and *bytes) once the last one is in.
  bool intoPlace(char* dst, size_t capacity, size_t* bytes) {
    while (arrived()) {
      uint64_t size = h_->sizes[tail_ % h_->slots];
      STRATA_REQUIRE(size & kPutThroughSlots, ncclInvalidUsage,
                     "a message arrived where a one-sided write or read was expected: the ranks planned this "
                     "operation differently (counts, types or the order of calls differ)");
      size_t n = size & kSizeMask;
      STRATA_REQUIRE(slotBytes_ + n <= capacity, ncclInvalidUsage, "a one-sided transfer overran its %zu bytes",
                     capacity);
      memcpy(dst + slotBytes_, slotData(h_, tail_), n);
      slotBytes_ += n;
      release();
      if (size & kLastChunk) {
        *bytes = slotBytes_;
        slotBytes_ = 0;
        return true;
      }
    }
    return false;
  }

  FifoHeader* h_;
  std::shared_ptr<void> keep_;
  std::shared_ptr<Doorbell> bell_;
  std::unique_ptr<PeerMemory> reader_;
  uint64_t tail_;
  uint64_t headSeen_ = tail_;
  uint64_t posted_, completed_;  // offers made and written
  std::deque<Pending> pending_;  // offers not written yet, oldest first
  size_t slotBytes_ = 0;         // of the transfer coming through the slots, so far
  uint64_t gets_;                // exposures read
  bool getsThroughSlots_ = false;
  bool slotGet_ = false;         // the exposure being read comes through the slots (asked for)
  struct {
    char* dst;
    size_t bytes;  // 0: no shared read in progress
    size_t back;   // chunks the sender claimed
  } shared_{};
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
                                               std::shared_ptr<Doorbell> receiverBell, std::unique_ptr<PeerMemory> writer) {
  return std::make_unique<FifoSender>(static_cast<FifoHeader*>(mem), std::move(keepAlive), std::move(receiverBell),
                                      std::move(writer));
}

std::unique_ptr<RecvConnection> makeFifoReceiver(void* mem, std::shared_ptr<void> keepAlive,
                                                 std::shared_ptr<Doorbell> senderBell, std::unique_ptr<PeerMemory> peer) {
  return std::make_unique<FifoReceiver>(static_cast<FifoHeader*>(mem), std::move(keepAlive), std::move(senderBell),
                                        std::move(peer));
}

}  // namespace strata::transport
