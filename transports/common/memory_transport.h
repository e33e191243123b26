// What loopback and shm share: connections are FIFOs in regions both ends map,
// one-sided writes go straight into the receiver's offered memory, and shared
// regions serve the LL protocol. A memory transport supplies the regions and
// how its senders write into a receiver's memory.
#pragma once

#include "transports/common/fifo.h"
#include "transports/transport.h"

namespace strata::transport {

class MemoryTransport : public Transport, public RegionProvider {
 public:
  uint32_t capabilities() const override { return kSlots | kPut | kGet | kSharedRegions; }
  std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) override;
  std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) override;
  RegionProvider* regions() override { return this; }
  // Any host memory: the writer reaches it (CMA, a mapping, or the same address space).
  std::shared_ptr<Registration> registerMemory(void* base, size_t bytes) override {
    return std::make_shared<Registration>(base, bytes);
  }

 protected:
  // How one end of the FIFO at `h` reaches the other end's memory: the sender the
  // receiver's (`ofReceiver`), the receiver the sender's.
  virtual std::unique_ptr<PeerMemory> peerMemory(const ConnectRequest& req, FifoHeader* h, bool ofReceiver) = 0;
};

}  // namespace strata::transport
