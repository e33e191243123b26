#include "core/settings_agreement.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"

namespace strata::core {
namespace {

// Ranks 0,1 on host A and 2,3 on host B, every setting alike; `mine` as a GPU rank's.
struct Table {
  std::vector<PeerInfo> peers = std::vector<PeerInfo>(4);
  std::vector<AgreedSetting> mine;
  Table() {
    CommOptions gpu;
    gpu.device = 0;
    mine = agreedSettings(gpu);
    for (int r = 0; r < 4; ++r) {
      peers[r].rank = r;
      peers[r].hostHash = r < 2 ? 0xa : 0xb;
      hashSettings(mine, &peers[r]);
    }
  }
  int index(const std::string& name) const {
    for (size_t i = 0; i < mine.size(); ++i)
      if (name == mine[i].name) return static_cast<int>(i);
    return -1;
  }
  std::string check(int rank) const {
    try {
      checkSettingsAgreed(peers, rank, mine);
      return "";
    } catch (const Error& e) {
      return std::to_string(e.code()) + ": " + e.what();
    }
  }
};

TEST(SettingsTable, AlikeSettingsPass) { EXPECT_EQ(Table().check(0), ""); }

TEST(SettingsTable, AGlobalSettingMustMatchRankZeroOnEveryHost) {
  Table t;
  t.peers[3].settings[t.index("NCCL_ALGO")] ^= 1;
  for (int r = 0; r < 4; ++r) {  // every rank fails alike, naming the pair
    std::string e = t.check(r);
    EXPECT_NE(e.find(std::to_string(ncclInvalidUsage) + ": rank " + std::to_string(r) +
                     ": ranks 0 and 3 differ in NCCL_ALGO"), std::string::npos) << e;
  }
  Table u;
  u.peers[2].settings[u.index("NCCL_SHM_DISABLE")] ^= 1;  // also global (ring hops on every host)
  EXPECT_NE(u.check(1).find("ranks 0 and 2 differ in NCCL_SHM_DISABLE"), std::string::npos);
}

TEST(SettingsTable, AHostSettingMustMatchOnlyTheFirstRankOfItsHost) {
  Table t;
  int level = t.index("NCCL_P2P_LEVEL");
  ASSERT_GE(level, 0);
  t.peers[2].settings[level] ^= 1;  // host B differs from host A: fine, alike within B
  t.peers[3].settings[level] ^= 1;
  EXPECT_EQ(t.check(0), "");
  t.peers[3].settings[level] ^= 1;  // now 2 and 3 differ
  EXPECT_NE(t.check(0).find("ranks 2 and 3 differ in NCCL_P2P_LEVEL"), std::string::npos) << t.check(0);
}

// What a GPU rank compares, it compares as the plan uses it.
TEST(SettingsTable, ValuesAreTheEffectiveOnes) {
  if (!config().p2pLevel.empty()) GTEST_SKIP() << "NCCL_P2P_LEVEL is set";
  CommOptions host, gpu;
  gpu.device = 0;
  Table t;
  int level = t.index("NCCL_P2P_LEVEL"), slots = t.index("the slots (NCCL_BUFFSIZE / STRATA_NSLOTS)");
  ASSERT_GE(slots, 0);
  EXPECT_EQ(agreedSettings(host)[level].value, "");  // no GPU: P2P settings play no part
  EXPECT_EQ(agreedSettings(gpu)[level].value, "pxb");  // unset is NCCL's default, PXB
  StagingShape shape = stagingShape(config());
  EXPECT_EQ(agreedSettings(gpu)[slots].value, std::to_string(shape.slots) + " x " + std::to_string(shape.slotBytes));
}

}  // namespace
}  // namespace strata::core
