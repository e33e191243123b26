// The socket transport, progressed by the ranks' own threads: every call on a
// connection, and every sweep of an executor, pushes and pulls whatever the
// non-blocking streams accept, so no helper thread competes for the cores.
#include "transports/socket/socket_transport.h"

#include <netinet/tcp.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <mutex>
#include <set>
#include <vector>

#include "base/config.h"
#include "base/error.h"
#include "base/log.h"
#include "transports/socket/data_listener.h"

namespace strata::transport::socket {
namespace {

// Messages below this travel whole on stream 0: splitting them only adds system calls.
constexpr size_t kSplitBytes = 64 << 10;
constexpr size_t kHeaderBytes = sizeof(uint64_t);  // stream 0 starts each message with its length

// The bytes [first, second) of a `bytes`-long message that stream i of k carries.
std::pair<size_t, size_t> part(size_t bytes, uint32_t i, uint32_t k) {
  if (bytes < kSplitBytes) return {i == 0 ? 0 : bytes, bytes};
  return {bytes * i / k, bytes * (i + 1) / k};
}

class SocketConnection;
std::mutex gLiveMutex;
std::set<SocketConnection*> gLive;
std::atomic<int> gLiveCount{0};

// A ring of slots in local memory and the streams that fill or drain it. The
// rank sees `head` (messages posted or arrived) and `tail` (messages sent or
// consumed); per stream, a cursor says how far it is through which message.
class SocketConnection {
 public:
  SocketConnection(const ConnectRequest& req, uint32_t streams)
      : slotBytes_(req.slotBytes), slots_(req.slots), memory_(slotBytes_ * slots_), sizes_(slots_),
        fds_(streams, -1), cursors_(streams), self_(req.self->rank), peer_(req.peer->rank) {
    std::lock_guard<std::mutex> lock(gLiveMutex);
    gLive.insert(this);
    gLiveCount.fetch_add(1);
  }
  virtual ~SocketConnection() {
    {
      std::lock_guard<std::mutex> lock(gLiveMutex);
      gLive.erase(this);
      gLiveCount.fetch_sub(1);
    }
    for (int fd : fds_)
      if (fd >= 0) close(fd);
  }

  // Moves what the streams allow without blocking, unless another thread is at
  // it. Only sends need this: a receive is pumped by the task that waits on it,
  // and polling idle receives costs a system call each per sweep.
  void progressIfFree() {
    if (!backlog_.load(std::memory_order_relaxed)) return;
    std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
    if (lock.owns_lock()) pump();
  }

 protected:
  struct Cursor {
    uint64_t msg = 0;  // the message this stream is on
    size_t off = 0;    // bytes of it (header included) already moved
  };

  virtual void pump() = 0;
  char* slot(uint64_t m) { return memory_.data() + (m % slots_) * slotBytes_; }
  uint32_t streams() const { return static_cast<uint32_t>(fds_.size()); }
  // Bytes stream s moves for message m: the header on stream 0, then its part.
  size_t streamBytes(uint32_t s, uint64_t m) const {
    auto [b, e] = part(sizes_[m % slots_], s, streams());
    return (s == 0 ? kHeaderBytes : 0) + (e - b);
  }
  // The iovecs for what remains of stream s's share of message m.
  int remaining(uint32_t s, uint64_t m, size_t off, iovec* iov) {
    auto [b, e] = part(sizes_[m % slots_], s, streams());
    int n = 0;
    size_t hdr = s == 0 ? kHeaderBytes : 0;
    if (off < hdr) iov[n++] = {reinterpret_cast<char*>(&sizes_[m % slots_]) + off, hdr - off};
    size_t done = off > hdr ? off - hdr : 0;
    if (e - b > done) iov[n++] = {slot(m) + b + done, e - b - done};
    return n;
  }
  // Marks the connection failed; quiet when the peer closed between messages
  // (how a connection ends when the peer destroys its communicator).
  void streamFailed(const char* what, bool orderly) {
    if (!failed_ && !orderly)
      STRATA_WARN(self_, "socket transport: stream with rank %d failed: %s (did the peer rank exit?)", peer_, what);
    failed_ = true;
  }
  void shutdownStreams() {
    for (int fd : fds_)
      if (fd >= 0) shutdown(fd, SHUT_RDWR);
  }

