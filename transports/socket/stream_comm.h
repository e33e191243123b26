// One connection of Strata's TCP network (socket_network.h), either end: the
// NCCL_SOCKET_NTHREADS x NCCL_NSOCKS_PERTHREAD non-blocking streams between two
// processes, moved by whoever calls (no helper thread competes for the cores).
// Requests are served in the order they were posted, as NCCL's socket network
// serves them. Stream 0 carries a header (size, tag) before each message; a
// message under 64 KiB travels whole on stream 0, a larger one in equal parts on
// every stream. Not thread-safe: the net transport calls it under its connection's lock.
#pragma once

#include <sys/uio.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "base/error.h"

namespace strata::transport::socket {

struct WireHeader {
  uint64_t bytes;
  int32_t tag;
  uint32_t magic;
};
constexpr uint32_t kHeaderMagic = 0x53544d47;  // "STMG": a stream that does not carry it is not Strata's

class StreamComm {
 public:
  static constexpr size_t kMaxRequests = 32;  // in flight per connection, as NCCL_NET_MAX_REQUESTS
  struct Request {
    StreamComm* comm;
    uint64_t seq;
    char* data;
    size_t cap;      // a send's size; the most a receive takes
    int tag;
    WireHeader hdr;  // what goes out, or what came in
    bool freed;
  };

  // Owns the fds. `peer` names the other end in errors.
  StreamComm(std::vector<int> fds, bool sender, std::string peer);
  ~StreamComm();
  StreamComm(const StreamComm&) = delete;
  StreamComm& operator=(const StreamComm&) = delete;

  // Null when kMaxRequests are in flight (call again once one is done).
  Request* post(void* data, size_t bytes, int tag);
  // Moves what the streams allow; true once r is done (r is then freed), with the
  // bytes it moved. Throws the connection's failure, the same one every time.
  bool test(Request* r, size_t* bytes);
  uint32_t streams() const { return static_cast<uint32_t>(fds_.size()); }

 private:
  struct Cursor {
    uint64_t msg = 0;  // the message this stream is on
    size_t off = 0;    // bytes of its share (header included) already moved
  };
  Request& at(uint64_t seq) { return ring_[seq % kMaxRequests]; }
  uint64_t end() const { return end_; }
  bool done(const Request& r) const;
  size_t streamBytes(uint32_t s, const Request& r) const;
  int remaining(uint32_t s, Request& r, size_t off, iovec* iov);
  [[noreturn]] void failWith(ncclResult_t code, const std::string& why);
  void pumpSend();
  void pumpRecv();
  bool sizeKnown(uint64_t m) const;
  void checkHeader(const Request& r);
  bool readSome(uint32_t s, Cursor& c, Request& r, size_t upto);
  bool received(uint32_t s, ssize_t r, const Cursor& c);
  void probeClosed();
  bool allClosed() const;

  std::vector<int> fds_;
  std::vector<Cursor> cursors_;
  std::vector<bool> closed_;  // per stream: the peer closed it between messages
  bool sender_;
  std::string peer_;
  std::array<Request, kMaxRequests> ring_{};  // requests [base_, end_) by seq
  uint64_t base_ = 0, end_ = 0;
  bool drained_ = false;   // the last test pumped and completed its request
  std::string failure_;    // why the connection failed, once it has
  ncclResult_t failCode_ = ncclSuccess;

  static constexpr size_t kStageBytes = 16 << 10;
  std::vector<char> stage_ = std::vector<char>(kStageBytes);
  size_t stageBegin_ = 0, stageEnd_ = 0;  // bytes of stream 0 read but not yet placed
};

}  // namespace strata::transport::socket
