// The only view of a transport that the algorithms and the executor get.
//
// A connection is one-way, from a sender rank to a receiver rank, and carries
// a sequence of messages of at most slotBytes() each through a ring of slots
// in staging memory that the receiver owns. Both ends poll without blocking;
// when neither can move, the executor sleeps on its rank's doorbell, which the
// other end rings after every post or release.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/doorbell.h"
#include "base/peer_info.h"

namespace strata::transport {

class SendConnection {
 public:
  virtual ~SendConnection() = default;
  // The next free slot, or nullptr while the receiver still holds them all.
  virtual void* trySlot() = 0;
  // Publishes the slot from trySlot() holding `bytes` bytes.
  virtual void post(size_t bytes) = 0;
  virtual size_t slotBytes() const = 0;
  // Marks the connection failed so that the receiver stops waiting.
  virtual void abort() = 0;
  // True when the receiver marked the connection failed.
  virtual bool peerAborted() const = 0;
  // True when every posted message has left this process (or can never leave,
  // because the connection failed). Memory transports are flushed at post().
  virtual bool flushed() { return true; }
};

class RecvConnection {
 public:
  virtual ~RecvConnection() = default;
  // The oldest unread message, or nullptr when none has arrived.
  virtual const void* tryData(size_t* bytes) = 0;
  // Frees the message from tryData() for the sender to reuse.
  virtual void release() = 0;
  virtual void abort() = 0;
  virtual bool peerAborted() const = 0;
};

// What both ends know when they set up a connection.
struct ConnectRequest {
  const PeerInfo* self = nullptr;
  const PeerInfo* peer = nullptr;
  size_t slotBytes = 0;
  int slots = 0;
};

// Memory the receiver owns and the sender maps, for protocols that store data
// straight into it (the LL protocol's flag-tagged words). Zero-filled.
struct SharedRegion {
  void* data = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> keepAlive;    // the heap block or mapped segment
  std::shared_ptr<Doorbell> peerBell;  // rung after storing into (or reading from) the region
};

class Transport {
 public:
  virtual ~Transport() = default;
  virtual const char* name() const = 0;
  // True when this transport can link these two ranks.
  virtual bool canConnect(const PeerInfo& self, const PeerInfo& peer) const = 0;
  // Receiver side: allocates the staging memory; `handle` is sent to the sender.
  virtual std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) = 0;
  // Sender side, given the receiver's handle.
  virtual std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) = 0;
  // True when both ends reach the staging memory directly (loopback, shm); only
  // then do createRegion / attachRegion work.
  virtual bool sharesMemory() const { return false; }
  // Receiver side: a new region of `bytes`; `handle` is sent to the sender.
  virtual SharedRegion createRegion(const ConnectRequest& req, size_t bytes, std::string* handle);
  // Sender side, given the receiver's handle.
  virtual SharedRegion attachRegion(const ConnectRequest& req, const std::string& handle);
};

// A transport whose connections are FIFOs in shared regions.
class MemoryTransport : public Transport {
 public:
  bool sharesMemory() const override { return true; }
  std::unique_ptr<RecvConnection> listen(const ConnectRequest& req, std::string* handle) override;
  std::unique_ptr<SendConnection> connect(const ConnectRequest& req, const std::string& handle) override;
};

// Transports in priority order, minus those the configuration disables.
const std::vector<Transport*>& transports();

// Moves data on connections that need the ranks' threads to progress them
// (sockets); returns false when the process has none. Called on every sweep.
bool progressBackground();
// True while such connections exist: a waiting rank must poll, not sleep on its doorbell.
bool needsPolling();

// The first transport that can connect the pair; throws naming both ranks if none can.
Transport& selectTransport(const PeerInfo& self, const PeerInfo& peer);

}  // namespace strata::transport
