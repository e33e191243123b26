// One-sided puts through the net transport over IB on the user-space verbs device
// (tests/verbs_emu): each put is one RDMA write; memory the user registered moves in
// place and registers nothing per put; other memory goes through each end's
// registered buffers (transports/net/bounce_pool.h), which fall back, grow, and leave
// nothing registered once the link is gone; a put over them registers for itself.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "transports/ib/ib_devices.h"
#include "transports/ib/ib_network.h"
#include "transports/ib/mr_cache.h"
#include "transports/net/net_transport.h"
#include "verify/reference.h"
#include "ib_emu.h"

namespace strata::transport::ib {
namespace {

// One-sided puts through the net transport over IB: each put is one RDMA write from
// the sender's buffer straight into the receiver's offered one, and buffers the
// user registered (persist(), as ncclCommRegister does) register nothing per put.
struct PutLink {
  net::NetTransport t{"ib", ibNetwork};
  PeerInfo self, peer;
  std::unique_ptr<RecvConnection> in;
  std::unique_ptr<SendConnection> out;
  PutLink() {
    self.rank = 0;
    self.hostHash = 1;
    peer.rank = 1;
    peer.hostHash = 2;
    ConnectRequest rq{&self, &peer, 64 << 10, 4}, sq{&peer, &self, 64 << 10, 4};
    std::string handle;
    in = t.listen(rq, &handle);
    out = t.connect(sq, handle);
  }
  template <typename F>
  bool within(F ready) {
    auto end = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!ready()) {
      if (std::chrono::steady_clock::now() > end) return false;
      t.progress();  // as the ranks' sweeps do: connections come up, puts move
    }
    return true;
  }
  // `iterations` puts after a first one (which also brings the connection up);
  // returns the registrations those iterations made.
  uint64_t loop(std::vector<uint32_t>& src, std::vector<uint32_t>& dst, const Registration& reg, int iterations) {
    uint64_t before = 0;
    for (int it = 0; it <= iterations; ++it) {
      if (it == 1) before = counters().registrations;
      for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint32_t>(it * 7919 + i);
      EXPECT_TRUE(within([&] { return in->puts()->tryOffer(dst.data(), dst.size() * 4, reg, Transfer::kChained); }));
      EXPECT_TRUE(within([&] { return out->puts()->tryPut(src.data(), src.size() * 4); }));
      size_t got = 0;
      EXPECT_TRUE(within([&] { return in->puts()->tryPutDone(&got); }));
      EXPECT_TRUE(within([&] { return out->puts()->putsComplete(); }));
      EXPECT_EQ(got, src.size() * 4);
      EXPECT_EQ(dst, src) << "iteration " << it;
    }
    return counters().registrations - before;
  }
};

TEST(IbPuts, OneRdmaWriteEachAndNothingRegisteredForUserRegisteredBuffers) {
  PutLink l;
  ASSERT_TRUE(l.t.has(kPut));
  ASSERT_NE(l.in->puts(), nullptr);
  std::vector<uint32_t> src(1 << 20), dst(1 << 20);  // 4 MiB
  auto dstReg = l.t.registerMemory(dst.data(), dst.size() * 4);
  auto srcReg = l.t.registerMemory(src.data(), src.size() * 4);
  dstReg->persist();
  srcReg->persist();
  Counters before = counters();
  EXPECT_EQ(l.loop(src, dst, *dstReg, 20), 0u);
  EXPECT_EQ(l.t.activity().bounceBytes, 0u) << "registered memory moves in place, not through the pool";
  Counters after = counters();
  EXPECT_EQ(after.dataWrites - before.dataWrites, 21 * writesFor(4 << 20));  // one RDMA write per put (per max_msg_sz)
  EXPECT_EQ(after.bytesSent - before.bytesSent, 21u * (4u << 20));
  dstReg->deregister();
  srcReg->deregister();
  EXPECT_THROW(l.in->puts()->tryOffer(dst.data(), 16, *dstReg, Transfer::kChained), Error);
}

// Memory nobody registered goes through each end's registered buffers: after the
// first put (which makes them) nothing is registered, and the data arrives exact.
TEST(IbPuts, UnregisteredBuffersGoThroughTheLibrarysRegisteredBuffers) {
  PutLink l;
  std::vector<uint32_t> src(1 << 16), dst(1 << 16);
  auto dstReg = l.t.registerMemory(dst.data(), dst.size() * 4);  // not persisted
  EXPECT_EQ(l.loop(src, dst, *dstReg, 5), 0u);
}

// Bytes the ports' registration caches hold now.
size_t pinnedBytes() {
  std::set<MrCache*> seen;
  size_t n = 0;
  for (const Port& p : ports())
    if (seen.insert(p.mrs.get()).second) n += p.mrs->counters().bytes;
  return n;
}

// Offers of memory nobody registered, several outstanding at once (independent
// receives, posted together): more than the pool has buffers register their own
// memory; a larger offer while smaller ones are outstanding makes a new region
// and the old goes once its buffers come back. Every put lands exact, a second
// round of the same sizes registers nothing, and once the link is gone nothing
// stays registered.
TEST(IbPuts, APoolFullOrTooSmallForAnOfferFallsBackAndGrows) {
  size_t before = pinnedBytes();
  {
    PutLink l;
    const std::vector<size_t> sizes = {64 << 10, (3u << 20) + 4, 64 << 10, (3u << 20) + 8, (3u << 20) + 12,
                                       (3u << 20) + 16, 100, (1u << 20) + 20};
    std::vector<std::vector<uint8_t>> src(sizes.size()), dst(sizes.size());
    for (size_t k = 0; k < sizes.size(); ++k) src[k].resize(sizes[k]), dst[k].resize(sizes[k]);
    for (int round = 0; round < 2; ++round) {
      uint64_t regs = counters().registrations;
      std::vector<std::shared_ptr<Registration>> reg;
      for (size_t k = 0; k < sizes.size(); ++k) {
        for (size_t i = 0; i < sizes[k]; ++i) src[k][i] = byteOf(static_cast<int>(k) * 2 + round, i);
        std::fill(dst[k].begin(), dst[k].end(), 0);
        reg.push_back(l.t.registerMemory(dst[k].data(), sizes[k]));
      }
      for (size_t k = 0; k < sizes.size(); ++k)
        ASSERT_TRUE(l.within([&] {
          return l.in->puts()->tryOffer(dst[k].data(), sizes[k], *reg[k], Transfer::kIndependent);
        })) << "offer " << k;
      for (size_t k = 0; k < sizes.size(); ++k) {
        ASSERT_TRUE(l.within([&] { return l.out->puts()->putsComplete(); }));
        ASSERT_TRUE(l.within([&] { return l.out->puts()->tryPut(src[k].data(), sizes[k]); })) << "put " << k;
      }
      for (size_t k = 0; k < sizes.size(); ++k) {
        size_t got = 0;
        ASSERT_TRUE(l.within([&] { return l.in->puts()->tryPutDone(&got); })) << "put " << k;
        ASSERT_EQ(got, sizes[k]);
        for (size_t i = 0; i < sizes[k]; ++i)
          ASSERT_EQ(dst[k][i], byteOf(static_cast<int>(k) * 2 + round, i)) << "round " << round << " put " << k
                                                                             << " byte " << i;
      }
      ASSERT_TRUE(l.within([&] { return l.out->puts()->putsComplete(); }));
      if (round == 1) {
        EXPECT_GT(counters().registrations - regs, 0u) << "8 outstanding offers, 1 buffer of 4 MiB";
      }
    }
    EXPECT_GT(l.t.activity().bounceBytes, 0u);
  }
  EXPECT_EQ(pinnedBytes(), before) << "a registration outlived the link";
}

// One offer at a time, sizes growing then shrinking: the pool grows to the largest
// and then serves every size; a second round registers nothing.
TEST(IbPuts, AGrownPoolServesEverySizeAfterwards) {
  size_t before = pinnedBytes();
  {
    PutLink l;
    const std::vector<size_t> sizes = {1000, 64 << 10, (64 << 10) + 1, 1 << 20, 3000, (2u << 20) - 5, 17};
    std::vector<uint8_t> src(2u << 20), dst(2u << 20);
    auto reg = l.t.registerMemory(dst.data(), dst.size());
    for (int round = 0; round < 2; ++round) {
      uint64_t regs = counters().registrations;
      for (size_t k = 0; k < sizes.size(); ++k) {
        for (size_t i = 0; i < sizes[k]; ++i) src[i] = byteOf(100 + static_cast<int>(k) * 2 + round, i);
        ASSERT_TRUE(l.within([&] { return l.in->puts()->tryOffer(dst.data(), sizes[k], *reg, Transfer::kChained); }));
        ASSERT_TRUE(l.within([&] { return l.out->puts()->tryPut(src.data(), sizes[k]); }));
        size_t got = 0;
        ASSERT_TRUE(l.within([&] { return l.in->puts()->tryPutDone(&got); }));
        ASSERT_TRUE(l.within([&] { return l.out->puts()->putsComplete(); }));
        ASSERT_EQ(got, sizes[k]);
        for (size_t i = 0; i < sizes[k]; ++i)
          ASSERT_EQ(dst[i], byteOf(100 + static_cast<int>(k) * 2 + round, i)) << "round " << round << " put " << k;
      }
      if (round == 1) {
        EXPECT_EQ(counters().registrations - regs, 0u);
      }
    }
  }
  EXPECT_EQ(pinnedBytes(), before) << "a registration outlived the link";
}

// A put larger than an end's registered buffers (8 MiB in all) is registered for
// itself, at both ends, and deregistered when it completes.
TEST(IbPuts, UnregisteredPutsLargerThanTheBuffersRegisterForThemselves) {
  PutLink l;
  std::vector<uint32_t> src(3 << 20), dst(3 << 20);  // 12 MiB
  auto dstReg = l.t.registerMemory(dst.data(), dst.size() * 4);
  EXPECT_EQ(l.loop(src, dst, *dstReg, 3), 6u);
}

}  // namespace
}  // namespace strata::transport::ib
