#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>

#include "base/mutation.h"
#include "transports/net/net_connection.h"

namespace strata::transport::net {
namespace {

class NetRecv final : public NetConnection, public RecvConnection, public PutReceiver {
 public:
  NetRecv(const ConnectRequest& req, Network& net, LiveConnections& live, std::string* handle)
      : NetConnection(req, net, live) {
    maxRecvs_ = std::max(1, std::min(net.properties(dev_).maxRecvs, kMaxRecvs));
    char h[kHandleBytes] = {};
    listen_ = net.listen(dev_, h);
    handle->assign(h, kHandleBytes);
    if (!puts_) return;
    memset(h, 0, kHandleBytes);
    putListen_ = net.listen(dev_, h);
    handle->append(h, kHandleBytes);
  }
  ~NetRecv() override {
    retire();
    closeAll();
  }
  PutReceiver* puts() override { return puts_ ? this : nullptr; }

  // PutReceiver: each offer is a receive into memory putMemory chose for it once
  // (the caller's, or a pool buffer copied out on completion). Independent offers
  // wait to be posted together (up to the network's maxRecvs in one grouped
  // receive) until the rank asks for the oldest's completion, or a sweep comes;
  // any other offer is posted at once, alone.
  bool tryOffer(void* dst, size_t bytes, const Registration& reg, Transfer kind) override {
    bool independent = kind != Transfer::kChained;
    STRATA_REQUIRE(reg.live() && reg.covers(dst, bytes), ncclInvalidUsage,
                   "net transport: rank %d offered %zu bytes at %p outside a live registration", self_, bytes, dst);
    std::lock_guard<std::mutex> lock(mu_);
    offering_ = true;  // the offers waiting stay: this one may join them
    progressLocked();
    offering_ = false;
    throwRefusal();
    if (!putError_.empty() && !failed_) failWith(Error(ncclRemoteError, putError_));
    if (failed_ || !putComm_ || offers_.size() >= kMaxOffers) return false;
    try {
      offers_.push_back(takeDeclined(dst, bytes));
      offers_.back().independent = independent;
      wanted_.store(true, std::memory_order_relaxed);  // a sweep may post it
      if (independent && unposted() < static_cast<size_t>(maxRecvs_)) return true;
      bool posted = postWaitingOrRefuse();
      throwRefusal();
      if (posted || independent) return true;  // an independent offer waits its turn
      declined_ = offers_.back();  // registered: the caller tries again with the same
      offers_.pop_back();
      return false;
    } catch (const Error& e) {
      if (e.code() == ncclInvalidUsage) throw;
      failWith(e);
      return false;
    }
  }
  bool tryPutDone(size_t* bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    throwRefusal();
    if (offers_.empty()) return false;
    if (!offers_.front().posted) {
      if (failed_) return false;
      try {
        postWaitingOrRefuse();
      } catch (const Error& e) {
        failWith(e);
        return false;
      }
      throwRefusal();
      if (offers_.empty() || !offers_.front().posted) return false;
    }
    Offer& o = offers_.front();
    size_t got = 0;
    try {
      Posted& p = *o.posted;
      if (!p.arrived && !net_.test(p.request, p.got)) return false;
      p.arrived = true;
      got = p.got[o.index];
      // Into device memory: the NIC's writes are made visible to the GPU first.
      if (onDevice(o.mem.mh) && !o.flushed) {
        if (!o.flush && !net_.iflush(putComm_, o.mem.data(o.dst), got, o.mem.mh, &o.flush)) return false;
        if (o.flush && !net_.test(o.flush, nullptr)) return false;
        o.flushed = true;
      }
    } catch (const Error& e) {  // a receive that completed before the failure is still taken above
      if (!failed_) failWith(e);
      return false;
    }
    try {
      if (o.mem.bounce) {
        size_t shift = mutated(Mutation::kNetBounceShift) && got > 0 ? 1 : 0;
        bounceCopy(o.mem, static_cast<char*>(o.dst) + shift, o.mem.bounce->data, std::min(got, o.bytes) - shift);
      }
    } catch (const Error& e) {  // the GPU's copy out
      if (!failed_) failWith(e);
      return false;
    }
    *bytes = got;
    releasePut(putComm_, &o.mem);
    offers_.pop_front();
    return true;
  }

