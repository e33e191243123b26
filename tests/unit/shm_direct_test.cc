// Which one-sided transfers between processes on one host move directly (a plain
// copy into a mapped segment, or Cross Memory Attach) and which go through the
// slots (shm::directWorthIt; docs/perf.md).
#include <gtest/gtest.h>

#include <cstring>

#include "transports/shm/shm_transport.h"

namespace strata::transport::shm {
namespace {

constexpr size_t kBulk = 256 << 10;

FifoOffer offer(size_t region, bool independent, const char* segment = "", bool balanced = false) {
  FifoOffer o{};
  o.region = region;
  o.kind = balanced ? Transfer::kBalanced : independent ? Transfer::kIndependent : Transfer::kChained;
  strncpy(o.segment, segment, sizeof(o.segment) - 1);
  return o;
}

TEST(ShmDirect, SmallTransfersIntoPrivateMemoryGoThroughTheSlots) {
  EXPECT_FALSE(directWorthIt(offer(kBulk - 1, false), (128 << 10) - 1, kBulk));
  EXPECT_FALSE(directWorthIt(offer(kBulk - 1, true), 16 << 10, kBulk));
  EXPECT_TRUE(directWorthIt(offer(kBulk - 1, false), 128 << 10, kBulk));
  EXPECT_TRUE(directWorthIt(offer(kBulk - 1, true), 128 << 10, kBulk));
}

TEST(ShmDirect, ARingWriteIntoAnOutputOfTheBulkSizeGoesThroughTheSlots) {
  EXPECT_TRUE(directWorthIt(offer(kBulk - 1, false), 1 << 20, kBulk));
  EXPECT_FALSE(directWorthIt(offer(kBulk, false), 1 << 20, kBulk));
  EXPECT_FALSE(directWorthIt(offer(size_t{1} << 34, false), 1 << 20, kBulk));
}

// DirectRead's all-gather reads: every rank copies as much as it is sent,
// so from the bulk size the slots' second copy costs no idle core.
TEST(ShmDirect, ABalancedTransferOfTheBulkSizeGoesThroughTheSlots) {
  EXPECT_TRUE(directWorthIt(offer(kBulk - 1, true, "", true), 128 << 10, kBulk));
  EXPECT_FALSE(directWorthIt(offer(kBulk, true, "", true), 128 << 10, kBulk));
  EXPECT_FALSE(directWorthIt(offer(size_t{1} << 34, true, "", true), 1 << 20, kBulk));
  EXPECT_FALSE(directWorthIt(offer(kBulk, true, "", true), (128 << 10) - 1, kBulk));  // small: the slots anyway
  EXPECT_TRUE(directWorthIt(offer(kBulk, true, "/strata-seg", true), 1 << 20, kBulk));  // mapped: a plain copy
}

TEST(ShmDirect, PointToPointIntoALargeBufferKeepsCrossMemoryAttach) {
  EXPECT_TRUE(directWorthIt(offer(kBulk, true), 1 << 20, kBulk));
  EXPECT_TRUE(directWorthIt(offer(size_t{1} << 34, true), size_t{1} << 33, kBulk));
}

TEST(ShmDirect, AMappedSegmentAndAnEmptyTransferAlwaysMoveDirectly) {
  EXPECT_TRUE(directWorthIt(offer(kBulk, false, "/strata-seg"), 8, kBulk));
  EXPECT_TRUE(directWorthIt(offer(size_t{1} << 34, false, "/strata-seg"), 1 << 20, kBulk));
  EXPECT_TRUE(directWorthIt(offer(kBulk, false), 0, kBulk));
}

}  // namespace
}  // namespace strata::transport::shm
