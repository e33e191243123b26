// One-sided transfers that the transport would rather not make (PeerMemory::worthIt
// false: a Cross Memory Attach call into private memory costs more than two copies
// below 128 KiB, or, where both ends copy anyway, a ring's write or a balanced read,
// in a registration of 256 KiB or more) go through the slots. A ring's write (an offer that is not independent) does where it is no
// larger than all the slots, waiting for them where they are full; an exposure is
// pushed as it is exposed, with no ask from the reader, where all of it fits in the
// slots free at that moment and nothing exposed before it is still waiting. Every
// byte is checked, and so is which way it went.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <memory>
#include <vector>

#include "base/doorbell.h"
#include "transports/common/fifo.h"

namespace strata::transport {
namespace {

constexpr size_t kSlotBytes = 16 << 10;
constexpr int kSlots = 4;
constexpr size_t kWorthBytes = 32 << 10;  // this test's "CMA": worth it from here
constexpr size_t kBulkRegion = 1 << 20;   // and, where both ends copy, in registrations smaller than this

class Memory final : public PeerMemory {
 public:
  explicit Memory(int* calls) : calls_(calls) {}
  bool write(const FifoOffer& to, size_t offset, const void* src, size_t bytes) override {
    ++*calls_;
    memcpy(reinterpret_cast<char*>(to.addr) + offset, src, bytes);
    return true;
  }
  bool read(const FifoOffer& from, size_t offset, void* dst, size_t bytes) override {
    if (bytes) ++*calls_;
    memcpy(dst, reinterpret_cast<const char*>(from.addr) + offset, bytes);
    return true;
  }
  bool worthIt(const FifoOffer& o, size_t bytes) const override {  // shm's rule (directWorthIt), scaled
    return o.segment[0] || bytes == 0 || (bytes >= kWorthBytes && !(o.bothCopy() && o.region >= kBulkRegion));
  }