  const void* tryData(size_t* bytes) override {
    std::lock_guard<std::mutex> lock(mu_);
    progressLocked();
    if (arrived_ == consumed_) return nullptr;
    *bytes = sizes_[consumed_ % slots_];
    return slot(consumed_);
  }
  void release() override {
    std::lock_guard<std::mutex> lock(mu_);
    ++consumed_;
    progressLocked();
  }
  // The sender learns of it from its network: the connection, or the listener, closes.
  void abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    failed_ = true;
    aborted_ = true;
    closeAll();
  }
  // Once the connection failed and the rank has taken every message that came before
  // (a sender that is done closes after its last one; that one is still delivered).
  std::string failure() const override { return failureText(); }
  bool peerAborted() const override {
    if (!failed_) return false;
    std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(mu_));
    return aborted_ || arrived_ == consumed_;
  }

 private:
  static constexpr size_t kMaxOffers = 2 * kMaxRecvs;
  // One receive the network took: a group of n offers, completing together.
  struct Posted {
    void* request = nullptr;
    size_t got[kMaxRecvs] = {};
    bool arrived = false;
  };
  struct Offer {
    PutMemory mem;
    void* dst = nullptr;
    size_t bytes = 0;
    bool independent = false;
    std::shared_ptr<Posted> posted;  // null while waiting to be posted
    int index = 0;                   // its receive in `posted`
    bool flushed = false;
    void* flush = nullptr;  // the network's flush request, once asked
  };
  // The memory a declined offer left, if it is this one; else new.
  Offer takeDeclined(void* dst, size_t bytes) {
    Offer o = declined_;
    declined_ = Offer{};
    if (o.mem.mh && o.dst == dst && o.bytes == bytes) return o;
    releasePut(putComm_, &o.mem);
    o = Offer{};
    putMemory(putComm_, dst, bytes, &o.mem);
    o.dst = dst;
    o.bytes = bytes;
    return o;
  }
  // Offers not yet posted: always the newest.
  size_t unposted() const {
    size_t n = 0;
    for (auto it = offers_.rbegin(); it != offers_.rend() && !it->posted; ++it) ++n;
    return n;
  }
  // postWaiting, but a receive the network refuses as the caller's mistake (larger
  // than it takes) drops the waiting offers and is thrown to the rank's next call
  // (throwRefusal), as a refusal at the offer would have been: the operation fails,
  // the connection stays.
  bool postWaitingOrRefuse() {
    try {
      return postWaiting();
    } catch (const Error& e) {
      if (e.code() != ncclInvalidUsage) throw;
      while (!offers_.empty() && !offers_.back().posted) {
        releasePut(putComm_, &offers_.back().mem);
        offers_.pop_back();
      }
      refusal_ = e.what();
      return false;
    }
  }
  void throwRefusal() {
    if (refusal_.empty()) return;
    std::string why = std::move(refusal_);
    refusal_.clear();
    throw Error(ncclInvalidUsage, why);
  }
  // Posts the waiting offers, oldest first: runs of independent ones as grouped
  // receives of up to maxRecvs, any other alone. False when the network declined
  // one (the rest wait).
  bool postWaiting() {
    size_t first = offers_.size() - unposted();
    while (first < offers_.size()) {
      RecvBuffer b[kMaxRecvs];
      int n = 0;
      do {
        const Offer& o = offers_[first + n];
        b[n] = RecvBuffer{o.mem.data(o.dst), o.bytes, 0, o.mem.mh};
        ++n;
      } while (first + n < offers_.size() && n < maxRecvs_ && offers_[first].independent &&
               offers_[first + n].independent);
      void* r = net_.irecv(putComm_, n, b);
      if (!r) return false;
      auto p = std::make_shared<Posted>();
      p->request = r;
      for (int i = 0; i < n; ++i) offers_[first + i].posted = p, offers_[first + i].index = i;
      first += n;
    }
    return true;
  }
  void closeAll() {
    closeComm(comm_, &Network::closeRecv, &mh_);
    comm_ = nullptr;
    closeListener(&listen_);
    if (putComm_) {
      for (Offer& o : offers_) releasePut(putComm_, &o.mem);
      releasePut(putComm_, &declined_.mem);
      clearBounce(putComm_);
      closeComm(putComm_, &Network::closeRecv, nullptr);
    }
    offers_.clear();
    declined_ = Offer{};
    putComm_ = nullptr;
    closeListener(&putListen_);
  }
  void closeListener(void** listener) {
    if (!*listener) return;
    try {
      net_.closeListen(*listener);
    } catch (const Error& e) {
      STRATA_INFO(kSubsysNet, self_, "net transport: closing the listener for rank %d: %s", peer_, e.what());
    }
    *listener = nullptr;
  }
  bool needsSweep() const override {
    return (!comm_ && listen_) || (!putComm_ && putListen_) || (!offers_.empty() && !offers_.back().posted);
  }
  void step() override {
    if (putComm_ && !offering_) postWaitingOrRefuse();
    if (!putComm_ && putListen_) {
      try {
        putComm_ = net_.accept(putListen_);
      } catch (const Error& e) {  // the slots still work (a sender that is done may have closed): only puts fail
        putError_ = e.what();
        STRATA_INFO(kSubsysNet, self_, "net transport: no puts from rank %d: %s", peer_, e.what());
        closeListener(&putListen_);
      }
    }
    if (!comm_) {
      if (!listen_) return;
      comm_ = net_.accept(listen_);
      if (!comm_) return;
      mh_ = net_.regMr(comm_, memory_.data(), memory_.size(), abi::kPtrHost);
      count(live_.moved.registrations, 1);
    }
    // What arrived first: a network that has failed since refuses new receives, and
    // what came before the failure must still reach the rank.
    collectArrived();
    for (; posted_ < consumed_ + slots_; ++posted_) {
      void* r = net_.irecv(comm_, slot(posted_), slotBytes_, 0, mh_);
      if (!r) break;
      requests_[posted_ % slots_] = r;
    }
  }
  // The network may have taken completions before it saw the failure (IB polls its
  // queue inside irecv, and either comm may report it first): a message that landed
  // just before the peer left still reaches the rank. test() reports each completed
  // request and throws at the first that cannot complete.
  void salvage() override {
    if (!comm_) return;
    try {
      collectArrived();
    } catch (const Error&) {
    }
  }
  void collectArrived() {
    for (; arrived_ < posted_; ++arrived_) {
      size_t n = 0;
      if (!net_.test(requests_[arrived_ % slots_], &n)) break;
      STRATA_REQUIRE(n <= slotBytes_, ncclSystemError, "net transport: %zu bytes arrived in a slot of %zu", n,
                     slotBytes_);
      sizes_[arrived_ % slots_] = n;
    }
  }

  void* listen_ = nullptr;
  void* comm_ = nullptr;
  void* putListen_ = nullptr;
  void* putComm_ = nullptr;
  std::deque<Offer> offers_;  // oldest first; those not yet posted last
  Offer declined_;  // a registered offer the network declined, kept for the retry
  int maxRecvs_ = 1;  // the device's, at most kMaxRecvs
  bool offering_ = false;  // inside tryOffer: the waiting offers are not posted yet
  std::string refusal_;    // why the network refused a waiting offer, for the rank's next call
  std::string putError_;  // why the put comm could not come up
  uint64_t posted_ = 0, arrived_ = 0, consumed_ = 0;  // receives posted, completed, released by the rank
  bool aborted_ = false;  // by this rank
};

}  // namespace

std::unique_ptr<RecvConnection> newNetRecv(const ConnectRequest& req, Network& net, LiveConnections& live,
                                           std::string* handle) {
  auto c = std::make_unique<NetRecv>(req, net, live, handle);
  c->enlist();
  return c;
}

}  // namespace strata::transport::net
