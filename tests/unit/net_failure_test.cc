// The net transport when its network fails right after a completion: a message
// (or a put) that landed before the failure still reaches the rank, however the
// network learnt of both. Over a scripted in-memory network whose failure and
// late completions the test places exactly: IB takes completions from its queue
// inside irecv and throws there when the peer is gone, so a receive may complete
// in the same call that reports the failure (a peer that finished and left).
#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "transports/net/net_transport.h"
#include "transports/net/network.h"

namespace strata::transport::net {
namespace {

// One process, one connection pair per listen. A send matched to a receive copies
// its bytes at once but completes only when the test lands it (land()); fail()
// ends every connection. irecv runs `onIrecv` first, as a network that polls there.
class Scripted final : public Network {
 public:
  struct Request {
    bool landed = false;
    size_t bytes = 0;
  };
  struct Recv {
    char* data;
    size_t cap;
    Request* req;
  };
  struct Pair {
    std::deque<Recv> recvs;
    int room;  // receives it takes before irecv returns null
  };

  const std::string& name() const override { return name_; }
  int devices() override { return 1; }
  DeviceProperties properties(int) override {
    DeviceProperties p;
    p.name = "scripted0";
    p.ptrSupport = 1;
    p.speedMbps = 100000;
    p.maxComms = 64;
    return p;
  }
  void* listen(int, void* handle) override {
    pairs_.push_back(std::make_unique<Pair>(Pair{{}, room}));
    Pair* p = pairs_.back().get();
    memcpy(handle, &p, sizeof(p));
    return p;
  }
  void* connect(int, void* handle) override {
    Pair* p;
    memcpy(&p, handle, sizeof(p));
    return p;
  }
  void* accept(void* listenComm) override { return listenComm; }
  void* regMr(void*, void* data, size_t, int) override { return data ? data : this; }
  void deregMr(void*, void*) override {}
  void* isend(void* comm, void* data, size_t bytes, int, void*) override {
    throwIfFailed();
    auto* p = static_cast<Pair*>(comm);
    if (p->recvs.empty()) return nullptr;
    Recv r = p->recvs.front();
    EXPECT_LE(bytes, r.cap);
    p->recvs.pop_front();
    memcpy(r.data, data, bytes);
    r.req->bytes = bytes;
    inFlight_.push_back(r.req);
    requests_.push_back(std::make_unique<Request>());
    sends_.push_back(requests_.back().get());
    return sends_.back();
  }
  void* irecv(void* comm, int n, const RecvBuffer* b) override {
    EXPECT_EQ(n, 1);
    if (onIrecv) std::exchange(onIrecv, nullptr)();
    throwIfFailed();
    auto* p = static_cast<Pair*>(comm);
    if (p->room == 0) return nullptr;
    --p->room;
    requests_.push_back(std::make_unique<Request>());
    p->recvs.push_back({static_cast<char*>(b->data), b->bytes, requests_.back().get()});
    return requests_.back().get();
  }
  // A completed request is reported whatever failed since; the others throw then.
  bool test(void* request, size_t* bytes) override {
    auto* r = static_cast<Request*>(request);
    bool send = std::find(sends_.begin(), sends_.end(), r) != sends_.end();
    if (!send && !r->landed) {
      throwIfFailed();
      return false;
    }
    if (bytes) *bytes = r->bytes;
    return true;
  }
  void closeSend(void*) override {}
  void closeRecv(void*) override {}
  void closeListen(void*) override {}
  bool sendSeesReceive() const override { return true; }  // puts too

  // What the test scripts.
  void land() {
    for (Request* r : inFlight_) r->landed = true;
    inFlight_.clear();
  }
  void fail() { failed_ = true; }
  Pair& pair(size_t i) { return *pairs_.at(i); }
  std::function<void()> onIrecv;
  int room = 1 << 20;  // of each connection made from here on