 private:
  int* calls_;
};

struct Fifo {
  explicit Fifo(int slots = kSlots) : mem(fifoBytes(kSlotBytes, slots)) {
    fifoInit(mem.data(), kSlotBytes, slots);
    auto bell = Doorbell::create();
    out = makeFifoSender(mem.data(), nullptr, bell, std::make_unique<Memory>(&writes));
    in = makeFifoReceiver(mem.data(), nullptr, bell, std::make_unique<Memory>(&reads));
  }
  // Two-sided messages the receiver has not taken: they hold `n` slots.
  void fillSlots(int n) {
    for (int i = 0; i < n; ++i) {
      ASSERT_NE(out->trySlot(), nullptr);
      out->post(8);
    }
  }
  void drainSlots(int n) {
    for (int i = 0; i < n; ++i) {
      size_t bytes = 0;
      ASSERT_NE(in->tryData(&bytes), nullptr);
      in->release();
    }
  }
  std::vector<char> mem;
  int writes = 0, reads = 0;
  std::unique_ptr<SendConnection> out;
  std::unique_ptr<RecvConnection> in;
};

std::vector<unsigned char> patterned(size_t bytes, int seed) {
  std::vector<unsigned char> v(bytes);
  for (size_t i = 0; i < bytes; ++i) v[i] = static_cast<unsigned char>(seed * 37 + i * 13 + 1);
  return v;
}

// The receiver's side of one put into `dst` offered as a ring offers (not independent).
void offer(Fifo& f, std::vector<unsigned char>& dst, const Registration& reg) {
  ASSERT_TRUE(f.in->puts()->tryOffer(dst.data(), dst.size(), reg, Transfer::kChained));
}

TEST(SlotFallback, ASmallRingWriteGoesThroughFreeSlotsAtOnce) {
  Fifo f;
  for (size_t bytes : {size_t{1}, size_t{5000}, kSlotBytes, 2 * kSlotBytes + 7 - kSlotBytes / 2}) {
    auto src = patterned(bytes, 1);
    std::vector<unsigned char> dst(bytes);
    Registration reg(dst.data(), dst.size());
    offer(f, dst, reg);
    ASSERT_TRUE(f.out->puts()->tryPut(src.data(), bytes)) << bytes << " bytes: posted without the receiver";
    EXPECT_TRUE(f.out->puts()->putsComplete());
    size_t got = 0;
    ASSERT_TRUE(f.in->puts()->tryPutDone(&got));
    EXPECT_EQ(got, bytes);
    EXPECT_EQ(dst, src) << bytes;
  }
  EXPECT_EQ(f.writes, 0) << "no one-sided write below the worthwhile size";
}

TEST(SlotFallback, ARingWriteThatDoesNotFitTheFreeSlotsWaitsForThem) {
  Fifo f;
  f.fillSlots(kSlots - 1);  // one slot free, the put needs two
  auto src = patterned(kSlotBytes + 1, 2);
  std::vector<unsigned char> dst(src.size());
  Registration reg(dst.data(), dst.size());
  offer(f, dst, reg);
  EXPECT_FALSE(f.out->puts()->tryPut(src.data(), src.size())) << "its first chunk went, the second waits";
  f.drainSlots(kSlots - 1);
  size_t got = 0;
  EXPECT_FALSE(f.in->puts()->tryPutDone(&got)) << "only the first chunk is in";
  ASSERT_TRUE(f.out->puts()->tryPut(src.data(), src.size())) << "the rest, through the slots drained meanwhile";
  ASSERT_TRUE(f.in->puts()->tryPutDone(&got));
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.writes, 0) << "no one-sided write below the worthwhile size";
}

// A ring's put of `bytes` into an offer completes in one call with one one-sided write.
void expectWrittenAtOnce(Fifo& f, size_t bytes, int seed) {
  auto src = patterned(bytes, seed);
  std::vector<unsigned char> dst(src.size());
  Registration reg(dst.data(), dst.size());
  offer(f, dst, reg);
  ASSERT_TRUE(f.out->puts()->tryPut(src.data(), src.size()));
  EXPECT_EQ(f.writes, 1);
  size_t got = 0;
  ASSERT_TRUE(f.in->puts()->tryPutDone(&got));
  EXPECT_EQ(dst, src);
}

// A ring's put larger than all the slots could deadlock a ring were it to wait on
// them (fifo.cc, ringCanWait): it is written, however little it is.
TEST(SlotFallback, ARingWriteLargerThanAllTheSlotsIsWritten) {
  Fifo f(1);
  expectWrittenAtOnce(f, kSlotBytes + 1, 4);
}

TEST(SlotFallback, ALargeRingWriteIsWritten) {
  Fifo f;
  expectWrittenAtOnce(f, kWorthBytes, 3);
}

// The offer carries the registration it lies in (the whole output of a ring), so
// the transport may choose by it: this test's memory would rather not write a ring's
// step into regions from 1 MiB (the shm transport's rule, from 256 KiB).
TEST(SlotFallback, AnOfferCarriesItsRegistrationSoAWriteIntoALargeOneGoesThroughTheSlots) {
  Fifo f;
  auto src = patterned(kWorthBytes + 5, 5);
  std::vector<unsigned char> output(kBulkRegion);
  Registration reg(output.data(), output.size());
  ASSERT_TRUE(f.in->puts()->tryOffer(output.data() + 100, src.size(), reg, Transfer::kChained));
  size_t got = 0;
  for (int i = 0; i < 8 && !f.out->puts()->tryPut(src.data(), src.size()); ++i)
    EXPECT_FALSE(f.in->puts()->tryPutDone(&got));
  ASSERT_TRUE(f.in->puts()->tryPutDone(&got));
  EXPECT_EQ(got, src.size());
  EXPECT_TRUE(std::equal(src.begin(), src.end(), output.begin() + 100));
  EXPECT_EQ(f.writes, 0) << "through the slots, though worth a write by its size";
}

// The receiver reads the oldest exposure (of `src`) into `dst`; both ends complete.
void completeGet(Fifo& f, const std::vector<unsigned char>& src, std::vector<unsigned char>& dst) {
  size_t got = 0;
  bool read = false, done = false;
  for (int i = 0; i < 8 && !(read && done); ++i) {  // each end a few turns, in turn
    read = read || f.in->gets()->tryGet(dst.data(), dst.size(), &got);
    done = done || f.out->gets()->tryGetDone();
  }
  ASSERT_TRUE(read && done);
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(dst, src);
}

void exposeAndGet(Fifo& f, std::vector<unsigned char>& src, std::vector<unsigned char>& dst) {
  Registration reg(src.data(), src.size());
  ASSERT_TRUE(f.out->gets()->tryExpose(src.data(), src.size(), reg, Transfer::kIndependent));
  completeGet(f, src, dst);
}

// What a read belongs to travels with its exposure: a balanced one (DirectRead's
// all-gather) out of a large registration goes through the slots, larger than all of
// them, on the reader's ask; the same exposure independent (a scatter's) is read.
TEST(SlotFallback, ABalancedExposureOfALargeRegistrationGoesThroughTheSlots) {
  Fifo f;
  auto buffer = patterned(kBulkRegion, 6);
  Registration reg(buffer.data(), buffer.size());
  std::vector<unsigned char> src(buffer.begin(), buffer.begin() + 7 * kSlotBytes + 3);  // more than all slots
  ASSERT_TRUE(f.out->gets()->tryExpose(buffer.data(), src.size(), reg, Transfer::kBalanced));
  std::vector<unsigned char> dst(src.size());
  completeGet(f, src, dst);
  EXPECT_EQ(f.reads, 0) << "read through the slots, not by the peer-memory read";
  ASSERT_TRUE(f.out->gets()->tryExpose(buffer.data(), src.size(), reg, Transfer::kIndependent));
  std::vector<unsigned char> again(src.size());
  completeGet(f, src, again);
  EXPECT_EQ(f.reads, 1) << "an independent exposure of the same memory is read";
}

TEST(SlotFallback, ASmallExposureIsPushedWithoutTheReadersAsk) {
  Fifo f;
  auto src = patterned(kSlotBytes + 100, 4);
  Registration reg(src.data(), src.size());
  ASSERT_TRUE(f.out->gets()->tryExpose(src.data(), src.size(), reg, Transfer::kIndependent));
  EXPECT_TRUE(f.out->gets()->tryGetDone()) << "the sender is done as it exposes: the data are in the slots";
  std::vector<unsigned char> dst(src.size());
  size_t got = 0;
  ASSERT_TRUE(f.in->gets()->tryGet(dst.data(), dst.size(), &got));
  EXPECT_EQ(got, src.size());
  EXPECT_EQ(dst, src);
  EXPECT_EQ(f.reads, 0);
  // Again, after a read of a large one: the counts of both ends stay in step.
  auto large = patterned(kWorthBytes, 5);
  std::vector<unsigned char> ldst(large.size());
  exposeAndGet(f, large, ldst);
  EXPECT_EQ(f.reads, 1);
  exposeAndGet(f, src, dst);
  EXPECT_EQ(f.reads, 1);
}

TEST(SlotFallback, AnExposureBehindAWaitingOneOrFullSlotsWaitsForTheAsk) {
  Fifo f;
  auto large = patterned(kWorthBytes, 6), small = patterned(100, 7);
  Registration lreg(large.data(), large.size()), sreg(small.data(), small.size());
  ASSERT_TRUE(f.out->gets()->tryExpose(large.data(), large.size(), lreg, Transfer::kIndependent));
  // The large one waits: not pushed.
  ASSERT_TRUE(f.out->gets()->tryExpose(small.data(), small.size(), sreg, Transfer::kIndependent));
  std::vector<unsigned char> ldst(large.size()), sdst(small.size());
  size_t got = 0;
  ASSERT_TRUE(f.in->gets()->tryGet(ldst.data(), ldst.size(), &got));
  EXPECT_EQ(ldst, large);
  ASSERT_TRUE(f.out->gets()->tryGetDone());
  EXPECT_FALSE(f.out->gets()->tryGetDone()) << "the small one was not pushed: the reader has not asked yet";
  EXPECT_FALSE(f.in->gets()->tryGet(sdst.data(), sdst.size(), &got)) << "asks for it";
  EXPECT_TRUE(f.out->gets()->tryGetDone());
  ASSERT_TRUE(f.in->gets()->tryGet(sdst.data(), sdst.size(), &got));
  EXPECT_EQ(sdst, small);

  f.fillSlots(kSlots);  // no slot free: not pushed either
  ASSERT_TRUE(f.out->gets()->tryExpose(small.data(), small.size(), sreg, Transfer::kIndependent));
  EXPECT_FALSE(f.out->gets()->tryGetDone());
  f.drainSlots(kSlots);
  std::fill(sdst.begin(), sdst.end(), 0);
  completeGet(f, small, sdst);
  EXPECT_EQ(f.reads, 1) << "only the large one was read";
}

// Pushed exposures are complete for the sender at once; with more slots than
// exposure entries (kMaxSlots 64, kMaxOffers 32), the sender must still not reuse an
// entry the receiver has not taken: the 33rd waits until the first is read.
TEST(SlotFallback, PushedExposuresDoNotOverrunTheEntriesTheReceiverHasNotTaken) {
  Fifo f(kMaxSlots);
  std::vector<std::vector<unsigned char>> src, dst;
  for (int i = 0; i < kMaxOffers + 8; ++i) src.push_back(patterned(100 + i, i)), dst.emplace_back(src.back().size());
  std::deque<Registration> regs;  // not copyable, not moved
  for (auto& v : src) regs.emplace_back(v.data(), v.size());
  for (int i = 0; i < kMaxOffers; ++i) {
    ASSERT_TRUE(f.out->gets()->tryExpose(src[i].data(), src[i].size(), regs[i], Transfer::kIndependent)) << i;
    ASSERT_TRUE(f.out->gets()->tryGetDone()) << i << ": pushed";
  }
  EXPECT_FALSE(f.out->gets()->tryExpose(src[kMaxOffers].data(), src[kMaxOffers].size(), regs[kMaxOffers],
                                        Transfer::kIndependent))
      << "every entry holds an exposure the receiver has not taken";
  size_t got = 0;
  for (int next = 0, taken = 0; taken < kMaxOffers + 8; ++taken) {
    ASSERT_TRUE(f.in->gets()->tryGet(dst[taken].data(), dst[taken].size(), &got)) << taken;
    EXPECT_EQ(dst[taken], src[taken]) << taken;
    for (next = std::max(next, kMaxOffers); next < kMaxOffers + 8 && next <= taken + kMaxOffers; ++next) {
      ASSERT_TRUE(f.out->gets()->tryExpose(src[next].data(), src[next].size(), regs[next], Transfer::kIndependent))
          << next;
      ASSERT_TRUE(f.out->gets()->tryGetDone()) << next;
    }
  }
  EXPECT_EQ(f.reads, 0);
}

}  // namespace
}  // namespace strata::transport