  size_t slotBytes_;
  int slots_;
  std::vector<char> memory_;
  std::vector<uint64_t> sizes_;  // per slot; the header bytes go straight in and out of here
  std::vector<int> fds_;
  std::vector<Cursor> cursors_;
  uint64_t head_ = 0, tail_ = 0;
  std::atomic<bool> backlog_{false};  // a send with bytes its streams have not taken yet
  bool failed_ = false;
  int self_, peer_;
  std::mutex mu_;
};

class SocketSend final : public SendConnection, public SocketConnection {
 public:
  SocketSend(const ConnectRequest& req, const SockAddr& to, uint64_t token, uint32_t streams)
      : SocketConnection(req, streams) {
    Deadline deadline(config().timeoutSec);
    for (uint32_t s = 0; s < streams; ++s) {
      try {
        // The receiver's data listener was up when it made the handle: a refusal means
        // its process is gone, so it is not retried until the timeout.
        fds_[s] = connectTo(to, deadline, /*retryRefused=*/false);
      } catch (const Error& e) {
        if (!strstr(e.what(), "refused")) throw;
        fail(ncclRemoteError, "socket: rank %d (pid %d) at %s refused the connection: its process has exited",
             peer_, req.peer->pid, to.str().c_str());
      }
      int one = 1;
      setsockopt(fds_[s], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      StreamHello hello{kHelloMagic, token, s, streams};
      sendAll(fds_[s], &hello, sizeof(hello), deadline);
    }
    STRATA_INFO(kSubsysNet, self_, "socket: sending to rank %d at %s over %u stream(s)", peer_, to.str().c_str(),
                streams);
  }

  void* trySlot() override {
    std::lock_guard<std::mutex> lock(mu_);
    pump();
    return head_ - tail_ < static_cast<uint64_t>(slots_) ? slot(head_) : nullptr;
  }
  void post(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[head_ % slots_] = bytes;
    ++head_;
    pump();
  }
  size_t slotBytes() const override { return slotBytes_; }
  void abort() override { shutdownStreams(); }
  bool peerAborted() const override { return failed_; }
  bool flushed() override {
    std::lock_guard<std::mutex> lock(mu_);
    pump();
    return failed_ || tail_ == head_;
  }

 private:
  void pump() override {
    if (failed_) return;
    uint64_t done = head_;
    for (uint32_t s = 0; s < streams(); ++s) {
      Cursor& c = cursors_[s];
      while (c.msg < head_) {
        iovec iov[2];
        int n = remaining(s, c.msg, c.off, iov);
        if (n > 0) {
          msghdr mh{};
          mh.msg_iov = iov;
          mh.msg_iovlen = n;
          ssize_t w = sendmsg(fds_[s], &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
          if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
          if (w < 0) {
            backlog_.store(false, std::memory_order_relaxed);
            return streamFailed(strerror(errno), false);
          }
          c.off += static_cast<size_t>(w);
        }
        if (c.off == streamBytes(s, c.msg)) {
          ++c.msg;
          c.off = 0;
        }
      }
      done = std::min(done, c.msg);
    }
    tail_ = done;
    backlog_.store(!failed_ && tail_ != head_, std::memory_order_relaxed);
  }
};

class SocketRecv final : public RecvConnection, public SocketConnection {
 public:
  SocketRecv(const ConnectRequest& req, DataListener& listener, uint64_t token, uint32_t streams)
      : SocketConnection(req, streams), listener_(listener), token_(token) {}
  ~SocketRecv() override { listener_.forget(token_); }  // streams its sender opens from now on are dropped

  const void* tryData(size_t* bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    pump();
    if (head_ == tail_) return nullptr;
    *bytes = sizes_[tail_ % slots_];
    return slot(tail_);
  }
  void release() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++tail_;
    pump();
  }
  void abort() override { shutdownStreams(); }
  // The peer gave up, or closed every stream and this rank has taken every message
  // that came before: whoever waits here now waits in vain. (A peer that finished its
  // part and destroyed its communicator closes its streams between messages; what it
  // sent before is still delivered.)
  bool peerAborted() const override {
    return failed_ || (head_ == tail_ && std::find(closed_.begin(), closed_.end(), false) == closed_.end());
  }

 private:
  bool connected() {
    for (uint32_t s = 0; s < streams(); ++s)
      if (fds_[s] < 0 && (fds_[s] = listener_.tryTake(token_, s)) < 0) return false;
    return true;
  }
  // Stream 0 has read message m's header, so its length is known.
  bool sizeKnown(uint64_t m) const {
    return cursors_[0].msg > m || (cursors_[0].msg == m && cursors_[0].off >= kHeaderBytes);
  }

  void pump() override {
    if (failed_ || !connected()) return;
    if (std::find(closed_.begin(), closed_.end(), true) != closed_.end()) probeClosed();
    uint64_t done = UINT64_MAX;
    for (uint32_t s = 0; s < streams(); ++s) {
      Cursor& c = cursors_[s];
      while (c.msg - tail_ < static_cast<uint64_t>(slots_)) {  // a free slot for it
        if (s == 0 && c.off < kHeaderBytes && (!readSome(s, c, kHeaderBytes) || c.off < kHeaderBytes)) break;
        if (s == 0 && sizes_[c.msg % slots_] > slotBytes_)
          return streamFailed("a message larger than a slot (the ranks' NCCL_BUFFSIZE differ?)", false);
        if (s != 0 && !sizeKnown(c.msg)) break;
        size_t want = streamBytes(s, c.msg);
        if (c.off < want && (!readSome(s, c, want) || c.off < want)) break;
        ++c.msg;
        c.off = 0;
      }
      if (failed_) return;
      done = std::min(done, c.msg);
    }
    head_ = done;
  }

  // Reads what stream s has, up to `upto` bytes of the current message; false on
  // would-block or failure. Stream 0 reads small needs through a staging buffer,
  // so a header and its payload (and whatever follows) take one system call.
  bool readSome(uint32_t s, Cursor& c, size_t upto) {
    if (closed_[s] && !(s == 0 && stageBegin_ < stageEnd_)) return false;
    iovec iov[2];
    int n = remaining(s, c.msg, c.off, iov);
    size_t cap = upto - c.off;  // never past the header before its length is known
    if (n > 0 && iov[0].iov_len >= cap) {
      iov[0].iov_len = cap;
      n = 1;
    }
    if (s == 0 && stageBegin_ == stageEnd_ && cap < kStageBytes) {
      ssize_t r = recv(fds_[0], stage_.data(), stage_.size(), MSG_DONTWAIT);
      if (!received(s, r, c)) return false;
      stageBegin_ = 0;
      stageEnd_ = static_cast<size_t>(r);
    }
    if (s == 0 && stageBegin_ < stageEnd_) {
      for (int i = 0; i < n && stageBegin_ < stageEnd_; ++i) {
        size_t k = std::min(iov[i].iov_len, stageEnd_ - stageBegin_);
        memcpy(iov[i].iov_base, stage_.data() + stageBegin_, k);
        stageBegin_ += k;
        c.off += k;
      }
      return true;
    }
    msghdr mh{};
    mh.msg_iov = iov;
    mh.msg_iovlen = n;
    ssize_t r = recvmsg(fds_[s], &mh, MSG_DONTWAIT);
    if (!received(s, r, c)) return false;
    c.off += static_cast<size_t>(r);
    return true;
  }

  // Once one stream has ended, the peer is closing them all: a stream that is between
  // messages and at its end is closed too (a peek takes nothing that is still coming).
  // Streams past message boundaries are never read otherwise, so without this a peer
  // that exited would leave them open, and this rank waiting, until the timeout.
  void probeClosed() {
    for (uint32_t o = 0; o < streams(); ++o) {
      if (closed_[o] || cursors_[o].off != 0) continue;
      char b;
      ssize_t r = recv(fds_[o], &b, 1, MSG_PEEK | MSG_DONTWAIT);
      if (r == 0) closed_[o] = true;
      if (r < 0 && errno != EAGAIN && errno != EINTR) return streamFailed(strerror(errno), false);
    }
  }

  // False on would-block, end of stream or failure. The end of a stream between
  // messages closes that stream (the peer is done with it); anywhere else, and any
  // error, fails the connection.
  bool received(uint32_t s, ssize_t r, const Cursor& c) {
    if (r < 0 && (errno == EAGAIN || errno == EINTR)) return false;
    if (r == 0 && c.off == 0) {
      closed_[s] = true;
      return false;
    }
    if (r <= 0)
      streamFailed(r == 0 ? "the peer closed the stream in the middle of a message" : strerror(errno), false);
    return r > 0;
  }

  std::vector<bool> closed_ = std::vector<bool>(streams(), false);  // per stream: the peer closed it between messages

  static constexpr size_t kStageBytes = 16 << 10;
  std::vector<char> stage_ = std::vector<char>(kStageBytes);
  size_t stageBegin_ = 0, stageEnd_ = 0;  // bytes of stream 0 read but not yet placed
  DataListener& listener_;
  uint64_t token_;
};

}  // namespace

bool networkActive() { return gLiveCount.load(std::memory_order_relaxed) > 0; }

bool progressNetwork() {
  if (!networkActive()) return false;
  std::unique_lock<std::mutex> lock(gLiveMutex, std::try_to_lock);
  if (!lock.owns_lock()) return true;  // another rank thread is progressing every connection right now
  for (SocketConnection* c : gLive) c->progressIfFree();
  return true;
}

std::unique_ptr<RecvConnection> SocketTransport::listen(const ConnectRequest& req, std::string* handle) {
  DataListener& listener = DataListener::instance(req.self->listenAddr);
  const Config& cfg = config();
  SocketHandle h{listener.address(), listener.newToken(),
                 static_cast<uint32_t>(cfg.socketThreads * cfg.socksPerThread)};
  handle->assign(reinterpret_cast<const char*>(&h), sizeof(h));
  return std::make_unique<SocketRecv>(req, listener, h.token, h.streams);
}

std::unique_ptr<SendConnection> SocketTransport::connect(const ConnectRequest& req, const std::string& handle) {
  SocketHandle h;
  STRATA_REQUIRE(handle.size() == sizeof(h), ncclInternalError, "socket transport: malformed handle from rank %d",
                 req.peer->rank);
  memcpy(static_cast<void*>(&h), handle.data(), sizeof(h));
  return std::make_unique<SocketSend>(req, h.addr, h.token, h.streams);
}

}  // namespace strata::transport::socket
