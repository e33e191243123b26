// The rendezvous' wire format, as a root reads it from other processes.
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "base/error.h"
#include "core/bootstrap.h"

namespace strata::core {
namespace {

std::string hello(int nranks, int entries, int expected, size_t peers) {
  HelloHeader h{};
  h.nranks = nranks;
  h.expected = expected;
  std::string msg = packPeers(h, std::vector<PeerInfo>(peers));
  HelloHeader* raw = reinterpret_cast<HelloHeader*>(msg.data());
  raw->entries = entries;
  return msg;
}

ncclResult_t codeOf(const std::string& msg) {
  HelloHeader h;
  try {
    unpackPeers(msg, &h);
  } catch (const Error& e) {
    return e.code();
  }
  return ncclSuccess;
}

TEST(BootstrapWire, RoundTripsAndCutsNamesToTheirArrays) {
  std::vector<PeerInfo> peers(3);
  for (int r = 0; r < 3; ++r) {
    peers[r].rank = r;
    memset(peers[r].hostname, 'h', sizeof peers[r].hostname);  // no terminating zero, as a stranger may send
    memset(peers[r].bellName, 'b', sizeof peers[r].bellName);
    memset(peers[r].busId, 'x', sizeof peers[r].busId);
  }
  HelloHeader h{};
  h.nranks = 3;
  h.expected = 3;
  HelloHeader got;
  auto back = unpackPeers(packPeers(h, peers), &got);
  ASSERT_EQ(back.size(), 3u);
  EXPECT_EQ(got.nranks, 3);
  EXPECT_EQ(back[2].rank, 2);
  EXPECT_EQ(strlen(back[1].hostname), sizeof back[1].hostname - 1);
  EXPECT_EQ(strlen(back[1].bellName), sizeof back[1].bellName - 1);
  EXPECT_EQ(strlen(back[1].busId), sizeof back[1].busId - 1);
}

// Before these checks, a hello for -1 or 2^31-1 ranks made the root resize its
// table to that and die with an uncaught length_error or bad_alloc.
TEST(BootstrapWire, RefusesWhatNoRankSends) {
  EXPECT_EQ(codeOf(hello(2, 1, 2, 1)), ncclSuccess);
  EXPECT_EQ(codeOf(hello(2, 0, 0, 0)), ncclSuccess);  // no entries: nothing copied (UBSan once flagged it)
  EXPECT_EQ(codeOf("short"), ncclRemoteError);
  EXPECT_EQ(codeOf(hello(-1, 0, 0, 0)), ncclRemoteError);
  EXPECT_EQ(codeOf(hello(0, 0, 0, 0)), ncclRemoteError);
  EXPECT_EQ(codeOf(hello(0x7fffffff, 0, 0, 0)), ncclRemoteError);
  EXPECT_EQ(codeOf(hello(kMaxRanks + 1, 0, 0, 0)), ncclRemoteError);
  EXPECT_EQ(codeOf(hello(2, 3, 2, 3)), ncclRemoteError);   // more entries than ranks
  EXPECT_EQ(codeOf(hello(2, 2, 2, 1)), ncclRemoteError);   // fewer bytes than entries
  EXPECT_EQ(codeOf(hello(2, -1, 2, 0)), ncclRemoteError);
  EXPECT_EQ(codeOf(hello(2, 1, 5, 1)), ncclRemoteError);   // expects more ranks than there are
  EXPECT_EQ(codeOf(hello(2, 1, 2, 1) + "x"), ncclRemoteError);
}

// Seeds for the fuzz target (tests/fuzz/corpus/fuzz_peer_table), written by
// STRATA_WRITE_FUZZ_SEEDS=DIR: a valid hello and the refused ones above.
TEST(BootstrapWire, WritesFuzzSeeds) {
  const char* dir = getenv("STRATA_WRITE_FUZZ_SEEDS");
  if (!dir) GTEST_SKIP() << "STRATA_WRITE_FUZZ_SEEDS not set";
  int i = 0;
  for (const std::string& s : {hello(2, 1, 2, 1), hello(3, 3, 3, 3), hello(-1, 0, 0, 0), hello(0x7fffffff, 0, 0, 0),
                               hello(2, 3, 2, 3), hello(2, 1, 5, 1)})
    std::ofstream(std::string(dir) + "/hello" + std::to_string(i++), std::ios::binary) << s;
}

}  // namespace
}  // namespace strata::core
