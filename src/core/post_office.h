// The process's bootstrap endpoint: one TCP listener and a mailbox of
// messages keyed by (communicator magic, kind, source rank, sequence), so that
// bootstrap exchanges never depend on the receiving rank being in a call.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/clock.h"
#include "base/socket.h"

namespace strata::core {

enum class MsgKind : uint32_t {
  kRootHello = 1,  // rank(s) -> bootstrap root: PeerInfo entries
  kRootTable = 2,  // root -> rank: the full table, or an error text
  kGather = 3,     // rank -> hub in an all-gather
  kScatter = 4,    // hub -> rank in an all-gather
  kConnect = 5,    // receiver -> sender: a transport handle
  kRegion = 6,     // region owner -> the peer that maps it: a region handle
  kFailure = 7,    // a rank that failed an operation -> every other rank: why
  kTeardown = 8,   // a rank done with the device memory of another process it maps
};

// Ranks of one communicator may share a process (and so a mailbox): the key names both ends.
struct MsgKey {
  uint64_t magic = 0;
  MsgKind kind = MsgKind::kGather;
  int32_t src = -1;  // sending rank, -1 for a bootstrap root
  int32_t dst = -1;  // receiving rank, -1 for a bootstrap root
  uint64_t seq = 0;
  bool operator<(const MsgKey& o) const;
};

// Called while waiting; throws to end the wait early (abort, dead peer).
using WaitCheck = std::function<void()>;

class PostOffice {
 public:
  static PostOffice& instance();

  // Where peers reach this process (starts the listener on first use).
  SockAddr address();
  // Accepts kRootHello messages for this magic; others are refused, so a rank
  // holding a stale or corrupted unique id fails at once.
  void openRoot(uint64_t magic);
  void closeRoot(uint64_t magic);

  // Delivers a message; throws if the peer refuses it or cannot be reached.
  void send(const SockAddr& to, const MsgKey& key, const std::string& payload, const Deadline& deadline);
  // True once the connection this process keeps to `to` was closed by the other
  // end (its process exited); false while it is open or none was made.
  bool peerGone(const SockAddr& to);
  // Waits for the message with exactly this key.
  std::string receive(const MsgKey& key, const Deadline& deadline, const WaitCheck& check = {});
  // Takes a queued message of this magic and kind for `dst` from any sender, without waiting.
  bool tryTake(uint64_t magic, MsgKind kind, int dst, std::string* msg, int* src = nullptr);
  // Waits for any message of this magic and kind; fills in the key.
  std::string receiveAny(MsgKey* key, const Deadline& deadline);
  // Wakes every thread waiting for a message, so that waits whose check may now
  // throw (an abort, a stopped communicator) look at once rather than at their next
  // poll. A failure note (kFailure) filed here wakes them too.
  void wakeAll();
  // Drops queued messages addressed to one rank of a communicator that rank left.
  // Only that rank's: other ranks of the communicator may share this process.
  void discard(uint64_t magic, int rank);

  struct State;

 private:
  PostOffice() = default;
  State& state();
};

}  // namespace strata::core
