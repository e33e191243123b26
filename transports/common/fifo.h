// A ring of fixed-size slots in memory both ends can reach (heap for threads,
// shared memory for processes): the data structure under loopback and shm.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>

#include "transports/transport.h"

namespace strata::transport {

constexpr int kMaxSlots = 64;

struct FifoHeader {
  alignas(64) std::atomic<uint64_t> head;  // messages posted by the sender
  alignas(64) std::atomic<uint64_t> tail;  // messages released by the receiver
  alignas(64) std::atomic<uint32_t> senderAborted;
  std::atomic<uint32_t> receiverAborted;
  uint32_t slots;
  uint64_t slotBytes;
  alignas(64) uint64_t sizes[kMaxSlots];
};

// Bytes of memory a FIFO needs, header included.
size_t fifoBytes(size_t slotBytes, int slots);
// Initialises a FIFO in zeroed memory.
void fifoInit(void* mem, size_t slotBytes, int slots);

// `keepAlive` owns the memory (a heap block or a mapped segment) for this end.
std::unique_ptr<SendConnection> makeFifoSender(void* mem, std::shared_ptr<void> keepAlive,
                                               std::shared_ptr<Doorbell> receiverBell);
std::unique_ptr<RecvConnection> makeFifoReceiver(void* mem, std::shared_ptr<void> keepAlive,
                                                 std::shared_ptr<Doorbell> senderBell);

}  // namespace strata::transport
