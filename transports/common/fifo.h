// A ring of fixed-size slots in memory both ends can reach (heap for threads,
// shared memory for processes): the data structure under loopback and shm. Its
// header also carries the receiver's offers for one-sided writes: where the
// sender's next puts go, each followed by a completion count the receiver polls.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "transports/common/chunk_claims.h"
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
  Transfer kind;     // what the transfer belongs to (PutReceiver::tryOffer, GetSender::tryExpose)
  uint64_t region;   // the registration the transfer's memory lies in: the whole transfer it is a piece of
  char segment[48];  // "" when not mapped

  // Nothing the other end sends depends on this transfer completing: it may go
  // through the slots, which needs the receiver to drain them meanwhile.
  bool independent() const { return kind != Transfer::kChained; }
  // Both ends copy anyway (a ring's write, a balanced read): a second copy through the
  // slots takes no core that would be idle.
  bool bothCopy() const { return kind != Transfer::kIndependent; }
};

// A large read that both ends copy (ChunkClaims): the receiver reads chunks from
// the front, the sender writes chunks from the back into `to` once it has nothing
// else to do. A root serving a scatter's or a broadcast's reader so lends it the
// core that would otherwise wait.
struct SharedRead {
  alignas(64) ChunkClaims claims;
  alignas(64) std::atomic<uint64_t> helped;  // back chunks the sender finished (written, or handed back)
  std::atomic<uint64_t> handedBack;          // 1 + the back chunk the sender could not write (0: none)
  FifoOffer to;                              // the receiver's destination
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
  // One-sided reads: the sender exposes its memory, the receiver copies it out.
  alignas(64) std::atomic<uint64_t> exposed;    // by the sender
  alignas(64) std::atomic<uint64_t> getsDone;   // by the receiver: exposures read
  std::atomic<uint32_t> getsThroughSlots;       // by the receiver: it cannot read the sender's memory
  std::atomic<uint64_t> slotExposures;          // by the receiver: N asks for exposure N - 1 through the slots
  alignas(64) int32_t senderPid;                // set when the sender connects
  uint64_t senderProbeAddr;
  uint64_t senderProbe;
  FifoOffer sources[kMaxOffers];
  SharedRead share;  // the read in progress, when it is split between the ends
};

// How one end reaches the other end's memory: writes into the receiver's offers
// (puts), reads out of the sender's exposures (gets). False when this process
// cannot reach it; the data then goes through the slots instead.
class PeerMemory {
 public:
  virtual ~PeerMemory() = default;
  virtual bool write(const FifoOffer& to, size_t offset, const void* src, size_t bytes) = 0;
  virtual bool read(const FifoOffer& from, size_t offset, void* dst, size_t bytes) = 0;
  // Whether moving `bytes` into or out of `o` this way costs less than the two copies
  // through the slots (false: the FIFO sends that transfer through the slots).
  virtual bool worthIt(const FifoOffer& o, size_t bytes) const {
    (void)o, (void)bytes;
    return true;
  }
};
using PutWriter = PeerMemory;

// Bytes of memory a FIFO needs, header included.
size_t fifoBytes(size_t slotBytes, int slots);
// Initialises a FIFO in zeroed memory; the receiver's pid and address go in the header.
void fifoInit(void* mem, size_t slotBytes, int slots);

// `keepAlive` owns the memory (a heap block or a mapped segment) for this end;
// a sender without a writer has no one-sided writes.
// `peer` reaches the other end's memory (null: no one-sided writes or reads).
std::unique_ptr<SendConnection> makeFifoSender(void* mem, std::shared_ptr<void> keepAlive,
                                               std::shared_ptr<Doorbell> receiverBell, std::unique_ptr<PeerMemory> peer);
std::unique_ptr<RecvConnection> makeFifoReceiver(void* mem, std::shared_ptr<void> keepAlive,
                                                 std::shared_ptr<Doorbell> senderBell, std::unique_ptr<PeerMemory> peer);

}  // namespace strata::transport
