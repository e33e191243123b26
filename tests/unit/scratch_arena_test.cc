#include "core/scratch_arena.h"

#include <gtest/gtest.h>

namespace strata::core {
namespace {

TEST(ScratchArena, ARoundAfterTheFirstReusesItsMemory) {
  ScratchArena a;
  char* x = a.take(1 << 20);
  char* y = a.take(4096);
  EXPECT_NE(x, y);
  a.recycle();
  EXPECT_EQ(a.take(1 << 20), x);  // no fresh mapping to fault in again
  EXPECT_EQ(a.take(4096), y);
  EXPECT_EQ(a.buffers(), 2u);
}

TEST(ScratchArena, TakesWithinARoundNeverShareABuffer) {
  ScratchArena a;
  char* x = a.take(100);
  a.recycle();
  EXPECT_EQ(a.take(50), x);  // the smallest free buffer large enough
  char* y = a.take(50);
  EXPECT_NE(y, x);
  EXPECT_EQ(a.buffers(), 2u);
}

TEST(ScratchArena, BuffersTooSmallForATakeAreGivenBack) {
  ScratchArena a;
  a.take(1000);
  a.take(2000);
  a.recycle();
  a.take(1 << 16);  // neither fits: both go, what is kept is what this round takes
  EXPECT_EQ(a.buffers(), 1u);
  EXPECT_EQ(a.keptBytes(), size_t{1} << 16);
  a.take(10);  // the one kept is taken: a new one, nothing given back
  EXPECT_EQ(a.buffers(), 2u);
}

TEST(ScratchArena, AZeroByteTakeIsUsableMemory) {
  ScratchArena a;
  EXPECT_NE(a.take(0), nullptr);
}

}  // namespace
}  // namespace strata::core
