#include "transports/socket/stream_comm.h"

#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "transports/net/network.h"

namespace strata::transport::socket {
namespace {

// Messages below this travel whole on stream 0: splitting them only adds system calls.
constexpr size_t kSplitBytes = 64 << 10;
constexpr size_t kHeaderBytes = sizeof(WireHeader);

// The bytes [first, second) of a `bytes`-long message that stream i of k carries.
std::pair<size_t, size_t> part(size_t bytes, uint32_t i, uint32_t k) {
  if (bytes < kSplitBytes) return {i == 0 ? 0 : bytes, bytes};
  return {bytes * i / k, bytes * (i + 1) / k};
}

}  // namespace

StreamComm::StreamComm(std::vector<int> fds, bool sender, std::string peer)
    : fds_(std::move(fds)), cursors_(fds_.size()), closed_(fds_.size(), false), sender_(sender),
      peer_(std::move(peer)) {}

StreamComm::~StreamComm() {
  for (int fd : fds_)
    if (fd >= 0) close(fd);
}

StreamComm::Request* StreamComm::post(void* data, size_t bytes, int tag) {
  if (!failure_.empty()) throw Error(failCode_, failure_);
  if (end_ - base_ >= kMaxRequests) return nullptr;
  Request* r = &at(end_);
  *r = Request{this, end_, static_cast<char*>(data), bytes, tag,
               WireHeader{sender_ ? bytes : 0, tag, sender_ ? kHeaderMagic : 0}, false};
  ++end_;
  if (sender_) pumpSend();  // a send leaves now, not at its first test; a receive reads when tested
  return r;
}

bool StreamComm::test(Request* r, size_t* bytes) {
  // A receive tested right after another completed finds the streams just drained
  // (that pump read whatever had come): it waits for the next test, saving a system call.
  bool drained = drained_;
  drained_ = false;
  if (!done(*r) && failure_.empty() && !(drained && !sender_)) {
    try {
      sender_ ? pumpSend() : pumpRecv();
    } catch (const Error&) {  // recorded in failure_; r may have completed before it
    }
    drained_ = done(*r);
  }
  if (!done(*r)) {  // a request that completed is done even if the connection failed after it
    if (!failure_.empty()) throw Error(failCode_, failure_);
    if (!sender_ && allClosed())
      throw net::PeerClosed(format("socket: %s closed the connection (its process is done or exited)", peer_.c_str()));
    return false;
  }
  if (bytes) *bytes = r->hdr.bytes;
  r->freed = true;
  while (base_ < end_ && at(base_).freed) ++base_;  // freed only once done: no stream is on it
  return true;
}

bool StreamComm::done(const Request& r) const {
  for (const Cursor& c : cursors_)
    if (c.msg <= r.seq) return false;
  return true;
}

// Bytes stream s moves for message r: the header on stream 0, then its part.
size_t StreamComm::streamBytes(uint32_t s, const Request& r) const {
  auto [b, e] = part(r.hdr.bytes, s, streams());
  return (s == 0 ? kHeaderBytes : 0) + (e - b);
}

// The iovecs for what remains of stream s's share of message r.
int StreamComm::remaining(uint32_t s, Request& r, size_t off, iovec* iov) {
  auto [b, e] = part(r.hdr.bytes, s, streams());
  int n = 0;
  size_t hdr = s == 0 ? kHeaderBytes : 0;
  if (off < hdr) iov[n++] = {reinterpret_cast<char*>(&r.hdr) + off, hdr - off};
  size_t moved = off > hdr ? off - hdr : 0;
  if (e - b > moved) iov[n++] = {r.data + b + moved, e - b - moved};
  return n;
}

void StreamComm::failWith(ncclResult_t code, const std::string& why) {
  failure_ = why;
  failCode_ = code;
  for (int fd : fds_) shutdown(fd, SHUT_RDWR);  // the peer learns at once
  throw Error(code, why);
}

void StreamComm::pumpSend() {
  for (uint32_t s = 0; s < streams(); ++s) {
    Cursor& c = cursors_[s];
    while (c.msg < end()) {
      Request& r = at(c.msg);
      iovec iov[2];
      int n = remaining(s, r, c.off, iov);
      if (n > 0) {
        msghdr mh{};
        mh.msg_iov = iov;
        mh.msg_iovlen = n;
        ssize_t w = sendmsg(fds_[s], &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w < 0 && (errno == EAGAIN || errno == EINTR)) break;
        if (w < 0) {
          bool gone = errno == EPIPE || errno == ECONNRESET;
          failWith(gone ? ncclRemoteError : ncclSystemError,
                   format("socket: sending to %s: %s%s", peer_.c_str(), strerror(errno),
                          gone ? " (its process exited or closed the connection)" : ""));
        }
        c.off += static_cast<size_t>(w);
      }
      if (c.off < streamBytes(s, r)) break;
      ++c.msg;
      c.off = 0;
    }
  }
}

// Stream 0 has read message m's header, so its length is known.
bool StreamComm::sizeKnown(uint64_t m) const {
  return cursors_[0].msg > m || (cursors_[0].msg == m && cursors_[0].off >= kHeaderBytes);
}

void StreamComm::checkHeader(const Request& r) {
  if (r.hdr.magic != kHeaderMagic)
    failWith(ncclSystemError, format("socket: %s sent a message without Strata's header", peer_.c_str()));
  if (r.hdr.bytes > r.cap)
    failWith(ncclInvalidUsage,
             format("socket: %s sent a message of %llu bytes to a receive of %zu (the ranks' NCCL_BUFFSIZE differ?)",
                    peer_.c_str(), static_cast<unsigned long long>(r.hdr.bytes), r.cap));
  if (r.hdr.tag != r.tag)
    failWith(ncclInternalError, format("socket: %s sent a message with tag %d to a receive with tag %d",
                                       peer_.c_str(), r.hdr.tag, r.tag));
}

void StreamComm::pumpRecv() {
  if (std::find(closed_.begin(), closed_.end(), true) != closed_.end()) probeClosed();
  for (uint32_t s = 0; s < streams(); ++s) {
    Cursor& c = cursors_[s];
    while (c.msg < end()) {  // a receive is posted for it
      Request& r = at(c.msg);
      if (s == 0 && c.off < kHeaderBytes) {
        if (!readSome(s, c, r, kHeaderBytes) || c.off < kHeaderBytes) break;
        checkHeader(r);
      }
      if (s != 0 && !sizeKnown(c.msg)) break;
      size_t want = streamBytes(s, r);
      if (c.off < want && (!readSome(s, c, r, want) || c.off < want)) break;
      ++c.msg;
      c.off = 0;
    }
  }
}

// Reads what stream s has, up to `upto` bytes of message r's share; false on
// would-block or end of stream. Stream 0 reads small needs through a staging
// buffer, so that a header, its payload and whatever follows take one system call.
bool StreamComm::readSome(uint32_t s, Cursor& c, Request& r, size_t upto) {
  if (closed_[s] && !(s == 0 && stageBegin_ < stageEnd_)) return false;
  iovec iov[2];
  int n = remaining(s, r, c.off, iov);
  size_t cap = upto - c.off;  // never past the header before its length is known
  if (n > 0 && iov[0].iov_len >= cap) {
    iov[0].iov_len = cap;
    n = 1;
  }
  if (s == 0 && stageBegin_ == stageEnd_ && cap < kStageBytes) {
    ssize_t got = recv(fds_[0], stage_.data(), stage_.size(), MSG_DONTWAIT);
    if (!received(s, got, c)) return false;
    stageBegin_ = 0;
    stageEnd_ = static_cast<size_t>(got);
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
  ssize_t got = recvmsg(fds_[s], &mh, MSG_DONTWAIT);
  if (!received(s, got, c)) return false;
  c.off += static_cast<size_t>(got);
  return true;
}

// False on would-block or end of stream. The end of a stream between messages
// closes that stream (the peer is done with it); anywhere else, and any error,
// fails the connection.
bool StreamComm::received(uint32_t s, ssize_t r, const Cursor& c) {
  if (r < 0 && (errno == EAGAIN || errno == EINTR)) return false;
  if (r == 0 && c.off == 0) {
    closed_[s] = true;
    return false;
  }
  if (r == 0)
    failWith(ncclRemoteError, format("socket: %s closed the connection in the middle of a message (its process "
                                     "exited?)",
                                     peer_.c_str()));
  if (r < 0) failWith(ncclRemoteError, format("socket: receiving from %s: %s", peer_.c_str(), strerror(errno)));
  return true;
}

// Once one stream has ended, the peer is closing them all: a stream that is between
// messages and at its end is closed too (a peek takes nothing that is still coming).
// Streams past message boundaries are not read otherwise, so without this a peer
// that exited would leave them open, and this end waiting, until the timeout.
void StreamComm::probeClosed() {
  for (uint32_t o = 0; o < streams(); ++o) {
    if (closed_[o] || cursors_[o].off != 0) continue;
    char b;
    ssize_t r = recv(fds_[o], &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r == 0) closed_[o] = true;
    if (r < 0 && errno != EAGAIN && errno != EINTR)
      failWith(ncclRemoteError, format("socket: receiving from %s: %s", peer_.c_str(), strerror(errno)));
  }
}

bool StreamComm::allClosed() const { return std::find(closed_.begin(), closed_.end(), false) == closed_.end(); }

}  // namespace strata::transport::socket
