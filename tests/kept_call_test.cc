// The same call made again (a training loop's) runs with the tasks its communicator
// kept from last time (src/core/kept_call.h): exact results with new data each time,
// calls that differ in any argument, the configuration or a user's reduction plan
// anew, and NCCL_DEBUG_SUBSYS=COLL says which each call did.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
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

// Each kind of call made four times in a row with new input (the three after the
// first run kept), then the next kind (which plans again), the whole sequence
// twice: the LL all-reduce (also over three LL rounds: 4 KiB of data per round),
// the ring's all-gather, reduce-scatter, broadcast and reduce, the pairwise
// all-to-all (planned every time: its own piece is copied as it plans), an
// in-place all-reduce, and a send and receive. Each is exact, every time.
std::string loopRank(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  constexpr size_t c = 6, kLarge = 2500;  // 24 B; 10000 B: three LL rounds
  std::vector<int> in(n * kLarge), out(n * kLarge);
  const long long tri = n * (n + 1) / 2;
  struct Kind {
    const char* name;
    size_t count;  // elements checked
    std::function<ncclResult_t()> call;
    std::function<long long(int it, size_t i)> want;  // -1: not checked on this rank
  };
  auto inOf = [](int r, int it, size_t i) { return (r + 1LL) * (it + 1) + static_cast<long long>(i); };
  std::vector<Kind> kinds = {
      {"all-reduce", c, [&] { return ncclAllReduce(in.data(), out.data(), c, ncclInt32, ncclSum, comm, nullptr); },
       [&](int it, size_t i) { return (it + 1) * tri + n * static_cast<long long>(i); }},
      {"larger all-reduce", kLarge,
       [&] { return ncclAllReduce(in.data(), out.data(), kLarge, ncclInt32, ncclSum, comm, nullptr); },
       [&](int it, size_t i) { return (it + 1) * tri + n * static_cast<long long>(i); }},
      {"all-gather", n * c, [&] { return ncclAllGather(in.data(), out.data(), c, ncclInt32, comm, nullptr); },
       [&](int it, size_t i) { return inOf(static_cast<int>(i / c), it, i % c); }},
      {"reduce-scatter", c,
       [&] { return ncclReduceScatter(in.data(), out.data(), c, ncclInt32, ncclSum, comm, nullptr); },
       [&](int it, size_t i) { return (it + 1) * tri + n * static_cast<long long>(rank * c + i); }},
      {"broadcast", c, [&] { return ncclBroadcast(in.data(), out.data(), c, ncclInt32, 1, comm, nullptr); },
       [&](int it, size_t i) { return inOf(1, it, i); }},
      {"reduce", c, [&] { return ncclReduce(in.data(), out.data(), c, ncclInt32, ncclSum, 0, comm, nullptr); },
       [&](int it, size_t i) { return rank == 0 ? (it + 1) * tri + n * static_cast<long long>(i) : -1; }},
      {"all-to-all", n * c, [&] { return ncclAlltoAll(in.data(), out.data(), c, ncclInt32, comm, nullptr); },
       [&](int it, size_t i) { return inOf(static_cast<int>(i / c), it, rank * c + i % c); }},
      {"in-place all-reduce", c,
       [&] { return ncclAllReduce(out.data(), out.data(), c, ncclInt32, ncclSum, comm, nullptr); },
       [&](int it, size_t i) { return (it + 1) * tri + n * static_cast<long long>(i); }},
      {"send and receive", c,
       [&] {
         if (n != 2) return ncclSuccess;
         return rank == 0 ? ncclSend(in.data(), c, ncclInt32, 1, comm, nullptr)
                          : ncclRecv(out.data(), c, ncclInt32, 0, comm, nullptr);
       },
       [&](int it, size_t i) { return n == 2 && rank == 1 ? inOf(0, it, i) : -1; }},
  };
  int it = 0;
  for (int pass = 0; pass < 2; ++pass)
    for (const Kind& k : kinds)
      for (int rep = 0; rep < 4; ++rep, ++it) {
        for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int>(inOf(rank, it, i));
        bool inPlace = std::string(k.name).rfind("in-place", 0) == 0;
        for (size_t i = 0; i < out.size(); ++i) out[i] = inPlace ? in[i] : -1;  // in place: out is the input
        ncclResult_t r = k.call();
        if (r != ncclSuccess) return ncclFailure(k.name, r);
        for (size_t i = 0; i < k.count; ++i) {
          long long want = k.want(it, i);
          if (want >= 0 && out[i] != want) return at(k.name, it, i, out[i], want);
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
// the ones after run kept (the LL all-reduce, the ring's all-gather); a new
// configuration (NCCL_PROTO) plans again, and the Simple one-shot, whose task
// cannot rearm, plans every time.
std::string loggedRank(int rank, int n, const ncclUniqueId& id) {
  ncclComm_t comm;
  RANK_NCCL(ncclCommInitRank(&comm, n, id, rank));
  float in[2] = {1, 2}, out[2];
  for (int i = 0; i < 3; ++i) RANK_NCCL(ncclAllReduce(in, out, 2, ncclFloat, ncclSum, comm, nullptr));
  float all[4];
  for (int i = 0; i < 2; ++i) RANK_NCCL(ncclAllGather(in, all, 2, ncclFloat, comm, nullptr));
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
        size_t fn = l.find("INFO nccl"), at = l.find("[nranks=2]: ");
        if (fn == std::string::npos || l.find(": sendbuff", fn) == std::string::npos) continue;
        ASSERT_NE(at, std::string::npos) << l;
        said += l.substr(fn + 5, l.find(':', fn) - fn - 5) + " " + l.substr(at + 12) + "\n";
      }
    }
    EXPECT_EQ(said,
              "ncclAllReduce OneShot/LL, planned\nncclAllReduce OneShot/LL, kept\nncclAllReduce OneShot/LL, kept\n"
              "ncclAllGather OneShot/LL, planned\nncclAllGather OneShot/LL, kept\n"
              "ncclAllReduce OneShot/Simple, planned\nncclAllReduce OneShot/Simple, planned\n");
  }
  EXPECT_EQ(ranks, 2);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace strata::test
