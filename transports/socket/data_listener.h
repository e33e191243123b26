// The process's listening socket for data streams. A receiving connection
// collects here the streams its sender opens; whichever rank polls accepts
// every pending stream and files it by (token, stream), so no thread is needed.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <utility>

#include "base/socket.h"

namespace strata::transport::socket {

// The first bytes on every data stream.
struct StreamHello {
  uint64_t magic;
  uint64_t token;    // names the receiving connection
  uint32_t stream;   // this stream's index
  uint32_t streams;  // how many the sender opens
};
constexpr uint64_t kHelloMagic = 0x53545241544b3031ull;  // "STRATK01"

class DataListener {
 public:
  // The listener for this process, bound to `ip` (port chosen by the kernel) on first use.
  static DataListener& instance(const SockAddr& ip);
  SockAddr address() const { return addr_; }
  // A token for a new receiving connection; its streams are filed until forget().
  uint64_t newToken();
  // The connection is gone: closes its streams not yet taken, and drops any that come later.
  void forget(uint64_t token);
  // The stream `stream` of connection `token` if it has arrived, else -1. Never
  // blocks: it accepts whatever streams are pending and files them.
  int tryTake(uint64_t token, uint32_t stream);

 private:
  // An accepted stream whose hello has not all arrived: read as it comes, never
  // waited for, so a connection that sends nothing (a stranger, a port scan)
  // delays no rank; dropped after 5 s.
  struct Pending {
    StreamHello hello{};
    size_t got = 0;
    double since = 0;
  };
  explicit DataListener(const SockAddr& ip);
  void acceptPending();
  void readHellos();

  int fd_ = -1;
  SockAddr addr_;
  uint64_t nextToken_ = 1;
  std::mutex mu_;
  std::set<uint64_t> open_;  // tokens of live receiving connections: a hello with any other is dropped
  std::map<std::pair<uint64_t, uint32_t>, int> ready_;
  std::map<int, Pending> pending_;
};

}  // namespace strata::transport::socket