 private:
  void throwIfFailed() const {
    if (failed_) throw PeerClosed("scripted: the peer closed the connection");
  }
  std::string name_ = "scripted";
  std::vector<std::unique_ptr<Pair>> pairs_;
  std::vector<std::unique_ptr<Request>> requests_;
  std::vector<Request*> sends_, inFlight_;
  bool failed_ = false;
};

Scripted* gNet = nullptr;
Network* scripted() { return gNet; }

// Rank 0 receives from rank 1 (another host) over one connection of 4 slots.
struct Link {
  Scripted net;
  NetTransport t{"scripted", scripted};
  PeerInfo self, peer;
  std::unique_ptr<RecvConnection> in;
  std::unique_ptr<SendConnection> out;
  explicit Link(int room = 1 << 20) {
    gNet = &net;
    net.room = room;
    self.rank = 0;
    self.hostHash = 1;
    peer.rank = 1;
    peer.hostHash = 2;
    ConnectRequest rq{&self, &peer, 64, 4}, sq{&peer, &self, 64, 4};
    std::string handle;
    in = t.listen(rq, &handle);
    out = t.connect(sq, handle);
    for (int i = 0; i < 100; ++i) t.progress();  // both comms up, the slots posted
  }
  ~Link() { gNet = nullptr; }
};

TEST(NetFailure, AMessageThatLandedAsTheNetworkFailedStillReachesTheRank) {
  Link l(3);  // slots 0-2 posted; slot 3's receive waits for room
  ASSERT_EQ(l.net.pair(0).recvs.size(), 3u);
  void* s = l.out->trySlot();
  ASSERT_NE(s, nullptr);
  const uint32_t sent = 0x5eed1234;
  memcpy(s, &sent, sizeof(sent));
  l.out->post(sizeof(sent));  // copied into slot 0, not complete yet
  // Slot 3's irecv takes the message's completion and then the failure.
  l.net.pair(0).room = 1;
  l.net.onIrecv = [&] {
    l.net.land();
    l.net.fail();
  };
  size_t bytes = 0;
  const void* got = l.in->tryData(&bytes);
  ASSERT_NE(got, nullptr) << "the message that landed before the failure was lost";
  EXPECT_EQ(bytes, sizeof(sent));
  uint32_t v;
  memcpy(&v, got, sizeof(v));
  EXPECT_EQ(v, sent);
  EXPECT_FALSE(l.in->peerAborted());  // a message is still there to take
  l.in->release();
  EXPECT_TRUE(l.in->peerAborted());  // now the failure is the rank's to see
}

// The same when the put comm is the one that reports the failure: the slots'
// message that landed still reaches the rank.
TEST(NetFailure, AMessageStillReachesTheRankWhenThePutCommReportsTheFailure) {
  Link l;  // every slot posted: only the put offer below calls irecv
  void* s = l.out->trySlot();
  ASSERT_NE(s, nullptr);
  const uint32_t sent = 0x0ddba11;
  memcpy(s, &sent, sizeof(sent));
  l.out->post(sizeof(sent));  // copied into slot 0, not complete yet
  l.net.onIrecv = [&] {
    l.net.land();
    l.net.fail();
  };
  std::vector<uint32_t> dst(2, 0);
  Registration reg(dst.data(), dst.size() * 4);
  EXPECT_FALSE(l.in->puts()->tryOffer(dst.data(), 8, reg, Transfer::kChained));  // its irecv reports the failure
  size_t bytes = 0;
  const void* got = l.in->tryData(&bytes);
  ASSERT_NE(got, nullptr) << "the slots' message that landed before the failure was lost";
  uint32_t v;
  memcpy(&v, got, sizeof(v));
  EXPECT_EQ(v, sent);
  EXPECT_EQ(bytes, sizeof(sent));
}

TEST(NetFailure, APutThatLandedAsTheNetworkFailedStillReachesTheRank) {
  Link l;
  ASSERT_NE(l.in->puts(), nullptr);
  std::vector<uint32_t> dst(4, 0), src = {1, 2, 3, 4};
  Registration reg(dst.data(), dst.size() * 4);
  ASSERT_TRUE(l.in->puts()->tryOffer(dst.data(), 8, reg, Transfer::kChained));
  for (int i = 0; i < 100 && !l.out->puts()->tryPut(src.data(), 8); ++i) l.t.progress();
  // Moved by the network (into the library's registered buffer: dst is not registered), not complete yet.
  // A second offer's irecv takes the first's completion and then the failure.
  l.net.onIrecv = [&] {
    l.net.land();
    l.net.fail();
  };
  EXPECT_FALSE(l.in->puts()->tryOffer(dst.data() + 2, 8, reg, Transfer::kChained));
  size_t bytes = 0;
  ASSERT_TRUE(l.in->puts()->tryPutDone(&bytes)) << "the put that landed before the failure was lost";
  EXPECT_EQ(bytes, 8u);
  EXPECT_EQ(dst[0], 1u);
  EXPECT_EQ(dst[1], 2u);
  EXPECT_EQ(dst[2], 0u);  // the second offer's place: nothing came
  EXPECT_FALSE(l.in->puts()->tryPutDone(&bytes));  // nothing else came, nor will
}

}  // namespace
}  // namespace strata::transport::net
