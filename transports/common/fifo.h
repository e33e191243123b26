// A ring of fixed-size slots in memory both ends can reach (heap for threads,
// shared memory for processes): the data structure under loopback and shm. Its
// header also carries the receiver's offers for one-sided writes: where the
// sender's next puts go, each followed by a completion count the receiver polls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "transports/transport.h"

namespace strata::transport {

constexpr int kMaxSlots = 64;
constexpr int kMaxOffers = 32;

// Where one put goes: an address in the receiver's process, and, when the memory
// is a segment peers can map (ncclMemAlloc), the segment and offset.
struct FifoOffer {
  uint64_t addr;
  uint64_t bytes;
  uint64_t segmentOffset;
  uint64_t written;  // set by the sender before it counts the put done
  char segment[48];  // "" when not mapped
};

struct FifoHeader {
  alignas(64) std::atomic<uint64_t> head;  // messages posted by the sender
  alignas(64) std::atomic<uint64_t> tail;  // messages released by the receiver
  alignas(64) std::atomic<uint32_t> senderAborted;
  std::atomic<uint32_t> receiverAborted;
  uint32_t slots;
  uint64_t slotBytes;
  alignas(64) uint64_t sizes[kMaxSlots];   // a put carried through slots is marked kPutThroughSlots
  alignas(64) std::atomic<uint64_t> offersPosted;  // by the receiver
  alignas(64) std::atomic<uint64_t> putsDone;      // by the sender: offers written
  alignas(64) int32_t receiverPid;
  uint64_t probeAddr;  // the receiver's address of `probe`, for the sender's CMA check
  uint64_t probe;
  FifoOffer offers[kMaxOffers];
};

// How a sender writes a put into the receiver's memory; false when it cannot
// (then the put goes through the slots, and the receiver copies it into place).
class PutWriter {
 public:
  virtual ~PutWriter() = default;
  virtual bool write(const FifoOffer& to, size_t offset, const void* src, size_t bytes) = 0;
};

// Bytes of memory a FIFO needs, header included.
size_t fifoBytes(size_t slotBytes, int slots);
// Initialises a FIFO in zeroed memory; the receiver's pid and address go in the header.
void fifoInit(void* mem, size_t slotBytes, int slots);

// `keepAlive` owns the memory (a heap block or a mapped segment) for this end;
// a sender without a writer has no one-sided writes.
std::unique_ptr<SendConnection> makeFifoSender(void* mem, std::shared_ptr<void> keepAlive,
                                               std::shared_ptr<Doorbell> receiverBell,
                                               std::unique_ptr<PutWriter> writer);
std::unique_ptr<RecvConnection> makeFifoReceiver(void* mem, std::shared_ptr<void> keepAlive,
                                                 std::shared_ptr<Doorbell> senderBell, bool puts);

}  // namespace strata::transport
