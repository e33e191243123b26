// A large one-sided read split between the FIFO's two ends (ChunkClaims,
// SharedRead): every chunk is claimed once, by one end; a claimant of an earlier
// read takes nothing of the next, nor of a closed one; the data arrive exact (as
// the receiver sees them when its read completes) whether the sender helps, cannot
// write (it hands its chunk back), never calls, or the receiver cannot read a chunk
// (the exposure then comes through the slots).
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "base/doorbell.h"
#include "transports/common/fifo.h"

namespace strata::transport {
namespace {

TEST(ChunkClaims, BothEndsClaimEveryChunkOnce) {
  ChunkClaims claims;
  for (size_t n : {4, 5, 64, 1000}) {
    for (uint64_t gen = 1; gen <= 50; ++gen) {
      claims.open(gen);
      std::vector<std::atomic<int>> taken(n);
      std::vector<long> front, back;
      std::thread helper([&] {
        for (long c; (c = claims.claim(gen, n, false)) >= 0;) back.push_back(c), taken[c]++;
      });
      for (long c; (c = claims.claim(gen, n, true)) >= 0;) front.push_back(c), taken[c]++;
      helper.join();
      for (size_t c = 0; c < n; ++c) ASSERT_EQ(taken[c], 1) << "chunk " << c << " of " << n;
      for (size_t i = 0; i < front.size(); ++i) ASSERT_EQ(front[i], static_cast<long>(i));
      for (size_t i = 0; i < back.size(); ++i) ASSERT_EQ(back[i], static_cast<long>(n - 1 - i));
      ASSERT_EQ(claims.back(), back.size());
    }
  }
}

TEST(ChunkClaims, AnotherReadsClaimantTakesNothing) {
  ChunkClaims claims;
  EXPECT_EQ(claims.claim(ChunkClaims::generation(0), 8, false), -1) << "no read opened yet";
  claims.open(ChunkClaims::generation(7));
  EXPECT_EQ(claims.claim(ChunkClaims::generation(6), 8, false), -1);
  EXPECT_EQ(claims.claim(ChunkClaims::generation(7), 8, false), 7);
  EXPECT_EQ(claims.claim(ChunkClaims::generation(7), 8, true), 0);
  // Tags never take the value of a word no read opened, also where they wrap.
  for (uint64_t e : {uint64_t{0}, (uint64_t{1} << 24) - 2, (uint64_t{1} << 24) - 1, uint64_t{1} << 40})
    EXPECT_NE(ChunkClaims::generation(e), 0u) << e;
  // Closed, the word matches no generation: not the same one, nor one that wraps onto it.
  EXPECT_EQ(claims.close(), 1u);
  EXPECT_EQ(claims.claim(ChunkClaims::generation(7), 8, false), -1);
  EXPECT_EQ(claims.claim(ChunkClaims::generation(7 + (uint64_t{1} << 24) - 1), 8, false), -1);
  EXPECT_EQ(ChunkClaims::generation(7 + (uint64_t{1} << 24) - 1), ChunkClaims::generation(7));
  EXPECT_FALSE(ChunkClaims::shareable(3 * kSharedChunkBytes));
  EXPECT_TRUE(ChunkClaims::shareable(4 * kSharedChunkBytes));
  EXPECT_EQ(ChunkClaims::chunks(4 * kSharedChunkBytes + 1), 5u);
}

// Both ends in one address space. The receiver's first chunk of each shared read
// waits (10 s at most) until the sender has tried to write a chunk of it, so that
// the read is shared: every read while the sender can write, the first otherwise
// (it stops helping after a failed write). A write lands 20 ms late, so a receiver
// that completed without waiting for it would see zeros. `canWrite` false makes
// writes fail; `failReadAt` makes the receiver's read of that offset fail once.
struct Behaviour {
  bool canWrite = true;
  bool waitForWriter = true;
  size_t failReadAt = SIZE_MAX;
};

class Memory final : public PeerMemory {
 public:
  Memory(std::atomic<int>* attempts, std::atomic<int>* written, Behaviour b)
      : attempts_(attempts), written_(written), b_(b), waitsLeft_(!b.waitForWriter ? 0 : b.canWrite ? 1 << 30 : 1) {}
  bool write(const FifoOffer& to, size_t offset, const void* src, size_t bytes) override {
    attempts_->fetch_add(1);
    if (!b_.canWrite) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    memcpy(reinterpret_cast<char*>(to.addr) + offset, src, bytes);
    written_->fetch_add(1);
    return true;
  }
  bool read(const FifoOffer& from, size_t offset, void* dst, size_t bytes) override {
    if (bytes && offset == b_.failReadAt) {
      b_.failReadAt = SIZE_MAX;
      return false;
    }
    if (offset == 0 && bytes && ChunkClaims::shareable(from.bytes) && waitsLeft_ > 0) {
      --waitsLeft_;
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
      while (attempts_->load() == seen_ && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
      seen_ = attempts_->load();
    }
    memcpy(dst, reinterpret_cast<const char*>(from.addr) + offset, bytes);
    return true;
  }

 private:
  std::atomic<int>*attempts_, *written_;
  Behaviour b_;
  int waitsLeft_, seen_ = 0;
};

struct Outcome {
  int helped = 0;     // chunks the sender's helpRead() took
  int written = 0;    // chunks it wrote
};

unsigned char pattern(size_t m, size_t i) { return static_cast<unsigned char>(m * 31 + i * 7 + 1); }

// Reads `sizes` one after another through one FIFO; the sender calls helpRead()
// while it waits when `help`. The receiver checks every byte once its read completes.
Outcome readAll(const std::vector<size_t>& sizes, bool help, Behaviour b) {
  size_t slotBytes = 64 << 10;
  std::vector<char> fifo(fifoBytes(slotBytes, 4));
  fifoInit(fifo.data(), slotBytes, 4);
  std::atomic<int> attempts{0}, written{0};
  auto bell = Doorbell::create();
  Behaviour senderSide = b;
  senderSide.waitForWriter = false;
  senderSide.failReadAt = SIZE_MAX;
  b.waitForWriter = help && b.failReadAt == SIZE_MAX;
  auto out = makeFifoSender(fifo.data(), nullptr, bell, std::make_unique<Memory>(&attempts, &written, senderSide));
  auto in = makeFifoReceiver(fifo.data(), nullptr, bell, std::make_unique<Memory>(&attempts, &written, b));
  size_t most = *std::max_element(sizes.begin(), sizes.end());
  std::vector<unsigned char> src(most), dst(most);
  Registration reg(src.data(), src.size());
  Outcome o;
  for (size_t m = 0; m < sizes.size(); ++m) {
    for (size_t i = 0; i < sizes[m]; ++i) src[i] = pattern(m, i);
    std::fill(dst.begin(), dst.end(), 0);
    EXPECT_TRUE(out->gets()->tryExpose(src.data(), sizes[m], reg, Transfer::kIndependent));
    std::thread receiver([&] {
      size_t got = 0;
      while (!in->gets()->tryGet(dst.data(), dst.size(), &got)) std::this_thread::yield();
      EXPECT_EQ(got, sizes[m]);
      for (size_t i = 0; i < sizes[m]; ++i)
        if (dst[i] != pattern(m, i)) {
          ADD_FAILURE() << "read " << m << " byte " << i << " is " << int(dst[i]) << " when the read completed";
          break;
        }
    });
    while (!out->gets()->tryGetDone()) {
      if (help && out->gets()->helpRead()) ++o.helped;
      std::this_thread::yield();
    }
    receiver.join();
  }
  o.written = written.load();
  return o;
}

const std::vector<size_t> kSizes = {4 << 20, (5 << 20) + 3, 1 << 20, 12 << 20, 4 << 20};

TEST(SharedRead, TheSenderHelpsAndTheDataAreExact) {
  Outcome o = readAll(kSizes, true, {});
  EXPECT_GE(o.helped, 4) << "every shared read (four of five) had a chunk written by the sender";
  EXPECT_EQ(o.written, o.helped);
}

TEST(SharedRead, ASenderThatCannotWriteHandsItsChunkBack) {
  Outcome o = readAll(kSizes, true, {.canWrite = false});
  EXPECT_EQ(o.helped, 1) << "after one failed write the sender stops helping";
  EXPECT_EQ(o.written, 0);
}

TEST(SharedRead, TheReceiverReadsAloneWhenTheSenderNeverHelps) {
  Outcome o = readAll(kSizes, false, {});
  EXPECT_EQ(o.helped, 0);
  EXPECT_EQ(o.written, 0);
}

// A chunk the receiver cannot read (its second) sends that exposure, and every later
// one, through the slots; chunks the sender wrote meanwhile carry the same bytes.
TEST(SharedRead, AChunkTheReceiverCannotReadComesThroughTheSlots) {
  readAll(kSizes, true, {.failReadAt = kSharedChunkBytes});
  readAll(kSizes, false, {.failReadAt = kSharedChunkBytes});
}

}  // namespace
}  // namespace strata::transport
