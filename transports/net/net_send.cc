#include <chrono>
#include <cstring>
#include <deque>
#include <thread>

#include "transports/net/net_connection.h"

namespace strata::transport::net {
namespace {

class NetSend final : public NetConnection, public SendConnection, public PutSender {
 public:
  NetSend(const ConnectRequest& req, Network& net, LiveConnections& live, const std::string& handle)
      : NetConnection(req, net, live) {
    size_t want = (puts_ ? 2 : 1) * kHandleBytes;
    STRATA_REQUIRE(handle.size() == want, ncclInternalError, "net transport: a handle of %zu bytes, not %zu",
                   handle.size(), want);
    memcpy(handle_, handle.data(), kHandleBytes);
    if (puts_) memcpy(putHandle_, handle.data() + kHandleBytes, kHandleBytes);
  }
  ~NetSend() override {
    retire();
    closeAll();
  }

  void* trySlot() override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    return head_ - done_ < static_cast<uint64_t>(slots_) ? slot(head_) : nullptr;
  }
  void post(size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    sizes_[head_ % slots_] = bytes;
    ++head_;
    progressLocked();
  }
  size_t slotBytes() const override { return slotBytes_; }
  // The receiver learns of it from its network, when the connection ends: one not
  // up yet is brought up first, so that there is one to end. The connections that
  // abort together share half a second for that (a stopped receiver never answers).
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    auto deadline = abortWindowEnd();
    while (!comm_ && std::chrono::steady_clock::now() < deadline) {
      try {
        comm_ = net_.connect(dev_, handle_);
      } catch (const Error&) {
        break;  // the receiver is gone already
      }
      if (!comm_) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    closeAll();
  }
  bool peerAborted() const override { return failed_; }
  std::string failure() const override { return failureText(); }
  bool flushed() override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    return failed_ || (done_ == head_ && inFlight_.empty());
  }
  PutSender* puts() override { return puts_ ? this : nullptr; }

  // PutSender. The source's memory is chosen (and copied into a pool buffer) once
  // per put, kept while the network has no offer yet, so retries redo nothing.
  bool tryPut(const void* src, size_t bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    if (!putError_.empty() && !failed_) failWith(Error(ncclRemoteError, putError_));
    if (failed_ || !putComm_) return false;
    try {
      void* p = const_cast<void*>(src);
      if (!pending_.mh || pendingSrc_ != src || pendingBytes_ != bytes) {
        releasePut(putComm_, &pending_);
        putMemory(putComm_, p, bytes, &pending_);
        if (pending_.bounce) bounceCopy(pending_, pending_.bounce->data, src, bytes);
        pendingSrc_ = src;
        pendingBytes_ = bytes;
      }
      void* r = net_.isend(putComm_, pending_.data(p), bytes, 0, pending_.mh);
      if (!r) return false;  // no offer yet
      inFlight_.push_back({r, pending_});
      count(live_.moved.puts, 1);
      count(live_.moved.putBytes, bytes);
      pending_ = PutMemory{};
      wanted_.store(true, std::memory_order_relaxed);  // sweeps now move it
      return true;
    } catch (const Error& e) {
      releasePut(putComm_, &pending_);  // a later put from the same place copies its bytes afresh
      pendingSrc_ = nullptr;
      if (e.code() == ncclInvalidUsage) throw;  // the caller's mistake (larger than the offer): theirs to see
      failWith(e);
      return false;
    }
  }
  // Progresses the puts in flight (the network may move data only when asked).
  bool putsComplete() const override {
    auto* self = const_cast<NetSend*>(this);
    std::lock_guard<std::mutex> lock(self->mu_);
    self->progressLocked();
    return failed_ || inFlight_.empty();
  }

 private:
  struct InFlight {
    void* request;
    PutMemory mem;
  };
  void closeAll() {
    if (!comm_) net_.cancelConnect(handle_);
    closeComm(comm_, &Network::closeSend, &mh_);
    comm_ = nullptr;
    if (!puts_) return;
    if (!putComm_) net_.cancelConnect(putHandle_);
    if (putComm_) {
      releasePut(putComm_, &pending_);
      for (InFlight& f : inFlight_) releasePut(putComm_, &f.mem);
      clearBounce(putComm_);
      closeComm(putComm_, &Network::closeSend, nullptr);
    }
    pending_ = PutMemory{};
    inFlight_.clear();
    putComm_ = nullptr;
  }
  bool needsSweep() const override {
    return !comm_ || done_ < head_ || (puts_ && ((!putComm_ && putError_.empty()) || !inFlight_.empty()));
  }
  void step() override {
    if (puts_ && !putComm_ && putError_.empty()) {
      try {
        putComm_ = net_.connect(dev_, putHandle_);
      } catch (const Error& e) {  // the slots still work (a peer that is done may have closed): only puts fail
        putError_ = e.what();
        STRATA_INFO(kSubsysNet, self_, "net transport: no puts to rank %d: %s", peer_, e.what());
      }
    }
    while (!inFlight_.empty() && net_.test(inFlight_.front().request, nullptr)) {
      releasePut(putComm_, &inFlight_.front().mem);
      inFlight_.pop_front();
    }
    if (!comm_) {
      comm_ = net_.connect(dev_, handle_);  // the plugin may keep its progress in the handle
      if (!comm_) return;
      mh_ = net_.regMr(comm_, memory_.data(), memory_.size(), abi::kPtrHost);
      count(live_.moved.registrations, 1);
    }
    for (; sent_ < head_; ++sent_) {
      void* r = net_.isend(comm_, slot(sent_), sizes_[sent_ % slots_], 0, mh_);
      if (!r) break;  // the receiver has no receive posted yet
      requests_[sent_ % slots_] = r;
      count(live_.moved.messages, 1);
      count(live_.moved.bytes, sizes_[sent_ % slots_]);
    }
    for (; done_ < sent_; ++done_)
      if (!net_.test(requests_[done_ % slots_], nullptr)) break;
  }

  char handle_[kHandleBytes];
  char putHandle_[kHandleBytes] = {};
  void* comm_ = nullptr;
  void* putComm_ = nullptr;
  uint64_t head_ = 0, sent_ = 0, done_ = 0;  // posted by the rank, handed to the network, completed
  const void* pendingSrc_ = nullptr;  // a put whose memory is ready, waiting for its offer
  size_t pendingBytes_ = 0;
  PutMemory pending_;
  std::deque<InFlight> inFlight_;  // puts the network took, not yet complete
  std::string putError_;  // why the put comm could not come up
};

}  // namespace

std::unique_ptr<SendConnection> newNetSend(const ConnectRequest& req, Network& net, LiveConnections& live,
                                           const std::string& handle) {
  auto c = std::make_unique<NetSend>(req, net, live, handle);
  c->enlist();
  return c;
}

}  // namespace strata::transport::net
