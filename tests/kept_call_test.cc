// The same call made again (a training loop's) runs with the tasks its communicator
// kept from last time (src/core/kept_call.h): exact results with new data each time,
// calls that differ in any argument, the configuration or a user's reduction plan
// anew, and NCCL_DEBUG_SUBSYS=COLL says which each call did.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "harness/ranks.h"
#include "nccl.h"

namespace strata::test {
namespace {

class KeptCall : public ::testing::TestWithParam<Mode> {};

std::string at(const char* what, int it, size_t i, long long got, long long want) {
  return std::string(what) + ", iteration " + std::to_string(it) + ": [" + std::to_string(i) +
         "] = " + std::to_string(got) + ", expected " + std::to_string(want);
}

// A loop of the same small all-reduce (kept after its first call), its input new at
// every iteration, interleaved with calls that differ from it in one argument each:
// the count (more than one LL round: 4 KiB of data per round), the reduction, the
// output buffer (in place), and a broadcast. Each is exact, every time.
std::string loopRank(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  constexpr size_t kSmall = 6, kLarge = 2500;  // 24 B; 10000 B: three rounds
  std::vector<int> in(kLarge), out(kLarge);
  auto fill = [&](int it) {
    for (size_t i = 0; i < kLarge; ++i) in[i] = (rank + 1) * (it + 1) + static_cast<int>(i);
  };
  // sum over ranks of (r + 1)(it + 1) + i
  auto sum = [&](int it, size_t i) { return (it + 1) * n * (n + 1) / 2 + n * static_cast<long long>(i); };
  for (int it = 0; it < 60; ++it) {
    fill(it);
    RANK_NCCL(ncclAllReduce(in.data(), out.data(), kSmall, ncclInt32, ncclSum, comm, nullptr));
    for (size_t i = 0; i < kSmall; ++i)
      if (out[i] != sum(it, i)) return at("the repeated all-reduce", it, i, out[i], sum(it, i));
    if (it % 5 == 1) {
      RANK_NCCL(ncclAllReduce(in.data(), out.data(), kLarge, ncclInt32, ncclSum, comm, nullptr));
      for (size_t i = 0; i < kLarge; ++i)
        if (out[i] != sum(it, i)) return at("the larger all-reduce", it, i, out[i], sum(it, i));
    }
    if (it % 5 == 2) {
      RANK_NCCL(ncclAllReduce(in.data(), out.data(), kSmall, ncclInt32, ncclMax, comm, nullptr));
      for (size_t i = 0; i < kSmall; ++i) {
        long long want = n * (it + 1) + static_cast<long long>(i);
        if (out[i] != want) return at("the max all-reduce", it, i, out[i], want);
      }
    }
    if (it % 5 == 3) {
      RANK_NCCL(ncclAllReduce(in.data(), in.data(), kSmall, ncclInt32, ncclSum, comm, nullptr));
      for (size_t i = 0; i < kSmall; ++i)
        if (in[i] != sum(it, i)) return at("the in-place all-reduce", it, i, in[i], sum(it, i));
    }
    if (it % 5 == 4) {
      RANK_NCCL(ncclBroadcast(in.data(), out.data(), kSmall, ncclInt32, it % n, comm, nullptr));
      for (size_t i = 0; i < kSmall; ++i) {
        long long want = (it % n + 1) * (it + 1) + static_cast<long long>(i);
        if (out[i] != want) return at("the broadcast", it, i, out[i], want);
      }
    }
  }
  RANK_NCCL(ncclCommDestroy(comm));
  return "";
}

TEST_P(KeptCall, RepeatedCallsAreExactAmongOthers) {
  for (int n : {2, 3}) {
    auto results = runRanks(GetParam(), n, loopRank);
    EXPECT_EQ(failures(results), "") << n << " ranks";
  }
}

// A reduction the user made: a handle destroyed and made again (NCCL hands out the
// same number) with another scalar must not run as the call before it did.
std::string userOpRank(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  int in[4] = {rank + 1, 1, 2, 3}, out[4] = {};
  for (int scalar = 1; scalar <= 3; ++scalar) {
    ncclRedOp_t op;
    RANK_NCCL(ncclRedOpCreatePreMulSum(&op, &scalar, ncclInt32, ncclScalarHostImmediate, comm));
    RANK_NCCL(ncclAllReduce(in, out, 4, ncclInt32, op, comm, nullptr));
    RANK_NCCL(ncclRedOpDestroy(op, comm));
    if (out[0] != scalar * n * (n + 1) / 2) return at("the pre-multiplied sum", scalar, 0, out[0], scalar * n * (n + 1) / 2);
    if (out[3] != scalar * n * 3) return at("the pre-multiplied sum", scalar, 3, out[3], scalar * n * 3);
  }
  RANK_NCCL(ncclCommDestroy(comm));
  return "";
}

TEST_P(KeptCall, AUserReductionMadeAgainIsNotTheOneBefore) {
  auto results = runRanks(GetParam(), 2, userOpRank);
  EXPECT_EQ(failures(results), "");
}

INSTANTIATE_TEST_SUITE_P(Host, KeptCall, ::testing::Values(Mode::kThreads, Mode::kProcesses),
                         [](const auto& info) { return std::string(modeName(info.param)); });

// What each call did, as NCCL_DEBUG_SUBSYS=COLL logs it: the first of a loop plans,
// the ones after run kept; a new configuration (NCCL_PROTO) plans again, and a
// protocol whose tasks cannot rearm (Simple's FIFOs) plans every time.
std::string loggedRank(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  float in[2] = {1, 2}, out[2];
  for (int i = 0; i < 3; ++i) RANK_NCCL(ncclAllReduce(in, out, 2, ncclFloat, ncclSum, comm, nullptr));
  setenv("NCCL_PROTO", "Simple", 1);
  // A reload starts the log file again (as NCCL's does): the second part goes to its own.
  std::string file = getenv("NCCL_DEBUG_FILE");
  setenv("NCCL_DEBUG_FILE", file.replace(file.find("first."), 6, "then.").c_str(), 1);
  reloadEnvironment();
  for (int i = 0; i < 2; ++i) RANK_NCCL(ncclAllReduce(in, out, 2, ncclFloat, ncclSum, comm, nullptr));
  RANK_NCCL(ncclCommDestroy(comm));
  return out[1] == 2.0f * n ? "" : "wrong sum " + std::to_string(out[1]);
}

TEST(KeptCallLog, SaysWhichCallsPlannedAndWhichRanKept) {
  std::string dir = testing::TempDir() + "strata-kept." + std::to_string(getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  setenv("NCCL_DEBUG", "INFO", 1);
  setenv("NCCL_DEBUG_SUBSYS", "COLL", 1);
  setenv("NCCL_DEBUG_FILE", (dir + "/first.%p").c_str(), 1);
  reloadEnvironment();
  auto results = runRanks(Mode::kProcesses, 2, loggedRank);
  for (const char* name : {"NCCL_DEBUG", "NCCL_DEBUG_SUBSYS", "NCCL_DEBUG_FILE"}) unsetenv(name);
  reloadEnvironment();
  EXPECT_EQ(failures(results), "");
  int ranks = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    std::string name = e.path().filename();
    if (name.rfind("first.", 0) != 0) continue;
    ++ranks;
    std::string said;
    for (const std::string& part : {name, "then." + name.substr(6)}) {
      std::ifstream in(dir + "/" + part);
      for (std::string l; std::getline(in, l);) {
        if (l.find("ncclAllReduce: sendbuff") == std::string::npos) continue;
        size_t at = l.find("[nranks=2]: ");
        ASSERT_NE(at, std::string::npos) << l;
        said += l.substr(at + 12) + "\n";
      }
    }
    EXPECT_EQ(said,
              "OneShot/LL, planned\nOneShot/LL, kept\nOneShot/LL, kept\n"
              "OneShot/Simple, planned\nOneShot/Simple, planned\n");
  }
  EXPECT_EQ(ranks, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::test
